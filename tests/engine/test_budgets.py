"""Budgets, one test per dimension; the single grace turn of "final-answer" (and its fail-closed
rule); "fail"; BudgetWarning once per dimension at 80 %; repeated failures; and cache-aware,
context-aware usage totals (CAP-017)."""

from __future__ import annotations

from typing import Any

import attrs
import pytest
import trio
import trio.testing
from hypothesis import given
from hypothesis import strategies as st

from effectagent.ai import Usage
from effectagent.core import (
    AgentPolicy,
    BudgetExhausted,
    BudgetWarning,
    FinalTurnDeclaredTools,
    ModelResponseRecorded,
    RepeatedToolFailure,
    RunCompleted,
    RunFailed,
    RunFailedRecord,
    ToolCallPrepared,
    ToolCallSettled,
    ToolRejected,
    TurnCompleted,
    TurnStarted,
    UsageDelta,
    UsageTotals,
)
from effectagent.engine._budget import Budget, Exhaustion, RepeatedFailure
from effectagent.testing import Turn

from .helpers import (
    HandlerProbe,
    Ran,
    events_of,
    forecast_tool,
    make_agent,
    make_policy,
    records_of,
    results_by_id,
    run_script,
    same_error,
)


def _oslo(count: int = 1, **kwargs: Any) -> Turn:
    return Turn.tool_calls(
        *[("forecast", {"city": "Oslo"}, f"c{count}_{i}") for i in range(count)], **kwargs
    )


async def _run(policy_overrides: dict[str, Any], turns: list[Turn], probe: HandlerProbe) -> Ran:
    tool = forecast_tool()
    return await run_script(
        make_agent(tool, policy=make_policy(**policy_overrides)), {tool: probe.forecast()}, turns
    )


def _assert_single_grace_turn(ran: Ran, dimension: str) -> RunCompleted:
    terminal = ran.terminal
    assert isinstance(terminal, RunCompleted), terminal
    assert terminal.finish_reason == "budget-exhausted"
    assert terminal.exhausted == dimension
    grace = ran.model.requests[-1]
    assert grace.tool_choice == "none"
    assert grace.tools == ()
    assert all(r.tools for r in ran.model.requests[:-1])
    starts = events_of(ran.events, TurnStarted)
    assert [s.grace for s in starts] == [False] * (len(starts) - 1) + [True]
    assert len(starts) == len(ran.model.requests)
    return terminal


# ---- one test per dimension --------------------------------------------------------------------


async def test_max_turns(autojump_clock: trio.testing.MockClock) -> None:
    probe = HandlerProbe()
    ran = await _run({"max_turns": 2}, [_oslo(), _oslo(), Turn.text("Out of turns.")], probe)
    terminal = _assert_single_grace_turn(ran, "turns")
    assert terminal.text == "Out of turns."
    assert len(ran.model.requests) == 3
    assert len(probe.calls) == 2
    ran.model.inner.assert_consumed()


async def test_a_batch_past_max_tool_calls_runs_none_of_its_calls(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The whole batch or none of it: with one call left, a batch of three runs none (it all
    settles rejected, in declaration order), and the grace turn follows."""
    probe = HandlerProbe()
    ran = await _run({"max_tool_calls": 3}, [_oslo(2), _oslo(3), Turn.text("Enough.")], probe)
    _assert_single_grace_turn(ran, "tool_calls")
    kinds = {r.tool_call_id: r.outcome.kind for r in records_of(ran.log, ToolCallSettled)}
    assert kinds == {
        "c2_0": "success",
        "c2_1": "success",
        "c3_0": "rejected",
        "c3_1": "rejected",
        "c3_2": "rejected",
    }
    assert len(probe.calls) == 2
    assert not any(
        r.tool_call_id.startswith("c3") for r in records_of(ran.log, ToolCallPrepared)
    ), "a refused batch prepares nothing: none of it may have run"
    rejected = results_by_id(ran.model.requests[2])["c3_2"]
    assert rejected.result["_tag"] == "ToolRejected"


async def test_max_duration_interrupts_a_hanging_tool(
    autojump_clock: trio.testing.MockClock,
) -> None:
    probe, tool = HandlerProbe(), forecast_tool()
    start = trio.current_time()
    policy = make_policy(max_duration=30)
    ran = await run_script(
        make_agent(tool, policy=policy),
        {tool: probe.hanging()},
        [_oslo(), Turn.text("Ran out of time.")],
    )
    _assert_single_grace_turn(ran, "duration")
    # The turns stop the grace reserve (3 s of 30) early, so that the grace turn fits.
    assert trio.current_time() - start == pytest.approx(30 - policy.grace_reserve)
    assert policy.grace_reserve == pytest.approx(3)
    assert probe.cancelled == 1
    assert probe.active == 0
    defect = results_by_id(ran.model.requests[-1])["c1_0"]
    assert defect.result["_tag"] == "ToolDefect"
    assert "interrupted" in defect.result["message"]


async def test_max_duration_interrupts_a_hanging_model(
    autojump_clock: trio.testing.MockClock,
) -> None:
    probe = HandlerProbe()
    ran = await _run({"max_duration": 30}, [Turn.hanging(), Turn.text("Late answer.")], probe)
    _assert_single_grace_turn(ran, "duration")
    assert ran.model.all_streams_closed()


async def test_token_budget(autojump_clock: trio.testing.MockClock) -> None:
    probe = HandlerProbe()
    per_turn = Usage.of(50, 10)
    ran = await _run(
        {"token_budget": 100},
        [_oslo(usage=per_turn), _oslo(usage=per_turn), Turn.text("Done.")],
        probe,
    )
    terminal = _assert_single_grace_turn(ran, "tokens")
    assert len(ran.model.requests) == 3  # 60, then 120 >= 100: grace
    assert terminal.usage.total_tokens >= 120


# ---- warnings ----------------------------------------------------------------------------------


async def test_budget_warning_once_per_dimension_at_80_percent(
    autojump_clock: trio.testing.MockClock,
) -> None:
    probe = HandlerProbe()
    usage = Usage.of(20, 10)
    ran = await _run(
        {"max_turns": 5, "max_tool_calls": 100, "token_budget": 140},
        [*[_oslo(usage=usage) for _ in range(5)], Turn.text("Done.", usage=usage)],
        probe,
    )
    warnings = events_of(ran.events, BudgetWarning)
    # tokens: 30 per call, 120 >= 112 after turn 4; turns: 4 >= 4 after turn 4.
    assert sorted((w.dimension, w.used, w.limit) for w in warnings) == [
        ("tokens", 120, 140),
        ("turns", 4, 5),
    ]
    # Each follows the TurnCompleted of the turn that crossed the line.
    for warning in warnings:
        before = ran.events[warning.seq - 2]
        assert isinstance(before, TurnCompleted | BudgetWarning)
    completed = events_of(ran.events, TurnCompleted)
    assert completed[3].seq < min(w.seq for w in warnings)
    assert completed[2].seq < completed[3].seq


@pytest.mark.parametrize("on_exhaustion", ["final-answer", "fail"])
async def test_the_runs_time_warns_once_though_no_turn_ends_past_the_ratio(
    autojump_clock: trio.testing.MockClock, on_exhaustion: str
) -> None:
    # The tool runs from 0 s to the turns' deadline: the run's time passes 80 % while no turn
    # ends, so the warning comes as the time runs out, before the grace turn (or the failure).
    probe, tool = HandlerProbe(), forecast_tool()
    policy = make_policy(max_duration=30, on_exhaustion=on_exhaustion)
    ran = await run_script(
        make_agent(tool, policy=policy),
        {tool: probe.hanging()},
        [_oslo(), Turn.text("Ran out of time.")],
    )
    (warning,) = events_of(ran.events, BudgetWarning)
    limit = 30 - policy.grace_reserve  # the turns' deadline
    assert (warning.dimension, warning.limit) == ("duration", 30)
    assert warning.used == pytest.approx(limit)
    after = ran.events[warning.seq :]  # what follows: the grace turn, or the failure
    assert after
    assert not events_of(after, BudgetWarning)
    kind = TurnStarted if on_exhaustion == "final-answer" else RunFailed
    assert isinstance(after[0], kind)


async def test_no_warning_below_80_percent(autojump_clock: trio.testing.MockClock) -> None:
    probe = HandlerProbe()
    ran = await _run({"max_turns": 5}, [_oslo(), _oslo(), _oslo(), Turn.text("Done.")], probe)
    assert isinstance(ran.terminal, RunCompleted)
    assert events_of(ran.events, BudgetWarning) == []


# ---- grace turn and "fail" ---------------------------------------------------------------------


async def test_a_grace_turn_that_declares_a_tool_fails_closed(
    autojump_clock: trio.testing.MockClock,
) -> None:
    probe = HandlerProbe()
    ran = await _run({"max_turns": 1}, [_oslo(), _oslo()], probe)
    terminal = ran.terminal
    assert isinstance(terminal, RunFailed)
    assert same_error(terminal.error, FinalTurnDeclaredTools(("forecast",)))
    assert len(probe.calls) == 1  # the grace turn's call never ran
    assert ran.model.requests[-1].tool_choice == "none"
    (record,) = records_of(ran.log, RunFailedRecord)
    assert record.error == terminal.error


@pytest.mark.parametrize(
    ("overrides", "dimension", "limit"),
    [
        ({"max_turns": 2}, "turns", 2),
        ({"max_tool_calls": 2}, "tool_calls", 2),
    ],
)
async def test_on_exhaustion_fail_ends_the_run_naming_the_dimension(
    autojump_clock: trio.testing.MockClock, overrides: dict[str, Any], dimension: str, limit: int
) -> None:
    probe = HandlerProbe()
    ran = await _run({**overrides, "on_exhaustion": "fail"}, [_oslo(), _oslo(), _oslo()], probe)
    terminal = ran.terminal
    assert isinstance(terminal, RunFailed)
    assert same_error(terminal.error, BudgetExhausted(dimension, limit, limit))
    assert len(ran.model.requests) == 2  # no grace turn
    assert all(r.tool_choice == "auto" for r in ran.model.requests)


async def test_duration_exhaustion_under_fail(autojump_clock: trio.testing.MockClock) -> None:
    probe = HandlerProbe()
    ran = await _run({"max_duration": 10, "on_exhaustion": "fail"}, [Turn.hanging()], probe)
    terminal = ran.terminal
    assert isinstance(terminal, RunFailed)
    assert isinstance(terminal.error, BudgetExhausted)
    assert terminal.error.dimension == "duration"
    assert terminal.error.limit == 10


# ---- repeated failures -------------------------------------------------------------------------


def _city(city: str) -> Turn:
    return Turn.tool_calls(("forecast", {"city": city}))


async def test_three_consecutive_failures_of_one_tool_fail_the_run(
    autojump_clock: trio.testing.MockClock,
) -> None:
    probe = HandlerProbe()
    ran = await _run(
        {"on_exhaustion": "fail"},
        [_city("Atlantis"), _city("Lemuria"), _city("Mu"), _city("Oslo")],
        probe,
    )
    terminal = ran.terminal
    assert isinstance(terminal, RunFailed)
    assert same_error(terminal.error, RepeatedToolFailure("forecast", 3))
    assert len(ran.model.requests) == 3


async def test_repeated_failures_under_final_answer_get_a_grace_turn(
    autojump_clock: trio.testing.MockClock,
) -> None:
    probe = HandlerProbe()
    ran = await _run(
        {"repeated_failure_limit": 2},
        [_city("Atlantis"), _city("Mu"), Turn.text("I give up.")],
        probe,
    )
    _assert_single_grace_turn(ran, "repeated_failures")


async def test_a_success_resets_the_failure_streak(autojump_clock: trio.testing.MockClock) -> None:
    probe = HandlerProbe()
    ran = await _run(
        {"on_exhaustion": "fail"},
        [
            _city("Atlantis"),
            _city("Mu"),
            _city("Oslo"),
            _city("Lemuria"),
            _city("Hy-Brasil"),
            Turn.text("Done."),
        ],
        probe,
    )
    assert isinstance(ran.terminal, RunCompleted)
    kinds = [r.outcome.kind for r in records_of(ran.log, ToolCallSettled)]
    assert kinds == ["failure", "failure", "success", "failure", "failure"]


async def test_rejections_do_not_count_as_failures(autojump_clock: trio.testing.MockClock) -> None:
    probe = HandlerProbe()
    ran = await _run(
        {"max_tool_calls": 1, "max_turns": 8, "on_exhaustion": "fail", "repeated_failure_limit": 2},
        [_oslo(4)],
        probe,
    )
    terminal = ran.terminal
    assert isinstance(terminal, RunFailed)
    # Four calls asked for, one allowed: the batch ran none of them (rejections, not failures).
    assert same_error(terminal.error, BudgetExhausted("tool_calls", 4, 1, refused_batch=4))
    outcomes = [r.outcome for r in records_of(ran.log, ToolCallSettled)]
    assert [type(o) for o in outcomes] == [ToolRejected] * 4


# ---- CAP-017 -----------------------------------------------------------------------------------


async def test_usage_totals_are_cache_aware_and_context_aware(
    autojump_clock: trio.testing.MockClock,
) -> None:
    probe = HandlerProbe()
    first = Usage.of(100, 10, cache_read=60, cache_write=20)
    second = Usage.of(150, 5, cache_read=120)
    ran = await _run({}, [_oslo(usage=first), Turn.text("Done.", usage=second)], probe)
    terminal = ran.terminal
    assert isinstance(terminal, RunCompleted)
    assert terminal.usage == UsageTotals(
        input_tokens=250,
        output_tokens=15,
        cache_read_input_tokens=180,
        cache_write_input_tokens=20,
        reasoning_tokens=0,
        model_calls=2,
        last_input_tokens=150,
        last_output_tokens=5,
        unpriced_calls=2,  # the scripted model has no price: its calls have no cost
    )
    assert terminal.usage.live_context_tokens == 155
    deltas = [r.usage for r in records_of(ran.log, ModelResponseRecorded)]
    assert deltas == [
        UsageDelta(100, 10, 60, 20, 0),
        UsageDelta(150, 5, 120, 0, 0),
    ]
    turn_usage = [e.usage for e in events_of(ran.events, TurnCompleted)]
    assert turn_usage[0].last_input_tokens == 100
    assert turn_usage[0].cache_write_input_tokens == 20


def test_usage_delta_keeps_input_total_and_cache_parts_distinct() -> None:
    usage = Usage.of(1000, 50, cache_read=700, cache_write=100)
    assert usage.input.uncached == 200
    delta = UsageDelta.from_usage(usage)
    assert delta.input_tokens == 1000
    assert delta.cache_read_input_tokens == 700
    assert delta.cache_write_input_tokens == 100
    totals = UsageTotals().add(delta).add(UsageDelta(10, 1))
    assert totals.input_tokens == 1010
    assert totals.cache_read_input_tokens == 700
    assert (totals.last_input_tokens, totals.last_output_tokens) == (10, 1)
    assert totals.model_calls == 2


@given(
    turns=st.integers(0, 6),
    tool_calls=st.integers(0, 6),
    elapsed=st.floats(0, 20),
    tokens=st.integers(0, 200),
    token_budget=st.none() | st.integers(1, 150),
    repeated=st.none() | st.tuples(st.just("t"), st.integers(1, 5)),
)
def test_exhausted_is_the_first_dimension_of_limits_at_its_limit(
    turns: int,
    tool_calls: int,
    elapsed: float,
    tokens: int,
    token_budget: int | None,
    repeated: tuple[str, int] | None,
) -> None:
    policy = AgentPolicy(
        max_turns=4,
        max_tool_calls=4,
        max_duration=10,
        tool_concurrency=2,
        token_budget=token_budget,
    )
    failure = None if repeated is None else RepeatedFailure(*repeated)
    budget = Budget(
        policy,
        100.0,
        turns=turns,
        tool_calls=tool_calls,
        usage=UsageTotals(input_tokens=tokens),
        repeated_failure=failure,
    )
    now = 100.0 + elapsed
    expected = next((dim for dim in budget.limits(now) if dim.used >= dim.limit), None)
    if expected is None and repeated is not None:
        expected = Exhaustion("repeated_failures", repeated[1], policy.repeated_failure_limit)
    assert budget.exhausted(now) == expected


@given(
    steps=st.lists(
        st.tuples(st.integers(0, 2), st.integers(0, 3), st.floats(0, 4), st.integers(0, 400)),
        max_size=12,
    ),
    token_budget=st.none() | st.integers(1, 2000),
)
def test_due_warnings_are_each_dimension_once_when_it_crosses_its_line(
    steps: list[tuple[int, int, float, int]], token_budget: int | None
) -> None:
    """However use grows, a warning is due exactly once per dimension, at the first check where
    its use reached the warning ratio of its limit (the reference: every active dimension)."""
    policy = AgentPolicy(
        max_turns=10,
        max_tool_calls=10,
        max_duration=20,
        tool_concurrency=2,
        token_budget=token_budget,
    )
    budget = Budget(policy, 100.0)
    warned: set[str] = set()
    now = 100.0
    for turns, calls, seconds, tokens in steps:
        usage = UsageTotals(input_tokens=budget.usage.input_tokens + tokens)
        budget = attrs.evolve(
            budget, turns=budget.turns + turns, tool_calls=budget.tool_calls + calls, usage=usage
        )
        now += seconds
        expected = tuple(
            dim
            for dim in budget.limits(now)
            if dim.dimension not in warned and dim.used >= policy.warning_ratio * dim.limit
        )
        warned.update(dim.dimension for dim in expected)
        budget, due = budget.with_due_warnings(now)
        assert due == expected


# ---- usage by model: the budget keeps one model's breakdown implicit ---------------------------

_MODELS = st.sampled_from([None, "a", "b"])
_DELTAS = st.builds(
    UsageDelta,
    st.integers(0, 50),
    st.integers(0, 50),
    st.integers(0, 5),
    st.integers(0, 5),
    st.integers(0, 5),
    st.none() | st.integers(0, 1000),
)


def _children(draw: st.DrawFn) -> UsageTotals:
    """What a batch's children used: model calls of their own models, or figures alone, or
    nothing."""
    kind = draw(st.sampled_from(["calls", "figures", "nothing"]))
    if kind == "nothing":
        return UsageTotals()
    if kind == "figures":
        return UsageTotals(input_tokens=draw(st.integers(1, 9)), cost_micros=draw(st.integers()))
    used = UsageTotals()
    for model, delta in draw(st.lists(st.tuples(_MODELS, _DELTAS), min_size=1, max_size=3)):
        used = used.add_from(model, delta)
    return used


_STEPS = st.lists(
    st.one_of(
        st.tuples(st.just("call"), _MODELS, _DELTAS),
        st.tuples(st.just("children"), st.composite(_children)(), st.integers(0, 2)),
    ),
    max_size=8,
)


def _breakdown(usage: UsageTotals) -> dict[str | None, tuple[Any, ...]]:
    return {name: (attrs.astuple(each, recurse=False)[:-1]) for name, each in usage.by_model}


@given(steps=_STEPS)
def test_the_budgets_usage_by_model_is_what_adding_each_call_to_its_model_gives(
    steps: list[tuple[Any, ...]],
) -> None:
    """For any order of model calls (of one model or several) and children's usage, the
    budget's totals — figures and breakdown by model — are those of adding each call to its
    model's totals and including each child's, whether or not the budget keeps them compact."""
    from effectagent.engine._budget import Delegated

    budget = Budget(AgentPolicy(), 0.0)
    expected = UsageTotals()
    for step in steps:
        if step[0] == "call":
            _, model, delta = step
            budget = budget.with_usage(delta, model)
            expected = expected.add_from(model, delta)
        else:
            _, used, inner = step
            budget = budget.with_delegated(Delegated(inner, 0, 0, used))
            expected = expected.including(used)
    totals = budget.totals
    assert totals == expected
    assert _breakdown(totals) == _breakdown(expected)
    assert budget.usage == expected  # the figures, whatever the breakdown's form


def test_a_run_of_one_model_keeps_no_breakdown_of_its_own_until_a_second_model() -> None:
    budget = Budget(AgentPolicy(), 0.0).with_usage(UsageDelta(3, 4), "a")
    budget = budget.with_usage(UsageDelta(1, 1), "a")
    assert budget.usage.by_model == ()  # what a waiting run keeps
    assert [name for name, _ in budget.totals.by_model] == ["a"]
    budget = budget.with_usage(UsageDelta(2, 2), "b")
    assert [(name, t.input_tokens) for name, t in budget.usage.by_model] == [("a", 4), ("b", 2)]


def test_totals_attributed_to_one_model_are_that_models_and_a_breakdown_is_not_replaced() -> None:
    totals = UsageTotals().add(UsageDelta(3, 4)).add(UsageDelta(1, 1))
    one = totals.attributed_to("a")
    assert one == totals
    assert [(name, each.input_tokens, each.model_calls) for name, each in one.by_model] == [
        ("a", 4, 2)
    ]
    with pytest.raises(ValueError, match="already"):
        one.attributed_to("b")


def test_a_call_beside_the_conversation_leaves_the_live_context_estimate() -> None:
    """A guardrail's, validator's or summary's model call has a context of its own: it counts in
    the totals, but the live-context figures stay the last turn's."""
    turn, check = UsageDelta(5000, 50, 4000, 0), UsageDelta(30, 1, 0, 20)
    totals = UsageTotals().add(turn).add(check, live=False)
    assert (totals.input_tokens, totals.output_tokens, totals.model_calls) == (5030, 51, 2)
    assert (totals.cache_read_input_tokens, totals.cache_write_input_tokens) == (4000, 20)
    assert (totals.last_input_tokens, totals.last_output_tokens) == (5000, 50)
    assert totals.live_context_tokens == 5050
    by_model = UsageTotals().add_from("big", turn).add_from("small", check, live=False)
    assert by_model.live_context_tokens == 5050
    assert dict(by_model.by_model)["small"].model_calls == 1
    budget = (
        Budget(AgentPolicy(), 0.0).with_usage(turn, "big").with_usage(check, "small", live=False)
    )
    assert budget.totals.live_context_tokens == 5050
    assert budget.totals.input_tokens == 5030
    single = Budget(AgentPolicy(), 0.0).with_usage(turn).with_usage(check, live=False)
    assert single.totals.live_context_tokens == 5050
