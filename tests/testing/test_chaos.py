"""Chaos: each fault does what it says, around a cassette and a scripted model; the checker finds
each broken invariant (pure); the invariants hold for all fault plans; and for a deliberately
broken agent the strategies shrink to the minimal fault sequence that breaks it."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import attrs
import pytest
from hypothesis import find, given, settings
from hypothesis.errors import InvalidArgument

from capabilities.approval import SuspendingApproval
from effectagent import Agent, AgentPolicy, Toolkit, tool
from effectagent.core import (
    ModelFailed,
    ModelRetrying,
    RetryPolicy,
    RunCompleted,
    ToolApprovalRequested,
    ToolCallSettled,
    ToolCallSucceeded,
    ToolDefect,
    TurnStarted,
    approval_decided,
)
from effectagent.testing import (
    ChaosReport,
    FaultPlan,
    ModelFault,
    ReplayModel,
    ScriptedModel,
    ToolFault,
    Turn,
    assert_same_records,
    fault_plans,
    invariant_violations,
    record,
    run_chaos_sync,
)

from .cassettes import agent_with, run_on, scripted_weather, weather

PROMPT = "How warm is it in Oslo and Rome?"


@pytest.fixture(scope="module")
def cassette(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("chaos") / "weather.jsonl"
    run_on(record(scripted_weather().as_layer(), path), prompts=[PROMPT])
    return path


def chaos(cassette: Path, plan: FaultPlan, agent: Any = weather) -> ChaosReport:
    layer = ReplayModel.layer(cassette, check=False) + agent.toolkit.handlers()
    return run_chaos_sync(agent, layer, plan, prompt=PROMPT)


# ---- each fault -----------------------------------------------------------------------------------


#: What the type checker would refuse, as a user without one might write it.
_MISSPELT: Any = "rate_limit"
_UNKNOWN: Any = "explode"
_FRACTION: Any = 1.5


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: ModelFault(_MISSPELT), "ModelFault.kind must be one of 'rate-limit'"),
        (lambda: ToolFault(_UNKNOWN), "ToolFault.kind must be one of 'slow'"),
        (lambda: ToolFault("slow", seconds=-1), "ToolFault.seconds must be a finite number"),
        (
            lambda: ModelFault("rate-limit", retry_after=float("nan")),
            "ModelFault.retry_after must be a finite number",
        ),
        (lambda: ModelFault("cut", after_parts=-1), "ModelFault.after_parts must be a whole"),
        (
            lambda: ModelFault("cut", after_parts=_FRACTION),
            "ModelFault.after_parts must be a whole",
        ),
    ],
)
def test_a_fault_that_is_not_one_of_the_listed_ones_is_refused(make: Any, message: str) -> None:
    """A misspelt kind used to play another fault (``rate_limit`` a malformed event) or none
    (``explode``), and a negative wait made the harness itself fail."""
    with pytest.raises(ValueError, match=message):
        make()


_WORDS: Any = ("rate-limit",)
_A_WORD: Any = "x"
_MODEL_FAULTS_AS_TOOLS: Any = (ModelFault("cut"),)
_TOOL_FAULTS_AS_MODEL: Any = (None, ToolFault("defect"))
_A_DICT: Any = {0: ModelFault("cut")}


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (
            lambda: FaultPlan(tools=_MODEL_FAULTS_AS_TOOLS),
            "FaultPlan.tools[0] must be a ToolFault or None, got ModelFault(kind='cut', "
            "retry_after=0.0, after_parts=0) (a model fault goes in model=)",
        ),
        (
            lambda: FaultPlan(model=_TOOL_FAULTS_AS_MODEL),
            "FaultPlan.model[1] must be a ModelFault or None, got ToolFault(kind='defect', "
            "seconds=0.0) (a tool fault goes in tools=)",
        ),
        (
            lambda: FaultPlan(model=_WORDS),
            "FaultPlan.model[0] must be a ModelFault or None, got 'rate-limit'",
        ),
        (
            lambda: FaultPlan(model=_A_WORD),
            "FaultPlan.model must be a tuple (or list) of ModelFault or None, got 'x'",
        ),
        (
            lambda: FaultPlan(tools=_A_DICT),
            "FaultPlan.tools must be a tuple (or list) of ToolFault or None, got {0: ",
        ),
        (
            lambda: FaultPlan(tools=ToolFault("hang")),  # type: ignore[arg-type]
            "FaultPlan.tools must be a tuple (or list) of ToolFault or None, got ToolFault(",
        ),
    ],
    ids=["model-fault-in-tools", "tool-fault-in-model", "strs", "str", "dict", "lone-fault"],
)
def test_a_plan_holds_faults_of_its_own_kind_only(make: Any, message: str) -> None:
    """A ModelFault in ``tools=`` used to be played as a tool defect (and the report found
    nothing wrong); a kind's name in ``model=`` failed the run with an AttributeError."""
    with pytest.raises(TypeError, match=re.escape(message)):
        make()


def test_a_plan_given_lists_holds_tuples() -> None:
    plan = FaultPlan(model=[None, ModelFault("unavailable")], tools=[ToolFault("defect")])
    assert plan == FaultPlan(model=(None, ModelFault("unavailable")), tools=(ToolFault("defect"),))
    assert hash(plan) == hash(FaultPlan((None, ModelFault("unavailable")), (ToolFault("defect"),)))


_INF = float("inf")
_HALF: Any = 1.5
_YES: Any = True
_A_KIND: Any = "cut"
_BOGUS: Any = ["bogus"]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"max_retry_after": _INF}, "max_retry_after must be a finite number ≥ 0, got inf"),
        ({"max_retry_after": -5}, "max_retry_after must be a finite number ≥ 0, got -5"),
        ({"max_tool_delay": float("nan")}, "max_tool_delay must be a finite number ≥ 0, got nan"),
        ({"max_tool_delay": _YES}, "max_tool_delay must be a finite number ≥ 0, got True"),
        ({"max_model_calls": -1}, "max_model_calls must be a whole number ≥ 0, got -1"),
        ({"max_tool_calls": _HALF}, "max_tool_calls must be a whole number ≥ 0, got 1.5"),
        ({"max_parts": _YES}, "max_parts must be a whole number ≥ 0, got True"),
        ({"model_kinds": _A_KIND}, "model_kinds must be a sequence of kinds, not a str"),
        ({"tool_kinds": "hang"}, "tool_kinds must be a sequence of kinds, not a str"),
        ({"model_kinds": _BOGUS}, "model_kinds: unknown kind 'bogus'; use 'rate-limit', "),
        ({"tool_kinds": ["slow", "cut"]}, "tool_kinds: unknown kind 'cut'; use 'slow', "),
    ],
    ids=[
        "inf-retry-after",
        "negative-retry-after",
        "nan-tool-delay",
        "bool-tool-delay",
        "negative-model-calls",
        "fractional-tool-calls",
        "bool-parts",
        "str-model-kinds",
        "str-tool-kinds",
        "unknown-model-kind",
        "unknown-tool-kind",
    ],
)
def test_fault_plans_refuses_bounds_it_cannot_draw_from(
    options: dict[str, Any], message: str
) -> None:
    """Each is hypothesis' InvalidArgument when the strategy is made: an infinite bound used to
    be an OverflowError, a kind's name a ValueError about its first letter at draw time."""
    with pytest.raises(InvalidArgument, match=re.escape(message)):
        fault_plans(**options)


def test_no_faults_is_the_recorded_run(cassette: Path) -> None:
    report = chaos(cassette, FaultPlan())
    assert report.completed
    assert report.violations() == ()
    assert report.elapsed == pytest.approx(1.0)  # both forecasts at once, one second each


@pytest.mark.parametrize(
    "fault",
    [
        ModelFault("rate-limit", retry_after=5.0),
        ModelFault("unavailable"),
        ModelFault("cut", after_parts=3),
    ],
    ids=str,
)
def test_a_transient_model_fault_is_retried_without_using_up_the_exchange(
    cassette: Path, fault: ModelFault
) -> None:
    clean = chaos(cassette, FaultPlan())
    for plan in (FaultPlan(model=(fault,)), FaultPlan(model=(None, fault))):
        report = chaos(cassette, plan)
        assert report.completed, report.result
        assert [type(e) for e in report.events].count(ModelRetrying) == 1
        assert_same_records(clean.records, report.records)  # the same run, one retry later
        assert report.violations() == ()
    rate_limited = chaos(cassette, FaultPlan(model=(ModelFault("rate-limit", retry_after=5.0),)))
    if fault.kind == "rate-limit":
        assert rate_limited.elapsed >= 6.0  # the retry-after, then the forecasts


def test_a_cut_after_streamed_text_tells_the_consumer_to_drop_it(cassette: Path) -> None:
    report = chaos(cassette, FaultPlan(model=(None, ModelFault("cut", after_parts=2))))
    (retrying,) = [e for e in report.events if isinstance(e, ModelRetrying)]
    assert retrying.discard
    assert report.completed


def test_a_malformed_event_fails_the_run_as_in_production(cassette: Path) -> None:
    report = chaos(cassette, FaultPlan(model=(ModelFault("malformed", after_parts=1),)))
    assert report.status == "failed"
    assert report.result is not None
    assert isinstance(report.result.error, ModelFailed)
    assert "MalformedResponse" in str(report.result.error)
    assert report.violations() == ()


def test_tool_faults_slow_hang_and_defect(cassette: Path) -> None:
    slow = chaos(cassette, FaultPlan(tools=(ToolFault("slow", 10.0),)))
    assert slow.completed
    assert slow.elapsed == pytest.approx(11.0)
    hung = chaos(cassette, FaultPlan(tools=(None, ToolFault("hang"))))
    settled = [r.record for r in hung.records if isinstance(r.record, ToolCallSettled)]
    assert [s.outcome.kind for s in settled] == ["success", "defect"]
    assert "timed out after 30 s" in str(settled[1].outcome.model_content())
    assert hung.elapsed == pytest.approx(30.0)  # the tool's timeout, on the mock clock
    broken = chaos(cassette, FaultPlan(tools=(ToolFault("defect"),)))
    outcome = next(
        r.record.outcome for r in broken.records if isinstance(r.record, ToolCallSettled)
    )
    assert isinstance(outcome, ToolDefect)
    for report in (slow, hung, broken):
        assert report.violations() == ()


def test_a_scripted_model_takes_faults_too() -> None:
    def scripted() -> Any:  # made afresh for each run: a script is consumed
        return scripted_weather().as_layer() + weather.toolkit.handlers()

    plan = FaultPlan(model=(ModelFault("cut", after_parts=1), None, ModelFault("rate-limit")))
    report = run_chaos_sync(weather, scripted(), plan, prompt=PROMPT)
    assert report.completed
    assert [type(e) for e in report.events].count(ModelRetrying) == 2


def test_faults_are_described_in_sentences() -> None:
    plan = FaultPlan(
        model=(None, ModelFault("rate-limit", retry_after=2.0), ModelFault("cut", after_parts=1)),
        tools=(ToolFault("slow", 3.0), None, ToolFault("hang")),
    )
    assert str(plan) == (
        "model call 2: rate limited (retry after 2 s); model call 3: stream cut after 1 part; "
        "tool call 1: slow tool (3 s); tool call 3: tool hang"
    )
    assert str(FaultPlan()) == "no faults"


# ---- the checker ----------------------------------------------------------------------------------


def test_the_checker_names_each_broken_invariant(cassette: Path) -> None:
    report = chaos(cassette, FaultPlan())
    events, records = list(report.events), [e.record for e in report.records]
    policy = weather.policy

    def check(
        events: list[Any] = events, records: list[Any] = records, **extra: Any
    ) -> tuple[str, ...]:
        options: dict[str, Any] = {"policy": policy, "elapsed": 1.0, "status": "completed"} | extra
        return invariant_violations(events, records, **options)

    assert check() == ()
    settlements = [i for i, r in enumerate(records) if isinstance(r, ToolCallSettled)]
    first = records[settlements[0]]
    assert check(records=[*records, first]) == (
        "tool call 'call_1' (turn 1) settled 2 times",
        "the events announced the settlements [('call_1', 'success'), ('call_2', 'success')] but "
        "the log holds [('call_1', 'success'), ('call_1', 'success'), ('call_2', 'success')]",
    )
    unsettled = [r for i, r in enumerate(records) if i != settlements[1]]
    assert "tool call 'call_2' (turn 1) was prepared and never settled" in check(records=unsettled)
    terminal = events[-1]
    assert check(events=events[:-1])[0] == "the run ended with 0 terminal events, not one"
    assert check(events=[*events, events[1]]) == ("events went on after the terminal RunCompleted",)
    assert check(records=records[:-1])[0] == "the log holds 0 terminal records, not one"
    assert check(status="failed") == (
        "the result says failed but the terminal event says completed",
    )
    assert isinstance(terminal, RunCompleted)
    assert check(elapsed=700.0) == (
        "the run took 700.0 s on the Trio clock; max_duration is 120 s",
    )
    turns = [e for e in events if isinstance(e, TurnStarted)]
    assert check(policy=AgentPolicy(max_turns=1, max_duration=120)) == ()  # 2 turns: 1 + grace
    more = [*turns, *turns, *events]
    assert check(events=more, policy=AgentPolicy(max_turns=1, max_duration=120))[0] == (
        "the run took 6 turns; max_turns is 1 (+1 grace)"
    )
    defect = ToolDefect("call_2", "forecast", "boom")
    failed = [
        attrs.evolve(e, outcome=defect)  # type: ignore[arg-type]  # an event no run emits
        if isinstance(e, ToolCallSucceeded) and e.tool_call_id == "call_2"
        else e
        for e in events
    ]
    assert check(events=failed) == (
        "the events announced the settlements [('call_1', 'success'), ('call_2', 'defect')] but "
        "the log holds [('call_1', 'success'), ('call_2', 'success')]",
    )


def test_the_checker_holds_each_announced_outcome_to_the_logs_own(cassette: Path) -> None:
    """The same calls with the same kinds are not enough: an event announcing another value
    than the log holds for its call breaks "the log and the events agree"."""
    report = chaos(cassette, FaultPlan())
    events, records = list(report.events), [e.record for e in report.records]
    options: dict[str, Any] = {"policy": weather.policy, "elapsed": 1.0, "status": "completed"}
    assert invariant_violations(events, records, **options) == ()
    lied = [
        attrs.evolve(e, outcome=attrs.evolve(e.outcome, result=-273.0))
        if isinstance(e, ToolCallSucceeded) and e.tool_call_id == "call_2"
        else e
        for e in events
    ]
    assert invariant_violations(lied, records, **options) == (
        "the events announced another success outcome for tool call 'call_2' than the log holds",
    )


@tool(timeout=10, needs_approval=True)
async def pay(account: str) -> str:
    """Pay into an account.

    Args:
        account: The account.
    """
    return "paid"


def test_a_run_that_suspends_for_a_decision_breaks_no_invariant() -> None:
    """A suspended run has not ended: one RunSuspended event, and its log stops with the
    approval request it waits on, undecided, and no terminal record (no record marks a
    suspension) — which the checker takes as its end."""
    agent = Agent("payer", "Pay.", AgentPolicy(max_duration=120), Toolkit(pay))
    script = ScriptedModel([Turn.tool_calls(("pay", {"account": "savings"})), Turn.text("Paid.")])
    layer = script.as_layer() + agent.toolkit.handlers() + SuspendingApproval().layer()
    report = run_chaos_sync(agent, layer, FaultPlan())
    assert report.status == "suspended"
    assert report.violations() == ()
    records = [e.record for e in report.records]
    assert not any("Suspend" in type(r).__name__ for r in records)
    (asked,) = [r for r in records if isinstance(r, ToolApprovalRequested)]
    call_id = asked.request.tool_call_id
    unasked = [r for r in records if r is not asked]
    options: dict[str, Any] = {"policy": agent.policy, "elapsed": 1.0}
    assert invariant_violations(report.events, unasked, **options) == (
        f"the run suspended for tool call {call_id!r} but the log holds no approval request for it",
    )
    decided = approval_decided(asked, approved=True, decided_by="ann", at=1.0)
    assert invariant_violations(report.events, [*records, decided], **options) == (
        f"the run suspended for tool call {call_id!r} but the log holds its decision",
    )
    assert invariant_violations(report.events, records, status="completed", **options) == (
        "the result says completed but the terminal event says suspended",
    )


# ---- for all fault plans ----------------------------------------------------------------------------


@given(plan=fault_plans())
def test_the_invariants_hold_under_any_faults(plan: FaultPlan) -> None:
    report = run_chaos_sync(
        weather, scripted_weather().as_layer() + weather.toolkit.handlers(), plan, prompt=PROMPT
    )
    report.assert_invariants()


# ---- shrinking ----------------------------------------------------------------------------------------


def test_faults_shrink_to_the_minimal_sequence_that_breaks_a_broken_agent(cassette: Path) -> None:
    """The agent gives up after one retry (``attempts=2``) while its user requires that
    transient faults never fail a run: of all the plans that break it, hypothesis reports the
    minimal one — two rate limits in a row on the first call, retry-after 0, no tool faults."""
    broken = agent_with(policy=AgentPolicy(max_duration=120, model_retry=RetryPolicy(attempts=2)))

    def breaks(plan: FaultPlan) -> bool:
        report = chaos(cassette, plan, broken)
        report.assert_invariants()  # the engine's invariants hold even here…
        return not report.completed  # …it is the user's requirement that breaks

    transient = fault_plans(model_kinds=("rate-limit", "unavailable", "cut"))
    minimal = find(
        transient, breaks, settings=settings(max_examples=300, database=None, derandomize=True)
    )
    assert minimal == FaultPlan(model=(ModelFault("rate-limit"), ModelFault("rate-limit")))
    assert str(minimal) == (
        "model call 1: rate limited (retry after 0 s); model call 2: rate limited (retry after 0 s)"
    )
    # The same agent with the default three attempts survives that plan.
    assert chaos(cassette, minimal, weather).completed
