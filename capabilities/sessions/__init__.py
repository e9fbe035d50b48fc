"""Sessions: named records pointing to conversations, with schema-versioned metadata and
optimistic revisions — in memory or in the SQLite database (``capabilities.sqlite_storage`` and
``in_memory_storage`` provide the :data:`SessionStoreService`). A session is never a
conversation's history; the Conversation Log is.

Every error is a :class:`SessionStoreError`; exported are those a caller handles: a stale revision
(:class:`SessionConflict`), an ID that is missing or taken (:class:`SessionNotFound`,
:class:`SessionExists`), and metadata of a version no migration reaches
(:class:`UnknownSessionVersion`). Invalid input, oversized metadata, a damaged row and an
unavailable store (``is_retryable``) are ``SessionStoreError``\\ s whose message says which.
Input is checked where it is given: a :class:`SessionCreate` or :class:`SessionPatch` of the wrong
shape is refused as it is built, a session ID or name no store could keep (empty, blank, too long,
holding NUL or a lone surrogate) before any store is asked — with a ``SessionStoreError`` that is
also a ``TypeError`` (a value of the wrong type) or a ``ValueError`` (an invalid one)."""

from ._model import Session as Session
from ._model import SessionConflict as SessionConflict
from ._model import SessionCreate as SessionCreate
from ._model import SessionExists as SessionExists
from ._model import SessionNotFound as SessionNotFound
from ._model import SessionPatch as SessionPatch
from ._model import SessionSchema as SessionSchema
from ._model import SessionStore as SessionStore
from ._model import SessionStoreError as SessionStoreError
from ._model import SessionStoreService as SessionStoreService
from ._model import UnknownSessionVersion as UnknownSessionVersion

__all__ = [
    "Session",
    "SessionConflict",
    "SessionCreate",
    "SessionExists",
    "SessionNotFound",
    "SessionPatch",
    "SessionSchema",
    "SessionStore",
    "SessionStoreError",
    "SessionStoreService",
    "UnknownSessionVersion",
]
