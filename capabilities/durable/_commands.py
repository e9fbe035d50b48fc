"""Commands any process may give, each one write transaction: abort, decide, retry, wake, and
rebuilding the ledger from the log. Functions of a ``Connection`` (see ``_store``).

A command that writes to a conversation's log (an abort's terminal record, a decision) first
*takes* the conversation's lane (``_store.take``: epoch + 1, left free): whichever worker held it
is fenced out in the same transaction, so nothing it writes afterwards lands, and its renewal
finds the lane gone (it then stops the run without settling — the command settled it, or a
worker will carry it on).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from effectagent.core import ApprovalDecision, Record, RunFailedRecord, ToolApprovalDecided

from ..storage._port import Connection
from ._classifier import settled_status
from ._facts import ABORTED_REASON
from ._model import (
    NoPendingApproval,
    NotDeadLettered,
    Submission,
    SubmissionNotFound,
    bounded_diagnostic,
)
from ._reading import fold_run
from ._store import (
    audit,
    finalize,
    list_unknown,
    mark,
    mark_suspended,
    outcome_json,
    read_submission,
    release,
    reserve,
    take,
)

__all__ = ["AppendWork", "abort", "decide", "rebuild", "retry", "wake"]

#: Makes the write of an append to run inside the caller's transaction, which holds the
#: conversation's lane (``_store.take``): (conversation ID, records) -> a function of the
#: connection that appends them and returns the last sequence number.
AppendWork = Callable[[str, Sequence[Record]], Callable[[Connection], int]]


def _require(conn: Connection, submission_id: str) -> Submission:
    found = read_submission(conn, submission_id)
    if found is None:
        raise SubmissionNotFound(submission_id)
    return found


def _base_seq(conn: Connection, submission_id: str) -> int | None:
    found = conn.execute(
        "SELECT base_seq FROM submissions WHERE submission_id = ?", (submission_id,)
    ).fetchone()
    return None if found is None or found[0] is None else int(found[0])


def _joining(conn: Connection, submission_id: str) -> list[str]:
    return [
        row[0]
        for row in conn.execute(
            "SELECT submission_id FROM submissions WHERE joined_into = ? AND status = 'joining'",
            (submission_id,),
        )
    ]


def abort(
    conn: Connection,
    append_work: AppendWork,
    *,
    abort_id: str,
    submission_id: str,
    author: str,
    reason: str,
    now: float,
) -> Submission:
    """Abort ``submission_id`` (idempotent by ``abort_id``; an ``abort_id`` used for another
    submission raises ``ValueError``, nothing written). A settled submission is left as it
    is. One whose run is going (or went) has its lane taken and an aborted ``RunFailedRecord``
    appended for its run — unless the log already holds its run's terminal record, which then
    decides its settlement — and settles aborted; one that never ran settles aborted at once. A
    joining one is aborted when the run it was handed to settles, unless that run recorded its
    input first. Returns the ledger row after."""
    submission = _require(conn, submission_id)
    conn.execute(
        "INSERT INTO aborts (abort_id, submission_id, author, reason, at) VALUES (?, ?, ?, ?, ?) "
        "ON CONFLICT (abort_id) DO NOTHING",
        (abort_id, submission_id, author, reason, now),
    )
    target = conn.execute(
        "SELECT submission_id FROM aborts WHERE abort_id = ?", (abort_id,)
    ).fetchone()
    if target is not None and target[0] != submission_id:
        # an abort ID names one command: given again for another submission, it is a mistake
        # (a retried command would name the same one), and nothing is aborted
        raise ValueError(
            f"the abort ID {abort_id!r} was used to abort submission {target[0]}, not "
            f"{submission_id}; nothing was aborted — use a new abort ID"
        )
    if submission.settlement == "final" or submission.status == "joining":
        return submission
    conversation_id = submission.conversation_id
    diagnostic = bounded_diagnostic("Aborted", f"aborted by {author}: {reason}")
    base_seq = _base_seq(conn, submission_id)
    if base_seq is None:  # never claimed: nothing of it is in the log, and no lane is touched
        finalize(conn, None, submission_id, "aborted", seq=None, diagnostic=diagnostic, now=now)
        audit(
            conn,
            submission_id=submission_id,
            conversation_id=conversation_id,
            epoch=None,
            now=now,
            kind="abort",
            detail={"abort_id": abort_id, "settled": "aborted", "recorded": False},
        )
        return _require(conn, submission_id)
    # Claimed once, so its conversation's FIFO head: whoever holds the lane runs it.
    lane = take(conn, conversation_id, abort_id, now)
    epoch = lane.epoch
    seq: int | None = None
    folder, _ = fold_run(
        conn, conversation_id, submission.run_id, base_seq, _joining(conn, submission_id)
    )
    absorbed = folder.absorbed
    if folder.terminal_seq is not None:
        facts = folder.facts()
        assert facts.terminal is not None
        status = settled_status(facts.terminal)
        finalize(
            conn,
            None,
            submission_id,
            status,
            seq=folder.terminal_seq,
            diagnostic=None if status == "completed" else diagnostic,
            now=now,
            absorbed=absorbed,
            unknown=folder.unknown_calls,
            conversation_id=conversation_id,
            epoch=epoch,
        )
        audit(
            conn,
            submission_id=submission_id,
            conversation_id=conversation_id,
            epoch=epoch,
            now=now,
            kind="abort",
            detail={"abort_id": abort_id, "settled": status, "why": "its run had ended"},
        )
        release(conn, lane)
        return _require(conn, submission_id)
    unknown = folder.unknown_calls
    facts = folder.facts()
    if facts.records:
        # The calls under way (prepared, not settled) when it is aborted: no settlement of
        # theirs will be recorded, and whether they happened nothing can tell any more.
        unknown = (*unknown, *facts.prepared)
        record = RunFailedRecord(
            conversation_id=conversation_id,
            run_id=submission.run_id,
            error=None,
            reason=ABORTED_REASON,
            at=now,
        )
        reserve(conn, None, submission_id, "aborted", diagnostic)
        seq = append_work(conversation_id, [record])(conn)
    finalize(
        conn,
        None,
        submission_id,
        "aborted",
        seq=seq,
        diagnostic=diagnostic,
        now=now,
        absorbed=absorbed,
        # What its run may or may not have done is listed for a person, however it settled.
        unknown=unknown,
        conversation_id=conversation_id,
        epoch=epoch,
    )
    audit(
        conn,
        submission_id=submission_id,
        conversation_id=conversation_id,
        epoch=epoch,
        now=now,
        kind="abort",
        detail={"abort_id": abort_id, "settled": "aborted", "recorded": seq is not None},
    )
    release(conn, lane)
    return _require(conn, submission_id)


def decide(
    conn: Connection,
    append_work: AppendWork,
    *,
    submission_id: str,
    tool_call_id: str,
    approved: bool,
    author: str,
    reason: str,
    now: float,
    attempt_id: str,
) -> tuple[Submission, tuple[str, ...]]:
    """Record a decision for one call of a suspended run (a ``ToolApprovalDecided`` bound to
    the call's recorded request) and, once every call of the suspension has one, put the
    submission back in its lane's queue; return the ledger row after and the calls still
    waiting. A submission still ``active`` whose run's log shows it suspended (its worker had
    not marked it yet, or died first) is marked suspended here, audited as its worker would
    have: the decision fences that worker out. Raises :class:`NoPendingApproval` when the call
    waits for no decision."""
    submission = _require(conn, submission_id)
    if submission.status not in ("suspended", "active") or submission.settlement is not None:
        raise NoPendingApproval(
            submission_id, tool_call_id, f"the submission is {submission.status}"
        )
    base_seq = _base_seq(conn, submission_id)
    if base_seq is None:
        raise NoPendingApproval(submission_id, tool_call_id, "its run has not started")
    conversation_id = submission.conversation_id
    folder, undecodable = fold_run(conn, conversation_id, submission.run_id, base_seq)
    if undecodable is not None:
        raise NoPendingApproval(
            submission_id, tool_call_id, f"record {undecodable} of its conversation is unreadable"
        )
    pending = folder.pending_decisions
    if not folder.facts().suspended:
        raise NoPendingApproval(submission_id, tool_call_id, "its run is not waiting for decisions")
    if tool_call_id not in pending:
        raise NoPendingApproval(
            submission_id, tool_call_id, "its suspended batch has no such call left to decide"
        )
    request = folder.request(tool_call_id)
    if request is None:
        raise NoPendingApproval(submission_id, tool_call_id, "no approval request was recorded")
    lane = take(conn, conversation_id, attempt_id, now)
    epoch = lane.epoch
    status = submission.status
    if status == "active" and mark_suspended(conn, None, submission, epoch, now):
        # Its run suspended (its requests wait in the log), and the claim that took it there
        # had not marked it yet (or died first): taking the lane fences that claim out, so it
        # never will. Marked here as it would have — a suspension spends nothing of the retry
        # budget (no record in the log says it suspended).
        status = "suspended"
    decision = ApprovalDecision.for_request(request, approved, reason, decided_by=author)
    record = ToolApprovalDecided(
        conversation_id=conversation_id,
        run_id=submission.run_id,
        tool_call_id=tool_call_id,
        decision=decision,
        at=now,
    )
    append_work(conversation_id, [record])(conn)
    left = tuple(c for c in pending if c != tool_call_id)
    if not left and status == "suspended":
        mark(conn, None, submission_id, "decided", "queued", next_attempt_at=now)
    audit(
        conn,
        submission_id=submission_id,
        conversation_id=conversation_id,
        epoch=epoch,
        now=now,
        kind="decision",
        detail={"tool_call_id": tool_call_id, "approved": approved, "waiting": len(left)},
    )
    release(conn, lane)
    return _require(conn, submission_id), left


def retry(conn: Connection, submission_id: str, *, now: float) -> Submission:
    """Give a dead-lettered submission a new retry budget: it waits for a worker again, at
    once. Raises :class:`NotDeadLettered` for one that is not dead."""
    submission = _require(conn, submission_id)
    if submission.status != "dead":
        raise NotDeadLettered(submission_id, submission.status)
    conn.execute(
        "UPDATE submissions SET status = 'queued', attempts = 0, next_attempt_at = ? "
        "WHERE submission_id = ? AND status = 'dead'",
        (now, submission_id),
    )
    audit(
        conn,
        submission_id=submission_id,
        conversation_id=submission.conversation_id,
        epoch=None,
        now=now,
        kind="retry",
        detail={"attempts": submission.attempts},
    )
    return _require(conn, submission_id)


def wake(conn: Connection, conversation_id: str, *, now: float) -> int:
    """Let the conversation's waiting submissions be claimed now: their backoff is cut short,
    and the conversation is taken out of quarantine (an unreadable record there quarantines it
    again at the next claim). Returns how many submissions were waiting out a backoff."""
    conn.execute("DELETE FROM quarantine WHERE conversation_id = ?", (conversation_id,))
    return conn.execute(
        "UPDATE submissions SET next_attempt_at = ? WHERE conversation_id = ? "
        "AND status IN ('queued', 'active') AND next_attempt_at > ?",
        (now, conversation_id, now),
    ).rowcount


def rebuild(conn: Connection, conversation_id: str, *, now: float) -> list[dict[str, Any]]:
    """Make the conversation's ledger agree with its log, the authority: each submission whose
    run has a terminal record is settled as that record says (at its sequence number), and one
    whose input another run recorded is joined. Returns what changed (submission, from, to)."""
    rows = conn.execute(
        "SELECT submission_id, base_seq FROM submissions WHERE conversation_id = ? "
        "ORDER BY position",
        (conversation_id,),
    ).fetchall()
    changes: list[dict[str, Any]] = []
    recorded_inputs: set[str] = set()
    for submission_id, base_seq in rows:
        submission = _require(conn, submission_id)
        if base_seq is None:
            continue
        joining = [
            row[0]
            for row in conn.execute(
                "SELECT submission_id FROM submissions WHERE conversation_id = ? "
                "AND status IN ('joining', 'joined', 'queued')",
                (conversation_id,),
            )
        ]
        folder, _ = fold_run(conn, conversation_id, submission.run_id, int(base_seq), joining)
        recorded_inputs |= folder.absorbed
        facts = folder.facts()
        if facts.terminal is None:
            continue
        status = settled_status(facts.terminal)
        if submission.status == status and submission.seq == folder.terminal_seq:
            continue
        conn.execute(
            "UPDATE submissions SET status = ?, settlement = 'final', reserved = ?, "
            "settled_at = coalesce(settled_at, ?), input = NULL, "
            "outcome = ? WHERE submission_id = ?",
            (
                status,
                status,
                now,
                outcome_json(folder.terminal_seq, submission.diagnostic),
                submission_id,
            ),
        )
        list_unknown(
            conn,
            folder.unknown_calls,
            submission_id=submission_id,
            conversation_id=conversation_id,
            epoch=None,
            now=now,
        )
        changes.append({"submission": submission_id, "from": submission.status, "to": status})
    for submission_id in recorded_inputs:
        submission = _require(conn, submission_id)
        if submission.status != "joined":
            conn.execute(
                "UPDATE submissions SET status = 'joined', settlement = 'final', "
                "reserved = 'joined', settled_at = coalesce(settled_at, ?), input = NULL "
                "WHERE submission_id = ?",
                (now, submission_id),
            )
            changes.append({"submission": submission_id, "from": submission.status, "to": "joined"})
    return changes
