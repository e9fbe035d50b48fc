"""Sessions in the SQLite database: each create and update is one write, checked in its
transaction (the revision compare-and-set happens where the row is written, so two processes'
worth of writers — or a hundred tasks — cannot both win)."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Final, Generic, TypeVar, cast, final

from .._rules import storable
from .._versioned import dumps, loads
from ..storage import Database, StorageError
from ..storage._forget import forget_conversations
from ..storage._port import Connection, dialect_of
from ._model import (
    DEFAULT_SCHEMA,
    CorruptSession,
    Session,
    SessionCreate,
    SessionExists,
    SessionNotFound,
    SessionPatch,
    SessionSchema,
    SessionStoreUnavailable,
    check_id,
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

__all__ = ["SqliteSessionStore"]

M = TypeVar("M")
R = TypeVar("R")

_COLUMNS = (
    "session_id, name, revision, conversations, metadata_version, metadata, created_at, updated_at"
)

#: Writes a row whole, whether it is there or not.
_UPSERT: Final = (
    f"INSERT INTO sessions ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?) "
    "ON CONFLICT (session_id) DO UPDATE SET "
    "name = excluded.name, "
    "revision = excluded.revision, "
    "conversations = excluded.conversations, "
    "metadata_version = excluded.metadata_version, "
    "metadata = excluded.metadata, "
    "created_at = excluded.created_at, "
    "updated_at = excluded.updated_at"
)


#: One page of ``list``, in the order of the IDs' code points — SQLite's ``BINARY`` order and
#: Python's. PostgreSQL compares text by the database's collation (``en_US``: ``"a" < "B"``),
#: so there the comparison and the order are ``COLLATE "C"``'s (bytes of UTF-8: code points).
_PAGE: Final[dict[str, str]] = {
    "sqlite": (f"SELECT {_COLUMNS} FROM sessions WHERE session_id > ? ORDER BY session_id LIMIT ?"),
    "postgresql": (
        f'SELECT {_COLUMNS} FROM sessions WHERE session_id COLLATE "C" > ? '
        'ORDER BY session_id COLLATE "C" LIMIT ?'
    ),
}


def _row_of(found: tuple[object, ...]) -> StoredSession:
    session_id = str(found[0])
    name, revision, conversations, version, metadata, created, updated = found[1:]
    try:
        ids = loads(conversations) if isinstance(conversations, str) else None
    except (ValueError, RecursionError):
        ids = None
    if (
        not isinstance(ids, list)
        or not all(isinstance(c, str) for c in ids)
        or not isinstance(name, str)
        or type(revision) is not int
        or type(version) is not int
        or not isinstance(metadata, str)
        or not isinstance(created, int | float)
        or not isinstance(updated, int | float)
    ):
        raise CorruptSession(session_id, "the stored row is damaged")
    return StoredSession(
        session_id, name, revision, tuple(ids), version, metadata, float(created), float(updated)
    )


def _select(conn: Connection, session_id: str) -> StoredSession | None:
    found = conn.execute(
        f"SELECT {_COLUMNS} FROM sessions WHERE session_id = ?", (session_id,)
    ).fetchone()
    return None if found is None else _row_of(found)


def _write(conn: Connection, row: StoredSession) -> None:
    conn.execute(
        _UPSERT,
        (
            row.id,
            row.name,
            row.revision,
            dumps(list(row.conversations)),
            row.version,
            row.metadata,
            row.created_at,
            row.updated_at,
        ),
    )


def _listed_elsewhere(conn: Connection, ids: tuple[str, ...]) -> set[str]:
    """Those of ``ids`` another session (one still in the table) lists."""
    wanted, found = set(ids), set[str]()
    for (stored,) in conn.execute("SELECT conversations FROM sessions"):
        try:
            listed = loads(stored) if isinstance(stored, str) else None
        except (ValueError, RecursionError):
            return wanted  # a damaged row: keep every conversation it might list
        if isinstance(listed, list):
            found.update(c for c in listed if isinstance(c, str) and c in wanted)
    return found


@final
class SqliteSessionStore(Generic[M]):
    """A :class:`SessionStore` in an :class:`Database` (table ``sessions``)."""

    __slots__ = ("database", "schema")

    def __init__(self, database: Database, schema: SessionSchema[M] | None = None) -> None:
        self.database = database
        # Without a schema, metadata is any JSON object (M is then JSONObject).
        self.schema: SessionSchema[M] = schema or cast("SessionSchema[M]", DEFAULT_SCHEMA)

    async def create(self, input: SessionCreate[M]) -> Session[M]:
        """See :meth:`SessionStore.create`. Cancellation: all or nothing (see
        ``Database.write``: it raises ``Cancelled`` only if nothing was stored)."""
        schema = self.schema
        row = create_row(schema, input, time.time())
        session = row.session(schema)

        def work(conn: Connection) -> None:
            if _select(conn, row.id) is not None:
                raise SessionExists(row.id)
            _write(conn, row)

        await self._storage(row.id, self.database.write, work)
        return session

    async def get(self, session_id: str) -> Session[M] | None:
        """See :meth:`SessionStore.get`. Cancellation: a checkpoint; nothing changes."""
        check_id(session_id)
        schema = self.schema

        def read(conn: Connection) -> Session[M] | None:
            row = _select(conn, session_id)
            return None if row is None else row.session(schema)

        return await self._storage(session_id, self.database.read, read)

    async def update(
        self, session_id: str, patch: SessionPatch[M], expected_revision: int
    ) -> Session[M]:
        """See :meth:`SessionStore.update`: the revision is compared inside the transaction that
        writes the row. Cancellation: all or nothing."""
        check_update(check_id(session_id), patch, expected_revision)
        schema = self.schema
        now = time.time()

        def work(conn: Connection) -> Session[M]:
            current = _select(conn, session_id)
            if current is None:
                raise SessionNotFound(session_id)
            row, session = patch_row(schema, current, patch, expected_revision, now)
            _write(conn, row)
            return session

        return await self._storage(session_id, self.database.write, work)

    async def list(self, *, after: str | None = None, limit: int = 100) -> tuple[Session[M], ...]:
        """See :meth:`SessionStore.list` (one read; the IDs in code point order on either
        engine, whatever PostgreSQL's collation). Cancellation: a checkpoint; nothing changes."""
        after, limit = check_page(after, limit)
        schema = self.schema

        def read(conn: Connection) -> tuple[Session[M], ...]:
            statement = _PAGE[dialect_of(conn)]
            found = conn.execute(statement, (after if after is not None else "", limit)).fetchall()
            return tuple(_row_of(row).session(schema) for row in found)

        return await self._storage(after or "", self.database.read, read)

    async def delete(
        self, session_id: str, expected_revision: int, *, conversations: bool = False
    ) -> None:
        """See :meth:`SessionStore.delete`: the revision is compared inside the transaction that
        deletes the row.

        With ``conversations=True`` the session's conversations that no other session lists go
        in that same transaction: their records, and the images, documents and audio no
        remaining record refers to (``SqliteConversationLog.delete_conversations``); while one
        of them has a run going, the deletion is refused (``SessionStoreUnavailable`` saying
        so) and nothing is deleted. Without it, the conversations stay in the log.

        Raises ``TypeError`` for a ``conversations`` that is not a bool (a truthy value would
        delete history). Cancellation: all or nothing."""
        check_flag(session_id, conversations)
        check_id(session_id)
        now = time.time()

        def work(conn: Connection) -> None:
            current = _select(conn, session_id)
            check_delete(current, session_id, expected_revision)
            conn.execute("DELETE FROM sessions WHERE session_id = ?", (session_id,))
            if conversations and current is not None and current.conversations:
                listed = _listed_elsewhere(conn, current.conversations)
                # An ID no database can keep (NUL, a lone surrogate) has no records to delete.
                alone = [c for c in current.conversations if c not in listed and storable(c)]
                forget_conversations(conn, alone, now=now)

        await self._storage(session_id, self.database.write, work)

    @staticmethod
    async def _storage(
        session_id: str,
        run: Callable[[Callable[[Connection], R]], Awaitable[R]],
        work: Callable[[Connection], R],
    ) -> R:
        try:
            return await run(work)
        except StorageError as exc:
            raise SessionStoreUnavailable(session_id, str(exc)) from None
