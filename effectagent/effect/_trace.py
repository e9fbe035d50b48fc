"""A tracing hook with no dependency: code that does work worth a span of its own (a sandboxed
command, a code pass, an MCP request) opens one with :func:`trace_span`, and whoever traces
installs the *span starter* that makes real spans (``capabilities.telemetry`` does, inside each
tool call's handler).

Design notes
------------
* **Free when off.** The active starter lives in a :class:`~contextvars.ContextVar`. Without one,
  :func:`trace_span` is one ``ContextVar.get`` and returns a shared no-op context manager whose
  handle ignores everything; nothing is allocated. Callers that would compute an attribute at some
  cost ask :attr:`SpanHandle.recording` first.
* **Scoped by context.** :func:`use_span_starter` sets the starter for the current context and
  restores the previous one on exit, so it follows Trio tasks as contextvars do: a task started
  inside the block (``nursery.start_soon``) traces with it, one started elsewhere does not.
* **Bounded and redacted by the starter, not the caller.** Callers pass plain attributes
  (identifiers, counts, outcomes) and offer *content* — what a workload was given or returned
  (command arguments, a resource URI) — separately, with :meth:`SpanHandle.set_content`; the
  starter decides whether content is kept (only when asked for, redacted, cut) and bounds every
  string. An exception leaving the block marks the span failed with the exception's *type name*
  only: an exception's message can hold anything.
* **Nothing of OpenTelemetry here.** The effect core imports nothing else of ours and no tracing
  library: a starter adapts this to one.
"""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import AbstractContextManager
from contextvars import ContextVar, Token
from types import TracebackType
from typing import Literal, Protocol, final

__all__ = [
    "AttributeValue",
    "SpanHandle",
    "SpanKind",
    "SpanStarter",
    "trace_span",
    "tracing_active",
    "use_span_starter",
]

AttributeValue = str | int | float | bool
"""The value of one span attribute: a string, a number or a flag."""

SpanKind = Literal["internal", "client"]
"""``"client"`` for a request to another process or service (an MCP server), else
``"internal"``."""


class SpanHandle(Protocol):
    """The span a :func:`trace_span` block opened, while it is open."""

    @property
    def recording(self) -> bool:
        """Whether anything set here is kept (False for the no-op handle): skip computing an
        attribute that costs something when it is not."""
        ...

    def set_attribute(self, name: str, value: AttributeValue) -> None:
        """Set one attribute (an identifier, a count, an outcome: never content)."""
        ...

    def set_content(self, name: str, value: object) -> None:
        """Offer content (what the work was given or gave back): a string, or a JSON value the
        starter renders only if it keeps it — which it does only when content was asked for,
        redacted and cut; otherwise it is dropped, unrendered."""
        ...

    def fail(self, error_type: str, description: str = "") -> None:
        """Mark the span failed: ``error_type`` is a low-cardinality name (an error class, a
        failure kind), ``description`` a short message written by the caller (no content)."""
        ...


class SpanStarter(Protocol):
    """What makes real spans: installed with :func:`use_span_starter`."""

    def __call__(
        self,
        name: str,
        attributes: Mapping[str, AttributeValue],
        kind: SpanKind,
        current: bool,
    ) -> AbstractContextManager[SpanHandle]:
        """A context manager opening the span ``name`` (a child of the current span; made current
        itself while open when ``current``), ending it on exit — failed, with the exception's type
        name, when an exception leaves it."""
        ...


@final
class _NoSpan:
    """The handle and context manager :func:`trace_span` gives when nothing traces."""

    __slots__ = ()

    recording = False

    def __enter__(self) -> _NoSpan:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        return None

    def set_attribute(self, name: str, value: AttributeValue) -> None:
        pass

    def set_content(self, name: str, value: object) -> None:
        pass

    def fail(self, error_type: str, description: str = "") -> None:
        pass


_NO_SPAN_BLOCK: AbstractContextManager[SpanHandle] = _NoSpan()
_NO_ATTRIBUTES: Mapping[str, AttributeValue] = {}

_starter: ContextVar[SpanStarter | None] = ContextVar("effectagent.span_starter", default=None)


def trace_span(
    name: str,
    attributes: Mapping[str, AttributeValue] = _NO_ATTRIBUTES,
    *,
    kind: SpanKind = "internal",
    current: bool = True,
) -> AbstractContextManager[SpanHandle]:
    """A span named ``name`` with ``attributes`` around a ``with`` block, from the span starter of
    the current context — or, when there is none, a no-op (nothing allocated, nothing kept).

    ``current=False`` leaves the span out of the context (nothing inside nests under it): for a
    span whose block is entered and left in different calls of one task, such as a stream's
    ``__aenter__`` and ``aclose``. Attribute values are plain (see :data:`AttributeValue`); the
    starter bounds them. Entering gives the :class:`SpanHandle`.
    """
    starter = _starter.get()
    if starter is None:
        return _NO_SPAN_BLOCK
    return starter(name, attributes, kind, current)


def tracing_active() -> bool:
    """Whether a span starter is installed in the current context."""
    return _starter.get() is not None


@final
class _Installed:
    # One token per entry, so that the same manager entered again inside its own block (``with
    # installed: with installed:``) gives back, at each exit, the starter before that entry.
    __slots__ = ("_starter", "_tokens")

    def __init__(self, starter: SpanStarter | None) -> None:
        self._starter = starter
        self._tokens: list[Token[SpanStarter | None]] = []

    def __enter__(self) -> None:
        self._tokens.append(_starter.set(self._starter))

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self._tokens:
            _starter.reset(self._tokens.pop())


def use_span_starter(starter: SpanStarter | None) -> AbstractContextManager[None]:
    """Install ``starter`` (None: none) for the current context while the ``with`` block runs; the
    one before is back on exit — also for a manager entered again inside its own block. Enter
    and leave it in one task (a contextvar's token is reset).
    A ``starter`` that is neither callable nor None is a ``TypeError`` here, not at the first
    span."""
    if starter is not None and not callable(starter):
        raise TypeError(
            f"use_span_starter: starter must be a SpanStarter or None, got {type(starter).__name__}"
        )
    return _Installed(starter)
