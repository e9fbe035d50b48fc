"""A parent's cost budget and its subagents: a child is granted what is left of it (less what
running children hold), its own if smaller; what it spent is charged when it ends and the rest
freed; a child whose model has no price is refused under a cost budget (its cost could not be
counted). Pure ``Allowance`` arithmetic, a property over lease/settle sequences, and one run
through a delegation (a child on another, unpriced model needs a model per agent: the refusal is
tested on the arithmetic)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from decimal import Decimal
from typing import Any

import trio
import trio.testing
from hypothesis import given
from hypothesis import strategies as st

from capabilities.subagents import delegate
from effectagent import Layer
from effectagent.ai import (
    LanguageModelService,
    ModelRequest,
    ModelResponse,
    Price,
    PricesService,
    PriceTable,
    ResponsePart,
    generate,
)
from effectagent.core import AgentPolicy, ChildBudget, UsageTotals
from effectagent.engine import open_runtime
from effectagent.engine._budget import Allowance, Budget, BudgetLease
from effectagent.testing import FunctionModel, Turn
from tests.capabilities.subagents.test_delegation import (
    SEARCH,
    USAGE,
    Question,
    calls_then_answer,
    handlers,
    lead,
    research_script,
    researcher,
    routed,
    search,
)

WANT = ChildBudget(turns=5, tool_calls=5)


def _allowance(limit: str, spent: int = 0) -> Allowance:
    policy = AgentPolicy(cost_budget=limit)
    return Allowance(Budget(policy, 0.0, usage=UsageTotals(cost_micros=spent)))


def test_a_child_is_granted_what_is_left_of_the_cost_budget_and_the_rest_returns() -> None:
    allowance = _allowance("1", spent=300_000)
    first = allowance.lease(WANT, AgentPolicy(), 0.0)
    assert isinstance(first, BudgetLease)
    assert first.cost == 700_000
    assert first.policy.cost_budget == Decimal("0.7")
    assert allowance.reserved_cost == 700_000
    # Nothing is left while the first child holds it all.
    assert allowance.lease(WANT, AgentPolicy(), 0.0) == (
        "the run has no cost budget left to give a subagent"
    )
    allowance.settle(first, 1, 0, UsageTotals(model_calls=1, cost_micros=200_000))
    assert allowance.reserved_cost == 0
    assert allowance.totals().usage.cost_micros == 200_000
    # A child's own, smaller budget is kept.
    second = allowance.lease(WANT, AgentPolicy(cost_budget="0.1"), 0.0)
    assert isinstance(second, BudgetLease)
    assert second.cost == 100_000
    third = allowance.lease(WANT, AgentPolicy(), 0.0)
    assert isinstance(third, BudgetLease)
    assert third.cost == 1_000_000 - 300_000 - 200_000 - 100_000


def test_an_unpriced_child_is_refused_only_under_a_cost_budget() -> None:
    refused = _allowance("1").lease(WANT, AgentPolicy(), 0.0, priced=False)
    assert refused == "the run has a cost budget, and the subagent's model has no price"
    free = Allowance(Budget(AgentPolicy(), 0.0)).lease(WANT, AgentPolicy(), 0.0, priced=False)
    assert isinstance(free, BudgetLease)
    assert free.cost is None


@given(
    steps=st.lists(
        st.tuples(st.booleans(), st.none() | st.integers(1, 400), st.integers(0, 100)),
        max_size=16,
    ),
    limit=st.integers(1, 1_000),
)
def test_children_never_hold_or_spend_more_than_the_cost_budget_has_left(
    steps: list[tuple[bool, int | None, int]], limit: int
) -> None:
    """For any interleaving of leases and settlements, each child spending at most its grant:
    what was spent plus what running children hold never exceeds the budget."""
    allowance = Allowance(Budget(AgentPolicy(cost_budget=Decimal(limit).scaleb(-6)), 0.0))
    held: list[BudgetLease] = []
    for open_one, own, percent in steps:
        if open_one or not held:
            child = AgentPolicy(cost_budget=None if own is None else Decimal(own).scaleb(-6))
            lease = allowance.lease(WANT, child, 0.0)
            if isinstance(lease, BudgetLease):
                assert lease.cost is not None
                assert lease.cost >= 1
                assert own is None or lease.cost <= own
                held.append(lease)
        else:
            lease = held.pop(0)
            assert lease.cost is not None
            spent = lease.cost * percent // 100
            allowance.settle(lease, 1, 0, UsageTotals(model_calls=1, cost_micros=spent))
        used = allowance.totals().usage.cost_micros
        assert used + allowance.reserved_cost <= limit
        assert allowance.reserved_cost == sum(lease.cost or 0 for lease in held)


class Named:
    """The routed scripted model, naming itself (as the providers' adapters do)."""

    def __init__(self, inner: FunctionModel, name: str) -> None:
        self.inner = inner
        self.model_name = name

    def stream(self, request: ModelRequest) -> AsyncIterator[ResponsePart]:
        return self.inner.stream(request)

    async def generate(self, request: ModelRequest) -> ModelResponse:
        return await generate(self, request)


def _asks_child(request: ModelRequest) -> bool:
    system = request.messages[0].content
    return isinstance(system, str) and system.startswith("Research")


def long_research(text: str, step: int) -> Turn:
    """Two searches, then the answer (110 micro-dollars a call)."""
    if step < 2:
        return Turn.tool_calls(("search", {"q": f"q{step}"}), usage=USAGE)
    return Turn.text('{"topic": "t", "summary": "s"}', usage=USAGE)


async def _delegating_run(
    model_name: str, budget: str = "10", child: Any = research_script
) -> tuple[Any, FunctionModel]:
    research = delegate(researcher(), name="research", description="R.", parameters=Question)
    parent = lead(research.tool, SEARCH, cost_budget=budget)
    lead_script = calls_then_answer(("research", {"topic": "t"}), answer="done")
    model = routed({"Lead": lead_script, "Research": child})
    layer = (
        Layer.succeed(LanguageModelService, Named(model, model_name))
        + Layer.succeed(PricesService, PriceTable({"test:priced": Price("1", "1")}))
        + handlers((SEARCH, search))
        + research.layer()
    )
    async with open_runtime(layer, agents=[parent]) as runtime:
        result = await runtime.run(parent, "go")
    return result, model


def test_a_delegation_under_a_cost_budget_charges_the_childs_cost() -> None:
    async def main() -> None:
        result, model = await _delegating_run("test:priced")
        assert len(model.requests) == 4  # the lead's two turns, the child's two
        # $1 per million tokens each way: 110 micro-dollars a call (the scripts' usage).
        assert result.usage.cost == 4 * 110
        assert result.finish_reason == "stop"
        # 300 micro-dollars: the lead's first call leaves 190 for the child, which spends 220
        # (its grant is checked before each of its turns); charged to the lead, the budget ran
        # out, and the lead's next turn is its grace turn.
        result, model = await _delegating_run("test:priced", "0.0003")
        assert len(model.requests) == 4
        assert (result.finish_reason, result.exhausted) == ("budget-exhausted", "cost")
        assert result.usage.cost == 4 * 110


def test_a_child_runs_out_of_what_it_was_granted_and_takes_its_grace_turn() -> None:
    """Of 330 micro-dollars the lead's first call (110) leaves 220, the child's grant: its
    second call reaches it, and its third request is its grace turn (tools off). Under a budget
    with room, the same child asks with tools each time."""

    async def main() -> None:
        _, model = await _delegating_run("test:priced", "0.00033", long_research)
        child = [r for r in model.requests if _asks_child(r)]
        assert [r.tool_choice for r in child] == ["auto", "auto", "none"]
        _, model = await _delegating_run("test:priced", "10", long_research)
        child = [r for r in model.requests if _asks_child(r)]
        assert [r.tool_choice for r in child] == ["auto", "auto", "auto"]

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
