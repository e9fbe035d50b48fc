"""A run's ``RunAllowance`` and its delegations: ``approval="always"`` asks before each of the
parent's calls and leaves the child's tools its own; narrowing the tools narrows the children."""

from __future__ import annotations

import attrs
import trio.testing

from capabilities import PolicyApproval
from capabilities.subagents import delegate
from effectagent import Agent, RunAllowance, Tool, ToolCallContext, Toolkit, open_runtime
from effectagent.core import ApprovalRequested, RunCompleted, ToolCallSucceeded, ToolSuccess
from effectagent.testing import ScriptedModel, Turn


@attrs.frozen
class Query:
    q: str


search = Tool("search", "Search.", parameters=Query, success=str, readonly=True)


async def found(params: Query, call: ToolCallContext) -> str:
    return "found"


child = Agent("kid", "Kid.", toolkit=Toolkit(search))
sub = delegate(child, name="sub", description="Ask the kid.", parameters=Query)
lead = Agent("lead", "Lead.", toolkit=Toolkit(sub.tool, search))


async def test_approval_always_asks_for_the_delegation_and_the_child_runs_with_its_own_tools(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # The parent's tools were swapped for asking copies, and the child's — the originals — were
    # then refused as tools the parent does not have.
    model = ScriptedModel(
        [
            Turn.tool_calls(("sub", {"q": "a"})),
            Turn.tool_calls(("search", {"q": "x"})),
            Turn.text("the kid's answer"),
            Turn.text("the lead's answer"),
        ]
    )
    layer = (
        model.as_layer()
        + Toolkit(search).handlers({search: found})
        + sub.layer()
        + PolicyApproval([], default="approve").layer()
    )
    always = RunAllowance(approval="always")
    async with (
        open_runtime(layer, agents=[lead]) as runtime,
        runtime.stream(lead, "go", allowance=always) as run,
    ):
        seen = [event async for event in run]
    asked = [e.tool_name for e in seen if isinstance(e, ApprovalRequested)]
    assert asked == ["sub"]  # the lead's call; the kid's search needs none of its own
    (outcome,) = [e.outcome for e in seen if isinstance(e, ToolCallSucceeded)]
    assert isinstance(outcome, ToolSuccess)
    assert outcome.result == "the kid's answer"
    assert isinstance(seen[-1], RunCompleted)


async def test_an_allowance_without_the_childs_tools_still_refuses_the_child(
    autojump_clock: trio.testing.MockClock,
) -> None:
    model = ScriptedModel([Turn.tool_calls(("sub", {"q": "a"})), Turn.text("the lead's answer")])
    layer = model.as_layer() + Toolkit(search).handlers({search: found}) + sub.layer()
    async with open_runtime(layer, agents=[lead]) as runtime:
        result = await runtime.run(lead, "go", allowance=RunAllowance(tools=["sub"]))
    (outcome,) = result.outcomes
    assert outcome.model_content()["reason"] == "refused"
    assert "has tools its parent 'lead' does not: search" in outcome.model_content()["message"]
