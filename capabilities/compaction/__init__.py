"""Compaction (RUN-026, CAP-007): the engine's ``CompactorService``, filled by a planner
that prunes old tool results and then summarizes the oldest prefix with one metered model call,
never separating a tool call from its result and keeping the newest ``keep_recent_tokens``
verbatim. Compaction appends records; the canonical log is never edited.

Host-supplied summaries (a :class:`CompactionHost` answering a :class:`HostRequest` with a
:class:`CompactionResult`) are artifacts bound by a digest (:func:`source_digest`) to the exact
range they cover, verified against the log before use (:func:`verify_artifact`,
:class:`ArtifactRefused`); operators export and rebuild compactions from the log
(:func:`compaction_artifacts`, :func:`rebuild_compactions`). A real tokenizer plugs in as the
engine's token counter (:class:`TokenizerCounter`).
"""

from ._artifacts import ArtifactRefused as ArtifactRefused
from ._artifacts import CompactionResult as CompactionResult
from ._artifacts import RetainedFact as RetainedFact
from ._artifacts import compaction_artifacts as compaction_artifacts
from ._artifacts import rebuild_compactions as rebuild_compactions
from ._artifacts import source_digest as source_digest
from ._artifacts import verify_artifact as verify_artifact
from ._compactor import CompactionHost as CompactionHost
from ._compactor import HostRequest as HostRequest
from ._compactor import LogCompactor as LogCompactor
from ._tokens import TokenizerCounter as TokenizerCounter

__all__ = [
    "ArtifactRefused",
    "CompactionHost",
    "CompactionResult",
    "HostRequest",
    "LogCompactor",
    "RetainedFact",
    "TokenizerCounter",
    "compaction_artifacts",
    "rebuild_compactions",
    "source_digest",
    "verify_artifact",
]
