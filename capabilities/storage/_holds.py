"""Plain runs hold their conversation's lane while they go, so two processes never run one
conversation at once.

A run that is not durable (``Runtime.run`` on ``sqlite_storage``) writes its records through an
unfenced :class:`~._log.SqliteConversationLog`. Its appends say enough to hold the lane:

* the append that records the person's input (a ``UserInputRecorded`` of kind ``user``) starts a
  run: it **claims** the conversation's lane for that run (worker: the database's ``holder_id``,
  attempt: the run ID) in the same transaction — refused, nothing written, with
  :class:`ConversationInUse` while another holder's lease is live (a run in another process, or
  another run of this one);
* every later append of the run checks that the lane is still its own, under the epoch it
  claimed (refused with :class:`LaneLost` when it was taken over after the lease ran out);
* the append of its terminal record (completed, failed, interrupted) **releases** the lane in the
  same transaction, and steering still queued for the run expires. A run that suspends for
  approval decisions writes no record of it (its approval requests are where it stopped): its
  lane is let go when the runtime tells the log (a ``RunObserver``) that the run ended, as for a
  run whose terminal record could not be written (:meth:`RunHolds.release`).

While a hold lasts, a task of the process renews its lease (every third of it: 10 s for the
default 30 s lease); a process that is killed stops renewing, and its holds free themselves when
their leases run out — then the next run's claim takes the lane over (the next epoch), and the
killed run's late appends, had it any, would be refused. An append of records of no run of ours
that neither starts nor ends one is only checked: refused while a holder in another process has a
live lease (a durable worker of this process, whose run's agent state is written through an
unfenced log, holds its lanes under a worker ID of its own: ``pid-<this pid>-…``); one that ends
a run not held here is refused while anyone's lease is live (a run refused at its start never
writes its failure).

A run can also claim its lane before it writes anything (:meth:`RunHolds.claim`, used by
``SqliteConversationLog.claim`` — and by its ``run_started`` for a run resumed from its records,
which records no input), so that a second run is refused before it starts; its first append then
finds the lane its own. :meth:`RunHolds.release` lets a run's lane go when its
terminal record could not be written; closing the database releases what is still held.

:func:`shape_of` and :func:`decide` are the pure part; :class:`RunHolds` the bookkeeping of one
database's holds and the renewing task.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, TypeVar, final

import attrs
import trio

from effectagent.core import Record, RunCompletedRecord, RunFailedRecord, UserInputRecorded

from .._logging import log_warning
from ._busy import finite_seconds
from ._errors import ConversationInUse, LaneLost, StorageClosed
from ._lanes import (
    DEFAULT_LEASE,
    Lane,
    LaneState,
    claim_lane,
    read_lane,
    release_lane,
    same_process,
)

if TYPE_CHECKING:
    from ._port import Connection, Database

__all__ = ["AppendShape", "Held", "Proceed", "Refuse", "RunHolds", "decide", "shape_of"]

R = TypeVar("R")


@attrs.frozen
class AppendShape:
    """What an append says about runs: the runs its records belong to, the run it starts (its
    person's input), and the run it ends with the word for how (``completed``, ``failed``,
    ``interrupted``)."""

    runs: frozenset[str] = frozenset()
    starts: str | None = None
    ends: tuple[str, str] | None = None


def _ending(record: object) -> str | None:
    if isinstance(record, RunCompletedRecord):
        return "completed"
    if isinstance(record, RunFailedRecord):
        return "interrupted" if record.reason == "interrupted" else "failed"
    return None


def shape_of(records: Sequence[Record]) -> AppendShape:
    """The :class:`AppendShape` of an append of ``records``. Pure."""
    runs: set[str] = set()
    starts: str | None = None
    ends: tuple[str, str] | None = None
    for record in records:
        run_id = getattr(record, "run_id", None)
        if not isinstance(run_id, str):
            continue
        runs.add(run_id)
        if isinstance(record, UserInputRecorded) and record.kind == "user":
            starts = run_id
        ending = _ending(record)
        if ending is not None:
            ends = (run_id, ending)
    return AppendShape(frozenset(runs), starts, ends)


@attrs.frozen
class Held:
    """A lane this database holds for a plain run: the run, and the epoch it claimed."""

    run_id: str
    epoch: int


@attrs.frozen
class Proceed:
    """The append goes ahead: claiming the lane for ``claim`` (a run ID) first, and releasing
    it after with ``release`` (the word for how the run ended)."""

    claim: str | None = None
    release: str | None = None


@attrs.frozen
class Refuse:
    """The append is refused with ``error``, nothing written."""

    error: LaneLost | ConversationInUse


def decide(
    conversation_id: str,
    lane: LaneState | None,
    *,
    me: str,
    known: Held | None,
    shape: AppendShape,
    now: float,
) -> Proceed | Refuse:
    """Whether an append of ``shape`` to ``conversation_id``, whose lane is ``lane``, goes ahead,
    for the database ``me`` that holds it for ``known`` (None: holds nothing of it). Pure."""
    if known is not None:
        ours = (
            lane is not None
            and lane.worker_id == me
            and lane.epoch == known.epoch
            and lane.attempt_id == known.run_id
        )
        ended = shape.ends is not None and shape.ends[0] == known.run_id
        if not ours:
            if lane is not None and lane.epoch != known.epoch:
                reason = (
                    f"the conversation's lane was taken over (epoch {lane.epoch}) after this "
                    "run's lease ran out"
                )
            else:
                reason = "the conversation's lane was released while its run was going"
            return Refuse(LaneLost(conversation_id, reason))
        if shape.runs - {known.run_id}:  # another run of this database: one at a time
            return Refuse(ConversationInUse(conversation_id, me, elsewhere=False))
        return Proceed(release=shape.ends[1] if ended and shape.ends else None)
    if lane is not None and lane.held(now):
        holder = lane.worker_id or ""
        if holder == me and lane.attempt_id is not None and lane.attempt_id in shape.runs:
            return Proceed()  # claimed for this run by an append of the same transaction
        ours = holder == me or same_process(holder)
        if not ours or shape.starts is not None or shape.ends is not None:
            return Refuse(
                ConversationInUse(conversation_id, holder, elsewhere=not same_process(holder))
            )
        return Proceed()
    if shape.starts is not None and (shape.ends is None or shape.ends[0] != shape.starts):
        return Proceed(claim=shape.starts)
    return Proceed()


@final
class RunHolds:
    """The lanes one :class:`Database` holds for its plain runs, and the task renewing
    them (see the module notes). ``clock`` gives wall-clock seconds."""

    __slots__ = ("_closed", "_lost", "_renewing", "_wake", "clock", "database", "held", "lease")

    def __init__(
        self,
        database: Database,
        *,
        lease: float = DEFAULT_LEASE,
        clock: Callable[[], float] = time.time,
    ) -> None:
        finite_seconds("lease", lease)  # an infinite lease would hold a dead process's lanes
        self.database = database
        self.lease = lease
        self.clock = clock
        #: Conversation → the hold of this database's run on it.
        self.held: dict[str, Held] = {}
        # Holds found taken over or released by a renewal: kept in ``held`` (their runs' next
        # appends must be refused, not claim again), but not renewed any more.
        self._lost: set[str] = set()
        self._renewing = False
        self._closed = False
        self._wake = trio.Event()

    def _lane(self, conversation_id: str, held: Held) -> Lane:
        return Lane(conversation_id, held.epoch, held.run_id, self.database.holder_id, 0.0)

    # ---- appends ------------------------------------------------------------------------------

    async def append(
        self,
        conversation_id: str,
        shape: AppendShape,
        write: Callable[[Connection], R],
        *,
        weight: int,
        single_statement: bool,
    ) -> R:
        """Run ``write`` (an append's insert) in a write transaction after :func:`decide` let it,
        claiming or releasing the lane with it as decided; raises :class:`ConversationInUse` or
        :class:`LaneLost` (nothing written) when refused, and what the write raises.

        Cancellation: as :meth:`Database.write` — all or nothing; the holds are updated
        once the transaction is known to have committed."""
        me = self.database.holder_id
        now = self.clock()
        lease = self.lease
        known = self.held.get(conversation_id)

        def work(conn: Connection) -> tuple[R, Held | None, bool]:
            decided = decide(
                conversation_id,
                read_lane(conn, conversation_id),
                me=me,
                known=known,
                shape=shape,
                now=now,
            )
            if isinstance(decided, Refuse):
                raise decided.error
            claimed: Held | None = None
            if decided.claim is not None:
                lane = claim_lane(
                    conn,
                    conversation_id,
                    worker_id=me,
                    attempt_id=decided.claim,
                    now=now,
                    lease=lease,
                )
                claimed = Held(decided.claim, lane.epoch)
            result = write(conn)
            if decided.release is not None and known is not None:
                release_lane(
                    conn,
                    self._lane(conversation_id, known),
                    reason=f"the run {decided.release} before it took the input",
                )
            return result, claimed, decided.release is not None

        # Claiming or releasing adds statements before and after the insert: a savepoint then.
        plain = single_statement and shape.starts is None and shape.ends is None
        try:
            result, claimed, released = await self.database.write(
                work, weight=weight, single_statement=plain
            )
        except (LaneLost, ConversationInUse):
            last = shape.ends is not None and known is not None and shape.ends[0] == known.run_id
            if last and self.held.get(conversation_id) == known:  # nothing to renew any more
                del self.held[conversation_id]
            raise
        if claimed is not None:
            self._hold(conversation_id, claimed)
        elif released:
            self.held.pop(conversation_id, None)
        return result

    def _hold(self, conversation_id: str, held: Held) -> None:
        self.held[conversation_id] = held
        if not self._renewing and not self._closed:
            self._renewing = True
            trio.lowlevel.spawn_system_task(self._renew_while_held, name="effectagent lanes")

    # ---- explicit claims ----------------------------------------------------------------------

    async def claim(self, conversation_id: str, run_id: str) -> None:
        """Hold the conversation's lane for ``run_id`` before it writes anything (nothing else is
        written). Raises :class:`ConversationInUse` while another holder's lease is live — or
        this database holds it for another run. Claiming again for the same run changes nothing.

        Cancellation: all or nothing (one write)."""
        known = self.held.get(conversation_id)
        if known is not None:
            await trio.lowlevel.checkpoint()
            if known.run_id == run_id:
                return
            raise ConversationInUse(conversation_id, self.database.holder_id, elsewhere=False)
        me, now, lease = self.database.holder_id, self.clock(), self.lease

        def work(conn: Connection) -> Held:
            lane = claim_lane(  # raises ConversationInUse while another holder's lease is live
                conn, conversation_id, worker_id=me, attempt_id=run_id, now=now, lease=lease
            )
            return Held(run_id, lane.epoch)

        self._hold(conversation_id, await self.database.write(work, weight=2))

    async def release(self, conversation_id: str, run_id: str) -> None:
        """Let the lane this database holds for ``run_id`` go (nothing when it holds none): for
        a run whose terminal record was not written. Steering still queued for it expires.

        Cancellation: all or nothing (one write)."""
        known = self.held.get(conversation_id)
        if known is None or known.run_id != run_id:
            await trio.lowlevel.checkpoint()
            return
        lane = self._lane(conversation_id, known)
        await self.database.write(lambda conn: release_lane(conn, lane), weight=2)
        if self.held.get(conversation_id) == known:
            del self.held[conversation_id]

    # ---- renewing -----------------------------------------------------------------------------

    async def _renew_while_held(self) -> None:
        """Renew every hold a third of a lease after the last renewal, until there are none or
        the database closes. (A system task: it must never raise but ``Cancelled``.)"""
        every = self.lease / 3
        last = self.clock()
        try:
            while self._wanted():
                with trio.move_on_after(every):
                    await self._wake.wait()
                if not self._wanted():
                    break
                if self.clock() - last < every * 0.9:  # a mock clock ran ahead of the wall one
                    continue
                last = self.clock()
                await self._renew(last)
        except StorageClosed:
            pass
        except Exception as exc:  # logged: the holds run out, and their runs learn so
            log_warning("renewing lanes failed", error=type(exc).__name__)
        finally:
            self._renewing = False

    def _wanted(self) -> bool:
        """Whether there is anything to renew."""
        return bool(self.held) and not self._closed

    async def _renew(self, now: float) -> None:
        self._lost &= set(self.held)
        holds = {c: held for c, held in self.held.items() if c not in self._lost}
        if not holds:
            return
        me, lease = self.database.holder_id, self.lease

        def work(conn: Connection) -> list[str]:
            lost = []
            for conversation_id, held in holds.items():
                changed = conn.execute(
                    "UPDATE lanes SET lease_until = ? WHERE conversation_id = ? AND epoch = ? "
                    "AND attempt_id = ? AND worker_id = ?",
                    (now + lease, conversation_id, held.epoch, held.run_id, me),
                ).rowcount
                if not changed:
                    lost.append(conversation_id)
            return lost

        for conversation_id in await self.database.write(work, weight=len(holds)):
            self._lost.add(conversation_id)
            log_warning("a run lost its conversation's lane", conversation_id=conversation_id)

    async def aclose(self) -> None:
        """Stop renewing, and let every lane still held go (their runs are over with the
        database). Cancellation: shielded (called as the database closes)."""
        self._closed = True
        self._wake.set()
        holds, self.held = self.held, {}
        if not holds:
            return
        lanes = [self._lane(conversation_id, held) for conversation_id, held in holds.items()]

        def work(conn: Connection) -> None:
            for lane in lanes:
                release_lane(conn, lane, reason="the process closed the database first")

        with trio.CancelScope(shield=True):
            try:
                await self.database.write(work, weight=len(lanes))
            except Exception as exc:  # their leases run out instead
                log_warning("releasing lanes at close failed", error=type(exc).__name__)
