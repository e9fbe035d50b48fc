"""Named sessions of the command over a real session store: a name maps to its conversation,
runs are counted, a new chat never takes an existing name — not even one another process is
choosing in the same second."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import trio

from capabilities import sqlite_storage
from capabilities.cli._sessions import (
    NamedSession,
    all_sessions,
    claim_id,
    find_session,
    new_session,
    runs_of,
)
from capabilities.sessions import (
    Session,
    SessionCreate,
    SessionPatch,
    SessionStore,
    SessionStoreService,
)
from capabilities.sessions._memory import InMemorySessionStore
from effectagent import open_runtime


async def test_a_named_session_points_to_its_conversation_and_counts_runs() -> None:
    store: InMemorySessionStore[Any] = InMemorySessionStore()
    named = await NamedSession.open(store, "work")
    assert (named.resumed, named.conversation_id, named.runs) == (False, None, 0)
    await named.started("conv_1")
    await named.ended()
    await named.started("conv_1")  # the same conversation: not added twice
    await named.ended()

    again = await NamedSession.open(store, "work")
    assert (again.resumed, again.conversation_id, again.runs) == (True, "conv_1", 2)
    found = await find_session(store, "work")
    assert found is not None
    assert found.conversations == ("conv_1",)
    assert runs_of(found) == 2


async def test_runs_are_counted_from_the_stored_session_after_a_conflict() -> None:
    """Two processes on one session: each count lands, none is lost to a stale revision."""
    store: InMemorySessionStore[Any] = InMemorySessionStore()
    first = await NamedSession.open(store, "shared")
    await first.started("conv_1")
    second = await NamedSession.open(store, "shared")
    await first.ended()
    await second.ended()  # its revision is stale: it reads again and counts on top
    found = await find_session(store, "shared")
    assert found is not None
    assert runs_of(found) == 2


async def test_a_new_chat_never_takes_a_name_in_use() -> None:
    store: InMemorySessionStore[Any] = InMemorySessionStore()
    await store.create(SessionCreate("chat-1", {}))
    await store.create(SessionCreate("chat-1-2", {}))
    named = await new_session(store, "chat-1")
    assert named.name == "chat-1-3"
    assert (named.resumed, named.conversation_id, named.runs) == (False, None, 0)


async def _side_by_side(store: SessionStore[Any], base: str) -> list[str]:
    """Two commands that each name a new session after the same ``base`` (started in the same
    second), and only then — once both are named, as the model opens — start their runs; the
    names of the sessions in the store afterwards."""
    named_both = trio.Event()
    named: list[NamedSession] = []

    async def command(conversation_id: str) -> None:
        session = await new_session(store, base)
        named.append(session)
        if len(named) == 2:
            named_both.set()
        await named_both.wait()
        await session.started(conversation_id)
        await session.ended()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(command, "conv_1")
        nursery.start_soon(command, "conv_2")
    return sorted(session.name for session in await all_sessions(store))


async def test_two_new_sessions_named_in_the_same_second_get_distinct_names() -> None:
    store: InMemorySessionStore[Any] = InMemorySessionStore()
    base = "run-20260101-120000"
    assert await _side_by_side(store, base) == [base, f"{base}-2"]
    for name in (base, f"{base}-2"):  # each its own conversation, its run counted
        found = await find_session(store, name)
        assert found is not None
        assert (len(found.conversations), runs_of(found)) == (1, 1)


class _ReadTogether:
    """A session store whose first page is read by ``readers`` callers before any of them goes
    on: each decides on a name before any other has claimed one (the claim alone must hold)."""

    def __init__(self, store: SessionStore[Any], readers: int) -> None:
        self._store = store
        self._waiting = readers
        self._all_read = trio.Event()

    async def list(self, *, after: str | None = None, limit: int = 100) -> tuple[Session[Any], ...]:
        page = await self._store.list(after=after, limit=limit)
        if after is None:
            self._waiting -= 1
            if self._waiting == 0:
                self._all_read.set()
            await self._all_read.wait()
        return page

    async def create(self, input: SessionCreate[Any]) -> Session[Any]:
        return await self._store.create(input)

    async def get(self, session_id: str) -> Session[Any] | None:
        return await self._store.get(session_id)

    async def update(
        self, session_id: str, patch: SessionPatch[Any], expected_revision: int
    ) -> Session[Any]:
        return await self._store.update(session_id, patch, expected_revision)

    async def delete(
        self, session_id: str, expected_revision: int, *, conversations: bool = False
    ) -> None:
        await self._store.delete(session_id, expected_revision, conversations=conversations)


async def test_a_name_both_read_as_free_goes_to_one_of_them_in_the_database(
    tmp_path: Path,
) -> None:
    """The SQLite store, as the command opens it: two claims that both found the name free."""
    base = "chat-20260101-120000"
    async with open_runtime(sqlite_storage(tmp_path / "effectagent.db")) as runtime:
        store = _ReadTogether(runtime.context[SessionStoreService], readers=2)
        assert await _side_by_side(store, base) == [base, f"{base}-2"]


async def test_a_claimed_session_that_never_ran_is_deleted_when_the_command_ends() -> None:
    store: InMemorySessionStore[Any] = InMemorySessionStore()
    unused = await new_session(store, "chat-1")
    assert await store.get(claim_id("chat-1")) is not None  # claimed: nobody else takes it
    used = await new_session(store, "chat-1")
    assert used.name == "chat-1-2"
    await used.started("conv_1")
    await unused.release()
    await used.release()
    assert [s.name for s in await all_sessions(store)] == ["chat-1-2"]
    assert (await new_session(store, "chat-1")).name == "chat-1"  # free again


async def test_a_run_named_after_a_claimed_session_keeps_its_own() -> None:
    """`--session chat-1` in another process while chat-1 is claimed but has had no run: its
    run is kept whether the claim is given back before it starts or after."""
    store: InMemorySessionStore[Any] = InMemorySessionStore()
    for released_first in (True, False):
        claimed = await new_session(store, "chat-1")
        other = await NamedSession.open(store, "chat-1")
        assert (other.resumed, other.conversation_id) == (False, None)
        if released_first:
            await claimed.release()
        await other.started(f"conv_{released_first}")
        await claimed.release()
        named = [s for s in await all_sessions(store) if s.name == "chat-1"]
        assert [s.conversations for s in named] == [(f"conv_{released_first}",)]
        await store.delete(named[0].id, named[0].revision)


async def test_a_new_name_started_by_two_processes_at_once_is_one_session() -> None:
    """`--session two` in two terminals, the name new to both: each run is kept, in one session
    of that name (the later conversation its latest), never two sessions of one name."""
    store: InMemorySessionStore[Any] = InMemorySessionStore()
    first = await NamedSession.open(store, "two")
    second = await NamedSession.open(store, "two")
    assert first.conversation_id is None
    assert second.conversation_id is None
    await first.started("conv_1")
    await second.started("conv_2")
    await first.ended()
    await second.ended()
    named = [s for s in await all_sessions(store) if s.name == "two"]
    assert [(s.conversations, runs_of(s)) for s in named] == [(("conv_1", "conv_2"), 2)]
    again = await NamedSession.open(store, "two")
    assert (again.resumed, again.conversation_id, again.runs) == (True, "conv_2", 2)


async def test_a_new_name_started_twice_at_once_in_the_database(tmp_path: Path) -> None:
    """The same on the SQLite store, as the command opens it."""
    async with open_runtime(sqlite_storage(tmp_path / "effectagent.db")) as runtime:
        store = runtime.context[SessionStoreService]
        first = await NamedSession.open(store, "two")
        second = await NamedSession.open(store, "two")
        await first.started("conv_1")
        await second.started("conv_2")
        named = [s for s in await all_sessions(store) if s.name == "two"]
        assert [s.conversations for s in named] == [("conv_1", "conv_2")]


async def test_releasing_a_named_session_that_was_not_claimed_leaves_it() -> None:
    store: InMemorySessionStore[Any] = InMemorySessionStore()
    await store.create(SessionCreate("work", {"runs": 0}))
    named = await NamedSession.open(store, "work")
    await named.release()
    assert [s.name for s in await all_sessions(store)] == ["work"]


async def test_the_longest_name_is_claimed_under_an_id_the_store_takes() -> None:
    """A name of 256 characters (the most ``--session`` takes) is too long for an ID as it is:
    its claim has an ID of its own, the same for every process."""
    store: InMemorySessionStore[Any] = InMemorySessionStore()
    name = "n" * 256
    assert claim_id(name) == claim_id(name)
    assert len(claim_id(name)) <= 256
    assert claim_id(name) != claim_id("n" * 255 + "m")
    first = await NamedSession.open(store, name)
    second = await NamedSession.open(store, name)
    await first.started("conv_1")
    await second.started("conv_2")
    named = [s for s in await all_sessions(store) if s.name == name]
    assert [s.conversations for s in named] == [("conv_1", "conv_2")]
