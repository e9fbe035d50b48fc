"""The durable runtime's SQL: functions of a ``Connection`` that run inside one write (or
read) of :class:`~capabilities.storage.Database` — in its worker thread, in its transaction.

Every change to a submission is guarded twice in its ``UPDATE``: by the ledger's transition table
(``_ledger.guard``: a settled submission never changes), and — for a worker's change — by its
lane: the conversation's lane row must still carry the worker's epoch and attempt (a worker whose
lane was taken over writes nothing). A refused fence raises the storage's ``LaneLost`` (the
write's savepoint is rolled back: nothing of it is written).

Lanes are the storage's (``capabilities.storage._lanes``: a claim takes a free or expired lane
under the next epoch — epochs are never reused —, renewals extend the lease, a release lets it
go, the fence checks epoch and attempt). On top of them: :func:`claim` claims the FIFO heads
that are due, and :func:`take` lets a command that writes to a conversation itself (abort,
decide) hold its lane whoever held it, fencing every earlier holder out.

**Claims on PostgreSQL.** Every write there runs at ``SERIALIZABLE``, where two workers claiming
at once always conflict — each reads the heads the other claims — and one of them is rolled
back and runs again. So a worker on PostgreSQL claims in two writes (``_worker``):

* :func:`claim_free` takes the due heads whose lane is *free* (never held, or released) with
  ``SELECT … FOR UPDATE SKIP LOCKED`` at ``READ COMMITTED`` (set as the transaction's first
  statement): a head another claim has locked is skipped, so concurrent workers take different
  conversations and neither runs again. Correctness then rests on row locks, not on the
  isolation level: the head's row and then its lane's row are locked before anything is
  decided, both are read again after they are locked (each statement sees what is committed
  then), and a new lane is inserted only if no one inserted it meanwhile (``ON CONFLICT DO
  NOTHING``). A serializable writer (a command's :func:`take`, an abort) that meets a row
  changed by the claim after its snapshot fails with a serialization failure and runs again,
  seeing the claim. Nobody can still be writing under a free lane's epoch — its holder released
  it in its last write, or a command that took it fenced the holder out serializably — so
  the claim needs no serializable ordering against writers of the log.
* :func:`claim` with ``takeovers_only`` takes over lanes whose lease ran out, at
  ``SERIALIZABLE`` as before: the holder whose lease ran out may still be writing, and its
  write must be ordered before the takeover (then the new holder reads it) or refused.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any, Final, final

import attrs

from ..storage._errors import LaneLost
from ..storage._lanes import (
    Lane,
    LaneState,
    check_lane,
    claim_decision,
    claim_lane,
    expire_steering,
    read_lane,
    release_lane,
    renew_lane,
)
from ..storage._port import Connection
from ..storage._sweep import put_media_rows
from ._ledger import Event, guard
from ._model import (
    ConversationOwned,
    Diagnostic,
    IdempotencyConflict,
    Mode,
    Receipt,
    SettledStatus,
    Submission,
)

__all__ = [
    "COLUMNS",
    "STOPPED",
    "SUSPENDED",
    "Claimed",
    "Lane",
    "LaneLost",
    "admit",
    "audit",
    "claim",
    "claim_free",
    "claimable",
    "finalize",
    "given_back",
    "last_seq",
    "list_unknown",
    "mark",
    "mark_suspended",
    "read_submission",
    "release",
    "renew",
    "reserve",
    "send_back",
    "submission_of",
    "take",
]

_TERMINAL_SQL: Final = "('completed', 'failed', 'aborted', 'joined')"

#: The ledger columns :func:`submission_of` reads, in its order.
COLUMNS: Final = (
    "submission_id, principal, conversation_id, idempotency_key, agent, mode, position, status, "
    "run_id, attempts, next_attempt_at, admitted_at, started_at, settled_at, settlement, "
    "reserved, outcome, joined_into"
)


@final
@attrs.frozen
class Claimed:
    """A claim: the lane, the ledger row as claimed (``attempts`` counts this claim), its input
    text, whether it is the submission's first claim (``fresh``: no record of its run can
    exist), and the sequence number its run's records start after (``base_seq``)."""

    lane: Lane
    submission: Submission
    text: str
    fresh: bool
    base_seq: int
    #: Input with media: its parts (``capabilities.steering._parts``); None for text alone.
    parts: str | None = None


#: The diagnostic of a joining submission aborted before its run took it.
_ABORTED_UNJOINED: Final = Diagnostic(
    "Aborted", "aborted before the run it was handed to took it as input"
)


def outcome_json(seq: int | None, diagnostic: Diagnostic | None) -> str:
    """The ``outcome`` column of a submission settled at ``seq`` (its terminal record)."""
    body: dict[str, Any] = {"seq": seq}
    if diagnostic is not None:
        body["diagnostic"] = {"tag": diagnostic.tag, "message": diagnostic.message}
    return json.dumps(body, ensure_ascii=False, separators=(",", ":"))


def submission_of(row: Sequence[Any]) -> Submission:
    """The :class:`Submission` of a row selected with :data:`COLUMNS`."""
    outcome = row[16]
    seq: int | None = None
    diagnostic: Diagnostic | None = None
    if outcome:
        body = json.loads(outcome)
        seq = body.get("seq")
        found = body.get("diagnostic")
        if isinstance(found, dict):
            diagnostic = Diagnostic(str(found.get("tag", "")), str(found.get("message", "")))
    return Submission(
        submission_id=row[0],
        principal=row[1],
        conversation_id=row[2],
        idempotency_key=row[3],
        agent=row[4],
        mode=row[5],
        position=row[6],
        status=row[7],
        run_id=row[8],
        attempts=row[9],
        next_attempt_at=row[10],
        admitted_at=row[11],
        started_at=row[12],
        settled_at=row[13],
        settlement=row[14],
        outcome=row[15],
        diagnostic=diagnostic,
        seq=seq,
        joined_into=row[17],
    )


def read_submission(conn: Connection, submission_id: str) -> Submission | None:
    """The ledger row of ``submission_id`` (None: no such submission)."""
    row = conn.execute(
        f"SELECT {COLUMNS} FROM submissions WHERE submission_id = ?", (submission_id,)
    ).fetchone()
    return None if row is None else submission_of(row)


def last_seq(conn: Connection, conversation_id: str) -> int:
    """The conversation's last sequence number in the log (0: no records)."""
    found = conn.execute(
        "SELECT seq FROM records WHERE conversation_id = ? ORDER BY seq DESC LIMIT 1",
        (conversation_id,),
    ).fetchone()
    return 0 if found is None else int(found[0])


# ---- admission -----------------------------------------------------------------------------------


def admit(
    conn: Connection,
    *,
    submission_id: str,
    run_id: str,
    principal: str,
    conversation_id: str,
    idempotency_key: str,
    digest: str,
    agent: str,
    text: str,
    mode: Mode,
    now: float,
    parts: str | None = None,
    media: Sequence[tuple[str, int, bytes]] = (),
    owned_by: str | None = None,
) -> Receipt:
    """Admit a submission, or return the receipt of the one admitted before under the same key
    and payload; raise :class:`IdempotencyConflict` for the same key and another payload.
    ``parts``/``media``: input with media — its parts (``capabilities.steering._parts``) and
    the bytes of its media parts (digest, size, bytes), put in the ``media`` table first.
    ``owned_by``: raise :class:`ConversationOwned` unless the conversation has no submission
    or its first is ``owned_by``'s — read in the admitting transaction, so two principals
    starting one conversation at once cannot both be admitted."""
    found = conn.execute(
        "SELECT submission_id, payload_digest, position, admitted_at, mode FROM submissions "
        "WHERE principal = ? AND conversation_id = ? AND idempotency_key = ?",
        (principal, conversation_id, idempotency_key),
    ).fetchone()
    if found is not None:
        earlier, earlier_digest, position, admitted_at, earlier_mode = found
        if earlier_digest != digest:
            raise IdempotencyConflict(principal, conversation_id, idempotency_key, earlier)
        return Receipt(earlier, conversation_id, position, admitted_at, earlier_mode)
    if owned_by is not None:
        first = conn.execute(
            "SELECT principal FROM submissions WHERE conversation_id = ? ORDER BY position LIMIT 1",
            (conversation_id,),
        ).fetchone()
        if first is not None and first[0] != owned_by:
            raise ConversationOwned(conversation_id)
    position = conn.execute(
        "SELECT coalesce(max(position), 0) + 1 FROM submissions WHERE conversation_id = ?",
        (conversation_id,),
    ).fetchone()[0]
    if media:  # kept once per digest, as the log's ``put_media``
        put_media_rows(conn, media, now=now)
    conn.execute(
        "INSERT INTO submissions (submission_id, principal, conversation_id, idempotency_key, "
        "payload_digest, agent, input, mode, position, status, run_id, attempts, "
        "next_attempt_at, admitted_at, parts) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 'queued', ?, 0, ?, ?, ?)",
        (
            submission_id,
            principal,
            conversation_id,
            idempotency_key,
            digest,
            agent,
            text,
            mode,
            position,
            run_id,
            now,
            now,
            parts,
        ),
    )
    return Receipt(submission_id, conversation_id, position, now, mode)


# ---- lanes ---------------------------------------------------------------------------------------


#: The head condition of a claim: due, and the first of its conversation not settled, in a
#: conversation not in quarantine.
_HEAD_SQL: Final = (
    "s.status IN ('queued', 'active') AND s.next_attempt_at <= ? "
    "AND s.position = (SELECT min(t.position) FROM submissions t "
    f"  WHERE t.conversation_id = s.conversation_id AND t.status NOT IN {_TERMINAL_SQL}) "
    "AND NOT EXISTS (SELECT 1 FROM quarantine q WHERE q.conversation_id = s.conversation_id) "
)

#: What a claim reads of a head: the ledger row, its input, whether it was ever claimed, where
#: its run's records start, its parts.
_CLAIM_COLUMNS: Final = f"{COLUMNS}, input, started_at IS NULL, base_seq, parts"


def _excluded(exclude: Sequence[str]) -> str:
    # (``NOT IN ()`` is SQLite's; PostgreSQL refuses an empty list.)
    if not exclude:
        return ""
    return f"AND s.conversation_id NOT IN ({', '.join('?' * len(exclude))}) "


def claimable(conn: Connection, *, now: float, exclude: Sequence[str] = ()) -> tuple[bool, bool]:
    """Whether a due FIFO head waits on a free lane (never held, or released), and whether one
    waits on a lane whose holder's lease ran out (a takeover to make) — skipping quarantine and
    the conversations in ``exclude``, as the claims do. Reads only: a worker that finds nothing
    writes nothing (on SQLite a write takes the file's one write lock; on PostgreSQL each
    serializable write can conflict with the work going on). A head that becomes due just after
    is found by the next look: its admission wakes the worker."""
    free = conn.execute(
        f"SELECT 1 FROM submissions s WHERE {_HEAD_SQL}"
        "AND NOT EXISTS (SELECT 1 FROM lanes l WHERE l.conversation_id = s.conversation_id "
        f"  AND l.worker_id IS NOT NULL) {_excluded(exclude)}LIMIT 1",
        (now, *exclude),
    ).fetchone()
    expired = conn.execute(
        f"SELECT 1 FROM submissions s WHERE {_HEAD_SQL}"
        "AND EXISTS (SELECT 1 FROM lanes l WHERE l.conversation_id = s.conversation_id "
        f"  AND l.worker_id IS NOT NULL AND l.lease_until <= ?) {_excluded(exclude)}LIMIT 1",
        (now, now, *exclude),
    ).fetchone()
    return free is not None, expired is not None


def claim(
    conn: Connection,
    *,
    now: float,
    worker_id: str,
    lease: float,
    limit: int,
    attempt_ids: Iterable[str],
    exclude: Sequence[str] = (),
    takeovers_only: bool = False,
) -> list[Claimed]:
    """Claim up to ``limit`` lanes whose FIFO head is due and whose lane is free (never held,
    released, or its lease expired), in order of due time then admission; each claim takes a new
    attempt ID from ``attempt_ids`` and the next epoch (``_lanes.claim_lane``), and counts an
    attempt in the ledger. Conversations in quarantine, and those in ``exclude``, are
    skipped. ``takeovers_only``: only lanes held by someone whose lease expired (a PostgreSQL
    worker claims the others with :func:`claim_free`: see the module notes)."""
    held = "AND l.worker_id IS NOT NULL AND l.lease_until > ?"
    if takeovers_only:  # a lane exists, held, its lease run out
        lane_sql = (
            "AND EXISTS (SELECT 1 FROM lanes l WHERE l.conversation_id = s.conversation_id "
            "  AND l.worker_id IS NOT NULL AND l.lease_until <= ?) "
        )
    else:
        lane_sql = (
            "AND NOT EXISTS (SELECT 1 FROM lanes l WHERE l.conversation_id = s.conversation_id "
            f"  {held}) "
        )
    rows = conn.execute(
        f"SELECT {_CLAIM_COLUMNS} FROM submissions s WHERE {_HEAD_SQL}{lane_sql}"
        f"{_excluded(exclude)}ORDER BY s.next_attempt_at, s.admitted_at LIMIT ?",
        (now, now, *exclude, limit),
    ).fetchall()
    claimed: list[Claimed] = []
    ids = iter(attempt_ids)
    for row in rows:
        conversation_id = row[2]
        lane = claim_lane(
            conn,
            conversation_id,
            worker_id=worker_id,
            attempt_id=next(ids),
            now=now,
            lease=lease,
            submission_id=row[0],
        )
        claimed.append(_started(conn, row, lane, now))
    return claimed


def claim_free(
    conn: Connection,
    *,
    now: float,
    worker_id: str,
    lease: float,
    limit: int,
    attempt_ids: Iterable[str],
    exclude: Sequence[str] = (),
) -> list[Claimed]:
    """PostgreSQL: claim up to ``limit`` due FIFO heads whose lane is free (never held, or
    released), skipping those another transaction has locked (``FOR UPDATE SKIP LOCKED`` at
    ``READ COMMITTED``: see the module notes) — concurrent claims take different conversations
    and neither runs again. It must be the whole of its write, which it begins. Lanes held by
    someone whose lease ran out are left to ``claim(..., takeovers_only=True)``."""
    conn.execute("SET TRANSACTION ISOLATION LEVEL READ COMMITTED")
    candidates = conn.execute(
        f"SELECT s.submission_id, s.conversation_id FROM submissions s WHERE {_HEAD_SQL}"
        "AND NOT EXISTS (SELECT 1 FROM lanes l WHERE l.conversation_id = s.conversation_id "
        f"  AND l.worker_id IS NOT NULL) {_excluded(exclude)}"
        "ORDER BY s.next_attempt_at, s.admitted_at LIMIT ? FOR UPDATE OF s SKIP LOCKED",
        (now, *exclude, limit),
    ).fetchall()
    claimed: list[Claimed] = []
    ids = iter(attempt_ids)
    for submission_id, conversation_id in candidates:
        # The head's row is locked: now its lane's (another claim or command holds it: skip).
        found = conn.execute(
            "SELECT conversation_id, epoch, attempt_id, worker_id, submission_id, lease_until "
            "FROM lanes WHERE conversation_id = ? FOR UPDATE SKIP LOCKED",
            (conversation_id,),
        ).fetchone()
        current: LaneState | None = None
        if found is not None:
            current = LaneState(
                found[0], int(found[1]), found[2], found[3], found[4], float(found[5])
            )
            if current.worker_id is not None:  # claimed meanwhile, or a takeover's to make
                continue
        elif conn.execute(
            "SELECT 1 FROM lanes WHERE conversation_id = ?", (conversation_id,)
        ).fetchone():
            continue  # it exists and another transaction has it locked
        # Both rows locked (or the lane not yet made): read the head again, as committed now.
        row = conn.execute(
            f"SELECT {_CLAIM_COLUMNS} FROM submissions s WHERE s.submission_id = ? AND {_HEAD_SQL}",
            (submission_id, now),
        ).fetchone()
        if row is None:
            continue  # settled, not due or not the head any more
        attempt_id = next(ids)
        epoch = claim_decision(current, worker_id=worker_id, attempt_id=attempt_id, now=now)
        assert isinstance(epoch, int)  # a free lane
        values = (submission_id, attempt_id, epoch, worker_id, now + lease, conversation_id)
        if current is None:
            made = conn.execute(
                "INSERT INTO lanes (submission_id, attempt_id, epoch, worker_id, lease_until, "
                "conversation_id) VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
                values,
            ).rowcount
            if not made:
                continue  # another transaction made it first: it is theirs
        else:
            conn.execute(
                "UPDATE lanes SET submission_id = ?, attempt_id = ?, epoch = ?, worker_id = ?, "
                "lease_until = ? WHERE conversation_id = ?",
                values,
            )
            conn.execute(  # as ``_lanes.claim_lane`` does
                "UPDATE steering_inputs SET status = 'expired', text = NULL, reason = ? "
                "WHERE conversation_id = ? AND status = 'queued' AND epoch < ?",
                ("the run it was admitted for stopped before it took it", conversation_id, epoch),
            )
        lane = Lane(conversation_id, epoch, attempt_id, worker_id, now + lease, submission_id)
        claimed.append(_started(conn, row, lane, now))
    return claimed


def _started(conn: Connection, row: Sequence[Any], lane: Lane, now: float) -> Claimed:
    """Count the claim of the head ``row`` (selected with :data:`_CLAIM_COLUMNS`) under
    ``lane`` in the ledger, and return it."""
    *columns, text, fresh, base, parts = row
    before = submission_of(columns)
    base_seq = last_seq(conn, lane.conversation_id) if base is None else int(base)
    conn.execute(
        "UPDATE submissions SET status = 'active', attempts = attempts + 1, "
        "started_at = coalesce(started_at, ?), base_seq = ? "
        f"WHERE submission_id = ? AND {guard('claim')}",
        (now, base_seq, before.submission_id),
    )
    submission = attrs.evolve(
        before,
        status="active",
        attempts=before.attempts + 1,
        started_at=before.started_at if before.started_at is not None else now,
    )
    return Claimed(lane, submission, text or "", bool(fresh), base_seq, parts)


def renew(conn: Connection, lanes: Iterable[Lane], *, now: float, lease: float) -> list[Lane]:
    """Extend the leases of ``lanes``; return those no longer held (taken over or released)."""
    lost: list[Lane] = []
    for lane in lanes:
        try:
            renew_lane(conn, lane, now=now, lease=lease)
        except LaneLost:
            lost.append(lane)
    return lost


def release(conn: Connection, lane: Lane) -> None:
    """Let ``lane`` go (its epoch stays: the next claim takes the one after); raise
    :class:`LaneLost` when it is no longer held as claimed."""
    if not release_lane(conn, lane):
        raise LaneLost(lane.conversation_id, "its lane was taken over or released")


def take(conn: Connection, conversation_id: str, attempt_id: str, now: float) -> Lane:
    """Hold the conversation's lane for a command, whoever holds it: the next epoch, so every
    earlier holder is fenced out (its writes refused from now on). Queued steering of earlier
    epochs expires, as with any claim. The caller releases it (``release``) before its
    transaction ends."""
    current = read_lane(conn, conversation_id)
    epoch = 1 if current is None else current.epoch + 1
    worker_id = f"command-{attempt_id}"
    conn.execute(
        "INSERT INTO lanes (conversation_id, submission_id, attempt_id, epoch, worker_id, "
        "lease_until) VALUES (?, NULL, ?, ?, ?, ?) ON CONFLICT (conversation_id) DO UPDATE "
        "SET submission_id = NULL, attempt_id = excluded.attempt_id, epoch = excluded.epoch, "
        "worker_id = excluded.worker_id, lease_until = excluded.lease_until",
        (conversation_id, attempt_id, epoch, worker_id, now + 60.0),
    )
    if current is not None:
        expire_steering(
            conn, conversation_id, current.epoch, "the run it was admitted for was stopped"
        )
    return Lane(conversation_id, epoch, attempt_id, worker_id, now + 60.0)


# ---- ledger changes --------------------------------------------------------------------------------


def mark(
    conn: Connection,
    lane: Lane | None,
    submission_id: str,
    event: Event,
    to: str,
    *,
    next_attempt_at: float | None = None,
) -> bool:
    """Move ``submission_id`` to status ``to`` by ``event`` (guarded by the transition table and,
    given a ``lane``, fenced by it). Returns whether the row changed."""
    if lane is not None:
        check_lane(conn, lane)
    sets = "status = ?"
    params: list[Any] = [to]
    if next_attempt_at is not None:
        sets += ", next_attempt_at = ?"
        params.append(next_attempt_at)
    params.append(submission_id)
    changed = conn.execute(
        f"UPDATE submissions SET {sets} WHERE submission_id = ? AND {guard(event)}",
        params,
    ).rowcount
    return bool(changed)


def reserve(
    conn: Connection,
    lane: Lane | None,
    submission_id: str,
    status: SettledStatus,
    diagnostic: Diagnostic | None,
) -> bool:
    """Reserve the settlement ``status`` (with its diagnostic) before its record is appended.
    Idempotent: a reservation made already is kept. Returns whether one is reserved now."""
    if lane is not None:
        check_lane(conn, lane)
    conn.execute(
        "UPDATE submissions SET settlement = 'reserved', outcome = ?, reserved = ? "
        f"WHERE submission_id = ? AND settlement IS NULL AND {guard('settle')}",
        (outcome_json(None, diagnostic), status, submission_id),
    )
    found = conn.execute(
        "SELECT settlement FROM submissions WHERE submission_id = ?", (submission_id,)
    ).fetchone()
    return found is not None and found[0] == "reserved"


def finalize(
    conn: Connection,
    lane: Lane | None,
    submission_id: str,
    status: SettledStatus,
    *,
    seq: int | None,
    diagnostic: Diagnostic | None,
    now: float,
    absorbed: Iterable[str] = (),
    unknown: Sequence[tuple[str, str]] = (),
    conversation_id: str | None = None,
    epoch: int | None = None,
) -> bool:
    """Settle ``submission_id`` for good as ``status``, clear its input, settle the joining
    submissions it ``absorbed`` as joined (the others it was given are aborted if an abort
    names them, else go back to waiting), list the calls its run left ``unknown``
    (:func:`list_unknown`, under the lane's conversation and epoch, else ``conversation_id``
    and ``epoch``), and — given its ``lane`` — let the lane go. Fenced; idempotent (a final
    settlement is kept). Returns whether this call settled it."""
    if lane is not None:
        check_lane(conn, lane)
    changed = conn.execute(
        "UPDATE submissions SET status = ?, settlement = 'final', settled_at = ?, outcome = ?, "
        f"reserved = ?, input = NULL WHERE submission_id = ? AND {guard('settle')}",
        (status, now, outcome_json(seq, diagnostic), status, submission_id),
    ).rowcount
    taken = set(absorbed)
    joining = conn.execute(
        "SELECT submission_id FROM submissions WHERE joined_into = ? AND status = 'joining'",
        (submission_id,),
    ).fetchall()
    for (joined_id,) in joining:
        if joined_id in taken:
            conn.execute(
                "UPDATE submissions SET status = 'joined', settlement = 'final', settled_at = ?, "
                "outcome = ?, reserved = 'joined', input = NULL "
                "WHERE submission_id = ? AND status = 'joining'",
                (now, outcome_json(None, None), joined_id),
            )
    send_back(conn, submission_id, taken, now=now)
    if unknown:
        if lane is not None:
            conversation_id, epoch = lane.conversation_id, lane.epoch
        assert conversation_id is not None, "unknown calls are listed under their conversation"
        list_unknown(
            conn,
            unknown,
            submission_id=submission_id,
            conversation_id=conversation_id,
            epoch=epoch,
            now=now,
        )
    if lane is not None:
        release(conn, lane)
    return bool(changed)


def send_back(
    conn: Connection, submission_id: str, absorbed: Iterable[str], *, now: float
) -> list[str]:
    """Take back the joining submissions handed to ``submission_id``'s run that it did not
    record (not in ``absorbed``): each is aborted if an abort names it, else waits for a run
    again (queued, in its place: the next run going may take it, before any admitted after
    it). Not fenced (the caller's transaction is). Returns the IDs sent back to the queue."""
    taken = set(absorbed)
    joining = conn.execute(
        "SELECT submission_id FROM submissions WHERE joined_into = ? AND status = 'joining'",
        (submission_id,),
    ).fetchall()
    queued: list[str] = []
    for (joined_id,) in joining:
        if joined_id in taken:
            continue
        if conn.execute(
            "SELECT 1 FROM aborts WHERE submission_id = ? LIMIT 1", (joined_id,)
        ).fetchone():
            conn.execute(
                "UPDATE submissions SET status = 'aborted', settlement = 'final', settled_at = ?, "
                "outcome = ?, reserved = 'aborted', input = NULL, joined_into = NULL "
                "WHERE submission_id = ? AND status = 'joining'",
                (now, outcome_json(None, _ABORTED_UNJOINED), joined_id),
            )
        else:
            conn.execute(
                "UPDATE submissions SET status = 'queued', joined_into = NULL "
                "WHERE submission_id = ? AND status = 'joining'",
                (joined_id,),
            )
            queued.append(joined_id)
    return queued


#: The audit kind of a claim a worker gave back as it stopped (cancelled: SIGTERM, a drain).
STOPPED: Final = "stopped"
#: The audit kind of a claim whose run suspended for approval decisions (the ledger's
#: ``suspended`` status: the log has no record of it).
SUSPENDED: Final = "suspended"


def mark_suspended(
    conn: Connection, lane: Lane | None, submission: Submission, epoch: int | None, now: float
) -> bool:
    """Mark ``submission`` suspended — its run waits for approval decisions — and add the
    :data:`SUSPENDED` audit row that says the claim took it there (the log has no record of a
    suspension, so the row is what keeps that claim out of the retry budget: ``given_back``).
    Fenced by ``lane`` when given; returns whether the row changed (nothing is audited if not)."""
    if not mark(conn, lane, submission.submission_id, "suspend", "suspended"):
        return False
    audit(
        conn,
        submission_id=submission.submission_id,
        conversation_id=submission.conversation_id,
        epoch=epoch,
        now=now,
        kind=SUSPENDED,
        detail={"run_id": submission.run_id},
    )
    return True


def given_back(conn: Connection, submission_id: str) -> int:
    """How many of the submission's claims spent nothing of its retry budget: those its workers
    gave back as they stopped (the :data:`STOPPED` audit rows) and those that took its run to a
    suspension (:data:`SUSPENDED`) — a stop, or a wait for a decision, is no failed attempt.
    Only those since its last ``retry`` count: that gave it a fresh budget (its ``attempts``
    start again from 0), which claims given back before it must not widen."""
    return int(
        conn.execute(
            "SELECT count(*) FROM durable_audit WHERE submission_id = ? AND kind IN (?, ?) "
            "AND id > COALESCE((SELECT max(id) FROM durable_audit WHERE submission_id = ? "
            "AND kind = 'retry'), 0)",
            (submission_id, STOPPED, SUSPENDED, submission_id),
        ).fetchone()[0]
    )


def list_unknown(
    conn: Connection,
    calls: Sequence[tuple[str, str]],
    *,
    submission_id: str,
    conversation_id: str,
    epoch: int | None,
    now: float,
) -> None:
    """List the ``calls`` (call ID, tool) a submission's run settled ``Unknown`` for a person
    to check (``DurableQueue.unknown``: an ``unknown`` audit row each) — each once, whichever
    settlement (the worker's, an abort's, a rebuild's) gets there first."""
    if not calls:
        return
    listed = {
        json.loads(detail).get("tool_call_id")
        for (detail,) in conn.execute(
            "SELECT detail FROM durable_audit WHERE submission_id = ? AND kind = 'unknown'",
            (submission_id,),
        ).fetchall()
    }
    for call_id, tool in calls:
        if call_id in listed:
            continue
        listed.add(call_id)
        audit(
            conn,
            submission_id=submission_id,
            conversation_id=conversation_id,
            epoch=epoch,
            now=now,
            kind="unknown",
            detail={"tool_call_id": call_id, "tool": tool},
        )


def audit(
    conn: Connection,
    *,
    submission_id: str | None,
    conversation_id: str,
    epoch: int | None,
    now: float,
    kind: str,
    detail: dict[str, Any],
) -> None:
    """Add an audit row: what was decided about a submission, and why."""
    conn.execute(
        "INSERT INTO durable_audit (submission_id, conversation_id, epoch, at, kind, detail) "
        "VALUES (?, ?, ?, ?, ?, ?)",
        (
            submission_id,
            conversation_id,
            epoch,
            now,
            kind,
            json.dumps(detail, ensure_ascii=False, separators=(",", ":")),
        ),
    )
