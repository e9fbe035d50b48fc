"""A Code Mode call under the run's guards: a run allowance that asks approval for every call asks
it for the pass (its approval covers the calls the program makes), and what the approver reads is
the program and a one-line summary — not the tool's description, written for the model."""

from __future__ import annotations

import trio
import trio.testing

from capabilities.approval import Answer, ScriptedApproval
from capabilities.authorization import AccessRule, PolicyAuthorization
from capabilities.code_mode import code_mode
from effectagent import Agent, RunAllowance, Toolkit, open_runtime
from effectagent.core import ToolApprovalRequested, ToolRejected, ToolSuccess
from effectagent.effect import Layer
from effectagent.testing import ScriptedModel, Turn
from sandbox import CodeExecutorService, DenoCodeExecutor

from .scenario import add, forecast

PROGRAM = 'async () => (await weather.forecast({ city: "Oslo" })).high_c'


async def test_an_approval_request_for_a_pass_shows_the_program_and_a_one_line_summary(
    executor: DenoCodeExecutor, autojump_clock: trio.testing.MockClock
) -> None:
    """The summary was the whole description (instructions and TypeScript, many lines)."""
    code = code_mode({"weather": [forecast], "math": [add]}, executor="service")
    agent = Agent("coder", "Answer with a program.", toolkit=Toolkit(code.tool))
    approval = ScriptedApproval([Answer.deny("not now")])
    model = ScriptedModel(
        [Turn.tool_calls((code.tool.name, {"program": PROGRAM})), Turn.text("done")]
    )
    layer = (
        Toolkit(*code.tools).handlers()
        + code.layer.provide(Layer.succeed(CodeExecutorService, executor))
        + model.as_layer()
        + approval.layer()
    )
    async with open_runtime(layer, agents=[agent]) as runtime:
        result = await runtime.run(agent, "Go.", allowance=RunAllowance(approval="always"))
        log = await runtime.log.entries(result.conversation_id)
    (request,) = approval.requests
    assert request.tool_name == "run_program"
    assert request.input_preview == {"program": PROGRAM}
    size = len(PROGRAM.encode())
    expected = (
        f"run_program: run a program of {size} bytes that may call weather.forecast, math.add"
    )
    assert request.summary == expected
    (recorded,) = [e.record for e in log if isinstance(e.record, ToolApprovalRequested)]
    assert recorded.request.summary == expected
    (outcome,) = result.outcomes
    assert isinstance(outcome, ToolRejected)  # denied: no pass ran


CATCHING = """async () => {
  const out = { sum: await math.add({ a: 1, b: 2 }) };
  try {
    await weather.forecast({ city: "Oslo" });
  } catch (e) {
    out.refused = [e._tag, e.message];
  }
  return out;
}"""


async def test_a_call_the_principal_may_not_make_rejects_inside_the_program_without_naming_it(
    executor: DenoCodeExecutor,
) -> None:
    code = code_mode({"weather": [forecast], "math": [add]}, executor="service")
    agent = Agent("coder", "Answer with a program.", toolkit=Toolkit(code.tool))
    rules = PolicyAuthorization(
        [
            AccessRule.allow(["run_program", "add"]),
            AccessRule.allow("forecast", principals="staff:*"),
        ]
    )
    model = ScriptedModel(
        [Turn.tool_calls((code.tool.name, {"program": CATCHING})), Turn.text("done")]
    )
    layer = (
        Toolkit(*code.tools).handlers()
        + code.layer.provide(Layer.succeed(CodeExecutorService, executor))
        + model.as_layer()
        + rules.layer()
    )
    async with open_runtime(layer, agents=[agent]) as runtime:
        result = await runtime.run(agent, "Go.", author="customer:ann")
    (outcome,) = result.outcomes
    assert isinstance(outcome, ToolSuccess)
    assert outcome.result["result"] == {
        "sum": 3,
        "refused": [
            "ToolRejected",
            "not authorized: the tool 'forecast' is not available to this caller",
        ],
    }
    assert "customer:ann" not in repr(model.requests)
