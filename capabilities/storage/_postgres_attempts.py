"""One PostgreSQL transaction, tried again: what ``_postgres`` runs in its worker threads.

* :func:`statement` — a statement's text with psycopg's placeholders (``?`` → ``%s``, cached);
  text holding ``%`` is refused (values are parameters).
* :class:`Adapter` — what a work function gets (``_port.Connection``).
* :func:`write` — a work function in a ``SERIALIZABLE`` transaction, run again while the
  server rolls it back for a conflict (or a duplicate key a concurrent transaction added after
  its snapshot) or its connection drops before ``COMMIT``, within a :class:`BusyPolicy`; a
  failure while committing is an unknown outcome, never run again (see ``_postgres``).
* :func:`read` — a work function on one ``REPEATABLE READ READ ONLY`` snapshot, run once more
  on another connection when its own dropped.
* :func:`connection` and :func:`rollback` — a pooled connection, and giving one back clean.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Final, TypeVar, final

import psycopg
import psycopg_pool
import trio
from psycopg import IsolationLevel
from psycopg.rows import TupleRow

from .._logging import log_debug
from ._busy import BusyPolicy
from ._errors import CommitOutcomeUnknown, DatabaseBusy, ReadFailed, StorageClosed, WriteFailed
from ._port import Connection
from ._postgres_names import Failure, Names, failure_kind

__all__ = [
    "DUPLICATE_RETRIES",
    "Adapter",
    "Conn",
    "connection",
    "driver_cause",
    "read",
    "rollback",
    "statement",
    "write",
]

R = TypeVar("R")

Conn = psycopg.Connection[TupleRow]

#: How many times a write refused for a duplicate key runs again before the duplicate is taken
#: for a true one (each time on a newer snapshot: see ``failure_kind``).
DUPLICATE_RETRIES: Final = 4


# ---- statements ----------------------------------------------------------------------------------

_translated: dict[str, bytes] = {}


def statement(text: str) -> bytes:
    """``text`` with psycopg's placeholders (cached per text)."""
    found = _translated.get(text)
    if found is None:
        if "%" in text:
            raise ValueError(
                "a statement's text contains '%': values are passed as parameters, never written "
                "into the statement"
            )
        found = text.replace("?", "%s").encode()
        if len(_translated) < 4096:
            _translated[text] = found
    return found


@final
class Adapter:
    """What a work function gets: ``execute`` / ``executemany`` with ``?`` placeholders,
    returning psycopg's cursor (``_port.Connection``)."""

    __slots__ = ("_conn",)

    #: The SQL dialect (``_port.dialect_of``).
    dialect: Final = "postgresql"

    def __init__(self, conn: Conn) -> None:
        self._conn = conn

    def execute(self, sql: str, parameters: Sequence[Any] = (), /) -> psycopg.Cursor[TupleRow]:
        return self._conn.execute(statement(sql), parameters)

    def executemany(
        self, sql: str, parameters: Iterable[Sequence[Any]], /
    ) -> psycopg.Cursor[TupleRow]:
        cursor = self._conn.cursor()
        cursor.executemany(statement(sql), parameters)
        return cursor


def driver_cause(exc: BaseException) -> psycopg.Error | None:
    """The driver error ``exc`` is, or was raised from (a work function may wrap one)."""
    seen = 0
    current: BaseException | None = exc
    while current is not None and seen < 8:
        if isinstance(current, psycopg.Error):
            return current
        current = current.__cause__ or current.__context__
        seen += 1
    return None


class _Again(Exception):
    """An attempt the server rolled back, or whose connection dropped: run the work again."""

    def __init__(self, kind: Failure, reason: str) -> None:
        super().__init__(reason)
        self.kind = kind
        self.reason = reason


def rollback(conn: Conn) -> None:
    try:
        if not conn.closed:
            conn.rollback()
    except psycopg.Error:
        conn.close()  # the pool replaces it


# ---- in the worker thread ------------------------------------------------------------------------


def connection(
    pool: psycopg_pool.ConnectionPool[Conn],
    timeout: float,
    names: Names,
    error: type[WriteFailed] | type[ReadFailed],
) -> Conn:
    try:
        return pool.getconn(timeout=timeout)
    except psycopg_pool.PoolClosed:
        raise StorageClosed() from None
    except psycopg_pool.PoolTimeout:
        raise error(f"no connection to the server could be had within {timeout:.0f} s") from None


def _attempt(
    pool: psycopg_pool.ConnectionPool[Conn],
    work: Callable[[Connection], R],
    names: Names,
    timeout: float,
) -> R:
    """One attempt of a write; raises :class:`_Again` when it may run again."""
    conn = connection(pool, timeout, names, WriteFailed)
    try:
        conn.isolation_level = IsolationLevel.SERIALIZABLE
        conn.read_only = False
        try:
            result = work(Adapter(conn))
        except BaseException as exc:
            rollback(conn)
            cause = driver_cause(exc)
            if cause is not None:
                kind = failure_kind(cause.sqlstate, conn.broken, committing=False)
                if kind in ("conflict", "duplicate", "reconnect"):
                    raise _Again(kind, names.reason(cause)) from None
            if isinstance(exc, psycopg.Error):
                raise WriteFailed(names.reason(exc)) from None
            raise
        try:
            conn.commit()
        except psycopg.Error as exc:
            kind = failure_kind(exc.sqlstate, conn.broken, committing=True)
            rollback(conn)
            if kind in ("conflict", "duplicate"):
                raise _Again(kind, names.reason(exc)) from None
            if kind == "unknown":
                raise CommitOutcomeUnknown(
                    f"the connection failed while the transaction was committing "
                    f"({names.reason(exc)}): whether it was written is unknown"
                ) from None
            raise WriteFailed(names.reason(exc)) from None
        return result
    finally:
        pool.putconn(conn)


def write(
    pool: psycopg_pool.ConnectionPool[Conn],
    work: Callable[[Connection], R],
    policy: BusyPolicy,
    names: Names,
    *,
    cancellable: bool,
) -> R:
    """Run ``work`` in a ``SERIALIZABLE`` transaction, again while the server rolls it back for
    a conflict or its connection drops, within ``policy`` (see the module notes): attempts and
    waits together last about ``policy.bound`` seconds at most, the last attempt included."""
    delays = policy.delays(random.Random())
    started = time.monotonic()
    duplicates = 0
    while True:
        if cancellable:
            trio.from_thread.check_cancelled()  # between attempts nothing is committed
        left = policy.bound - (time.monotonic() - started)
        try:
            return _attempt(pool, work, names, max(left, 0.5))
        except _Again as again:
            spent = time.monotonic() - started
            if again.kind == "duplicate":
                duplicates += 1
                if duplicates > DUPLICATE_RETRIES:  # each new snapshot met it: a true one
                    raise WriteFailed(again.reason) from None
            wait = next(delays, None)
            if wait is None or spent + wait > policy.bound:
                if again.kind == "duplicate":
                    raise WriteFailed(again.reason) from None
                if again.kind == "conflict":
                    raise DatabaseBusy(round(spent, 3), conflicts=True) from None
                raise WriteFailed(
                    f"the connection to the server kept dropping for {spent:.1f} s ({again.reason})"
                ) from None
            log_debug("write runs again", why=again.kind)
        time.sleep(wait)


def read(
    pool: psycopg_pool.ConnectionPool[Conn],
    work: Callable[[Connection], R],
    names: Names,
    timeout: float,
) -> R:
    """Run ``work`` on one snapshot; once more on another connection when its own dropped.
    Driver errors become :class:`ReadFailed`; what ``work`` raises otherwise propagates."""
    attempt = 1
    while True:
        conn = connection(pool, timeout, names, ReadFailed)
        try:
            conn.isolation_level = IsolationLevel.REPEATABLE_READ
            conn.read_only = True
            try:
                result = work(Adapter(conn))
            except BaseException as exc:
                rollback(conn)
                if driver_cause(exc) is not None and conn.broken and attempt == 1:
                    attempt += 1
                    continue
                if isinstance(exc, psycopg.Error):
                    raise ReadFailed(names.reason(exc)) from None
                raise
            rollback(conn)  # a read-only snapshot: nothing to commit
            return result
        finally:
            pool.putconn(conn)
