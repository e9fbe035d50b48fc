"""What an author may give an agent besides fixed text: a typed run input, instructions computed
per run or per turn, and a hook that prepares each turn's context (``Agent(input=...,
instructions=fn, prepare_context=fn)``).

The values here are what those functions are given and return, and the failures a run ends with
when one of them goes wrong. The engine calls the functions (``engine._authoring``); this module
holds no behaviour beyond checks.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Generic, TypeAlias

import attrs
from typing_extensions import TypeVar

from effectagent.ai import (
    AssistantMessage,
    MediaPart,
    Message,
    SystemMessage,
    ToolMessage,
    UserMessage,
)
from effectagent.effect import SchemaDerivationError, ServiceKey, is_async_callable, json_schema

from ._errors import RunError
from ._records import ContextItem

__all__ = [
    "DefaultInput",
    "InstructionsContext",
    "InstructionsFailed",
    "MAX_INSTRUCTIONS_BYTES",
    "MAX_PREPARED_BYTES",
    "MAX_PREPARED_ITEMS",
    "PrepareContextFailed",
    "PreparedContext",
    "TurnContext",
]

#: What a run of an agent given no ``input=`` type takes: its text — or a sequence of text and
#: media parts (``["What is in this picture?", ImagePart.from_path("cat.png")]``). (The one place
#: that says it: ``Agent(...)`` without ``input=`` is an agent of this input type.)
DefaultInput: TypeAlias = str | Sequence[str | MediaPart]

#: The most UTF-8 bytes instructions a function computed may have (256 KiB): longer ones fail the
#: run (:class:`InstructionsFailed`), never sent cut.
MAX_INSTRUCTIONS_BYTES = 256 * 1024
#: The most context items one ``prepare_context`` call may add (16). More fails the run
#: (:class:`PrepareContextFailed`); nothing is dropped silently.
MAX_PREPARED_ITEMS = 16
#: The most UTF-8 bytes the items of one ``prepare_context`` call may hold in all, as the model
#: reads them (64 KiB). More fails the run (:class:`PrepareContextFailed`), never cut.
MAX_PREPARED_BYTES = 64 * 1024

InputT = TypeVar("InputT", covariant=True, default=Any)
S = TypeVar("S")


@attrs.frozen(kw_only=True)
class InstructionsContext(Generic[InputT]):
    """What an instructions function (``Agent(instructions=fn)``) is given: the run's ``input``
    (decoded into ``Agent.input``, or its text), its ``run_id`` and ``conversation_id``, the
    principal it runs for (``author``), the ``turn`` about to start (1 for the first; per-run
    instructions see 1), and the services the agent declares (``Agent.services``), through
    :meth:`service`."""

    input: InputT
    run_id: str
    conversation_id: str
    author: str
    turn: int
    services: Mapping[ServiceKey[Any], Any] = attrs.field(repr=False)

    def service(self, key: ServiceKey[S]) -> S:
        """The service ``key`` names — one of those the agent declares in ``Agent.services``
        (preflight made sure the runtime has each). Any other key is a ``KeyError`` naming it."""
        try:
            return self.services[key]  # type: ignore[no-any-return]
        except KeyError:
            raise KeyError(
                f"the service {key.name!r} is not among the agent's declared services "
                "(Agent.services)"
            ) from None


@attrs.frozen(kw_only=True)
class TurnContext(InstructionsContext[InputT]):
    """What a ``prepare_context`` function is given: everything an instructions function is, and
    ``messages`` — the prompt as projected for this turn (the system message first; a copy: the
    log and the run's state are never changed through it) — and whether the turn is the ``grace``
    turn (tools off, after a budget ran out)."""

    messages: tuple[Message, ...]
    grace: bool = False


def _items(given: Sequence[ContextItem]) -> tuple[ContextItem, ...]:
    value: object = given  # what a hook returned: checked, not trusted
    if isinstance(value, str | bytes) or not isinstance(value, Sequence):
        raise TypeError(
            f"PreparedContext.items must be a sequence of ContextItem, got {type(value).__name__}"
        )
    for item in value:
        if not isinstance(item, ContextItem):
            raise TypeError(
                f"PreparedContext.items must hold ContextItem values, got {type(item).__name__}"
            )
    return tuple(value)


_MESSAGE_TYPES = (SystemMessage, UserMessage, AssistantMessage, ToolMessage)


def _prompt(given: Sequence[Message] | None) -> tuple[Message, ...] | None:
    value: object = given  # what a hook returned: checked, not trusted
    if value is None:
        return None
    if isinstance(value, str | bytes) or not isinstance(value, Sequence):
        raise TypeError(
            f"PreparedContext.prompt must be a sequence of messages or None, got "
            f"{type(value).__name__}"
        )
    messages = tuple(value)
    if not messages:
        raise ValueError(
            "PreparedContext.prompt must not be empty (None leaves the prompt as it is)"
        )
    for message in messages:
        if not isinstance(message, _MESSAGE_TYPES):
            raise TypeError(
                "PreparedContext.prompt must hold messages (SystemMessage, UserMessage, "
                f"AssistantMessage, ToolMessage), got {type(message).__name__}"
            )
    return messages


@attrs.frozen(kw_only=True)
class PreparedContext:
    """What a ``prepare_context`` function returns (or None: nothing to change).

    ``items`` join the conversation as context (each recorded as a ``ContextAdded`` record before
    the turn's request, and part of every later prompt, as ``runtime.run(context=...)`` items are)
    — at most :data:`MAX_PREPARED_ITEMS` of them, :data:`MAX_PREPARED_BYTES` in all.

    ``prompt``, when given, is the prompt *this turn's* request sends instead of the one
    projected (``TurnContext.messages``) — the items of this call are still added after it. It is
    never recorded and never changes the run's state: the next turn starts from the projection
    again (a retried request of the same turn sends it again)."""

    items: tuple[ContextItem, ...] = attrs.field(default=(), converter=_items)
    prompt: tuple[Message, ...] | None = attrs.field(default=None, converter=_prompt)


#: An instructions function: given the run's context, the instructions (a str) to send.
InstructionsFunction: TypeAlias = Callable[[InstructionsContext[InputT]], Awaitable[str]]
#: A ``prepare_context`` function: given the turn's context, what to add or send instead.
PrepareContextFunction: TypeAlias = Callable[
    [TurnContext[InputT]], Awaitable[PreparedContext | None]
]


@attrs.frozen
class InstructionsFailed(RunError):
    """The agent's instructions function failed: it raised, returned something other than a
    str, or returned more than :data:`MAX_INSTRUCTIONS_BYTES`. ``reason`` says which (redacted)."""

    reason: str

    def __str__(self) -> str:
        return f"the agent's instructions could not be computed: {self.reason}"


@attrs.frozen
class PrepareContextFailed(RunError):
    """The agent's ``prepare_context`` function failed: it raised, returned something other than
    a ``PreparedContext`` or None, or went past its bounds. ``reason`` says which (redacted)."""

    reason: str

    def __str__(self) -> str:
        return f"the turn's context could not be prepared: {self.reason}"


# ---- the checks of Agent's authoring fields (attrs validators: they name the field) ----------------


def _name_of(value: object) -> str:
    return type(value).__name__


def _label(value: object) -> str:
    name = getattr(value, "__qualname__", None)
    return name if isinstance(name, str) else _name_of(value)


def check_instructions(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    """``Agent.instructions``: a str, or an async function computing them (a plain function
    would fail every run when its result is awaited: refused here instead)."""
    if isinstance(value, str):
        return
    if not callable(value):
        raise TypeError(
            "Agent.instructions must be a str or an async function of an InstructionsContext, "
            f"got {_name_of(value)}"
        )
    if not is_async_callable(value):
        raise TypeError(
            "Agent.instructions must be a str or an async function (async def) of an "
            f"InstructionsContext; {_label(value)} is not async"
        )


def check_input(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    """``Agent.input``: None, or a type whose JSON Schema is an object (the run's input is
    decoded into it, and a subagent's caller or a queue hands it over as JSON)."""
    if value is None:
        return
    try:
        schema = json_schema(value)
    except SchemaDerivationError as exc:
        raise SchemaDerivationError(f"Agent.input: {exc}") from None
    if schema.get("type") != "object":
        raise TypeError(
            "Agent.input must be a type whose JSON Schema is an object (an attrs class, a "
            f"dataclass or a TypedDict), got {value!r}; wrap it in a class with one field"
        )


def check_function(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    """An optional function field: ``input_renderer`` (a plain function), ``prepare_context``
    (an async one)."""
    if value is not None and not callable(value):
        raise TypeError(f"Agent.{attribute.name} must be a function or None, got {_name_of(value)}")
    if attribute.name == "prepare_context" and value is not None and not is_async_callable(value):
        raise TypeError(
            f"Agent.prepare_context must be an async function (async def) or None; "
            f"{_label(value)} is not async"
        )
    named = attribute.name == "input_renderer"
    if named and value is not None and is_async_callable(value):
        # It is called, not awaited, before anything is written: its coroutine would fail
        # every run it renders.
        raise TypeError(
            f"Agent.input_renderer must be a plain function returning a str; {_label(value)} "
            "is async"
        )
    if named and value is not None and getattr(instance, "input", None) is None:
        raise ValueError("Agent.input_renderer needs Agent.input, the type it renders")


def service_keys(value: object) -> tuple[ServiceKey[Any], ...]:
    """``Agent.services`` as a tuple (a list or tuple of ServiceKeys)."""
    if not isinstance(value, list | tuple):
        raise TypeError(
            f"Agent.services must be a list or tuple of ServiceKeys, got {_name_of(value)}"
        )
    return tuple(value)


def check_services(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    assert isinstance(value, tuple)
    for key in value:
        if not isinstance(key, ServiceKey):
            raise TypeError(f"Agent.services must hold ServiceKeys, got {_name_of(key)}")
    if len(set(value)) != len(value):
        raise ValueError("Agent.services names a service more than once")


def check_instructions_per(
    instance: object, attribute: attrs.Attribute[Any], value: object
) -> None:
    """``Agent.instructions_per``: "run" or "turn" — and "turn" only for computed instructions."""
    if not isinstance(value, str):
        raise TypeError(
            f"Agent.instructions_per must be 'run' or 'turn', got {type(value).__name__}"
        )
    if value not in ("run", "turn"):
        raise ValueError(f"Agent.instructions_per must be 'run' or 'turn', got {value!r}")
    if value == "turn" and isinstance(getattr(instance, "instructions", None), str):
        raise ValueError(
            "Agent.instructions_per='turn' needs instructions that are a function (fixed text "
            "is the same every turn)"
        )
