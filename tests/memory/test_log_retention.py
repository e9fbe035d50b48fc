"""The in-memory log's retention through the runtime: idle conversations are evicted least
recently used first, a conversation with a run going never is, continuing an evicted one is a
typed error that says so, and what capabilities keep per conversation goes with it."""

from __future__ import annotations

from typing import Any

import pytest
import trio

from capabilities import in_memory_storage
from capabilities.steering import InputReceipt, SteeringService
from effectagent import Agent, Layer, RunResult, ToolCallContext, open_runtime
from effectagent.core import ConversationCreated, RunCompletedRecord, UserInputRecorded
from effectagent.engine import (
    ConversationEvicted,
    ConversationLogService,
    InMemoryConversationLog,
    LogRetention,
    UnknownConversation,
)
from effectagent.testing import FunctionModel

from .helpers import PING, TOOLKIT, Ping, make_agent, respond

PLAIN = Agent("plain", "Answer briefly.")


def answering(log: InMemoryConversationLog) -> Layer:
    return FunctionModel(lambda request: "ok").as_layer() + Layer.succeed(
        ConversationLogService, log
    )


async def test_continuing_an_evicted_conversation_says_it_was_evicted() -> None:
    log = InMemoryConversationLog(LogRetention(max_conversations=2))
    async with open_runtime(answering(log)) as runtime:
        first = (await runtime.run(PLAIN, "one")).conversation_id
        await runtime.run(PLAIN, "two")
        assert log.has(first)
        await runtime.run(PLAIN, "three")  # the third conversation: the least recent goes
        assert not log.has(first)
        assert log.evicted(first)
        assert len(log.conversations()) == 2

        with pytest.raises(ConversationEvicted, match="was evicted from the in-memory log"):
            await runtime.run(PLAIN, "again", conversation_id=first)
        with pytest.raises(UnknownConversation):  # what handles unknown handles evicted too
            async with runtime.stream(PLAIN, "again", conversation_id=first):
                pass
        assert not log.has(first)  # refused before the run started: nothing written
        with pytest.raises(UnknownConversation) as never:
            await runtime.run(PLAIN, "hello", conversation_id="never-was")
        assert type(never.value) is UnknownConversation

        # Created anew under the evicted ID, it is a new conversation, and continues.
        anew = await runtime.run(PLAIN, "anew", conversation_id=first, create=True)
        assert anew.status == "completed"
        assert not log.evicted(first)
        assert (await log.entries(first))[0].seq == 1
        assert (await runtime.run(PLAIN, "more", conversation_id=first)).status == "completed"


async def test_reading_a_conversation_keeps_it() -> None:
    log = InMemoryConversationLog(LogRetention(max_conversations=2))
    async with open_runtime(answering(log)) as runtime:
        first = (await runtime.run(PLAIN, "one")).conversation_id
        second = (await runtime.run(PLAIN, "two")).conversation_id
        await log.entries(first)  # read: the second is now the least recently used
        await runtime.run(PLAIN, "three")
        assert log.has(first)
        assert log.evicted(second)


async def test_a_conversation_with_a_run_going_is_never_evicted() -> None:
    log = InMemoryConversationLog(LogRetention(max_conversations=1))
    parked_ids = {"parked-1", "parked-2", "parked-3"}
    gate = trio.Event()
    arrived = trio.Semaphore(0)

    async def wait(params: Ping, call: ToolCallContext) -> Ping:
        if call.conversation_id in parked_ids:
            arrived.release()
            await gate.wait()
        return params

    layer = TOOLKIT.handlers({PING: wait}) + FunctionModel(respond).as_layer()
    layer = layer + Layer.succeed(ConversationLogService, log)
    agent = make_agent()
    results: list[RunResult[Any]] = []

    async def parked_run(conversation_id: str) -> None:
        results.append(await runtime.run(agent, "hi", conversation_id=conversation_id, create=True))

    async with open_runtime(layer) as runtime, trio.open_nursery() as nursery:
        for conversation_id in sorted(parked_ids):
            nursery.start_soon(parked_run, conversation_id)
        for _ in parked_ids:
            await arrived.acquire()
        # Three runs are parked in their tool; ten more come and finish. The log is over its
        # cap of one conversation all along, and evicts only what is idle.
        for _ in range(10):
            assert (await runtime.run(agent, "hi")).status == "completed"
        assert set(log.conversations()) == parked_ids
        gate.set()
    assert [result.status for result in results] == ["completed"] * 3
    for result in results:  # each finished on its whole history: input, call, result, answer
        assert result.outcomes[0].kind == "success"
    assert len(log.conversations()) == 1  # no run going: within the cap again


async def test_a_run_holds_its_conversation_from_its_input_to_its_end_record() -> None:
    # What holds a child run's conversation: the runtime does not claim it, its records do.
    log = InMemoryConversationLog(LogRetention(max_conversations=1))

    def created(conversation_id: str) -> ConversationCreated:
        return ConversationCreated(conversation_id=conversation_id, agent="a", at=0.0)

    started = UserInputRecorded(
        conversation_id="child",
        run_id="run-1",
        input_id="input-1",
        kind="user",
        text="go",
        author="parent",
        at=0.0,
    )
    await log.append("child", [created("child"), started])
    for n in range(5):
        await log.append(f"other-{n}", [created(f"other-{n}")])
    assert log.has("child")
    ended = RunCompletedRecord(
        conversation_id="child", run_id="run-1", output="done", finish_reason="stop", at=0.0
    )
    await log.append("child", [ended])
    assert log.conversations() == ("child",)  # idle now, and the most recently used
    await log.append("other-6", [created("other-6")])
    assert log.evicted("child")


async def test_keep_everything_keeps_every_conversation() -> None:
    log = InMemoryConversationLog(LogRetention.keep_everything())
    async with open_runtime(answering(log)) as runtime:
        for _ in range(30):
            await runtime.run(PLAIN, "hi")
    assert len(log.conversations()) == 30
    assert log.retained_bytes == 0  # nothing to account for


async def test_steering_statuses_go_with_their_conversation() -> None:
    model = FunctionModel(respond)
    receipts: list[InputReceipt] = []

    async def steered(params: Ping, call: ToolCallContext) -> Ping:
        steering = runtime.context[SteeringService]
        receipts.append(await steering.steer(call.conversation_id, "briefly", author="ops"))
        return params

    storage = in_memory_storage(log_retention=LogRetention(max_conversations=1))
    layer = TOOLKIT.handlers({PING: steered}) + model.as_layer() + storage
    async with open_runtime(layer) as runtime:
        steering = runtime.context[SteeringService]
        await runtime.run(make_agent(), "hi")
        first = receipts[0]
        assert first.accepted
        status = await steering.status(first.input_id)
        assert status is not None
        assert status.state == "delivered"
        await runtime.run(make_agent(), "hi")  # a second conversation: the first is evicted
        assert await steering.status(first.input_id) is None
        second = await steering.status(receipts[1].input_id)
        assert second is not None
        assert second.state == "delivered"


def test_in_memory_storage_takes_a_retention_only() -> None:
    with pytest.raises(TypeError, match="log_retention must be a LogRetention"):
        in_memory_storage(log_retention=1_000)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="retention must be a LogRetention"):
        InMemoryConversationLog(1_000)  # type: ignore[arg-type]


async def test_a_continued_conversation_is_held_from_the_moment_its_run_is_claimed() -> None:
    # A streamed run reads the history as its block is entered, and its task appends later: in
    # between, another conversation's append must not evict the one it continues.
    log = InMemoryConversationLog(LogRetention(max_conversations=1))
    async with open_runtime(answering(log)) as runtime:
        first = await runtime.run(PLAIN, "one")
        conversation_id = first.conversation_id
        async with runtime.stream(PLAIN, "two", conversation_id=conversation_id) as events:
            log.append_nowait(
                "other", [ConversationCreated(conversation_id="other", agent="a", at=0.0)]
            )
            assert log.has(conversation_id)
            async for _ in events:
                pass
        inputs = [
            entry.record.text
            for entry in await log.entries(conversation_id)
            if isinstance(entry.record, UserInputRecorded)
        ]
        assert inputs == ["one", "two"]  # one conversation, its whole history
