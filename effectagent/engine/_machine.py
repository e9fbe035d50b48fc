"""The run as a pure state machine: a frozen :class:`RunState`, inputs in, commands out.

``step(state, input) -> (state, commands)`` makes every decision of the turn loop —
when a turn starts, when to compact, whether a model error is retried, what a response leads to
(the answer, output feedback, follow-ups, a tool batch admitted whole or refused whole), when a
budget ran out and what exhaustion means (a grace turn or a failure) — without I/O, without Trio,
without a clock of its own: times come in with the inputs. The interpreter (``_driver``) performs
the commands — streaming the model, running the batch, appending records, emitting events — and
feeds what they produce back in as the next input. So grace turns, output retries, exhaustion and
compaction are tested as plain functions (``tests/engine/test_machine.py``), and a run's state is
one value with one owner.

The state, the inputs and the commands are plain values of their own module
(``_machine_values``, re-exported here). The protocol, as the interpreter sees it: each
transition's commands are performed in order; the last one, if it produces something
(:data:`Awaiting`), is what the next input answers. A transition that ends the run ends with
:class:`Complete`, :class:`Fail` or :class:`Suspend`; one that starts the grace turn ends with
:class:`EnterGrace` (the interpreter changes the run's deadline, then sends :class:`GraceBegun`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, NoReturn, get_args

from effectagent.ai import (
    ContextLengthExceeded,
    Message,
    ModelResponse,
    SystemMessage,
    UserMessage,
)
from effectagent.core import (
    BudgetExhausted,
    FinalTurnDeclaredTools,
    ModelFailed,
    OutputInvalid,
    RepeatedToolFailure,
    RunError,
)
from effectagent.effect import SchemaError

from ._batch_plan import plan_batch
from ._budget import NOTHING_DELEGATED as _NOTHING_DELEGATED
from ._budget import Budget, Exhaustion
from ._machine_values import (
    AnnounceRetry,
    AnswerChecked,
    Answered,
    AppendLater,
    Awaiting,
    BatchInterrupted,
    BatchSettled,
    BatchSuspended,
    CheckAnswer,
    Command,
    Compact,
    Compacted,
    Complete,
    CompleteTurn,
    EnterGrace,
    Fail,
    FollowUps,
    GraceBegun,
    Input,
    Log,
    ModelCallFailed,
    ModelResponded,
    NextTurn,
    Phase,
    PrepareTurn,
    RecordFeedback,
    RecordInputs,
    RecordUsage,
    RequestModel,
    RunBatch,
    RunConfig,
    RunState,
    StartTurn,
    Suspend,
    TakeFollowUps,
    TimeRanOut,
    Transition,
    TurnDue,
    TurnPrepared,
    WarnBudget,
)
from ._media import redacted_content
from ._model_step import ModelStep
from ._output_modes import (
    accepted,
    answer_problem,
    decode_answer,
    final_plan,
    only_final_calls,
    output_invalid,
    refusal,
    retarget_final_calls,
)
from ._retry import retry_delay
from ._seams import SteeringInput

__all__ = [
    "AnnounceRetry",
    "AnswerChecked",
    "Answered",
    "AppendLater",
    "Awaiting",
    "BatchInterrupted",
    "BatchSettled",
    "BatchSuspended",
    "CheckAnswer",
    "Command",
    "Compact",
    "Compacted",
    "Complete",
    "CompleteTurn",
    "EnterGrace",
    "Fail",
    "FollowUps",
    "GraceBegun",
    "Input",
    "Log",
    "ModelCallFailed",
    "ModelResponded",
    "NextTurn",
    "PrepareTurn",
    "RecordFeedback",
    "RecordInputs",
    "RecordUsage",
    "RequestModel",
    "RunBatch",
    "RunConfig",
    "RunState",
    "StartTurn",
    "Suspend",
    "TakeFollowUps",
    "TimeRanOut",
    "Transition",
    "TurnDue",
    "TurnPrepared",
    "WarnBudget",
    "start",
    "step",
]


_NONE: tuple[Command, ...] = ()
_REQUEST = RequestModel(False)
_GRACE_REQUEST = RequestModel(True)
_NEXT_TURN = NextTurn()
_TAKE_FOLLOW_UPS = TakeFollowUps()


# ---- the machine ------------------------------------------------------------------------------------


def start(config: RunConfig, messages: tuple[Message, ...], started_at: float) -> RunState:
    """The state of a run whose prompt is ``messages``, started at ``started_at``; the
    interpreter sends :class:`TurnDue` first."""
    return RunState(config, "turn", 0, messages, Budget(config.policy, started_at))


def step(state: RunState, event: Input) -> Transition:
    """The next state and the commands to perform, for ``event`` in ``state``. Pure."""
    return _STEPS[type(event)](state, event)


def _grace_begun(state: RunState, event: GraceBegun) -> Transition:
    if not event.inputs:
        return _grace_turn(state)
    # What was accepted since the last turn began becomes canonical before the grace request.
    record, added = _admitted(state.config.redactor.redact_text, event.inputs)
    state, commands = _grace_turn(_set(state, messages=state.messages + added))
    return state, (record, *commands)


def _batch_interrupted(state: RunState, event: BatchInterrupted) -> Transition:
    messages = state.messages + event.messages
    budget = state.budget.with_delegated(event.delegated)
    return _set(state, messages=messages, budget=budget, held=None), _NONE


def _turn_due(state: RunState, event: TurnDue) -> Transition:
    if state.phase != "turn":
        _wrong(state, "turn")
    config = state.config
    commands: list[Command] = []
    if event.steering:
        record, added = _admitted(config.redactor.redact_text, event.steering)
        commands.append(record)
        state = _set(state, messages=state.messages + added)
    exhausted = state.budget.exhausted(event.now)
    if exhausted is not None:
        return _exhaust(state, exhausted, event.now, commands)
    limit = config.policy.context_token_limit
    if config.compactor and limit is not None:
        estimate, base = _live_context(config, state.messages, state.context_base)
        if estimate > limit:  # the common case, under the limit, costs only the count
            commands.append(Compact(state.turn + 1, estimate))
            return _set(state, phase="compacting", context_base=base), tuple(commands)
        if base != state.context_base:
            state = _set(state, context_base=base)
    return _request(state, commands)


def _request(state: RunState, commands: list[Command]) -> Transition:
    """Count a turn and ask the model."""
    budget = state.budget.with_turn()
    turn = budget.turns
    state = _set(state, phase="model", turn=turn, budget=budget, attempt=1, refused_compacted=False)
    commands.append(StartTurn(turn, False))
    commands.append(PrepareTurn(turn, False) if state.config.prepares else _REQUEST)
    return state, tuple(commands)


def _turn_prepared(state: RunState, event: TurnPrepared) -> Transition:
    """The turn was prepared: its instructions replace the system message, its context joins
    the prompt — then the request; or its preparation failed, which ends the run."""
    if state.phase != "model":
        _wrong(state, "model")
    if event.failure is not None:
        return _set(state, phase="ended"), (Fail(event.failure),)
    messages = state.messages
    system = event.system
    if system is not None and messages and isinstance(messages[0], SystemMessage):
        messages = (system, *messages[1:])
    if event.added:
        messages = messages + event.added
    if messages is not state.messages:
        state = _set(state, messages=messages)
    return state, (_GRACE_REQUEST if state.grace else _REQUEST,)


def _compacted(state: RunState, event: Compacted) -> Transition:
    if not event.usage:
        return _compacted_prompt(state, event)
    turn = state.turn
    state, commands = _compacted_prompt(state, event)
    calls = tuple((delta, event.model) for delta in event.usage)
    return state, (RecordUsage(turn, "compaction", calls), *commands)


def _compacted_prompt(state: RunState, event: Compacted) -> Transition:
    budget = state.budget
    for delta in event.usage:
        budget = budget.with_usage(delta, event.model, live=False)  # a summary's call
    if event.messages is None:
        messages, base = state.messages, state.context_base
    else:  # a new prompt: no report covers it yet
        messages, base = event.messages, None
    if state.phase == "compacting":
        state = _set(state, budget=budget, messages=messages, context_base=base)
        if state.grace:
            return _grace_request(state)
        return _request(state, [])
    if state.phase != "model":  # compacted after the model refused the context
        _wrong(state, "model")
    failed = state.held
    assert isinstance(failed, ModelCallFailed)
    state = _set(state, budget=budget, messages=messages, context_base=base, held=None)
    if event.messages is None:
        return _retry_or_fail(state, failed)
    error = failed.error
    message = state.config.describe(str(error))
    announce = AnnounceRetry(state.turn, state.attempt, error.tag, message, 0.0, failed.streamed)
    return state, (announce, _GRACE_REQUEST if state.grace else _REQUEST)


def _responded(state: RunState, event: ModelResponded) -> Transition:
    if not event.checked:
        return _responded_step(state, event)
    turn = state.turn
    state, commands = _responded_step(state, event)
    # The checks' usage is recorded after the response, as the budget counts it after the turn.
    later, *rest = commands
    assert isinstance(later, AppendLater)
    return state, (later, RecordUsage(turn, "check", event.checked), *rest)


def _responded_step(state: RunState, event: ModelResponded) -> Transition:
    if state.phase != "model":
        _wrong(state, "model")
    config = state.config
    held = event.step
    usage = held.usage
    budget = state.budget.with_usage(usage, held.record.model)
    for delta, model in event.checked:  # input guardrails beside the first request
        budget = budget.with_usage(delta, model, live=False)
    # The provider's count of this request's input: the base of the next live-context figure
    # (a provider that reports none leaves the engine's own count as the base).
    base = (event.request_size, usage.input_tokens) if usage.input_tokens else state.context_base
    response = held.response
    later = AppendLater(None if held.recorded else held.record)
    declared = response.tool_calls or response.truncated_calls
    final = config.final_tools
    alone = only_final_calls(response, final.names) if declared and final is not None else None
    if state.grace:
        state = _set(state, phase="ended", budget=budget, context_base=base)
        # The grace turn completes as it answers (no warnings after an exhaustion), whatever
        # ends the run after it.
        completed = CompleteTurn(
            state.turn, response.finish_reason, budget.totals, (), held.record.model
        )
        if declared and not alone:
            names = tuple(c.name for c in response.tool_calls) + tuple(
                c.name for c in response.truncated_calls
            )
            return state, (later, completed, Fail(FinalTurnDeclaredTools(names)))
        output, problem = _final_output(config, held) if alone else _output(config, response)
        if problem is not None:
            return state, (later, completed, Fail(_output_invalid(state, problem)))
        exhaustion = state.exhaustion
        dimension = exhaustion.dimension if exhaustion is not None else None
        answer = Complete(
            response,
            output,
            "budget-exhausted",
            dimension,
            held.record.model,
            accepted(held) if alone else (),
        )
        return _finish(state, answer, held, [later, completed])
    if alone:  # the tool output mode's answer: a final_result call alone
        state = _set(state, phase="model", budget=budget, context_base=base, held=None)
        output, problem = _final_output(config, held)
        if problem is not None:
            return _reject(state, held, problem, event.now, [later], rejected=False)
        answer = Complete(response, output, "stop", None, held.record.model, accepted(held))
        return _finish(state, answer, held, [later])
    if declared:
        # The whole batch or none of it: calls past the tool-call budget never run one by one.
        plan = plan_batch(held, event.toolkit, config.redactor)
        if alone is False:  # final_result beside other calls: those run, it is not taken
            plan = retarget_final_calls(plan, final.names)  # type: ignore[union-attr]
        requested = len(plan.runnable)
        admitted = requested <= budget.calls_left
        budget = budget.with_calls(requested) if admitted else budget.with_refused_batch(requested)
        state = RunState(
            config,
            "batch",
            state.turn,
            state.messages,
            budget,
            False,
            state.output_retries,
            state.attempt,
            state.refused_compacted,
            base,
            None,
            Answered(held.finish_reason, held.model),  # not the response itself
        )
        return state, (later, RunBatch(plan, admitted, held.assistant_message()))
    state = RunState(
        config,
        "follow-ups" if config.follow_ups else "model",
        state.turn,
        state.messages,
        budget,
        False,
        state.output_retries,
        state.attempt,
        state.refused_compacted,
        base,
        None,
        held if config.follow_ups else None,
    )
    if config.follow_ups:
        return state, (later, _TAKE_FOLLOW_UPS)
    return _answer(state, held, event.now, [later])


def _follow_ups(state: RunState, event: FollowUps) -> Transition:
    if state.phase != "follow-ups":
        _wrong(state, "follow-ups")
    held = state.held
    assert isinstance(held, ModelStep)
    state = _set(state, held=None)
    if not event.inputs:
        return _answer(state, held, event.now, [])
    # Follow-ups: the agent does not stop; its answer becomes an assistant message.
    record, added = _admitted(state.config.redactor.redact_text, event.inputs)
    messages = state.messages
    assistant = held.assistant_message()
    if assistant is not None:
        messages = (*messages, assistant)
    state = _set(state, phase="turn", messages=messages + added)
    commands: list[Command] = [record]
    return _turn_completed(state, held, event.now, commands, _NEXT_TURN)


def _admitted(
    redact: Callable[[str], str], inputs: tuple[SteeringInput, ...]
) -> tuple[RecordInputs, tuple[UserMessage, ...]]:
    """The command recording admitted ``inputs`` and their user messages, redacted: text, or
    (input with media) its text parts and text documents redacted as a run's input is."""
    texts = tuple(redact(i.text) for i in inputs)
    contents = tuple(
        None if i.content is None else redacted_content(i.content, redact) for i in inputs
    )
    messages = tuple(
        UserMessage.text(text) if content is None else UserMessage(content)
        for text, content in zip(texts, contents, strict=True)
    )
    if all(content is None for content in contents):
        contents = ()  # text alone, the common case
    return RecordInputs(inputs, texts, contents), messages


def _answer(state: RunState, held: ModelStep, now: float, commands: list[Command]) -> Transition:
    """A response without tool calls, and no follow-ups: the final answer, or feedback."""
    config = state.config
    response = held.response
    output, problem = _output(config, response)
    if problem is None:
        # The answer ends the run: no later request needs it as an assistant message.
        answer = Complete(response, output, "stop", None, held.record.model)
        return _finish(state, answer, held, commands)
    return _reject(state, held, problem, now, commands, rejected=False)


def _finish(
    state: RunState, answer: Complete, held: ModelStep, commands: list[Command]
) -> Transition:
    """The answer ends the run — after the agent's output checks, when it has some. Its turn
    completes first (the grace turn's did as it answered)."""
    if state.config.checks:
        commands.append(CheckAnswer(answer))
        return _set(state, phase="checking", held=held), tuple(commands)
    return _ended_with(state, held, commands, answer)


def _ended_with(
    state: RunState, held: ModelStep, commands: list[Command], end: Command
) -> Transition:
    """The run ends with ``end`` after the turn ``held`` answered: ``TurnCompleted`` first, as
    every answered turn has one (the grace turn's was emitted as it answered). No budget
    warning comes with it: nothing is left for a warning to change (as after an exhaustion)."""
    state = _set(state, phase="ended")
    if not state.grace:
        budget = state.budget
        commands.append(CompleteTurn(state.turn, held.finish_reason, budget.totals, (), held.model))
    commands.append(end)
    return state, tuple(commands)


def _answer_checked(state: RunState, event: AnswerChecked) -> Transition:
    if state.phase != "checking":
        _wrong(state, "checking")
    held = state.held
    assert isinstance(held, ModelStep)
    budget = state.budget
    for delta, model in event.usage:  # the checks' model calls count like the turns'
        budget = budget.with_usage(delta, model, live=False)  # (not in the live context)
    commands: list[Command] = []
    if event.usage:
        commands.append(RecordUsage(state.turn, "check", event.usage))
    state = _set(state, budget=budget, held=None)
    verdict = event.verdict
    if verdict is None:
        return _ended_with(state, held, commands, event.complete)
    if isinstance(verdict, RunError):
        return _ended_with(state, held, commands, Fail(verdict))
    return _reject(state, held, verdict, event.now, commands, rejected=True)


def _reject(
    state: RunState,
    held: ModelStep,
    problem: str,
    now: float,
    commands: list[Command],
    *,
    rejected: bool,
) -> Transition:
    """An answer that did not decode (or, ``rejected``, that a validator rejected) goes back to
    the model with ``problem``, counted in ``output_retries`` — or, when they are used up (or in
    the grace turn), ends the run with ``OutputInvalid`` naming it."""
    config = state.config
    retries = state.output_retries
    if state.grace or retries >= config.policy.output_retries:
        failure = Fail(output_invalid(config.output, retries, problem, rejected=rejected))
        return _ended_with(state, held, commands, failure)
    if config.final_tools is not None and held.response.tool_calls:
        # A final_result answer: refused as the tool's failure, committed like a batch (nothing
        # runs), so the model reads it as the call's result and the record holds it.
        message = refusal(problem, rejected=rejected)
        answered = Answered(held.finish_reason, held.model)
        state = _set(state, phase="batch", output_retries=retries + 1, held=answered)
        commands.append(RunBatch(final_plan(held, message), True, held.assistant_message()))
        return state, tuple(commands)
    # The answer goes back with the message, recorded (kind "feedback", author "engine"), so a
    # later request — or the conversation continued after a restart — sees exactly what this
    # one saw.
    if rejected:
        text = f"Your final answer was not accepted: {problem}\nAnswer again."
    elif config.final_tools is not None:
        text = f"Your final answer {problem}. Give it by calling the final_result tool now."
    else:
        text = (
            "Your final answer must be JSON that matches the required output schema, and it is "
            f"not: {problem}\nAnswer again with only that JSON."
        )
    messages = state.messages
    assistant = held.assistant_message()
    if assistant is not None:
        messages = (*messages, assistant)
    messages = (*messages, UserMessage.text(text))
    state = _set(state, phase="turn", messages=messages, output_retries=retries + 1)
    commands.append(RecordFeedback(text))
    return _turn_completed(state, held, now, commands, _NEXT_TURN)


def _batch_settled(state: RunState, event: BatchSettled) -> Transition:
    if state.phase != "batch":
        _wrong(state, "batch")
    held: Answered = state.held  # type: ignore[assignment]  # what the batch phase holds
    outcomes = event.outcomes
    final = state.config.final_tools
    if final is not None:  # final_result refusals count in output_retries, not failure streaks
        outcomes = tuple(o for o in outcomes if o.tool_name not in final.names)
    budget = state.budget.with_outcomes(outcomes)
    if event.delegated is not _NOTHING_DELEGATED:
        budget = budget.with_delegated(event.delegated)
    failure = event.failure
    state = RunState(
        state.config,
        "turn" if failure is None else "ended",
        state.turn,
        state.messages + event.messages,
        budget,
        False,
        state.output_retries,
        state.attempt,
        state.refused_compacted,
        state.context_base,
        None,
        None,
    )
    then: Command = _NEXT_TURN if failure is None else Fail(failure)
    return _turn_completed(state, held, event.now, [], then)


def _batch_suspended(state: RunState, event: BatchSuspended) -> Transition:
    if state.phase != "batch":
        _wrong(state, "batch")
    state = _set(state, phase="ended", held=None)
    return state, (Suspend(state.turn, event.tool_call_ids, event.reason),)


def _model_failed(state: RunState, event: ModelCallFailed) -> Transition:
    if state.phase != "model":
        _wrong(state, "model")
    if (
        isinstance(event.error, ContextLengthExceeded)
        and not state.refused_compacted
        and state.config.compactor
    ):
        # The model refused the context: compact once, whatever the estimate said, and ask
        # again at once (a new request, not a retry of the same one).
        state = _set(state, refused_compacted=True, held=event)
        return state, (Compact(state.turn, None, force=True),)
    return _retry_or_fail(state, event)


def _retry_or_fail(state: RunState, event: ModelCallFailed) -> Transition:
    config = state.config
    error = event.error
    message = config.describe(str(error))
    policy = config.policy.model_retry
    jitter = event.jitter
    delay = retry_delay(policy, error, state.attempt, event.now, event.deadline, lambda: jitter)
    if delay is None:
        fields = (("error", error.tag), ("message", message), ("attempts", state.attempt))
        log = Log("warning", "model call failed", fields)
        return _set(state, phase="ended"), (log, Fail(ModelFailed(error.tag, message)))
    announce = AnnounceRetry(state.turn, state.attempt, error.tag, message, delay, event.streamed)
    state = _set(state, attempt=state.attempt + 1)
    return state, (announce, RequestModel(state.grace, delay))


def _time_ran_out(state: RunState, event: TimeRanOut) -> Transition:
    if state.grace:  # the grace turn's own deadline: the run fails with what ran out
        exhaustion = state.exhaustion
        assert exhaustion is not None
        used = exhaustion.used
        if exhaustion.dimension == "duration":  # the grace turn's time counts too
            used = max(used, event.now - state.budget.started_at)
        error = BudgetExhausted(
            exhaustion.dimension, used, exhaustion.limit, exhaustion.refused_batch
        )
        return _set(state, phase="ended"), (Fail(error),)
    budget = state.budget
    exhausted = budget.exhausted(event.now)
    if exhausted is None:  # only the deadline can end the turns without a count used up
        exhausted = Exhaustion(
            "duration", event.now - budget.started_at, state.config.policy.max_duration
        )
    return _exhaust(state, exhausted, event.now, [])


def _exhaust(
    state: RunState, exhausted: Exhaustion, now: float, commands: list[Command]
) -> Transition:
    """A budget ran out: fail, or enter the one grace turn (tool choice "none")."""
    config = state.config
    policy = config.policy
    fields = (
        ("dimension", exhausted.dimension),
        ("used", exhausted.used),
        ("limit", exhausted.limit),
    )
    # A dimension that passed its warning ratio since the last turn's end (the run's time, while
    # a batch ran) warns before the exhaustion, as it would have at that turn's end. Nothing
    # warns after an exhaustion (the grace turn's end reports none), so the state need not
    # remember these.
    _, warnings = state.budget.with_due_warnings(now)
    if warnings:
        commands.append(WarnBudget(warnings))
    commands.append(Log("warning", "budget exhausted", fields))
    if policy.on_exhaustion == "fail":
        failure = state.budget.repeated_failure
        error: RunError
        if exhausted.dimension == "repeated_failures" and failure is not None:
            error = RepeatedToolFailure(failure.tool_name, failure.count)
        else:
            error = BudgetExhausted(
                exhausted.dimension, exhausted.used, exhausted.limit, exhausted.refused_batch
            )
        commands.append(Fail(error))
        return _set(state, phase="ended", held=None), tuple(commands)
    # The grace turn lasts ``grace_turn_duration`` at most, and never past the run's end.
    commands.append(EnterGrace(min(now + policy.grace_turn_duration, state.budget.ends_at)))
    state = _set(state, phase="grace", grace=True, exhaustion=exhausted, held=None)
    return state, tuple(commands)


def _grace_turn(state: RunState) -> Transition:
    """The grace turn begins: its prompt is compacted like any other when over the limit."""
    if state.phase != "grace":
        _wrong(state, "grace")
    config = state.config
    limit = config.policy.context_token_limit
    if config.compactor and limit is not None:
        estimate, base = _live_context(config, state.messages, state.context_base)
        if estimate > limit:
            state = _set(state, phase="compacting", context_base=base)
            return state, (Compact(state.turn + 1, estimate),)
        state = _set(state, context_base=base)
    return _grace_request(state)


def _grace_request(state: RunState) -> Transition:
    turn = state.turn + 1
    state = _set(state, phase="model", turn=turn, attempt=1, refused_compacted=False)
    if state.config.prepares:
        return state, (StartTurn(turn, True), PrepareTurn(turn, True))
    return state, (StartTurn(turn, True), _GRACE_REQUEST)


def _turn_completed(
    state: RunState, held: ModelStep | Answered, now: float, commands: list[Command], then: Command
) -> Transition:
    """``TurnCompleted`` for the turn ``held`` answered (with the warnings now due), then
    ``then``."""
    budget, warnings = state.budget.with_due_warnings(now)
    if budget is not state.budget:
        state = _set(state, budget=budget)
    commands.append(
        CompleteTurn(state.turn, held.finish_reason, budget.totals, warnings, held.model)
    )
    commands.append(then)
    return state, tuple(commands)


#: Each input's transition function, by class (the table ``step`` dispatches on).
_STEPS: dict[type[Any], Callable[[RunState, Any], Transition]] = {
    TurnDue: _turn_due,
    TurnPrepared: _turn_prepared,
    ModelResponded: _responded,
    BatchSettled: _batch_settled,
    FollowUps: _follow_ups,
    ModelCallFailed: _model_failed,
    Compacted: _compacted,
    TimeRanOut: _time_ran_out,
    GraceBegun: _grace_begun,
    BatchInterrupted: _batch_interrupted,
    BatchSuspended: _batch_suspended,
    AnswerChecked: _answer_checked,
}


def _check_inputs_are_all_handled(handled: Mapping[type[Any], object]) -> None:
    missing = [cls.__name__ for cls in get_args(Input) if cls not in handled]
    if missing:  # a new input without a transition is a bug at import, not mid-run
        raise TypeError(f"the run state machine has no transition for {', '.join(missing)}")


_check_inputs_are_all_handled(_STEPS)


# ---- helpers ------------------------------------------------------------------------------------


class _Keep:
    """The value of a field :func:`_set` leaves as it is."""


_KEEP: Any = _Keep()


def _set(
    state: RunState,
    *,
    phase: Phase = _KEEP,
    turn: int = _KEEP,
    messages: tuple[Message, ...] = _KEEP,
    budget: Budget = _KEEP,
    grace: bool = _KEEP,
    output_retries: int = _KEEP,
    attempt: int = _KEEP,
    refused_compacted: bool = _KEEP,
    context_base: tuple[int, int] | None = _KEEP,
    exhaustion: Exhaustion | None = _KEEP,
    held: ModelStep | ModelCallFailed | Answered | None = _KEEP,
) -> RunState:
    """``state`` with the given fields replaced (``attrs.evolve``, without its introspection:
    the turn loop makes a few states a turn)."""
    return RunState(
        state.config,
        state.phase if phase is _KEEP else phase,
        state.turn if turn is _KEEP else turn,
        state.messages if messages is _KEEP else messages,
        state.budget if budget is _KEEP else budget,
        state.grace if grace is _KEEP else grace,
        state.output_retries if output_retries is _KEEP else output_retries,
        state.attempt if attempt is _KEEP else attempt,
        state.refused_compacted if refused_compacted is _KEEP else refused_compacted,
        state.context_base if context_base is _KEEP else context_base,
        state.exhaustion if exhaustion is _KEEP else exhaustion,
        state.held if held is _KEEP else held,
    )


def _wrong(state: RunState, phase: Phase) -> NoReturn:
    raise RuntimeError(f"run state machine: an input for {phase!r} came in {state.phase!r}")


def _live_context(
    config: RunConfig, messages: tuple[Message, ...], base: tuple[int, int] | None
) -> tuple[int, tuple[int, int]]:
    """The live-context figure for compaction, and its new base: the tokens the provider
    reported for the last request's input plus the count of what was added since — or, before
    any report (or from a provider that reports none, or after a compaction), the count of the
    whole prompt once and then of each message as it is added. Each message is counted once."""
    count = config.count_tokens
    if base is None or base[0] > len(messages):
        tokens = count(messages)
    elif base[0] == len(messages):
        return base[1], base
    else:
        tokens = base[1] + count(messages[base[0] :])
    return tokens, (len(messages), tokens)


def _output(config: RunConfig, response: ModelResponse) -> tuple[Any, str | None]:
    """The final answer decoded into ``Agent.output`` — or, when it does not decode, why
    (redacted). From the redacted text, like the answer itself: a secret the model echoed must
    not reach the event or the record through the structured output either."""
    output_type = config.output
    if output_type is None:
        return None, None
    if config.final_tools is not None:  # the tool output mode: text is not an answer
        return None, "was text, not a call of the final_result tool"
    try:
        return decode_answer(output_type, config.redactor, response.text), None
    except SchemaError as exc:
        return None, config.describe(answer_problem(exc))


def _final_output(config: RunConfig, held: ModelStep) -> tuple[Any, str | None]:
    """The answer a final_result call (the response's first) decodes into, or why not."""
    call = held.response.tool_calls[0]
    tools = config.final_tools
    assert tools is not None
    try:
        return tools.decode(call.name, held.arguments[call.id]), None
    except SchemaError as exc:
        return None, config.describe(answer_problem(exc))


def _output_invalid(state: RunState, problem: str) -> OutputInvalid:
    return output_invalid(state.config.output, state.output_retries, problem, rejected=False)
