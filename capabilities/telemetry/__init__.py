"""Tracing (CAP-013): OpenTelemetry spans built from the engine's run events, on the OpenTelemetry
API only (``pip install effectagent[telemetry]``; which SDK and exporter is the host's choice).

:class:`Telemetry` is the engine's ``RunListenerService``: its :meth:`~Telemetry.layer` adds a
span per run (under the caller's current span), per turn, per model call, per tool call, per
approval, and makes each tool call's span current while its handler runs, so what a handler traces
(an HTTP client) nests under it — with a span starter installed for the effect core's tracing hook,
so a sandboxed command, a Code Mode pass and its inner calls, an MCP request get spans of their
own there (:meth:`Telemetry.activate` installs it for code outside a run). A subagent's run is a
span under the call that started it. Without the Layer nothing is traced and nothing is paid. Spans carry identifiers, counts, outcomes and token usage; model text, tool arguments and
results only with ``include_content=True``, always bounded and as redacted as the events are.
:meth:`Telemetry.log_processor` adds the current ``trace_id``/``span_id`` to structlog lines.
"""

try:
    from opentelemetry import trace as _trace  # noqa: F401
except ImportError as exc:  # pragma: no cover - exercised in a subprocess by the tests
    raise ImportError(
        "capabilities.telemetry needs the OpenTelemetry API: "
        "pip install 'effectagent[telemetry]' (or opentelemetry-api)"
    ) from exc

from ._listener import Telemetry as Telemetry
from ._logs import add_trace_ids as add_trace_ids

__all__ = ["Telemetry", "add_trace_ids"]
