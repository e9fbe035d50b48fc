"""Embedding effectagent in your own Trio service.

The runtime is not a framework that owns the event loop: ``open_runtime`` is an async context
manager you open in one of *your* tasks, and every run is a child of it. Here a small "service":

* keeps the runtime open in a background task of its own nursery (``nursery.start`` hands the
  runtime over once it is built — preflight has run by then);
* serves two requests concurrently, each in its own task with its own deadline (a cancel scope);
* the slow request calls a tool that takes far longer than its deadline: the cancel scope interrupts
  the run, which writes its interruption to the Conversation Log before the scope exits;
* the quick request completes normally, untouched by its neighbour's cancellation;
* shutting the service down (cancelling its nursery) closes the runtime: anything still running
  would end with RunInterrupted, and every resource the layers built is released.

Run it with ``.venv/bin/python -m examples.embed_in_trio_service`` (about half a second, on the
real clock; the tests run it on Trio's MockClock).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Final

import attrs
import trio

from effectagent import (
    Agent,
    AgentPolicy,
    LanguageModelService,
    Layer,
    Runtime,
    Tool,
    ToolCallContext,
    Toolkit,
    open_runtime,
)
from effectagent.core import RunFailedRecord
from effectagent.engine import reduce_events
from effectagent.testing import ScriptedModel, Turn

__all__ = ["AGENT", "handle_request", "main", "serve_runtime"]

REQUEST_DEADLINE: Final = 0.5  # seconds, per request


@attrs.frozen
class ReportQuery:
    """Which sensor archive to summarize."""

    year: int


@attrs.frozen
class Report:
    """A summary of a year of sensor data."""

    year: int
    summary: str


ARCHIVE_REPORT: Final = Tool(
    "archive_report",
    "Summarize a whole year of sensor archives (slow).",
    parameters=ReportQuery,
    success=Report,
    readonly=True,
)
AGENT: Final = Agent(
    "assistant",
    instructions="Answer the operator's questions.",
    toolkit=Toolkit(ARCHIVE_REPORT),
    policy=AgentPolicy(max_turns=4, max_tool_calls=4, max_duration=60, tool_concurrency=2),
)


async def serve_runtime(
    layer: Layer, *, task_status: trio.TaskStatus[Runtime] = trio.TASK_STATUS_IGNORED
) -> None:
    """Keep a runtime open for the service's lifetime; hand it over once it is built.

    Cancellation: cancelling this task closes the runtime (active runs end RunInterrupted).
    """
    async with open_runtime(layer, agents=[AGENT]) as runtime:
        task_status.started(runtime)
        await trio.sleep_forever()


async def handle_request(
    runtime: Runtime, name: str, text: str, report: Callable[[str], None]
) -> str:
    """Serve one request under its deadline; return the run's status.

    Cancellation: the deadline's cancel scope interrupts the run; the stream's ``async with``
    waits until the run has written its interruption, so nothing of it outlives the request.
    """
    stream = runtime.stream(AGENT, text)
    with trio.move_on_after(REQUEST_DEADLINE):
        async with stream:
            result = await reduce_events(stream)
        report(f"{name}: {result.status} — {result.text!r}")
        return result.status
    # The deadline fired: the run was interrupted and said so in the log.
    entries = await runtime.log.entries(stream.conversation_id)
    last = entries[-1].record
    reason = last.reason if isinstance(last, RunFailedRecord) else type(last).__name__
    report(
        f"{name}: interrupted after {REQUEST_DEADLINE} s; the log ends with RunFailed({reason!r})"
    )
    return "interrupted"


async def main(report: Callable[[str], None] = print) -> dict[str, str]:
    """Run the service: two concurrent requests, one cut off by its deadline. Returns statuses."""
    slow_tool_started = trio.Event()

    async def archive_report(params: ReportQuery, call: ToolCallContext) -> Report:
        slow_tool_started.set()
        await trio.sleep(30)  # far beyond the request deadline
        return Report(params.year, "nothing unusual")

    # One scripted model serves both runs in the order they ask. The slow request goes first and
    # takes turn 1 (the tool call); the quick one starts once that tool runs, and takes turn 2.
    model = ScriptedModel(
        [
            Turn.tool_calls(("archive_report", {"year": 2025})),
            Turn.text("The boiler room is at 21°C and stable."),
        ]
    )
    handlers = AGENT.toolkit.handlers({ARCHIVE_REPORT: archive_report})
    layer = handlers + Layer.succeed(LanguageModelService, model, name="ScriptedModel")
    statuses: dict[str, str] = {}

    async def request(name: str, text: str) -> None:
        statuses[name] = await handle_request(runtime, name, text, report)

    async with trio.open_nursery() as service:  # the service's own nursery
        runtime: Runtime = await service.start(serve_runtime, layer)
        async with trio.open_nursery() as requests:
            requests.start_soon(request, "slow", "Summarize last year's sensor archives.")
            await slow_tool_started.wait()
            requests.start_soon(request, "quick", "How warm is the boiler room?")
        report(f"runs still active: {runtime.active_runs}")
        service.cancel_scope.cancel()  # shut the service down: closes the runtime
    model.assert_consumed()
    return statuses


if __name__ == "__main__":
    outcome = trio.run(main)
    sys.exit(0 if outcome == {"slow": "interrupted", "quick": "completed"} else 1)
