"""A delegation tree whose runs also run Code Mode programs: one budget and one permit pool.

Property, over generated batches (real Deno passes, so on the real clock): a lead's batch mixes
plain calls, Code Mode passes making calls at once, and delegations whose children do the same.
Whatever the mix and the lead's limits,

* the handlers that ran anywhere in the tree — plain calls, inner calls, passes, delegations —
  are at most the lead's ``max_tool_calls``;
* the plain handlers at work at once never exceed the lead's ``tool_concurrency`` (the passes and
  the delegations lend their permits while they wait);
* no child uses more tool calls than it was granted, the lead completes, and every workload a
  pass spawned is gone afterwards.
"""

from __future__ import annotations

import json
import math
from typing import Any

import attrs
import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from capabilities.code_mode import CodeModeLimits, code_mode
from capabilities.subagents import delegate
from effectagent import Agent, AgentPolicy, ChildBudget, Toolkit, tool
from effectagent.ai import AssistantMessage, ModelRequest, UserMessage
from effectagent.core import (
    RunCompleted,
    RunFailedRecord,
    SubagentCompleted,
    SubagentStarted,
    ToolCallSettled,
)
from effectagent.effect import Layer
from effectagent.engine import open_runtime
from effectagent.testing import FunctionModel, Turn
from sandbox import CodeExecutorService, DenoCodeExecutor
from tests.sandbox.test_code_fixtures import WorkloadTracker


@attrs.define
class Leaves:
    """The plain handlers of one run: how many ran, and the most at work at once."""

    ran: int = 0
    working: int = 0
    peak: int = 0


LEAVES = Leaves()


@tool(readonly=True)
async def work(n: int) -> int:
    """Do a little work.

    Args:
        n: How long, in hundredths of a second.
    """
    LEAVES.ran += 1
    LEAVES.working += 1
    LEAVES.peak = max(LEAVES.peak, LEAVES.working)
    try:
        await trio.sleep(0.005 * n)
    finally:
        LEAVES.working -= 1
    return n


CODE = code_mode({"w": [work]}, executor="service", limits=CodeModeLimits(max_concurrent_calls=4))


def _program(calls: int) -> str:
    return (
        f"async () => (await Promise.allSettled([...Array({calls}).keys()]"
        ".map((n) => w.work({ n })))).map((r) => r.status)"
    )


@attrs.frozen
class Job:
    spec: str


CHILD = Agent("worker", "Work as told.", toolkit=Toolkit(CODE.tool, work))
SUB = delegate(
    CHILD,
    name="sub",
    description="Hand work to a worker.",
    parameters=Job,
    prompt=lambda job: job.spec,
    budget=ChildBudget(turns=3, tool_calls=6),
)

PLAIN = st.tuples(st.just("work"), st.integers(0, 3))
PASS = st.tuples(st.just("program"), st.integers(0, 4))
CHILD_BATCH = st.lists(st.one_of(PLAIN, PASS), min_size=1, max_size=3)
LEAD_BATCH = st.lists(
    st.one_of(PLAIN, PASS, st.tuples(st.just("sub"), CHILD_BATCH)), min_size=1, max_size=4
)


def _calls(batch: list[Any], prefix: str) -> list[tuple[str, dict[str, Any], str]]:
    calls: list[tuple[str, dict[str, Any], str]] = []
    for i, (kind, value) in enumerate(batch):
        call_id = f"{prefix}{i}"
        if kind == "work":
            calls.append(("work", {"n": value}, call_id))
        elif kind == "program":
            calls.append((CODE.tool.name, {"program": _program(value)}, call_id))
        else:
            calls.append(("sub", {"spec": json.dumps(value)}, call_id))
    return calls


@settings(max_examples=20, deadline=None)
@given(batch=LEAD_BATCH, max_tool_calls=st.integers(1, 12), tool_concurrency=st.integers(1, 3))
def test_programs_and_children_share_the_leads_budget_and_permits(
    batch: list[Any], max_tool_calls: int, tool_concurrency: int
) -> None:
    LEAVES.ran = LEAVES.working = LEAVES.peak = 0
    lead = Agent(
        "lead",
        "Lead the work.",
        AgentPolicy(max_turns=8, max_tool_calls=max_tool_calls, tool_concurrency=tool_concurrency),
        Toolkit(SUB.tool, CODE.tool, work),
    )

    def respond(request: ModelRequest) -> Turn:
        if request.tool_choice == "none" or any(
            isinstance(m, AssistantMessage) for m in request.messages
        ):
            return Turn.text("done")
        system = request.messages[0].content
        assert isinstance(system, str)
        if system.startswith("Lead"):
            return Turn.tool_calls(*_calls(batch, "lead"))
        first = next(m for m in request.messages if isinstance(m, UserMessage))
        spec = json.loads("".join(getattr(part, "text", "") for part in first.content))
        return Turn.tool_calls(*_calls(spec, "child"))

    tracker = WorkloadTracker()
    executor = DenoCodeExecutor(on_acquire=tracker.record)
    layer = (
        FunctionModel(respond).as_layer()
        + Toolkit(work).handlers()
        + SUB.layer()
        + CODE.layer.provide(Layer.succeed(CodeExecutorService, executor))
    )

    async def main() -> list[Any]:
        async with (
            open_runtime(layer, agents=[lead]) as runtime,
            runtime.stream(lead, "Go.") as stream,
        ):
            return [event async for event in stream]

    events = trio.run(main)
    started = [e for e in events if isinstance(e, SubagentStarted)]
    completed = {e.child_run_id: e for e in events if isinstance(e, SubagentCompleted)}
    ran = LEAVES.ran + tracker.spawned + len(started)
    assert ran <= max_tool_calls, f"{ran} handlers ran for max_tool_calls={max_tool_calls}"
    assert LEAVES.peak <= tool_concurrency
    for start in started:
        assert completed[start.child_run_id].tool_calls <= start.budget.tool_calls
    assert isinstance(events[-1], RunCompleted)
    tracker.assert_clean()


async def test_interrupting_the_lead_while_a_childs_program_waits_leaves_nothing_running() -> None:
    """The lead is interrupted while its child's program waits on a call: the inner call, the
    pass, the child and the lead all end; both conversations record the interruption; no workload
    of the pass is left."""
    entered = trio.Event()

    @tool(readonly=True)
    async def wait(n: int) -> int:
        """Wait for ever.

        Args:
            n: Unused.
        """
        entered.set()
        await trio.sleep(math.inf)
        return n

    code = code_mode({"w": [wait]}, executor="service")
    child = Agent("worker", "Work as told.", toolkit=Toolkit(code.tool))
    sub = delegate(child, name="sub", description="Hand work on.", parameters=Job)
    lead = Agent("lead", "Lead the work.", toolkit=Toolkit(sub.tool, code.tool))
    program = "async () => await w.wait({ n: 1 })"

    def respond(request: ModelRequest) -> Turn:
        system = request.messages[0].content
        assert isinstance(system, str)
        if system.startswith("Lead"):
            return Turn.tool_calls(("sub", {"spec": "x"}))
        return Turn.tool_calls((code.tool.name, {"program": program}))

    tracker = WorkloadTracker()
    executor = DenoCodeExecutor(on_acquire=tracker.record)
    layer = (
        FunctionModel(respond).as_layer()
        + Toolkit(wait).handlers()
        + sub.layer()
        + code.layer.provide(Layer.succeed(CodeExecutorService, executor))
    )
    async with open_runtime(layer, agents=[lead]) as runtime:
        async with runtime.stream(lead, "Go.") as stream, trio.open_nursery() as nursery:

            async def interrupt() -> None:
                await entered.wait()
                stream.interrupt()

            nursery.start_soon(interrupt)
            events = [event async for event in stream]
        (started,) = [e for e in events if isinstance(e, SubagentStarted)]
        lead_log = [e.record for e in await runtime.log.entries(events[0].conversation_id)]
        child_log = [e.record for e in await runtime.log.entries(started.child_conversation_id)]
        assert runtime.active_runs == 0
    assert type(events[-1]).__name__ == "RunInterrupted"
    (completed,) = [e for e in events if isinstance(e, SubagentCompleted)]
    assert completed.status == "interrupted"
    for log in (lead_log, child_log):
        (settled,) = [r for r in log if isinstance(r, ToolCallSettled)]
        assert settled.outcome.kind == "defect"  # interrupted before it settled
        ended = log[-1]
        assert isinstance(ended, RunFailedRecord)
        assert ended.reason == "interrupted"
    assert tracker.spawned == 1
    tracker.assert_clean()
