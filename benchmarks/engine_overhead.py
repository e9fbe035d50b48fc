"""Engine overhead: what effectagent itself costs per model step and per tool call.

Run with ``.venv/bin/python benchmarks/engine_overhead.py`` (``make bench`` does). ``--quick`` (or
``--scale 0.2``) gives a fast, noisier pass; ``--json`` prints machine-readable figures. It prints
figures and never fails on them: a benchmark is not a timed test.

Method
------
Every figure comes from the real engine — ``open_runtime`` + ``runtime.run`` on ``trio.run`` with
the system clock — driven by :class:`~effectagent.testing.ScriptedModel`, so no network and no model
time is involved: what is measured is the engine (turn loop, event stream and its reduction,
Conversation Log appends, the tool pipeline) plus ScriptedModel's own trivial part generator.

* Runs execute one after another inside one runtime, in batches. A batch's wall time divided by its
  runs is one sample; the table gives the median and the 90th percentile of the samples (after a
  warm-up round). Per-turn figures divide by the model steps of one run.
* The scenarios are measured in **interleaved rounds** — one batch of each per round — and every
  derived figure is computed *within* a round, from batches taken seconds apart, then the median
  over the rounds is reported. This machine's speed drifts by up to 2x over minutes; measured one
  scenario after another, that drift lands in the differences below (a 10 % drift of the 10-call run
  alone moves the per-call figure by 12 µs).
* **Per tool call** is derived from two runs that differ *only* in the number of calls in the batch:
  ``(10 parallel no-op calls - 1 no-op call) / 9``. Both runs have the same two turns, events and
  answer, so turn and run costs cancel out. (A "tool-free 2-turn run" does not exist — a turn
  without tool calls is the final answer — which is why the 1-call run is the baseline.) It is
  measured for two kinds of handler: one that never waits (a cache hit: the call runs in the
  batch's own task) and one that awaits one checkpoint, as every real tool waits for something
  (each waiting call then gets a worker task of the batch).
* **Marginal model step** is ``(10 sequential turns x 1 call - 1 call) / 9 - per tool call``: the
  cost of one more turn in a run that is already going, without the run's own start and end.
* **Memory** uses ``tracemalloc``: 1,000 runs are started concurrently in one runtime and each
  parks in its tool handler on a ``trio.Event``. The traced bytes retained while all are in flight,
  divided by 1,000, are the in-flight cost (the caller's task, which ``runtime.run`` drives the
  run in, the driver and its reducer, and the parked call — a batch of one call runs in that same
  task, with no nursery or task of its own). After the
  event is set and every run has completed, the bytes still retained per run are what the
  in-memory Conversation Log keeps
  (the canonical records of a completed run). ScriptedModel's list of received requests is cleared
  before each measurement: it is test bookkeeping, not engine state.

* **fast_init** (the generated ``__init__`` of the engine's value classes) must pay for itself: the
  tool-free run and the 10-call run are measured a second time in the same rounds, in the same
  process, with attrs' own ``__init__`` restored (``effectagent.effect._attrs_init.attrs_inits``);
  the report gives what fast_init saves of each.

Targets (printed next to the figures): ≤ 150 µs per model step and ≤ 50 µs per tool call, for
either kind of handler.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import platform
import statistics
import sys
import time
import tracemalloc
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from functools import partial
from typing import Any, Final

import attrs
import trio

from effectagent import (
    Agent,
    AgentPolicy,
    LanguageModelService,
    Layer,
    Tool,
    ToolCallContext,
    Toolkit,
    open_runtime,
)
from effectagent.ai import Handler, Usage
from effectagent.effect._attrs_init import attrs_inits
from effectagent.engine import ConversationLogService, InMemoryConversationLog, Runtime
from effectagent.testing import ScriptedModel, Turn

TARGET_STEP_US: Final = 150.0
TARGET_TOOL_US: Final = 50.0
ANSWER: Final = "Oslo: 4 °C, light wind, clear skies tonight."  # 4 deltas of 12 characters
CONCURRENT_RUNS: Final = 1_000


@attrs.frozen
class Ping:
    """Parameters of the no-op tool."""

    n: int


@attrs.frozen
class Pong:
    """What the no-op tool returns."""

    n: int


PING: Final = Tool(
    "ping",
    "Does nothing and answers at once.",
    parameters=Ping,
    success=Pong,
    readonly=True,
    idempotent=True,
)
WAIT: Final = Tool(
    "wait",
    "Answers after one scheduler pass, as a tool that waits for something.",
    parameters=Ping,
    success=Pong,
    readonly=True,
    idempotent=True,
)
TOOLKIT: Final = Toolkit(PING, WAIT)
AGENT: Final = Agent(
    "bench",
    instructions="Answer briefly.",
    toolkit=TOOLKIT,
    policy=AgentPolicy(max_turns=64, max_tool_calls=1_000, max_duration=3_600, tool_concurrency=16),
)


async def ping(params: Ping, call: ToolCallContext) -> Pong:
    """The no-op handler: no checkpoint, no work."""
    return Pong(params.n)


async def wait(params: Ping, call: ToolCallContext) -> Pong:
    """The waiting handler: one checkpoint (a scheduler pass), no work."""
    await trio.lowlevel.checkpoint()
    return Pong(params.n)


# ---- scripts -------------------------------------------------------------------------------------


# A fixed usage: without one a scripted turn counts its request's messages to report them as its
# input, which is the model double's cost, not the engine's.
USAGE: Final = Usage.of(20, 10)


def answer_turn() -> Turn:
    """The final answer, streamed as four text deltas."""
    return Turn.text(ANSWER, chunk=12, usage=USAGE)


def tool_free_script() -> list[Turn]:
    """One turn, no tools: a short streamed answer."""
    return [answer_turn()]


def parallel_script(calls: int, tool: str = "ping") -> list[Turn]:
    """Turn 1 declares ``calls`` calls of ``tool`` in one batch; turn 2 answers."""
    batch = Turn.tool_calls(*((tool, {"n": i}, f"call_{i}") for i in range(calls)), usage=USAGE)
    return [batch, answer_turn()]


def sequential_script(turns: int) -> list[Turn]:
    """``turns`` turns of one no-op call each, then the answer turn."""
    return [Turn.tool_calls(("ping", {"n": i}), usage=USAGE) for i in range(turns)] + [
        answer_turn()
    ]


@attrs.frozen
class Scenario:
    """One measured shape of run."""

    name: str
    script: Callable[[], list[Turn]]
    steps: int  # model steps (turns) per run
    tools: int  # tool calls per run
    batches: int
    per_batch: int
    attrs_init: bool = False  # measured with attrs' own __init__ instead of fast_init's


@attrs.frozen
class Measured:
    """Per-run samples (µs) of one scenario, one sample per batch: wall clock and CPU time."""

    scenario: Scenario
    samples: tuple[float, ...]
    cpu_samples: tuple[float, ...]

    @property
    def median(self) -> float:
        """Median µs per run."""
        return statistics.median(self.samples)

    @property
    def p90(self) -> float:
        """90th percentile µs per run."""
        return percentile(self.samples, 0.9)

    @property
    def cpu_median(self) -> float:
        """Median CPU µs per run (this thread only: robust on a loaded machine)."""
        return statistics.median(self.cpu_samples)


def percentile(samples: Sequence[float], q: float) -> float:
    """The ``q`` quantile of ``samples`` (nearest rank)."""
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


def scenarios(scale: float) -> list[Scenario]:
    """The measured scenarios; ``scale`` multiplies the number of rounds (batches of each)."""
    rounds = max(5, round(40 * scale))
    return [
        Scenario("tool-free turn (1 turn, 4 text deltas)", tool_free_script, 1, 0, rounds, 50),
        Scenario("1 tool call (2 turns)", lambda: parallel_script(1), 2, 1, rounds, 50),
        Scenario(
            "10 parallel tool calls (2 turns)", lambda: parallel_script(10), 2, 10, rounds, 25
        ),
        Scenario(
            "10 turns x 1 tool call (+ answer turn)",
            lambda: sequential_script(10),
            11,
            10,
            rounds,
            10,
        ),
        Scenario("1 waiting call (2 turns)", lambda: parallel_script(1, "wait"), 2, 1, rounds, 50),
        Scenario(
            "10 parallel waiting calls (2 turns)",
            lambda: parallel_script(10, "wait"),
            2,
            10,
            rounds,
            25,
        ),
        Scenario("tool-free turn, attrs' own __init__", tool_free_script, 1, 0, rounds, 50, True),
        Scenario(
            "10 parallel tool calls, attrs' own __init__",
            lambda: parallel_script(10),
            2,
            10,
            rounds,
            25,
            True,
        ),
    ]


# ---- measuring -----------------------------------------------------------------------------------


def model_layer(model: ScriptedModel) -> Layer:
    """The handlers plus ``model`` as the LanguageModel."""
    return TOOLKIT.handlers({PING: ping, WAIT: wait}) + Layer.succeed(LanguageModelService, model)


async def time_batch(scenario: Scenario, script: list[Turn]) -> tuple[float, float]:
    """One batch of ``scenario``: (wall µs, CPU µs) per run.

    Each batch gets a fresh runtime (and so a fresh in-memory log): otherwise the log of every
    earlier run stays alive, and the garbage collector's passes over it grow with the number of
    runs measured so far rather than with what one run costs. Opening and closing the runtime is
    not timed.
    """
    model = ScriptedModel(script * scenario.per_batch)
    async with open_runtime(model_layer(model), agents=[AGENT]) as runtime:
        gc.collect()
        with attrs_inits() if scenario.attrs_init else nullcontext():
            started, cpu_started = time.perf_counter_ns(), time.thread_time_ns()
            for _ in range(scenario.per_batch):
                result = await runtime.run(AGENT, "How warm is Oslo tonight?")
            elapsed = time.perf_counter_ns() - started
            cpu = time.thread_time_ns() - cpu_started
    if result.status != "completed" or len(result.outcomes) != scenario.tools:
        raise AssertionError(f"{scenario.name}: unexpected result {result!r}")
    model.assert_consumed()
    return elapsed / scenario.per_batch / 1_000, cpu / scenario.per_batch / 1_000


async def measure_rounds(specs: Sequence[Scenario]) -> tuple[list[Measured], list[float]]:
    """Time every scenario in interleaved rounds (one batch of each per round) after one warm-up
    round that warms caches (attrs/cattrs hooks, code paths) and is not recorded. Sample ``i`` of
    every scenario comes from round ``i``. Each round also times a short calibration (see
    :func:`calibrate`), so the report can say how fast the machine ran while it was measured."""
    scripts = [spec.script() for spec in specs]
    rounds = min(spec.batches for spec in specs)
    wall: list[list[float]] = [[] for _ in specs]
    cpu: list[list[float]] = [[] for _ in specs]
    calibrations: list[float] = []
    for round_ in range(rounds + 1):
        for i, spec in enumerate(specs):
            w, c = await time_batch(spec, scripts[i])
            if round_:
                wall[i].append(w)
                cpu[i].append(c)
        if round_:
            calibrations.append(await calibrate(batches=3, per_batch=500))
    measured = [Measured(spec, tuple(wall[i]), tuple(cpu[i])) for i, spec in enumerate(specs)]
    return measured, calibrations


@attrs.frozen
class MemoryFigures:
    """Traced bytes per run, in flight and after completion."""

    runs: int
    in_flight: float
    completed: float
    log_entries_per_run: float


async def measure_memory(runs: int) -> MemoryFigures:
    """Start ``runs`` concurrent runs that park in their handler; measure retained bytes per run."""
    gate = trio.Event()
    all_parked = trio.Event()
    parked = 0

    async def parking_ping(params: Ping, call: ToolCallContext) -> Pong:
        nonlocal parked
        parked += 1
        if parked == runs:
            all_parked.set()
        await gate.wait()
        return Pong(params.n)

    # All runs ask for turn 1 before any can ask for turn 2 (they all park first), so the script
    # is every run's first turn, then every run's answer.
    call = Turn.tool_calls(("ping", {"n": 1}), usage=USAGE)
    model = ScriptedModel([call] * runs + [answer_turn()] * runs)
    log = InMemoryConversationLog()
    handlers: dict[Tool[Any, Any] | str, Handler] = {PING: parking_ping, WAIT: wait}
    layer = TOOLKIT.handlers(handlers) + Layer.succeed(LanguageModelService, model)
    completed = 0

    async def one(runtime: Runtime) -> None:
        nonlocal completed
        result = await runtime.run(AGENT, "How warm is Oslo tonight?")
        if result.status == "completed":
            completed += 1

    async with open_runtime(layer + _log_layer(log), agents=[AGENT]) as runtime:
        gc.collect()
        tracemalloc.start()
        try:
            baseline = tracemalloc.get_traced_memory()[0]
            async with trio.open_nursery() as nursery:
                for _ in range(runs):
                    nursery.start_soon(one, runtime)
                with trio.fail_after(120):  # a run that never parks would hang the benchmark
                    await all_parked.wait()
                model.requests.clear()
                gc.collect()
                in_flight = tracemalloc.get_traced_memory()[0] - baseline
                gate.set()
            model.requests.clear()
            gc.collect()
            after = tracemalloc.get_traced_memory()[0] - baseline
        finally:
            tracemalloc.stop()
    if completed != runs:
        raise AssertionError(f"only {completed} of {runs} concurrent runs completed")
    entries = 0
    for conversation in log.conversations():
        entries += len(await log.entries(conversation))
    return MemoryFigures(runs, in_flight / runs, after / runs, entries / runs)


def _log_layer(log: InMemoryConversationLog) -> Layer:
    return Layer.succeed(ConversationLogService, log)


async def calibrate(batches: int = 21, per_batch: int = 2_000) -> float:
    """Median µs of one bare ``trio.lowlevel.checkpoint()`` (one pass of Trio's scheduler).

    Printed with the figures: it says how fast this machine runs Trio right now, so figures taken on
    a loaded or slower machine can be read in proportion.
    """
    samples = []
    for _ in range(batches):
        started = time.perf_counter_ns()
        for _ in range(per_batch):
            await trio.lowlevel.checkpoint()
        samples.append((time.perf_counter_ns() - started) / per_batch / 1_000)
    return statistics.median(samples)


@attrs.frozen
class Calibration:
    """One bare Trio checkpoint's µs, over the rounds: how fast the machine ran meanwhile."""

    median: float
    low: float
    high: float

    @staticmethod
    def of(samples: Sequence[float]) -> Calibration:
        """From the per-round samples."""
        return Calibration(statistics.median(samples), min(samples), max(samples))


# ---- report --------------------------------------------------------------------------------------


@attrs.frozen
class Derived:
    """Figures derived within each round, median over the rounds (µs)."""

    per_tool: float
    per_waiting_tool: float
    marginal_turn: float
    tool_free_run: float
    fast_init_saves_step: float  # fraction of a tool-free run
    fast_init_saves_batch: float  # fraction of a 10-call run

    @staticmethod
    def of(results: Sequence[Measured], cpu: bool = False) -> Derived:
        """Derive within each round from ``results`` (in :func:`scenarios` order, samples aligned
        by round), then take the median over the rounds of each figure."""
        series = [m.cpu_samples if cpu else m.samples for m in results]
        per_tool, per_waiting, marginal, tool_free, saves_step, saves_batch = [], [], [], [], [], []
        for free, one, ten, seq, one_wait, ten_wait, free_attrs, ten_attrs in zip(
            *series, strict=True
        ):
            tool = (ten - one) / 9
            per_tool.append(tool)
            per_waiting.append((ten_wait - one_wait) / 9)
            marginal.append((seq - one) / 9 - tool)
            tool_free.append(free)
            saves_step.append((free_attrs - free) / free_attrs)
            saves_batch.append((ten_attrs - ten) / ten_attrs)
        median = statistics.median
        return Derived(
            median(per_tool),
            median(per_waiting),
            median(marginal),
            median(tool_free),
            median(saves_step),
            median(saves_batch),
        )


def verdict(value: float, target: float) -> str:
    """``"meets"`` when ``value`` is within ``target``, else by how much it misses."""
    return "meets" if value <= target else f"MISSES x{value / target:.1f}"


def report(results: Sequence[Measured], memory: MemoryFigures | None, speed: Calibration) -> str:
    """The table of figures."""
    wall = Derived.of(results)
    cpu = Derived.of(results, cpu=True)
    width = 42
    lines = [
        f"engine overhead — Python {platform.python_version()}, trio {trio.__version__}, "
        f"{platform.machine()}; µs per run/turn, median and p90 of per-batch means",
        f"calibration: one bare trio checkpoint (a scheduler pass) took {speed.median:.1f} µs "
        f"here (median over the rounds; {speed.low:.1f}-{speed.high:.1f}) — this machine's speed "
        "drifts, read the figures in proportion",
        "",
        f"{'scenario':<{width}} {'runs':>5} {'µs/run':>8} {'p90':>8} {'CPU':>8} "
        f"{'µs/turn':>8} {'p90':>8}",
    ]
    for m in results:
        s = m.scenario
        lines.append(
            f"{s.name:<{width}} {len(m.samples) * s.per_batch:>5} {m.median:>8.1f} {m.p90:>8.1f} "
            f"{m.cpu_median:>8.1f} {m.median / s.steps:>8.1f} {m.p90 / s.steps:>8.1f}"
        )
    rows = [
        (
            "model step: tool-free run, start to end",
            wall.tool_free_run,
            cpu.tool_free_run,
            TARGET_STEP_US,
        ),
        ("model step: marginal turn", wall.marginal_turn, cpu.marginal_turn, TARGET_STEP_US),
        ("tool call, no-op handler", wall.per_tool, cpu.per_tool, TARGET_TOOL_US),
        (
            "tool call, handler awaits a checkpoint",
            wall.per_waiting_tool,
            cpu.per_waiting_tool,
            TARGET_TOOL_US,
        ),
    ]
    lines += [
        "",
        f"{'derived per round, median':<{width}} {'µs':>8} {'CPU':>8} {'target':>8}  verdict",
    ]
    for name, w, c, target in rows:
        lines.append(f"{name:<{width}} {w:>8.1f} {c:>8.1f} {target:>8.0f}  {verdict(w, target)}")
    lines += [
        "",
        "fast_init (same rounds, same process, against attrs' own __init__): saves "
        f"{wall.fast_init_saves_step:.1%} of a tool-free run, "
        f"{wall.fast_init_saves_batch:.1%} of a 10-call run (CPU: {cpu.fast_init_saves_step:.1%}, "
        f"{cpu.fast_init_saves_batch:.1%}); it stays while that is at least 5 %",
    ]
    if memory is not None:
        lines += [
            "",
            f"memory, {memory.runs:,} concurrent runs (tracemalloc)",
            f"  in flight, parked in a tool handler: {memory.in_flight:>8,.0f} bytes/run",
            f"  completed, retained by the log:      {memory.completed:>8,.0f} bytes/run "
            f"({memory.log_entries_per_run:.0f} records/run)",
        ]
    lines += [
        "",
        "tool call     = (10 parallel calls - 1 call) / 9  (same turns, only the batch differs)",
        "marginal turn = (10 turns x 1 call - 1 call) / 9 - tool call  (no run start/end)",
        "CPU = this thread's CPU time (robust on a loaded machine); the verdict uses wall time",
    ]
    return "\n".join(lines)


def as_json(results: Sequence[Measured], memory: MemoryFigures | None, speed: Calibration) -> str:
    """The figures as JSON (for tooling and comparisons)."""
    data: dict[str, object] = {
        "checkpoint_us": attrs.asdict(speed),
        "scenarios": {
            m.scenario.name: {
                "median_us": m.median,
                "p90_us": m.p90,
                "cpu_median_us": m.cpu_median,
                "steps": m.scenario.steps,
                "tools": m.scenario.tools,
            }
            for m in results
        },
        "derived_us": attrs.asdict(Derived.of(results)),
        "derived_cpu_us": attrs.asdict(Derived.of(results, cpu=True)),
    }
    if memory is not None:
        data["memory_bytes_per_run"] = attrs.asdict(memory)
    return json.dumps(data, indent=2)


async def main(scale: float = 1.0, *, memory: bool = True, json_output: bool = False) -> str:
    """Measure everything and return the report (or its JSON)."""
    # Freeze what importing and warming up left behind (~50,000 objects of trio, attrs, cattrs,
    # jsonschema...): a full collection would otherwise walk them all (tens of ms here) at random
    # points of the timed batches. The engine's own garbage is still collected as usual.
    gc.collect()
    gc.freeze()
    results, calibrations = await measure_rounds(scenarios(scale))
    figures = await measure_memory(CONCURRENT_RUNS) if memory else None
    render = as_json if json_output else report
    return render(results, figures, Calibration.of(calibrations))


def cli(argv: Sequence[str] | None = None) -> int:
    """Entry point: parse the options, measure, print."""
    parser = argparse.ArgumentParser(description="Measure the engine's own overhead.")
    parser.add_argument("--scale", type=float, default=1.0, help="multiply the number of batches")
    parser.add_argument("--quick", action="store_true", help="a fast, noisier pass (--scale 0.2)")
    parser.add_argument("--no-memory", action="store_true", help="skip the memory measurement")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)
    scale = 0.2 if args.quick else args.scale
    print(trio.run(partial(main, scale, memory=not args.no_memory, json_output=args.json)))
    return 0


if __name__ == "__main__":
    sys.exit(cli())
