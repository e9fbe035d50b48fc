"""The span starter :class:`~capabilities.telemetry.Telemetry` installs for the effect core's tracing
hook (``effectagent.effect.trace_span``): what a sandboxed command, a Code Mode pass or an MCP
request opens becomes an OpenTelemetry span under the current one (the tool call's, inside its
handler).

Every such span carries ``effectagent.operation.version`` and, inside a run's tool call, the run's
``gen_ai.conversation.id`` and ``effectagent.run.id``. Its attributes are bounded like the layer's
own: strings cut to ``max_attribute_length``, at most :data:`MAX_HOOK_ATTRIBUTES` of them, values
other than strings, numbers and flags dropped. *Content* offered with ``set_content`` (command
arguments, a resource URI, an inner call's arguments) is kept only when the layer has
``include_content=True`` **and** a redactor: it comes from inside a handler, not from the engine's
events, so nothing has redacted it yet — without a redactor it is dropped. An exception leaving a
span's block fails it with the exception's type name, never its message; a failure's own
description (``fail``) is content too, shown only where content is kept, else the error type is.
With a redactor (content kept or not), a span's name and its string attributes are redacted too:
they are not content, but come from inside a handler as well (a command's program, a server's
identity), and nothing else has redacted them.

Tracing never changes what the traced code does: if the tracer (or the redactor) raises, the
error's type is logged (logger ``effectagent``) and the span records nothing more — the command,
pass or request goes on as if nothing traced it.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from contextlib import suppress
from types import TracebackType
from typing import Any, final

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from effectagent.effect import AttributeValue
from effectagent.effect import SpanKind as HookKind
from effectagent.engine import LOGGER_NAME

__all__ = ["MAX_HOOK_ATTRIBUTES", "HookSpan", "HookStarter"]

#: The most attributes a span opened through the hook carries (the rest are dropped).
MAX_HOOK_ATTRIBUTES = 48

_KINDS = {"internal": SpanKind.INTERNAL, "client": SpanKind.CLIENT}


def _broken(exc: Exception) -> None:
    logging.getLogger(LOGGER_NAME).warning("tracing hook failed: %s", type(exc).__name__)


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: max(limit - 1, 0)] + "…"


@final
class HookStarter:
    """A ``SpanStarter`` on a tracer: bounds what callers give it (see the module notes).

    ``base`` are the attributes every span it starts begins with (already bounded); ``redact``
    the redaction of content, None when content is not kept; ``scrub`` the redaction of names
    and string attributes (the layer's redactor, content kept or not), None without one.
    """

    __slots__ = ("base", "content_limit", "limit", "redact", "scrub", "tracer")

    def __init__(
        self,
        tracer: trace.Tracer,
        base: Mapping[str, AttributeValue],
        limit: int,
        content_limit: int,
        redact: Callable[[str], str] | None,
        scrub: Callable[[str], str] | None = None,
    ) -> None:
        self.tracer = tracer
        self.base = base
        self.limit = limit
        self.content_limit = content_limit
        self.redact = redact
        self.scrub = scrub

    def __call__(
        self, name: str, attributes: Mapping[str, AttributeValue], kind: HookKind, current: bool
    ) -> HookSpan:
        return HookSpan(self, name, attributes, kind, current)

    def bounded(self, value: object) -> AttributeValue | None:
        """``value`` as an attribute value within the bounds (a string redacted, then cut), or
        None to drop it."""
        if isinstance(value, str):
            return _cut(self.scrubbed(value), self.limit)
        if isinstance(value, bool | int | float):
            return value
        return None

    def scrubbed(self, text: str) -> str:
        """``text`` redacted with :attr:`scrub` (as it is without one)."""
        return text if self.scrub is None else self.scrub(text)


@final
class HookSpan:
    """One span opened through the hook: its context manager and, once entered, its handle."""

    __slots__ = (
        "_attributes",
        "_count",
        "_current",
        "_ended",
        "_failed",
        "_kind",
        "_name",
        "_span",
        "_starter",
        "_token",
    )

    def __init__(
        self,
        starter: HookStarter,
        name: str,
        attributes: Mapping[str, AttributeValue],
        kind: HookKind,
        current: bool,
    ) -> None:
        self._starter = starter
        self._name = name
        self._attributes = attributes
        self._kind = kind
        self._current = current
        self._span: Span = trace.INVALID_SPAN
        self._token: object = None
        self._count = 0
        self._failed = False
        self._ended = False

    @property
    def recording(self) -> bool:
        """Whether the span records what is set on it."""
        return self._span.is_recording()

    def __enter__(self) -> HookSpan:
        try:
            self._start()
        except Exception as exc:  # the work goes on untraced
            self._drop(exc)
        return self

    def _drop(self, exc: Exception) -> None:
        """Record nothing more on this span (what failed is logged, by type)."""
        _broken(exc)
        span, self._span = self._span, trace.INVALID_SPAN
        with suppress(Exception):
            span.end()

    def _start(self) -> None:
        starter = self._starter
        attributes: dict[str, Any] = dict(starter.base)
        for key, value in self._attributes.items():
            if len(attributes) >= MAX_HOOK_ATTRIBUTES:
                break
            bounded = starter.bounded(value)
            if bounded is not None:
                attributes[_cut(str(key), starter.limit)] = bounded
        self._count = len(attributes)
        self._span = span = starter.tracer.start_span(
            _cut(starter.scrubbed(str(self._name)), starter.limit),
            kind=_KINDS.get(self._kind, SpanKind.INTERNAL),
            attributes=attributes,
        )
        if self._current:
            self._token = otel_context.attach(trace.set_span_in_context(span))

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self._ended:
            return
        self._ended = True
        if exc_type is not None and not self._failed:
            self.fail(exc_type.__name__)
        if self._token is not None:
            otel_context.detach(self._token)  # type: ignore[arg-type]
            self._token = None
        try:
            self._span.end()
        except Exception as exc:
            _broken(exc)

    def set_attribute(self, name: str, value: AttributeValue) -> None:
        """Set one attribute, bounded (dropped past :data:`MAX_HOOK_ATTRIBUTES`)."""
        if self._count >= MAX_HOOK_ATTRIBUTES or not self._span.is_recording():
            return
        try:  # the redactor runs here: what it raises is the tracing's failure, not the work's
            bounded = self._starter.bounded(value)
            if bounded is not None:
                self._count += 1
                self._span.set_attribute(_cut(str(name), self._starter.limit), bounded)
        except Exception as exc:
            self._drop(exc)

    def set_content(self, name: str, value: object) -> None:
        """Keep ``value`` (a string, or a JSON value rendered here) redacted and cut to
        ``max_content_length`` when content is kept; otherwise nothing is rendered."""
        starter = self._starter
        if starter.redact is None or self._count >= MAX_HOOK_ATTRIBUTES:
            return
        if not self._span.is_recording():  # dropped (or not sampled): nothing to render for
            return
        self._count += 1
        try:
            if not isinstance(value, str):
                value = json.dumps(value, ensure_ascii=False, default=str)
            text = _cut(starter.redact(value), starter.content_limit)
            self._span.set_attribute(_cut(str(name), starter.limit), text)
        except Exception as exc:  # not rendered, not redacted: not kept
            self._drop(exc)

    def fail(self, error_type: str, description: str = "") -> None:
        """``error.type`` and an error status, described by ``description`` (redacted) when
        content is kept, else by the error type alone: a description may quote what the work
        was given or printed."""
        self._failed = True
        starter = self._starter
        limit = starter.limit
        category = _cut(str(error_type), limit)
        try:
            self._span.set_attribute("error.type", category)
            shown = category
            if description and starter.redact is not None:
                shown = _cut(starter.redact(str(description)), limit)
            self._span.set_status(Status(StatusCode.ERROR, shown))
        except Exception as exc:
            self._drop(exc)
