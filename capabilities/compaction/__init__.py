"""Compaction (spec §6, RUN-026, CAP-007): the engine's ``CompactorService``, filled by a planner
that prunes old tool results and then summarizes the oldest prefix with one metered model call,
never separating a tool call from its result and keeping the newest ``keep_recent_tokens``
verbatim. Compaction appends records; the canonical log is never edited.

Host-supplied summaries are artifacts bound by a digest to the exact range they cover, verified
against the log before use; operators export and rebuild compactions from the log. A real
tokenizer plugs in as the engine's token counter (:class:`TokenizerCounter`).
"""

from ._artifacts import DIGEST_VERSION as DIGEST_VERSION
from ._artifacts import ArtifactRefused as ArtifactRefused
from ._artifacts import CompactionResult as CompactionResult
from ._artifacts import RetainedFact as RetainedFact
from ._artifacts import compaction_artifacts as compaction_artifacts
from ._artifacts import rebuild_compactions as rebuild_compactions
from ._artifacts import source_digest as source_digest
from ._artifacts import summary_text as summary_text
from ._artifacts import verify_artifact as verify_artifact
from ._compactor import COMPACTOR_VERSION as COMPACTOR_VERSION
from ._compactor import CompactionHost as CompactionHost
from ._compactor import HostRequest as HostRequest
from ._compactor import LogCompactor as LogCompactor
from ._compactor import calibrated_limit as calibrated_limit
from ._planner import ELIDED as ELIDED
from ._planner import Budget as Budget
from ._planner import Plan as Plan
from ._planner import fit_summary as fit_summary
from ._planner import plan_compaction as plan_compaction
from ._planner import summary_message as summary_message
from ._planner import summary_tokens as summary_tokens
from ._tokens import TokenizerCounter as TokenizerCounter
from ._transcript import SUMMARY_INSTRUCTIONS as SUMMARY_INSTRUCTIONS
from ._transcript import transcript as transcript
from ._view import Count as Count
from ._view import LogView as LogView
from ._view import Unit as Unit

__all__ = [
    "COMPACTOR_VERSION",
    "DIGEST_VERSION",
    "ELIDED",
    "SUMMARY_INSTRUCTIONS",
    "ArtifactRefused",
    "Budget",
    "CompactionHost",
    "CompactionResult",
    "Count",
    "HostRequest",
    "LogCompactor",
    "LogView",
    "Plan",
    "RetainedFact",
    "TokenizerCounter",
    "Unit",
    "calibrated_limit",
    "compaction_artifacts",
    "fit_summary",
    "plan_compaction",
    "rebuild_compactions",
    "source_digest",
    "summary_message",
    "summary_text",
    "summary_tokens",
    "transcript",
    "verify_artifact",
]
