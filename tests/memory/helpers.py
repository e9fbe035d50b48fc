"""What the memory tests serve: short runs of one no-op tool call each, on one runtime."""

from __future__ import annotations

import gc
import tracemalloc
from collections.abc import Awaitable, Callable

import attrs

from effectagent import Agent, AgentPolicy, Layer, Tool, ToolCallContext, Toolkit
from effectagent.ai import ModelRequest, ToolMessage
from effectagent.testing import FunctionModel, Turn


@attrs.frozen
class Ping:
    """The no-op tool's parameters and result."""

    n: int


PING = Tool("ping", "Answers at once.", parameters=Ping, success=Ping, readonly=True)
TOOLKIT = Toolkit(PING)


async def ping(params: Ping, call: ToolCallContext) -> Ping:
    """The no-op handler."""
    return params


def respond(request: ModelRequest) -> Turn | str:
    """Ask for one ``ping``; once a result is in the request, answer."""
    if any(isinstance(message, ToolMessage) for message in request.messages):
        return "done"
    return Turn.tool_calls(("ping", {"n": 1}))


def make_agent(user: int = 0) -> Agent:
    """The served agent; a new one per user when instructions are per user."""
    return Agent(
        "served", f"Answer user {user} briefly.", toolkit=TOOLKIT, policy=AgentPolicy(max_turns=4)
    )


def serving_layer() -> tuple[FunctionModel, Layer]:
    """The model (its ``requests`` are the test's to clear) and the handlers, as a Layer."""
    model = FunctionModel(respond)
    return model, TOOLKIT.handlers({PING: ping}) + model.as_layer()


async def retained_per_run(serve: Callable[[int], Awaitable[None]], warm: int, runs: int) -> float:
    """Serve ``warm`` runs, then ``runs`` more; the bytes allocated and still held after them
    (``gc.collect()`` first), per run. ``serve(n)`` serves the n-th run.

    Tracing starts before the warm-up: what the runtime keeps in its steady state (the log's
    conversations up to its cap) is then traced on both sides, and a conversation evicted during
    the measured runs counts as freed."""
    tracemalloc.start()
    try:
        for n in range(warm):
            await serve(n)
        gc.collect()
        before = tracemalloc.take_snapshot()
        for n in range(warm, warm + runs):
            await serve(n)
        gc.collect()
        after = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    mine = [tracemalloc.Filter(False, __file__), tracemalloc.Filter(False, tracemalloc.__file__)]
    changes = after.filter_traces(mine).compare_to(before.filter_traces(mine), "filename")
    return sum(stat.size_diff for stat in changes) / runs
