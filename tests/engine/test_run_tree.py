"""One run, one budget, one permit pool — whatever its tools do: calls that call tools (Code
Mode's inner calls) and calls that start child runs (subagents) draw from the run's own.

Properties, over generated runs on Trio's mock clock:

* for every tree of delegations (children starting children, in parallel, with tool calls of
  their own), the whole tree makes at most the root's ``max_turns`` model calls plus the root's
  one grace turn, and at most its ``max_tool_calls`` tool calls;
* for every mix of outer calls, inner calls made at once and child runs, the handlers doing work
  at once never exceed ``tool_concurrency`` (a call waiting on the calls it made lends them its
  permit), every call finishes, and no permit is held after the run.
"""

from __future__ import annotations

import random
from typing import Any

import attrs
import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st

from effectagent import Tool, ToolCallContext, Toolkit
from effectagent.ai import AssistantMessage, ModelRequest, Usage, UserMessage
from effectagent.core import Agent, AgentPolicy, ChildBudget
from effectagent.engine import ChildRunRefused, open_runtime, run_child
from effectagent.testing import FunctionModel, Turn

USAGE = Usage.of(10, 2)


@attrs.frozen
class Path:
    path: str


@attrs.frozen
class Nothing:
    n: int


@attrs.frozen
class Program:
    calls: int


def _first_text(request: ModelRequest) -> str:
    first = next(m for m in request.messages if isinstance(m, UserMessage))
    return "".join(getattr(part, "text", "") for part in first.content)


def _step(request: ModelRequest) -> int:
    return sum(isinstance(m, AssistantMessage) for m in request.messages)


# ---- the budget tree -------------------------------------------------------------------------


@settings(max_examples=100, deadline=None)
@given(
    seed=st.integers(0, 2**32),
    max_turns=st.integers(2, 8),
    max_tool_calls=st.integers(1, 10),
    on_exhaustion=st.sampled_from(["final-answer", "fail"]),
)
def test_a_tree_of_delegations_stays_within_the_roots_budget(
    seed: int, max_turns: int, max_tool_calls: int, on_exhaustion: str
) -> None:
    """Each agent's turn is drawn from the seed and its place in the tree (so scheduling never
    changes the tree): answer, do some work, or delegate to one or two children at once — the
    same agent, nested delegation allowed, each asking for a drawn budget."""
    work: Tool[Nothing, int] = Tool("work", "Work.", parameters=Nothing, success=int, readonly=True)
    branch: Tool[Path, str] = Tool(
        "branch", "Delegate.", parameters=Path, success=str, readonly=True
    )
    policy = AgentPolicy(
        max_turns=max_turns,
        max_tool_calls=max_tool_calls,
        tool_concurrency=3,
        on_exhaustion=on_exhaustion,  # type: ignore[arg-type]
    )
    node = Agent("node", "You are a node.", policy, Toolkit(work, branch))
    made: list[str] = []
    executed: list[str] = []  # every handler that started, anywhere in the tree

    def draw(path: str, step: int) -> random.Random:
        return random.Random(f"{seed}/{path}/{step}")

    def respond(request: ModelRequest) -> Turn:
        path, step = _first_text(request), _step(request)
        made.append(path)
        if request.tool_choice == "none":
            return Turn.text("out of budget", usage=USAGE)
        rng = draw(path, step)
        action = rng.choice(["answer", "work", "branch", "branch", "branch"])
        if action == "answer" or step > 6:
            return Turn.text("done", usage=USAGE)
        if action == "work":
            calls: list[tuple[str, Any, str]] = [
                ("work", {"n": i}, f"{path}-{step}-w{i}") for i in range(rng.randint(1, 2))
            ]
        else:
            calls = [
                ("branch", {"path": f"{path}.{step}{i}"}, f"{path}-{step}-b{i}")
                for i in range(rng.randint(1, 2))
            ]
        return Turn.tool_calls(*calls, usage=USAGE)

    async def do_work(params: Nothing, call: ToolCallContext) -> int:
        executed.append(call.tool_call_id)
        await trio.sleep(1)
        return params.n

    async def do_branch(params: Path, call: ToolCallContext) -> str:
        executed.append(call.tool_call_id)
        rng = draw(params.path, -1)
        want = ChildBudget(turns=rng.randint(1, 4), tool_calls=rng.randint(0, 4))
        try:
            result = await run_child(call, node, params.path, budget=want, nested=True)
        except ChildRunRefused as exc:
            return f"refused: {exc.reason}"
        return result.status

    model = FunctionModel(respond)

    async def main() -> Any:
        layer = node.toolkit.handlers({work: do_work, branch: do_branch}) + model.as_layer()
        async with open_runtime(layer, agents=[node]) as runtime:
            return await runtime.run(node, "root")

    result = trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    assert result.status in ("completed", "failed")
    assert len(made) <= max_turns + 1, f"{len(made)} model calls for max_turns={max_turns}"
    assert len(executed) <= max_tool_calls, f"{len(executed)} tool calls ran"


# ---- one permit pool -------------------------------------------------------------------------


@settings(max_examples=40, deadline=None)
@given(
    permits=st.integers(1, 3),
    programs=st.lists(st.integers(0, 4), min_size=1, max_size=3),
    leaves=st.integers(0, 3),
    child_leaves=st.integers(0, 3),
    delegate=st.booleans(),
)
def test_handlers_at_work_never_exceed_tool_concurrency_across_inner_calls_and_children(
    permits: int, programs: list[int], leaves: int, child_leaves: int, delegate: bool
) -> None:
    """A batch of program calls (each making its inner calls all at once), plain calls and a
    delegation whose child makes calls of its own: the leaves running at once never exceed the
    run's ``tool_concurrency``; every call finishes; nothing is held afterwards."""
    peak = _pool_scenario(permits, programs, leaves, child_leaves, delegate)
    assert peak <= permits


def test_two_code_mode_like_calls_with_two_permits_run_two_inner_handlers_at_most() -> None:
    """The issue's case: ``tool_concurrency=2``, two calls each making two inner calls at once —
    each broker used to have a pool of its own (four inner handlers at once, plus the two outer
    ones)."""
    assert _pool_scenario(2, [2, 2], 0, 0, False) == 2


def _pool_scenario(
    permits: int, programs: list[int], leaves: int, child_leaves: int, delegate: bool
) -> int:
    """Run the scenario; check that it completed, every leaf finished and nothing is held; return
    the most leaves that ran at once."""
    working = 0
    peak = 0
    finished = 0

    async def leaf_handler(params: Nothing, call: ToolCallContext) -> int:
        nonlocal working, peak, finished
        working += 1
        peak = max(peak, working)
        try:
            await trio.sleep(1 + params.n % 2)
        finally:
            working -= 1
        finished += 1
        return params.n

    leaf: Tool[Nothing, int] = Tool(
        "leaf", "Work.", parameters=Nothing, success=int, readonly=True, handler=leaf_handler
    )

    async def program_handler(params: Program, call: ToolCallContext) -> int:
        broker = call.broker
        assert broker is not None

        async def inner(n: int) -> None:
            assert broker is not None
            await broker.call("leaf", {"n": n})

        async with trio.open_nursery() as nursery:
            for i in range(params.calls):
                nursery.start_soon(inner, i)
        return params.calls

    program: Tool[Program, int] = Tool(
        "program",
        "Runs inner calls.",
        parameters=Program,
        success=int,
        readonly=True,
        handler=program_handler,
        inner_tools=(leaf,),
    )

    child = Agent("child", "A child.", AgentPolicy(tool_concurrency=5), Toolkit(leaf))

    async def delegate_handler(params: Nothing, call: ToolCallContext) -> str:
        result = await run_child(call, child, "go", budget=ChildBudget(turns=3, tool_calls=10))
        return result.status

    helper: Tool[Nothing, str] = Tool(
        "helper",
        "Delegates.",
        parameters=Nothing,
        success=str,
        readonly=True,
        handler=delegate_handler,
    )
    lead = Agent(
        "lead",
        "The lead.",
        AgentPolicy(tool_concurrency=permits, max_tool_calls=64),
        Toolkit(program, leaf, helper),
    )

    def respond(request: ModelRequest) -> Turn:
        step = _step(request)
        if _first_text(request) == "go":  # the child
            if step == 0 and child_leaves:
                mine = [("leaf", {"n": i}, f"child-{i}") for i in range(child_leaves)]
                return Turn.tool_calls(*mine)
            return Turn.text("child done")
        if step == 0:
            calls: list[tuple[str, Any, str]] = [
                ("program", {"calls": n}, f"p{i}") for i, n in enumerate(programs)
            ]
            calls += [("leaf", {"n": i}, f"l{i}") for i in range(leaves)]
            if delegate:
                calls.append(("helper", {"n": 0}, "h"))
            return Turn.tool_calls(*calls)
        return Turn.text("done")

    held_after: list[int] = []

    async def main() -> str:
        layer = Toolkit(program, leaf, helper).handlers() + FunctionModel.layer(respond)
        async with (
            open_runtime(layer, agents=[lead, child]) as runtime,
            runtime.stream(lead, "start") as events,
        ):
            status = "?"
            async for event in events:
                status = type(event).__name__
            held_after.append(events.permits_in_use)
            return status

    status = trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    assert status == "RunCompleted"
    expected = sum(programs) + leaves + (child_leaves if delegate else 0)
    assert finished == expected
    assert held_after == [0]
    return peak
