"""The storage Layers: an SQLite database as a service, and the Conversation Log on it."""

from __future__ import annotations

import os

from effectagent.effect import Context, Layer, Scope
from effectagent.engine import ConversationLogService

from ._database import Synchronous, open_database
from ._log import SqliteConversationLog
from ._port import DatabaseService

__all__ = ["sqlite_database", "sqlite_log"]


def sqlite_database(
    path: str | os.PathLike[str], *, synchronous: Synchronous = "full", readers: int = 4
) -> Layer:
    """A Layer providing :data:`DatabaseService`: the database at ``path`` (a file, or
    ``":memory:"``), opened when the Layer is built and closed — after writing what is queued —
    when it is torn down. See :func:`open_database` for ``synchronous`` and the errors."""
    if synchronous not in ("normal", "full", "extra"):
        raise ValueError(f"synchronous must be 'normal', 'full' or 'extra', got {synchronous!r}")
    return Layer.scoped(
        DatabaseService,
        lambda _: open_database(path, synchronous=synchronous, readers=readers),
        name="sqlite_database",
    )


def sqlite_log() -> Layer:
    """A Layer providing the engine's ``ConversationLogService`` as an
    :class:`SqliteConversationLog` on :data:`DatabaseService` (deployment class P)."""

    async def build(context: Context, _: Scope) -> Context:
        return Context.of(ConversationLogService, SqliteConversationLog(context[DatabaseService]))

    return Layer.from_build(
        "sqlite_log",
        provides=[ConversationLogService],
        requires=[DatabaseService],
        build=build,
    )
