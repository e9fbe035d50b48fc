"""A child's time ends where its parent's turns end: its grace reserve before ``max_duration``.

Granted up to the parent's ``max_duration``, a child whose tool hung was interrupted with the
call that ran it — at the moment its own turns stopped — so its grace turn never came and its
partial answer was lost (the call settled as an interrupted defect)."""

from __future__ import annotations

import attrs
import trio
import trio.testing

from capabilities.subagents import delegate
from effectagent import Agent, AgentPolicy, Tool, ToolCallContext, Toolkit, open_runtime
from effectagent.ai import AssistantMessage, ModelRequest
from effectagent.core import RunCompleted, SubagentStarted, ToolCallSucceeded, ToolSuccess
from effectagent.testing import FunctionModel, Turn


@attrs.frozen
class Query:
    q: str


slow = Tool("slow", "Look it up, slowly.", parameters=Query, success=str, readonly=True)


async def never_answers(params: Query, call: ToolCallContext) -> str:
    await trio.sleep_forever()
    raise AssertionError("unreachable")


def respond(request: ModelRequest) -> Turn:
    lead = str(request.messages[0].content).startswith("Lead")
    if request.tool_choice == "none":  # a grace turn
        return Turn.text("lead's grace answer" if lead else "partial findings")
    if not lead:
        return Turn.tool_calls(("slow", {"q": "x"}))
    asked = sum(isinstance(m, AssistantMessage) for m in request.messages)
    return Turn.tool_calls(("sub", {"q": "a"})) if asked == 0 else Turn.text("lead done")


async def test_a_child_whose_tool_hangs_answers_in_its_grace_turn_before_the_parents_turns_stop(
    autojump_clock: trio.testing.MockClock,
) -> None:
    child = Agent("kid", "Kid.", toolkit=Toolkit(slow))
    sub = delegate(child, name="sub", description="Ask the kid.", parameters=Query)
    lead = Agent("lead", "Lead.", AgentPolicy(max_duration=100.0), Toolkit(sub.tool, slow))
    layer = (
        FunctionModel.layer(respond) + sub.layer() + Toolkit(slow).handlers({slow: never_answers})
    )
    async with open_runtime(layer, agents=[lead]) as runtime:
        started = trio.current_time()
        async with runtime.stream(lead, "go") as stream:
            seen = [event async for event in stream]
    granted = [e.budget.duration for e in seen if isinstance(e, SubagentStarted)]
    assert granted == [90.0]  # the lead's turns stop at 90 s: its 10 s grace reserve
    (outcome,) = [
        e.outcome for e in seen if isinstance(e, ToolCallSucceeded) and e.outcome.tool_name == "sub"
    ]
    assert isinstance(outcome, ToolSuccess)
    assert outcome.result == "partial findings"  # the child's grace answer reached the lead
    assert isinstance(seen[-1], RunCompleted)
    assert seen[-1].text == "lead done"
    assert trio.current_time() - started < 90.0
