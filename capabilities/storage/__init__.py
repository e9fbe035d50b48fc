"""Storage: the SQLite database the persistent capabilities share, and the Conversation Log on it
(deployment class P). See ``_database`` for the threads, the journal, ``synchronous`` and what a
crash can lose."""

from ._codec import RECORD_SCHEMA_VERSION as RECORD_SCHEMA_VERSION
from ._codec import RecordCodec as RecordCodec
from ._database import MEMORY as MEMORY
from ._database import SqliteDatabase as SqliteDatabase
from ._database import Synchronous as Synchronous
from ._database import open_database as open_database
from ._errors import CannotOpenDatabase as CannotOpenDatabase
from ._errors import CorruptRecord as CorruptRecord
from ._errors import DatabaseInUse as DatabaseInUse
from ._errors import DatabaseTooNew as DatabaseTooNew
from ._errors import ForeignDatabase as ForeignDatabase
from ._errors import LogClosed as LogClosed
from ._errors import LogGap as LogGap
from ._errors import LogReadFailed as LogReadFailed
from ._errors import LogWriteFailed as LogWriteFailed
from ._errors import NotADatabase as NotADatabase
from ._errors import ReadFailed as ReadFailed
from ._errors import RecordNotEncodable as RecordNotEncodable
from ._errors import RecordReadError as RecordReadError
from ._errors import StorageClosed as StorageClosed
from ._errors import StorageError as StorageError
from ._errors import UnknownRecordVersion as UnknownRecordVersion
from ._errors import UnsafeDatabaseFile as UnsafeDatabaseFile
from ._errors import WriteFailed as WriteFailed
from ._group_commit import GroupCommit as GroupCommit
from ._layers import SqliteDatabaseService as SqliteDatabaseService
from ._layers import sqlite_database as sqlite_database
from ._layers import sqlite_log as sqlite_log
from ._layout import APPLICATION_ID as APPLICATION_ID
from ._layout import LAYOUT_VERSION as LAYOUT_VERSION
from ._log import SqliteConversationLog as SqliteConversationLog

__all__ = [
    "APPLICATION_ID",
    "CannotOpenDatabase",
    "CorruptRecord",
    "DatabaseInUse",
    "DatabaseTooNew",
    "ForeignDatabase",
    "GroupCommit",
    "LAYOUT_VERSION",
    "LogClosed",
    "LogGap",
    "LogReadFailed",
    "LogWriteFailed",
    "MEMORY",
    "NotADatabase",
    "RECORD_SCHEMA_VERSION",
    "ReadFailed",
    "RecordCodec",
    "RecordNotEncodable",
    "RecordReadError",
    "SqliteConversationLog",
    "SqliteDatabase",
    "SqliteDatabaseService",
    "StorageClosed",
    "StorageError",
    "Synchronous",
    "UnknownRecordVersion",
    "UnsafeDatabaseFile",
    "WriteFailed",
    "open_database",
    "sqlite_database",
    "sqlite_log",
]
