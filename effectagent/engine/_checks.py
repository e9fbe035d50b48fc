"""Running an agent's checks: output validators and output guardrails on the final answer
(``CheckAnswer``), input guardrails before — or beside — the first model call.

Each check is given a :class:`RunCheckContext`: the run's identity and input, and the runtime's
model, whose usage (and cost) the context collects so the run counts it like a turn's. A check
that raises is never retried: the run fails closed (``GuardrailFailed`` /
``OutputValidatorFailed``, naming what it raised, never its message).
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any, Literal, final

import attrs
import trio

from effectagent.ai import LanguageModel, ModelRequest, ModelResponse, PriceTable, generate
from effectagent.core import (
    BudgetExhausted,
    FinalAnswer,
    Guardrail,
    GuardrailFailed,
    GuardrailResult,
    GuardrailTripped,
    OutputValidatorFailed,
    RejectOutput,
    RunError,
    UsageDelta,
)

from ._machine_values import AnswerChecked, CheckAnswer, EnterGrace, NextTurn, RunState
from ._media import user_content
from ._model_step import answered_by, stream_model

if TYPE_CHECKING:
    from ._driver import RunDriver

__all__ = [
    "BesideGuard",
    "GuardrailStop",
    "RunCheckContext",
    "answer_checked",
    "check_answer",
    "check_input",
    "first_turns",
]

Usage = tuple[tuple[UsageDelta, str | None], ...]
Stage = Literal["input", "output"]

_NEXT_TURN = NextTurn()


@final
class RunCheckContext:
    """A :class:`~effectagent.core.CheckContext`: the run checked, and its model to ask."""

    __slots__ = (
        "_model",
        "_name",
        "_prices",
        "_used",
        "agent_name",
        "conversation_id",
        "input",
        "run_id",
    )

    def __init__(
        self,
        *,
        run_id: str,
        conversation_id: str,
        agent_name: str,
        input: str,
        model: LanguageModel,
        model_name: str | None,
        prices: PriceTable,
    ) -> None:
        self.run_id = run_id
        self.conversation_id = conversation_id
        self.agent_name = agent_name
        self.input = input
        self._model = model
        self._name = model_name
        self._prices = prices
        self._used: list[tuple[UsageDelta, str | None]] = []

    async def generate(self, request: ModelRequest) -> ModelResponse:
        """Ask the run's model ``request``; its usage counts in the run's (see
        :meth:`~effectagent.core.CheckContext.generate`).

        Cancellation: a cancellation point; a cancelled call's usage is not counted.
        """
        answered = [self._name]
        response = await generate(self._model, request, answered=partial(answered_by, answered))
        price = self._prices.price_for(self._model, answered[0])
        self._used.append((UsageDelta.from_usage(response.usage, price), answered[0]))
        return response

    def take_usage(self) -> Usage:
        """What the context's model calls used so far, taken (the next take starts afresh)."""
        used, self._used = tuple(self._used), []
        return used


def _named(check: object) -> str:
    name = getattr(check, "__name__", None)
    return name if isinstance(name, str) else type(check).__name__


async def _maybe_await(value: Any) -> Any:
    return await value if inspect.isawaitable(value) else value


async def check_answer(
    ctx: RunCheckContext,
    validators: Sequence[Callable[..., Any]],
    guardrails: Sequence[Guardrail],
    output: Any,
    text: str,
    describe: Callable[[str], str],
) -> str | RunError | None:
    """Run ``validators`` (in order) on the answer — its ``output``, or its ``text`` for an agent
    without an output type — then ``guardrails`` (at once, all of them). The verdict: None
    (accepted), a rejection's message (redacted by ``describe``), or the failure that ends the
    run: the first guardrail to trip or fail, in declaration order.

    Cancellation: a cancellation point in each check; cancelled, nothing is decided.
    """
    value = text if output is None else output
    for validator in validators:
        try:
            await _maybe_await(validator(value, ctx))
        except RejectOutput as rejection:
            return describe(str(rejection.message))
        except Exception as exc:
            return OutputValidatorFailed(_named(validator), type(exc).__name__)
    if not guardrails:
        return None
    answer = FinalAnswer(text, output)
    return await _run_guardrails(guardrails, "output", partial(_call, ctx, answer), describe)


async def check_input(
    ctx: RunCheckContext,
    guardrails: Sequence[Guardrail],
    text: str,
    describe: Callable[[str], str],
) -> RunError | None:
    """Run the input ``guardrails`` on the run's input ``text`` (at once, all of them): None when
    every one passed, else the failure of the first (in declaration order) to trip or fail.

    Cancellation: a cancellation point in each guardrail; cancelled, nothing is decided.
    """
    return await _run_guardrails(guardrails, "input", partial(_call, ctx, text), describe)


async def _call(ctx: RunCheckContext, value: Any, guardrail: Guardrail) -> GuardrailResult:
    return await guardrail.check(ctx, value)


async def _run_guardrails(
    guardrails: Sequence[Guardrail],
    stage: Stage,
    call: Callable[[Guardrail], Awaitable[GuardrailResult]],
    describe: Callable[[str], str],
) -> RunError | None:
    """Run every guardrail at once; the failure of the first, in declaration order, that tripped
    or failed — or None. The verdict is decided as soon as every guardrail before the first
    failure has its own: those still running are then cancelled (theirs cannot change it)."""
    verdicts: list[RunError | _Pending | None] = [_PENDING] * len(guardrails)

    async def one(index: int, guardrail: Guardrail, scope: trio.CancelScope) -> None:
        verdicts[index] = await _verdict(guardrail, stage, call, describe)
        for verdict in verdicts:
            if verdict is _PENDING:
                return
            if verdict is not None:
                break
        scope.cancel()

    if len(guardrails) == 1:  # no nursery for the common case
        await one(0, guardrails[0], trio.CancelScope())
    else:
        async with trio.open_nursery() as nursery:
            for index, guardrail in enumerate(guardrails):
                nursery.start_soon(one, index, guardrail, nursery.cancel_scope)
    for verdict in verdicts:
        if isinstance(verdict, RunError):
            return verdict
    return None


@final
class _Pending:
    """A guardrail's verdict not known yet."""


_PENDING = _Pending()


async def _verdict(
    guardrail: Guardrail,
    stage: Stage,
    call: Callable[[Guardrail], Awaitable[GuardrailResult]],
    describe: Callable[[str], str],
) -> RunError | None:
    """One guardrail's verdict: None (passed), or the failure it ends the run with."""
    try:
        result: object = await call(guardrail)  # checked: not every guardrail is typed
    except Exception as exc:
        return GuardrailFailed(guardrail.name, stage, type(exc).__name__)
    if not isinstance(result, GuardrailResult):
        return GuardrailFailed(guardrail.name, stage, f"returned {type(result).__name__}")
    if result.tripped:
        return GuardrailTripped(guardrail.name, stage, describe(result.reason) or "no reason given")
    return None


def check_context(driver: RunDriver) -> RunCheckContext:
    """The check context of ``driver``'s run (its turns' model)."""
    io, services = driver.io, driver.services
    return RunCheckContext(
        run_id=io.run_id,
        conversation_id=io.conversation_id,
        agent_name=driver.agent.name,
        input=services.redactor.redact_text(user_content(driver.user_input)[0]),
        model=services.model,
        model_name=services.model_name,
        prices=services.prices,
    )


async def answer_checked(driver: RunDriver, command: CheckAnswer) -> AnswerChecked:
    """Perform ``CheckAnswer``: the agent's validators and output guardrails on the answer.

    Cancellation: as :func:`check_answer`.
    """
    complete = command.complete
    agent = driver.agent
    ctx = check_context(driver)
    text = driver.services.redactor.redact_text(complete.response.text)
    verdict = await check_answer(
        ctx,
        agent.output_validators,
        agent.output_guardrails,
        complete.output,
        text,
        driver.io.redact_text,
    )
    if isinstance(verdict, RunError):
        driver.io.logs.warning("answer check failed", error=verdict.tag)
    return AnswerChecked(complete, verdict, ctx.take_usage(), trio.current_time())


class GuardrailStop(Exception):
    """An input guardrail beside the first model call tripped (or failed): the call was
    cancelled, or its response dropped, before anything it produced was handed over."""

    def __init__(self, error: RunError) -> None:
        super().__init__(error.tag)
        self.error = error


async def first_turns(driver: RunDriver, state: RunState) -> EnterGrace | None:
    """Drive a new run from its first turn, after the agent's input guardrails declared to run
    before it and beside those declared to run beside it (see :class:`BesideGuard`). A trip (or a
    guardrail that fails) ends the run with its failure, recorded, before any tool runs.

    Cancellation: as the guardrails' and the run's turns'. The guardrails declared to run before
    the first turn may take the run's whole ``max_duration`` (no grace turn can follow input
    never let through, so none is kept time for); when it — or, for those beside the first
    call, the turns' deadline — passes before every input guardrail gave its verdict, the input
    was never let through: the run fails with ``BudgetExhausted("duration", ...)`` (recorded,
    shielded) — no grace turn asks the model with it.
    """
    passed: list[bool] = []
    try:
        grace = await _first_turns(driver, state, passed)
    except (trio.Cancelled, BaseExceptionGroup, Exception):
        # Raised as the turns' deadline passed (a cancellation, alone or in a group, or an
        # error a seam raised as it was cancelled: ``RunDriver.execute`` takes each for the
        # deadline) — not an interruption, nor the caller's cancellation: fail closed.
        scope = driver.cancel_scope
        if not passed and scope is not None and scope.cancel_called and not driver._interrupted:
            with trio.CancelScope(shield=True):
                await _no_verdict_in_time(driver)
        raise
    if not passed and driver.terminal is None and not driver._interrupted:
        # The deadline cut the first model call beside the guardrails before their verdict.
        with trio.CancelScope(shield=True):
            await _no_verdict_in_time(driver)
        return None
    return grace


async def _no_verdict_in_time(driver: RunDriver) -> None:
    """End the run failed: its time ran out before its input guardrails' verdict. The caller
    shields it."""
    if driver.terminal is not None:
        return
    started = driver._current().budget.started_at
    limit = driver.agent.policy.max_duration
    error = BudgetExhausted("duration", trio.current_time() - started, limit)
    driver.io.logs.warning("input guardrails gave no verdict in time", error=error.tag)
    await driver._fail(error)


async def _first_turns(driver: RunDriver, state: RunState, passed: list[bool]) -> EnterGrace | None:
    """:func:`first_turns`; ``passed`` is appended to once every input guardrail passed."""
    guardrails = driver.agent.input_guardrails
    before = tuple(g for g in guardrails if not g.beside)
    if before:
        ctx = check_context(driver)
        scope = driver.cancel_scope
        turns_end = None if scope is None else scope.deadline
        if scope is not None:
            # No grace turn can follow input never let through: these checks may take the run's
            # whole time (``max_duration``), not only its turns' (less the grace reserve).
            scope.deadline = state.budget.ends_at
        try:
            failure = await check_input(ctx, before, ctx.input, driver.io.redact_text)
        finally:
            if scope is not None and turns_end is not None:
                scope.deadline = turns_end
        budget = state.budget
        used = ctx.take_usage()
        for delta, model in used:
            budget = budget.with_usage(delta, model, live=False)
        state = driver.state = attrs.evolve(state, budget=budget)
        if used:  # recorded with the first response (or the run's end)
            driver.record_usage(state.turn, "check", used)
        if failure is not None:
            driver.io.logs.warning("input guardrail stopped the run", error=failure.tag)
            await driver._fail(failure)
            return None
    beside = tuple(g for g in guardrails if g.beside)
    if beside:
        driver.beside = BesideGuard(driver, beside, passed)
    else:
        passed.append(True)
    try:
        return await driver._drive((state, (_NEXT_TURN,)))
    except GuardrailStop as stop:
        driver.io.logs.warning("input guardrail stopped the run", error=stop.error.tag)
        await driver._fail(stop.error)
        return None


@final
class BesideGuard:
    """Input guardrails that run beside the first model call: the call streams at once, its
    events held back (not handed to the consumer) until every guardrail passed — then handed over
    in order. A trip cancels the call (or drops its finished response): its held events are
    dropped (their numbers given back: the sequence stays gap-free), nothing of it is recorded,
    and :class:`GuardrailStop` ends the run. The response is never used before the verdict, so
    no tool of it can run after a trip."""

    __slots__ = ("_driver", "_guardrails", "_passed", "done", "usage")

    def __init__(
        self, driver: RunDriver, guardrails: tuple[Guardrail, ...], passed: list[bool]
    ) -> None:
        self._driver = driver
        self._guardrails = guardrails
        self._passed = passed  # appended to once every guardrail passed
        self.done = False
        self.usage: Usage = ()

    def take_usage(self) -> Usage:
        """What the guardrails' model calls used (once; then the guard is done with)."""
        self._driver.beside = None
        return self.usage

    async def stream(self, io: Any, *args: Any, **kwargs: Any) -> Any:
        """``stream_model(io, *args, **kwargs)`` beside the guardrails (see the class notes).

        Cancellation: cancelling the run cancels both; a trip cancels the model call only.
        """
        self.done = True
        driver = self._driver
        ctx = check_context(driver)
        verdict: list[RunError | None] = []
        outcome: Any = None
        held = io.hold_events()
        handed_over = False
        try:
            async with trio.open_nursery() as nursery:

                async def guard() -> None:
                    failure = await check_input(ctx, self._guardrails, ctx.input, io.redact_text)
                    verdict.append(failure)
                    if failure is not None:
                        nursery.cancel_scope.cancel()
                    else:
                        self._passed.append(True)

                nursery.start_soon(guard)
                outcome = await stream_model(io, *args, **kwargs)
            # A trip drops what the model call showed (and gives its numbers back).
            handed_over = not verdict or verdict[0] is None
        finally:
            io.end_hold(held, hand_over=handed_over)
        self.usage = ctx.take_usage()
        if verdict and verdict[0] is not None:
            raise GuardrailStop(verdict[0])
        return outcome
