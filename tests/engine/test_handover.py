"""The hand-over of a run's events: the stream's queue (bounded by backpressure, never losing or
reordering an event), ``run``'s in-task reducer, and run identifiers."""

from __future__ import annotations

import os
from typing import Any

import attrs
import pytest
import trio
import trio.testing
from hypothesis import given
from hypothesis import strategies as st

from effectagent.core import (
    RunInterrupted,
    TextDelta,
    ToolCallDeclared,
    ToolCallSucceeded,
    ToolSuccess,
    TurnStarted,
    UsageTotals,
)
from effectagent.engine._handover import EventQueue, RunReducer
from effectagent.engine._ids import new_id
from effectagent.engine._runtime import EVENT_BUFFER
from effectagent.testing import Turn

from .helpers import TrackingModel, assert_well_formed, make_agent


class _NoRun:
    """A RunIO's owner that nothing interrupts here."""

    def interrupt(self) -> None:
        return None


def _event(n: int) -> Any:
    return ("event", n)  # the queue never looks inside an event


# ---- EventQueue, without a run -------------------------------------------------------------------


def test_the_limit_must_be_positive() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        EventQueue(0)


async def test_events_come_out_in_order_then_none_once_closed() -> None:
    queue = EventQueue(4)
    for n in range(10):  # ``put`` never blocks, even beyond the limit
        assert queue.feed(_event(n))
    assert queue.full
    queue.close()
    got = []
    while (event := await queue.get()) is not None:
        got.append(event)
    assert got == [_event(n) for n in range(10)]
    assert await queue.get() is None


async def test_a_consumer_waiting_for_an_event_is_woken_by_put_and_by_close() -> None:
    queue = EventQueue(4)
    got: list[Any] = []

    async def consume() -> None:
        while (event := await queue.get()) is not None:
            got.append(event)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(consume)
        await trio.testing.wait_all_tasks_blocked()
        queue.feed(_event(1))
        await trio.testing.wait_all_tasks_blocked()
        assert got == [_event(1)]
        queue.close()
    assert got == [_event(1)]


async def test_a_producer_waits_for_room_until_the_consumer_drains_to_the_limit() -> None:
    queue = EventQueue(2)
    for n in range(5):
        queue.feed(_event(n))
    resumed = trio.Event()

    async def produce() -> None:
        await queue.wait_for_room()
        resumed.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(produce)
        await trio.testing.wait_all_tasks_blocked()
        assert not resumed.is_set()
        await queue.get()
        await queue.get()  # 5 -> 3 queued: still more than the limit
        await trio.testing.wait_all_tasks_blocked()
        assert not resumed.is_set()
        await queue.get()  # 2 queued: within the limit
        await trio.testing.wait_all_tasks_blocked()
        assert resumed.is_set()


async def test_detaching_refuses_events_and_releases_a_waiting_producer() -> None:
    queue = EventQueue(1)
    queue.feed(_event(1))
    queue.feed(_event(2))

    async def produce() -> None:
        await queue.wait_for_room()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(produce)
        await trio.testing.wait_all_tasks_blocked()
        queue.detach()
    assert not queue.feed(_event(3))
    assert len(queue) == 0
    assert await queue.get() is None


async def test_waiting_for_room_is_cancellable() -> None:
    queue = EventQueue(1)
    queue.feed(_event(1))
    queue.feed(_event(2))
    with trio.move_on_after(1) as waited:
        await queue.wait_for_room()
    assert waited.cancelled_caught


@given(limit=st.integers(1, 8), takes=st.lists(st.integers(0, 5), max_size=30))
def test_a_streamed_run_never_queues_more_than_its_limit_plus_a_turn(
    limit: int, takes: list[int]
) -> None:
    """Invariant: however the consumer paces itself, a run that streams many deltas never has more
    than ``limit`` + 1 events queued (the delta that found the queue full), and the consumer sees
    every event, gap-free."""

    async def main() -> tuple[int, list[Any]]:
        queue = EventQueue(limit)
        most = 0
        seen: list[Any] = []

        async def produce() -> None:
            nonlocal most
            for n in range(60):
                queue.feed(_event(n))
                most = max(most, len(queue))
                if queue.full:
                    await queue.wait_for_room()
            queue.close()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(produce)
            pace = iter(takes)
            while (event := await queue.get()) is not None:
                seen.append(event)
                for _ in range(next(pace, 0)):  # the consumer dawdles a varying number of steps
                    await trio.lowlevel.checkpoint()
        return most, seen

    most, seen = trio.run(main)
    assert most <= limit + 1
    assert seen == [_event(n) for n in range(60)]


# ---- through the runtime -------------------------------------------------------------------------


async def test_a_slow_consumer_holds_a_chatty_run_back_without_losing_an_event(
    autojump_clock: trio.testing.MockClock,
) -> None:
    from effectagent import open_runtime

    deltas = 3 * EVENT_BUFFER
    model = TrackingModel([Turn.text("x" * deltas, chunk=1)])
    agent = make_agent()
    most = 0
    events: list[Any] = []
    async with (
        open_runtime(model.layer(), agents=[agent]) as runtime,
        runtime.stream(agent, "Talk a lot.") as stream,
    ):
        async for event in stream:
            events.append(event)
            most = max(most, len(stream._queue))
            await trio.sleep(0.01)  # slower than the model
    assert most <= EVENT_BUFFER + 1
    assert sum(1 for e in events if isinstance(e, TextDelta)) == deltas
    assert not isinstance(assert_well_formed(events), RunInterrupted)


async def test_runtime_run_executes_in_the_callers_own_task(
    autojump_clock: trio.testing.MockClock,
) -> None:
    from effectagent import open_runtime

    seen: list[trio.lowlevel.Task] = []
    model = TrackingModel(
        [Turn.text("Hi.").with_inspection(lambda _: seen.append(trio.lowlevel.current_task()))]
    )
    agent = make_agent()
    async with open_runtime(model.layer(), agents=[agent]) as runtime:
        result = await runtime.run(agent, "Hello")
    assert result.status == "completed"
    assert seen == [trio.lowlevel.current_task()]


# ---- identifiers ---------------------------------------------------------------------------------


def test_identifiers_are_prefixed_64_bit_hex_and_do_not_repeat() -> None:
    ids = {new_id("run") for _ in range(50_000)}
    assert len(ids) == 50_000
    sample = next(iter(ids))
    assert sample.startswith("run_")
    assert len(sample) == len("run_") + 16
    int(sample[4:], 16)


def test_a_forked_child_draws_different_identifiers_than_its_parent() -> None:
    new_id("x")  # whatever the parent has drawn ahead (and not handed out yet) stays its own
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            os.write(write, new_id("x").encode())
        finally:
            os._exit(0)
    os.close(write)
    child = os.read(read, 64).decode()
    os.close(read)
    os.waitpid(pid, 0)
    assert child.startswith("x_")
    assert child != new_id("x")


async def test_a_run_interrupted_before_it_starts_ends_interrupted_without_a_model_call(
    autojump_clock: trio.testing.MockClock,
) -> None:
    from effectagent import open_runtime

    model = TrackingModel([Turn.text("never")])
    agent = make_agent()
    async with open_runtime(model.layer(), agents=[agent]) as runtime:
        stream = runtime.stream(agent, "Hi")
        stream.interrupt()
        async with stream:
            events = [event async for event in stream]
    assert isinstance(assert_well_formed(events), RunInterrupted)
    assert model.requests == []


async def test_reporting_progress_is_a_checkpoint_and_becomes_an_event(
    autojump_clock: trio.testing.MockClock,
) -> None:
    from effectagent import open_runtime
    from effectagent.ai import ToolCallContext
    from effectagent.core import ToolCallSucceeded, ToolProgress

    from .helpers import Forecast, Lookup, forecast_tool

    tool = forecast_tool()
    agent = make_agent(tool)

    async def handle(params: Lookup, call: ToolCallContext) -> Forecast:
        with trio.testing.assert_checkpoints():
            await call.progress({"done": 0.5})
        return Forecast(params.city, 4.0)

    model = TrackingModel([Turn.tool_calls(("forecast", {"city": "Oslo"})), Turn.text("4 °C.")])
    layer = agent.toolkit.handlers({tool: handle}) + model.layer()
    async with (
        open_runtime(layer, agents=[agent]) as runtime,
        runtime.stream(agent, "Weather?") as stream,
    ):
        events = [event async for event in stream]
    (progress,) = [e for e in events if isinstance(e, ToolProgress)]
    assert progress.tool_call_id == "call_0"
    # The handler's own assertion passed: had it failed, the call would have settled as a defect.
    (settled,) = [e for e in events if isinstance(e, ToolCallSucceeded)]
    assert settled.outcome.kind == "success"
    assert not isinstance(assert_well_formed(events), RunInterrupted)


async def test_a_record_left_for_later_survives_a_cancelled_append_and_goes_first() -> None:
    """The model response waits for its turn's next append (``record_later``). If that append is
    cancelled — all or nothing, so nothing was written — the response stays pending and the next
    append writes it first: a turn's model response is never lost, and stays in order."""
    from effectagent.core import ConversationCreated, RunFailedRecord, SecretRedactor
    from effectagent.engine import InMemoryConversationLog
    from effectagent.engine._handover import RunReducer
    from effectagent.engine._io import RunIO

    agent = make_agent()
    log = InMemoryConversationLog()
    driver = RunIO(
        run_id="run_1",
        conversation_id="conv_1",
        agent_name=agent.name,
        conversation_log=log,
        redactor=SecretRedactor(),
        events=RunReducer(),
        owner=_NoRun(),
    )
    # Any record stands in for the model response.
    response = ConversationCreated(conversation_id="conv_1", agent=agent.name, at=1.0)
    driver.record_later(response)
    with trio.CancelScope() as scope:
        scope.cancel()
        await driver.record(
            RunFailedRecord(
                conversation_id="conv_1", run_id="run_1", error=None, reason="lost", at=2.0
            )
        )
    assert scope.cancelled_caught
    assert await log.entries("conv_1") == ()
    ending = RunFailedRecord(
        conversation_id="conv_1", run_id="run_1", error=None, reason="interrupted", at=3.0
    )
    await driver.record(ending)
    assert [entry.record for entry in await log.entries("conv_1")] == [response, ending]
    await driver.record(ending)  # written once: nothing is pending any more
    assert [entry.seq for entry in await log.entries("conv_1")] == [1, 2, 3]


# ---- the reducer: outcomes in declaration order --------------------------------------------------


def _run_event(cls: Any, seq: int, **fields: Any) -> Any:
    header = {"run_id": "r", "conversation_id": "c", "agent": "a", "seq": seq, "at": 0.0}
    return cls(**header, **fields)


@given(turns=st.lists(st.integers(1, 4), min_size=1, max_size=3), data=st.data())
def test_the_result_lists_outcomes_in_declaration_order_whatever_order_they_settle(
    turns: list[int], data: st.DataObject
) -> None:
    """Calls declared over several turns (IDs reused across turns, as a conversation may) and
    settled in any order: the result lists them turn by turn, in declaration order; a settlement
    nothing declared comes after them all."""
    declared = [(turn, f"call_{i}") for turn, count in enumerate(turns, 1) for i in range(count)]
    settle_order = data.draw(st.permutations(declared))
    reducer = RunReducer()
    seq = 0
    for turn, call_id in declared:
        seq += 1
        reducer.feed(
            _run_event(
                ToolCallDeclared, seq, turn=turn, tool_call_id=call_id, tool_name="t", arguments={}
            )
        )
    stray = (9, "call_stray")
    for turn, call_id in [*settle_order[:1], stray, *settle_order[1:]]:
        seq += 1
        outcome = ToolSuccess(call_id, "t", f"{turn}/{call_id}")
        reducer.feed(
            _run_event(
                ToolCallSucceeded,
                seq,
                turn=turn,
                tool_call_id=call_id,
                tool_name="t",
                outcome=outcome,
            )
        )
    seq += 1
    reducer.feed(_run_event(RunInterrupted, seq, reason="test", usage=UsageTotals()))
    expected = [ToolSuccess(c, "t", f"{turn}/{c}") for turn, c in [*declared, stray]]
    assert reducer.result().outcomes == tuple(expected)


def test_the_reducer_keeps_the_terminal_event_alone_and_knows_one_of_a_subclass() -> None:
    """A run's reducer keeps only its terminal event (not the last one fed); a terminal event of
    a subclass is one too; without one the result is refused, saying how many events came."""

    @attrs.frozen
    class Stopped(RunInterrupted):
        pass

    reducer = RunReducer()
    with pytest.raises(RuntimeError, match="no events"):
        reducer.result()
    reducer.feed(_run_event(TurnStarted, 1, turn=1))
    with pytest.raises(RuntimeError, match="after 1 events"):
        reducer.result()
    reducer.feed(_run_event(Stopped, 2, reason="test", usage=UsageTotals()))
    assert reducer.result().status == "interrupted"
    assert (reducer.count, reducer.terminal) == (
        2,
        _run_event(Stopped, 2, reason="test", usage=UsageTotals()),
    )
