"""The session store as a Layer, in memory or on the SQLite database."""

from __future__ import annotations

from typing import Any

from effectagent.effect import Context, Layer, Scope
from effectagent.engine import ConversationLogService, InMemoryConversationLog

from ..storage import DatabaseService
from ._memory import InMemorySessionStore
from ._model import SessionSchema, SessionStoreService
from ._sqlite import SqliteSessionStore

__all__ = ["in_memory_sessions", "sqlite_sessions"]


def _check_schema(schema: object) -> None:
    if schema is not None and not isinstance(schema, SessionSchema):
        raise TypeError(f"schema must be a SessionSchema or None, got {type(schema).__name__}")


def in_memory_sessions(schema: SessionSchema[Any] | None = None) -> Layer:
    """A Layer providing :data:`SessionStoreService` in process memory, with ``schema``'s
    metadata (default: any JSON object)."""
    _check_schema(schema)

    async def build(_: Context, __: Scope) -> Context:
        return Context.of(SessionStoreService, InMemorySessionStore(schema))

    return Layer.from_build("in_memory_sessions", provides=[SessionStoreService], build=build)


def sessions_over_log(schema: SessionSchema[Any] | None = None) -> Layer:
    """:func:`in_memory_sessions` whose store deletes conversations from the runtime's
    in-memory log (``delete(..., conversations=True)``): what ``in_memory_storage`` provides."""
    _check_schema(schema)

    async def build(context: Context, _: Scope) -> Context:
        log = context[ConversationLogService]
        kept = log if isinstance(log, InMemoryConversationLog) else None
        return Context.of(SessionStoreService, InMemorySessionStore(schema, log=kept))

    return Layer.from_build(
        "in_memory_sessions",
        provides=[SessionStoreService],
        requires=[ConversationLogService],
        build=build,
    )


def sqlite_sessions(schema: SessionSchema[Any] | None = None) -> Layer:
    """A Layer providing :data:`SessionStoreService` on :data:`DatabaseService`."""
    _check_schema(schema)

    async def build(context: Context, _: Scope) -> Context:
        store = SqliteSessionStore(context[DatabaseService], schema)
        return Context.of(SessionStoreService, store)

    return Layer.from_build(
        "sqlite_sessions",
        provides=[SessionStoreService],
        requires=[DatabaseService],
        build=build,
    )
