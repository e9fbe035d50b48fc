"""The pydantic-ai driver: ``agent.run`` under asyncio, the model a ``FunctionModel``.

Run by ``benchmarks/peers.py`` in pydantic-ai's own virtualenv (see ``_protocol`` for the
protocol). The model function counts the tool results in the messages it is sent and answers as
the scenario says: the next tool calls, or the final answer, with a fixed usage (so pydantic-ai
does not estimate tokens, as none of the other models does).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from importlib.metadata import version
from typing import Any

from pydantic_ai import Agent  # type: ignore[import-not-found]
from pydantic_ai.messages import (  # type: ignore[import-not-found]
    ModelResponse,
    TextPart,
    ToolCallPart,
)
from pydantic_ai.models.function import FunctionModel  # type: ignore[import-not-found]
from pydantic_ai.usage import RequestUsage  # type: ignore[import-not-found]

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


async def ping(n: int) -> int:
    """Does nothing and answers at once."""
    Counts.tool_calls += 1
    return n


def offline_model(scenario: Scenario) -> Any:
    """pydantic-ai's FunctionModel playing ``scenario``."""

    async def respond(messages: list[Any], info: Any) -> Any:
        Counts.model_requests += 1
        seen = sum(part.part_kind == "tool-return" for m in messages for part in m.parts)
        calls = scenario.calls_to_make(seen)
        usage = RequestUsage(input_tokens=INPUT_TOKENS, output_tokens=OUTPUT_TOKENS)
        if not calls:
            return ModelResponse(parts=[TextPart(ANSWER)], usage=usage)
        parts = [
            ToolCallPart("ping", arguments(seen, i), tool_call_id=call_id(seen, i))
            for i in range(calls)
        ]
        return ModelResponse(parts=parts, usage=usage)

    return FunctionModel(respond)


@asynccontextmanager
async def session(scenario: Scenario) -> AsyncIterator[Callable[[], Awaitable[str]]]:
    """One agent per batch, run with ``agent.run``."""
    agent = Agent(offline_model(scenario), instructions="Answer briefly.", tools=[ping])

    async def run_once() -> str:
        result = await agent.run(PROMPT)
        return str(result.output)

    yield run_once


if __name__ == "__main__":
    asyncio.run(serve("pydantic-ai", version("pydantic-ai-slim"), session))
