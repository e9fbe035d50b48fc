"""The durable runtime's values: receipts, ledger rows, settlements, options — and its errors.

Pure: nothing here does I/O. Every error is a :class:`DurableError` whose ``str()`` is a sentence
naming identifiers only (a submission's input, a tool's arguments or a run's answer never appear
in one: they may hold what users wrote).
"""

from __future__ import annotations

import hashlib
import json
import math
from typing import Final, Literal

import attrs

from effectagent.effect import TaggedError

__all__ = [
    "MAX_ACTIVE",
    "MAX_MESSAGE_BYTES",
    "MAX_TAG_CHARS",
    "TERMINAL_STATUSES",
    "AgentNotFound",
    "Diagnostic",
    "DurableError",
    "IdempotencyConflict",
    "Mode",
    "NotDeadLettered",
    "NoPendingApproval",
    "Receipt",
    "RetryBudget",
    "SettledStatus",
    "Submission",
    "SubmissionNotFound",
    "SubmissionStatus",
    "WorkerOptions",
    "bounded_diagnostic",
    "payload_digest",
]

#: How a submission enters its conversation: its own run in FIFO order (``"queue"``), or — when
#: a run of the conversation is going when its turn to wait comes — absorbed into that run at
#: its next turn, as steering (``"join"``).
Mode = Literal["queue", "join"]

#: Where a submission is in the ledger.
#:
#: * ``queued`` — waiting for its lane (never run, or to be resumed after a crash or a decision);
#: * ``active`` — a worker holds its conversation's lane and runs it;
#: * ``suspended`` — its run waits for approval decisions; it holds no lane and no permit;
#: * ``joining`` — handed to the run going in its conversation, not yet recorded there;
#: * ``dead`` — its retry budget ran out (an operator may :meth:`retry` or abort it);
#: * ``completed`` / ``failed`` / ``aborted`` / ``joined`` — settled, for good.
SubmissionStatus = Literal[
    "queued",
    "active",
    "suspended",
    "joining",
    "dead",
    "completed",
    "failed",
    "aborted",
    "joined",
]

#: The statuses a settlement ends in.
SettledStatus = Literal["completed", "failed", "aborted", "joined"]

#: Settled for good: nothing changes a submission in one of these any more.
TERMINAL_STATUSES: Final[frozenset[str]] = frozenset({"completed", "failed", "aborted", "joined"})

#: The most runs a worker may have at once (``WorkerOptions.max_active``): what a claim's limit
#: is in SQL, on either backend, must fit a 32-bit integer.
MAX_ACTIVE: Final = 2**31 - 1

#: A failed settlement's diagnostic: its tag at most this many characters …
MAX_TAG_CHARS: Final = 256
#: … and its message at most this many bytes of UTF-8.
MAX_MESSAGE_BYTES: Final = 16 * 1024


def payload_digest(agent: str, text: str, mode: Mode, parts: str | None = None) -> str:
    """The digest an idempotency key is bound to: SHA-256 of the agent's name, the input and the
    mode, as canonical JSON — and, for input with media, its ``parts`` (the order of its text
    and media parts, each media part by its SHA-256 digest). Pure."""
    payload = [agent, text, mode] if parts is None else [agent, text, mode, parts]
    body = json.dumps(payload, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(body.encode("utf-8")).hexdigest()


def _truncate_utf8(text: str, limit: int) -> str:
    data = text.encode("utf-8")
    if len(data) <= limit:
        return text
    marker = " …[truncated]"
    room = limit - len(marker.encode("utf-8"))
    return data[:room].decode("utf-8", errors="ignore") + marker


@attrs.frozen
class Diagnostic:
    """Why a submission failed (or was aborted): a ``tag`` (≤ :data:`MAX_TAG_CHARS` characters)
    and a ``message`` (≤ :data:`MAX_MESSAGE_BYTES` bytes of UTF-8). Made by
    :func:`bounded_diagnostic`, which cuts longer values and says so."""

    tag: str
    message: str


def bounded_diagnostic(tag: str, message: str) -> Diagnostic:
    """A :class:`Diagnostic` within its bounds: a longer tag is cut and marked ``…``, a longer
    message cut and marked ``…[truncated]``. Pure."""
    if len(tag) > MAX_TAG_CHARS:
        tag = tag[: MAX_TAG_CHARS - 1] + "…"
    return Diagnostic(tag, _truncate_utf8(message, MAX_MESSAGE_BYTES))


@attrs.frozen
class Receipt:
    """Proof of durable admission, returned only once the submission is committed: its ID, its
    conversation, its place in that conversation's FIFO (1, 2, …) and when it was admitted
    (``time.time()`` seconds). Submitting again with the same key and payload gives this same
    receipt."""

    submission_id: str
    conversation_id: str
    position: int
    admitted_at: float
    mode: Mode = "queue"


@attrs.frozen
class Submission:
    """One ledger row, as :meth:`DurableQueue.status` reads it.

    ``run_id`` is the run that carries it (fixed at admission, the same across retries);
    ``attempts`` how many times a worker claimed it; ``next_attempt_at`` the earliest time it
    may be claimed again; ``settlement`` None, ``"reserved"`` (an outcome chosen, its record being
    written) or ``"final"``, and ``outcome`` the status reserved or settled. ``diagnostic`` says why a
    failed or aborted one ended, ``seq`` is
    its terminal record's sequence number in the conversation, ``joined_into`` the submission a
    joined one was absorbed by.
    """

    submission_id: str
    principal: str
    conversation_id: str
    idempotency_key: str
    agent: str
    mode: Mode
    position: int
    status: SubmissionStatus
    run_id: str
    attempts: int
    next_attempt_at: float
    admitted_at: float
    started_at: float | None = None
    settled_at: float | None = None
    settlement: Literal["reserved", "final"] | None = None
    outcome: SettledStatus | None = None
    diagnostic: Diagnostic | None = None
    seq: int | None = None
    joined_into: str | None = None

    @property
    def settled(self) -> bool:
        """Whether its settlement is final."""
        return self.settlement == "final"


def _real(value: object) -> float:
    """``value`` as a float if it is a real number (an int or a float — not a bool, which is
    no count of seconds); NaN otherwise, which every range check refuses."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return math.nan
    return float(value)


@attrs.frozen
class RetryBudget:
    """How often a submission is tried, and how long it waits between tries.

    A claim is an attempt; once ``max_attempts`` claims ended without a settlement (the worker
    died, lost its lane, the store failed a read or write of its run, or its run could not be
    carried on), the submission is dead-lettered. A claim that took the run to a suspension (it
    waits for approval decisions) is not one of them, nor one a worker gave back as it stopped
    (cancelled: SIGTERM, a drain): a run may ask for approval, and outlive restarts of its
    workers, any number of times.
    Before attempt ``n + 1`` it waits ``min(cap, base * 2**(n-1))`` seconds, of which a random
    fraction ``jitter`` is taken off (full jitter with ``jitter=1``), so workers that lost lanes
    at once do not come back at once.
    """

    max_attempts: int = 5
    base: float = 1.0
    cap: float = 300.0
    jitter: float = 0.5

    def __attrs_post_init__(self) -> None:
        if type(self.max_attempts) is not int or self.max_attempts < 1:
            raise ValueError("max_attempts must be a positive int")
        for name in ("base", "cap"):
            value = _real(getattr(self, name))
            if not math.isfinite(value) or value < 0:
                raise ValueError(f"{name} must be a finite number of seconds, at least 0")
        if not 0 <= _real(self.jitter) <= 1:
            raise ValueError("jitter must be a number between 0 and 1")

    def delay(self, attempts: int, draw: float) -> float:
        """Seconds to wait before the next claim after ``attempts`` claims, for a uniform
        ``draw`` in [0, 1). Pure: the caller supplies the randomness. ``attempts`` that is not
        an int is a ``TypeError``, a ``draw`` out of [0, 1] a ``ValueError``."""
        if isinstance(attempts, bool) or not isinstance(attempts, int):
            raise TypeError(f"attempts must be an int, got {type(attempts).__name__}")
        if not 0 <= _real(draw) <= 1:
            raise ValueError("draw must be a number between 0 and 1")
        if attempts <= 0:
            return 0.0
        exponent = min(attempts - 1, 62)
        full = min(self.cap, self.base * float(2**exponent))
        return full * (1.0 - self.jitter * draw)

    def exhausted(self, attempts: int) -> bool:
        """Whether ``attempts`` claims used the whole budget."""
        return attempts >= self.max_attempts


#: The shortest lease a worker takes (seconds).
MIN_LEASE: Final = 1.0
#: The shortest poll interval a worker takes (seconds).
MIN_POLL_INTERVAL: Final = 0.01


@attrs.frozen
class WorkerOptions:
    """How a worker works.

    * ``max_active`` — runs at once (the permit pool; one per conversation at most), at most
      :data:`MAX_ACTIVE`;
    * ``lease`` — seconds a claim is good for (at least 1); renewed every third
      of it. A worker that stops renewing (killed, hung) loses its lanes when it expires, and
      another takes them over;
    * ``poll_interval`` — how often it looks for work (at least every 0.01 s), expired lanes, aborts and input to join.
      Besides, it looks at once when its database hears of work (``Database.listen``): on
      PostgreSQL a submission, decision, abort or lane let go in any process; on SQLite, which
      has no wake-up across processes, those made through the same opened database (another
      process's reach it within this interval). The poll finds what a lost wake-up announced;
    * ``retry`` — the :class:`RetryBudget`;
    * ``overdue_after`` — a claimed submission not settled this many seconds after it was
      admitted is logged as overdue (once per worker) when recovery sees it.
    """

    max_active: int = 8
    lease: float = 30.0
    poll_interval: float = 1.0
    retry: RetryBudget = RetryBudget()
    overdue_after: float = 3600.0

    def __attrs_post_init__(self) -> None:
        if type(self.max_active) is not int or not 1 <= self.max_active <= MAX_ACTIVE:
            raise ValueError(f"max_active must be a positive int, at most {MAX_ACTIVE}")
        for name in ("lease", "poll_interval", "overdue_after"):
            value = _real(getattr(self, name))
            if not math.isfinite(value) or value <= 0:
                raise ValueError(f"{name} must be a positive number of seconds")
        # Shorter ones only spin: a lease renewed faster than a database answers lapses between
        # renewals (and its lanes are taken over while they run); a poll that short busy-waits.
        if self.lease < MIN_LEASE:
            raise ValueError(f"lease must be at least {MIN_LEASE} s, got {self.lease!r}")
        if self.poll_interval < MIN_POLL_INTERVAL:
            raise ValueError(
                f"poll_interval must be at least {MIN_POLL_INTERVAL} s, got {self.poll_interval!r}"
            )
        if not isinstance(self.retry, RetryBudget):
            raise TypeError(f"retry must be a RetryBudget, got {type(self.retry).__name__}")


# ---- errors ---------------------------------------------------------------------------------------


@attrs.frozen
class DurableError(TaggedError):
    """Base of the durable runtime's errors."""


@attrs.frozen
class IdempotencyConflict(DurableError):
    """The idempotency key was used before, by the same principal in the same conversation, for
    another payload (agent, input or mode). Nothing was admitted."""

    principal: str
    conversation_id: str
    idempotency_key: str
    submission_id: str

    def __str__(self) -> str:
        return (
            f"the idempotency key {self.idempotency_key!r} of {self.principal!r} in conversation "
            f"{self.conversation_id!r} was used for another payload (submission "
            f"{self.submission_id}); nothing was admitted — use a new key for new work"
        )


@attrs.frozen
class ConversationOwned(DurableError):
    """The conversation is another principal's (its first submission's), and the submission said
    whose it must be (``DurableQueue.submit(owned_by=...)``). Nothing was admitted. The message
    names neither principal."""

    conversation_id: str

    def __str__(self) -> str:
        return f"conversation {self.conversation_id!r} is not the submitter's; nothing was admitted"


@attrs.frozen
class AgentNotFound(DurableError):
    """The submission names an agent this durable runtime's registry does not have. Nothing was
    admitted (at run time, the submission settles failed with this diagnostic)."""

    agent: str
    known: tuple[str, ...]

    def __str__(self) -> str:
        names = ", ".join(repr(name) for name in self.known) or "none"
        return f"no agent is named {self.agent!r} here (the agents known: {names})"


@attrs.frozen
class SubmissionNotFound(DurableError):
    """No submission has this ID."""

    submission_id: str

    def __str__(self) -> str:
        return f"there is no submission {self.submission_id!r}"


@attrs.frozen
class NotDeadLettered(DurableError):
    """:meth:`retry` was asked for a submission that is not dead-lettered."""

    submission_id: str
    status: str

    def __str__(self) -> str:
        return (
            f"submission {self.submission_id} is {self.status}, not dead-lettered; only a dead "
            "submission can be retried"
        )


@attrs.frozen
class NoPendingApproval(DurableError):
    """A decision was given for a tool call that does not wait for one: the submission is not
    suspended, or its suspended batch has no such call, or the call was decided already."""

    submission_id: str
    tool_call_id: str
    reason: str

    def __str__(self) -> str:
        return (
            f"tool call {self.tool_call_id!r} of submission {self.submission_id} waits for no "
            f"decision: {self.reason}"
        )
