"""Lanes: who may write a conversation right now, under which epoch, until when.

A lane is one row of the ``lanes`` table per conversation (``_layout_durable``). Whoever runs the
conversation — a durable worker (``capabilities.durable``) or a plain run of this process (see
``_holds``) — *claims* its lane first:

* a claim takes a lane that is free (never held, released, or its lease ran out) under a new
  **epoch**, one more than the last — epochs are never reused, and a released lane keeps its
  epoch, so every claim is told apart from every earlier one; it fails with
  :class:`ConversationInUse` while another holder's lease is live;
* the holder **renews** its lease while it works (a holder that stops — killed, hung — loses the
  lane when the lease runs out, and the next claim takes it over with the next epoch);
* it **releases** the lane when it is done (worker and lease cleared, epoch kept);
* every write it makes runs the **fence** first, in the write's own transaction: the lane must
  still carry the holder's epoch and attempt, and still be held. A holder whose lane was taken
  over or released is refused (:class:`LaneLost`) atomically with the write — its append never
  lands, however late it comes. (A lease that ran out but was not taken over yet still lets its
  holder write: nobody else can write until a claim moves the epoch on.)

Steering admitted for a run records the epoch of the lane it was admitted under; a release or a
claim expires the inputs of earlier epochs that are still queued, so input admitted for a run
that has ended is never delivered to a later one.

The decisions (:func:`claim_decision`, :func:`fence_refusal`) are pure; the ``*_lane``
functions run them inside a write transaction for callers with SQL of their own (the durable
runtime's); :class:`Lanes` is the same as an async API on a :class:`Database`. Times are
wall-clock seconds (``time.time()``): leases are compared across processes.
"""

from __future__ import annotations

import os
import secrets
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Final, final

import attrs

from .._ids import new_id
from ._busy import finite_seconds
from ._errors import ConversationInUse, LaneLost
from ._port import Connection

if TYPE_CHECKING:
    from ._port import Database

__all__ = [
    "DEFAULT_LEASE",
    "Fence",
    "Lane",
    "LaneState",
    "Lanes",
    "check_lane",
    "claim_decision",
    "claim_lane",
    "expire_steering",
    "fence_refusal",
    "lane_fence",
    "read_lane",
    "release_lane",
    "renew_lane",
    "holder_id",
    "process_prefix",
    "same_process",
]

#: How long a lease lasts unless renewed, in seconds.
DEFAULT_LEASE: Final = 30.0

#: A check run inside an append's transaction before anything is written: it raises to refuse.
Fence = Callable[[Connection, str], None]


@attrs.frozen
class LaneState:
    """A conversation's lane as the table has it. ``worker_id`` is None when it is free."""

    conversation_id: str
    epoch: int
    attempt_id: str | None
    worker_id: str | None
    submission_id: str | None
    lease_until: float

    def held(self, now: float) -> bool:
        """Whether someone holds it at ``now`` (a worker, and a lease not yet run out)."""
        return self.worker_id is not None and self.lease_until > now


@attrs.frozen
class Lane:
    """A lane as its holder claimed it: the epoch and attempt its writes are fenced on."""

    conversation_id: str
    epoch: int
    attempt_id: str
    worker_id: str
    lease_until: float
    submission_id: str | None = None


#: This process's token, with the process ID it was drawn in (drawn again after a fork).
_token: tuple[int, str] | None = None


def process_prefix() -> str:
    """``pid-<pid>-<token>-``: how every holder ID of this process begins. The token is random,
    drawn once per process: two processes with the same process ID — on two machines, or in two
    containers, sharing one PostgreSQL database — are never taken for one."""
    global _token
    pid = os.getpid()
    if _token is None or _token[0] != pid:
        _token = (pid, secrets.token_hex(4))
    return f"pid-{pid}-{_token[1]}-"


def holder_id() -> str:
    """A new holder ID of this process: :func:`process_prefix` and a random part."""
    return f"{process_prefix()}{secrets.token_hex(6)}"


def same_process(holder: str) -> bool:
    """Whether the holder ID ``holder`` (``pid-<n>-<token>-…``) is one of this process."""
    return holder.startswith(process_prefix())


def claim_decision(
    current: LaneState | None, *, worker_id: str, attempt_id: str, now: float
) -> int | ConversationInUse:
    """The epoch a claim by ``worker_id`` for ``attempt_id`` takes at ``now`` — or why it is
    refused. Claiming again what one already holds under the same attempt takes the same epoch.
    Pure."""
    if current is None:
        return 1
    if current.held(now):
        if current.worker_id == worker_id and current.attempt_id == attempt_id:
            return current.epoch
        holder = current.worker_id or ""
        return ConversationInUse(
            current.conversation_id, holder, elsewhere=not same_process(holder)
        )
    return current.epoch + 1


def fence_refusal(current: LaneState | None, epoch: int, attempt_id: str) -> str | None:
    """Why a holder of ``epoch`` and ``attempt_id`` may no longer write — None when it may.
    Pure."""
    if current is None:
        return "its lane was never claimed"
    if current.epoch != epoch or current.attempt_id != attempt_id:
        return f"its lane was taken over (epoch {current.epoch}, this writer's is {epoch})"
    if current.worker_id is None:
        return "its lane was released"
    return None


# ---- in a write transaction ----------------------------------------------------------------------

_COLUMNS: Final = "conversation_id, epoch, attempt_id, worker_id, submission_id, lease_until"


def read_lane(conn: Connection, conversation_id: str) -> LaneState | None:
    """The conversation's lane (None: never claimed)."""
    found = conn.execute(
        f"SELECT {_COLUMNS} FROM lanes WHERE conversation_id = ?", (conversation_id,)
    ).fetchone()
    if found is None:
        return None
    return LaneState(found[0], int(found[1]), found[2], found[3], found[4], float(found[5]))


def expire_steering(conn: Connection, conversation_id: str, epoch: int, reason: str) -> int:
    """Expire the conversation's steering still queued under the lane's ``epoch`` (its run
    ended, or stopped, before it took it); return how many."""
    return conn.execute(
        "UPDATE steering_inputs SET status = 'expired', text = NULL, reason = ? "
        "WHERE conversation_id = ? AND status = 'queued' AND epoch = ?",
        (reason, conversation_id, epoch),
    ).rowcount


def claim_lane(
    conn: Connection,
    conversation_id: str,
    *,
    worker_id: str,
    attempt_id: str,
    now: float,
    lease: float = DEFAULT_LEASE,
    submission_id: str | None = None,
) -> Lane:
    """Claim the conversation's lane (see :func:`claim_decision`); raises
    :class:`ConversationInUse` while another holder's lease is live. Queued steering admitted
    under earlier epochs expires."""
    current = read_lane(conn, conversation_id)
    decided = claim_decision(current, worker_id=worker_id, attempt_id=attempt_id, now=now)
    if isinstance(decided, ConversationInUse):
        raise decided
    conn.execute(
        "INSERT INTO lanes (conversation_id, submission_id, attempt_id, epoch, worker_id, "
        "lease_until) VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (conversation_id) DO UPDATE SET "
        "submission_id = excluded.submission_id, attempt_id = excluded.attempt_id, "
        "epoch = excluded.epoch, worker_id = excluded.worker_id, "
        "lease_until = excluded.lease_until",
        (conversation_id, submission_id, attempt_id, decided, worker_id, now + lease),
    )
    if current is not None and decided != current.epoch:
        conn.execute(
            "UPDATE steering_inputs SET status = 'expired', text = NULL, reason = ? "
            "WHERE conversation_id = ? AND status = 'queued' AND epoch < ?",
            ("the run it was admitted for stopped before it took it", conversation_id, decided),
        )
    return Lane(conversation_id, decided, attempt_id, worker_id, now + lease, submission_id)


def check_lane(conn: Connection, lane: Lane) -> None:
    """The fence: raise :class:`LaneLost` unless ``lane`` is still held as claimed."""
    refusal = fence_refusal(read_lane(conn, lane.conversation_id), lane.epoch, lane.attempt_id)
    if refusal is not None:
        raise LaneLost(lane.conversation_id, refusal)


def lane_fence(lane: Lane) -> Fence:
    """The fence of ``lane`` for ``SqliteConversationLog(database, fence=...)``: every append to
    its conversation is refused once the lane is no longer held as claimed (and an append to
    another conversation always)."""

    def fence(conn: Connection, conversation_id: str) -> None:
        if conversation_id != lane.conversation_id:
            raise LaneLost(conversation_id, "it is not the conversation this writer's lane is for")
        check_lane(conn, lane)

    return fence


def renew_lane(conn: Connection, lane: Lane, *, now: float, lease: float = DEFAULT_LEASE) -> Lane:
    """Extend ``lane``'s lease to ``now + lease``; raises :class:`LaneLost` when it is no
    longer held as claimed."""
    check_lane(conn, lane)
    conn.execute(
        "UPDATE lanes SET lease_until = ? WHERE conversation_id = ?",
        (now + lease, lane.conversation_id),
    )
    return attrs.evolve(lane, lease_until=now + lease)


def release_lane(
    conn: Connection, lane: Lane, *, reason: str = "the run ended before it took it"
) -> bool:
    """Let ``lane`` go (its epoch stays: the next claim takes the one after); steering still
    queued under it expires with ``reason``. False (and nothing changed) when it was no longer
    held as claimed."""
    refusal = fence_refusal(read_lane(conn, lane.conversation_id), lane.epoch, lane.attempt_id)
    if refusal is not None:
        return False
    conn.execute(
        "UPDATE lanes SET worker_id = NULL, submission_id = NULL, lease_until = 0 "
        "WHERE conversation_id = ?",
        (lane.conversation_id,),
    )
    expire_steering(conn, lane.conversation_id, lane.epoch, reason)
    return True


# ---- the async API -------------------------------------------------------------------------------


@final
class Lanes:
    """Claim, renew and release lanes of a :class:`Database` (see the module notes).

    ``worker_id`` names the holder (default: the database's ``holder_id``, which its plain runs'
    appends recognise as their own — a durable run's agent state writes go through them); ``lease``
    is how long a claim or renewal lasts; ``clock`` gives wall-clock seconds (a test may move it).
    """

    __slots__ = ("clock", "database", "lease", "worker_id")

    def __init__(
        self,
        database: Database,
        *,
        worker_id: str | None = None,
        lease: float = DEFAULT_LEASE,
        clock: Callable[[], float] = time.time,
    ) -> None:
        finite_seconds("lease", lease)
        self.database = database
        self.worker_id = worker_id or database.holder_id
        self.lease = lease
        self.clock = clock

    async def claim(
        self,
        conversation_id: str,
        *,
        attempt_id: str | None = None,
        submission_id: str | None = None,
    ) -> Lane:
        """Claim the conversation's lane under a new epoch (``attempt_id``: a fresh one unless
        given). Raises :class:`ConversationInUse` while another holder's lease is live.

        Cancellation: all or nothing (one write)."""
        attempt = attempt_id or new_id("attempt")
        now = self.clock()
        return await self.database.write(
            lambda conn: claim_lane(
                conn,
                conversation_id,
                worker_id=self.worker_id,
                attempt_id=attempt,
                now=now,
                lease=self.lease,
                submission_id=submission_id,
            ),
            weight=2,
        )

    async def renew(self, lane: Lane) -> Lane:
        """Extend ``lane``'s lease; raises :class:`LaneLost` when it was taken over or released.

        Cancellation: all or nothing (one write)."""
        now = self.clock()
        return await self.database.write(
            lambda conn: renew_lane(conn, lane, now=now, lease=self.lease)
        )

    async def release(self, lane: Lane) -> bool:
        """Let ``lane`` go; False when it was no longer held as claimed (nothing changed).

        Cancellation: all or nothing (one write)."""
        return await self.database.write(lambda conn: release_lane(conn, lane), weight=2)

    async def current(self, conversation_id: str) -> LaneState | None:
        """The conversation's lane as the table has it now (None: never claimed).

        Cancellation: a checkpoint before reading; nothing changes."""
        return await self.database.read(lambda conn: read_lane(conn, conversation_id))

    def fence(self, lane: Lane) -> Fence:
        """See :func:`lane_fence`."""
        return lane_fence(lane)
