"""Checks an author puts on a run's input and answer: output validators and guardrails.

* An **output validator** (``@agent.output_validator``, or ``Agent(output_validators=...)``) is a
  function given the decoded answer and a :class:`CheckContext`; it accepts the answer by
  returning, or rejects it by raising :class:`RejectOutput` with a message the model is sent (the
  answer is asked again, counted in ``AgentPolicy.output_retries``).
* A **guardrail** (``Agent(input_guardrails=..., output_guardrails=...)``) is an async function
  returning a :class:`GuardrailResult`: passed, or tripped with a reason. A trip ends the run with
  :class:`GuardrailTripped`; a guardrail that raises ends it with :class:`GuardrailFailed`.

The values here are what those functions are given and return, and the failures a run ends with;
the engine calls the functions (``engine._checks``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Generic, Literal, Protocol, TypeAlias

import attrs
from typing_extensions import TypeVar

from effectagent.effect import is_async_callable

from ._errors import RunError

if TYPE_CHECKING:
    from effectagent.ai import ModelRequest, ModelResponse

__all__ = [
    "CheckContext",
    "FinalAnswer",
    "Guardrail",
    "GuardrailFailed",
    "GuardrailResult",
    "GuardrailTripped",
    "InputGuardrailFunction",
    "OutputGuardrailFunction",
    "OutputValidator",
    "OutputValidatorFailed",
    "RejectOutput",
]

O = TypeVar("O", default=Any)  # noqa: E741
#: What a :class:`FinalAnswer` holds: covariant, so a guardrail of ``FinalAnswer[object]`` (or of
#: ``FinalAnswer[Any]``) guards an agent of any output type.
_Answer = TypeVar("_Answer", covariant=True, default=Any)

Stage = Literal["input", "output"]


class CheckContext(Protocol):
    """What a validator or a guardrail is given besides the value it checks: which run it checks,
    and the run's model to ask (:meth:`generate`) — whose usage (and cost) counts in the
    run's usage and budgets like a turn's."""

    @property
    def run_id(self) -> str: ...

    @property
    def conversation_id(self) -> str: ...

    @property
    def agent_name(self) -> str: ...

    @property
    def input(self) -> str:
        """The run's input text, redacted, as the model reads it: a typed input rendered, the
        text parts of an input with media (the media are not given)."""
        ...

    async def generate(self, request: ModelRequest) -> ModelResponse:
        """Ask the run's model ``request`` (whole, not streamed). Its usage is added to the run's
        as the check ends; a check over the run's budgets still runs to its end (the budgets are
        judged at the next turn, as for a turn's own call).

        Cancellation: a cancellation point; a cancelled call's usage is not known, not counted.
        """
        ...


class RejectOutput(Exception):
    """Raised by an output validator to reject the answer: ``message`` goes back to the model,
    which answers again (counted in ``AgentPolicy.output_retries``). Keep it free of secrets: it
    is redacted, and recorded as the engine's feedback."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def _tripped(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, bool):
        raise TypeError(f"GuardrailResult.tripped must be a bool, got {type(value).__name__}")


def _reason(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, str):
        raise TypeError(
            f"GuardrailResult.reason must be a str (a sentence), got {type(value).__name__}"
        )


@attrs.frozen
class GuardrailResult:
    """What a guardrail returns: :meth:`passed`, or :meth:`trip` with a reason (a sentence; it is
    redacted and recorded with the run's failure). ``tripped`` must be a bool and ``reason`` a
    str: anything else is a ``TypeError`` here, raised in the guardrail — which then fails its
    run closed (``GuardrailFailed``)."""

    tripped: bool = attrs.field(validator=_tripped)
    reason: str = attrs.field(default="", validator=_reason)

    @classmethod
    def passed(cls) -> GuardrailResult:
        """The check passed."""
        return _PASSED

    @classmethod
    def trip(cls, reason: str) -> GuardrailResult:
        """The check tripped: the run ends, for ``reason``."""
        return cls(True, reason)


_PASSED = GuardrailResult(False)


@attrs.frozen
class FinalAnswer(Generic[_Answer]):
    """What an output guardrail is given: the answer's ``text`` (redacted) and its ``output``
    (decoded into ``Agent.output``; None for an agent without one). In the tool output mode the
    answer is a ``final_result`` call: ``text`` is only what the model wrote beside it (often
    nothing), so judge ``output``."""

    text: str
    output: _Answer


#: An input guardrail: given the context and the run's input text.
InputGuardrailFunction: TypeAlias = Callable[[CheckContext, str], Awaitable[GuardrailResult]]
#: An output guardrail of an ``Agent[O]``: given the context and the final answer, a
#: ``FinalAnswer[O]`` (``FinalAnswer[None]`` for an agent without an output type).
OutputGuardrailFunction: TypeAlias = Callable[
    [CheckContext, FinalAnswer[O]], Awaitable[GuardrailResult]
]
#: An output validator: given the decoded answer and the context; returns (or its awaitable
#: does) to accept, raises :class:`RejectOutput` to reject.
OutputValidator: TypeAlias = Callable[[O, CheckContext], Awaitable[None] | None]


def _named(check: object) -> str:
    name = getattr(check, "__name__", None)
    return name if isinstance(name, str) else type(check).__name__


def _callable(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if not callable(value):
        raise TypeError(f"Guardrail.check must be an async function, got {type(value).__name__}")
    if not is_async_callable(value):  # it would fail every run it guards, when first awaited
        raise TypeError(
            f"Guardrail.check must be an async function (async def); {_named(value)} is not async"
        )


def _guardrail_name(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, str):
        raise TypeError(f"Guardrail.name must be a str, got {type(value).__name__}")
    if not value.strip():
        raise ValueError("Guardrail.name must not be empty: a trip names its guardrail")


def _beside(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, bool):
        raise TypeError(f"Guardrail.beside must be a bool, got {type(value).__name__}")


#: A guardrail's function, as :class:`Guardrail` is typed by it: ``Guardrail(on_topic)`` is a
#: ``Guardrail`` of ``on_topic``'s type, so ``Agent`` holds the function it wraps to what an input
#: guardrail (or an output guardrail of its output type) is given, as it holds a bare function.
_Check = TypeVar(
    "_Check",
    bound=Callable[..., Awaitable[GuardrailResult]],
    covariant=True,
    default=Callable[..., Awaitable[GuardrailResult]],
)


@attrs.frozen
class Guardrail(Generic[_Check]):
    """A guardrail function with its ``name`` (what a trip names; the function's by default)
    and, for an input guardrail, whether it runs ``beside`` the first model call instead of
    before it: then the call starts at once, and a trip cancels it — nothing it produced is
    recorded or shown (its deltas are held until every guardrail beside it passed).

    Typing: a ``Guardrail`` is typed by its function, and ``Agent`` holds that function to what
    it will be given — ``(CheckContext, str)`` for an input guardrail, ``(CheckContext,
    FinalAnswer[O])`` for an output guardrail of an ``Agent[O]`` — as it holds a bare one."""

    check: _Check = attrs.field(validator=_callable)
    name: str = attrs.field(
        default=attrs.Factory(lambda self: _named(self.check), takes_self=True),
        validator=_guardrail_name,
    )
    beside: bool = attrs.field(default=False, kw_only=True, validator=_beside)


def guardrails(value: object, where: str) -> tuple[Guardrail, ...]:
    """``value`` (a list or tuple of guardrail functions or :class:`Guardrail` s) as a tuple of
    Guardrails; ``TypeError`` naming ``where`` for anything else."""
    if not isinstance(value, list | tuple):
        raise TypeError(
            f"{where} must be a list or tuple of guardrails, got {type(value).__name__}"
        )
    result: list[Guardrail] = []
    for item in value:
        if isinstance(item, Guardrail):
            result.append(item)
        elif callable(item):
            result.append(Guardrail(item))
        else:
            raise TypeError(
                f"{where} must hold async functions or Guardrail values, got {type(item).__name__}"
            )
    seen: set[str] = set()
    for guardrail in result:  # a trip names its guardrail: two of one name could not be told apart
        if guardrail.name in seen:
            raise ValueError(
                f"{where} holds two guardrails named {guardrail.name!r}: give one another name "
                "(Guardrail(fn, name=...))"
            )
        seen.add(guardrail.name)
    return tuple(result)


@attrs.frozen
class GuardrailTripped(RunError):
    """A guardrail tripped: the run ended there, before a tool ran (an input guardrail) or the
    answer was delivered (an output guardrail). ``reason`` is the guardrail's (redacted)."""

    guardrail: str
    stage: Stage
    reason: str

    def __str__(self) -> str:
        return f"the {self.stage} guardrail {self.guardrail} tripped: {self.reason}"


@attrs.frozen
class GuardrailFailed(RunError):
    """A guardrail raised instead of returning a result (or returned something else): the run
    ended, failed closed. ``error_type`` names what it raised — never its message, which may hold
    what the guardrail was checking."""

    guardrail: str
    stage: Stage
    error_type: str

    def __str__(self) -> str:
        return (
            f"the {self.stage} guardrail {self.guardrail} failed ({self.error_type}), so the run "
            "was stopped"
        )


@attrs.frozen
class OutputValidatorFailed(RunError):
    """An output validator raised something other than :class:`RejectOutput`: the run ended.
    ``error_type`` names what it raised (its message is not kept)."""

    validator: str
    error_type: str

    def __str__(self) -> str:
        return f"the output validator {self.validator} failed ({self.error_type})"
