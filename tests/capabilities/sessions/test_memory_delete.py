"""``delete(..., conversations=True)`` on the in-memory store ``in_memory_storage`` provides, as on
SQLite: the session's conversations no other session lists go with it (records and media no
record left refers to), nothing goes while one of them has a run going, and the keyword is part of
the ``SessionStore`` protocol a typed user gets from ``SessionStoreService``."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from capabilities import SessionStoreService, in_memory_storage
from capabilities.sessions import SessionCreate, SessionStore, SessionStoreError
from capabilities.sessions._memory import InMemorySessionStore
from effectagent import Agent, Toolkit, open_runtime, tool
from effectagent.ai import ImagePart
from effectagent.engine import ConversationLogService, InMemoryConversationLog
from effectagent.testing import ScriptedModel, Turn

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 64
AGENT = Agent("a", "Answer.")


async def test_a_session_deleted_with_its_conversations_takes_them_from_the_memory_log(
    autojump_clock: trio.testing.MockClock,
) -> None:
    model = ScriptedModel([Turn.text("one"), Turn.text("two"), Turn.text("three")])
    async with open_runtime(model.as_layer() + in_memory_storage(), agents=[AGENT]) as runtime:
        sessions: SessionStore[object] = runtime.context[SessionStoreService]
        log = runtime.context[ConversationLogService]
        assert isinstance(log, InMemoryConversationLog)
        shared = ImagePart(PNG, media_type="image/png")
        own = ImagePart(PNG + b"own", media_type="image/png")
        for conversation, image in (("one", own), ("two", shared), ("three", shared)):
            await runtime.run(AGENT, ["look", image], conversation_id=conversation, create=True)
        assert len(log.media_digests) == 2
        mine = await sessions.create(SessionCreate("mine", {}, conversations=("one", "two")))
        await sessions.create(SessionCreate("other", {}, conversations=("two",)))
        kept = await sessions.create(SessionCreate("kept", {}, conversations=("three",)))
        await sessions.delete(mine.id, mine.revision, conversations=True)
        assert await sessions.get(mine.id) is None
        assert await log.entries("one") == ()
        assert len(await log.entries("two")) > 0  # another session lists it
        assert len(log.media_digests) == 1  # one's own image went, the shared one stays
        await sessions.delete(kept.id, kept.revision)  # without: the conversation stays
        assert len(await log.entries("three")) > 0


async def test_nothing_is_deleted_while_a_run_of_one_conversation_is_going(
    autojump_clock: trio.testing.MockClock,
) -> None:
    started = trio.Event()

    @tool
    async def wait() -> str:
        """Wait a while."""
        started.set()
        await trio.sleep(10)
        return "done"

    agent = Agent("w", "Wait.", toolkit=Toolkit(wait))
    model = ScriptedModel([Turn.tool_calls(("wait", {})), Turn.text("waited")])
    layer = Toolkit(wait).handlers() + model.as_layer() + in_memory_storage()
    async with open_runtime(layer, agents=[agent]) as runtime:
        sessions = runtime.context[SessionStoreService]
        session = await sessions.create(SessionCreate("s", {}, conversations=("busy",)))
        async with trio.open_nursery() as nursery:
            nursery.start_soon(
                lambda: runtime.run(agent, "Go.", conversation_id="busy", create=True)
            )
            await started.wait()
            with pytest.raises(SessionStoreError, match="busy"):
                await sessions.delete(session.id, session.revision, conversations=True)
        assert (await sessions.get(session.id)) is not None  # nothing changed
        assert len(await runtime.log.entries("busy")) > 0


async def test_a_store_without_a_log_refuses_to_delete_conversations() -> None:
    store: InMemorySessionStore[object] = InMemorySessionStore()
    session = await store.create(SessionCreate("s", {}, conversations=("c",)))
    # A SessionStoreError (as every error of a store is; it was a bare ValueError), and a
    # ValueError still.
    with pytest.raises(SessionStoreError, match="no conversation log") as refused:
        await store.delete(session.id, session.revision, conversations=True)
    assert isinstance(refused.value, ValueError)
    with pytest.raises(TypeError, match="conversations must be a bool"):
        await store.delete(session.id, session.revision, conversations=1)  # type: ignore[arg-type]
    await store.delete(session.id, session.revision)
    assert await store.get(session.id) is None
