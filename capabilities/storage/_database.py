"""An SQLite database file several processes share: in each, one writer connection (group
commit) and a pool of readers, in threads.

Module notes
------------
* **Threads.** ``sqlite3`` blocks, so every statement runs in a worker thread
  (``trio.to_thread.run_sync``). Writes go through the one writer connection, serialised by group
  commit (``_writer``); reads use a small pool of reader connections, so a read never waits for a
  transaction (WAL: readers see the last committed state while a writer writes).
* **Several processes.** Any number of processes — each with its own writer and readers — open
  the same file. WAL lets their readers read while one of them writes; their writes take turns on
  the file's write lock: a transaction begins with ``BEGIN IMMEDIATE`` and, while another process
  holds the lock, waits for it with bounded retries and backoff (``_busy``: at most ``busy.bound``
  seconds, 10 by default), then fails with :class:`DatabaseBusy`, nothing written — never an
  unbounded wait, never half a transaction. SQLite locks and WAL need the processes to be on one
  machine (its shared memory): never open the file over a network file system.
* **Alone or not.** Some recovery is only right when no other process uses the file: pending
  agent state and queued steering left by processes that ended (``_recovery``). The lock file
  ``<file>.lock`` says who is there: an opener takes ``flock`` exclusively if it can — it is
  alone; it cleans up, then shares the lock — or else waits (bounded, as for the write lock) to
  share it. Every open process holds the shared lock until it closes or dies (the kernel drops
  it). A process that dies while others live leaves its pending state and queued steering as
  they are — the next process to open the file alone cleans them — and its lanes free
  themselves when their leases run out (``_lanes``). A process of an older version, which
  holds the lock exclusively all along, makes an opener fail with :class:`DatabaseInUse` once
  the wait is spent.
* **Journal and synchronous.** The journal is WAL. ``synchronous`` is ``"full"`` by default: each
  commit is synced to disk before the writes in it return, so what an append, a session update or
  an admitted steering input returned survives a power loss as well as a crash of the process.
  Group commit pays one sync per transaction, shared by every write in it. ``"normal"`` skips
  that sync: a commit then survives the process being killed (the WAL is in the operating system's
  cache) but the last transactions before a power loss or a kernel crash may be lost — never
  half of one, and the database is never corrupted. Choose it when that is acceptable and commit
  latency matters.
* **``:memory:``.** The database lives in the one writer connection, which reads share (under a
  lock): nothing survives the process, WAL does not apply, and the opener is always alone.
* **Not ours, too new.** See ``_layout``: a file that is not SQLite, another application's
  database, or one written by a newer layout is refused with a typed error, unmodified.
* **Files for their owner.** See ``_files``: the database file is made 0600 (and so are its
  ``-wal``/``-shm``/journal and lock files); a symbolic link, a file that is not regular or one
  another user owns is refused with :class:`UnsafeDatabaseFile`, untouched.
"""

from __future__ import annotations

import os
import sqlite3
import sys
import threading
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from typing import IO, Final, Literal, TypeVar, final

import attrs
import trio

from .._logging import log_debug
from ._busy import BusyPolicy, begin_immediate, finite_seconds, retry_busy
from ._errors import (
    CannotOpenDatabase,
    DatabaseInUse,
    ReadFailed,
    StorageClosed,
    UnsafeDatabaseFile,
)
from ._files import FileIdentity, check_same, claim_database, open_lock
from ._holds import RunHolds
from ._lanes import DEFAULT_LEASE, Lanes, holder_id
from ._layout import prepare
from ._port import Connection, Dialect
from ._recovery import recover
from ._wakeups import WakeUps
from ._writer import Writer

if sys.platform != "win32":
    import fcntl

__all__ = ["MEMORY", "SqliteDatabase", "Synchronous", "database_path", "open_database"]

R = TypeVar("R")

#: The path that opens an in-memory database.
MEMORY: Final = ":memory:"

#: How hard each commit is synced to disk (see the module notes).
Synchronous = Literal["normal", "full", "extra"]

#: How long a reader connection lets SQLite wait for a lock (WAL readers rarely meet one).
_READER_BUSY_MS: Final = 5_000


def _connect(path: str, busy_ms: int) -> sqlite3.Connection:
    try:
        conn = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
    except sqlite3.Error as exc:
        raise CannotOpenDatabase(path, str(exc)) from None
    conn.execute(f"PRAGMA busy_timeout = {busy_ms}")
    return conn


@attrs.frozen
class _Opened:
    conn: sqlite3.Connection
    lock: IO[bytes] | None
    identity: FileIdentity | None
    alone: bool
    recovered: Mapping[str, int]


def _share(handle: IO[bytes], path: str, busy: BusyPolicy) -> None:
    """Hold the lock file shared, waiting (bounded) while a process holds it exclusively."""

    def attempt() -> None:
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            raise sqlite3.OperationalError("database is locked") from None

    try:
        retry_busy(attempt, busy)
    except Exception:
        handle.close()
        raise DatabaseInUse(path) from None


def _lock(path: str, busy: BusyPolicy) -> tuple[IO[bytes] | None, bool]:
    """The lock file, held exclusively (alone: True) or shared (False)."""
    if sys.platform == "win32":  # pragma: no cover - no flock: every opener counts as alone
        return None, True
    handle = open_lock(path)  # held for the database's lifetime
    try:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        _share(handle, path, busy)
        return handle, False
    except OSError as exc:
        handle.close()
        raise CannotOpenDatabase(path, f"its lock file cannot be locked: {exc.strerror}") from None
    return handle, True


def _open_sync(path: str, synchronous: Synchronous, busy: BusyPolicy) -> _Opened:
    if path == MEMORY:
        conn = _connect(path, 0)
        prepare(conn, path)
        return _Opened(conn, None, None, True, _recover(conn, None))
    identity = claim_database(path)  # ours and plain, or made 0600 (see ``_files``)
    lock, alone = _lock(path, busy)
    try:
        conn = _connect(path, 0)  # the writer: waits for the write lock in ``_busy``, not here
    except BaseException:
        if lock is not None:
            lock.close()
        raise
    try:
        check_same(path, identity)  # SQLite opened the file that was checked
        _configure(conn, path, synchronous, busy)
        recovered = _recover(conn, busy) if alone else {}
        if alone and lock is not None:
            # Others may come in now. (Not atomic: one that locks exclusively in between finds
            # nothing of ours to clean — this process has started nothing yet.)
            try:
                fcntl.flock(lock.fileno(), fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                _share(lock, path, busy)
    except BaseException as exc:
        conn.close()
        if lock is not None:
            lock.close()
        if isinstance(exc, sqlite3.Error):
            raise CannotOpenDatabase(path, str(exc)) from None
        raise
    return _Opened(conn, lock, identity, alone, recovered)


def _configure(
    conn: sqlite3.Connection, path: str, synchronous: Synchronous, busy: BusyPolicy
) -> None:
    prepare(conn, path, busy)
    mode = retry_busy(lambda: conn.execute("PRAGMA journal_mode = WAL").fetchone()[0], busy)
    if str(mode).lower() != "wal":
        raise CannotOpenDatabase(path, f"the journal cannot be WAL here (it is {mode})")
    conn.execute(f"PRAGMA synchronous = {synchronous.upper()}")


def _recover(conn: sqlite3.Connection, busy: BusyPolicy | None) -> dict[str, int]:
    """The opener is alone: clean up after processes that ended (``_recovery``), in one
    transaction."""
    if busy is None:
        conn.execute("BEGIN IMMEDIATE")
    else:
        begin_immediate(conn, busy)
    try:
        recovered = recover(conn)
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    return recovered


@final
class SqliteDatabase:
    """An open database: :meth:`write` through group commit, :meth:`read` from the reader pool.

    Made by :func:`open_database` (or the ``sqlite_storage`` Layers); the capabilities' SQLite
    stores share one. Work functions run in a worker thread with a ``sqlite3.Connection``.
    """

    __slots__ = (
        "_closed",
        "_closing",
        "_conn",
        "_identity",
        "_idle_readers",
        "_lock_file",
        "_memory_lock",
        "_pool_lock",
        "_read_limiter",
        "_readers_made",
        "_reads",
        "_reads_done",
        "_wake_ups",
        "alone",
        "busy",
        "holder_id",
        "holds",
        "path",
        "recovered",
        "synchronous",
        "writer",
    )

    def __init__(
        self,
        path: str,
        conn: sqlite3.Connection,
        lock_file: IO[bytes] | None,
        *,
        synchronous: Synchronous,
        readers: int,
        identity: FileIdentity | None = None,
        busy: BusyPolicy | None = None,
        alone: bool = True,
        recovered: Mapping[str, int] | None = None,
        lease: float = DEFAULT_LEASE,
    ) -> None:
        self.path = path
        #: Who this opening of the database is, in lanes it holds: ``pid-<pid>-<token>-<random>``
        #: (``_lanes.holder_id``).
        self.holder_id = holder_id()
        #: Whether no other process had the file open when this one opened it (it recovered).
        self.alone = alone
        #: What the open-time recovery changed (see ``_recovery``): counts by kind.
        self.recovered: Mapping[str, int] = dict(recovered or {})
        #: How long a write waits for another process's write lock.
        self.busy = busy or BusyPolicy()
        #: The lanes this database holds for its plain runs (see ``_holds``).
        self.holds = RunHolds(self, lease=lease)
        # The file opened (None in memory): each reader connection made later opens the path
        # anew, and checks that it is still that file.
        self._identity = identity
        self.synchronous = synchronous
        self._conn = conn
        self._lock_file = lock_file
        self._memory_lock = threading.Lock() if path == MEMORY else None
        #: The group-commit writer (its ``batches`` count transactions).
        self.writer = Writer(conn, self._memory_lock, None if path == MEMORY else self.busy)
        self._pool_lock = threading.Lock()
        self._idle_readers: list[sqlite3.Connection] = []
        self._readers_made: list[sqlite3.Connection] = []
        self._read_limiter = trio.CapacityLimiter(max(1, readers))
        self._reads = 0
        self._reads_done: trio.Event | None = None
        self._closed = False
        self._closing = False
        self._wake_ups = WakeUps()

    @property
    def lanes(self) -> Lanes:
        """Claim, renew and release lanes as this database's holder (see ``_lanes``), with the
        lease its plain runs use."""
        return Lanes(self, lease=self.holds.lease)

    @property
    def dialect(self) -> Dialect:
        """The SQL dialect: ``"sqlite"``."""
        return "sqlite"

    @property
    def in_memory(self) -> bool:
        """Whether this is an in-memory database (nothing survives the process)."""
        return self.path == MEMORY

    async def write(
        self,
        work: Callable[[Connection], R],
        *,
        weight: int = 1,
        single_statement: bool = False,
        wake: bool = False,
    ) -> R:
        """Run ``work`` in a write transaction (see :class:`~._writer.Writer`); ``weight`` is
        about how many rows it writes; ``single_statement`` says it changes the database with one
        statement at most, its last (so it needs no savepoint of its own). ``wake``: once it
        committed, count a wake-up for the waiters of this opened database (:meth:`listen`;
        other processes are not told: they poll).

        Cancellation: raises ``Cancelled`` only if nothing of ``work`` was committed; once its
        transaction runs, it is waited for and its result returned.
        """
        result = await self.writer.write(work, weight=weight, single_statement=single_statement)
        if wake:
            self._wake_ups.bump()
        return result

    async def listen(self) -> WakeUps:
        """The wake-ups of this opened database: writes made with ``wake=True`` through it (in
        this process only; see ``_wakeups``).

        Cancellation: a checkpoint."""
        await trio.lowlevel.checkpoint()
        return self._wake_ups

    async def read(self, work: Callable[[Connection], R]) -> R:
        """Run ``work`` on a reader connection (a consistent snapshot) and return its result.
        ``sqlite3`` errors become :class:`ReadFailed`; what ``work`` raises otherwise propagates.

        Cancellation: a checkpoint before the read starts; a read that started finishes in its
        thread (milliseconds) and its result is returned — nothing changes either way.
        """
        await trio.lowlevel.checkpoint_if_cancelled()
        if self._closed:
            raise StorageClosed()
        self._reads += 1
        try:
            return await trio.to_thread.run_sync(self._read, work, limiter=self._read_limiter)
        finally:
            self._reads -= 1
            if self._reads == 0 and self._reads_done is not None:
                self._reads_done.set()

    def _read(self, work: Callable[[Connection], R]) -> R:
        if self._memory_lock is not None:
            with self._memory_lock:
                return self._guarded(work, self._conn)
        with self._pool_lock:
            conn = self._idle_readers.pop() if self._idle_readers else None
        if conn is None:
            conn = self._new_reader()
            with self._pool_lock:
                self._readers_made.append(conn)
        try:
            result = self._guarded(work, conn)
        except BaseException:
            # ``work`` may have left a statement open, holding a read snapshot (stale reads for
            # the next user, and a WAL that can no longer be checkpointed): not pooled again.
            with self._pool_lock:
                self._readers_made.remove(conn)
            conn.close()
            raise
        with self._pool_lock:
            self._idle_readers.append(conn)
        return result

    def _new_reader(self) -> sqlite3.Connection:
        """A reader connection on the file opened (``ReadFailed`` when it cannot be had)."""
        try:
            conn = _connect(self.path, _READER_BUSY_MS)
        except CannotOpenDatabase as exc:
            raise ReadFailed(exc.reason) from None
        try:
            if self._identity is not None:
                check_same(self.path, self._identity)
            conn.execute("PRAGMA query_only = ON")
        except (UnsafeDatabaseFile, sqlite3.Error) as exc:
            conn.close()
            reason = (
                "the database file was replaced after it was opened"
                if isinstance(exc, UnsafeDatabaseFile)
                else str(exc)
            )
            raise ReadFailed(reason) from None
        return conn

    @staticmethod
    def _guarded(work: Callable[[Connection], R], conn: sqlite3.Connection) -> R:
        try:
            return work(conn)
        except sqlite3.Error as exc:
            raise ReadFailed(str(exc)) from None

    async def aclose(self) -> None:
        """Write what is queued, wait for reads in flight, close every connection, let go of the
        file. Idempotent.

        Cancellation: shielded (queued writes belong to tasks that wait for them).
        """
        if self._closing:
            return
        self._closing = True
        with trio.CancelScope(shield=True):
            await self.holds.aclose()  # before the writer closes: it writes the releases
            self._closed = True
            await self.writer.aclose()
            while self._reads:
                self._reads_done = trio.Event()
                await self._reads_done.wait()
            await trio.to_thread.run_sync(self._close_sync)

    def _close_sync(self) -> None:
        with self._pool_lock:
            readers, self._readers_made, self._idle_readers = self._readers_made, [], []
        for conn in readers:
            conn.close()
        try:
            if not self.in_memory and self._last_one():
                # Fold the WAL back into the file so it is one self-contained file at rest.
                self._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        except sqlite3.Error:
            pass
        finally:
            self._conn.close()
            if self._lock_file is not None:
                self._lock_file.close()

    def _last_one(self) -> bool:
        """Whether no other process has the file open (then the WAL may be folded back without
        waiting for anyone's readers)."""
        if self._lock_file is None:
            return True
        try:
            fcntl.flock(self._lock_file.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return False
        return True


def _check_readers(readers: object) -> int:
    """``readers``, checked: an int (not a bool), at least 1."""
    if type(readers) is not int:
        raise TypeError(f"readers must be an int, got {type(readers).__name__}")
    if readers < 1:
        raise ValueError(f"readers must be at least 1, got {readers}")
    return readers


def database_path(path: object) -> str:
    """``path`` as the text an SQLite database is opened by, checked: a ``str`` or a path
    (``os.PathLike`` of text) that is neither empty nor holds NUL; ``TypeError`` or
    ``ValueError`` saying which otherwise."""
    if not isinstance(path, str | os.PathLike):
        raise TypeError(f"the database path must be a str or a path, got {type(path).__name__}")
    name = os.fspath(path)
    if not isinstance(name, str):  # bytes: its lock file would be named after its repr
        raise TypeError(f"the database path must be a str or a path, got {type(name).__name__}")
    if not name:
        raise ValueError("the database path must not be empty")
    if "\x00" in name:
        raise ValueError("the database path must not hold NUL")
    return name


@asynccontextmanager
async def open_database(
    path: str | os.PathLike[str],
    *,
    synchronous: Synchronous = "full",
    readers: int = 4,
    busy: BusyPolicy | None = None,
    lease: float = DEFAULT_LEASE,
) -> AsyncIterator[SqliteDatabase]:
    """Open (creating it if needed) the effectagent database at ``path`` — a file path, or
    ``":memory:"`` — and close it when the block ends. Other processes may have it open too
    (see the module notes); ``busy`` says how long a write waits for their write lock (default
    :class:`BusyPolicy`: 10 s in all), and opening waits as long at most for one that is
    cleaning up after processes that ended. ``lease`` is how long a plain run's hold of its
    conversation's lane lasts without renewal (see ``_holds``): a finite, positive number of
    seconds. ``readers`` is how many reads run at once: an int, at least 1. A bad one of these
    raises ``ValueError`` / ``TypeError`` before the file is touched — and so does a ``path``
    that is bytes (``TypeError``), empty or holding NUL (``ValueError``).

    A file it makes is 0600, and so are the files SQLite makes beside it (see ``_files``).
    Raises :class:`UnsafeDatabaseFile` (a symbolic link, not a regular file, another user's),
    :class:`NotADatabase`, :class:`ForeignDatabase`, :class:`DatabaseTooNew`,
    :class:`DatabaseInUse` (an older version holds it alone), :class:`DatabaseBusy` or
    :class:`CannotOpenDatabase` without modifying the file.

    Cancellation: a checkpoint before opening; once the worker thread opens the file it is not
    abandoned, and the database is closed again when the cancellation reaches the block. Closing
    is shielded.
    """
    if synchronous not in ("normal", "full", "extra"):
        raise ValueError(f"synchronous must be 'normal', 'full' or 'extra', got {synchronous!r}")
    _check_readers(readers)
    finite_seconds("lease", lease)
    if busy is not None and not isinstance(busy, BusyPolicy):
        raise TypeError(f"busy must be a BusyPolicy or None, got {type(busy).__name__}")
    name = database_path(path)
    # Not abandoned once started (``to_thread`` waits for the thread): a cancellation arriving
    # meanwhile is raised by the ``yield``'s first checkpoint, and the ``finally`` closes it.
    policy = busy or BusyPolicy()
    opened = await trio.to_thread.run_sync(_open_sync, name, synchronous, policy)
    database = SqliteDatabase(
        name,
        opened.conn,
        opened.lock,
        synchronous=synchronous,
        readers=readers,
        identity=opened.identity,
        busy=policy,
        alone=opened.alone,
        recovered=opened.recovered,
        lease=lease,
    )
    if any(opened.recovered.values()):
        log_debug("recovered after processes that ended", **opened.recovered)
    try:
        yield database
    finally:
        await database.aclose()
