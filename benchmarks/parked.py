"""Parked runs: what a run costs in resident memory while it waits in a tool handler, at scale.

Run with ``.venv/bin/python benchmarks/parked.py`` (100,000 runs; ``make bench-peers`` runs it so),
``--quick`` for 10,000 (``make bench`` runs it so), ``--runs N`` for any count, ``--json`` for
machine-readable figures. It prints figures and never fails on them: a benchmark is not a timed
test.

Method
------
One process, one runtime (the real engine: ``open_runtime`` + ``runtime.run`` under ``trio.run``,
the in-memory Conversation Log), one agent with one tool, ``park(n: int) -> int``, whose handler
waits on a ``trio.Event``. The model is a few lines of offline model that asks for one ``park``
call and, once the request holds its result, answers; it keeps nothing of the requests it is sent.

1. **Warm-up**: 100 runs park and complete, so code paths, caches and the runtime's own state
   exist before the baseline.
2. **Baseline**: ``gc.collect()``, then the process's resident set size (``VmRSS`` of
   ``/proc/self/status``).
3. **Start-up**: N tasks of a nursery are each ``runtime.run`` itself (no wrapper of the
   script's own: what a task holds is the run's); the clock runs from the first ``start_soon``
   to the moment the N-th handler has parked. Every run is then in flight: its task, its driver
   and reducer, its model request and the records it has appended so far, and the parked call
   (its handler waiting on a ``trio.Event``).
4. **Parked**: ``gc.collect()``, then VmRSS again; (parked - baseline) / N is the RSS per parked
   run, the figure the target is about: **≤ 10 KB per parked run** (10,000 bytes).
5. **Completion**: the event is set, every run answers and ends; the time until the nursery is
   done, and the RSS the completed runs leave (the log keeps every run's records; freed memory
   is not always handed back to the system, so this is an upper bound).

Every run must complete with the answer — its conversation's log ends with the completion record
holding it — and exactly N calls must have parked, or the script fails: figures of runs that did
not do the work would mean nothing.
"""

from __future__ import annotations

import argparse
import gc
import json
import platform
import sys
import time
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any, Final

ROOT: Final = Path(__file__).resolve().parent.parent
# Run as a script, this directory comes first on sys.path, where benchmarks/sandbox.py would
# shadow the sandbox package: the project root goes before it.
sys.path.insert(0, str(ROOT))

import attrs  # noqa: E402
import trio  # noqa: E402

from effectagent import (  # noqa: E402
    Agent,
    AgentPolicy,
    LanguageModelService,
    Layer,
    Toolkit,
    open_runtime,
    tool,
)
from effectagent.ai import (  # noqa: E402
    ModelRequest,
    ModelResponse,
    ResponsePart,
    ToolMessage,
    Usage,
    generate,
)
from effectagent.core import RunCompletedRecord  # noqa: E402
from effectagent.engine import (  # noqa: E402
    ConversationLogService,
    InMemoryConversationLog,
    LogRetention,
)
from effectagent.testing import Turn  # noqa: E402

RUNS: Final = 100_000
QUICK_RUNS: Final = 10_000
WARM_UP_RUNS: Final = 100
TARGET_BYTES: Final = 10_000
ANSWER: Final = "Oslo: 4 °C, light wind, clear skies tonight."
PROMPT: Final = "How warm is Oslo tonight?"
USAGE: Final = Usage.of(20, 10)
#: The model's two responses, built once (its parts are immutable values).
CALL_PARTS: Final = Turn.tool_calls(("park", {"n": 1}), usage=USAGE).parts
ANSWER_PARTS: Final = Turn.text(ANSWER, chunk=len(ANSWER), usage=USAGE).parts


class OfflineModel:
    """Asks for one ``park`` call, then answers; records nothing (a test model's list of requests
    would grow with every run and be counted as the engine's)."""

    def stream(self, request: ModelRequest) -> AsyncIterator[ResponsePart]:
        """The call, or the answer once the request holds the call's result.

        Cancellation: no checkpoint of its own (the engine's consumer checkpoints).
        """
        answered = any(isinstance(m, ToolMessage) for m in request.messages)
        return _play(ANSWER_PARTS if answered else CALL_PARTS)

    async def generate(self, request: ModelRequest) -> ModelResponse:
        """The response as a whole.

        Cancellation: as :func:`effectagent.ai.generate`.
        """
        return await generate(self, request)


async def _play(parts: Sequence[ResponsePart]) -> AsyncIterator[ResponsePart]:
    for part in parts:
        yield part


class Gate:
    """Where the handlers park: counts arrivals (``arrive``), tells when ``expected`` have
    parked, and holds them until ``open`` is set."""

    def __init__(self, expected: int) -> None:
        self.expected = expected
        self.parked = 0
        self.all_parked = trio.Event()
        self.open = trio.Event()

    def arrive(self) -> None:
        """One more handler is about to park."""
        self.parked += 1
        if self.parked == self.expected:
            self.all_parked.set()


async def _answered(log: InMemoryConversationLog) -> int:
    """How many conversations of ``log`` end with the run completed with the answer (each run
    here has a conversation of its own)."""
    answered = 0
    for conversation_id in log.conversations():
        entries = await log.entries(conversation_id)
        last = entries[-1].record if entries else None
        if isinstance(last, RunCompletedRecord) and last.output == ANSWER:
            answered += 1
    return answered


def rss_bytes() -> int:
    """This process's resident set size now (``VmRSS``)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("/proc/self/status has no VmRSS line: this script needs Linux")


@attrs.frozen
class Timing:
    """Wall-clock and process CPU seconds: a point in time, or (subtracted) a span."""

    wall: float
    cpu: float

    @staticmethod
    def now() -> Timing:
        """Both clocks now."""
        return Timing(time.perf_counter(), time.process_time())

    def __sub__(self, other: Timing) -> Timing:
        return Timing(self.wall - other.wall, self.cpu - other.cpu)


@attrs.frozen
class Figures:
    """What one measurement found."""

    runs: int
    rss_per_parked_run: float  # bytes
    rss_per_completed_run: float  # bytes
    start_up_s: float  # first start to the last run parked
    start_up_cpu_s: float  # this process's CPU time meanwhile
    completion_s: float  # gate opened to every run ended
    completion_cpu_s: float
    baseline_rss: int  # bytes


async def measure(runs: int) -> Figures:
    """Park ``runs`` runs at once in one runtime and measure (see the module notes)."""
    gate = Gate(WARM_UP_RUNS)

    @tool
    async def park(n: int) -> int:
        """Waits until the benchmark lets it answer.

        Args:
            n: Any number.
        """
        gate.arrive()
        await gate.open.wait()
        return n

    agent = Agent(
        "parked",
        instructions="Answer briefly.",
        toolkit=Toolkit(park),
        policy=AgentPolicy(max_turns=4, max_tool_calls=4, max_duration=3_600),
    )
    # Every conversation kept, so each run's end can be checked after (while parked, a run's
    # conversation is held by the log whatever its retention).
    log = InMemoryConversationLog(LogRetention.keep_everything())
    layer = (
        agent.toolkit.handlers()
        + Layer.succeed(LanguageModelService, OfflineModel())
        + Layer.succeed(ConversationLogService, log)
    )

    async def wave(count: int) -> tuple[Timing, Timing, int]:
        """``count`` runs parked at once: start-up, completion, and the RSS while all parked."""
        nonlocal gate
        gate = Gate(count)
        async with trio.open_nursery() as nursery:
            started = Timing.now()
            for _ in range(count):
                nursery.start_soon(runtime.run, agent, PROMPT)
            await gate.all_parked.wait()
            start_up = Timing.now() - started
            gc.collect()
            parked_rss = rss_bytes()
            opened = Timing.now()
            gate.open.set()
        return start_up, Timing.now() - opened, parked_rss

    async with open_runtime(layer, agents=[agent]) as runtime:
        await wave(WARM_UP_RUNS)
        gc.collect()
        baseline = rss_bytes()
        start_up, completion, parked_rss = await wave(runs)
        gc.collect()
        completed_rss = rss_bytes()
    answered = await _answered(log)
    expected = WARM_UP_RUNS + runs
    if gate.parked != runs or answered != expected:
        raise AssertionError(
            f"of {runs:,} runs, {gate.parked:,} parked in the handler, and of the "
            f"{expected:,} runs with the warm-up {answered:,} completed with the answer; every "
            "run must do both"
        )
    return Figures(
        runs,
        (parked_rss - baseline) / runs,
        (completed_rss - baseline) / runs,
        start_up.wall,
        start_up.cpu,
        completion.wall,
        completion.cpu,
        baseline,
    )


def report(figures: Figures) -> str:
    """The figures, with the target's verdict."""
    per_run = figures.rss_per_parked_run
    verdict = "meets" if per_run <= TARGET_BYTES else f"MISSES x{per_run / TARGET_BYTES:.2f}"
    return "\n".join(
        [
            f"parked runs — Python {platform.python_version()}, trio {trio.__version__}, "
            f"{platform.machine()}; {figures.runs:,} runs in one runtime, each parked in a "
            "tool handler",
            f"  RSS per parked run:      {per_run:>10,.0f} bytes ({per_run / 1000:.1f} KB; "
            f"target ≤ {TARGET_BYTES / 1000:.0f} KB: {verdict})",
            f"  RSS per completed run:   {figures.rss_per_completed_run:>10,.0f} bytes "
            "(kept by the in-memory log; an upper bound)",
            f"  start-up of all runs:    {figures.start_up_s:>10.1f} s "
            f"({figures.start_up_s / figures.runs * 1e6:.0f} µs per run; CPU "
            f"{figures.start_up_cpu_s:.1f} s)",
            f"  completion of all runs:  {figures.completion_s:>10.1f} s "
            f"({figures.completion_s / figures.runs * 1e6:.0f} µs per run; CPU "
            f"{figures.completion_cpu_s:.1f} s)",
            f"  baseline RSS:            {figures.baseline_rss / 1e6:>10.1f} MB",
        ]
    )


def cli(argv: Sequence[str] | None = None) -> int:
    """Entry point: parse the options, measure, print."""
    parser = argparse.ArgumentParser(description="RSS of runs parked in a tool handler.")
    parser.add_argument("--runs", type=int, default=RUNS, help=f"runs at once (default {RUNS:,})")
    parser.add_argument("--quick", action="store_true", help=f"{QUICK_RUNS:,} runs")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)
    runs = QUICK_RUNS if args.quick else max(1, args.runs)
    figures = trio.run(measure, runs)
    data: dict[str, Any] = attrs.asdict(figures)
    print(json.dumps(data, indent=2) if args.json else report(figures))
    return 0


if __name__ == "__main__":
    sys.exit(cli())
