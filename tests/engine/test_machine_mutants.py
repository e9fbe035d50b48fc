"""The run's state machine on the paths the main tests pass by (pure, no Trio; ``make mutate``
runs these against ``effectagent/engine/_machine.py``): steering and follow-ups, a batch that
fails or is interrupted, warnings, the live-context figure, compaction in the grace turn, the
final answer's fences and problems, and what the machine logs and says when it is misused."""

from __future__ import annotations

from typing import Any

import attrs
import pytest

from effectagent.ai import ContextLengthExceeded, ModelUnavailable, Usage, UserMessage
from effectagent.core import (
    BudgetExhausted,
    ModelFailed,
    OutputInvalid,
    RepeatedToolFailure,
    RetryPolicy,
    SecretRedactor,
    ToolFailure,
    UsageDelta,
    UsageTotals,
)
from effectagent.engine._budget import Delegated, Exhaustion
from effectagent.engine._machine import (
    AnnounceRetry,
    AppendLater,
    BatchInterrupted,
    BatchSettled,
    Compact,
    Compacted,
    Complete,
    CompleteTurn,
    EnterGrace,
    Fail,
    FollowUps,
    GraceBegun,
    Log,
    ModelCallFailed,
    NextTurn,
    RecordFeedback,
    RecordInputs,
    RecordUsage,
    RequestModel,
    RunBatch,
    RunConfig,
    RunState,
    StartTurn,
    TakeFollowUps,
    TimeRanOut,
    TurnDue,
    _check_inputs_are_all_handled,
    start,
    step,
)
from effectagent.engine._seams import SteeringInput
from effectagent.testing import Turn

from .test_machine import SYSTEM, USER, Lookup, begin, config, kinds, model_step, responded, same

SECRET = "sk-canary-7f3a9"


def _steering(text: str, kind: Any = "steering") -> SteeringInput:
    return SteeringInput(input_id="in_1", kind=kind, text=text, author="ann", at=0.0)


def _secret_config(**policy: Any) -> RunConfig:
    return attrs.evolve(config(**policy), redactor=SecretRedactor([SECRET]))


def _batch(state: RunState, *cities: str) -> RunState:
    calls = [("forecast", {"city": c}) for c in cities]
    state, commands = step(state, responded(Turn.tool_calls(*calls)))
    assert isinstance(commands[-1], RunBatch)
    return state


# ---- steering and follow-ups ----------------------------------------------------------------


def test_steering_is_redacted_recorded_and_joins_the_prompt_before_the_turn() -> None:
    steering = (_steering(f"use {SECRET}"), _steering("and hurry"))
    state, commands = step(begin(_secret_config()), TurnDue(0.0, steering))
    texts = ("use [REDACTED]", "and hurry")
    assert commands == (RecordInputs(steering, texts), StartTurn(1, False), RequestModel(False))
    assert state.messages == (SYSTEM, USER, *(UserMessage.text(t) for t in texts))


def _follow_up_config() -> RunConfig:
    return attrs.evolve(_secret_config(), follow_ups=True)


def test_with_follow_ups_an_answer_waits_for_them_and_none_ends_the_run() -> None:
    state, _ = step(begin(_follow_up_config()), TurnDue(0.0))
    held = responded(Turn.text("Done."))
    state, commands = step(state, held)
    assert commands == (AppendLater(held.step.record), TakeFollowUps())
    assert (state.phase, state.held) == ("follow-ups", held.step)
    state, commands = step(state, FollowUps((), 1.0))
    assert kinds(commands) == ["CompleteTurn", "Complete"]
    assert state.phase == "ended"
    assert state.held is None


def test_a_follow_up_turns_the_answer_into_a_message_and_starts_another_turn() -> None:
    state, _ = step(begin(_follow_up_config()), TurnDue(0.0))
    held = responded(Turn.text("Done."))
    state, _ = step(state, held)
    inputs = (_steering(f"also {SECRET}", "follow-up"),)
    state, commands = step(state, FollowUps(inputs, 1.0))
    assert commands[0] == RecordInputs(inputs, ("also [REDACTED]",))
    assert kinds(commands) == ["RecordInputs", "CompleteTurn", "NextTurn"]
    assert (state.phase, state.held) == ("turn", None)
    assistant = held.step.assistant_message()
    assert state.messages == (SYSTEM, USER, assistant, UserMessage.text("also [REDACTED]"))
    state, commands = step(state, TurnDue(2.0))
    assert commands == (StartTurn(2, False), RequestModel(False))


def test_follow_ups_only_come_in_their_phase() -> None:
    state, _ = step(begin(_follow_up_config()), TurnDue(0.0))
    with pytest.raises(RuntimeError, match=r"^run state machine: an input for 'follow-ups' came"):
        step(state, FollowUps((), 1.0))


# ---- batches --------------------------------------------------------------------------------


def test_a_batch_that_fails_the_run_completes_its_turn_then_fails() -> None:
    state = _batch(step(begin(config()), TurnDue(0.0))[0], "Oslo")
    failure = RepeatedToolFailure("forecast", 3)
    state, commands = step(state, BatchSettled((), (), failure, Delegated(), 1.0))
    assert kinds(commands) == ["CompleteTurn", "Fail"]
    assert commands[-1] == Fail(failure)
    assert state.phase == "ended"


def test_a_batch_charges_what_its_children_used_and_warns_at_the_line() -> None:
    state = _batch(step(begin(config(max_tool_calls=10)), TurnDue(0.0))[0], "Oslo")
    delegated = Delegated(1, 1, 6, UsageTotals(output_tokens=5))
    state, commands = step(state, BatchSettled((), (), None, delegated, 1.0))
    assert (state.budget.tool_calls, state.budget.delegated_tool_calls) == (2, 6)
    assert state.budget.delegated_turns == 1
    completed = commands[0]
    assert isinstance(completed, CompleteTurn)
    assert completed.warnings == (Exhaustion("tool_calls", 8, 10),)
    assert completed.turn == 1
    assert state.budget.warned == {"tool_calls"}
    assert commands[-1] == NextTurn()


def test_an_interrupted_batch_still_joins_the_prompt_and_counts() -> None:
    state = _batch(step(begin(config()), TurnDue(0.0))[0], "Oslo")
    added = (UserMessage.text("interrupted"),)
    after, commands = step(state, BatchInterrupted(added, Delegated(2, 0, 0)))
    assert commands == ()
    assert after.messages == (*state.messages, *added)
    assert after.budget.tool_calls == state.budget.tool_calls + 2
    assert after.held is None
    assert step(state, BatchInterrupted((), Delegated()))[0].budget == state.budget


def test_repeated_failures_under_fail_name_the_tool() -> None:
    cfg = config(on_exhaustion="fail", repeated_failure_limit=1)
    state = _batch(step(begin(cfg), TurnDue(0.0))[0], "Oslo")
    outcome = ToolFailure("call_0", "forecast", None)
    state, _ = step(state, BatchSettled((outcome,), (), None, Delegated(), 1.0))
    state, commands = step(state, TurnDue(2.0))
    assert commands[0] == Log(
        "warning",
        "budget exhausted",
        (("dimension", "repeated_failures"), ("used", 1), ("limit", 1)),
    )
    failed = commands[-1]
    assert isinstance(failed, Fail)
    assert same(failed.error, RepeatedToolFailure("forecast", 1))
    assert state.phase == "ended"


def test_exhaustion_is_logged_with_its_figures() -> None:
    cfg = config(max_turns=1)
    state = _batch(step(begin(cfg), TurnDue(0.0))[0], "Oslo")
    state, _ = step(state, BatchSettled((), (), None, Delegated(), 1.0))
    state, commands = step(state, TurnDue(2.0))
    assert commands == (
        Log("warning", "budget exhausted", (("dimension", "turns"), ("used", 1), ("limit", 1))),
        EnterGrace(min(2.0 + cfg.policy.grace_turn_duration, cfg.policy.max_duration)),
    )
    assert (state.phase, state.grace, state.exhaustion) == (
        "grace",
        True,
        Exhaustion("turns", 1, 1),
    )


def test_the_time_running_out_before_any_count_is_a_duration_failure_under_fail() -> None:
    state, _ = step(begin(config(max_duration=10, on_exhaustion="fail")), TurnDue(0.0))
    state, commands = step(state, TimeRanOut(9.0))
    failed = commands[-1]
    assert isinstance(failed, Fail)
    assert same(failed.error, BudgetExhausted("duration", 9.0, 10))
    assert (state.phase, state.held) == ("ended", None)


# ---- model failures -------------------------------------------------------------------------


def test_a_model_failure_that_is_not_retried_is_logged_with_the_attempts() -> None:
    cfg = config(model_retry=RetryPolicy(attempts=2, initial_delay=1, jitter=0))
    state, _ = step(begin(cfg), TurnDue(0.0))
    state, _ = step(state, ModelCallFailed(ModelUnavailable("busy"), False, 0.0, 100.0, 0.0))
    state, commands = step(state, ModelCallFailed(ModelUnavailable("busy"), False, 1.0, 100.0, 0.0))
    assert commands[0] == Log(
        "warning",
        "model call failed",
        (("error", "ModelUnavailable"), ("message", "busy"), ("attempts", 2)),
    )
    assert same(commands[1].error, ModelFailed("ModelUnavailable", "busy"))  # type: ignore[union-attr]
    assert state.phase == "ended"


def test_a_compaction_after_a_refused_context_asks_again_in_the_grace_turn_too() -> None:
    cfg = config(compactor=True, max_turns=1)
    state = _batch(step(begin(cfg), TurnDue(0.0))[0], "Oslo")
    state, _ = step(state, BatchSettled((), (), None, Delegated(), 1.0))
    state, _ = step(state, TurnDue(2.0))
    state, commands = step(state, GraceBegun())
    assert commands == (StartTurn(2, True), RequestModel(True))
    refused = ModelCallFailed(ContextLengthExceeded("too long"), True, 3.0, 100.0, 0.0)
    state, commands = step(state, refused)
    assert commands == (Compact(2, None, force=True),)
    state, commands = step(state, Compacted((SYSTEM,)))
    assert commands == (
        AnnounceRetry(2, 1, "ContextLengthExceeded", "too long", 0.0, True),
        RequestModel(True),
    )
    assert (state.messages, state.held, state.context_base) == ((SYSTEM,), None, None)


# ---- the live context and compaction --------------------------------------------------------


def test_the_live_context_is_the_reported_input_plus_what_was_added_since() -> None:
    cfg = config(compactor=True, context_token_limit=1000)
    state, _ = step(begin(cfg), TurnDue(0.0))
    assert state.context_base == (2, 20)  # counted: 10 a message
    usage = Usage.of(500, 10)
    state, _ = step(state, responded(Turn.tool_calls(("forecast", {"city": "Oslo"}), usage=usage)))
    assert state.context_base == (2, 500)  # the provider's report for the 2 messages sent
    added = (UserMessage.text("a"), UserMessage.text("b"))
    state, _ = step(state, BatchSettled((), added, None, Delegated(), 1.0))
    state, commands = step(state, TurnDue(2.0))
    assert state.context_base == (4, 520)
    assert commands == (StartTurn(2, False), RequestModel(False))
    at_limit = attrs.evolve(state, phase="turn", context_base=(4, 1000))
    _, commands = step(at_limit, TurnDue(3.0))
    assert commands == (StartTurn(3, False), RequestModel(False))  # at the limit, not over
    over = attrs.evolve(state, phase="turn", context_base=(3, 995))
    _, commands = step(over, TurnDue(3.0))
    assert commands == (Compact(3, 1005),)


def test_a_response_without_an_input_report_keeps_the_counted_base() -> None:
    cfg = config(compactor=True, context_token_limit=1000)
    state, _ = step(begin(cfg), TurnDue(0.0))
    state, _ = step(state, responded(Turn.text("hi", usage=Usage.of(0, 3))))
    assert state.context_base == (2, 20)


def test_a_base_longer_than_the_prompt_is_counted_again() -> None:
    cfg = config(compactor=True, context_token_limit=15)
    state = attrs.evolve(begin(cfg), context_base=(9, 5))
    _, commands = step(state, TurnDue(0.0))
    assert commands == (Compact(1, 20),)


def test_the_grace_turn_compacts_when_over_the_limit_then_asks() -> None:
    cfg = config(compactor=True, context_token_limit=25, max_turns=1)
    state, _ = step(begin(cfg), TurnDue(0.0))
    state, _ = step(state, responded(Turn.tool_calls(("forecast", {"city": "Oslo"}))))
    state, _ = step(state, BatchSettled((), (UserMessage.text("r"),), None, Delegated(), 1.0))
    state, _ = step(state, TurnDue(2.0))
    state, commands = step(state, GraceBegun())
    assert commands == (Compact(2, 30),)
    assert (state.phase, state.context_base) == ("compacting", (3, 30))
    state, commands = step(state, Compacted((SYSTEM,)))
    assert commands == (StartTurn(2, True), RequestModel(True))
    assert (state.phase, state.turn, state.grace) == ("model", 2, True)


def test_the_grace_turn_under_the_limit_asks_at_once_and_keeps_the_count() -> None:
    cfg = config(compactor=True, context_token_limit=1000, max_turns=1)
    state, _ = step(begin(cfg), TurnDue(0.0))
    state, _ = step(state, responded(Turn.tool_calls(("forecast", {"city": "Oslo"}))))
    state, _ = step(state, BatchSettled((), (UserMessage.text("r"),), None, Delegated(), 1.0))
    state, _ = step(state, TurnDue(2.0))
    state, commands = step(state, GraceBegun())
    assert commands == (StartTurn(2, True), RequestModel(True))
    assert state.context_base == (3, 30)


def test_grace_begins_only_in_the_grace_phase() -> None:
    with pytest.raises(RuntimeError, match=r"^run state machine: an input for 'grace' came in"):
        step(begin(config()), GraceBegun())


# ---- the final answer -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        '```json\n{"city": "Oslo"}\n```',
        '```\n{"city": "Oslo"}\n```',
        '  ```{"city": "Oslo"}```  ',
        '{"city": "Oslo"}',
    ],
)
def test_an_answer_in_a_code_fence_decodes(text: str) -> None:
    state, _ = step(begin(config(Lookup)), TurnDue(0.0))
    _, commands = step(state, responded(Turn.text(text)))
    complete = commands[-1]
    assert isinstance(complete, Complete)
    assert complete.output == Lookup("Oslo")


@pytest.mark.parametrize("text", ["``````", '```js on\n{"city": "Oslo"}\n```', '```{"city": 1}'])
def test_what_is_not_one_fenced_answer_is_left_as_it_is(text: str) -> None:
    state, _ = step(begin(config(Lookup, output_retries=0)), TurnDue(0.0))
    _, commands = step(state, responded(Turn.text(text)))
    assert isinstance(commands[-1], Fail)


@attrs.frozen
class _Wide:
    a: int
    b: int
    c: int
    d: int
    e: int
    f: int
    g: int


def test_an_answer_missing_the_output_type_says_where_five_problems_at_most() -> None:
    state, _ = step(begin(config(_Wide, output_retries=0)), TurnDue(0.0))
    state, commands = step(state, responded(Turn.text("{}")))
    failed = commands[-1]
    assert isinstance(failed, Fail)
    assert isinstance(failed.error, OutputInvalid)
    message = str(failed.error)
    assert message.startswith("the final answer does not match the output type _Wide: ")
    assert message.endswith("; and 2 more")
    assert message.count(";") == 5
    assert "retr" not in message
    five, _ = step(begin(config(_Wide, output_retries=0)), TurnDue(0.0))
    _, commands = step(five, responded(Turn.text('{"a": 1, "b": 2}')))
    assert "more" not in str(commands[-1].error)  # type: ignore[union-attr]


def test_after_two_retries_the_failure_says_so() -> None:
    state, _ = step(begin(config(Lookup, output_retries=2)), TurnDue(0.0))
    for now in (1.0, 2.0):
        state, commands = step(state, responded(Turn.text("{}")))
        assert kinds(commands)[-1] == "NextTurn"
        state, _ = step(state, TurnDue(now))
    _, commands = step(state, responded(Turn.text("{}")))
    assert "does not match the output type Lookup after 2 retries: " in str(
        commands[-1].error  # type: ignore[union-attr]
    )


def test_a_grace_answer_that_misses_the_output_type_fails_the_run() -> None:
    cfg = config(Lookup, max_turns=1)
    state = _batch(step(begin(cfg), TurnDue(0.0))[0], "Oslo")
    state, _ = step(state, BatchSettled((), (), None, Delegated(), 1.0))
    state, _ = step(*step(state, TurnDue(2.0))[:1], GraceBegun())
    final = responded(Turn.text("nope"))
    _, commands = step(state, final)
    assert kinds(commands) == ["AppendLater", "CompleteTurn", "Fail"]
    assert isinstance(commands[-1], Fail)
    assert isinstance(commands[-1].error, OutputInvalid)
    _, commands = step(state, responded(Turn.text('{"city": "Oslo"}')))
    complete = commands[-1]
    assert isinstance(complete, Complete)
    assert (complete.output, complete.finish, complete.exhausted) == (
        Lookup("Oslo"),
        "budget-exhausted",
        "turns",
    )


def test_a_secret_in_the_answer_does_not_reach_the_output() -> None:
    cfg = attrs.evolve(config(Lookup), redactor=SecretRedactor([SECRET]))
    state, _ = step(begin(cfg), TurnDue(0.0))
    _, commands = step(state, responded(Turn.text(f'{{"city": "{SECRET}"}}')))
    complete = commands[-1]
    assert isinstance(complete, Complete)
    assert complete.output == Lookup("[REDACTED]")


# ---- misuse ---------------------------------------------------------------------------------


def test_an_input_class_without_a_transition_is_refused_by_name() -> None:
    with pytest.raises(TypeError, match=r"^the run state machine has no transition for TurnDue, "):
        _check_inputs_are_all_handled({})


def test_a_model_step_carries_its_usage_into_the_budget() -> None:
    state, _ = step(begin(config()), TurnDue(0.0))
    state, _ = step(state, responded(Turn.text("hi", usage=Usage.of(7, 3))))
    assert state.budget.usage.total_tokens == 10
    assert model_step(Turn.text("x")).response.text == "x"


# ---- more of compaction, the live context and running out of time ---------------------------


def test_nothing_compacted_before_a_turn_keeps_the_counted_base_and_meters_the_summary() -> None:
    cfg = config(compactor=True, context_token_limit=15)
    state, commands = step(begin(cfg), TurnDue(0.0))
    assert commands == (Compact(1, 20),)
    assert state.context_base == (2, 20)
    state, commands = step(state, Compacted(None, (UsageDelta(4, 2),)))
    summary = RecordUsage(0, "compaction", ((UsageDelta(4, 2), None),))
    assert commands == (summary, StartTurn(1, False), RequestModel(False))
    assert state.context_base == (2, 20)
    assert state.budget.usage.total_tokens == 6


def test_nothing_compacted_after_a_refused_context_keeps_the_base_and_the_failure_stands() -> None:
    cfg = config(compactor=True)
    state, _ = step(begin(cfg), TurnDue(0.0))
    state = attrs.evolve(state, context_base=(2, 77))
    refused = ModelCallFailed(ContextLengthExceeded("too long"), False, 0.0, 100.0, 0.0)
    state, _ = step(state, refused)
    state, commands = step(state, Compacted(None, (UsageDelta(4, 2),)))
    assert kinds(commands) == ["RecordUsage", "Log", "Fail"]
    assert (state.context_base, state.held) == ((2, 77), None)
    assert state.budget.usage.total_tokens == 6
    again, _ = step(begin(cfg), TurnDue(0.0))
    again, _ = step(again, refused)
    _, commands = step(again, Compacted((SYSTEM,)))
    assert commands[-1] == RequestModel(False)  # not the grace turn's request


def test_a_compaction_comes_in_its_phases_only() -> None:
    with pytest.raises(
        RuntimeError, match=r"^run state machine: an input for 'model' came in 'turn'$"
    ):
        step(begin(config()), Compacted(None))


def test_a_counter_that_counts_an_empty_prompt_is_not_asked_about_nothing() -> None:
    cfg = attrs.evolve(
        config(compactor=True, context_token_limit=1000),
        count_tokens=lambda messages: 10 * len(messages) + 1,  # one token of its own
    )
    state = attrs.evolve(begin(cfg), context_base=(2, 1000))
    _, commands = step(state, TurnDue(0.0))
    assert commands == (StartTurn(1, False), RequestModel(False))  # 1000: at the limit
    over = attrs.evolve(begin(cfg), context_base=(2, 1001))
    assert step(over, TurnDue(0.0))[1] == (Compact(1, 1001),)


def test_the_grace_turns_deadline_ends_the_run() -> None:
    state = _batch(step(begin(config(max_turns=1)), TurnDue(0.0))[0], "Oslo")
    state, _ = step(state, BatchSettled((), (), None, Delegated(), 1.0))
    state, _ = step(*step(state, TurnDue(2.0))[:1], GraceBegun())
    state, commands = step(state, TimeRanOut(40.0))
    assert state.phase == "ended"
    assert same(commands[0].error, BudgetExhausted("turns", 1, 1))  # type: ignore[union-attr]


def test_time_running_out_names_a_count_that_ran_out_first() -> None:
    state = _batch(step(begin(config(max_turns=1, on_exhaustion="fail")), TurnDue(0.0))[0], "Oslo")
    state, _ = step(state, BatchSettled((), (), None, Delegated(), 1.0))
    _, commands = step(state, TimeRanOut(50.0))
    assert same(commands[-1].error, BudgetExhausted("turns", 1, 1))  # type: ignore[union-attr]


def test_the_time_used_is_counted_from_the_runs_start() -> None:
    cfg = config(max_duration=10, on_exhaustion="fail")
    state, _ = step(start(cfg, (SYSTEM, USER), 5.0), TurnDue(5.0))
    _, commands = step(state, TimeRanOut(14.0))
    assert same(commands[-1].error, BudgetExhausted("duration", 9.0, 10))  # type: ignore[union-attr]


def test_an_output_type_without_a_name_is_named_by_its_repr() -> None:
    state, _ = step(begin(config(int | None, output_retries=0)), TurnDue(0.0))
    _, commands = step(state, responded(Turn.text("nope")))
    message = str(commands[-1].error)  # type: ignore[union-attr]
    assert message.startswith("the final answer does not match the output type int | None: ")


def test_six_problems_show_five_and_say_one_more() -> None:
    state, _ = step(begin(config(_Wide, output_retries=0)), TurnDue(0.0))
    _, commands = step(state, responded(Turn.text('{"a": 1}')))
    missing = "; ".join(f"$.{name}: missing required field" for name in "bcdef")
    assert str(commands[-1].error) == (  # type: ignore[union-attr]
        f"the final answer does not match the output type _Wide: {missing}; and 1 more"
    )


@pytest.mark.parametrize(
    ("text", "output"),
    [("```1```", 1), ('```j\n"x"\n```', "x"), ("```12345", None), ("12345```", None)],
)
def test_only_a_fence_at_both_ends_is_taken_off(text: str, output: Any) -> None:
    answer_type = int if output is None or isinstance(output, int) else str
    state, _ = step(begin(config(answer_type, output_retries=0)), TurnDue(0.0))
    _, commands = step(state, responded(Turn.text(text)))
    if output is None:
        assert isinstance(commands[-1], Fail)
    else:
        complete = commands[-1]
        assert isinstance(complete, Complete)
        assert complete.output == output


def test_a_model_failure_comes_in_the_model_phase_only() -> None:
    failed = ModelCallFailed(ModelUnavailable("busy"), False, 0.0, 100.0, 0.0)
    with pytest.raises(
        RuntimeError, match=r"^run state machine: an input for 'model' came in 'turn'$"
    ):
        step(begin(config()), failed)


def test_the_retry_delay_takes_the_jitter_the_failure_came_with() -> None:
    cfg = config(model_retry=RetryPolicy(attempts=3, initial_delay=2, jitter=0.5))
    state, _ = step(begin(cfg), TurnDue(0.0))
    _, commands = step(state, ModelCallFailed(ModelUnavailable("busy"), False, 0.0, 100.0, 0.5))
    assert commands[-1] == RequestModel(False, 1.5)  # 2 x (1 - 0.5 x 0.5)


def _at_grace(cfg: RunConfig) -> RunState:
    state, _ = step(begin(cfg), TurnDue(0.0))
    state, _ = step(state, responded(Turn.tool_calls(("forecast", {"city": "Oslo"}))))
    state, _ = step(state, BatchSettled((), (UserMessage.text("r"),), None, Delegated(), 1.0))
    state, _ = step(state, TurnDue(2.0))
    assert state.phase == "grace"
    return state


def test_the_grace_turn_measures_from_the_reported_base_and_keeps_it() -> None:
    state = attrs.evolve(
        _at_grace(config(compactor=True, context_token_limit=100, max_turns=1)),
        context_base=(3, 500),
    )
    state, commands = step(state, GraceBegun())
    assert commands == (Compact(2, 500),)
    assert (state.phase, state.context_base) == ("compacting", (3, 500))


def test_the_grace_turn_at_the_limit_or_without_a_compactor_asks_at_once() -> None:
    at_limit = _at_grace(config(compactor=True, context_token_limit=30, max_turns=1))
    assert step(at_limit, GraceBegun())[1] == (StartTurn(2, True), RequestModel(True))
    no_compactor = _at_grace(config(compactor=False, context_token_limit=25, max_turns=1))
    assert step(no_compactor, GraceBegun())[1] == (StartTurn(2, True), RequestModel(True))


def test_feedback_on_an_answer_that_misses_the_output_type_is_exact() -> None:
    state, _ = step(begin(config(Lookup, output_retries=1)), TurnDue(0.0))
    answer = responded(Turn.text('{"town": "Oslo"}'))
    state, commands = step(state, answer)
    text = (
        "Your final answer must be JSON that matches the required output schema, and it is not: "
        "$.city: missing required field; $.town: unexpected field (allowed fields: city)\n"
        "Answer again with only that JSON."
    )
    assert commands[1:] == (
        RecordFeedback(text),
        CompleteTurn(1, "stop", state.budget.usage),
        NextTurn(),
    )
    assistant = answer.step.assistant_message()
    assert assistant is not None
    assert state.messages == (SYSTEM, USER, assistant, UserMessage.text(text))


def test_a_final_answer_completes_with_its_response_and_ends() -> None:
    state, _ = step(begin(config(Lookup)), TurnDue(0.0))
    answer = responded(Turn.text('{"city": "Oslo"}'))
    state, commands = step(state, answer)
    assert commands[-1] == Complete(answer.step.response, Lookup("Oslo"), "stop", None)
    assert state.phase == "ended"
    failing, _ = step(begin(config(Lookup, output_retries=0)), TurnDue(0.0))
    failing, _ = step(failing, responded(Turn.text("{}")))
    assert failing.phase == "ended"


def test_a_settled_batch_keeps_the_turns_state_and_clears_what_it_held() -> None:
    state = _batch(step(begin(config()), TurnDue(0.0))[0], "Oslo")
    state = attrs.evolve(
        state, output_retries=1, attempt=3, refused_compacted=True, context_base=(2, 77)
    )
    added = (UserMessage.text("result"),)
    after, _ = step(state, BatchSettled((), added, None, Delegated(), 1.0))
    assert after.messages == (*state.messages, *added)
    assert (after.phase, after.turn, after.grace, after.held, after.exhaustion) == (
        "turn",
        1,
        False,
        None,
        None,
    )
    assert after.grace is False
    assert (after.output_retries, after.attempt, after.refused_compacted, after.context_base) == (
        1,
        3,
        True,
        (2, 77),
    )


def test_a_batch_settles_in_its_phase_only() -> None:
    with pytest.raises(
        RuntimeError, match=r"^run state machine: an input for 'batch' came in 'turn'$"
    ):
        step(begin(config()), BatchSettled((), (), None, Delegated(), 1.0))


def test_the_grace_request_starts_its_attempts_afresh() -> None:
    state = attrs.evolve(_at_grace(config(max_turns=1)), attempt=3, refused_compacted=True, turn=1)
    state, commands = step(state, GraceBegun())
    assert commands == (StartTurn(2, True), RequestModel(True))
    assert (state.phase, state.turn, state.attempt, state.refused_compacted) == (
        "model",
        2,
        1,
        False,
    )
    assert state.refused_compacted is False


def test_a_count_that_ran_out_is_named_even_with_a_failure_streak_on_record() -> None:
    cfg = config(max_turns=1, on_exhaustion="fail", repeated_failure_limit=1)
    state = _batch(step(begin(cfg), TurnDue(0.0))[0], "Oslo")
    outcome = ToolFailure("call_0", "forecast", None)
    state, commands = step(state, BatchSettled((outcome,), (), None, Delegated(), 1.0))
    completed = commands[0]
    assert isinstance(completed, CompleteTurn)
    assert completed.finish_reason == "tool-calls"
    assert state.budget.repeated_failure is not None
    _, commands = step(state, TurnDue(2.0))
    assert same(commands[-1].error, BudgetExhausted("turns", 1, 1))  # type: ignore[union-attr]


def test_with_follow_ups_an_answer_that_misses_the_output_type_still_gets_feedback() -> None:
    cfg = attrs.evolve(config(Lookup, output_retries=1), follow_ups=True)
    state, _ = step(begin(cfg), TurnDue(0.0))
    state, _ = step(state, responded(Turn.text("{}")))
    state, commands = step(state, FollowUps((), 1.0))
    assert kinds(commands) == ["RecordFeedback", "CompleteTurn", "NextTurn"]
    completed = commands[1]
    assert isinstance(completed, CompleteTurn)
    assert completed.finish_reason == "stop"
    state, _ = step(state, TurnDue(2.0))
    assert state.turn == 2


def test_a_follow_up_completes_the_turn_with_its_finish_reason() -> None:
    state, _ = step(begin(_follow_up_config()), TurnDue(0.0))
    state, _ = step(state, responded(Turn.text("Done.")))
    _, commands = step(state, FollowUps((_steering("more", "follow-up"),), 1.0))
    completed = commands[1]
    assert isinstance(completed, CompleteTurn)
    assert (completed.turn, completed.finish_reason) == (1, "stop")


@pytest.mark.parametrize("on_exhaustion", ["fail", "final-answer"])
def test_time_running_out_while_follow_ups_are_awaited_drops_the_held_answer(
    on_exhaustion: str,
) -> None:
    cfg = attrs.evolve(config(on_exhaustion=on_exhaustion), follow_ups=True)
    state, _ = step(begin(cfg), TurnDue(0.0))
    state, _ = step(state, responded(Turn.text("Done.")))
    assert state.held is not None
    state, _ = step(state, TimeRanOut(100.0))
    assert state.held is None
    assert state.phase == ("ended" if on_exhaustion == "fail" else "grace")


def test_the_grace_answer_is_metered_completed_and_ends_the_run() -> None:
    cfg = config(Lookup, compactor=True, context_token_limit=1000, max_turns=1)
    state = _at_grace(cfg)
    state, _ = step(state, GraceBegun())
    final = responded(Turn.text('{"city": "Oslo"}', usage=Usage.of(300, 5)), size=3)
    after, commands = step(state, final)
    assert (after.phase, after.context_base) == ("ended", (3, 300))
    assert after.budget.usage.total_tokens == state.budget.usage.total_tokens + 305
    assert commands == (
        AppendLater(final.step.record),
        CompleteTurn(2, "stop", after.budget.usage),
        Complete(final.step.response, Lookup("Oslo"), "budget-exhausted", "turns"),
    )
    _, commands = step(state, responded(Turn.text("nope")))
    assert str(commands[-1].error).startswith(  # type: ignore[union-attr]
        "the final answer does not match the output type Lookup: $: invalid JSON"
    )


def test_a_response_comes_in_the_model_phase_only() -> None:
    with pytest.raises(
        RuntimeError, match=r"^run state machine: an input for 'model' came in 'turn'$"
    ):
        step(begin(config()), responded(Turn.text("early")))


def test_a_batch_of_exactly_the_calls_left_is_admitted_and_keeps_the_turns_state() -> None:
    state, _ = step(begin(config(max_tool_calls=2)), TurnDue(0.0))
    state = attrs.evolve(state, output_retries=1, attempt=2, refused_compacted=True)
    calls = [("forecast", {"city": c}) for c in ("Oslo", "Rome")]
    state, commands = step(state, responded(Turn.tool_calls(*calls)))
    batch = commands[-1]
    assert isinstance(batch, RunBatch)
    assert batch.admitted
    assert state.budget.tool_calls == 2
    assert (state.grace, state.output_retries, state.attempt, state.refused_compacted) == (
        False,
        1,
        2,
        True,
    )
    assert state.grace is False
    assert state.context_base is None  # no compactor: nothing measured


def test_the_plan_of_a_batch_redacts_what_it_says_about_invalid_input() -> None:
    state, _ = step(begin(_secret_config()), TurnDue(0.0))
    _, commands = step(state, responded(Turn.tool_calls(("forecast", {"city": 1, SECRET: 2}))))
    batch = commands[-1]
    assert isinstance(batch, RunBatch)
    assert SECRET not in repr(batch.plan)


def test_a_new_turn_starts_its_attempts_afresh() -> None:
    state, _ = step(begin(config(Lookup, output_retries=1)), TurnDue(0.0))
    state, _ = step(state, responded(Turn.text("{}")))  # feedback: another turn is due
    state = attrs.evolve(state, attempt=3, refused_compacted=True)
    state, commands = step(state, TurnDue(1.0))
    assert commands == (StartTurn(2, False), RequestModel(False))
    assert (state.phase, state.turn, state.attempt, state.refused_compacted) == (
        "model",
        2,
        1,
        False,
    )
    assert state.refused_compacted is False


def test_feedback_keeps_the_turns_state_and_holds_nothing() -> None:
    state, _ = step(begin(config(Lookup, output_retries=1)), TurnDue(0.0))
    state = attrs.evolve(state, attempt=2, refused_compacted=True, context_base=(2, 77))
    after, _ = step(state, responded(Turn.text("{}")))
    assert (after.phase, after.turn, after.held, after.grace) == ("turn", 1, None, False)
    assert after.grace is False
    assert (after.attempt, after.refused_compacted, after.context_base) == (2, True, (2, 77))


def test_with_follow_ups_the_held_answer_keeps_the_turns_state() -> None:
    state, _ = step(begin(_follow_up_config()), TurnDue(0.0))
    state = attrs.evolve(state, attempt=2, refused_compacted=True, context_base=(2, 77))
    after, _ = step(state, responded(Turn.text("Done.")))
    assert (after.turn, after.grace, after.attempt, after.refused_compacted) == (1, False, 2, True)
    assert after.grace is False
    assert after.context_base == (2, 77)


def test_a_batch_carries_the_assistant_message_of_its_response() -> None:
    state, _ = step(begin(config()), TurnDue(0.0))
    answer = responded(Turn.tool_calls(("forecast", {"city": "Oslo"})))
    _, commands = step(state, answer)
    batch = commands[-1]
    assert isinstance(batch, RunBatch)
    assert batch.assistant is not None
    assert batch.assistant == answer.step.assistant_message()


def test_a_turn_is_due_in_the_turn_phase_only() -> None:
    state, _ = step(begin(config()), TurnDue(0.0))
    with pytest.raises(
        RuntimeError, match=r"^run state machine: an input for 'turn' came in 'model'$"
    ):
        step(state, TurnDue(1.0))


def test_a_new_prompt_after_a_refused_context_drops_the_old_base() -> None:
    state, _ = step(begin(config(compactor=True)), TurnDue(0.0))
    state = attrs.evolve(state, context_base=(2, 77))
    refused = ModelCallFailed(ContextLengthExceeded("too long"), False, 0.0, 100.0, 0.0)
    state, _ = step(state, refused)
    state, _ = step(state, Compacted((SYSTEM,)))
    assert state.context_base is None  # a new prompt: no report covers it yet
