"""Storage: the database the persistent capabilities share, and the Conversation Log on it
(history survives a restart). Every capability speaks to a :class:`Database` (``_port``: work functions
of a :class:`Connection`, run in a write transaction or on a read snapshot), never to an engine;
two implement it:

* **SQLite** — one machine, any number of processes on one file. ``capabilities.sqlite_storage(
  path)`` opens it and puts every persistent capability on it; ``async with open_database(path)
  as db`` opens it alone (for ``capabilities.durable``'s queue and worker, or a tool of your
  own). See ``_database`` for the threads, the journal, ``synchronous`` and what a crash can lose.
* **PostgreSQL** — any number of processes on any number of machines.
  ``capabilities.postgres_storage(url)`` and ``async with open_postgres(url) as db`` (the
  ``postgres`` extra; imported on first use). See ``_postgres`` for the connections, the
  isolation and the retries.

Processes share a database: their writes take turns (SQLite's write lock; PostgreSQL's
serializable transactions), and a conversation's **lane** (``_lanes``) keeps two runs of it from
going at once, wherever they run.

Every error is a :class:`StorageError`. Those exported here are the ones a person can act on:
the path cannot be opened (:class:`CannotOpenDatabase`), what is there is unsafe to open
(:class:`UnsafeDatabaseFile`), a process of an older version holds it alone
(:class:`DatabaseInUse`), a newer effectagent wrote it (:class:`DatabaseTooNew`), another
process kept the write lock longer than a write waits (:class:`DatabaseBusy`), a conversation
has a run going elsewhere (:class:`ConversationInUse`), a run lost its conversation's lane to
another (:class:`LaneLost`). A file that is not a database, or is another application's, is a
``StorageError`` that says so. Whatever fails later — a read, a write, a damaged or too-new
record, a gap — is a ``StorageError`` too; in the Conversation Log it is also the engine's
``ConversationLogError``, which a run turns into a ``StorageFailed`` ending.

Media bytes put for input that was never recorded (a run that failed first, steering that
expired, a durable submission aborted) are swept when a process opens the database alone;
where no opener is ever alone, call :func:`sweep_media` now and then (``_sweep``).
"""

import typing as _typing

from ._busy import BusyPolicy as BusyPolicy
from ._database import SqliteDatabase as SqliteDatabase
from ._database import Synchronous as Synchronous
from ._database import open_database as open_database
from ._errors import CannotOpenDatabase as CannotOpenDatabase
from ._errors import ConversationInUse as ConversationInUse
from ._errors import DatabaseBusy as DatabaseBusy
from ._errors import DatabaseInUse as DatabaseInUse
from ._errors import DatabaseTooNew as DatabaseTooNew
from ._errors import LaneLost as LaneLost
from ._errors import StorageError as StorageError
from ._errors import UnsafeDatabaseFile as UnsafeDatabaseFile
from ._log import SqliteConversationLog as SqliteConversationLog
from ._port import Connection as Connection
from ._port import Cursor as Cursor
from ._port import Database as Database
from ._port import DatabaseService as DatabaseService
from ._port import Dialect as Dialect
from ._sweep import sweep_media as sweep_media

if _typing.TYPE_CHECKING:
    from ._postgres import PostgresDatabase as PostgresDatabase
    from ._postgres import open_postgres as open_postgres
    from ._postgres_layout import ForeignSchema as ForeignSchema
    from ._postgres_names import SchemaInUse as SchemaInUse

#: The PostgreSQL names, imported on first use (psycopg is the ``postgres`` extra's).
_POSTGRES = {
    "ForeignSchema": "._postgres_layout",
    "PostgresDatabase": "._postgres",
    "SchemaInUse": "._postgres_names",
    "open_postgres": "._postgres",
}


def __getattr__(name: str) -> object:
    home = _POSTGRES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(home, __name__), name)
    globals()[name] = value
    return value


__all__ = [
    "BusyPolicy",
    "CannotOpenDatabase",
    "ConversationInUse",
    "Connection",
    "Cursor",
    "Database",
    "DatabaseBusy",
    "DatabaseInUse",
    "DatabaseTooNew",
    "Dialect",
    "ForeignSchema",
    "LaneLost",
    "PostgresDatabase",
    "SchemaInUse",
    "SqliteConversationLog",
    "SqliteDatabase",
    "DatabaseService",
    "StorageError",
    "Synchronous",
    "UnsafeDatabaseFile",
    "open_database",
    "open_postgres",
    "sweep_media",
]
