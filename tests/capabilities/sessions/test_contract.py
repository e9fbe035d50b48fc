"""The SessionStore contract (spec §3), on every implementation: in memory, SQLite in memory and
SQLite in a file. Sessions point to conversations, carry schema-versioned metadata, and change
only by compare-and-set on their revision."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio

from capabilities.sessions import (
    Session,
    SessionConflict,
    SessionCreate,
    SessionExists,
    SessionNotFound,
    SessionPatch,
    SessionSchema,
    SessionStore,
    UnknownSessionVersion,
)
from capabilities.sessions._memory import InMemorySessionStore
from capabilities.sessions._model import CorruptSession, SessionInvalid, SessionMetadataTooLarge
from capabilities.sessions._sqlite import SqliteSessionStore

from ..conftest import database as open_store


@attrs.frozen
class Counter:
    count: int


@attrs.frozen
class PrefsV1:
    name: str


@attrs.frozen
class Prefs:
    name: str
    language: str


COUNTER = SessionSchema(Counter)
PREFS_V1 = SessionSchema(PrefsV1)
PREFS_V2 = SessionSchema(Prefs, version=2, migrations={1: lambda old: {**old, "language": "en"}})

Stores = Callable[[SessionSchema[Any]], SessionStore[Any]]


@asynccontextmanager
async def stores(kind: str, directory: Path) -> AsyncIterator[Stores]:
    """A factory of stores over the same sessions, each reading them through its own schema."""
    if kind == "memory":
        base: InMemorySessionStore[Any] = InMemorySessionStore()
        yield base.with_schema
        return
    async with open_store(kind, directory) as database:
        yield lambda schema: SqliteSessionStore(database, schema)


async def test_create_get_update_with_revisions(kind: str, tmp_path: Path) -> None:
    async with stores(kind, tmp_path) as make:
        store = make(COUNTER)
        created = await store.create(SessionCreate("work", Counter(0), ("conv-a",)))
        assert (created.revision, created.metadata, created.conversations) == (
            1,
            Counter(0),
            ("conv-a",),
        )
        assert await store.get(created.id) == created
        assert await store.get("session_unknown") is None
        updated = await store.update(
            created.id,
            SessionPatch(
                name="renamed", metadata=Counter(5), add_conversations=("conv-b", "conv-a")
            ),
            1,
        )
        assert updated.revision == 2
        assert updated.name == "renamed"
        assert updated.metadata == Counter(5)
        assert updated.conversations == ("conv-a", "conv-b")
        assert updated.created_at == created.created_at <= updated.updated_at
        assert await store.get(created.id) == updated
        kept = await store.update(created.id, SessionPatch(remove_conversations=("conv-a",)), 2)
        assert (kept.metadata, kept.conversations, kept.revision) == (Counter(5), ("conv-b",), 3)
        chosen = await store.create(SessionCreate("mine", Counter(1), session_id="session-7"))
        assert chosen.id == "session-7"
        with pytest.raises(SessionExists):
            await store.create(SessionCreate("again", Counter(1), session_id="session-7"))
        with pytest.raises(SessionNotFound):
            await store.update("session-nope", SessionPatch(name="x"), 1)


async def test_a_stale_revision_is_a_conflict_and_changes_nothing(
    kind: str, tmp_path: Path
) -> None:
    async with stores(kind, tmp_path) as make:
        store = make(COUNTER)
        session = await store.create(SessionCreate("s", Counter(0)))
        await store.update(session.id, SessionPatch(metadata=Counter(1)), 1)
        with pytest.raises(SessionConflict) as raised:
            await store.update(session.id, SessionPatch(metadata=Counter(99)), 1)
        assert (raised.value.expected_revision, raised.value.actual_revision) == (1, 2)
        current = await store.get(session.id)
        assert current is not None
        assert (current.revision, current.metadata) == (2, Counter(1))


async def test_n_concurrent_writers_retrying_on_conflict_make_exactly_n_increments(
    kind: str, tmp_path: Path
) -> None:
    writers = 25
    conflicts = 0
    async with stores(kind, tmp_path) as make:
        store = make(COUNTER)
        session = await store.create(SessionCreate("counter", Counter(0)))

        async def increment() -> None:
            nonlocal conflicts
            while True:
                current = await store.get(session.id)
                assert current is not None
                await trio.lowlevel.checkpoint()  # the writer thinks: others may write meanwhile
                patch = SessionPatch(metadata=Counter(current.metadata.count + 1))
                try:
                    await store.update(session.id, patch, current.revision)
                    return
                except SessionConflict:
                    conflicts += 1

        async with trio.open_nursery() as nursery:
            for _ in range(writers):
                nursery.start_soon(increment)
        final = await store.get(session.id)
    assert final is not None
    assert final.metadata == Counter(writers)
    assert final.revision == writers + 1
    assert conflicts > 0  # the writers did race


async def test_older_metadata_is_lifted_by_registered_migrations(kind: str, tmp_path: Path) -> None:
    async with stores(kind, tmp_path) as make:
        old = await make(PREFS_V1).create(SessionCreate("s", PrefsV1("Ann")))
        upgraded = make(PREFS_V2)
        read = await upgraded.get(old.id)
        assert read is not None
        assert read.metadata == Prefs("Ann", "en")
        # A patch that leaves the metadata alone keeps it (still lifted on read)…
        renamed = await upgraded.update(old.id, SessionPatch(name="t"), 1)
        assert renamed.metadata == Prefs("Ann", "en")
        # …one that replaces it writes the current version, which the old schema cannot read.
        await upgraded.update(old.id, SessionPatch(metadata=Prefs("Ann", "nb")), 2)
        with pytest.raises(UnknownSessionVersion) as raised:
            await make(PREFS_V1).get(old.id)
        assert (raised.value.version, raised.value.supported) == (2, 1)
        missing_step = SessionSchema(Prefs, version=3, migrations={2: lambda d: d})
        other = await make(PREFS_V1).create(SessionCreate("u", PrefsV1("Bo")))
        with pytest.raises(UnknownSessionVersion):
            await make(missing_step).get(other.id)


async def test_bad_input_is_refused_with_typed_errors_and_stores_nothing(
    kind: str, tmp_path: Path
) -> None:
    secret = "private-text-of-the-user"
    async with stores(kind, tmp_path) as make:
        store = make(SessionSchema(Prefs, max_bytes=256))
        with pytest.raises(SessionInvalid) as raised:
            await store.create(SessionCreate("s", Prefs(secret, 3), session_id="s1"))  # type: ignore[arg-type]
        assert "$.language" in raised.value.problem
        assert secret not in str(raised.value)
        with pytest.raises(SessionMetadataTooLarge) as too_large:
            await store.create(SessionCreate("s", Prefs("x" * 500, "en"), session_id="s1"))
        assert too_large.value.limit == 256
        with pytest.raises(SessionInvalid):
            await store.create(SessionCreate("  ", Prefs("a", "en")))
        with pytest.raises(SessionInvalid):
            await store.create(SessionCreate("n" * 300, Prefs("a", "en")))
        with pytest.raises(SessionInvalid):
            await store.create(SessionCreate("s", None, session_id="s1"))
        with pytest.raises(SessionInvalid):
            await store.create(SessionCreate("s", Prefs("a", "en"), ("",)))
        with pytest.raises(TypeError):
            SessionCreate("s", Prefs("a", "en"), "conv-as-one-string")
        assert await store.get("s1") is None
        session = await store.create(SessionCreate("s", Prefs("a", "en")))
        with pytest.raises(SessionInvalid):
            await store.update(session.id, SessionPatch(metadata=Prefs("a", 1)), 1)  # type: ignore[arg-type]
        with pytest.raises(TypeError):
            await store.update(session.id, SessionPatch(), "1")  # type: ignore[arg-type, unused-ignore]
        assert await store.get(session.id) == session


async def test_an_update_cancelled_midway_is_all_or_nothing(kind: str, tmp_path: Path) -> None:
    async with stores(kind, tmp_path) as make:
        store = make(COUNTER)
        session = await store.create(SessionCreate("c", Counter(0)))
        outcomes: list[Session[Any] | None] = []
        for delay in range(6):
            current = await store.get(session.id)
            assert current is not None
            result = None
            with trio.CancelScope() as scope:
                for _ in range(delay):  # cancel after some checkpoints of the caller
                    await trio.lowlevel.checkpoint()
                scope.cancel()
                result = await store.update(
                    session.id, SessionPatch(metadata=Counter(delay)), current.revision
                )
            after = await store.get(session.id)
            assert after is not None
            if result is None:
                assert after == current
            else:
                assert after == result
            outcomes.append(result)


async def test_a_damaged_row_is_a_typed_error(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    async with open_store("sqlite-file", tmp_path) as database:
        store = SqliteSessionStore(database, COUNTER)
        damaged = await store.create(SessionCreate("d", Counter(1)))
        healthy = await store.create(SessionCreate("h", Counter(2)))
    conn = sqlite3.connect(tmp_path / "store.db", isolation_level=None)
    conn.execute("UPDATE sessions SET conversations = 'nope' WHERE session_id = ?", (damaged.id,))
    conn.close()
    assert not path.exists()
    async with open_store("sqlite-file", tmp_path) as database:
        store = SqliteSessionStore(database, COUNTER)
        with pytest.raises(CorruptSession) as raised:
            await store.get(damaged.id)
        assert raised.value.session_id == damaged.id
        assert await store.get(healthy.id) == healthy
        with pytest.raises(CorruptSession):
            await store.update(damaged.id, SessionPatch(name="x"), 1)


async def test_listing_pages_through_every_session_in_id_order(kind: str, tmp_path: Path) -> None:
    async with stores(kind, tmp_path) as make:
        store = make(COUNTER)
        assert await store.list() == ()
        ids = [f"session-{n:02d}" for n in (7, 3, 11, 1, 5)]
        for n, session_id in enumerate(ids):
            await store.create(SessionCreate(f"s{n}", Counter(n), session_id=session_id))
        pages: list[list[str]] = []
        after: str | None = None
        while page := await store.list(after=after, limit=2):
            pages.append([s.id for s in page])
            after = page[-1].id
        assert pages == [
            ["session-01", "session-03"],
            ["session-05", "session-07"],
            ["session-11"],
        ]
        everything = await store.list(limit=1_000)
        assert [s.id for s in everything] == sorted(ids)
        assert everything[0] == await store.get("session-01")  # whole sessions, as get reads them
        with pytest.raises(ValueError, match="limit must be from 1 to 1000"):
            await store.list(limit=0)
        with pytest.raises(TypeError, match="limit must be an int"):
            await store.list(limit="5")  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="after must be a session ID"):
            await store.list(after=3)  # type: ignore[arg-type]


async def test_delete_compares_the_revision_and_leaves_conversations_alone(
    kind: str, tmp_path: Path
) -> None:
    async with stores(kind, tmp_path) as make:
        store = make(COUNTER)
        session = await store.create(SessionCreate("s", Counter(0), ("conv-a",)))
        await store.update(session.id, SessionPatch(metadata=Counter(1)), 1)
        with pytest.raises(SessionConflict) as raised:
            await store.delete(session.id, 1)
        assert (raised.value.expected_revision, raised.value.actual_revision) == (1, 2)
        assert await store.get(session.id) is not None  # a conflict deletes nothing
        await store.delete(session.id, 2)
        assert await store.get(session.id) is None
        assert await store.list() == ()
        with pytest.raises(SessionNotFound):
            await store.delete(session.id, 2)
        with pytest.raises(TypeError, match="expected_revision must be an int"):
            await store.delete(session.id, "2")  # type: ignore[arg-type]
        again = await store.create(SessionCreate("new", Counter(0), session_id=session.id))
        assert again.revision == 1  # the ID is free again
