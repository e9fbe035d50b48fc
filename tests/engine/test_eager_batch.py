"""Eager tool calls, through the real engine: a call runs in the batch's own task until it has to
wait, and only then does a task take the calls behind it.

What a task per call guaranteed must still hold: calls run concurrently (a waiting call never holds
up a later one), and each call has a context of its own (a context variable a handler sets reaches
neither the caller, the run, nor another call). What changes is the cost: calls that never wait run
in the caller's task, one after another, with no task at all.
"""

from __future__ import annotations

import contextvars
from typing import Any

import trio
import trio.testing

from effectagent import Layer, ToolCallContext, open_runtime
from effectagent.ai import LanguageModelService
from effectagent.core import ToolCallSucceeded
from effectagent.testing import ScriptedModel, Turn

from .helpers import Forecast, Lookup, events_of, forecast_tool, make_agent, run_events

MARK: contextvars.ContextVar[str] = contextvars.ContextVar("MARK", default="unset")


def _batch(*cities: str) -> Turn:
    return Turn.tool_calls(*(("forecast", {"city": c}, f"call_{i}") for i, c in enumerate(cities)))


async def test_a_handlers_context_variables_never_reach_the_caller_or_another_call(
    autojump_clock: trio.testing.MockClock,
) -> None:
    tool = forecast_tool()
    agent = make_agent(tool)
    seen: list[tuple[str, str, str]] = []

    async def handle(params: Lookup, call: ToolCallContext) -> Forecast:
        before = MARK.get()
        MARK.set(f"set by {call.tool_call_id}")
        if params.city == "Rome":
            await trio.sleep(1)  # this call waits: the calls after it go on in another task
        seen.append((call.tool_call_id, before, MARK.get()))
        return Forecast(params.city, 1.0)

    model = ScriptedModel(
        [
            _batch("Oslo"),  # one call: run in the caller's task
            _batch("Oslo", "Rome", "Oslo", "Oslo"),  # several, one waiting
            Turn.text("done"),
        ]
    )
    layer = agent.toolkit.handlers({tool: handle}) + Layer.succeed(LanguageModelService, model)
    async with open_runtime(layer, agents=[agent]) as runtime:
        MARK.set("caller")
        result = await runtime.run(agent, "go")
        assert MARK.get() == "caller"
    assert result.status == "completed"
    assert len(seen) == 5
    # Every call starts from the caller's value and keeps its own change to the end.
    assert all(before == "caller" for _, before, _ in seen), seen
    assert all(after == f"set by {call_id}" for call_id, _, after in seen), seen


async def test_a_waiting_call_never_holds_up_the_calls_after_it(
    autojump_clock: trio.testing.MockClock,
) -> None:
    tool = forecast_tool()
    agent = make_agent(tool)
    finished: dict[str, float] = {}
    latency = {"Oslo": 5.0, "Rome": 0.0, "Bergen": 1.0}

    async def handle(params: Lookup, call: ToolCallContext) -> Forecast:
        if latency[params.city]:
            await trio.sleep(latency[params.city])
        finished[params.city] = trio.current_time()
        return Forecast(params.city, 1.0)

    model = ScriptedModel([_batch("Oslo", "Rome", "Bergen"), Turn.text("done")])
    layer = agent.toolkit.handlers({tool: handle}) + Layer.succeed(LanguageModelService, model)
    async with open_runtime(layer, agents=[agent]) as runtime:
        events = await run_events(runtime, agent, "go")
    assert finished == {"Rome": 0.0, "Bergen": 1.0, "Oslo": 5.0}
    succeeded = [e.tool_call_id for e in events_of(events, ToolCallSucceeded)]
    assert succeeded == ["call_1", "call_2", "call_0"]  # completion order; the commit is in order
    assert trio.current_time() == 5.0


async def test_calls_that_never_wait_run_in_the_callers_task_and_waiting_ones_get_a_task_each(
    autojump_clock: trio.testing.MockClock,
) -> None:
    tool = forecast_tool()
    agent = make_agent(tool)
    tasks: list[tuple[str, Any]] = []

    async def handle(params: Lookup, call: ToolCallContext) -> Forecast:
        tasks.append((params.city, trio.lowlevel.current_task()))  # in the order calls start
        if params.city == "Rome":
            await trio.sleep(1)
        return Forecast(params.city, 1.0)

    model = ScriptedModel(
        [_batch("Oslo", "Oslo", "Oslo"), _batch("Rome", "Rome", "Rome"), Turn.text("done")]
    )
    layer = agent.toolkit.handlers({tool: handle}) + Layer.succeed(LanguageModelService, model)
    async with open_runtime(layer, agents=[agent]) as runtime:
        await runtime.run(agent, "go")
        caller = trio.lowlevel.current_task()
    first = [task for city, task in tasks if city == "Oslo"]
    second = [task for city, task in tasks if city == "Rome"]
    assert first == [caller, caller, caller]  # never waited: no task at all
    assert len(set(map(id, second))) == 3  # each waited: the caller's task and two more
    assert second[0] is caller


async def test_a_call_timing_out_in_the_batch_task_leaves_the_others_to_finish(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The first call runs in the batch's own task and times out there; its timeout cancels that
    call alone, while the calls it made room for go on in a worker and settle as they should."""
    slow = forecast_tool("slow", timeout=2.0)
    fast = forecast_tool("fast")
    agent = make_agent(slow, fast)

    async def hang(params: Lookup, call: ToolCallContext) -> Forecast:
        await trio.sleep(60)
        return Forecast(params.city, 0.0)

    async def quick(params: Lookup, call: ToolCallContext) -> Forecast:
        await trio.sleep(3)
        return Forecast(params.city, 1.0)

    model = ScriptedModel(
        [
            Turn.tool_calls(
                ("slow", {"city": "Oslo"}, "call_slow"),
                ("fast", {"city": "Rome"}, "call_a"),
                ("fast", {"city": "Lima"}, "call_b"),
            ),
            Turn.text("done"),
        ]
    )
    layer = agent.toolkit.handlers({slow: hang, fast: quick}) + Layer.succeed(
        LanguageModelService, model
    )
    async with open_runtime(layer, agents=[agent]) as runtime:
        result = await runtime.run(agent, "go")
    kinds = [(o.tool_call_id, o.kind) for o in result.outcomes]
    assert kinds == [("call_slow", "defect"), ("call_a", "success"), ("call_b", "success")]
    assert trio.current_time() == 3.0  # the batch took its slowest call, not the sum
