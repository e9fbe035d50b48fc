"""Sessions (spec §3): named records pointing to conversations, with schema-versioned metadata and
optimistic revisions — in memory or in the SQLite database. A session is never a conversation's
history; the Conversation Log is."""

from ._layers import in_memory_sessions as in_memory_sessions
from ._layers import sqlite_sessions as sqlite_sessions
from ._memory import InMemorySessionStore as InMemorySessionStore
from ._model import MAX_CONVERSATIONS as MAX_CONVERSATIONS
from ._model import MAX_NAME_CHARS as MAX_NAME_CHARS
from ._model import CorruptSession as CorruptSession
from ._model import JSONObject as JSONObject
from ._model import Session as Session
from ._model import SessionConflict as SessionConflict
from ._model import SessionCreate as SessionCreate
from ._model import SessionExists as SessionExists
from ._model import SessionInvalid as SessionInvalid
from ._model import SessionMetadataTooLarge as SessionMetadataTooLarge
from ._model import SessionNotFound as SessionNotFound
from ._model import SessionPatch as SessionPatch
from ._model import SessionSchema as SessionSchema
from ._model import SessionStore as SessionStore
from ._model import SessionStoreError as SessionStoreError
from ._model import SessionStoreService as SessionStoreService
from ._model import SessionStoreUnavailable as SessionStoreUnavailable
from ._model import UnknownSessionVersion as UnknownSessionVersion
from ._sqlite import SqliteSessionStore as SqliteSessionStore

__all__ = [
    "CorruptSession",
    "InMemorySessionStore",
    "JSONObject",
    "MAX_CONVERSATIONS",
    "MAX_NAME_CHARS",
    "Session",
    "SessionConflict",
    "SessionCreate",
    "SessionExists",
    "SessionInvalid",
    "SessionMetadataTooLarge",
    "SessionNotFound",
    "SessionPatch",
    "SessionSchema",
    "SessionStore",
    "SessionStoreError",
    "SessionStoreService",
    "SessionStoreUnavailable",
    "SqliteSessionStore",
    "UnknownSessionVersion",
    "in_memory_sessions",
    "sqlite_sessions",
]
