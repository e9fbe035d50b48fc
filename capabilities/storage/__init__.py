"""Storage: the SQLite database the persistent capabilities share, and the Conversation Log on it
(deployment class P). See ``_database`` for the threads, the journal, ``synchronous`` and what a
crash can lose.

``capabilities.sqlite_storage(path)`` opens the database and puts every persistent capability on
it; ``async with open_database(path) as db`` opens it alone (for ``capabilities.durable``'s
queue and worker, or a tool of your own). Processes share a database file: each opens it, their
writes take turns (see ``_database``), and a conversation's **lane** (``_lanes``) keeps two runs
of it from going at once.

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
"""

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
    "LaneLost",
    "SqliteConversationLog",
    "SqliteDatabase",
    "DatabaseService",
    "StorageError",
    "Synchronous",
    "UnsafeDatabaseFile",
    "open_database",
]
