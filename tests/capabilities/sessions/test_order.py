"""``list`` pages through sessions in the order of their IDs — by code point, as Python compares
str — on every store, whatever the PostgreSQL database's collation (``en-US`` puts ``"a"``
before ``"B"``; the in-memory store and SQLite do not). And deleting a session with its
conversations works alike on both engines when it lists a conversation ID no database keeps."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from capabilities.sessions import SessionCreate, SessionStore
from capabilities.sessions._memory import InMemorySessionStore
from capabilities.sessions._sqlite import SqliteSessionStore
from capabilities.storage import open_postgres
from tests.postgres import postgres_url

from ..conftest import database as open_store

IDS = ["b", "B", "a", "A", "_x", "a-b", "ab", "é", "Z", "z", "0", "~", "ß"]


async def every_page(store: SessionStore[Any], limit: int) -> list[str]:
    found: list[str] = []
    after: str | None = None
    while page := await store.list(after=after, limit=limit):
        found += [session.id for session in page]
        after = page[-1].id
    return found


@pytest.fixture
def icu_url() -> Iterator[str]:
    """The URL of a database of the test cluster whose collation is ICU's ``en-US`` (not the
    cluster's ``C``), dropped after the test."""
    name = f"t_{secrets.token_hex(6)}"
    base = postgres_url()
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(
            sql.SQL(
                "CREATE DATABASE {} TEMPLATE template0 ENCODING 'UTF8' "
                "LOCALE_PROVIDER icu ICU_LOCALE 'en-US' LOCALE 'C.UTF-8'"
            ).format(sql.Identifier(name))
        )
    try:
        yield base.replace("/postgres?", f"/{name}?", 1)
    finally:
        with psycopg.connect(base, autocommit=True) as conn:
            conn.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )


async def test_ids_are_listed_in_code_point_order_on_every_store(kind: str, tmp_path: Path) -> None:
    if kind == "memory":
        store: SessionStore[Any] = InMemorySessionStore()
        for session_id in IDS:
            await store.create(SessionCreate("n", {}, session_id=session_id))
        assert await every_page(store, 3) == sorted(IDS)
        return
    async with open_store(kind, tmp_path) as database:
        store = SqliteSessionStore(database)
        for session_id in IDS:
            await store.create(SessionCreate("n", {}, session_id=session_id))
        assert [s.id for s in await store.list()] == sorted(IDS)
        assert await every_page(store, 3) == sorted(IDS)


async def test_postgresql_lists_in_code_point_order_whatever_its_collation(
    icu_url: str,
) -> None:
    memory: InMemorySessionStore[Any] = InMemorySessionStore()
    async with open_postgres(icu_url, schema="sessions") as database:
        store: SqliteSessionStore[Any] = SqliteSessionStore(database)
        for session_id in IDS:
            await store.create(SessionCreate("n", {}, session_id=session_id))
            await memory.create(SessionCreate("n", {}, session_id=session_id))
        expected = [s.id for s in await memory.list()]
        assert expected == sorted(IDS)
        assert [s.id for s in await store.list()] == expected
        assert await every_page(store, 2) == expected
        assert [s.id for s in await store.list(after="B")] == [i for i in expected if i > "B"]


@pytest.mark.parametrize("database", ["sqlite-memory", "sqlite-file", "postgresql"])
async def test_deleting_with_conversations_no_database_keeps_works_alike(
    database: str, tmp_path: Path
) -> None:
    # A session may list any conversation ID (its list is JSON); one holding NUL or a lone
    # surrogate has no records anywhere, and must not keep the session from being deleted.
    async with open_store(database, tmp_path) as opened:
        store: SqliteSessionStore[Any] = SqliteSessionStore(opened)
        session = await store.create(SessionCreate("n", {}, ["fine", "c\x00d", "\ud800"]))
        await store.delete(session.id, 1, conversations=True)
        assert await store.get(session.id) is None
