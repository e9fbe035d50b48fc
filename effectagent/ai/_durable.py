"""What a tool says about running again: reconciliation of a call that may have run, and durable
steps inside a handler.

A run continued from its records (``Runtime.resume``) may find a tool call that was prepared and
never settled: its process died, or lost its lane, while the call ran — or before it started. A
tool declared ``idempotent=True`` is simply run again. A tool bound with a *reconcile* function
(``tool.bind(handler, reconcile=check)``) is asked instead: ``check(params, context)`` looks at
the world and answers :meth:`Reconciled.done` with the call's result, :meth:`Reconciled.not_done`
(the call is then run) or :meth:`Reconciled.unknown`. Any other tool's call settles
``ToolUnknownOutcome``: the model is told it may or may not have happened.

A *durable step* (``await context.step("charge", 1, charge_card)``) is a piece of a handler whose
success is recorded under its identity — the conversation, run, tool call, the step's name and
version — in the runtime's :class:`StepStore`: run again (a resumed call, an idempotent tool run a
second time), the step returns the recorded result instead of running. Only a success is recorded.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Awaitable, Callable
from typing import Any, Final, Generic, Literal, Never, Protocol, cast, final

import attrs
from typing_extensions import TypeVar

from effectagent.effect import JSONValue, SchemaError, decode, encode

__all__ = ["Reconciled", "StepKey", "StepResult", "StepStore", "run_step"]

S = TypeVar("S", covariant=True)
T = TypeVar("T")


_KINDS: Final = ("done", "not-done", "unknown")


def _kind(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    # Anything else would be taken for "not-done", and the call that may have run would run again.
    if not (type(value) is str and value in _KINDS):
        raise ValueError(f"Reconciled: kind must be 'done', 'not-done' or 'unknown', got {value!r}")


def _reason(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, str):
        raise TypeError(f"Reconciled: reason must be a str, got {type(value).__name__}")


@final
@attrs.frozen
class Reconciled(Generic[S]):
    """What a reconcile function found out about a call that may have run. Make one with
    :meth:`done`, :meth:`not_done` or :meth:`unknown`; a ``Reconciled[S]`` belongs to a
    ``Tool[P, S]`` (``done`` takes the tool's success type)."""

    kind: Literal["done", "not-done", "unknown"] = attrs.field(validator=_kind)
    value: S | None = None
    reason: str = attrs.field(default="", validator=_reason)

    @staticmethod
    def done(value: T) -> Reconciled[T]:
        """The call took effect and ``value`` is its result (checked and encoded as a handler's
        return value is)."""
        return Reconciled("done", value)

    @staticmethod
    def not_done() -> Reconciled[Never]:
        """The call did not take effect: it is run."""
        return Reconciled("not-done")

    @staticmethod
    def unknown(reason: str) -> Reconciled[Never]:
        """Whether the call took effect cannot be told: it settles ``ToolUnknownOutcome`` with
        ``reason`` (redacted), which the model reads."""
        if not isinstance(reason, str):
            raise TypeError(
                f"Reconciled.unknown: reason must be a str, got {type(reason).__name__}"
            )
        return Reconciled("unknown", None, reason)


@final
@attrs.frozen
class StepKey:
    """The identity of a durable step: its run's conversation and ID, its tool call, the step's
    ``name`` and ``version`` (change the version when what the step does changes, so an old
    result is not taken for the new step's)."""

    conversation_id: str
    run_id: str
    tool_call_id: str
    name: str
    version: int


@final
@attrs.frozen
class StepResult:
    """A recorded step result: the JSON value the step's result encoded to."""

    value: JSONValue


class StepStore(Protocol):
    """Where durable steps' results are recorded. The runtime's default keeps them in memory
    for as long as the run lasts; the durable runtime records them in its database."""

    async def get(self, key: StepKey) -> StepResult | None:
        """The recorded result of ``key``, or None.

        Cancellation: a cancellation point; nothing changes either way.
        """
        ...

    async def put(self, key: StepKey, value: JSONValue) -> StepResult:
        """Record ``value`` for ``key`` unless a result is recorded for it already, and return
        the recorded one (the first recorded is canonical). Raises to refuse (a fenced store
        whose lane was lost): the step, and so the call, then fails as a defect.

        Cancellation: all or nothing.
        """
        ...


async def _awaited(key: StepKey, fn: Callable[[], Awaitable[T]]) -> T:
    """What ``fn()`` gives when awaited; a TypeError naming the step when ``fn`` is a plain
    function (a ``lambda: charge()`` returning a coroutine is fine: what it returns is awaited)."""
    pending: object = fn()
    if not inspect.isawaitable(pending):
        raise TypeError(
            f"step {key.name!r}: fn must be an async function of no arguments (or return an "
            f"awaitable); it returned a value of type {type(pending).__name__}"
        )
    return await cast("Awaitable[T]", pending)


#: The most UTF-8 bytes of a step's name: it is part of a durable store's key, which
#: PostgreSQL indexes (an entry past about 2.7 KB is refused). Every store refuses a longer one.
STEP_NAME_BYTES: Final = 512
#: What no database keeps in text: NUL and lone surrogates.
_NOT_KEPT: Final = re.compile("[\x00\ud800-\udfff]")


async def run_step(
    store: StepStore | None,
    key: StepKey,
    fn: Callable[[], Awaitable[T]],
    as_type: object | None,
) -> Any:
    """Run a durable step (see :meth:`ToolCallContext.step`).

    Cancellation: a cancellation point while the store is read and written and while ``fn``
    runs; a step cancelled before its result was recorded records nothing (it runs again).
    """
    name: object = key.name  # checked: not every caller runs mypy
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"a step's name must be a non-empty str, got {name!r}")
    if _NOT_KEPT.search(name):  # every store refuses it alike (a database cannot keep it)
        raise ValueError("a step's name must not hold NUL or a lone surrogate")
    if len(name) > STEP_NAME_BYTES // 4 and len(name.encode("utf-8")) > STEP_NAME_BYTES:
        raise ValueError(f"a step's name must be at most {STEP_NAME_BYTES} bytes in UTF-8")
    if type(key.version) is not int or key.version < 1:
        raise ValueError(f"a step's version must be an int of 1 or more, got {key.version!r}")
    if not callable(fn):
        raise TypeError(f"step {key.name!r}: fn must be an async function of no arguments")
    if store is None:  # the handler is called outside a runtime: nothing records
        return await _awaited(key, fn)
    found = await store.get(key)
    if found is not None:
        if as_type is None:
            return found.value
        try:
            return decode(as_type, found.value)
        except SchemaError as exc:  # recorded by an earlier version of the step
            what = (
                f"step {key.name!r} version {key.version}: its recorded result does not fit "
                "type= (bump the version when what a step returns changes)"
            )
            raise TypeError(exc.explain(what)) from None
    value = await _awaited(key, fn)
    encoded = encode(value)
    if as_type is None and encoded != value:
        raise TypeError(
            f"step {key.name!r} returned a {type(value).__name__}, which reads back as another "
            "value: return a JSON value, or give type= to decode the recorded result into"
        )
    if as_type is not None:  # what would never read back is not a success: nothing recorded
        try:
            decode(as_type, encoded)
        except SchemaError as exc:
            what = f"step {key.name!r} returned a {type(value).__name__} that does not fit type="
            raise TypeError(exc.explain(what)) from None
    recorded = await store.put(key, encoded)
    return recorded.value if as_type is None else decode(as_type, recorded.value)
