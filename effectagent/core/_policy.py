"""AgentPolicy and the agent definition. Bad values fail at construction with a clear message.

Every field has an attrs validator, so the error names the field (``AgentPolicy.max_turns``): a
value of the wrong type is a ``TypeError`` that says the type it needs (a ``bool`` is never taken
for a number), a value of the right type that cannot work a ``ValueError``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from decimal import Decimal, InvalidOperation
from typing import TYPE_CHECKING, Any, Generic, Literal, overload

import attrs
from typing_extensions import TypeVar

from effectagent.ai import (
    DEFAULT_MAX_RESPONSE_BYTES,
    DEFAULT_MAX_TOOL_ARGUMENT_BYTES,
    ModelChoice,
    ModelKey,
    PromptCaching,
    Toolkit,
    ToolSource,
)
from effectagent.effect import SchemaDerivationError, ServiceKey, json_schema

from ._authoring import (
    DefaultInput,
    InstructionsFunction,
    PrepareContextFunction,
    check_function,
    check_input,
    check_instructions,
    check_instructions_per,
    check_services,
    service_keys,
)
from ._checks import Guardrail, OutputValidator, guardrails
from ._one_of import OneOf, final_result_names

__all__ = [
    "Agent",
    "AgentPolicy",
    "ChildBudget",
    "CompactionPolicy",
    "ResponseLimits",
    "RetryPolicy",
    "ToolResultBounds",
    "check_model_choice",
]

MIN_RESULT_BYTES = 256

#: The type of an agent's structured output: ``None`` for an agent without one. A bare ``Agent``
#: annotation means ``Agent[Any]``: an agent of any output type.
OutputT = TypeVar("OutputT", covariant=True, default=Any)
T = TypeVar("T", default=None)  # ``Agent(...)`` without an output type is an ``Agent[None]``
#: The type of a run's input (``Agent(input=Query)``): a bare ``Agent`` annotation, or
#: ``Agent[Forecast]``, takes an agent of any input type.
InputT = TypeVar("InputT", default=Any)
In = TypeVar("In", default=DefaultInput)  # ``Agent(...)`` without ``input=`` takes its text

V = TypeVar("V")

if TYPE_CHECKING:
    from ._checks import InputGuardrailFunction, OutputGuardrailFunction

_Validator = Callable[[Any, "attrs.Attribute[Any]", Any], None]


def _shown(value: object) -> str:
    text = repr(value)
    if len(text) > 60:
        text = f"{text[:56]}...{text[-1]}"
    return f"{type(value).__name__} {text}"


def _article(noun: str) -> str:
    return f"an {noun}" if noun[:1] in "AEIOUaeiou" else f"a {noun}"


def _where(instance: object, attribute: attrs.Attribute[Any]) -> str:
    return f"{type(instance).__name__}.{attribute.name}"


def _integer(minimum: int, what: str, *, optional: bool = False) -> _Validator:
    """An int (not a bool) of at least ``minimum``; ``what`` says so in the messages."""
    needs = f"{what} or None" if optional else what

    def check(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
        if value is None and optional:
            return
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(
                f"{_where(instance, attribute)} must be {needs} (an int), got {_shown(value)}"
            )
        if value < minimum:
            raise ValueError(f"{_where(instance, attribute)} must be {needs}, got {value!r}")

    return check


def _number(what: str, accepts: Callable[[float], bool]) -> _Validator:
    """An int or float (not a bool) that ``accepts`` takes; ``what`` says what it must be."""

    def check(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise TypeError(
                f"{_where(instance, attribute)} must be {what} (an int or float), "
                f"got {_shown(value)}"
            )
        if not accepts(value):
            raise ValueError(f"{_where(instance, attribute)} must be {what}, got {value!r}")

    return check


def _positive(value: float) -> bool:
    return value > 0  # False for NaN


_SECONDS = _number("a positive number of seconds", _positive)
# A wait whose end is recorded (an approval request's ``expires_at``) must end: JSON has no
# infinity, so a durable log could not keep the request.
_FINITE_SECONDS = _number("a positive, finite number of seconds", lambda v: 0 < v < math.inf)


def _to_dollars(given: Decimal | int | float | str | None) -> object:
    """A number of dollars as an exact Decimal (a float by its shortest repr: ``0.5`` is 0.5);
    anything else as it came, for the validator to name. (The parameter's type is what mypy
    holds a ``cost_budget`` argument to; at run time anything may come.)"""
    value: object = given
    if isinstance(value, bool) or not isinstance(value, int | float | str | Decimal):
        return value
    try:
        return Decimal(repr(value)) if isinstance(value, float) else Decimal(value)
    except InvalidOperation:
        return value


#: Above any budget in US dollars (a price is under it too): past it a figure means nothing, and
#: one of the largest exponents a Decimal takes overflows as it is counted in micro-dollars.
_MOST_DOLLARS = Decimal("1E+16")


def _dollars_or_none(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if value is None:
        return
    if not isinstance(value, Decimal):
        raise TypeError(
            f"{_where(instance, attribute)} must be a number of US dollars (a Decimal, int, str "
            f"or float) or None, got {_shown(value)}"
        )
    if not value.is_finite() or value < Decimal("0.000001"):
        raise ValueError(
            f"{_where(instance, attribute)} must be at least one micro-dollar (0.000001), "
            f"got {value}"
        )
    if value >= _MOST_DOLLARS:  # no budget means it; and ``1E+999999`` has no micro-dollars
        raise ValueError(
            f"{_where(instance, attribute)} must be under {_MOST_DOLLARS} US dollars, got {value}"
        )


def _number_or_none(what: str, accepts: Callable[[float], bool]) -> _Validator:
    number = _number(what, accepts)

    def check(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
        if value is not None:
            number(instance, attribute, value)

    return check


def _choice(*choices: str) -> _Validator:
    shown = " or ".join(repr(choice) for choice in choices)

    def check(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
        if not isinstance(value, str):
            raise TypeError(f"{_where(instance, attribute)} must be {shown}, got {_shown(value)}")
        if value not in choices:
            raise ValueError(f"{_where(instance, attribute)} must be {shown}, got {value!r}")

    return check


def _instance(kind: type) -> _Validator:
    def check(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
        if not isinstance(value, kind):
            raise TypeError(
                f"{_where(instance, attribute)} must be {_article(kind.__name__)}, "
                f"got {_shown(value)}"
            )

    return check


def _as_tuple(value: object, where: str) -> tuple[Any, ...]:
    # A list or tuple: the order decides which source keeps a name two of them offer.
    if not isinstance(value, list | tuple):
        raise TypeError(f"{where} must be a list or tuple of ServiceKeys, got {_shown(value)}")
    return tuple(value)


def _tool_source_keys(value: object) -> tuple[ServiceKey[ToolSource], ...]:
    return _as_tuple(value, "Agent.tool_sources")


def _service_keys(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    assert isinstance(value, tuple)
    for key in value:
        if not isinstance(key, ServiceKey):
            raise TypeError(
                f"{_where(instance, attribute)} must hold ServiceKeys of tool sources, "
                f"got {_shown(key)}"
            )
    if len(set(value)) != len(value):
        raise ValueError(f"{_where(instance, attribute)} names a tool source more than once")


@attrs.frozen
class ToolResultBounds:
    """How large a tool result may be in model context and records (RUN-022).

    Larger results become a truncation marker holding the original size, a head and a tail.
    ``max_bytes`` is at least 256. ``head_bytes`` and ``tail_bytes`` (None: an even share of the
    room the marker leaves) are upper bounds: the marker always fits in ``max_bytes``, so a head
    is cut to that room, and the tail to what the head leaves of it.
    """

    max_bytes: int = attrs.field(
        default=50 * 1024, validator=_integer(MIN_RESULT_BYTES, f"an integer >= {MIN_RESULT_BYTES}")
    )
    head_bytes: int | None = attrs.field(
        default=None, validator=_integer(0, "a non-negative integer", optional=True)
    )
    tail_bytes: int | None = attrs.field(
        default=None, validator=_integer(0, "a non-negative integer", optional=True)
    )


@attrs.frozen
class ResponseLimits:
    """How large one model response may be, in UTF-8 bytes, counted while it streams.

    ``max_response_bytes`` (4 MiB by default) bounds the whole response: its text, reasoning,
    tool calls (IDs, names, arguments) and a few bytes for each block or call it opens. The
    response is stopped the moment it grows past it, and the attempt fails with
    ``ResponseTooLarge`` (not retried): the run ends with ``ModelFailed`` naming the limit.

    ``max_tool_argument_bytes`` (256 KiB by default, the size the tools' argument decoder takes)
    bounds each tool call's argument text. A call whose arguments grow past it is not kept whole
    (only a short head is) and never runs: it settles as ``ToolInvalidInput`` ("arguments of …
    exceed the limit of …; not executed"), and the record and the next request hold a marker with
    the call's size and the head of its arguments, never the text itself. Raising it also raises
    what the argument decoder accepts.
    """

    max_response_bytes: int = attrs.field(
        default=DEFAULT_MAX_RESPONSE_BYTES, validator=_integer(1, "a positive integer")
    )
    max_tool_argument_bytes: int = attrs.field(
        default=DEFAULT_MAX_TOOL_ARGUMENT_BYTES, validator=_integer(1, "a positive integer")
    )


@attrs.frozen
class CompactionPolicy:
    """What a run asks of its Compactor when the context exceeds ``context_token_limit``.

    The engine only estimates the context and asks; the Compactor decides what to compact. It gets
    ``strategy`` — prune old tool results and then, if still too large, summarize
    (``"prune-then-summarize"``), or prune only — and ``keep_recent_tokens``, the most recent part
    of the conversation to leave as it is.
    """

    keep_recent_tokens: int = attrs.field(
        default=20_000, validator=_integer(0, "a non-negative integer")
    )
    strategy: Literal["prune-then-summarize", "prune-only"] = attrs.field(
        default="prune-then-summarize", validator=_choice("prune-then-summarize", "prune-only")
    )


@attrs.frozen
class RetryPolicy:
    """How a model call that failed with a retryable error (``AiError.is_retryable``) is retried.

    Up to ``attempts`` calls in all (1: no retry). The wait before retry *n* (1-based) is
    ``min(max_delay, initial_delay * multiplier ** (n - 1))``, scaled by a random factor in
    ``[1 - jitter, 1]``; a provider's ``retry_after`` is honoured when it is longer (up to an
    hour: one asking for more is not waited for, the run fails with its error). No wait
    reaches past the run's deadline: a retry that cannot happen in time is not attempted.
    """

    attempts: int = attrs.field(default=3, validator=_integer(1, "a positive integer"))
    initial_delay: float = attrs.field(
        default=1.0, validator=_number("a positive number", _positive)
    )
    max_delay: float = attrs.field(default=30.0, validator=_number("a positive number", _positive))
    multiplier: float = attrs.field(
        default=2.0, validator=_number("at least 1", lambda value: value >= 1)
    )
    jitter: float = attrs.field(
        default=0.2, validator=_number("in [0, 1)", lambda value: 0 <= value < 1)
    )


@attrs.frozen
class AgentPolicy:
    """Limits and behaviour of a run; every field has a finite, conservative default.

    The four main limits default to what suits an interactive agent, so ``AgentPolicy()`` (and an
    ``Agent`` given no policy) can never run away: ``max_turns=20`` model calls,
    ``max_tool_calls=64`` tool calls, ``max_duration=600`` seconds of wall time (room for one
    approval wait of the default 300 s), and ``tool_concurrency=4`` calls at once. Raise them for
    long autonomous tasks; each one that runs out is a budget exhaustion (below), never a hang.

    ``on_exhaustion``: ``"final-answer"`` admits exactly one grace turn with tool choice ``"none"``
    when a budget runs out, and the run ends with finish reason ``"budget-exhausted"``; ``"fail"``
    ends the run with a failure naming the dimension.

    ``max_output_tokens`` is sent with every model request as its output cap; None (the default)
    sends the model adapter's own, which every adapter has (the providers' adapters pick one that
    fits the model: see the providers guide). ``response_limits`` bound each response in bytes as
    it streams (:class:`ResponseLimits`): an endless or oversized response is stopped there.

    ``max_duration`` is the run's whole wall time, grace turn included: a run ends within it (plus
    the few milliseconds of writing its end). Under ``"final-answer"`` the turns stop
    :attr:`grace_reserve` seconds before it (``min(grace_turn_duration, max_duration / 10)``), so
    that the grace turn has that long; a grace turn that a count started earlier lasts at most
    ``grace_turn_duration`` and never past ``max_duration`` either. A grace turn that runs out of
    time ends the run with ``BudgetExhausted``. ``max_duration=math.inf`` takes the time limit
    away (the policy is never recorded; a ``RunAllowance``'s, recorded with the run's input as
    JSON, must be finite); the other limits still bound the run.

    ``cost_budget`` (US dollars, exact: a ``Decimal``, ``int``, ``str``, or a ``float`` read as
    written; at least a micro-dollar, under 1E+16 dollars) limits what the run's model calls cost — its subagents' included — at the prices of
    the runtime's price table (``effectagent.ai.PricesService``, else the shipped
    ``DEFAULT_PRICES``); it runs out like the other budgets, and one whose models have no price
    is refused before the run starts (``NoPriceForModel``). ``prompt_caching`` asks the provider
    to cache the prompt's stable part (``effectagent.ai.PromptCaching``; None, the default,
    asks nothing).
    """

    max_turns: int = attrs.field(default=20, validator=_integer(1, "a positive integer"))
    max_tool_calls: int = attrs.field(default=64, validator=_integer(1, "a positive integer"))
    max_duration: float = attrs.field(default=600.0, validator=_SECONDS)
    tool_concurrency: int = attrs.field(default=4, validator=_integer(1, "a positive integer"))
    repeated_failure_limit: int = attrs.field(
        default=3, validator=_integer(1, "a positive integer")
    )
    on_exhaustion: Literal["final-answer", "fail"] = attrs.field(
        default="final-answer", validator=_choice("final-answer", "fail")
    )
    tool_result_bounds: ToolResultBounds = attrs.field(
        default=ToolResultBounds(), validator=_instance(ToolResultBounds)
    )
    compaction: CompactionPolicy = attrs.field(
        default=CompactionPolicy(), validator=_instance(CompactionPolicy)
    )
    token_budget: int | None = attrs.field(
        default=None, validator=_integer(1, "a positive integer", optional=True)
    )
    context_token_limit: int | None = attrs.field(
        default=None, validator=_integer(1, "a positive integer", optional=True)
    )
    approval_timeout: float = attrs.field(default=300.0, validator=_FINITE_SECONDS)
    grace_turn_duration: float = attrs.field(default=30.0, validator=_SECONDS)
    #: How many times a final answer that does not decode into ``Agent.output`` goes back to the
    #: model with the decoder's message (each attempt is a turn, counted in the budgets).
    output_retries: int = attrs.field(default=2, validator=_integer(0, "a non-negative integer"))
    #: How a model call that failed with a retryable error is retried.
    model_retry: RetryPolicy = attrs.field(default=RetryPolicy(), validator=_instance(RetryPolicy))
    warning_ratio: float = attrs.field(
        default=0.8,
        validator=_number("a fraction between 0 and 1 (exclusive)", lambda value: 0 < value < 1),
    )
    #: The output cap of each model request, in tokens (None: the model adapter's default).
    max_output_tokens: int | None = attrs.field(
        default=None, validator=_integer(1, "a positive integer", optional=True)
    )
    #: How large one model response may be, in bytes (see :class:`ResponseLimits`).
    response_limits: ResponseLimits = attrs.field(
        default=ResponseLimits(), validator=_instance(ResponseLimits)
    )

    #: The most the run's model calls may cost, in US dollars (see :attr:`cost_budget_micros`).
    cost_budget: Decimal | None = attrs.field(
        default=None, converter=_to_dollars, validator=_dollars_or_none
    )
    #: What each request asks the provider to cache (None: nothing; see ``PromptCaching``).
    prompt_caching: PromptCaching | None = attrs.field(
        default=None, validator=attrs.validators.optional(_instance(PromptCaching))
    )
    #: Whether each model request ends with a short note of what the run has left — turns, tool
    #: calls, tokens, cost and time (derived from the budget, never recorded: see the engine
    #: guide's "Run status note").
    status_note: bool = attrs.field(default=False, validator=_instance(bool))

    @property
    def cost_budget_micros(self) -> int | None:
        """``cost_budget`` in micro-dollars (rounded down: the limit is never above what was
        given), or None."""
        budget = self.cost_budget
        return None if budget is None else int(budget.scaleb(6))

    @property
    def grace_reserve(self) -> float:
        """Seconds at the end of ``max_duration`` kept for the grace turn: ``min(
        grace_turn_duration, max_duration / 10)`` under ``"final-answer"``, 0 under ``"fail"``
        and without a time limit (``max_duration=math.inf``: nothing to keep back from, and an
        infinite reserve would make the turns' deadline ``inf - inf``, not a number)."""
        if self.on_exhaustion == "fail" or self.max_duration == math.inf:
            return 0.0
        return min(self.grace_turn_duration, self.max_duration / 10)


def _name(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, str):
        raise TypeError(f"Agent.name must be a str, got {_shown(value)}")
    if not value.strip():
        raise ValueError("Agent.name must not be empty")


def _output(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    """The output type must have a JSON Schema, and that schema must be an object: the schema is
    what the model is asked for, and providers' native structured output (OpenAI's
    ``json_schema`` response format, Anthropic's) takes an object at the top — wrap a list or a
    scalar in a class with one field."""
    if value is None or isinstance(value, OneOf):  # one_of(...) checked its members
        return
    try:
        schema = json_schema(value)
    except SchemaDerivationError as exc:
        raise SchemaDerivationError(f"Agent.output: {exc}") from None
    if schema.get("type") != "object":
        raise TypeError(
            "Agent.output must be a type whose JSON Schema is an object (an attrs class, a "
            "dataclass, a TypedDict or dict[str, T]) — it is what the model is asked to answer "
            f"with — got {value!r}; wrap it in a class with one field"
        )


def _model_choice(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    check_model_choice(value, _where(instance, attribute))


def check_model_choice(value: object, where: str) -> None:
    """Refuse what is not a model string (``"<provider>:<model>"``), a :class:`ModelKey` or None
    (``where`` names the argument): ``TypeError`` or ``ValueError`` with a sentence."""
    if value is None or isinstance(value, ModelKey):
        return
    if not isinstance(value, str):
        raise TypeError(
            f"{where} must be a model string such as 'openai:gpt-4.1', a ModelKey or None, "
            f"got {_shown(value)}"
        )
    provider, colon, name = value.partition(":")
    if not colon or not provider.strip() or not name.strip():
        raise ValueError(
            f"{where} must be a model string such as 'openai:gpt-4.1' (a provider, a colon, a "
            f"model) or a ModelKey, got {value!r}"
        )


def _validators(value: object) -> tuple[Any, ...]:
    if not isinstance(value, list | tuple):
        raise TypeError(f"Agent.output_validators must be a list or tuple, got {_shown(value)}")
    for item in value:
        if not callable(item):
            raise TypeError(f"Agent.output_validators must hold functions, got {_shown(item)}")
    return tuple(value)


_native_or_tool = _choice("native", "tool")


def _output_mode(instance: Any, attribute: attrs.Attribute[Any], value: object) -> None:
    """The tool output mode needs an output type, and no tool of the agent's toolkit may have
    the name of its final_result tool(s)."""
    _native_or_tool(instance, attribute, value)
    if value != "tool":
        return
    if instance.output is None:
        raise ValueError(
            "Agent.output_mode='tool' needs an output type (Agent.output): its answer is a call "
            "of a final_result tool whose parameters are that type's schema"
        )
    for name in final_result_names(instance.output):
        if name in instance.toolkit.names:
            raise ValueError(
                f"Agent.output_mode='tool' gives the answer as a call of a tool named {name!r}, "
                "and the agent's toolkit has a tool of that name: rename the tool"
            )


def _input_guardrails(value: object) -> tuple[Guardrail, ...]:
    return guardrails(value, "Agent.input_guardrails")


def _output_guardrails(value: object) -> tuple[Guardrail, ...]:
    checks = guardrails(value, "Agent.output_guardrails")
    if any(check.beside for check in checks):
        raise ValueError("Agent.output_guardrails: beside=True is for input guardrails only")
    return checks


@attrs.frozen
class _AgentFields(Generic[OutputT, InputT]):
    """The fields of :class:`Agent`, their validators and attrs' ``__init__``. They live in a base
    class so that ``Agent`` can give mypy its constructor's type (a ``__new__``, seen by mypy
    only): mypy takes a class's ``__init__`` over a ``__new__`` of the same class, but the
    ``__new__`` of a subclass over an inherited ``__init__``. Replacing attrs' ``__init__``
    instead would lose ``attrs.evolve``'s checks."""

    name: str = attrs.field(validator=_name)
    instructions: str | InstructionsFunction[InputT] = attrs.field(validator=check_instructions)
    policy: AgentPolicy = attrs.field(factory=AgentPolicy, validator=_instance(AgentPolicy))
    toolkit: Toolkit = attrs.field(factory=Toolkit, validator=_instance(Toolkit))
    output: type[OutputT] | None = attrs.field(default=None, validator=_output)
    tool_sources: tuple[ServiceKey[ToolSource], ...] = attrs.field(
        default=(), converter=_tool_source_keys, validator=_service_keys
    )
    model: ModelChoice | None = attrs.field(default=None, kw_only=True, validator=_model_choice)
    grace_model: ModelChoice | None = attrs.field(
        default=None, kw_only=True, validator=_model_choice
    )
    summary_model: ModelChoice | None = attrs.field(
        default=None, kw_only=True, validator=_model_choice
    )
    # How the answer is given and checked (see ``_checks`` and the engine guide).
    output_mode: Literal["native", "tool"] = attrs.field(
        default="native", kw_only=True, validator=_output_mode
    )
    output_validators: tuple[OutputValidator[Any], ...] = attrs.field(
        default=(), kw_only=True, converter=_validators
    )
    input_guardrails: tuple[Guardrail, ...] = attrs.field(
        default=(), kw_only=True, converter=_input_guardrails
    )
    output_guardrails: tuple[Guardrail, ...] = attrs.field(
        default=(), kw_only=True, converter=_output_guardrails
    )
    # Set as a runtime first uses the agent: validators are registered before that.
    _sealed: bool = attrs.field(default=False, init=False, eq=False, repr=False)
    # Authoring (see ``_authoring``): a typed run input, computed instructions, a per-turn hook.
    input: type[InputT] | None = attrs.field(default=None, kw_only=True, validator=check_input)
    input_renderer: Callable[[InputT], str] | None = attrs.field(
        default=None, kw_only=True, validator=check_function
    )
    services: tuple[ServiceKey[Any], ...] = attrs.field(
        default=(), kw_only=True, converter=service_keys, validator=check_services
    )
    instructions_per: Literal["run", "turn"] = attrs.field(
        default="run", kw_only=True, validator=check_instructions_per
    )
    prepare_context: PrepareContextFunction[InputT] | None = attrs.field(
        default=None, kw_only=True, validator=check_function
    )


# attrs' ``__init__`` is the constructor a user calls as ``Agent(...)``: a missing or unknown
# argument is named as Agent's, not as this private base's.
_AgentFields.__init__.__qualname__ = "Agent"


class Agent(_AgentFields[OutputT, InputT]):
    """An agent definition: name, instructions, policy, toolkit and optional output type.

    ``policy`` defaults to ``AgentPolicy()`` (finite limits, see there), ``toolkit`` to no tools.
    ``tool_sources`` are service keys of :class:`~effectagent.ai.ToolSource` s whose tools join the
    toolkit's for each turn (taken once per turn; a tool whose name the toolkit or an earlier
    source already has is left out, with a warning in the logs).
    ``output``, when given, is the type the final answer must decode into: a type whose JSON
    Schema is an object (an attrs class, a dataclass, a ``TypedDict``), checked here — a type
    without a schema raises ``SchemaDerivationError`` (a ``TypeError``) naming ``Agent.output``.
    Every other argument of the wrong type is a ``TypeError`` naming it.

    Typing: ``Agent(..., output=Forecast)`` is an ``Agent[Forecast]``, and
    ``runtime.run(agent, ...)`` gives it a ``RunResult[Forecast]``; an agent without an output
    type is an ``Agent[None]`` (its answer is ``RunResult.text``; ``RunResult.output`` is None).
    A bare ``Agent`` annotation accepts an agent of any output type.

    ``input``, when given, is the type a run's input is (``Agent[Answer, Query]``:
    ``runtime.run(agent, Query(...))``; strict mypy refuses a str for it): a type whose JSON
    Schema is an object. A run's input is checked against it before anything is recorded, and the
    model reads it rendered — as JSON, or by ``input_renderer`` (a function of the value, returning
    a str that is not blank). Without ``input`` a run takes a str (``Agent[Answer, str]``; a bare ``Agent`` or
    ``Agent[Answer]`` annotation takes an agent of any input type).

    ``instructions`` may be an async function of an
    :class:`~effectagent.core.InstructionsContext` (the run's input, IDs, principal and the
    services named in ``services``, which preflight requires) returning the instructions: computed
    once per run, or before every turn with ``instructions_per="turn"``, and recorded with the run
    (``InstructionsRecorded``). ``prepare_context`` is an async function of a
    :class:`~effectagent.core.TurnContext` called before each turn's request: it may add context
    items and change the prompt that one request sends (:class:`~effectagent.core.PreparedContext`).

    ``model`` names the model the agent's turns ask: a model string (``"openai:gpt-4.1"``, opened
    by the runtime) or a :class:`~effectagent.ai.ModelKey` the runtime's Layer provides; None (the
    default) is the runtime's model, the ``LanguageModelService``. ``grace_model`` is the model of
    the grace turn after a budget ran out, ``summary_model`` the model of compaction's summary
    call; None for either is the agent's model. A run may name another model for itself
    (``runtime.run(agent, text, model=...)``). Preflight checks every one of them, and those of
    the agents its subagents run.

    The answer (see the engine guide): ``output`` may be :func:`~effectagent.core.one_of` several
    types (an ``Agent[A | B]``); ``output_mode="tool"`` gives it as a call of a synthetic
    ``final_result`` tool instead of JSON text (it needs an output type, and no toolkit tool of
    that name). ``output_validators`` (and :meth:`output_validator`) check the decoded answer and
    may send it back; ``input_guardrails`` (before or beside the first model call) and
    ``output_guardrails`` (on the final answer) may end the run — async functions or
    :class:`~effectagent.core.Guardrail` values.
    """

    __slots__ = ()

    @overload
    def output_validator(  # type: ignore[overload-overlap]
        self: Agent[None], validator: OutputValidator[str]
    ) -> OutputValidator[str]: ...
    @overload
    def output_validator(self: Agent[V], validator: OutputValidator[V]) -> OutputValidator[V]: ...
    def output_validator(self, validator: OutputValidator[Any]) -> OutputValidator[Any]:
        """Register ``validator`` (a decorator): ``@agent.output_validator`` over an async (or
        plain) function of the decoded answer — the answer's text for an agent without an output
        type — and a :class:`~effectagent.core.CheckContext`. It accepts the answer by returning
        and rejects it by raising :class:`~effectagent.core.RejectOutput`; validators run in
        registration order, after ``Agent(output_validators=...)``. Returns ``validator``.

        The agent stays a frozen value for everything a run reads: registering is allowed only
        until a runtime first uses the agent (``RuntimeError`` after), so every run of it sees
        the same validators. ``attrs.evolve`` makes an agent that may register again.
        """
        if not callable(validator):
            raise TypeError(f"output_validator takes a function, got {_shown(validator)}")
        if self._sealed:
            raise RuntimeError(
                f"agent {self.name!r} has been used by a runtime: register its output validators "
                "before its first run (or give them as Agent(output_validators=...))"
            )
        object.__setattr__(self, "output_validators", (*self.output_validators, validator))
        return validator

    def seal(self) -> None:
        """Close the agent to :meth:`output_validator` (the runtime calls it as it first uses
        the agent). Idempotent."""
        object.__setattr__(self, "_sealed", True)

    if TYPE_CHECKING:  # the constructor's type, for mypy; at run time attrs' __init__ is all
        # ``T`` defaults to None: an agent given no output type is an ``Agent[None]``.

        def __new__(
            cls,
            name: str,
            instructions: str | InstructionsFunction[In],
            policy: AgentPolicy = ...,
            toolkit: Toolkit = ...,
            output: type[T] | OneOf[T] | None = None,
            tool_sources: tuple[ServiceKey[ToolSource], ...] | list[ServiceKey[ToolSource]] = (),
            *,
            model: ModelChoice | None = None,
            grace_model: ModelChoice | None = None,
            summary_model: ModelChoice | None = None,
            output_mode: Literal["native", "tool"] = "native",
            output_validators: Sequence[OutputValidator[T]] = (),
            input_guardrails: Sequence[
                Guardrail[InputGuardrailFunction] | InputGuardrailFunction
            ] = (),
            output_guardrails: Sequence[
                Guardrail[OutputGuardrailFunction[T]] | OutputGuardrailFunction[T]
            ] = (),
            input: type[In] | None = None,
            input_renderer: Callable[[In], str] | None = None,
            services: tuple[ServiceKey[Any], ...] | list[ServiceKey[Any]] = (),
            instructions_per: Literal["run", "turn"] = "run",
            prepare_context: PrepareContextFunction[In] | None = None,
        ) -> Agent[T, In]: ...


@attrs.frozen
class ChildBudget:
    """What an attached child run (a subagent) may use: carved out of its parent run's remaining
    budgets when the child starts, and what it did not use given back when it ends.

    ``turns`` and ``tool_calls`` are counts (a child with no tools is given no tool calls, and
    needs none of its parent's; ``tool_calls=0`` gives a child that has tools none, and it is
    refused); ``tokens`` (input plus output, the child's
    ``token_budget``) and ``duration`` (seconds of wall time) are optional — None takes the
    child agent's own policy. The child gets the least of this, its own policy and what the parent
    has left (of its time: until its turns stop, its grace reserve before its ``max_duration``);
    a parent with nothing left of a dimension refuses the child. Bad values fail here
    with a message naming the field.

    Turns, tool calls and time are hard limits for the child. Tokens are counted once a model
    call has answered, so, like any run, a child may pass its ``tokens`` by the answer that
    crossed it, and then (under ``"final-answer"``) by its grace turn's answer: the parent is
    charged what the child used, all of it.
    """

    turns: int = attrs.field(default=5, validator=_integer(1, "a positive integer"))
    tool_calls: int = attrs.field(default=10, validator=_integer(0, "a non-negative integer"))
    tokens: int | None = attrs.field(
        default=None, validator=_integer(1, "a positive integer", optional=True)
    )
    duration: float | None = attrs.field(
        default=None,
        validator=_number_or_none("a positive number of seconds", _positive),
    )
