"""Durable runs on SQLite or PostgreSQL: accepted work is finished exactly once in the
record, across crashes and processes.

**The promise.** Once a submission is durably accepted, exactly one terminal outcome —
completed, failed or aborted — is eventually *recorded* for it. Recording is exactly-once;
execution is at-least-once: a model call or a tool call may happen again after a crash, and where
a tool may or may not have run, its outcome says so (``ToolUnknownOutcome``) — never an invented
failure. ("Eventually" assumes a worker runs: a submission whose retry budget is spent waits,
dead-lettered, for an operator's :meth:`DurableQueue.retry` or abort.)

The parts, on one SQLite database (``capabilities.storage``; any number of processes):

* :class:`DurableQueue` — from any process: ``submit`` (a :class:`Receipt` once committed;
  idempotency keys scoped to principal and conversation), ``status``/``submissions``/``answer``,
  ``abort``, ``decide`` (approval decisions), and the operations ``explain``, ``verify``,
  ``retry``, ``wake``, ``rebuild_ledger``, ``overdue``, ``unknown``, ``quarantined``.
* :class:`DurableWorker` — runs submissions: claims conversations' lanes (FIFO per
  conversation, one run at a time; different conversations at once, up to ``max_active``), runs
  or resumes each with a Conversation Log fenced by its lane's epoch, settles it from the log,
  renews its leases, recovers what crashed workers left (the classifier's decision, audited),
  hands input of mode ``"join"`` to the run going.
* :class:`DurableApproval` — the worker's approval gateway: a decision not made at once
  suspends the run durably (no lane, no permit, no process waiting).
* the crash-point classifier (:func:`classify`, :data:`CRASH_POINTS`) — pure: what recovery does
  after a crash at each durable boundary; :func:`failpoint` — the kill tests' crash points
  (``EFFECTAGENT_FAILPOINT``).

A submission's states (:data:`SubmissionStatus`): queued → active → completed / failed /
aborted, with suspended (waiting for decisions), joining → joined (absorbed by the run going)
and dead (retry budget spent) on the way.
"""

from ._approval import DurableApproval as DurableApproval
from ._classifier import CRASH_POINTS as CRASH_POINTS
from ._classifier import CrashPoint as CrashPoint
from ._classifier import LedgerFacts as LedgerFacts
from ._classifier import LogFacts as LogFacts
from ._classifier import RecoveryDecision as RecoveryDecision
from ._classifier import classify as classify
from ._failpoints import FAILPOINT_ENV as FAILPOINT_ENV
from ._failpoints import failpoint as failpoint
from ._model import AgentNotFound as AgentNotFound
from ._model import ConversationOwned as ConversationOwned
from ._model import Diagnostic as Diagnostic
from ._model import DurableError as DurableError
from ._model import IdempotencyConflict as IdempotencyConflict
from ._model import Mode as Mode
from ._model import NoPendingApproval as NoPendingApproval
from ._model import NotDeadLettered as NotDeadLettered
from ._model import Receipt as Receipt
from ._model import RetryBudget as RetryBudget
from ._model import Submission as Submission
from ._model import SubmissionNotFound as SubmissionNotFound
from ._model import SubmissionStatus as SubmissionStatus
from ._model import WorkerOptions as WorkerOptions
from ._ops import AuditRow as AuditRow
from ._ops import Explanation as Explanation
from ._ops import Quarantined as Quarantined
from ._ops import UnknownCall as UnknownCall
from ._queue import DurableQueue as DurableQueue
from ._steps import SqliteStepStore as SqliteStepStore
from ._worker import DurableWorker as DurableWorker

__all__ = [
    "CRASH_POINTS",
    "FAILPOINT_ENV",
    "AgentNotFound",
    "AuditRow",
    "CrashPoint",
    "RecoveryDecision",
    "Diagnostic",
    "DurableApproval",
    "DurableError",
    "DurableQueue",
    "DurableWorker",
    "Explanation",
    "ConversationOwned",
    "IdempotencyConflict",
    "LedgerFacts",
    "LogFacts",
    "Mode",
    "NoPendingApproval",
    "NotDeadLettered",
    "Quarantined",
    "Receipt",
    "RetryBudget",
    "SqliteStepStore",
    "Submission",
    "SubmissionNotFound",
    "SubmissionStatus",
    "UnknownCall",
    "WorkerOptions",
    "classify",
    "failpoint",
]
