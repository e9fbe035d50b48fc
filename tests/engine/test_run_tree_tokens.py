"""The token side of the budget tree: tokens are known only once a model call answers, so no run
can stop before the answer that crosses its budget — but the overrun is bounded, and the bound
is the one the subagents guide states: for each run in the tree, the answer that crossed its
budget (or its grant) and its grace turn's answer.

Property, over generated trees of delegations on Trio's mock clock: with every model call
costing ``C`` tokens, the whole tree's tokens stay within the root's ``token_budget`` plus
``2 * C`` for each run in it — and each child within its grant plus ``2 * C``.
"""

from __future__ import annotations

import random
from typing import Any

import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st

from effectagent import Tool, ToolCallContext, Toolkit
from effectagent.ai import ModelRequest, Usage
from effectagent.core import Agent, AgentPolicy, ChildBudget
from effectagent.engine import ChildRunRefused, open_runtime, run_child
from effectagent.testing import FunctionModel, Turn

from .test_run_tree import Path, _first_text, _step

COST = 12  # tokens every model call reports
USAGE = Usage.of(10, 2)


@settings(max_examples=100, deadline=None)
@given(
    seed=st.integers(0, 2**32),
    token_budget=st.integers(COST, 12 * COST),
    on_exhaustion=st.sampled_from(["final-answer", "fail"]),
)
def test_a_tree_passes_its_token_budget_by_at_most_two_answers_a_run(
    seed: int, token_budget: int, on_exhaustion: str
) -> None:
    """Each agent's turn is drawn from the seed and its place in the tree: answer, or delegate
    to one or two children at once (nested delegation allowed), each child asking for a drawn
    token grant or none (then it may take what its parent has left)."""
    branch: Tool[Path, str] = Tool(
        "branch", "Delegate.", parameters=Path, success=str, readonly=True
    )
    policy = AgentPolicy(
        max_turns=12,
        max_tool_calls=20,
        tool_concurrency=3,
        token_budget=token_budget,
        on_exhaustion=on_exhaustion,  # type: ignore[arg-type]
    )
    node = Agent("node", "You are a node.", policy, Toolkit(branch))
    calls: dict[str, int] = {}  # model calls by run (a run is named by its path)
    grants: dict[str, int | None] = {}

    def respond(request: ModelRequest) -> Turn:
        path, step = _first_text(request), _step(request)
        calls[path] = calls.get(path, 0) + 1
        if request.tool_choice == "none":
            return Turn.text("out of budget", usage=USAGE)
        rng = random.Random(f"{seed}/{path}/{step}")
        if rng.random() < 0.25 or step > 5:
            return Turn.text("done", usage=USAGE)
        children = [
            ("branch", {"path": f"{path}.{step}{i}"}, f"{path}-{step}-b{i}")
            for i in range(rng.randint(1, 2))
        ]
        return Turn.tool_calls(*children, usage=USAGE)

    async def do_branch(params: Path, call: ToolCallContext) -> str:
        rng = random.Random(f"{seed}/{params.path}/grant")
        tokens = rng.choice([None, rng.randint(1, 4 * COST)])
        try:
            result = await run_child(
                call, node, params.path, budget=ChildBudget(turns=6, tokens=tokens), nested=True
            )
        except ChildRunRefused as exc:
            return f"refused: {exc.reason}"
        grants[params.path] = tokens
        return result.status

    model = FunctionModel(respond)

    async def main() -> Any:
        layer = node.toolkit.handlers({branch: do_branch}) + model.as_layer()
        async with open_runtime(layer, agents=[node]) as runtime:
            return await runtime.run(node, "root")

    result = trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    assert result.status in ("completed", "failed")
    runs = len(calls)  # every run made at least one model call
    tree = COST * sum(calls.values())
    assert tree <= token_budget + 2 * COST * runs, f"{tree} tokens, {runs} runs"
    assert result.usage.total_tokens == tree  # the root's totals hold the whole tree's
    for path, grant in grants.items():
        if grant is not None:
            assert COST * calls[path] <= grant + 2 * COST, f"{path}: granted {grant}"
