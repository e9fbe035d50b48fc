"""What the telemetry tests share: reading the exported span tree."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan

#: A secret the tests register with the runtime and look for everywhere.
CANARY = "hunter2-canary"


def by_name(spans: Iterable[ReadableSpan], prefix: str) -> list[ReadableSpan]:
    """The spans whose name starts with ``prefix``, in export order."""
    return [span for span in spans if span.name.startswith(prefix)]


def parent_id(span: ReadableSpan) -> int | None:
    """The ID of the span's parent (None for a root)."""
    return None if span.parent is None else span.parent.span_id


def span_id(span: ReadableSpan) -> int:
    """The span's own ID."""
    context = span.get_span_context()
    assert context is not None
    return context.span_id


def attributes(span: ReadableSpan) -> dict[str, Any]:
    """The span's attributes as a plain dict."""
    return dict(span.attributes or {})


def texts(span: ReadableSpan) -> list[str]:
    """Every string a span carries: name, status, attributes, events and their attributes."""
    found = [span.name, span.status.description or ""]
    values: list[Any] = list((span.attributes or {}).values())
    for event in span.events:
        found.append(event.name)
        values += list((event.attributes or {}).values())
    for value in values:
        found += [str(item) for item in value] if isinstance(value, tuple) else [str(value)]
    return found
