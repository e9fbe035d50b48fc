"""Telemetry: strings are cut to ``max_attribute_length``, but for the few fixed words the
mapping itself sets — a turn's finish reason among them, as the run's own."""

from __future__ import annotations

from typing import Any

import trio
import trio.testing
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from capabilities.telemetry import Telemetry
from effectagent.ai import ToolCallContext
from effectagent.engine import open_runtime
from effectagent.testing import ScriptedModel, Turn
from tests.capabilities.telemetry.spans import by_name
from tests.engine.helpers import Forecast, Lookup, forecast_tool, make_agent


async def _forecast(params: Lookup, call: ToolCallContext) -> Forecast:
    return Forecast(params.city, 4.0)


async def test_a_turns_finish_reason_is_never_cut(
    autojump_clock: trio.testing.MockClock,
    exported: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    # With a bound of 4 a turn's finish reason used to read "too…" while the run's read whole.
    provider, exporter = exported
    forecast = forecast_tool()
    agent = make_agent(forecast)
    model = ScriptedModel([Turn.tool_calls(("forecast", {"city": "Oslo"})), Turn.text("done")])
    telemetry = Telemetry(tracer_provider=provider, max_attribute_length=4)
    layer = agent.toolkit.handlers({forecast: _forecast}) + model.as_layer() + telemetry.layer()
    async with open_runtime(layer, agents=[agent]) as runtime:
        result = await runtime.run(agent, "Weather?")
    assert result.status == "completed"
    turns: list[Any] = [
        span.attributes or {} for span in by_name(exporter.get_finished_spans(), "turn")
    ]
    reasons = sorted(turns, key=lambda a: int(a["effectagent.turn"]))
    assert [a["gen_ai.response.finish_reasons"] for a in reasons] == [("tool-calls",), ("stop",)]
