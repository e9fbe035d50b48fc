"""Union outputs and output validators, as mypy sees them: ``Agent(output=one_of(A, B))`` is an
``Agent[A | B]`` whose run's output is ``A | B``; ``@agent.output_validator`` takes a function
of the agent's output type (the answer's text for an agent without one) and a CheckContext; a
guardrail, bare or in a ``Guardrail``, takes what its kind is given."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import assert_type

import attrs

from effectagent import Agent, RunResult, Runtime
from effectagent.core import (
    CheckContext,
    DefaultInput,
    FinalAnswer,
    Guardrail,
    GuardrailResult,
    RejectOutput,
    one_of,
)
from effectagent.engine import OutputUpdate


@attrs.frozen
class Refund:
    order: str
    amount: float


@attrs.frozen
class Escalation:
    reason: str


triage = Agent("triage", "Refund or escalate.", output=one_of(Refund, Escalation))
assert_type(triage, Agent[Refund | Escalation, DefaultInput])
tool_mode = Agent("triage", "Refund or escalate.", output=Refund, output_mode="tool")
assert_type(tool_mode, Agent[Refund, DefaultInput])
# E: Argument "output_mode"
Agent("triage", "Refund.", output=Refund, output_mode="json")


async def runs(runtime: Runtime) -> None:
    result = await runtime.run(triage, "Order A-1 arrived broken.")
    assert_type(result, RunResult[Refund | Escalation])
    answer = result.output_or_raise()
    assert_type(answer, Refund | Escalation)
    if isinstance(answer, Refund):
        assert_type(answer.amount, float)


refunds = Agent("refunds", "Refund.", output=Refund)


@refunds.output_validator
async def positive(refund: Refund, ctx: CheckContext) -> None:
    if refund.amount <= 0:
        raise RejectOutput("the amount must be positive")


@refunds.output_validator
def plain(refund: Refund, ctx: CheckContext) -> None:  # a plain function is taken too
    assert_type(ctx.run_id, str)


async def wrong_type(refund: Escalation, ctx: CheckContext) -> None: ...


# E: Argument 1 to "output_validator" of "Agent" has incompatible type
refunds.output_validator(wrong_type)

greeter = Agent("greeter", "Greet.")


@greeter.output_validator
async def short(text: str, ctx: CheckContext) -> None:
    if len(text) > 200:
        raise RejectOutput("shorter, please")


async def on_topic(ctx: CheckContext, text: str) -> GuardrailResult:
    return GuardrailResult.passed()


async def under_limit(ctx: CheckContext, answer: FinalAnswer[Refund]) -> GuardrailResult:
    return (
        GuardrailResult.trip("too much") if answer.output.amount > 100 else GuardrailResult.passed()
    )


guarded = Agent(
    "guarded",
    "Refund.",
    output=Refund,
    input_guardrails=[on_topic, Guardrail(on_topic, name="topic", beside=True)],
    output_guardrails=[under_limit],
)
assert_type(guarded, Agent[Refund, DefaultInput])


async def escalated(ctx: CheckContext, answer: FinalAnswer[Escalation]) -> GuardrailResult:
    return GuardrailResult.trip(answer.output.reason)


async def any_answer(ctx: CheckContext, answer: FinalAnswer[object]) -> GuardrailResult:
    return GuardrailResult.passed()  # fits an agent of any output type


async def polite(ctx: CheckContext, answer: FinalAnswer[None]) -> GuardrailResult:
    assert_type(answer.text, str)
    return GuardrailResult.passed()


# An output guardrail is given a FinalAnswer of the agent's output type.
Agent("refunds", "Refund.", output=Refund, output_guardrails=[under_limit, any_answer])
Agent("triage", "Triage.", output=one_of(Refund, Escalation), output_guardrails=[any_answer])
assert_type(Agent("polite", "Greet.", output_guardrails=[polite]), Agent[None, DefaultInput])
# E: List item 0 has incompatible type "Callable[[CheckContext, FinalAnswer[Escalation]], Coroutine[Any, Any, GuardrailResult]]"
Agent("refunds", "Refund.", output=Refund, output_guardrails=[escalated])
# E: List item 1 has incompatible type "Callable[[CheckContext, FinalAnswer[Refund]], Coroutine[Any, Any, GuardrailResult]]"
Agent("greeter", "Greet.", output_guardrails=[polite, under_limit])
# A Guardrail (a function with its name) is held to the same: it is typed by its function.
limit: Guardrail[Callable[[CheckContext, FinalAnswer[Refund]], Awaitable[GuardrailResult]]]
limit = Guardrail(under_limit, name="limit")
# E: Incompatible types in assignment (expression has type "Guardrail[Callable[[CheckContext, FinalAnswer[Refund]], Awaitable[GuardrailResult]]]", variable has type "Guardrail[Callable[[CheckContext, str], Awaitable[GuardrailResult]]]")
topic: Guardrail[Callable[[CheckContext, str], Awaitable[GuardrailResult]]] = limit
Agent("refunds", "Refund.", output=Refund, output_guardrails=[Guardrail(under_limit, name="l")])
Agent("refunds", "Refund.", output=Refund, output_guardrails=[Guardrail(any_answer)])
# E: Argument 1 to "Guardrail" has incompatible type "Callable[[CheckContext, FinalAnswer[Escalation]], Coroutine[Any, Any, GuardrailResult]]"; expected "Callable[[CheckContext, FinalAnswer[Refund]], Awaitable[GuardrailResult]]"
Agent("refunds", "Refund.", output=Refund, output_guardrails=[Guardrail(escalated, name="e")])
# E: Argument 1 to "Guardrail" has incompatible type "Callable[[CheckContext, str], Coroutine[Any, Any, GuardrailResult]]"; expected "Callable[[CheckContext, FinalAnswer[Refund]], Awaitable[GuardrailResult]]"
Agent("refunds", "Refund.", output=Refund, output_guardrails=[Guardrail(on_topic)])
# E: Argument 1 to "Guardrail" has incompatible type "Callable[[CheckContext, FinalAnswer[Refund]], Coroutine[Any, Any, GuardrailResult]]"; expected "Callable[[CheckContext, str], Awaitable[GuardrailResult]]"
Agent("refunds", "Refund.", output=Refund, input_guardrails=[Guardrail(under_limit, beside=True)])


async def streams(runtime: Runtime) -> None:
    async with runtime.stream_output(refunds, "Refund A-1") as updates:
        async for update in updates:
            assert_type(update, OutputUpdate[Refund])
            assert_type(update.output, Refund | None)
        assert_type(updates.result, RunResult[Refund])
    async with runtime.stream_output(triage, "Order A-1 arrived broken.") as choices:
        async for choice in choices:
            assert_type(choice.output, Refund | Escalation | None)
