"""Telemetry benchmarks: what tracing (``capabilities.telemetry``) adds to a run's model steps and
tool calls.

Run with ``.venv/bin/python benchmarks/telemetry.py`` (``make bench`` does); ``--quick`` gives a
fast, noisier pass. It prints figures and never fails on them: a benchmark is not a timed test.

Method
------
Three of the engine's scenarios (``engine_overhead.py``): a tool-free turn (one model step), one
batch of ten parallel no-op calls (two steps, ten calls) and ten turns of one call each (eleven
steps, ten calls). Each is run with :class:`Telemetry` installed — the OpenTelemetry SDK's
``TracerProvider`` with a ``SimpleSpanProcessor`` into an ``InMemorySpanExporter`` (cleared
between batches), so the figure includes the SDK making, ending and exporting each span — and
without it, in interleaved rounds; CPU time of this thread, per run, median over the rounds.

The paired differences (on minus off) of the three shapes give three figures: **per run** (the
``invoke_agent`` span), **per model step** (a ``turn`` and a ``chat`` span, four text deltas) and
**per tool call** (an ``execute_tool`` span, its context attached around the handler) — tool-free
= run + step; parallel = run + 2 steps + 10 calls; sequential = run + 11 steps + 10 calls.

The **tracing hook** (``effectagent.effect.trace_span``, what a sandboxed command, a Code Mode pass
and inner call or an MCP request opens) is timed on its own: a ``with trace_span(...)`` block with
four attributes set through ``span.recording``-guarded helpers, as the callers do — without a span
starter (tracing off: what every sandbox execution, pass and MCP request pays when the layer is
not installed) and with the layer's starter (``Telemetry.activate``, SDK and in-memory export as
above) — against an empty loop body, in µs per block (median over batches, wall time).
"""

from __future__ import annotations

import gc
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Final

ROOT = Path(__file__).resolve().parent.parent
# Run as a script, this directory comes first on sys.path, where benchmarks/sandbox.py would
# shadow the sandbox package: the project root goes before it.
sys.path.insert(0, str(ROOT))

import attrs  # noqa: E402
import trio  # noqa: E402
from opentelemetry.sdk.trace import TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (  # noqa: E402
    InMemorySpanExporter,
)

from benchmarks._util import Timing, median_us, scale_of, scale_parser  # noqa: E402
from benchmarks.engine_overhead import (  # noqa: E402
    AGENT,
    model_layer,
    parallel_script,
    sequential_script,
    tool_free_script,
)
from capabilities.telemetry import Telemetry  # noqa: E402
from effectagent import open_runtime  # noqa: E402
from effectagent.effect import Layer, SpanHandle, trace_span  # noqa: E402
from effectagent.testing import ScriptedModel, Turn  # noqa: E402

INPUT: Final = "How warm is Oslo tonight?"


@attrs.frozen
class Scenario:
    """One measured shape of run: its script, model steps and tool calls per run."""

    name: str
    script: Callable[[], list[Turn]]
    steps: int
    tools: int
    per_batch: int


SCENARIOS: Final = (
    Scenario("tool-free turn (1 step)", tool_free_script, 1, 0, 50),
    Scenario("10 parallel calls (2 steps)", lambda: parallel_script(10), 2, 10, 25),
    Scenario("10 turns x 1 call (11 steps)", lambda: sequential_script(10), 11, 10, 10),
)


@attrs.frozen
class Paired:
    """CPU µs per run of one scenario, round by round, with and without telemetry."""

    scenario: Scenario
    on: tuple[float, ...]
    off: tuple[float, ...]
    spans_per_run: int

    @property
    def differences(self) -> list[float]:
        """On minus off, per round (µs per run)."""
        return sorted(a - b for a, b in zip(self.on, self.off, strict=True))


async def _time_batch(scenario: Scenario, script: list[Turn], traced: bool) -> tuple[float, int]:
    """CPU µs per run of one batch (a fresh runtime; opening and closing it not timed) and the
    spans a run exported."""
    model = ScriptedModel(script * scenario.per_batch)
    layer: Layer = model_layer(model)
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    if traced:
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        layer = layer + Telemetry(tracer_provider=provider).layer()
    async with open_runtime(layer, agents=[AGENT]) as runtime:
        gc.collect()
        cpu_started = time.thread_time_ns()
        for _ in range(scenario.per_batch):
            await runtime.run(AGENT, INPUT)
        cpu = time.thread_time_ns() - cpu_started
    spans = len(exporter.get_finished_spans()) // scenario.per_batch
    provider.shutdown()
    return cpu / scenario.per_batch / 1_000, spans


async def measure(scale: float) -> list[Paired]:
    """Every scenario on and off, in interleaved rounds after one unrecorded warm-up round."""
    rounds = max(5, round(30 * scale))
    scripts = [scenario.script() for scenario in SCENARIOS]
    on: list[list[float]] = [[] for _ in SCENARIOS]
    off: list[list[float]] = [[] for _ in SCENARIOS]
    spans = [0 for _ in SCENARIOS]
    for round_ in range(rounds + 1):
        for i, scenario in enumerate(SCENARIOS):
            traced, spans[i] = await _time_batch(scenario, scripts[i], True)
            plain, _ = await _time_batch(scenario, scripts[i], False)
            if round_:
                on[i].append(traced)
                off[i].append(plain)
    return [
        Paired(scenario, tuple(on[i]), tuple(off[i]), spans[i])
        for i, scenario in enumerate(SCENARIOS)
    ]


_HOOK_ATTRIBUTES: Final = {"mcp.method.name": "tools/call", "network.transport": "pipe"}


def _traced_block() -> None:
    with trace_span("tools/call lookup", kind="client") as span:
        _describe(span)


def _describe(span: SpanHandle) -> None:
    if span.recording:  # what the callers' helpers do: nothing is computed when nothing records
        for name, value in _HOOK_ATTRIBUTES.items():
            span.set_attribute(name, value)
        span.set_attribute("gen_ai.tool.name", "lookup")
        span.set_attribute("effectagent.mcp.server.name", "notes")


def _empty() -> None:
    pass


def measure_hook(scale: float) -> dict[str, Timing]:
    """µs per ``trace_span`` block: off (no starter), on (the layer's starter), and the loop."""
    batches = max(5, round(30 * scale))
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    telemetry = Telemetry(tracer_provider=provider)
    figures = {
        "empty loop body": median_us(_empty, batches=batches, per_batch=20_000),
        "trace_span, tracing off": median_us(_traced_block, batches=batches, per_batch=20_000),
    }
    with telemetry.activate():
        figures["trace_span, tracing on"] = median_us(
            _traced_block, batches=batches, per_batch=1_000
        )
    provider.shutdown()
    return figures


def report_hook(figures: dict[str, Timing]) -> str:
    """The tracing hook's figures as text."""
    lines = ["The tracing hook, µs per `with trace_span(...)` block (median / p90 over batches):"]
    for name, timing in figures.items():
        lines.append(f"  {name}: {timing.median_us:.3f} / {timing.p90_us:.3f}")
    off = figures["trace_span, tracing off"].median_us - figures["empty loop body"].median_us
    lines.append(f"-> off, over an empty body: {off * 1000:.0f} ns a block")
    return "\n".join(lines)


def report(results: Sequence[Paired]) -> str:
    """The figures as text."""
    lines = ["CPU µs per run (median over rounds), telemetry on (SDK, in-memory export) vs off:"]
    for paired in results:
        diffs = paired.differences
        quartiles = statistics.quantiles(diffs, n=4)
        lines.append(
            f"  {paired.scenario.name}: on {statistics.median(paired.on):.1f}, off "
            f"{statistics.median(paired.off):.1f}, difference {statistics.median(diffs):+.1f} "
            f"(quartiles {quartiles[0]:+.1f} to {quartiles[2]:+.1f}); "
            f"{paired.spans_per_run} spans a run"
        )
    # Three shapes, three unknowns: per run (R), per model step (S), per tool call (C).
    # tool-free = R + S; parallel = R + 2S + 10C; sequential = R + 11S + 10C.
    alone, batch, sequential = (statistics.median(paired.differences) for paired in results)
    step = (sequential - batch) / 9
    per_run = alone - step
    per_call = (batch - per_run - 2 * step) / results[1].scenario.tools
    lines += [
        f"-> per run (its invoke_agent span): {per_run:.1f} µs",
        f"-> per model step (turn + chat spans, 4 text deltas): {step:.1f} µs",
        f"-> per tool call (execute_tool span, its context attached): {per_call:.1f} µs",
    ]
    return "\n".join(lines)


def cli(argv: Sequence[str] | None = None) -> int:
    """Entry point: parse the options, measure, print."""
    parser = scale_parser("Measure what tracing costs a run.", "the number of rounds")
    scale = scale_of(parser.parse_args(argv))
    print(report(trio.run(partial(measure, scale))))
    print(report_hook(measure_hook(scale)))
    return 0


if __name__ == "__main__":
    sys.exit(cli())
