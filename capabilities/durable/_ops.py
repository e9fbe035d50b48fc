"""Operations on stored data, as functions of a ``Connection`` run in a read: explain a
submission, verify a conversation's invariants, list the overdue, the Unknown and the quarantined.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any, final

import attrs

from effectagent.core import ApprovalRequest, LogEntry, ToolCallSettled, UserInputRecorded

from ..storage._port import NO_LIMIT, Connection
from ._classifier import LedgerFacts, LogFacts, RecoveryDecision, Terminal, classify, settled_status
from ._facts import terminal_of
from ._model import RetryBudget, Submission
from ._reading import PAGE, Undecodable, fold_run, read_page
from ._store import COLUMNS, given_back, submission_of

__all__ = [
    "AuditRow",
    "Explanation",
    "Quarantined",
    "UnknownCall",
    "explain",
    "of_conversation",
    "overdue",
    "quarantined",
    "unknown",
    "verify",
    "waiting",
]


@final
@attrs.frozen
class AuditRow:
    """What recovery, settlement or a command decided about a submission, when, under which
    lane epoch, and the details (identifiers and reasons)."""

    at: float
    kind: str
    epoch: int | None
    detail: dict[str, Any]


@final
@attrs.frozen
class Explanation:
    """:meth:`DurableQueue.explain`'s answer: the ledger row, the last records of its run (its
    ``tail``), the audit rows about it (oldest first) and what recovery would decide now."""

    submission: Submission
    tail: tuple[LogEntry, ...]
    audit: tuple[AuditRow, ...]
    decision: RecoveryDecision


@final
@attrs.frozen
class UnknownCall:
    """A tool call that may or may not have happened: one a resumed run settled Unknown, or
    one under way (prepared, not settled) when its run was aborted."""

    submission_id: str
    conversation_id: str
    tool_call_id: str
    tool_name: str
    at: float


@final
@attrs.frozen
class Quarantined:
    """A record that could not be read (its conversation is set aside), and why."""

    conversation_id: str
    seq: int
    reason: str
    at: float


def of_conversation(conn: Connection, conversation_id: str) -> tuple[Submission, ...]:
    """Every submission of the conversation, in FIFO order."""
    rows = conn.execute(
        f"SELECT {COLUMNS} FROM submissions WHERE conversation_id = ? ORDER BY position",
        (conversation_id,),
    ).fetchall()
    return tuple(submission_of(row) for row in rows)


def _base_seq(conn: Connection, submission_id: str) -> int | None:
    found = conn.execute(
        "SELECT base_seq FROM submissions WHERE submission_id = ?", (submission_id,)
    ).fetchone()
    return None if found is None or found[0] is None else int(found[0])


def explain(
    conn: Connection,
    submission_id: str,
    *,
    tail: int = 20,
    retry: RetryBudget | None = None,
) -> Explanation | None:
    """See :meth:`DurableQueue.explain` (None: no such submission)."""
    row = conn.execute(
        f"SELECT {COLUMNS} FROM submissions WHERE submission_id = ?", (submission_id,)
    ).fetchone()
    if row is None:
        return None
    submission = submission_of(row)
    base_seq = _base_seq(conn, submission_id)
    records: list[LogEntry] = []
    if base_seq is None:
        facts = LogFacts()
    else:
        joining = [
            r[0]
            for r in conn.execute(
                "SELECT submission_id FROM submissions WHERE joined_into = ?", (submission_id,)
            )
        ]
        folder, undecodable = fold_run(
            conn, submission.conversation_id, submission.run_id, base_seq, joining
        )
        facts = folder.facts(undecodable)
        start = max(base_seq, folder.last_seq - tail)
        try:
            records = [
                entry
                for entry in read_page(conn, submission.conversation_id, start, tail)
                if getattr(entry.record, "run_id", submission.run_id) == submission.run_id
            ]
        except Undecodable:
            records = []
    claims = submission.attempts + (1 if submission.status in ("queued", "active") else 0)
    claims = max(claims - given_back(conn, submission_id), 1)  # a worker's stop spent nothing
    ledger = LedgerFacts(
        status=submission.status,
        attempts=claims,
        settlement=submission.settlement,
        reserved=submission.outcome,
    )
    decision = classify(ledger, facts, retry=retry or RetryBudget())
    rows = conn.execute(
        "SELECT at, kind, epoch, detail FROM durable_audit WHERE submission_id = ? ORDER BY id",
        (submission_id,),
    ).fetchall()
    audit = tuple(AuditRow(at, kind, epoch, json.loads(detail)) for at, kind, epoch, detail in rows)
    return Explanation(submission, tuple(records), audit, decision)


def waiting(conn: Connection, submission: Submission) -> tuple[ApprovalRequest, ...]:
    """The recorded requests of the decisions ``submission``'s run waits for."""
    base_seq = _base_seq(conn, submission.submission_id)
    if base_seq is None:
        return ()
    folder, _ = fold_run(conn, submission.conversation_id, submission.run_id, base_seq)
    found = [folder.request(call_id) for call_id in folder.pending_decisions]
    return tuple(request for request in found if request is not None)


def overdue(
    conn: Connection, admitted_before: float, *, limit: int = NO_LIMIT
) -> tuple[Submission, ...]:
    """Submissions admitted before ``admitted_before`` and not settled, oldest first (at most
    ``limit``)."""
    rows = conn.execute(
        f"SELECT {COLUMNS} FROM submissions WHERE admitted_at < ? "
        "AND status NOT IN ('completed', 'failed', 'aborted', 'joined') ORDER BY admitted_at "
        "LIMIT ?",
        (admitted_before, limit),
    ).fetchall()
    return tuple(submission_of(row) for row in rows)


def unknown(conn: Connection) -> tuple[UnknownCall, ...]:
    """Every call settled Unknown, as settlements recorded them (newest first)."""
    rows = conn.execute(
        "SELECT submission_id, conversation_id, at, detail FROM durable_audit "
        "WHERE kind = 'unknown' ORDER BY id DESC"
    ).fetchall()
    out: list[UnknownCall] = []
    for submission_id, conversation_id, at, detail in rows:
        body = json.loads(detail)
        out.append(
            UnknownCall(
                submission_id, conversation_id, str(body["tool_call_id"]), str(body["tool"]), at
            )
        )
    return tuple(out)


def quarantined(conn: Connection) -> tuple[Quarantined, ...]:
    """Every quarantined record."""
    rows = conn.execute(
        "SELECT conversation_id, seq, reason, at FROM quarantine ORDER BY at"
    ).fetchall()
    return tuple(Quarantined(*row) for row in rows)


@final
class _RunTally:
    __slots__ = ("late", "settled", "terminal", "terminal_seq", "terminals")

    def __init__(self) -> None:
        self.terminals = 0
        self.terminal_seq: int | None = None
        self.terminal: Terminal | None = None
        self.late = 0  # records after the terminal one
        self.settled: Counter[str] = Counter()


def verify(conn: Connection, conversation_id: str) -> tuple[str, ...]:
    """The durable invariants, checked on the conversation's stored data; each violation is a
    sentence. They are:

    1. FIFO positions are 1, 2, … without gaps or repeats;
    2. at most one submission is active or suspended, and it is the FIFO head (the first not
       settled); nothing behind the head is active, suspended or dead;
    3. the log's sequence numbers have no gaps and every record decodes;
    4. a run has at most one terminal record, nothing of it after that, and each of its tool
       calls settled at most once; an input is recorded at most once;
    5. a settled submission whose run started has its run's terminal record, of the kind it
       was settled as, at the sequence number the ledger holds (one settled failed or aborted
       before its run started has none; a completed one always has one);
    6. a submission not settled has no terminal record in the log (it would be settled);
    7. a joined submission's input is recorded exactly once, and it names the run's submission.
    """
    problems: list[str] = []
    submissions = of_conversation(conn, conversation_id)
    positions = [s.position for s in submissions]
    if positions != list(range(1, len(positions) + 1)):
        problems.append(f"the FIFO positions are {positions}, not 1 to {len(positions)}")
    unsettled = [s for s in submissions if s.settlement != "final"]
    busy = [s for s in unsettled if s.status in ("active", "suspended")]
    if len(busy) > 1:
        ids = ", ".join(s.submission_id for s in busy)
        problems.append(f"{len(busy)} submissions are active or suspended at once: {ids}")
    for s in unsettled[1:]:
        if s.status in ("active", "suspended", "dead"):
            problems.append(
                f"submission {s.submission_id} is {s.status} behind the FIFO head "
                f"{unsettled[0].submission_id}"
            )
    runs: dict[str, _RunTally] = {}
    inputs: Counter[str] = Counter()
    expected = 1
    after = 0
    while True:
        try:
            page = read_page(conn, conversation_id, after)
        except Undecodable as exc:
            problems.append(f"record {exc.seq} does not decode: {exc.reason}")
            break
        for entry in page:
            if entry.seq != expected:
                problems.append(f"the log jumps from {expected - 1} to {entry.seq}")
            expected = entry.seq + 1
            record: Any = entry.record
            run_id = getattr(record, "run_id", None)
            if run_id is None:
                continue
            tally = runs.setdefault(run_id, _RunTally())
            if tally.terminals:
                tally.late += 1
            kind = terminal_of(record)
            if kind is not None:
                tally.terminals += 1
                if tally.terminal is None:
                    tally.terminal, tally.terminal_seq = kind, entry.seq
            if type(record) is ToolCallSettled:
                tally.settled[record.tool_call_id] += 1
            if type(record) is UserInputRecorded:
                inputs[record.input_id] += 1
        if len(page) < PAGE:
            break
        after = page[-1].seq
    for run_id, tally in runs.items():
        if tally.terminals > 1:
            problems.append(f"run {run_id} has {tally.terminals} terminal records")
        if tally.late:
            problems.append(f"run {run_id} has {tally.late} record(s) after its terminal record")
        twice = sorted(c for c, n in tally.settled.items() if n > 1)
        if twice:
            problems.append(f"run {run_id} settled tool call(s) {', '.join(twice)} more than once")
    twice_inputs = sorted(i for i, n in inputs.items() if n > 1)
    if twice_inputs:
        problems.append(f"input(s) {', '.join(twice_inputs)} recorded more than once")
    for s in submissions:
        found = runs.get(s.run_id)
        if s.settlement != "final":
            if found is not None and found.terminal is not None:
                problems.append(
                    f"submission {s.submission_id} is {s.status} but its run's terminal record "
                    f"is at {found.terminal_seq}"
                )
            continue
        if s.status == "joined":
            count = inputs.get(s.submission_id, 0)
            if count != 1:
                problems.append(
                    f"joined submission {s.submission_id} has its input recorded {count} times"
                )
            if s.joined_into is None:
                problems.append(f"joined submission {s.submission_id} names no run it joined")
            continue
        if found is None or found.terminal is None:
            if s.status == "completed" or found is not None:
                problems.append(
                    f"{s.status} submission {s.submission_id} has no terminal record in the log"
                )
            continue
        if settled_status(found.terminal) != s.status:
            problems.append(
                f"submission {s.submission_id} is {s.status} but its run's terminal record says "
                f"{found.terminal}"
            )
        if s.seq != found.terminal_seq:
            problems.append(
                f"submission {s.submission_id} points at record {s.seq}, its run's terminal "
                f"record is at {found.terminal_seq}"
            )
    return tuple(problems)
