"""What every framework's driver shares: the four scenarios, the model's decision, the line
protocol with ``benchmarks/peers.py``, and the timing of a batch.

This module imports the standard library only: it runs in each peer's own virtualenv, where
effectagent is not installed, as well as in the project's.

Protocol
--------
A driver is a long-lived process started by ``peers.py``. It writes one JSON line when it is ready
(``{"framework", "version"}``), then answers each command line read from stdin with one JSON line
on stdout:

* ``{"do": "batch", "scenario": "b", "runs": 50}`` → ``{"wall_us": ..., "cpu_us": ...}``: the
  scenario run ``runs`` times back to back, timed as a whole; the figures are per run.
* ``{"do": "freeze"}`` → ``{}``: after the warm-up, ``gc.freeze()`` what importing and warming up
  left behind, so no timed batch pays for a full collection walking the framework's own modules.

A driver checks its own work after every batch — each run's answer, and the counts of model
requests and tool calls against what the scenario asks for — and on any mismatch answers
``{"error": "..."}`` and exits with status 1: a framework that skipped work is never timed.
"""

from __future__ import annotations

import gc
import json
import sys
import time
from collections.abc import Awaitable, Callable, Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Final

__all__ = [
    "ANSWER",
    "INPUT_TOKENS",
    "OUTPUT_TOKENS",
    "PROMPT",
    "SCENARIOS",
    "Counts",
    "Scenario",
    "SessionFactory",
    "arguments",
    "call_id",
    "serve",
]

#: The final answer every run must return, whatever the framework.
ANSWER: Final = "Oslo: 4 °C, light wind, clear skies tonight."
#: The user's input of every run.
PROMPT: Final = "How warm is Oslo tonight?"
#: The fixed usage every model response reports (so no framework estimates tokens).
INPUT_TOKENS: Final = 20
OUTPUT_TOKENS: Final = 10


@dataclass(frozen=True)
class Scenario:
    """A shape of run: ``tool_turns`` model responses of ``calls`` tool calls each, then the
    answer."""

    key: str
    title: str
    calls: int
    tool_turns: int

    @property
    def model_requests(self) -> int:
        """Model requests per run (the answer is one more)."""
        return self.tool_turns + 1

    @property
    def tool_calls(self) -> int:
        """Tool calls per run."""
        return self.calls * self.tool_turns

    def calls_to_make(self, results_seen: int) -> int:
        """What the model asks for, given the tool results already in its request: the next
        ``calls`` tool calls, or 0 for the final answer. This is the whole model: every framework's
        offline model counts the results in the request it gets and builds its response from
        this."""
        return self.calls if results_seen < self.tool_calls else 0


SCENARIOS: Final = {
    s.key: s
    for s in (
        Scenario("a", "tool-free answer", 0, 0),
        Scenario("b", "1 tool call + answer", 1, 1),
        Scenario("c", "10 parallel tool calls + answer", 10, 1),
        Scenario("d", "10 turns x 1 call + answer", 1, 10),
    )
}


def call_id(results_seen: int, index: int) -> str:
    """The id of call ``index`` of the response made after ``results_seen`` results: unique
    within a run, as every framework requires."""
    return f"call_{results_seen + index}"


def arguments(results_seen: int, index: int) -> str:
    """The JSON arguments of that call (the no-op tool's one integer)."""
    return f'{{"n": {results_seen + index}}}'


class Counts:
    """What the offline model and the tool were asked for since the last reset (the driver's
    check of its own work)."""

    model_requests = 0
    tool_calls = 0

    @classmethod
    def reset(cls) -> None:
        """Start counting again."""
        cls.model_requests = 0
        cls.tool_calls = 0


#: Per scenario, an async context manager giving a coroutine function that runs one run and
#: returns its final text. What the context manager does on entry and exit (build a runtime,
#: close it) is not timed.
SessionFactory = Callable[[Scenario], AbstractAsyncContextManager[Callable[[], Awaitable[str]]]]


class DriverError(Exception):
    """The framework did not do the work the scenario asks for."""


async def _batch(session: SessionFactory, scenario: Scenario, runs: int) -> dict[str, float]:
    async with session(scenario) as run_once:
        # One untimed run first: whatever a fresh agent or runtime does once, on its first run, is
        # not a cost per run.
        await run_once()
        gc.collect()
        Counts.reset()
        started, cpu_started = time.perf_counter_ns(), time.process_time_ns()
        for _ in range(runs):
            answer = await run_once()
            if answer != ANSWER:
                raise DriverError(f"scenario {scenario.key}: a run answered {answer[:80]!r}")
        wall = time.perf_counter_ns() - started
        cpu = time.process_time_ns() - cpu_started
    expected = (runs * scenario.model_requests, runs * scenario.tool_calls)
    counted = (Counts.model_requests, Counts.tool_calls)
    if counted != expected:
        raise DriverError(
            f"scenario {scenario.key}: {runs} runs made {counted[0]} model requests and "
            f"{counted[1]} tool calls; the scenario asks for {expected[0]} and {expected[1]}"
        )
    return {"wall_us": wall / runs / 1_000, "cpu_us": cpu / runs / 1_000}


def _reply(message: Mapping[str, object]) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


async def serve(framework: str, version: str, session: SessionFactory) -> None:
    """Answer ``peers.py``'s commands until stdin closes (see the module notes).

    Reading stdin blocks the event loop between batches, which is harmless: nothing else runs then.

    Cancellation: not expected (the driver is stopped by closing its stdin); a cancellation
    propagates out of the batch under way.
    """
    _reply({"framework": framework, "version": version})
    for line in iter(sys.stdin.readline, ""):
        if not line.strip():
            continue
        command = json.loads(line)
        if command["do"] == "freeze":
            gc.collect()
            gc.freeze()
            _reply({})
            continue
        scenario = SCENARIOS[command["scenario"]]
        try:
            _reply(await _batch(session, scenario, int(command["runs"])))
        except DriverError as error:
            _reply({"error": f"{framework}: {error}"})
            raise SystemExit(1) from None
