"""The storage Layers: a database (SQLite or PostgreSQL) as a service, and the Conversation Log
on it."""

from __future__ import annotations

import os
from contextlib import AbstractAsyncContextManager

from effectagent.effect import Context, Layer, Scope
from effectagent.engine import ConversationLogService

from ._database import Synchronous, database_path, open_database
from ._log import SqliteConversationLog
from ._port import Database, DatabaseService

__all__ = ["postgres_database", "sqlite_database", "sqlite_log"]


def sqlite_database(
    path: str | os.PathLike[str], *, synchronous: Synchronous = "full", readers: int = 4
) -> Layer:
    """A Layer providing :data:`DatabaseService`: the database at ``path`` (a file, or
    ``":memory:"``), opened when the Layer is built and closed — after writing what is queued —
    when it is torn down. See :func:`open_database` for ``synchronous`` and the errors."""
    if synchronous not in ("normal", "full", "extra"):
        raise ValueError(f"synchronous must be 'normal', 'full' or 'extra', got {synchronous!r}")
    database_path(path)  # refused here, where it is given, not as the runtime opens
    return Layer.scoped(
        DatabaseService,
        lambda _: open_database(path, synchronous=synchronous, readers=readers),
        name="sqlite_database",
    )


def postgres_database(
    url: str, *, schema: str = "effectagent", pool_size: int = 4, lease: float = 30.0
) -> Layer:
    """A Layer providing :data:`DatabaseService`: the effectagent store in ``schema`` of the
    PostgreSQL database at ``url`` (a ``postgresql://`` URL or a libpq connection string), opened
    — laid out or upgraded if needed — when the Layer is built and closed when it is torn down.
    Any number of processes on any number of machines may open the same one. See
    ``open_postgres`` for ``pool_size``, ``lease`` and the errors (they name the database without
    its password). Needs the ``postgres`` extra (psycopg 3 and its pool)."""
    from ._postgres import check_arguments, open_postgres  # psycopg: only for those who use it

    check_arguments(url, schema, pool_size, lease)  # here, where they are given
    if not url:
        raise ValueError("the PostgreSQL URL must not be empty")

    def opened(_: Context) -> AbstractAsyncContextManager[Database]:
        return open_postgres(url, schema=schema, pool_size=pool_size, lease=lease)

    return Layer.scoped(DatabaseService, opened, name="postgres_database")


def sqlite_log() -> Layer:
    """A Layer providing the engine's ``ConversationLogService`` as an
    :class:`SqliteConversationLog` on :data:`DatabaseService`."""

    async def build(context: Context, _: Scope) -> Context:
        return Context.of(ConversationLogService, SqliteConversationLog(context[DatabaseService]))

    return Layer.from_build(
        "sqlite_log",
        provides=[ConversationLogService],
        requires=[DatabaseService],
        build=build,
    )
