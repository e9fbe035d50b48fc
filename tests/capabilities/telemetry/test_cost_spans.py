"""The cost of a run and of each model call in the spans (#28 item 6): in micro-dollars when every
call had a price, else how many calls had none — never a made-up figure."""

from __future__ import annotations

from typing import Any

import trio
import trio.testing
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from capabilities.telemetry import Telemetry
from effectagent import Layer
from effectagent.ai import Price, PricesService, PriceTable, ToolCallContext, Usage
from effectagent.engine import open_runtime
from effectagent.testing import Turn
from tests.capabilities.telemetry.spans import by_name
from tests.engine.helpers import Forecast, Lookup, TrackingModel, forecast_tool, make_agent

#: $2 / $8 per million: 1,000 input and 100 output tokens cost 2,800 micro-dollars.
PRICES = PriceTable({"test:priced": Price("2", "8")})


class Priced(TrackingModel):
    model_name = "test:priced"


async def _spans(
    model: TrackingModel, exported: tuple[TracerProvider, InMemorySpanExporter]
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    provider, exporter = exported
    forecast = forecast_tool()

    async def handle(params: Lookup, call: ToolCallContext) -> Forecast:
        return Forecast(params.city, 4.0)

    agent = make_agent(forecast)
    layer = (
        agent.toolkit.handlers({forecast: handle})
        + model.layer()
        + Layer.succeed(PricesService, PRICES)
        + Telemetry(tracer_provider=provider).layer()
    )
    async with open_runtime(layer, agents=[agent]) as runtime:
        result = await runtime.run(agent, "Weather?")
    assert result.status == "completed", result.error
    spans = exporter.get_finished_spans()
    (run,) = by_name(spans, "invoke_agent")
    chats = [dict(c.attributes or {}) for c in by_name(spans, "chat")]
    return dict(run.attributes or {}), chats


def _turns() -> list[Turn]:
    return [
        Turn.tool_calls(("forecast", {"city": "Oslo"}), usage=Usage.of(1_000, 100)),
        Turn.text("4 °C.", usage=Usage.of(2_000, 50)),
    ]


async def test_a_priced_run_and_each_call_carry_their_cost(
    autojump_clock: trio.testing.MockClock,
    exported: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    run, chats = await _spans(Priced(_turns()), exported)
    assert [c["effectagent.usage.cost_micros"] for c in chats] == [2_800, 4_400]
    assert run["effectagent.usage.cost_micros"] == 7_200
    assert "effectagent.usage.unpriced_calls" not in run


async def test_an_unpriced_run_says_how_many_calls_had_no_price(
    autojump_clock: trio.testing.MockClock,
    exported: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    run, chats = await _spans(TrackingModel(_turns()), exported)
    assert "effectagent.usage.cost_micros" not in run
    assert run["effectagent.usage.unpriced_calls"] == 2
    assert [c.get("effectagent.usage.unpriced_calls") for c in chats] == [1, 1]
    assert all("effectagent.usage.cost_micros" not in c for c in chats)
