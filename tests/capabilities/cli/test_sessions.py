"""Named sessions of the command over a real session store: a name maps to its conversation,
runs are counted, a new chat never takes an existing name."""

from __future__ import annotations

from typing import Any

from capabilities.cli._main import _new_name
from capabilities.cli._sessions import NamedSession, find_session, runs_of
from capabilities.sessions import SessionCreate
from capabilities.sessions._memory import InMemorySessionStore


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
    assert await _new_name(store, "chat-1") == "chat-1"
    await store.create(SessionCreate("chat-1", {}))
    await store.create(SessionCreate("chat-1-2", {}))
    assert await _new_name(store, "chat-1") == "chat-1-3"
