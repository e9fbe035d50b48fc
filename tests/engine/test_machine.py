"""The run's state machine (``engine._machine``) as plain functions: inputs in, commands out —
no Trio, no I/O, no clock. Grace turns, output retries, exhaustion, compaction and retries are
decided here; the interpreter only performs what comes out."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from effectagent.ai import (
    AuthenticationFailed,
    ContextLengthExceeded,
    Message,
    ModelUnavailable,
    ResponseReducer,
    SystemMessage,
    Tool,
    Toolkit,
    UserMessage,
)
from effectagent.core import (
    AgentPolicy,
    BudgetExhausted,
    FinalTurnDeclaredTools,
    ModelFailed,
    ModelResponseRecorded,
    OutputInvalid,
    RetryPolicy,
    SecretRedactor,
    ToolSuccess,
    UsageDelta,
)
from effectagent.engine._budget import Delegated, Exhaustion
from effectagent.engine._machine import (
    AnnounceRetry,
    Answered,
    BatchSettled,
    Command,
    Compact,
    Compacted,
    Complete,
    CompleteTurn,
    EnterGrace,
    Fail,
    GraceBegun,
    Input,
    ModelCallFailed,
    ModelResponded,
    NextTurn,
    RecordFeedback,
    RecordInputs,
    RecordUsage,
    RequestModel,
    RunBatch,
    RunConfig,
    RunState,
    StartTurn,
    TimeRanOut,
    TurnDue,
    WarnBudget,
    start,
    step,
)
from effectagent.engine._model_step import ModelStep, _record_content
from effectagent.engine._seams import SteeringInput
from effectagent.testing import Turn

SYSTEM = SystemMessage("Answer.")
USER = UserMessage.text("hi")


@attrs.frozen
class Lookup:
    city: str


FORECAST: Tool[Lookup, str] = Tool("forecast", "F.", parameters=Lookup, success=str, readonly=True)
TOOLKIT = Toolkit(FORECAST)


def same(error: Any, expected: Any) -> bool:
    """Errors are exceptions: equal when of one type with equal fields."""
    return type(error) is type(expected) and attrs.astuple(error) == attrs.astuple(expected)


def config(output: Any = None, *, compactor: bool = False, **policy: Any) -> RunConfig:
    fields: dict[str, Any] = {"max_turns": 4, "max_tool_calls": 8, "max_duration": 100}
    fields.update(policy)
    return RunConfig(
        policy=AgentPolicy(**fields),
        output=output,
        compactor=compactor,
        follow_ups=False,
        redactor=SecretRedactor(()),
        count_tokens=lambda messages: 10 * len(messages),
    )


def model_step(turn: Turn) -> ModelStep:
    reducer = ResponseReducer()
    for part in turn.parts:
        reducer.feed(part)
    response = reducer.finish()
    content, arguments = _record_content(response, None, 1 << 20)
    usage = UsageDelta.from_usage(response.usage)
    record = ModelResponseRecorded(
        conversation_id="c",
        run_id="r",
        turn=1,
        content=content,
        finish_reason=response.finish_reason,
        usage=usage,
        at=0.0,
    )
    return ModelStep(response, record, arguments, False)


def responded(turn: Turn, size: int = 2, now: float = 0.0) -> ModelResponded:
    return ModelResponded(model_step(turn), size, TOOLKIT, now)


def begin(cfg: RunConfig) -> RunState:
    return start(cfg, (SYSTEM, USER), 0.0)


def kinds(commands: Sequence[Command]) -> list[str]:
    return [type(command).__name__ for command in commands]


def test_a_turn_asks_the_model_and_a_plain_answer_completes_the_run() -> None:
    state, commands = step(begin(config()), TurnDue(0.0))
    assert commands == (StartTurn(1, False), RequestModel(False))
    assert (state.phase, state.turn, state.budget.turns) == ("model", 1, 1)
    state, commands = step(state, responded(Turn.text("Hello.")))
    assert kinds(commands) == ["AppendLater", "CompleteTurn", "Complete"]  # the turn ends first
    completed = commands[1]
    assert isinstance(completed, CompleteTurn)
    assert (completed.turn, completed.finish_reason, completed.warnings) == (1, "stop", ())
    complete = commands[-1]
    assert isinstance(complete, Complete)
    assert (complete.finish, complete.exhausted, complete.output) == ("stop", None, None)
    assert state.phase == "ended"


def test_an_answer_that_misses_the_output_type_goes_back_then_fails_after_the_retries() -> None:
    state, _ = step(begin(config(Lookup, output_retries=1)), TurnDue(0.0))
    state, commands = step(state, responded(Turn.text('{"town": "Oslo"}')))
    assert kinds(commands) == ["AppendLater", "RecordFeedback", "CompleteTurn", "NextTurn"]
    feedback = commands[1]
    assert isinstance(feedback, RecordFeedback)
    assert "$.city" in feedback.text
    assert state.messages[-1] == UserMessage.text(feedback.text)
    assert state.output_retries == 1
    state, _ = step(state, TurnDue(1.0))
    state, commands = step(state, responded(Turn.text('{"town": "Rome"}')))
    failed = commands[-1]
    assert isinstance(failed, Fail)
    assert isinstance(failed.error, OutputInvalid)
    assert "after 1 retry" in str(failed.error)


def test_a_count_used_up_means_the_grace_turn_with_tools_off_or_a_failure() -> None:
    cfg = config(max_turns=1)
    state, _ = step(begin(cfg), TurnDue(0.0))
    state, commands = step(state, responded(Turn.tool_calls(("forecast", {"city": "Oslo"}))))
    assert kinds(commands) == ["AppendLater", "RunBatch"]
    batch = commands[1]
    assert isinstance(batch, RunBatch)
    assert batch.admitted
    # While the calls run, the state keeps what the turn's end needs, not the response.
    assert state.held == Answered("tool-calls", None)
    state, commands = step(state, BatchSettled((), (), None, Delegated(), 1.0))
    assert kinds(commands)[-1] == "NextTurn"
    state, commands = step(state, TurnDue(2.0))
    assert kinds(commands) == ["Log", "EnterGrace"]
    # The run started at 0.0: it must have ended by max_duration.
    assert commands[-1] == EnterGrace(min(2.0 + cfg.policy.grace_turn_duration, 100.0))
    state, commands = step(state, GraceBegun())
    assert commands == (StartTurn(2, True), RequestModel(True))
    state, commands = step(state, responded(Turn.text("Enough.")))
    assert kinds(commands) == ["AppendLater", "CompleteTurn", "Complete"]
    complete = commands[-1]
    assert isinstance(complete, Complete)
    assert (complete.finish, complete.exhausted) == ("budget-exhausted", "turns")
    # Under "fail", the same exhaustion fails the run at once, naming the dimension.
    state, _ = step(begin(config(max_turns=1, on_exhaustion="fail")), TurnDue(0.0))
    state, _ = step(state, responded(Turn.tool_calls(("forecast", {"city": "Oslo"}))))
    state, _ = step(state, BatchSettled((), (), None, Delegated(), 1.0))
    state, commands = step(state, TurnDue(2.0))
    failed = commands[-1]
    assert isinstance(failed, Fail)
    assert same(failed.error, BudgetExhausted("turns", 1, 1))


def test_input_taken_as_the_grace_turn_begins_is_recorded_and_joins_its_prompt() -> None:
    """The run's deadline passed during a batch: no turn boundary drained the inbox, so what it
    holds comes with ``GraceBegun`` and is canonical (recorded first) before the grace request."""
    state, _ = step(begin(config(max_duration=10)), TurnDue(0.0))
    state, commands = step(state, TimeRanOut(9.0))
    assert kinds(commands)[-1] == "EnterGrace"
    inputs = (
        SteeringInput("in_1", "steering", "use Celsius", "ann", 8.0),
        SteeringInput("in_2", "follow-up", "and the wind", "ann", 8.5),
    )
    state, commands = step(state, GraceBegun(inputs))
    assert kinds(commands) == ["RecordInputs", "StartTurn", "RequestModel"]
    record = commands[0]
    assert isinstance(record, RecordInputs)
    assert record.inputs == inputs
    assert state.messages[-2:] == (
        UserMessage.text("use Celsius"),
        UserMessage.text("and the wind"),
    )
    assert commands[-1] == RequestModel(True)


def test_a_grace_turn_that_asks_for_tools_fails_closed_and_one_out_of_time_fails() -> None:
    state, _ = step(begin(config(max_turns=1)), TurnDue(0.0))
    state, _ = step(state, responded(Turn.tool_calls(("forecast", {"city": "Oslo"}))))
    state, _ = step(state, BatchSettled((), (), None, Delegated(), 1.0))
    grace, _ = step(*step(state, TurnDue(2.0))[:1], GraceBegun())
    _, commands = step(grace, responded(Turn.tool_calls(("forecast", {"city": "Rome"}))))
    failed = commands[-1]
    assert isinstance(failed, Fail)
    assert same(failed.error, FinalTurnDeclaredTools(("forecast",)))
    _, commands = step(grace, TimeRanOut(40.0))
    (failed,) = commands
    assert isinstance(failed, Fail)
    assert same(failed.error, BudgetExhausted("turns", 1, 1))


def test_the_turns_deadline_is_a_duration_exhaustion() -> None:
    state, _ = step(begin(config(max_duration=10)), TurnDue(0.0))  # started at 0.0
    _, commands = step(state, TimeRanOut(9.0))  # the grace reserve: 1 s of 10
    # 9 s is past the warning ratio (80 %): it warns before the exhaustion, since no turn ended
    # since it passed to say so.
    assert kinds(commands) == ["WarnBudget", "Log", "EnterGrace"]
    assert commands[0] == WarnBudget((Exhaustion("duration", 9.0, 10),))
    assert commands[-1] == EnterGrace(10.0)  # never past the run's end


def test_a_duration_warned_at_a_turns_end_does_not_warn_again_at_its_exhaustion() -> None:
    state, _ = step(begin(config(max_duration=10)), TurnDue(0.0))
    state, _ = step(state, responded(Turn.tool_calls(("forecast", {"city": "Oslo"}))))
    state, commands = step(state, BatchSettled((), (), None, Delegated(), 8.5))
    (ended,) = [c for c in commands if isinstance(c, CompleteTurn)]
    assert [w.dimension for w in ended.warnings] == ["duration"]
    _, commands = step(state, TimeRanOut(9.0))
    assert kinds(commands) == ["Log", "EnterGrace"]


def test_a_run_failing_on_its_time_warns_before_it_fails() -> None:
    state, _ = step(begin(config(max_duration=10, on_exhaustion="fail")), TurnDue(0.0))
    _, commands = step(state, TimeRanOut(10.0))
    assert kinds(commands) == ["WarnBudget", "Log", "Fail"]
    assert commands[0] == WarnBudget((Exhaustion("duration", 10.0, 10),))


def test_a_batch_past_the_tool_call_budget_is_refused_whole_and_exhausts_it() -> None:
    state, _ = step(begin(config(max_tool_calls=2)), TurnDue(0.0))
    calls = [("forecast", {"city": c}) for c in ("Oslo", "Rome", "Lima")]
    state, commands = step(state, responded(Turn.tool_calls(*calls)))
    batch = commands[-1]
    assert isinstance(batch, RunBatch)
    assert not batch.admitted
    assert state.budget.tool_calls == 0
    state, _ = step(state, BatchSettled((), (), None, Delegated(), 1.0))
    _, commands = step(state, TurnDue(1.0))
    assert kinds(commands) == ["Log", "EnterGrace"]
    exhausted = state.budget.exhausted(1.0)
    assert exhausted is not None
    assert (exhausted.dimension, exhausted.used, exhausted.limit) == ("tool_calls", 3, 2)


def test_over_the_context_limit_the_turn_compacts_first() -> None:
    cfg = config(compactor=True, context_token_limit=15)
    state, commands = step(begin(cfg), TurnDue(0.0))
    assert commands == (Compact(1, 20),)
    shorter: tuple[Message, ...] = (SYSTEM,)
    delta = UsageDelta(5, 1)
    state, commands = step(state, Compacted(shorter, (delta,)))
    summary = RecordUsage(0, "compaction", ((delta, None),))  # recorded: a resume counts it
    assert commands == (summary, StartTurn(1, False), RequestModel(False))
    assert state.messages == shorter
    assert state.context_base is None  # a new prompt: nothing reported covers it
    assert state.budget.usage.model_calls == 1  # the summary's call is metered


def test_retryable_errors_are_retried_with_a_delay_and_others_fail() -> None:
    cfg = config(model_retry=RetryPolicy(attempts=2, initial_delay=1, jitter=0))
    state, _ = step(begin(cfg), TurnDue(0.0))
    state, commands = step(state, ModelCallFailed(ModelUnavailable("busy"), True, 0.0, 100.0, 0.0))
    assert commands == (
        AnnounceRetry(1, 1, "ModelUnavailable", "busy", 1.0, True),
        RequestModel(False, 1.0),
    )
    assert state.attempt == 2
    _, commands = step(state, ModelCallFailed(ModelUnavailable("busy"), False, 1.0, 100.0, 0.0))
    failed = commands[-1]
    assert isinstance(failed, Fail)
    assert same(failed.error, ModelFailed("ModelUnavailable", "busy"))
    state, _ = step(begin(cfg), TurnDue(0.0))
    _, commands = step(state, ModelCallFailed(AuthenticationFailed("no"), False, 0.0, 100.0, 0.0))
    assert kinds(commands) == ["Log", "Fail"]


def test_a_refused_context_compacts_once_then_asks_again_at_once() -> None:
    cfg = config(compactor=True)
    state, _ = step(begin(cfg), TurnDue(0.0))
    refused = ModelCallFailed(ContextLengthExceeded("too long"), False, 0.0, 100.0, 0.0)
    state, commands = step(state, refused)
    assert commands == (Compact(1, None, force=True),)
    after, commands = step(state, Compacted((SYSTEM,)))
    assert kinds(commands) == ["AnnounceRetry", "RequestModel"]
    # Refused again: no second compaction for this turn; not retryable, so it fails.
    _, commands = step(after, refused)
    assert kinds(commands) == ["Log", "Fail"]
    # Nothing compacted: the failure stands.
    _, commands = step(state, Compacted(None))
    assert kinds(commands) == ["Log", "Fail"]


def test_an_input_in_the_wrong_phase_is_a_bug_not_a_guess() -> None:
    state = begin(config())
    with pytest.raises(RuntimeError, match="came in 'turn'"):
        step(state, responded(Turn.text("early")))


# ---- a property over whole runs ----------------------------------------------------------------

responses = st.lists(
    st.sampled_from(["text", "tools", "many-tools", "fail-retryable", "fail-final"]),
    min_size=1,
    max_size=12,
)


@settings(max_examples=200, deadline=None)
@given(script=responses, max_turns=st.integers(1, 5), max_calls=st.integers(1, 6))
def test_every_run_ends_once_within_its_turns_plus_one_grace_turn(
    script: list[str], max_turns: int, max_calls: int
) -> None:
    """Interpreting the machine with a scripted model (and batches that succeed): exactly one
    terminal command, as the last command; never more model requests than ``max_turns`` plus
    the grace turn (retries of one request aside); never more tool calls run than allowed."""
    cfg = config(
        max_turns=max_turns,
        max_tool_calls=max_calls,
        model_retry=RetryPolicy(attempts=2, initial_delay=1, jitter=0),
    )
    state = begin(cfg)
    pending: Input | None = TurnDue(0.0)
    now = 0.0
    requests = 0
    calls_run = 0
    answers = iter(script)
    terminals: list[Command] = []
    while pending is not None:
        assert not terminals, "a command after the terminal one"
        state, commands = step(state, pending)
        pending = None
        for command in commands:
            now += 1
            if isinstance(command, Complete | Fail):
                terminals.append(command)
            elif isinstance(command, RequestModel):
                if not command.delay:
                    requests += 1
                kind = next(answers, "text")
                pending = _answer(kind, command.grace, now)
            elif isinstance(command, RunBatch):
                ran = len(command.plan.runnable) if command.admitted else 0
                calls_run += ran
                outcomes = tuple(
                    ToolSuccess(c.id, c.name, "ok") for c in command.plan.runnable[:ran]
                )
                pending = BatchSettled(outcomes, (), None, Delegated(), now)
            elif isinstance(command, NextTurn):
                pending = TurnDue(now)
            elif isinstance(command, EnterGrace):
                pending = GraceBegun()
            else:
                pass  # effects: nothing comes back
    assert len(terminals) == 1
    assert requests <= max_turns + 1
    assert calls_run <= max_calls


def _answer(kind: str, grace: bool, now: float) -> Input:
    if kind == "fail-retryable":
        return ModelCallFailed(ModelUnavailable("busy"), False, now, 1e9, 0.0)
    if kind == "fail-final":
        return ModelCallFailed(AuthenticationFailed("no"), False, now, 1e9, 0.0)
    if kind == "tools":
        return responded(Turn.tool_calls(("forecast", {"city": "Oslo"})), now=now)
    if kind == "many-tools":
        cities = [("forecast", {"city": c}) for c in ("Oslo", "Rome", "Lima")]
        return responded(Turn.tool_calls(*cities), now=now)
    return responded(Turn.text("done"), now=now)
