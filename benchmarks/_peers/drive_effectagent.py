"""The effectagent driver: ``runtime.run`` under trio, the model a ``FunctionModel``.

Run by ``benchmarks/peers.py`` in the project's own virtualenv (see ``_protocol`` for the
protocol). The model function counts the tool results in the request it is sent and answers as the
scenario says: the next tool calls, each declared whole (as the peers' models do; nothing is
streamed in deltas), or the final answer as one text delta, with a fixed usage.
Each batch opens a fresh runtime (with a fresh in-memory Conversation Log, which otherwise keeps
every earlier run); opening and closing it is not timed.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from importlib.metadata import version
from typing import Final

import trio

from benchmarks._peers._protocol import (
    ANSWER,
    INPUT_TOKENS,
    OUTPUT_TOKENS,
    PROMPT,
    Counts,
    Scenario,
    arguments,
    call_id,
    serve,
)
from effectagent import Agent, AgentPolicy, Toolkit, open_runtime, tool
from effectagent.ai import FinishPart, ModelRequest, ToolCallPart, ToolMessage, Usage
from effectagent.testing import FunctionModel, Turn

USAGE: Final = Usage.of(INPUT_TOKENS, OUTPUT_TOKENS)


@tool
async def ping(n: int) -> int:
    """Does nothing and answers at once.

    Args:
        n: Any number.
    """
    Counts.tool_calls += 1
    return n


# The limits are raised past what the scenarios need (11 model requests, 10 calls at once, as the
# peers run them); the defaults would allow 4 calls at once.
AGENT: Final = Agent(
    "bench",
    instructions="Answer briefly.",
    toolkit=Toolkit(ping),
    policy=AgentPolicy(max_turns=64, max_tool_calls=1_000, max_duration=3_600, tool_concurrency=16),
)


def offline_model(scenario: Scenario) -> FunctionModel:
    """effectagent's FunctionModel playing ``scenario``."""

    def respond(request: ModelRequest) -> Turn:
        Counts.model_requests += 1
        seen = sum(len(m.content) for m in request.messages if isinstance(m, ToolMessage))
        calls = scenario.calls_to_make(seen)
        if not calls:
            return Turn.text(ANSWER, chunk=len(ANSWER), usage=USAGE)
        # Whole calls, as the peers' models answer (a non-streaming response declares each call
        # at once): no arguments streamed in deltas.
        return Turn.raw(
            *[ToolCallPart(call_id(seen, i), "ping", arguments(seen, i)) for i in range(calls)],
            FinishPart("tool-calls", USAGE),
        )

    return FunctionModel(respond)


@asynccontextmanager
async def session(scenario: Scenario) -> AsyncIterator[Callable[[], Awaitable[str]]]:
    """A fresh runtime per batch, run with ``runtime.run``."""
    model = offline_model(scenario)
    layer = AGENT.toolkit.handlers() + model.as_layer()
    async with open_runtime(layer, agents=[AGENT]) as runtime:

        async def run_once() -> str:
            result = await runtime.run(AGENT, PROMPT)
            # The model double keeps every request it was sent: test bookkeeping, not engine work.
            model.requests.clear()
            if result.status != "completed":
                return f"{result.status}: {result!r}"
            return result.text

        yield run_once


if __name__ == "__main__":
    trio.run(serve, "effectagent", version("effectagent"), session)
