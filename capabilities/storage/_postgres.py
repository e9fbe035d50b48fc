"""A PostgreSQL database behind the storage port (``_port``): many processes, on many machines.

Module notes
------------
* **Threads, not an async driver.** psycopg 3's blocking connections, from a
  ``psycopg_pool.ConnectionPool``, are driven from Trio worker threads
  (``trio.to_thread.run_sync``): one thread holds one connection for the whole of one work
  function — its transaction, its retries — and gives it back. A work function is plain
  synchronous code of the port (the same as on SQLite), so it must run somewhere that may block;
  psycopg's async API speaks asyncio, not Trio; and a thread per transaction keeps a connection
  in exactly one transaction at a time with nothing to interleave. Threads are bounded by the
  pool's size (a ``trio.CapacityLimiter``), so a burst of writes queues in Trio, cancellable,
  rather than in threads.
* **Every connection** is in ``autocommit=False`` mode with the schema alone on its
  ``search_path`` and ``application_name`` the URL's, else ``effectagent``. (One transaction
  and its attempts — the adapter, the retries — are ``_postgres_attempts``.) Statements use ``?`` placeholders,
  turned into psycopg's ``%s`` (once per statement text); a statement whose text holds ``%`` is
  refused with ``ValueError`` — values are always parameters.
* **Writes** run each in a transaction of its own at ``SERIALIZABLE`` isolation: whatever runs
  at once, the outcome is that of some serial order, which is what the code above the port
  assumes (on SQLite every write transaction is serial) — unless a work function lowers its own
  transaction's level as its first statement (the durable claim of free lanes, under row locks). When the server reports a serialization
  failure (SQLSTATE 40001) or a deadlock (40P01) — at any statement or at ``COMMIT`` — the
  transaction was rolled back, and the work runs again from the start after a short wait; a
  connection that dropped before ``COMMIT`` was sent is thrown away and the work runs again on
  another. Waits between attempts grow with jitter (``BusyPolicy``); no attempt starts once
  ``retry.bound`` seconds (10 by default) have passed since the first, and a write still in
  conflict then fails with :class:`DatabaseBusy`, nothing written. A unique constraint that
  refuses a row (23505) may mean a concurrent transaction added it after this one's snapshot —
  the server does not always say so with 40001 — so such a write runs again too, at most
  ``_DUPLICATE_RETRIES`` times: a newer snapshot sees the other's row, while a true duplicate
  fails each time and ends as :class:`WriteFailed`. A connection that fails *during* ``COMMIT``
  leaves the outcome unknown: :class:`WriteFailed` says so, and it is never retried. Other
  driver errors are :class:`WriteFailed` with the server's message (never the values: only its
  primary line, not its detail). ``weight`` and ``single_statement`` are hints for SQLite's group
  commit: accepted and ignored here (each write is its own transaction).
* **Reads** run in a ``REPEATABLE READ READ ONLY`` transaction: one snapshot for the whole work
  function. A read whose connection dropped runs once more on another.
* **Layout.** See ``_postgres_layout``: the tables live in a schema of their own (``effectagent``
  by default; two schemas are two independent stores), recognised by their
  ``effectagent_layout`` table, created and upgraded by whoever opens first.
* **Alone or not.** See ``_postgres_lock``: as the SQLite lock file does (``_database``), a
  session-level advisory lock keyed by the schema says who is there. An opener that can take it
  exclusively is alone — every pending state, queued steering input and plain run's lane was left
  by processes that ended — and cleans up (``_recovery``) before it shares the lock like every
  other opener. The lock is held on a connection of its own for the database's lifetime (the
  server drops it when the connection closes or the process dies), checked every
  :data:`LOCK_CHECK` seconds and taken again — shared — when its connection was lost.
* **Passwords** never reach an error or a log: the database is named by where it is only
  (host, port, database, user: ``_postgres_names``).
"""

from __future__ import annotations

import re
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Final, TypeVar, final
from urllib.parse import unquote, urlsplit

import attrs
import psycopg
import psycopg_pool
import trio
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict
from psycopg.pq import Conninfo

from .._logging import log_debug, log_warning
from ._busy import BusyPolicy, finite_seconds
from ._errors import (
    CannotOpenDatabase,
    StorageClosed,
)
from ._holds import RunHolds
from ._lanes import DEFAULT_LEASE, Lanes, holder_id
from ._port import Connection, Dialect
from ._postgres_attempts import Conn, read, write
from ._postgres_layout import prepare
from ._postgres_listen import Listener, channel, waking
from ._postgres_lock import CONNECT_TIMEOUT, OpenersLock
from ._postgres_names import (
    Names,
    SchemaInUse,
    check_schema,
    failure_kind,
    lock_key,
    redact_url,
    url_passwords,
)
from ._recovery import recover
from ._wakeups import WakeUps

__all__ = [
    "PostgresDatabase",
    "SchemaInUse",
    "check_arguments",
    "check_schema",
    "failure_kind",
    "open_postgres",
    "redact_url",
]

R = TypeVar("R")


#: The ``application_name`` of every connection.
APPLICATION_NAME: Final = "effectagent"

#: A clock this many seconds away from the server's is logged at open (see ``clock_skew``).
CLOCK_SKEW_WARNING: Final = 1.0

#: Seconds between two checks that the openers' lock is still held.
LOCK_CHECK: Final = 5.0


# ---- the database --------------------------------------------------------------------------------


@final
class PostgresDatabase:
    """An open PostgreSQL store (see the module notes): :meth:`write` and :meth:`read` run work
    functions on pooled connections in worker threads.

    Made by :func:`open_postgres`. Satisfies ``_port.Database`` with :attr:`dialect`
    ``"postgresql"``."""

    __slots__ = (
        "_closed",
        "_closing",
        "_done",
        "_in_flight",
        "_keeper_done",
        "_limiter",
        "_listener",
        "_lock",
        "_names",
        "_pool",
        "_stop_keeping",
        "alone",
        "clock_skew",
        "holder_id",
        "holds",
        "lock_check",
        "recovered",
        "retry",
        "schema",
    )

    def __init__(
        self,
        pool: psycopg_pool.ConnectionPool[Conn],
        lock: OpenersLock,
        *,
        schema: str,
        names: Names,
        pool_size: int,
        retry: BusyPolicy,
        lease: float = DEFAULT_LEASE,
    ) -> None:
        self._pool = pool
        self._lock = lock
        #: Seconds between two checks that the openers' lock is still held (see
        #: ``_postgres_lock``).
        self.lock_check = LOCK_CHECK
        self._stop_keeping = trio.Event()
        self._keeper_done: trio.Event | None = None
        self._names = names
        self.schema = schema
        #: How long a write runs again after conflicts or dropped connections, in all.
        self.retry = retry
        #: Who this opening of the database is, in lanes it holds: ``pid-<pid>-<random>``.
        self.holder_id = holder_id()
        #: Whether no other process had the schema open when this one opened it (it recovered).
        self.alone = False
        #: What the open-time recovery changed (see ``_recovery``): counts by kind.
        self.recovered: Mapping[str, int] = {}
        #: How far the server's clock was ahead of this machine's at open, in seconds. Leases
        #: are wall-clock times compared on each machine: workers on machines whose clocks
        #: differ by a good part of a lease take over each other's lanes early or late.
        self.clock_skew = 0.0
        #: The lanes this database holds for its plain runs (see ``_holds``).
        self.holds = RunHolds(self, lease=lease)
        self._limiter = trio.CapacityLimiter(max(1, pool_size))
        self._in_flight = 0
        self._done: trio.Event | None = None
        self._closing = False
        self._closed = False
        #: Who counts this schema's wake-ups (``_postgres_listen``); set by ``open_postgres``.
        self._listener: Listener | None = None

    @property
    def dialect(self) -> Dialect:
        """``"postgresql"``."""
        return "postgresql"

    @property
    def in_memory(self) -> bool:
        """False: everything is in the server."""
        return False

    @property
    def where(self) -> str:
        """The database and schema, as errors name them (no password)."""
        return self._names.where

    @property
    def names(self) -> Names:
        """How errors name this database (:attr:`where`) and the passwords they never show."""
        return self._names

    def wake_listener(self) -> Listener:
        """The listener of this schema's wake-ups (``_postgres_listen``): others listen to other
        channels of the same server as it does (``Listener.sibling``). Raises
        :class:`StorageClosed` once the database closes."""
        if self._listener is None or self._closing:
            raise StorageClosed()
        return self._listener

    @property
    def lanes(self) -> Lanes:
        """Claim, renew and release lanes as this database's holder (see ``_lanes``), with the
        lease its plain runs use."""
        return Lanes(self, lease=self.holds.lease)

    # ---- writes -----------------------------------------------------------------------------

    async def write(
        self,
        work: Callable[[Connection], R],
        *,
        weight: int = 1,
        single_statement: bool = False,
        wake: bool = False,
    ) -> R:
        """Run ``work`` in a ``SERIALIZABLE`` transaction of its own and return its result (see
        the module notes: it may run more than once). Driver errors become :class:`WriteFailed`
        (:class:`DatabaseBusy` when conflicts outlast ``retry.bound``); what ``work`` raises
        otherwise propagates, nothing of it written. ``weight`` and ``single_statement`` are
        accepted and ignored. ``wake``: the transaction also notifies the schema's listeners
        (``NOTIFY``, delivered only if it commits: see ``_postgres_listen``).

        Cancellation: raises ``Cancelled`` only if nothing of ``work`` was committed — before its
        thread starts, or between two attempts; an attempt that runs is waited for, and its
        result returned once committed.
        """
        if wake:
            work = waking(work, channel(self.schema))
        return await self._in_thread(self._write_sync, work)

    async def listen(self) -> WakeUps:
        """Listen for this schema's wake-ups, from any process (``LISTEN`` on a connection of
        its own, from the first call until the database closes) and return their count.

        Cancellation: a checkpoint; once connecting started, it finishes."""
        if self._closed or self._listener is None:
            raise StorageClosed()
        await self._listener.start()
        return self._listener.wake_ups

    def _write_sync(self, work: Callable[[Connection], R]) -> R:
        return write(self._pool, work, self.retry, self._names, cancellable=True)

    # ---- reads ------------------------------------------------------------------------------

    async def read(self, work: Callable[[Connection], R]) -> R:
        """Run ``work`` on one snapshot (``REPEATABLE READ READ ONLY``) and return its result;
        driver errors become :class:`ReadFailed`; what ``work`` raises otherwise propagates. A
        read whose connection dropped runs once more on another.

        Cancellation: a checkpoint before the read starts; a read that started is waited for.
        """
        return await self._in_thread(self._read_sync, work)

    def _read_sync(self, work: Callable[[Connection], R]) -> R:
        return read(self._pool, work, self._names, self.retry.bound)

    async def _in_thread(
        self, run: Callable[[Callable[[Connection], R]], R], work: Callable[[Connection], R]
    ) -> R:
        await trio.lowlevel.checkpoint_if_cancelled()
        if self._closed:
            raise StorageClosed()
        self._in_flight += 1
        try:
            return await trio.to_thread.run_sync(run, work, limiter=self._limiter)
        finally:
            self._in_flight -= 1
            if self._in_flight == 0 and self._done is not None:
                self._done.set()

    # ---- closing ----------------------------------------------------------------------------

    async def aclose(self) -> None:
        """Let the lanes still held go, wait for the work in flight, close every connection
        (which lets the schema's lock go). Idempotent.

        Cancellation: shielded (work in flight belongs to tasks that wait for it)."""
        if self._closing:
            return
        self._closing = True
        with trio.CancelScope(shield=True):
            await self.holds.aclose()  # writes the releases: before new work is refused
            self._closed = True
            if self._listener is not None:
                await self._listener.aclose()
            self._stop_keeping.set()
            if self._keeper_done is not None:
                await self._keeper_done.wait()
            while self._in_flight:
                self._done = trio.Event()
                await self._done.wait()
            await trio.to_thread.run_sync(self._close_sync)

    def _close_sync(self) -> None:
        self._pool.close()
        self._lock.close()

    # ---- the openers' lock ------------------------------------------------------------------

    def keep_lock(self) -> None:
        """Start checking, every :attr:`lock_check` seconds until it closes, that this database
        still holds the openers' lock, taking it again when its connection was lost (a system
        task; see ``_postgres_lock``)."""
        if self._keeper_done is None and not self._closing:
            self._keeper_done = trio.Event()
            trio.lowlevel.spawn_system_task(self._keep_lock, name="effectagent openers' lock")

    async def _keep_lock(self) -> None:
        """The keeper's loop (a system task: it never raises but ``Cancelled``)."""
        try:
            while not self._stop_keeping.is_set():
                with trio.move_on_after(self.lock_check):
                    await self._stop_keeping.wait()
                if self._stop_keeping.is_set():
                    break
                await self.check_lock()
        finally:
            if self._keeper_done is not None:
                self._keeper_done.set()

    async def check_lock(self) -> bool:
        """Check once that the openers' lock is held; take it again if its connection was lost.
        Returns whether it had to (never raises: a failure is logged).

        Cancellation: the check runs in a worker thread and is waited for (a few seconds at
        most: a round trip, or a new connection and a bounded wait for the lock)."""
        return await trio.to_thread.run_sync(self._lock.check)

    @property
    def lock_backend_pid(self) -> int:
        """The server process holding this database's share of the openers' lock."""
        return self._lock.backend_pid


# ---- opening -------------------------------------------------------------------------------------


def _configure(schema: str) -> Callable[[Conn], None]:
    def configure(conn: Conn) -> None:
        conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(schema)))
        conn.commit()

    return configure


@attrs.frozen
class _Opened:
    pool: psycopg_pool.ConnectionPool[Conn]
    lock: OpenersLock
    alone: bool
    recovered: Mapping[str, int]
    skew: float


def _open_sync(
    url: str,
    schema: str,
    names: Names,
    pool_size: int,
    policy: BusyPolicy,
    extra: Sequence[str],
) -> _Opened:
    lock = OpenersLock(url, lock_key(schema), names, policy)
    # The first connection may take a while on a loaded machine or across a network: the open
    # waits for it as long as the openers' lock waits to connect, or the retry bound if that is
    # longer (a bound meant for conflicts is no connect timeout).
    connect_wait = max(policy.bound, CONNECT_TIMEOUT)
    conn = lock.connect()
    pool: psycopg_pool.ConnectionPool[Conn] | None = None
    try:
        changed = prepare(conn, schema, names.where, extra=extra)
        if changed:
            log_debug("laid out the schema", schema=schema)
        pool = psycopg_pool.ConnectionPool(
            url,
            # The URL's own application_name, when it gives one, names the workers apart in
            # pg_stat_activity; else "effectagent".
            kwargs={
                "autocommit": False,
                "application_name": conninfo_to_dict(url).get("application_name")
                or APPLICATION_NAME,
            },
            min_size=1,
            max_size=max(1, pool_size),
            configure=_configure(schema),
            open=False,
            name=f"effectagent-{schema}",
            timeout=policy.bound,
            num_workers=2,
        )
        pool.open(wait=True, timeout=connect_wait)
        skew = clock_skew(pool)
        alone = lock.take_alone()
        recovered: Mapping[str, int] = {}
        if alone:
            recovered = write(pool, recover, policy, names, cancellable=False)
            lock.share_after_recovery()  # others may come in now
        else:
            lock.share()
    except BaseException as exc:
        if pool is not None:
            pool.close()
        lock.close()
        if isinstance(exc, psycopg_pool.PoolTimeout):
            raise CannotOpenDatabase(
                names.where, f"no connection could be made within {connect_wait:g} s"
            ) from None
        if isinstance(exc, psycopg.Error):
            raise CannotOpenDatabase(names.where, names.reason(exc)) from None
        raise
    return _Opened(pool, lock, alone, recovered, skew)


def clock_skew(
    pool: psycopg_pool.ConnectionPool[Conn], clock: Callable[[], float] = time.time
) -> float:
    """How far the server's clock is ahead of ``clock``, in seconds (the midpoint of the round
    trip taken as the moment the server read its clock)."""
    with pool.connection() as conn:
        before = clock()
        found = conn.execute("SELECT extract(epoch FROM clock_timestamp())").fetchone()
        after = clock()
    assert found is not None
    return float(found[0]) - (before + after) / 2


#: A query parameter's name as a message shows it: a plain word (anything else might be a
#: password typed in the wrong place).
_PARAMETER: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")


def url_problem(url: str) -> str | None:
    """What libpq refuses in the PostgreSQL URL ``url``, as the end of a sentence that quotes
    none of its values — a query parameter it does not take, named if its name reads as one and
    is not the URL's password or a value in it; a query it cannot read — or None. (libpq's own
    message quotes the string, password and all.)"""
    try:
        conninfo_to_dict(url)
        return None
    except psycopg.Error:
        pass
    try:
        parts = urlsplit(url)
    except ValueError:
        parts = None
    if parts is None or parts.scheme not in ("postgresql", "postgres"):
        return "is neither a postgresql:// URL nor a libpq connection string"
    known = {option.keyword.decode() for option in Conninfo.get_defaults()}
    password = parts.netloc.rpartition("@")[0].partition(":")[2]
    pairs = [piece.partition("=") for piece in parts.query.split("&")]
    hidden = {password, unquote(password), *(unquote(setting) for _, _, setting in pairs)}
    for raw, equals, setting in pairs:
        name = unquote(raw)
        # (libpq reads ssl=true as sslmode=require, and no other value of ssl.)
        if not equals or not name or name in known or (name == "ssl" and setting == "true"):
            continue
        if _PARAMETER.fullmatch(name) and name not in hidden:
            return (
                f"has the query parameter {name!r}, which PostgreSQL does not take: see libpq's "
                "connection parameters (sslmode, connect_timeout, application_name, …)"
            )
        return (
            "has a query parameter PostgreSQL does not take (its name not shown: it might be a "
            "secret): see libpq's connection parameters (sslmode, connect_timeout, …)"
        )
    return (
        "is not a URL PostgreSQL can read (a query parameter without '=', or a bad %-escape, "
        "say): check how it is written"
    )


def check_arguments(url: object, schema: object, pool_size: object, lease: object) -> None:
    """Refuse what :func:`open_postgres` cannot open with, before connecting (and where a Layer
    is made): a ``url`` or ``schema`` not a str, a schema that is not a plain name, a
    ``pool_size`` not an int of at least 1, a ``lease`` not a finite, positive number."""
    if not isinstance(url, str):
        raise TypeError(f"url must be a str, got {type(url).__name__}")
    check_schema(schema)  # type: ignore[arg-type]  # it checks the type itself
    if type(pool_size) is not int:
        raise TypeError(f"pool_size must be an int, got {type(pool_size).__name__}")
    if pool_size < 1:
        raise ValueError(f"pool_size must be at least 1, got {pool_size!r}")
    finite_seconds("lease", lease)  # an infinite lease would hold a dead process's lanes


@asynccontextmanager
async def open_postgres(
    url: str,
    *,
    schema: str = "effectagent",
    lease: float = DEFAULT_LEASE,
    pool_size: int = 4,
    retry: BusyPolicy | None = None,
    extra_layout: Sequence[str] = (),
) -> AsyncIterator[PostgresDatabase]:
    """Open the effectagent store in ``schema`` of the PostgreSQL database at ``url`` (creating
    and laying out the schema if needed) and close it when the block ends. Any number of
    processes, on any number of machines, may have it open at once (see the module notes).

    ``pool_size`` is how many connections (and threads) its work uses at most; ``retry`` how
    long a write runs again after conflicts or dropped connections (default :class:`BusyPolicy`:
    10 s in all) — and how long opening waits for another opener that is cleaning up; ``lease``
    how long a plain run's hold of its conversation's lane lasts without renewal (``_holds``);
    ``extra_layout`` statements laid out with the tables in an empty schema (the search tables).

    Raises ``ValueError`` for a schema name that is not a plain identifier, a ``lease`` that is
    not a finite, positive number of seconds or a ``pool_size`` below 1 (``TypeError``: a ``url``
    or ``schema`` not a str, a ``pool_size`` not an int), before connecting;
    :class:`ForeignSchema` (another application's tables there), :class:`DatabaseTooNew`,
    :class:`SchemaInUse` or :class:`CannotOpenDatabase`, naming the database without its
    password, with nothing changed.

    Cancellation: a checkpoint before opening; once the worker thread opens the database it is
    not abandoned, and the database is closed again when the cancellation reaches the block.
    Closing is shielded.
    """
    check_arguments(url, schema, pool_size, lease)
    if retry is not None and not isinstance(retry, BusyPolicy):
        raise TypeError(f"retry must be a BusyPolicy or None, got {type(retry).__name__}")
    policy = retry or BusyPolicy()
    names = Names(f"{redact_url(url)} (schema {schema})", tuple(url_passwords(url)))
    problem = url_problem(url)
    if problem is not None:
        raise CannotOpenDatabase(names.where, f"it {problem}")
    await trio.lowlevel.checkpoint_if_cancelled()
    opened = await trio.to_thread.run_sync(
        _open_sync, url, schema, names, pool_size, policy, tuple(extra_layout)
    )
    database = PostgresDatabase(
        opened.pool,
        opened.lock,
        schema=schema,
        names=names,
        pool_size=pool_size,
        retry=policy,
        lease=lease,
    )
    database.alone = opened.alone
    database.recovered = dict(opened.recovered)
    database._listener = Listener(url, channel(schema))
    database.clock_skew = opened.skew
    if abs(opened.skew) > CLOCK_SKEW_WARNING:
        # Leases are wall-clock times each machine compares with its own clock.
        log_warning(
            "this machine's clock differs from the database server's",
            seconds=round(opened.skew, 1),
            advice="keep every worker machine's clock synchronised (NTP)",
        )
    database.keep_lock()
    if any(opened.recovered.values()):
        log_debug("recovered after processes that ended", **opened.recovered)
    try:
        yield database
    finally:
        await database.aclose()
