"""Storage: the SQLite database the persistent capabilities share, and the Conversation Log on it
(deployment class P). See ``_database`` for the threads, the journal, ``synchronous`` and what a
crash can lose.

``capabilities.sqlite_storage(path)`` opens the database and puts every persistent capability on
it. Every error is a :class:`StorageError`. Those exported here are the ones opening a database
meets that a person can act on: the path cannot be opened (:class:`CannotOpenDatabase`), what is
there is unsafe to open (:class:`UnsafeDatabaseFile`), another process holds it
(:class:`DatabaseInUse`), a newer effectagent wrote it (:class:`DatabaseTooNew`). A file that is
not a database, or is another application's, is a ``StorageError`` that says so. Whatever fails
later — a read, a write, a damaged or too-new record, a gap — is a ``StorageError`` too; in the
Conversation Log it is also the engine's ``ConversationLogError``, which a run turns into a
``StorageFailed`` ending.
"""

from ._database import SqliteDatabase as SqliteDatabase
from ._database import Synchronous as Synchronous
from ._errors import CannotOpenDatabase as CannotOpenDatabase
from ._errors import DatabaseInUse as DatabaseInUse
from ._errors import DatabaseTooNew as DatabaseTooNew
from ._errors import StorageError as StorageError
from ._errors import UnsafeDatabaseFile as UnsafeDatabaseFile
from ._layers import SqliteDatabaseService as SqliteDatabaseService

__all__ = [
    "CannotOpenDatabase",
    "DatabaseInUse",
    "DatabaseTooNew",
    "SqliteDatabase",
    "SqliteDatabaseService",
    "StorageError",
    "Synchronous",
    "UnsafeDatabaseFile",
]
