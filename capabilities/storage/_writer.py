"""The one writer: group commit driven by Trio, transactions run in a worker thread.

A write is a function of the writer connection, run inside the transaction of its batch, under a
savepoint of its own: if it raises (a revision conflict, say), its savepoint is rolled back and the
other writes of the batch commit without it. A write that changes the database with one statement
at most, as its last step, may say so (``single_statement``) and skip the savepoint: SQLite undoes a
failed statement by itself. If the transaction itself fails (``COMMIT`` refused:
disk full, I/O error), every write of the batch fails with :class:`WriteFailed` and nothing of the
batch is in the database. So each write is all-or-nothing, whoever shares its transaction.

Other processes write the same file: the transaction begins with ``BEGIN IMMEDIATE``, waiting for
their write lock with bounded retries and backoff (``_busy``); when the wait is spent, every write
of the batch fails with :class:`DatabaseBusy` (a :class:`WriteFailed`), nothing written.

The bookkeeping of who writes which batch is :class:`GroupCommit` (pure); this module is the
driver: a write's task queues it, then either leads (takes the batch and runs it with
``trio.to_thread.run_sync``) or waits until its batch is written or it is made leader. A writer
that finds the store idle yields once before it takes its batch, so that the writers a finished
batch just woke queue into it rather than behind a batch of one.

Cancellation of :meth:`Writer.write` (the contract every SQLite capability builds on):

* cancelled before its batch is taken: the write is withdrawn, nothing is written, ``Cancelled``
  is raised;
* cancelled after (the transaction is running in the thread): it waits — shielded — for that
  transaction, which it never abandons. If the write was committed, ``write`` *returns* its result
  (the caller's next checkpoint raises ``Cancelled``): returning means written, raising means not.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from typing import Any, Generic, TypeVar, final

import trio

from .._logging import log_debug
from ._busy import BusyPolicy, begin_immediate
from ._errors import StorageClosed, WriteFailed
from ._group_commit import GroupCommit
from ._port import Connection

__all__ = ["Writer", "run_batch"]

R = TypeVar("R")

#: A batch weighs at most this many rows (a transaction stays short enough to keep latency low).
MAX_BATCH_WEIGHT = 4096


@final
class _Job(Generic[R]):
    """One write: its work, and — once its batch is written — its result or error."""

    __slots__ = ("error", "lead", "result", "savepoint", "wake", "weight", "work")

    def __init__(
        self, work: Callable[[Connection], R], weight: int, savepoint: bool = True
    ) -> None:
        self.work = work
        self.weight = weight
        self.savepoint = savepoint
        self.result: R | None = None
        self.error: BaseException | None = None
        self.lead = False  # set before ``wake`` when this job's task must take the next batch
        self.wake = trio.Event()


def run_batch(
    conn: sqlite3.Connection, batch: list[_Job[Any]], busy: BusyPolicy | None = None
) -> None:
    """Run ``batch`` in one transaction, each write under its own savepoint; set each job's
    result or error. ``busy`` says how long to wait for another process's write lock (None: not
    at all — a database no other connection writes). Runs in the worker thread; never raises."""
    try:
        if busy is None:
            conn.execute("BEGIN IMMEDIATE")
        else:
            begin_immediate(conn, busy)
        for job in batch:
            savepoint = job.savepoint
            if savepoint:
                conn.execute("SAVEPOINT write")
            try:
                job.result = job.work(conn)
            except Exception as exc:
                job.result = None
                job.error = WriteFailed(str(exc)) if isinstance(exc, sqlite3.Error) else exc
                if not conn.in_transaction:  # SQLite rolled the whole transaction back
                    raise
                if savepoint:
                    conn.execute("ROLLBACK TO write")
            if savepoint:
                conn.execute("RELEASE write")
        conn.execute("COMMIT")
    except Exception as exc:
        failure = (
            exc
            if isinstance(exc, WriteFailed)
            else WriteFailed(str(exc) if isinstance(exc, sqlite3.Error) else type(exc).__name__)
        )
        try:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
        except sqlite3.Error:
            pass
        for job in batch:
            if job.error is None or isinstance(job.error, WriteFailed):
                job.result = None
                job.error = failure


@final
class Writer:
    """Serialises every write to one connection through group commit (see the module notes)."""

    __slots__ = ("_busy", "_closed", "_commit", "_conn", "_idle", "_limiter", "_lock", "batches")

    def __init__(
        self, conn: sqlite3.Connection, lock: Any = None, busy: BusyPolicy | None = None
    ) -> None:
        self._conn = conn
        self._busy = busy
        # A ``threading.Lock`` when readers share this connection (an in-memory database).
        self._lock = lock
        self._commit: GroupCommit[_Job[Any]] = GroupCommit(MAX_BATCH_WEIGHT)
        self._limiter = trio.CapacityLimiter(1)
        self._closed = False
        self._idle: trio.Event | None = None
        self.batches = 0  # transactions written (for benchmarks and tests)

    async def write(
        self,
        work: Callable[[Connection], R],
        *,
        weight: int = 1,
        single_statement: bool = False,
    ) -> R:
        """Run ``work(connection)`` in a transaction (possibly shared with other writes, each
        all-or-nothing) and return what it returned; re-raise what it raised (nothing of it is
        then written). ``sqlite3`` errors become :class:`WriteFailed`. ``single_statement``:
        ``work`` changes the database with at most one statement, its last (no savepoint).

        Cancellation: see the module notes — raises ``Cancelled`` only if nothing was written;
        a write already in a running transaction is waited for, and returns if it committed.
        """
        await trio.lowlevel.checkpoint_if_cancelled()
        if self._closed:
            raise StorageClosed()
        job: _Job[R] = _Job(work, max(1, weight), not single_statement)
        commit = self._commit
        if not commit.submit(job):
            try:
                await job.wake.wait()
            except trio.Cancelled:
                withdrawn, leader = commit.withdraw(job)
                if leader is not None:
                    leader.lead = True
                    leader.wake.set()
                if withdrawn:
                    raise
                # Its transaction is running: wait for it, whatever the caller's deadline says.
                with trio.CancelScope(shield=True):
                    await job.wake.wait()
                if job.error is not None:
                    raise  # not written: the cancellation is the truth
                return job.result  # type: ignore[return-value]  # written: say so
            if job.lead:
                await self._lead(job)
        else:
            # Let the tasks that are ready to run queue their writes first: after a batch wakes
            # many writers, the first would otherwise commit a batch of one while the others
            # queue behind it. (Shielded from cancellation: this job leads, and takes the batch.)
            await trio.lowlevel.cancel_shielded_checkpoint()
            await self._lead(job)
        if job.error is not None:
            raise job.error
        return job.result  # type: ignore[return-value]

    async def _lead(self, leader: _Job[Any]) -> None:
        """Take the batch ``leader`` heads, write it, wake its jobs, hand leadership on."""
        commit = self._commit
        batch = commit.take(leader)
        ran = False
        try:
            # Shielded: the batch holds other tasks' writes, taken out of the queue; it is
            # written whatever happens to this task (and the thread is never abandoned).
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(self._run, batch, limiter=self._limiter)
            ran = True
        finally:
            if not ran:  # the thread could not be run (or died): no job may read as written
                for job in batch:
                    job.result = None
                    job.error = job.error or WriteFailed("the writer thread failed")
            self.batches += 1
            for job in batch:
                if job is not leader:
                    job.wake.set()
            following = commit.finish()
            if following is not None:
                following.lead = True
                following.wake.set()
            elif self._idle is not None:
                self._idle.set()
        log_debug("group commit", writes=len(batch))

    def _run(self, batch: list[_Job[Any]]) -> None:
        if self._lock is None:
            run_batch(self._conn, batch, self._busy)
        else:
            with self._lock:
                run_batch(self._conn, batch, self._busy)

    async def aclose(self) -> None:
        """Refuse new writes, then wait until every queued write is written.

        Cancellation: shielded (queued writes belong to other tasks, which wait for them).
        """
        self._closed = True
        with trio.CancelScope(shield=True):
            while not self._commit.idle:
                self._idle = trio.Event()
                await self._idle.wait()
