"""After a run that ended without an answer — Ctrl-C while the model streamed, a model call that
failed, an interruption while a tool ran, a failure a tool or the answer caused — the next run of
the conversation sends a prompt every provider family takes (#25 item 3): roles alternate, no tool
call goes without its result, and the model is told the previous answer was cut off."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import attrs
import pytest
import trio
import trio.testing

from effectagent.ai import (
    AssistantMessage,
    AuthenticationFailed,
    ModelRequest,
    TextContent,
    TextDeltaPart,
    TextStartPart,
    Tool,
    ToolCallContext,
    Toolkit,
)
from effectagent.core import Agent
from effectagent.effect import TaggedError
from effectagent.engine import Runtime, open_runtime
from effectagent.testing import ScriptedModel, Turn

from ..core.provider_rules import problems
from .helpers import make_policy

CUT_OFF = "[This answer was cut off:"


@attrs.frozen
class Lookup:
    city: str


@attrs.frozen
class StationDown(TaggedError):
    pass


async def _forecast(params: Lookup, call: ToolCallContext) -> str:
    if params.city == "Nowhere":
        await trio.sleep_forever()
    if params.city == "Down":
        raise StationDown()
    await trio.lowlevel.checkpoint()
    return "4 °C"


FORECAST: Tool[Lookup, str] = Tool(
    "forecast",
    "Forecast.",
    parameters=Lookup,
    success=str,
    failure=StationDown,
    failure_mode="error",
)


@attrs.frozen
class Answer:
    high_c: float


def _agent(**kwargs: Any) -> Agent:
    policy = kwargs.pop("policy", make_policy())
    return Agent("weather", "Answer.", policy, Toolkit(FORECAST), **kwargs)


Interrupt = Callable[[Runtime, Agent], Awaitable[str]]


async def _cut_by_a_deadline(runtime: Runtime, agent: Agent) -> str:
    """Ctrl-C, as the caller's cancellation: the run is interrupted."""
    async with runtime.stream(agent, "Weather in Oslo?") as events:
        with trio.move_on_after(5):
            async for _ in events:
                pass
        return events.conversation_id


async def _ran_to_its_end(runtime: Runtime, agent: Agent) -> str:
    result = await runtime.run(agent, "Weather in Oslo?")
    assert result.status == "failed", result
    return result.conversation_id


SCENARIOS: dict[str, tuple[list[Turn], Interrupt, dict[str, Any]]] = {
    "interrupted while the model streamed": (
        [Turn.hanging(after=[TextStartPart("t"), TextDeltaPart("t", "It is ")])],
        _cut_by_a_deadline,
        {},
    ),
    "interrupted before the model answered": ([Turn.hanging()], _cut_by_a_deadline, {}),
    "the model call failed": ([Turn.fail(AuthenticationFailed("bad key"))], _ran_to_its_end, {}),
    "interrupted while a tool ran": (
        [Turn.tool_calls(("forecast", {"city": "Nowhere"}))],
        _cut_by_a_deadline,
        {},
    ),
    "a tool failure ended the run": (
        [Turn.tool_calls(("forecast", {"city": "Down"}))],
        _ran_to_its_end,
        {},
    ),
    "the answer did not decode": (
        [Turn.text("warm")],
        _ran_to_its_end,
        {"output": Answer, "policy": make_policy(output_retries=0)},
    ),
    "the grace turn declared tools": (
        [
            Turn.tool_calls(("forecast", {"city": "Oslo"})),
            Turn.tool_calls(("forecast", {"city": "Oslo"})),
        ],
        _ran_to_its_end,
        {"policy": make_policy(max_turns=1)},
    ),
}


@pytest.mark.parametrize("scenario", list(SCENARIOS))
async def test_the_next_prompt_is_valid_for_every_provider_and_says_it_was_cut_off(
    scenario: str, autojump_clock: trio.testing.MockClock
) -> None:
    turns, interrupt, options = SCENARIOS[scenario]
    agent = _agent(**options)
    model = ScriptedModel([*turns, Turn.text('{"high_c": 4}')])
    layer = agent.toolkit.handlers({"forecast": _forecast}) + model.as_layer()
    async with open_runtime(layer, agents=[agent]) as runtime:
        conversation_id = await interrupt(runtime, agent)
        result = await runtime.run(agent, "And now?", conversation_id=conversation_id)
    assert result.status == "completed", result
    request: ModelRequest = model.requests[-1]
    assert problems(request.messages) == {}, scenario
    notes = [
        part.text
        for message in request.messages
        if isinstance(message, AssistantMessage)
        for part in message.content
        if isinstance(part, TextContent) and part.text.startswith(CUT_OFF)
    ]
    assert len(notes) == 1, scenario
    reason = "interrupted" if interrupt is _cut_by_a_deadline else "failed ("
    assert reason in notes[0]
