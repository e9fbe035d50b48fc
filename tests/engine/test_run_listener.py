"""The run listener seam (for tracing): it sees every event of a run, in order, as the consumer
does; it is entered around each tool handler in the call's own context (so what a handler traces
can nest under its call); a listener that fails is logged and dropped for the run, which goes on
unchanged."""

from __future__ import annotations

import contextvars
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import trio
import trio.testing

from effectagent.core import EventBase, RunCompleted, ToolCallStarted
from effectagent.effect import Layer
from effectagent.engine import RunListenerService, open_runtime
from effectagent.testing import ScriptedModel, Turn

from .helpers import HandlerProbe, engine_logs, forecast_tool, make_agent

CURRENT: contextvars.ContextVar[str] = contextvars.ContextVar("current_call", default="")


class Recorder:
    def __init__(self, fail_on: type[EventBase] | None = None) -> None:
        self.events: list[EventBase] = []
        self.entered: list[str] = []
        self.fail_on = fail_on

    def on_event(self, event: EventBase) -> None:
        self.events.append(event)
        if self.fail_on is not None and isinstance(event, self.fail_on):
            raise RuntimeError("the exporter is down")

    @contextmanager
    def call_context(self, run_id: str, tool_call_id: str) -> Iterator[None]:
        self.entered.append(tool_call_id)
        token = CURRENT.set(tool_call_id)
        try:
            yield
        finally:
            CURRENT.reset(token)


async def test_the_listener_sees_every_event_and_is_entered_around_each_call(
    autojump_clock: trio.testing.MockClock,
) -> None:
    probe, tool = HandlerProbe(), forecast_tool()
    seen_inside: dict[str, str] = {}

    async def handle(params: Any, call: Any) -> Any:
        await trio.sleep(1 if call.tool_call_id == "call_0" else 0.5)  # interleaved calls
        seen_inside[call.tool_call_id] = CURRENT.get()
        return await probe.forecast()(params, call)

    recorder = Recorder()
    agent = make_agent(tool)
    model = ScriptedModel(
        [
            Turn.tool_calls(("forecast", {"city": "Oslo"}), ("forecast", {"city": "Rome"})),
            Turn.text("done"),
            Turn.text("again"),
        ]
    )
    layer = (
        agent.toolkit.handlers({tool: handle})
        + model.as_layer()
        + Layer.succeed(RunListenerService, recorder)
    )
    async with open_runtime(layer, agents=[agent]) as runtime:
        async with runtime.stream(agent, "Weather?") as stream:
            consumed = [event async for event in stream]
        ran = await runtime.run(agent, "Again?")
    streamed = [e for e in recorder.events if e.run_id == consumed[0].run_id]
    assert streamed == consumed  # the same events, in the same order
    assert isinstance(recorder.events[-1], RunCompleted)
    assert recorder.events[-1].run_id == ran.run_id  # runtime.run is listened to as well
    assert seen_inside == {"call_0": "call_0", "call_1": "call_1"}  # each call its own context
    started = [e.tool_call_id for e in recorder.events if isinstance(e, ToolCallStarted)]
    assert sorted(recorder.entered) == sorted(started)
    assert CURRENT.get() == ""  # nothing leaked into the caller's context


async def test_a_failing_listener_is_logged_dropped_and_changes_nothing(
    autojump_clock: trio.testing.MockClock,
) -> None:
    recorder = Recorder(fail_on=ToolCallStarted)
    probe, tool = HandlerProbe(), forecast_tool()
    agent = make_agent(tool)
    model = ScriptedModel([Turn.tool_calls(("forecast", {"city": "Oslo"})), Turn.text("4 °C")])
    layer = (
        agent.toolkit.handlers({tool: probe.forecast()})
        + model.as_layer()
        + Layer.succeed(RunListenerService, recorder)
    )
    with engine_logs(logging.WARNING) as logs:
        async with open_runtime(layer, agents=[agent]) as runtime:
            result = await runtime.run(agent, "Weather?")
    assert (result.status, result.text) == ("completed", "4 °C")
    assert isinstance(recorder.events[-1], ToolCallStarted)  # not called again for this run
    (warning,) = [log for log in logs if log["event"] == "run listener failed"]
    assert warning["error"] == "RuntimeError"
    assert "exporter" not in repr(warning)  # its message is not logged: it may hold anything
