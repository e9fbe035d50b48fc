"""Sessions in process memory (deployment class E): the same rules and errors as SQLite."""

from __future__ import annotations

import time
from typing import Generic, TypeVar, cast, final

import trio

from effectagent.engine import InMemoryConversationLog

from ._model import (
    DEFAULT_SCHEMA,
    Session,
    SessionCreate,
    SessionExists,
    SessionInvalidValue,
    SessionNotFound,
    SessionPatch,
    SessionSchema,
    SessionStoreUnavailable,
    check_id,
    shown_id,
)
from ._rows import (
    StoredSession,
    check_delete,
    check_flag,
    check_page,
    check_update,
    create_row,
    patch_row,
)

__all__ = ["InMemorySessionStore"]

M = TypeVar("M")
N = TypeVar("N")


@final
class InMemorySessionStore(Generic[M]):
    """A :class:`SessionStore` in a dict. Metadata is kept as its versioned JSON, so reads lift
    and validate exactly as the SQLite store's do, and no caller shares an object with the store.

    Each operation checks for cancellation first, then completes without yielding: it is atomic.
    ``log``: the in-memory conversation log :meth:`delete` deletes conversations from (given by
    ``in_memory_storage``; without one, ``conversations=True`` is refused).
    """

    __slots__ = ("_log", "_rows", "schema")

    def __init__(
        self, schema: SessionSchema[M] | None = None, *, log: InMemoryConversationLog | None = None
    ) -> None:
        # Without a schema, metadata is any JSON object (M is then JSONObject).
        self.schema: SessionSchema[M] = schema or cast("SessionSchema[M]", DEFAULT_SCHEMA)
        self._rows: dict[str, StoredSession] = {}
        self._log = log

    async def create(self, input: SessionCreate[M]) -> Session[M]:
        """See :meth:`SessionStore.create`. Cancellation: if it raises ``Cancelled``, nothing
        was stored."""
        await trio.lowlevel.checkpoint_if_cancelled()
        row = create_row(self.schema, input, time.time())
        if row.id in self._rows:
            raise SessionExists(row.id)
        session = row.session(self.schema)
        self._rows[row.id] = row
        await trio.lowlevel.cancel_shielded_checkpoint()
        return session

    async def get(self, session_id: str) -> Session[M] | None:
        """See :meth:`SessionStore.get`. Cancellation: a checkpoint; nothing changes."""
        await trio.lowlevel.checkpoint()
        row = self._rows.get(check_id(session_id))
        return None if row is None else row.session(self.schema)

    async def update(
        self, session_id: str, patch: SessionPatch[M], expected_revision: int
    ) -> Session[M]:
        """See :meth:`SessionStore.update`. Cancellation: if it raises ``Cancelled``, nothing
        changed."""
        check_update(check_id(session_id), patch, expected_revision)
        await trio.lowlevel.checkpoint_if_cancelled()
        current = self._rows.get(session_id)
        if current is None:
            raise SessionNotFound(session_id)
        row, session = patch_row(self.schema, current, patch, expected_revision, time.time())
        self._rows[row.id] = row
        await trio.lowlevel.cancel_shielded_checkpoint()
        return session

    async def list(self, *, after: str | None = None, limit: int = 100) -> tuple[Session[M], ...]:
        """See :meth:`SessionStore.list`. Cancellation: a checkpoint; nothing changes."""
        after, limit = check_page(after, limit)
        await trio.lowlevel.checkpoint()
        ids = sorted(i for i in self._rows if after is None or i > after)[:limit]
        return tuple(self._rows[i].session(self.schema) for i in ids)

    async def delete(
        self, session_id: str, expected_revision: int, *, conversations: bool = False
    ) -> None:
        """See :meth:`SessionStore.delete`: with ``conversations=True``, the session's
        conversations no other session lists go with it from the in-memory log, and the media
        no remaining record refers to; while one of them has a run going, nothing is deleted
        (``SessionStoreUnavailable`` saying so). A store without a log refuses
        ``conversations=True`` (a ``SessionStoreError`` that is a ``ValueError``). Cancellation: if it raises ``Cancelled``,
        nothing changed."""
        check_flag(session_id, conversations)
        if conversations and self._log is None:
            raise SessionInvalidValue(
                shown_id(session_id),
                "this session store has no conversation log to delete conversations from "
                "(in_memory_storage() gives it one); nothing was deleted",
            )
        await trio.lowlevel.checkpoint_if_cancelled()
        current = self._rows.get(check_id(session_id))
        check_delete(current, session_id, expected_revision)
        if conversations and current is not None and self._log is not None:
            listed = {
                c for i, row in self._rows.items() if i != session_id for c in row.conversations
            }
            alone = [c for c in current.conversations if c not in listed]
            try:
                self._log.delete_conversations(alone)
            except ValueError as exc:  # a run of one is going: nothing was deleted
                raise SessionStoreUnavailable(session_id, str(exc)) from None
        del self._rows[session_id]
        await trio.lowlevel.cancel_shielded_checkpoint()

    def with_schema(self, schema: SessionSchema[N]) -> InMemorySessionStore[N]:
        """A store over these very sessions that reads and writes them through ``schema`` — what
        the application sees once it upgraded its metadata type (older metadata is lifted by
        ``schema``'s migrations on read)."""
        other: InMemorySessionStore[N] = InMemorySessionStore(schema)
        other._rows = self._rows
        return other
