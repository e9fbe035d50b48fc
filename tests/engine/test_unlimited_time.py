"""An agent without a time limit (``AgentPolicy(max_duration=math.inf)``): the one limit that may
be infinite. Its runs run, its run-status note says nothing of time, and an allowance (recorded
as JSON, which has no infinity) may still give it a finite one."""

from __future__ import annotations

import math

import pytest

from effectagent import Agent, AgentPolicy, RunAllowance, Toolkit, open_runtime, tool
from effectagent.ai import TextContent, UserMessage
from effectagent.testing import ScriptedModel, Turn


@tool(readonly=True)
async def lookup(key: str) -> str:
    """Look a key up.

    Args:
        key: The key.
    """
    return f"{key}: found"


def last_text(model: ScriptedModel, index: int) -> str:
    message = model.requests[index].messages[-1]
    assert isinstance(message, UserMessage)
    part = message.content[-1]
    assert isinstance(part, TextContent)
    return part.text


async def test_the_status_note_of_a_run_without_a_time_limit_says_nothing_of_time() -> None:
    """It read "inf s of inf s left": nothing a model can pace itself by."""
    agent = Agent("a", "Answer.", AgentPolicy(max_duration=math.inf, status_note=True))
    model = ScriptedModel([Turn.text("one"), Turn.text("two")])
    async with open_runtime(model.as_layer(), agents=[agent]) as runtime:
        unlimited = await runtime.run(agent, "Hi.")
        limited = await runtime.run(agent, "Hi.", allowance=RunAllowance(max_duration=90))
    assert (unlimited.status, limited.status) == ("completed", "completed")
    assert last_text(model, 0) == "[Run status: turn 1 of at most 20; 0 of 64 tool calls used.]"
    assert "inf" not in last_text(model, 0)
    assert last_text(model, 1).endswith("0 of 64 tool calls used; 90 s of 90 s left.]")


def test_only_the_policys_time_limit_may_be_infinite() -> None:
    assert AgentPolicy(max_duration=math.inf).max_duration == math.inf
    with pytest.raises(ValueError, match="max_duration must be a positive, finite number"):
        RunAllowance(max_duration=math.inf)


@pytest.mark.parametrize("grace_turn_duration", [math.inf, 30.0])
async def test_a_run_without_a_time_limit_and_an_unbounded_grace_turn_runs(
    grace_turn_duration: float,
) -> None:
    """With ``grace_turn_duration=math.inf`` too, the grace reserve was ``inf`` and the turns'
    deadline ``inf - inf``: every run failed as an engine defect ("deadline must not be NaN")."""
    policy = AgentPolicy(
        max_turns=1, max_duration=math.inf, grace_turn_duration=grace_turn_duration
    )
    assert policy.grace_reserve == 0.0
    agent = Agent("a", "Answer.", policy, Toolkit(lookup))
    model = ScriptedModel([Turn.tool_calls(("lookup", {"key": "k"})), Turn.text("k is found.")])
    async with open_runtime(agent.toolkit.handlers() + model.as_layer(), agents=[agent]) as rt:
        result = await rt.run(agent, "Look k up.")
    assert (result.status, result.finish_reason, result.exhausted) == (
        "completed",
        "budget-exhausted",
        "turns",
    )
    assert result.text == "k is found."
