"""The storage Layers: an SQLite database as a service, and the Conversation Log on it."""

from __future__ import annotations

import os
from typing import Final

from effectagent.effect import Context, Layer, Scope, ServiceKey
from effectagent.engine import ConversationLogService

from ._database import SqliteDatabase, Synchronous, open_database
from ._log import SqliteConversationLog

__all__ = ["SqliteDatabaseService", "sqlite_database", "sqlite_log"]

#: The service key of the SQLite database the persistent capabilities share.
SqliteDatabaseService: Final[ServiceKey[SqliteDatabase]] = ServiceKey(
    "capabilities.SqliteDatabase", "the SQLite database of the persistent capabilities"
)


def sqlite_database(
    path: str | os.PathLike[str], *, synchronous: Synchronous = "full", readers: int = 4
) -> Layer:
    """A Layer providing :data:`SqliteDatabaseService`: the database at ``path`` (a file, or
    ``":memory:"``), opened when the Layer is built and closed — after writing what is queued —
    when it is torn down. See :func:`open_database` for ``synchronous`` and the errors."""
    if synchronous not in ("normal", "full", "extra"):
        raise ValueError(f"synchronous must be 'normal', 'full' or 'extra', got {synchronous!r}")
    return Layer.scoped(
        SqliteDatabaseService,
        lambda _: open_database(path, synchronous=synchronous, readers=readers),
        name="sqlite_database",
    )


def sqlite_log() -> Layer:
    """A Layer providing the engine's ``ConversationLogService`` as an
    :class:`SqliteConversationLog` on :data:`SqliteDatabaseService` (deployment class P)."""

    async def build(context: Context, _: Scope) -> Context:
        return Context.of(
            ConversationLogService, SqliteConversationLog(context[SqliteDatabaseService])
        )

    return Layer.from_build(
        "sqlite_log",
        provides=[ConversationLogService],
        requires=[SqliteDatabaseService],
        build=build,
    )
