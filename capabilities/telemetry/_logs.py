"""Trace identifiers on log lines: a structlog processor.

Install it in the application's structlog configuration, before the renderer::

    structlog.configure(processors=[..., telemetry.log_processor, structlog.processors.JSONRenderer()])

(or :func:`add_trace_ids`, which knows nothing of runs). The engine logs through structlog when
structlog is configured (logger ``"effectagent"``), so its lines get the identifiers too.
"""

from __future__ import annotations

from collections.abc import MutableMapping
from typing import Any

from opentelemetry import trace

__all__ = ["add_trace_ids", "span_ids"]


def span_ids(span_context: trace.SpanContext) -> tuple[str, str]:
    """The W3C hex forms of a span context's trace and span IDs (32 and 16 digits)."""
    return format(span_context.trace_id, "032x"), format(span_context.span_id, "016x")


def add_trace_ids(
    logger: Any, method_name: str, event_dict: MutableMapping[str, Any]
) -> MutableMapping[str, Any]:
    """A structlog processor: adds ``trace_id`` and ``span_id`` of the current OpenTelemetry span
    (none when there is no valid current span; fields already set are kept). Pure apart from
    reading the current context."""
    if "trace_id" not in event_dict:
        span_context = trace.get_current_span().get_span_context()
        if span_context.is_valid:
            event_dict["trace_id"], event_dict["span_id"] = span_ids(span_context)
    return event_dict
