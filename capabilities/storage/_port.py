"""The storage port: what every persistent capability needs from a database, whichever engine
holds it.

The Conversation Log, sessions, agent state, steering, the durable runtime and ``serve`` speak to
a :class:`Database` and nothing else. Two implementations exist: SQLite (``_database``: one
machine, any number of processes) and PostgreSQL (``_postgres``: many processes on many
machines). Code above the port never asks which one it got, with two narrow exceptions that are
part of the contract: :attr:`Database.dialect` names the SQL dialect for the few statements whose
text must differ (the search index, a JSON update), and :func:`driver_error` recognises either
driver's errors.

A *work function* is a plain function of a :class:`Connection`, run in a worker thread:

* ``write(work)`` runs it inside a write transaction. It is all or nothing: when it raises,
  nothing it did is committed. **It may run more than once**: PostgreSQL runs every write at
  ``SERIALIZABLE`` isolation and runs a write again, from the start, when the server reports a
  serialization failure or a deadlock — so work functions compute everything from what they read
  and have no effect outside the database. (One work function may lower its own transaction's
  isolation as its first statement, when row locks make it correct without — the durable
  claim of free lanes does, with ``SKIP LOCKED``: see ``capabilities.durable._store``.)
* ``read(work)`` runs it on a consistent snapshot; it must not write.

**Wake-ups** (``_wakeups``): a write that may give a waiting worker something to do is made with
``wake=True``; :meth:`Database.listen` counts those that committed — on PostgreSQL from any
process (``NOTIFY`` in the write's own transaction, ``LISTEN`` on a connection of its own), on
SQLite from this opened database only. A hint, never a promise: waiters poll as well.

SQL is written once, in the subset both engines accept: ``?`` placeholders (the PostgreSQL
connection turns them into its own), ``INSERT … ON CONFLICT … DO NOTHING / DO UPDATE SET
… = excluded.…``, ``RETURNING``, integers for booleans, ``REAL`` seconds for times, ``TEXT``
JSON bodies decoded in Python. A literal ``?`` or ``%`` never appears in statement text (values
are always parameters).
"""

from __future__ import annotations

import sqlite3
import sys
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final, Literal, Protocol, TypeVar

from effectagent.effect import ServiceKey

if TYPE_CHECKING:
    from ._holds import RunHolds
    from ._lanes import Lanes
    from ._wakeups import WakeUps

__all__ = [
    "Connection",
    "Cursor",
    "Database",
    "DatabaseService",
    "NO_LIMIT",
    "Dialect",
    "dialect_of",
    "driver_error",
]

R = TypeVar("R")

#: A ``LIMIT`` both engines read as "every row" (SQLite's ``-1`` is an error in PostgreSQL).
NO_LIMIT: Final = 2**63 - 1

#: The SQL dialect of a database.
Dialect = Literal["sqlite", "postgresql"]


class Cursor(Protocol):
    """The result of one statement: rows as tuples, and how many rows it changed."""

    @property
    def rowcount(self) -> int: ...

    def fetchone(self) -> Any: ...

    def fetchall(self) -> list[Any]: ...

    def __iter__(self) -> Iterator[Any]: ...

    def close(self) -> None: ...


class Connection(Protocol):
    """What a work function is given: statements with ``?`` placeholders."""

    def execute(self, sql: str, parameters: Sequence[Any] = ..., /) -> Cursor: ...

    def executemany(self, sql: str, parameters: Iterable[Sequence[Any]], /) -> Cursor: ...


class Database(Protocol):
    """An open database the persistent capabilities share (see the module notes)."""

    @property
    def dialect(self) -> Dialect:
        """The SQL dialect: ``"sqlite"`` or ``"postgresql"``."""
        ...

    @property
    def holder_id(self) -> str:
        """Who this opening of the database is, in the lanes it holds
        (``pid-<pid>-<random>``)."""
        ...

    @property
    def alone(self) -> bool:
        """Whether no other process had the database open when this one opened it (then it
        cleaned up after processes that ended: :attr:`recovered`)."""
        ...

    @property
    def recovered(self) -> Mapping[str, int]:
        """What the open-time recovery changed, counts by kind (empty unless :attr:`alone`)."""
        ...

    @property
    def in_memory(self) -> bool:
        """Whether nothing of it survives the process."""
        ...

    @property
    def holds(self) -> RunHolds:
        """The lanes this database holds for its plain runs."""
        ...

    @property
    def lanes(self) -> Lanes:
        """Claim, renew and release lanes as this database's holder."""
        ...

    def write(
        self,
        work: Callable[[Connection], R],
        *,
        weight: int = 1,
        single_statement: bool = False,
        wake: bool = False,
    ) -> Awaitable[R]:
        """Run ``work`` in a write transaction and return its result; ``weight`` is about how
        many rows it writes, ``single_statement`` says it changes the database with one statement
        at most, its last (hints an engine may use). Errors of the driver become
        ``WriteFailed``; what ``work`` raises otherwise propagates, nothing of it written.
        ``wake``: it may give a waiting worker work — a wake-up is counted by :meth:`listen`
        once it commits, never if it does not (see the module notes).

        Cancellation: raises ``Cancelled`` only if nothing of ``work`` was committed; once its
        transaction runs, it is waited for and its result returned."""
        ...

    async def listen(self) -> WakeUps:
        """Start counting wake-ups (idempotent) and return their count: every write made with
        ``wake=True`` that commits after this returns is counted — on PostgreSQL from any
        process, on SQLite from this opened database only.

        Cancellation: a checkpoint; once listening started, it goes on until :meth:`aclose`."""
        ...

    def read(self, work: Callable[[Connection], R]) -> Awaitable[R]:
        """Run ``work`` on a consistent snapshot and return its result; errors of the driver
        become ``ReadFailed``.

        Cancellation: a checkpoint before the read starts; a read that started is waited for."""
        ...

    async def aclose(self) -> None:
        """Write what is queued, wait for reads in flight, let go of every connection.
        Idempotent; shielded from cancellation."""
        ...


#: The service key of the database the persistent capabilities share (SQLite or PostgreSQL).
DatabaseService: Final[ServiceKey[Database]] = ServiceKey(
    "capabilities.Database", "the database of the persistent capabilities"
)


def dialect_of(conn: Connection) -> Dialect:
    """The SQL dialect of the connection a work function was given (for the few statements whose
    text differs between the engines)."""
    if isinstance(conn, sqlite3.Connection):
        return "sqlite"
    dialect: Dialect = getattr(conn, "dialect")  # noqa: B009 - the PostgreSQL adapter's attribute
    return dialect


def driver_error(exc: BaseException) -> bool:
    """Whether ``exc`` is an error of a database driver (``sqlite3`` or ``psycopg``): a failed
    statement rather than a decision of the code above it. (psycopg is not imported here: when
    nothing imported it, none of its errors can exist.)"""
    if isinstance(exc, sqlite3.Error):
        return True
    psycopg = sys.modules.get("psycopg")
    return psycopg is not None and isinstance(exc, psycopg.Error)
