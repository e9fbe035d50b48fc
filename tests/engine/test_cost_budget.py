"""``AgentPolicy(cost_budget=...)`` (#28 item 6): a run whose priced calls reach the budget takes
its grace turn (or fails under "fail"), at the price table's figure; a budget its model has no
price for is refused at preflight; each call's cost is in its record, the run's in the events and
``RunResult``; the budget arithmetic with the cost dimension."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import attrs
import pytest
import trio
import trio.testing
from hypothesis import given
from hypothesis import strategies as st

from effectagent import Layer, open_runtime
from effectagent.ai import NoPriceForModel, Price, PricesService, PriceTable, Usage
from effectagent.core import (
    AgentPolicy,
    BudgetExhausted,
    BudgetWarning,
    ModelResponseRecorded,
    RunCompleted,
    RunFailed,
    TurnCompleted,
    UsageTotals,
)
from effectagent.engine._budget import Budget, Exhaustion
from effectagent.testing import Turn

from .helpers import (
    HandlerProbe,
    Ran,
    TrackingModel,
    collect,
    entries,
    events_of,
    forecast_tool,
    make_agent,
    make_policy,
    records_of,
    same_error,
)

MODEL = "test:priced-model"
#: $2 per million input tokens, $8 per million output: a micro-dollar is two input tokens.
PRICE = Price("2", "8", cached_input="0.5")
PRICES = PriceTable({MODEL: PRICE})
#: One call: 100,000 input tokens ($0.20) and 10,000 output tokens ($0.08) — $0.28.
PER_CALL = Usage.of(100_000, 10_000)
CALL_COST = 280_000


class NamedModel(TrackingModel):
    """The scripted model, naming itself as the providers' adapters do."""

    model_name = MODEL


def _oslo(call: int, **kwargs: Any) -> Turn:
    return Turn.tool_calls(("forecast", {"city": "Oslo"}, f"c{call}"), **kwargs)


async def _run(
    policy: AgentPolicy,
    turns: list[Turn],
    *,
    model: TrackingModel | None = None,
    prices: PriceTable | None = PRICES,
) -> Ran:
    probe, tool = HandlerProbe(), forecast_tool()
    agent = make_agent(tool, policy=policy)
    model = NamedModel(turns) if model is None else model
    layer = agent.toolkit.handlers({tool: probe.forecast()}) + model.layer()
    if prices is not None:
        layer = layer + Layer.succeed(PricesService, prices)
    async with open_runtime(layer, agents=[agent]) as runtime:
        async with runtime.stream(agent, "How warm is it?") as stream:
            events = await collect(stream)
        log = await entries(runtime, events[0].conversation_id)
    return Ran(events, log, model)


async def test_a_cost_budget_stops_the_run_at_the_price_tables_figure(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """$0.28 a call against $0.50: the first call leaves $0.22, the second reaches $0.56 — the
    grace turn follows, and the run ends budget-exhausted on "cost"."""
    ran = await _run(
        make_policy(cost_budget=Decimal("0.50")),
        [
            _oslo(1, usage=PER_CALL),
            _oslo(2, usage=PER_CALL),
            Turn.text("Too expensive to go on.", usage=PER_CALL),
        ],
    )
    terminal = ran.terminal
    assert isinstance(terminal, RunCompleted), terminal
    assert terminal.finish_reason == "budget-exhausted"
    assert terminal.exhausted == "cost"
    requests = ran.model.requests
    assert len(requests) == 3  # two turns, then the grace turn
    assert requests[-1].tool_choice == "none"
    assert requests[-1].tools == ()
    # Each call's cost is in its record; the run's is their sum (the grace turn's included).
    recorded = [r.usage.cost_micros for r in records_of(ran.log, ModelResponseRecorded)]
    assert recorded == [CALL_COST] * 3
    assert terminal.usage.cost == 3 * CALL_COST
    assert [e.usage.cost for e in events_of(ran.events, TurnCompleted)] == [
        CALL_COST,
        2 * CALL_COST,
        3 * CALL_COST,
    ]


async def test_a_cost_budget_under_fail_ends_the_run_with_a_sentence_in_dollars(
    autojump_clock: trio.testing.MockClock,
) -> None:
    ran = await _run(
        make_policy(cost_budget="0.5", on_exhaustion="fail"),
        [_oslo(1, usage=PER_CALL), _oslo(2, usage=PER_CALL), Turn.text("Never asked.")],
    )
    terminal = ran.terminal
    assert isinstance(terminal, RunFailed)
    assert same_error(terminal.error, BudgetExhausted("cost", 2 * CALL_COST, 500_000))
    assert str(terminal.error) == "the cost budget ran out: $0.5600 used of $0.5000"
    assert len(ran.model.requests) == 2


async def test_the_cost_warning_comes_once_at_80_percent(
    autojump_clock: trio.testing.MockClock,
) -> None:
    ran = await _run(
        make_policy(cost_budget=Decimal("0.70")),  # 80 % is $0.56: the second call
        [_oslo(1, usage=PER_CALL), _oslo(2, usage=PER_CALL), Turn.text("Done.")],
    )
    warnings = [w for w in events_of(ran.events, BudgetWarning) if w.dimension == "cost"]
    assert [(w.used, w.limit) for w in warnings] == [(2 * CALL_COST, 700_000)]


async def test_a_cost_budget_on_a_model_without_a_price_is_refused_at_preflight(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A limit that cannot be enforced is refused, not ignored: before the run records anything."""
    policy = make_policy(cost_budget=1)
    with pytest.raises(NoPriceForModel) as caught:
        await _run(policy, [Turn.text("never")], prices=PriceTable({}))
    assert str(caught.value) == (
        "the agent 'weather' has a cost budget of $1.00, but the model 'test:priced-model' has "
        "no price in the runtime's price table: give it one (PricesService) or drop the cost "
        "budget"
    )
    # A model that names no model at all cannot be priced either.
    unnamed = TrackingModel([Turn.text("never")])
    with pytest.raises(NoPriceForModel, match="its model, which has no name,"):
        await _run(policy, [], model=unnamed)
    assert unnamed.requests == []


async def test_without_a_price_a_run_has_no_cost_never_a_made_up_zero(
    autojump_clock: trio.testing.MockClock,
) -> None:
    ran = await _run(
        make_policy(),
        [_oslo(1, usage=PER_CALL), Turn.text("Done.", usage=PER_CALL)],
        model=TrackingModel([_oslo(1, usage=PER_CALL), Turn.text("Done.", usage=PER_CALL)]),
    )
    terminal = ran.terminal
    assert isinstance(terminal, RunCompleted)
    assert terminal.usage.cost is None
    assert terminal.usage.unpriced_calls == 2
    assert all(r.usage.cost_micros is None for r in records_of(ran.log, ModelResponseRecorded))


async def test_the_shipped_table_prices_a_provider_model_when_the_layer_gives_none(
    autojump_clock: trio.testing.MockClock,
) -> None:
    class Sonnet(TrackingModel):
        model_name = "anthropic:claude-sonnet-4-5"

    model = Sonnet([Turn.text("Hi.", usage=Usage.of(1_000, 100))])
    ran = await _run(make_policy(cost_budget="0.01"), [], model=model, prices=None)
    terminal = ran.terminal
    assert isinstance(terminal, RunCompleted)
    assert terminal.usage.cost == 1_000 * 3 + 100 * 15  # $3 / $15 per million


def test_the_result_of_a_run_holds_its_cost() -> None:
    async def main() -> None:
        tool = forecast_tool()
        agent = make_agent(tool, policy=make_policy(cost_budget="1"))
        model = NamedModel([Turn.text("Warm.", usage=PER_CALL)])
        layer = (
            agent.toolkit.handlers({tool: HandlerProbe().forecast()})
            + model.layer()
            + Layer.succeed(PricesService, PRICES)
        )
        async with open_runtime(layer, agents=[agent]) as runtime:
            result = await runtime.run(agent, "How warm is it?")
        assert result.usage.cost == CALL_COST

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))


def test_a_cost_budget_is_exact_dollars_and_bad_ones_are_named() -> None:
    assert AgentPolicy(cost_budget=0.1).cost_budget == Decimal("0.1")
    assert AgentPolicy(cost_budget="0.0000019").cost_budget_micros == 1  # rounded down
    assert AgentPolicy().cost_budget_micros is None
    with pytest.raises(ValueError, match=r"AgentPolicy.cost_budget must be at least one micro"):
        AgentPolicy(cost_budget=0)
    with pytest.raises(TypeError, match=r"AgentPolicy.cost_budget must be a number of US dollars"):
        AgentPolicy(cost_budget=True)
    with pytest.raises(TypeError, match=r"AgentPolicy.cost_budget must be a number"):
        AgentPolicy(cost_budget="a lot")


# ---- the arithmetic --------------------------------------------------------------------------


@given(
    turns=st.integers(0, 6),
    tokens=st.integers(0, 200),
    token_budget=st.none() | st.integers(1, 150),
    cost=st.integers(0, 3_000),
    cost_budget=st.none() | st.integers(1, 2_000),
)
def test_exhausted_is_the_first_dimension_of_limits_at_its_limit(
    turns: int, tokens: int, token_budget: int | None, cost: int, cost_budget: int | None
) -> None:
    policy = AgentPolicy(
        max_turns=4,
        token_budget=token_budget,
        cost_budget=None if cost_budget is None else Decimal(cost_budget).scaleb(-6),
    )
    budget = Budget(
        policy, 0.0, turns=turns, usage=UsageTotals(input_tokens=tokens, cost_micros=cost)
    )
    expected = next((dim for dim in budget.limits(1.0) if dim.used >= dim.limit), None)
    assert budget.exhausted(1.0) == expected
    if cost_budget is not None:
        assert Exhaustion("cost", cost, cost_budget) in budget.limits(1.0)
        if cost >= cost_budget and turns < 4 and (token_budget is None or tokens < token_budget):
            assert expected == Exhaustion("cost", cost, cost_budget)


@given(costs=st.lists(st.integers(0, 400), max_size=12), cost_budget=st.integers(1, 2_000))
def test_the_cost_warning_is_due_once_when_it_crosses_its_line(
    costs: list[int], cost_budget: int
) -> None:
    policy = AgentPolicy(max_turns=100, cost_budget=Decimal(cost_budget).scaleb(-6))
    budget = Budget(policy, 0.0)
    due: list[int] = []
    spent = 0
    for cost in costs:
        spent += cost
        budget = Budget(policy, 0.0, usage=UsageTotals(cost_micros=spent), warned=budget.warned)
        budget, warnings = budget.with_due_warnings(0.0)
        due.extend(w.used for w in warnings if w.dimension == "cost")  # type: ignore[misc]
    crossed = [
        total
        for total in (sum(costs[: i + 1]) for i in range(len(costs)))
        if total >= 0.8 * cost_budget
    ]
    assert due == crossed[:1]


# ---- a resumed run counts its cost again from its records ------------------------------------


def test_a_resumed_run_counts_the_cost_its_records_hold_and_its_subagents() -> None:
    """Each response's record holds its call's cost, a subagent's settlement what the child
    cost: a run continued from its records starts from that cost, and one whose cost reached
    its budget has it exhausted (its next turn is the grace turn)."""
    from .test_resume_fold import prepared, response, resume, settled, started

    def priced(turn: int, *calls: str, cost: int | None, text: str = "") -> ModelResponseRecorded:
        record = response(turn, *calls, text=text)
        return attrs.evolve(record, usage=attrs.evolve(record.usage, cost_micros=cost))

    child = {"turns": 1, "tool_calls": 0, "input_tokens": 5, "cost_micros": 300_000}
    records = [
        *started(),
        priced(1, "c1", cost=CALL_COST),
        prepared(1, "c1"),
        settled(1, "c1", audit={"subagent": child}),
        priced(2, text="Oslo: 4 °C", cost=None),  # (no price: counted apart)
    ]
    budget = resume(records).state.budget
    assert budget.usage.cost_micros == CALL_COST + 300_000
    assert budget.usage.unpriced_calls == 1
    assert budget.usage.cost is None
    exhausted = resume(records[:-1], cost_budget="0.5")
    assert exhausted.state.budget.exhausted(50.0) == Exhaustion("cost", 580_000, 500_000)
