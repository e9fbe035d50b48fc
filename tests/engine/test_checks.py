"""Output validators and guardrails (#29 items 4 and 5), against the scripted model: a validator's
rejection goes back to the model, bounded by ``output_retries``; a guardrail's trip ends the run
with a typed failure and a record, before any tool runs or any answer is delivered."""

from __future__ import annotations

import json
from typing import Any

import attrs
import pytest
import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st

from effectagent.ai import ModelRequest, Usage, UserMessage
from effectagent.core import (
    Agent,
    CheckContext,
    FinalAnswer,
    Guardrail,
    GuardrailFailed,
    GuardrailResult,
    GuardrailTripped,
    OutputInvalid,
    OutputValidatorFailed,
    RejectOutput,
    RunCompleted,
    RunFailed,
    RunFailedRecord,
    TextDelta,
    ToolCallSettled,
    ToolInvalidInput,
    UserInputRecorded,
)
from effectagent.engine import open_runtime
from effectagent.testing import FunctionModel, Turn

from .crash import DyingLog, log_layer
from .helpers import (
    HandlerProbe,
    TrackingModel,
    assert_well_formed,
    entries,
    events_of,
    forecast_tool,
    make_agent,
    make_policy,
    records_of,
    run_events,
)

SECRET = "sk-canary-0123456789"


@attrs.frozen
class Refund:
    order: str
    amount: float


def _refund(amount: float) -> str:
    return json.dumps({"order": "A-1", "amount": amount})


async def _run(model: TrackingModel, agent: Any, *tools: Any, text: str = "Refund A-1") -> Any:
    layer = model.layer()
    probe = HandlerProbe()
    if tools:
        layer = agent.toolkit.handlers({tool: probe.forecast() for tool in tools}) + layer
    async with open_runtime(layer, agents=[agent], secrets=[SECRET]) as runtime:
        events = await run_events(runtime, agent, text)
        log = await entries(runtime, events[0].conversation_id)
    return events, log, probe


# ---- output validators ------------------------------------------------------------------------


async def test_a_validator_rejection_goes_back_to_the_model_and_the_next_answer_is_taken(
    autojump_clock: trio.testing.MockClock,
) -> None:
    agent = make_agent(output=Refund)
    seen: list[Refund] = []

    @agent.output_validator
    async def positive(refund: Refund, ctx: CheckContext) -> None:
        seen.append(refund)
        if refund.amount <= 0:
            raise RejectOutput("the amount must be positive")

    model = TrackingModel([Turn.text(_refund(-1)), Turn.text(_refund(5))])
    events, log, _ = await _run(model, agent)
    end = assert_well_formed(events)
    assert isinstance(end, RunCompleted)
    assert end.output == Refund("A-1", 5)
    assert seen == [Refund("A-1", -1), Refund("A-1", 5)]
    feedback = [r for r in records_of(log, UserInputRecorded) if r.kind == "feedback"]
    assert len(feedback) == 1
    assert "the amount must be positive" in feedback[0].text
    last = model.requests[1].messages[-1]
    assert isinstance(last, UserMessage)
    assert "the amount must be positive" in str(last)


async def test_rejections_past_output_retries_fail_naming_the_last_message(
    autojump_clock: trio.testing.MockClock,
) -> None:
    agent = make_agent(output=Refund, policy=make_policy(output_retries=1))
    agent.output_validator(_never)
    model = TrackingModel([Turn.text(_refund(1))] * 5)
    events, _, _ = await _run(model, agent)
    end = assert_well_formed(events)
    assert isinstance(end, RunFailed)
    assert isinstance(end.error, OutputInvalid)
    assert str(end.error) == "the final answer was rejected by its validator after 1 retry: no (1)"
    assert len(model.requests) == 2


def _never(refund: Refund, ctx: CheckContext) -> None:  # a plain function works too
    raise RejectOutput(f"no ({refund.amount:.0f})")


@settings(deadline=None, max_examples=30)
@given(retries=st.integers(0, 4), rejections=st.integers(0, 8))
def test_validator_rejections_never_exceed_output_retries_plus_one_answers(
    retries: int, rejections: int
) -> None:
    """For any number of rejections in a row and any ``output_retries``: the model answers at
    most ``output_retries + 1`` times; the run completes iff the rejections left room."""
    agent = make_agent(output=Refund, policy=make_policy(output_retries=retries, max_turns=20))
    count = [0]

    @agent.output_validator
    async def reject_first(refund: Refund, ctx: CheckContext) -> None:
        count[0] += 1
        if count[0] <= rejections:
            raise RejectOutput("again")

    model = TrackingModel([Turn.text(_refund(1))] * 12)

    async def main() -> Any:
        events, _, _ = await _run(model, agent)
        return assert_well_formed(events)

    end = trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    assert len(model.requests) <= retries + 1
    assert isinstance(end, RunCompleted) == (rejections <= retries)
    assert len(model.requests) == min(rejections, retries) + 1


async def test_a_validator_that_raises_fails_the_run_without_its_message(
    autojump_clock: trio.testing.MockClock,
) -> None:
    agent = make_agent(output=Refund)

    @agent.output_validator
    async def broken(refund: Refund, ctx: CheckContext) -> None:
        raise KeyError(SECRET)

    events, log, _ = await _run(TrackingModel([Turn.text(_refund(1))]), agent)
    end = assert_well_formed(events)
    assert isinstance(end, RunFailed)
    assert isinstance(end.error, OutputValidatorFailed)
    assert str(end.error) == "the output validator broken failed (KeyError)"
    assert SECRET not in repr(events)
    assert SECRET not in repr(log)


async def test_a_text_agents_validator_gets_the_answer_text(
    autojump_clock: trio.testing.MockClock,
) -> None:
    agent = make_agent()
    texts: list[str] = []

    @agent.output_validator
    async def short(text: str, ctx: CheckContext) -> None:
        texts.append(text)
        if len(text) > 5:
            raise RejectOutput("at most five characters")

    model = TrackingModel([Turn.text("far too long"), Turn.text("ok")])
    events, _, _ = await _run(model, agent)
    end = assert_well_formed(events)
    assert isinstance(end, RunCompleted)
    assert end.text == "ok"
    assert texts == ["far too long", "ok"]


async def test_validators_are_registered_before_the_first_run_only(
    autojump_clock: trio.testing.MockClock,
) -> None:
    agent = make_agent(output=Refund)
    async with open_runtime(TrackingModel([]).layer(), agents=[agent]):
        pass
    with pytest.raises(RuntimeError, match="before its first run"):
        agent.output_validator(_never)
    fresh = attrs.evolve(agent)
    fresh.output_validator(_never)  # an evolved agent is a new definition
    assert fresh.output_validators == (_never,)
    assert agent.output_validators == ()


async def test_a_tool_mode_rejection_is_the_final_result_calls_failure(
    autojump_clock: trio.testing.MockClock,
) -> None:
    agent = make_agent(output=Refund, output_mode="tool")
    agent.output_validator(_never)
    good = {"order": "A-1", "amount": 3}
    model = TrackingModel([Turn.tool_calls(("final_result", good))] * 3)
    events, log, _ = await _run(model, agent)
    end = assert_well_formed(events)
    assert isinstance(end, RunFailed)
    settled = records_of(log, ToolCallSettled)
    assert [s.outcome.kind for s in settled] == ["invalid-input", "invalid-input"]
    refused = settled[0].outcome
    assert isinstance(refused, ToolInvalidInput)
    assert "was not accepted: no (3)" in refused.message


# ---- guardrails -------------------------------------------------------------------------------


async def _trip(ctx: CheckContext, text: str) -> GuardrailResult:
    return GuardrailResult.trip(f"refunds are not discussed here ({SECRET})")


async def _pass(ctx: CheckContext, value: Any) -> GuardrailResult:
    await trio.sleep(1)
    return GuardrailResult.passed()


async def test_an_input_guardrail_trip_ends_the_run_before_the_first_model_call(
    autojump_clock: trio.testing.MockClock,
) -> None:
    agent = make_agent(forecast_tool(), input_guardrails=[_pass, _trip])
    model = TrackingModel([Turn.tool_calls(("forecast", {"city": "Oslo"}))])
    events, log, probe = await _run(model, agent, *agent.toolkit)
    end = assert_well_formed(events)
    assert isinstance(end, RunFailed)
    assert isinstance(end.error, GuardrailTripped)
    assert str(end.error) == (
        "the input guardrail _trip tripped: refunds are not discussed here ([REDACTED])"
    )
    assert model.requests == []
    assert probe.calls == []
    (record,) = records_of(log, RunFailedRecord)
    assert record.error is not None
    assert str(record.error) == str(end.error)


async def test_an_input_guardrail_that_raises_fails_closed(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async def broken(ctx: CheckContext, text: str) -> GuardrailResult:
        raise ValueError(SECRET)

    agent = make_agent(input_guardrails=[Guardrail(broken, name="pii")])
    events, log, _ = await _run(TrackingModel([Turn.text("hi")]), agent)
    end = assert_well_formed(events)
    assert isinstance(end, RunFailed)
    assert isinstance(end.error, GuardrailFailed)
    assert str(end.error) == "the input guardrail pii failed (ValueError), so the run was stopped"
    assert SECRET not in repr(events)
    assert SECRET not in repr(log)


#: What the type checker would refuse, as a user without one might write it.
_FIVE: Any = 5
_NO: Any = "no"
_ONE: Any = 1
_NONE: Any = None


@pytest.mark.parametrize(
    ("make", "error"),
    [
        (
            lambda: GuardrailResult.trip(_FIVE),
            "GuardrailResult.reason must be a str (a sentence), got int",
        ),
        (lambda: GuardrailResult(tripped=_NO), "GuardrailResult.tripped must be a bool, got str"),
        (lambda: GuardrailResult(_ONE), "GuardrailResult.tripped must be a bool, got int"),
        (
            lambda: GuardrailResult(True, _NONE),
            "GuardrailResult.reason must be a str (a sentence), got NoneType",
        ),
    ],
)
def test_a_malformed_guardrail_result_is_refused_where_it_is_made(make: Any, error: str) -> None:
    with pytest.raises(TypeError) as raised:
        make()
    assert str(raised.value) == error


async def test_a_guardrail_tripping_with_a_reason_that_is_no_text_fails_closed(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # Not an engine defect: the result cannot be made, so the guardrail raised.
    async def sloppy(ctx: CheckContext, text: str) -> GuardrailResult:
        return GuardrailResult.trip(404)  # type: ignore[arg-type]

    agent = make_agent(input_guardrails=[sloppy])
    events, _log, _ = await _run(TrackingModel([Turn.text("hi")]), agent)
    end = assert_well_formed(events)
    assert isinstance(end, RunFailed)
    assert isinstance(end.error, GuardrailFailed)
    assert str(end.error) == "the input guardrail sloppy failed (TypeError), so the run was stopped"


def test_a_guardrails_beside_flag_must_be_a_bool() -> None:
    async def check(ctx: CheckContext, text: str) -> GuardrailResult:
        return GuardrailResult.passed()

    with pytest.raises(TypeError, match=r"Guardrail\.beside must be a bool, got str"):
        Guardrail(check, beside="yes")  # type: ignore[arg-type]
    assert Guardrail(check, beside=True).beside is True


async def test_an_output_guardrail_trip_withholds_the_answer(
    autojump_clock: trio.testing.MockClock,
) -> None:
    seen: list[FinalAnswer[Any]] = []

    async def no_refunds_over_ten(ctx: CheckContext, answer: FinalAnswer[Any]) -> GuardrailResult:
        seen.append(answer)
        if answer.output.amount > 10:
            return GuardrailResult.trip("over the limit")
        return GuardrailResult.passed()

    agent = make_agent(output=Refund, output_guardrails=[no_refunds_over_ten])
    events, log, _ = await _run(TrackingModel([Turn.text(_refund(50))]), agent)
    end = assert_well_formed(events)
    assert isinstance(end, RunFailed)
    assert isinstance(end.error, GuardrailTripped)
    assert str(end.error) == "the output guardrail no_refunds_over_ten tripped: over the limit"
    assert not events_of(events, RunCompleted)
    assert seen[0].output == Refund("A-1", 50)
    assert records_of(log, RunFailedRecord)


async def test_a_guardrail_may_ask_the_model_and_its_usage_counts(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async def judge(ctx: CheckContext, text: str) -> GuardrailResult:
        verdict = await ctx.generate(ModelRequest((UserMessage.text(f"Safe? {text}"),)))
        return GuardrailResult.passed() if verdict.text == "yes" else GuardrailResult.trip("no")

    from effectagent.ai import Usage

    model = TrackingModel(
        [Turn.text("yes", usage=Usage.of(100, 7)), Turn.text("Done.", usage=Usage.of(10, 2))]
    )
    agent = make_agent(input_guardrails=[judge])
    events, _, _ = await _run(model, agent)
    end = assert_well_formed(events)
    assert isinstance(end, RunCompleted)
    assert end.usage.input_tokens == 110
    assert end.usage.output_tokens == 9


async def test_a_guardrail_beside_the_first_call_that_trips_cancels_it_and_shows_nothing(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async def slow_trip(ctx: CheckContext, text: str) -> GuardrailResult:
        await trio.sleep(5)
        return GuardrailResult.trip("no")

    agent = make_agent(forecast_tool(), input_guardrails=[Guardrail(slow_trip, beside=True)])
    model = TrackingModel(
        [Turn.tool_calls(("forecast", {"city": "Oslo"}), delay=1), Turn.text("Done.")]
    )
    events, log, probe = await _run(model, agent, *agent.toolkit)
    end = assert_well_formed(events)
    assert isinstance(end, RunFailed)
    assert isinstance(end.error, GuardrailTripped)
    assert len(model.requests) == 1  # the call started at once, beside the guardrail
    assert probe.calls == []
    assert not events_of(events, TextDelta)
    assert [e.seq for e in events] == list(range(1, len(events) + 1))  # gap-free
    kinds = {type(entry.record).__name__ for entry in log}
    assert "ModelResponseRecorded" not in kinds


async def test_a_guardrail_beside_the_first_call_that_passes_lets_its_events_through(
    autojump_clock: trio.testing.MockClock,
) -> None:
    agent = make_agent(input_guardrails=[Guardrail(_pass, beside=True)])
    model = TrackingModel([Turn.text("Hello there, all good.")])
    events, _, _ = await _run(model, agent)
    end = assert_well_formed(events)
    assert isinstance(end, RunCompleted)
    assert "".join(e.text for e in events_of(events, TextDelta)) == "Hello there, all good."
    assert [e.seq for e in events] == list(range(1, len(events) + 1))


@settings(deadline=None, max_examples=40)
@given(
    guard=st.integers(0, 6),
    model_delay=st.integers(0, 6),
    beside=st.booleans(),
    trips=st.booleans(),
)
def test_no_tool_call_starts_after_an_input_guardrail_trip(
    guard: int, model_delay: int, beside: bool, trips: bool
) -> None:
    """For any interleaving of guardrail and model latencies (MockClock), before or beside: a
    trip means no tool ran and the run failed with it; a pass means the tools ran."""

    async def check(ctx: CheckContext, text: str) -> GuardrailResult:
        await trio.sleep(guard)
        return GuardrailResult.trip("no") if trips else GuardrailResult.passed()

    agent = make_agent(forecast_tool(), input_guardrails=[Guardrail(check, beside=beside)])
    model = TrackingModel(
        [Turn.tool_calls(("forecast", {"city": "Oslo"}), delay=model_delay), Turn.text("ok")]
    )

    async def main() -> Any:
        events, _, probe = await _run(model, agent, *agent.toolkit)
        return assert_well_formed(events), probe

    end, probe = trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    if trips:
        assert isinstance(end, RunFailed)
        assert isinstance(end.error, GuardrailTripped)
        assert probe.calls == []
    else:
        assert isinstance(end, RunCompleted)
        assert len(probe.calls) == 1


async def test_cancelling_a_run_in_a_guardrail_interrupts_it(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async def forever(ctx: CheckContext, text: str) -> GuardrailResult:
        await trio.sleep_forever()
        raise AssertionError  # pragma: no cover

    agent = make_agent(input_guardrails=[forever])
    model = TrackingModel([Turn.text("hi")])
    async with open_runtime(model.layer(), agents=[agent]) as runtime:
        with trio.move_on_after(3):
            await runtime.run(agent, "hello")
        assert runtime.active_runs == 0
    assert model.requests == []


@pytest.mark.parametrize("beside", [False, True])
async def test_an_input_guardrail_without_a_verdict_when_time_runs_out_fails_closed(
    autojump_clock: trio.testing.MockClock, beside: bool
) -> None:
    """The run's time runs out before the input guardrails' verdict: no grace turn asks the model
    with an input that never got past them, and no answer is delivered."""
    from effectagent.core import BudgetExhausted

    async def forever(ctx: CheckContext, text: str) -> GuardrailResult:
        await trio.sleep_forever()
        raise AssertionError  # pragma: no cover

    agent = make_agent(
        policy=make_policy(max_duration=30.0),
        input_guardrails=[Guardrail(forever, beside=beside)],
    )
    model = TrackingModel([Turn.text("The answer.")] * 2)
    events, log, _ = await _run(model, agent)
    end = assert_well_formed(events)
    assert isinstance(end, RunFailed)
    assert isinstance(end.error, BudgetExhausted)
    assert end.error.dimension == "duration"
    assert len(model.requests) == (1 if beside else 0)  # never the grace turn's
    assert not events_of(events, TextDelta)
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    (record,) = records_of(log, RunFailedRecord)
    assert isinstance(record.error, BudgetExhausted)
    assert "ModelResponseRecorded" not in {type(entry.record).__name__ for entry in log}


async def test_input_guardrails_before_the_first_turn_may_take_the_runs_whole_time(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """No grace turn can follow input never let through, so checks before the first turn were
    cut at the turns' deadline (27 s of 30: "27.0 s used of 30.0 s"); now they have all 30 s, and
    one that passes after the turns' deadline leaves the answer to the grace turn."""
    from effectagent.core import BudgetExhausted

    async def forever(ctx: CheckContext, text: str) -> GuardrailResult:
        await trio.sleep_forever()
        raise AssertionError  # pragma: no cover

    async def slow(ctx: CheckContext, text: str) -> GuardrailResult:
        await trio.sleep(28.0)
        return GuardrailResult.passed()

    policy = make_policy(max_duration=30.0)
    assert policy.grace_reserve == 3.0
    started = trio.current_time()
    events, _, _ = await _run(
        TrackingModel([Turn.text("The answer.")]),
        make_agent(policy=policy, input_guardrails=[forever]),
    )
    end = assert_well_formed(events)
    assert isinstance(end, RunFailed)
    assert isinstance(end.error, BudgetExhausted)
    assert (end.error.used, end.error.limit) == (30.0, 30.0)
    assert trio.current_time() - started == 30.0
    model = TrackingModel([Turn.text("The answer.")])
    events, _, _ = await _run(model, make_agent(policy=policy, input_guardrails=[slow]))
    end = assert_well_formed(events)
    assert isinstance(end, RunCompleted)
    assert end.finish_reason == "budget-exhausted"
    assert len(model.requests) == 1


async def test_an_input_guardrail_that_passed_leaves_the_grace_turn_to_a_slow_model(
    autojump_clock: trio.testing.MockClock,
) -> None:
    agent = make_agent(
        policy=make_policy(max_duration=30.0),
        input_guardrails=[Guardrail(_pass, beside=True)],
    )
    model = TrackingModel([Turn.text("late", delay=100), Turn.text("The answer.")])
    events, _, _ = await _run(model, agent)
    end = assert_well_formed(events)
    assert isinstance(end, RunCompleted)
    assert end.finish_reason == "budget-exhausted"
    assert len(model.requests) == 2


async def test_a_resumed_run_with_no_turn_recorded_runs_its_input_guardrails_again(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The process died after the input was recorded, while the guardrail's trip was being
    written: the resumed run must not ask the model with an input no guardrail passed."""
    agent = make_agent(input_guardrails=[_trip])
    dying = DyingLog(appends=1)  # the input is written; the trip's record is not
    model = TrackingModel([Turn.text("Sure.")])
    layer = model.layer() + dying.layer()
    async with open_runtime(layer, agents=[agent]) as runtime:
        first = await runtime.run(agent, "Refund A-1", conversation_id="c", create=True, run_id="r")
    assert first.status == "failed"
    assert not isinstance(first.error, GuardrailTripped)  # the storage died first
    async with open_runtime(model.layer() + log_layer(dying.log), agents=[agent]) as runtime:
        resumed = await runtime.resume(agent, conversation_id="c", run_id="r")
    assert resumed.status == "failed"
    assert isinstance(resumed.error, GuardrailTripped)
    assert model.requests == []


async def test_a_rejection_message_holding_a_secret_is_redacted(
    autojump_clock: trio.testing.MockClock,
) -> None:
    agent = make_agent(output=Refund)

    @agent.output_validator
    async def leaky(refund: Refund, ctx: CheckContext) -> None:
        if refund.amount > 1:
            raise RejectOutput(f"the key {SECRET} says no")

    model = TrackingModel([Turn.text(_refund(5)), Turn.text(_refund(1))])
    events, log, _ = await _run(model, agent)
    assert isinstance(assert_well_formed(events), RunCompleted)
    feedback = [r.text for r in records_of(log, UserInputRecorded) if r.kind == "feedback"]
    assert feedback == [
        "Your final answer was not accepted: the key [REDACTED] says no\nAnswer again."
    ]
    assert SECRET not in repr(model.requests)
    assert SECRET not in repr(log)


async def test_cancelling_a_run_in_an_output_validator_delivers_no_answer(
    autojump_clock: trio.testing.MockClock,
) -> None:
    agent = make_agent(output=Refund)
    entered = trio.Event()

    @agent.output_validator
    async def slow(refund: Refund, ctx: CheckContext) -> None:
        entered.set()
        await trio.sleep_forever()

    model = TrackingModel([Turn.text(_refund(5))])
    async with open_runtime(model.layer(), agents=[agent]) as runtime:
        async with runtime.stream(agent, "Refund A-1") as events:
            seen = []
            async for event in events:
                seen.append(event)
                if entered.is_set():
                    break
            await entered.wait()
        log = await entries(runtime, events.conversation_id)
    kinds = {type(entry.record).__name__ for entry in log}
    assert "RunCompletedRecord" not in kinds
    assert "RunFailedRecord" in kinds  # the interruption
    assert not events_of(seen, RunCompleted)


async def test_a_guardrails_model_calls_count_in_the_token_budget(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A guardrail that spends the run's token budget leaves no turn: the budget is judged at
    the first turn, with the guardrail's usage in it."""
    from effectagent.ai import Usage
    from effectagent.core import BudgetExhausted

    async def costly(ctx: CheckContext, text: str) -> GuardrailResult:
        await ctx.generate(ModelRequest((UserMessage.text(text),)))
        return GuardrailResult.passed()

    model = TrackingModel([Turn.text("fine", usage=Usage.of(900, 200)), Turn.text("Hi.")])
    policy = make_policy(token_budget=1000, on_exhaustion="fail")
    agent = make_agent(input_guardrails=[costly], policy=policy)
    events, _, _ = await _run(model, agent)
    end = assert_well_formed(events)
    assert isinstance(end, RunFailed)
    assert isinstance(end.error, BudgetExhausted)
    assert end.error.dimension == "tokens"
    assert len(model.requests) == 1  # the guardrail's; no turn was asked


async def test_the_checks_model_calls_are_recorded_and_a_resumed_run_counts_them(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A guardrail's and a validator's model calls are recorded (``ModelUsageRecorded``, after
    the response they follow, as the budget counted them): a run whose process died after its
    tool call settled resumes with the guardrail's tokens in its usage, and its end counts every
    call once — what the records show, and what the resumed execution asked again."""
    from effectagent.ai import Usage
    from effectagent.core import ModelResponseRecorded, ModelUsageRecorded

    from .crash import copy_until

    async def judge(ctx: CheckContext, text: str) -> GuardrailResult:
        await ctx.generate(ModelRequest((UserMessage.text(f"Safe? {text}"),)))
        return GuardrailResult.passed()

    tool = forecast_tool()
    agent = make_agent(tool, input_guardrails=[judge])

    @agent.output_validator
    async def checked(text: str, ctx: CheckContext) -> None:
        await ctx.generate(ModelRequest((UserMessage.text(f"Right? {text}"),)))

    answer = [
        Turn.text("It is 21 °C.", usage=Usage.of(20, 3)),
        Turn.text("ok", usage=Usage.of(1000, 50)),
    ]
    model = TrackingModel(
        [
            Turn.text("yes", usage=Usage.of(100, 7)),  # the input guardrail's call
            Turn.tool_calls(("forecast", {"city": "Oslo"}), usage=Usage.of(10, 2)),
            *answer,
        ]
    )
    dying = DyingLog()
    probe = HandlerProbe()
    layer = agent.toolkit.handlers({tool: probe.forecast()}) + model.layer() + dying.layer()
    async with open_runtime(layer, agents=[agent]) as runtime:
        whole = await runtime.run(agent, "Oslo?", conversation_id="c", create=True, run_id="r")
    assert whole.status == "completed"
    assert (whole.usage.input_tokens, whole.usage.model_calls) == (1130, 4)
    records = [e.record for e in await dying.log.entries("c")]
    shown = [
        (type(r).__name__, getattr(r, "purpose", None), getattr(r, "turn", None))
        for r in records
        if isinstance(r, (ModelResponseRecorded, ModelUsageRecorded))
    ]
    assert shown == [
        ("ModelUsageRecorded", "check", 0),  # the guardrail's, before the first turn
        ("ModelResponseRecorded", None, 1),
        ("ModelResponseRecorded", None, 2),
        ("ModelUsageRecorded", "check", 2),  # the validator's, after the answer it checked
    ]
    (early, late) = [r for r in records if isinstance(r, ModelUsageRecorded)]
    assert (early.usage.input_tokens, late.usage.input_tokens) == (100, 1000)
    # The process died before the answer's append: resumed from everything written before it.
    cut = dying.boundaries[-2]
    log = await copy_until(dying.log, "c", cut)
    again = TrackingModel(list(answer))
    layer = agent.toolkit.handlers({tool: probe.forecast()}) + again.layer() + log_layer(log)
    async with open_runtime(layer, agents=[agent]) as runtime:
        resumed = await runtime.resume(agent, conversation_id="c", run_id="r")
    assert resumed.status == "completed"
    assert len(again.requests) == 2  # the answer and the validator's call, asked again
    assert (resumed.usage.input_tokens, resumed.usage.output_tokens) == (1130, 62)


def test_the_checks_failures_round_trip_the_storage_codec() -> None:
    """A run that a check ended is read back from SQLite with its typed failure."""
    from capabilities.storage._codec import RecordCodec

    codec = RecordCodec()
    for error in (
        GuardrailTripped("topic", "input", "off topic"),
        GuardrailFailed("pii", "output", "ValueError"),
        OutputValidatorFailed("positive", "KeyError"),
    ):
        record = RunFailedRecord(
            conversation_id="c", run_id="r", error=error, reason=error.tag, at=1.0
        )
        tag, version, body, *_ = codec.encode(record)
        back = codec.decode("c", 1, tag, version, body)
        assert isinstance(back, RunFailedRecord)
        assert type(back.error) is type(error)
        assert str(back.error) == str(error)


@pytest.mark.parametrize("beside", ["output", "input"])
async def test_a_checks_model_call_leaves_the_live_context_estimate_to_the_turns(
    autojump_clock: trio.testing.MockClock, beside: str
) -> None:
    """CAP-017: the live-context figures are the last turn's request; a guardrail's own call
    (``ctx.generate``) had a context of its own and replaced them (30 tokens, not 5,000)."""

    async def judge(ctx: CheckContext, _: object) -> GuardrailResult:
        await ctx.generate(ModelRequest((UserMessage.text("Polite?"),)))
        return GuardrailResult.passed()

    guard = Guardrail(judge, name="judge", beside=True) if beside == "input" else judge
    agent = Agent(
        "support",
        "Help.",
        input_guardrails=[guard] if beside == "input" else [],
        output_guardrails=[judge] if beside == "output" else [],
    )

    def respond(request: ModelRequest) -> Turn:
        asked = request.messages[-1].content[0]
        if getattr(asked, "text", None) == "Polite?":  # the guardrail's own call
            return Turn.text("yes", usage=Usage.of(30, 1))
        return Turn.text("answer", usage=Usage.of(5000, 50))

    async with open_runtime(FunctionModel.layer(respond), agents=[agent]) as runtime:
        result = await runtime.run(agent, "hi")
    assert result.status == "completed"
    usage = result.usage
    assert (usage.input_tokens, usage.model_calls) == (5030, 2)  # counted all the same
    assert (usage.last_input_tokens, usage.last_output_tokens) == (5000, 50)
