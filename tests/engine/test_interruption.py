"""Interruption: cancelling the caller (or leaving the stream early) stops the model stream and
every tool task, ends the run with RunInterrupted, writes RunFailedRecord("interrupted"), settles
unfinished calls as interrupted defects, and leaves no task behind."""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.testing

from effectagent.ai import TextDeltaPart, TextStartPart, ToolCallContext
from effectagent.core import (
    EventBase,
    RunFailedRecord,
    RunInterrupted,
    ToolCallSettled,
    ToolCallStarted,
    ToolDefect,
)
from effectagent.engine import open_runtime
from effectagent.testing import Turn

from .helpers import (
    Forecast,
    HandlerProbe,
    Lookup,
    TrackingModel,
    assert_well_formed,
    descendant_tasks,
    entries,
    forecast_tool,
    make_agent,
    records_of,
)

_STREAMING = Turn.hanging(after=[TextStartPart("t"), TextDeltaPart("t", "Let me think")])


def _two_hanging_calls() -> Turn:
    return Turn.tool_calls(("forecast", {"city": "Oslo"}), ("forecast", {"city": "Rome"}))


async def test_cancelling_run_during_model_streaming(
    autojump_clock: trio.testing.MockClock,
) -> None:
    model = TrackingModel([_STREAMING])
    agent = make_agent()
    async with open_runtime(model.layer(), agents=[agent]) as runtime:
        with trio.move_on_after(5) as cancel:
            await runtime.run(agent, "Think hard.")
        assert cancel.cancelled_caught  # the caller's cancellation is not swallowed
        assert runtime.active_runs == 0
        assert descendant_tasks(trio.lowlevel.current_task()) == []
        (conversation,) = runtime.log.conversations()  # type: ignore[attr-defined]
        log = await entries(runtime, conversation)
    assert model.all_streams_closed()
    (record,) = records_of(log, RunFailedRecord)
    assert record.reason == "interrupted"
    assert record.error is None


async def test_cancelling_the_stream_consumer_during_a_tool_batch(
    autojump_clock: trio.testing.MockClock,
) -> None:
    probe, tool = HandlerProbe(), forecast_tool()
    agent = make_agent(tool)
    model = TrackingModel([_two_hanging_calls()])
    layer = agent.toolkit.handlers({tool: probe.hanging()}) + model.layer()
    async with open_runtime(layer, agents=[agent]) as runtime:
        events: list[EventBase] = []
        async with runtime.stream(agent, "Weather?") as stream:
            with trio.CancelScope() as cancel:
                async for event in stream:
                    events.append(event)
                    if sum(isinstance(e, ToolCallStarted) for e in events) == 2:
                        await trio.sleep(1)  # both handlers are now hanging
                        cancel.cancel()
            # The run was interrupted; the stream still hands over what remains, terminal
            # included.
            async for event in stream:
                events.append(event)
        assert runtime.active_runs == 0
        assert descendant_tasks(trio.lowlevel.current_task()) == []
        log = await entries(runtime, stream.conversation_id)
    terminal = assert_well_formed(events)
    assert isinstance(terminal, RunInterrupted)
    assert probe.cancelled == 2
    assert probe.active == 0
    settled = records_of(log, ToolCallSettled)
    assert [s.tool_call_id for s in settled] == ["call_0", "call_1"]
    for s in settled:
        assert isinstance(s.outcome, ToolDefect)
        assert "interrupted" in s.outcome.message
    (record,) = records_of(log, RunFailedRecord)
    assert record.reason == "interrupted"
    assert model.all_streams_closed()


async def test_leaving_the_stream_block_early_interrupts_the_run(
    autojump_clock: trio.testing.MockClock,
) -> None:
    model = TrackingModel([_STREAMING])
    agent = make_agent()
    async with open_runtime(model.layer(), agents=[agent]) as runtime:
        async with runtime.stream(agent, "Think.") as stream:
            async for event in stream:
                if type(event).__name__ == "TextDelta":
                    break
        # Leaving the block waited until the run had written its interruption.
        assert runtime.active_runs == 0
        assert descendant_tasks(trio.lowlevel.current_task()) == []
        log = await entries(runtime, stream.conversation_id)
    (record,) = records_of(log, RunFailedRecord)
    assert record.reason == "interrupted"
    assert model.all_streams_closed()


async def test_a_bare_async_for_over_a_stream_is_refused_before_the_run_starts(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """``async for event in runtime.stream(...)`` — left by ``break``, it would leave the run
    calling the model and tools unseen until its deadline. It raises before anything starts."""
    model = TrackingModel([_STREAMING])
    agent = make_agent()
    async with open_runtime(model.layer(), agents=[agent]) as runtime:

        async def iterate_bare() -> None:
            async for _event in runtime.stream(agent, "Think."):
                break

        with pytest.raises(RuntimeError, match=r"async with runtime\.stream"):
            await iterate_bare()
        assert runtime.active_runs == 0
    assert model.requests == []


async def test_breaking_out_of_the_loop_and_leaving_the_block_stops_calls_at_once(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """``break`` during a tool batch, then leave the block: both hanging handlers are cancelled
    and the run is interrupted right away — not at its deadline (600 s)."""
    probe, tool = HandlerProbe(), forecast_tool()
    agent = make_agent(tool)
    model = TrackingModel([_two_hanging_calls()])
    layer = agent.toolkit.handlers({tool: probe.hanging()}) + model.layer()
    start = trio.current_time()
    async with open_runtime(layer, agents=[agent]) as runtime:
        async with runtime.stream(agent, "Weather?") as stream:
            async for event in stream:
                if isinstance(event, ToolCallStarted) and probe.active == 2:
                    break
        assert trio.current_time() - start < 1.0
        assert runtime.active_runs == 0
        log = await entries(runtime, stream.conversation_id)
    assert probe.cancelled == 2
    (record,) = records_of(log, RunFailedRecord)
    assert record.reason == "interrupted"


async def test_a_handler_with_its_own_nursery_is_interrupted_not_crashed(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Handlers doing concurrent work raise a group of Cancelled when interrupted: still an
    interruption (the run ends RunInterrupted, the call is an interrupted defect)."""
    tool = forecast_tool()
    started = trio.Event()

    async def fan_out(params: Lookup, call: ToolCallContext) -> Forecast:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(trio.sleep_forever)
            nursery.start_soon(trio.sleep_forever)
            started.set()
        raise AssertionError("unreachable")  # pragma: no cover

    await _interrupted_in_the_handler(tool, fan_out, started)


async def test_a_handler_raising_as_it_is_interrupted_is_interrupted_not_crashed(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A handler whose client raises an ordinary exception as it is cancelled (a closed
    connection) settled as "the tool crashed", though the run was interrupted."""
    tool = forecast_tool()
    started = trio.Event()

    async def client(params: Lookup, call: ToolCallContext) -> Forecast:
        started.set()
        try:
            await trio.sleep_forever()
        except trio.Cancelled:
            raise ConnectionError("connection closed while reading") from None
        raise AssertionError("unreachable")  # pragma: no cover

    await _interrupted_in_the_handler(tool, client, started)


async def _interrupted_in_the_handler(tool: Any, handler: Any, started: trio.Event) -> None:
    """Interrupt a run once ``handler`` has ``started``: the run ends RunInterrupted and the
    call settles as an interrupted defect, never a crash."""
    agent = make_agent(tool)
    model = TrackingModel([Turn.tool_calls(("forecast", {"city": "Oslo"}))])
    layer = agent.toolkit.handlers({tool: handler}) + model.layer()
    async with open_runtime(layer, agents=[agent]) as runtime:
        async with runtime.stream(agent, "Weather?") as stream:
            events = []
            async for event in stream:
                events.append(event)
                if isinstance(event, ToolCallStarted):
                    await started.wait()
                    stream.interrupt()
        log = await entries(runtime, stream.conversation_id)
    assert isinstance(assert_well_formed(events), RunInterrupted)
    (settled,) = records_of(log, ToolCallSettled)
    assert isinstance(settled.outcome, ToolDefect)
    assert "interrupted" in settled.outcome.message
    assert "crashed" not in settled.outcome.message


async def test_interrupting_a_run_blocked_on_a_slow_consumer_keeps_sequence_gap_free() -> None:
    """The run is stuck sending (the consumer is slow and the buffer full) when it is interrupted:
    the events the consumer then reads still count 1, 2, 3, ... up to the terminal one."""
    model = TrackingModel([Turn.text("x" * 400, chunk=1)])
    agent = make_agent()
    async with (
        open_runtime(model.layer(), agents=[agent]) as runtime,
        runtime.stream(agent, "Talk a lot.") as stream,
    ):
        events: list[Any] = [await stream.__anext__()]
        await trio.testing.wait_all_tasks_blocked()  # the run now waits on a full buffer
        stream.interrupt()
        async for event in stream:
            events.append(event)
    terminal = assert_well_formed(events)
    assert isinstance(terminal, RunInterrupted)
    assert len(events) < 400  # it really was cut short
    # The model's generator was suspended at a part when the run stopped: it was closed.
    assert model.all_streams_closed()


async def test_a_run_interrupted_just_as_its_batch_completes_still_commits_the_batch(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The last handler interrupts the run as it returns: the batch is complete, and the
    cancellation lands on the append that commits it. That append writes nothing, so the batch
    is then committed (shielded) before the run ends interrupted — never lost, never doubled."""
    tool = forecast_tool()
    agent = make_agent(tool)
    model = TrackingModel([Turn.tool_calls(("forecast", {"city": "Oslo"})), Turn.text("never")])
    streams: list[Any] = []

    async def handle(params: Lookup, call: ToolCallContext) -> Forecast:
        streams[0].interrupt()  # no checkpoint after this: the call still settles as a success
        return Forecast(params.city, 4.0)

    layer = agent.toolkit.handlers({tool: handle}) + model.layer()
    async with open_runtime(layer, agents=[agent]) as runtime:
        stream = runtime.stream(agent, "Weather?")
        streams.append(stream)
        async with stream:
            events = [event async for event in stream]
        log = await entries(runtime, stream.conversation_id)
    assert isinstance(assert_well_formed(events), RunInterrupted)
    (settled,) = records_of(log, ToolCallSettled)
    assert settled.outcome.kind == "success"
    assert len(model.requests) == 1  # interrupted: no second turn
