"""The openai-agents driver: ``Runner.run`` under asyncio, the model a ``Model`` of ours.

Run by ``benchmarks/peers.py`` in openai-agents' own virtualenv (see ``_protocol`` for the
protocol). The SDK has no function model, so :class:`OfflineModel` implements its ``Model``
interface: it counts the tool outputs in the input it is sent and answers as the scenario says,
the next tool calls or the final answer, with a fixed usage. Tracing is disabled (it would export
to the network).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from importlib.metadata import version
from typing import Any

from agents import (  # type: ignore[import-not-found]
    Agent,
    Model,
    ModelResponse,
    RunConfig,
    Runner,
    Usage,
    function_tool,
)
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)

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
    """Does nothing and answers at once.

    Args:
        n: Any number.
    """
    Counts.tool_calls += 1
    return n


def _answer() -> Any:
    text = ResponseOutputText(text=ANSWER, type="output_text", annotations=[])
    return ResponseOutputMessage(
        id="answer", type="message", role="assistant", status="completed", content=[text]
    )


def _call(seen: int, index: int) -> Any:
    return ResponseFunctionToolCall(
        id=call_id(seen, index),
        call_id=call_id(seen, index),
        type="function_call",
        name="ping",
        arguments=arguments(seen, index),
    )


class OfflineModel(Model):  # type: ignore[misc]
    """openai-agents' ``Model`` interface playing a scenario (non-streamed: what ``Runner.run``
    calls)."""

    def __init__(self, scenario: Scenario) -> None:
        self.scenario = scenario

    async def get_response(
        self, system_instructions: Any, input: Any, *args: Any, **kw: Any
    ) -> Any:
        Counts.model_requests += 1
        seen = (
            0
            if isinstance(input, str)
            else sum(item.get("type") == "function_call_output" for item in input)
        )
        calls = self.scenario.calls_to_make(seen)
        output = [_call(seen, i) for i in range(calls)] if calls else [_answer()]
        usage = Usage(
            requests=1,
            input_tokens=INPUT_TOKENS,
            output_tokens=OUTPUT_TOKENS,
            total_tokens=INPUT_TOKENS + OUTPUT_TOKENS,
        )
        return ModelResponse(output=output, usage=usage, response_id=None)

    def stream_response(self, *args: Any, **kw: Any) -> Any:
        raise NotImplementedError("the benchmark runs Runner.run, which does not stream")


RUN_CONFIG: Any = RunConfig(tracing_disabled=True)
PING: Any = function_tool(ping)


@asynccontextmanager
async def session(scenario: Scenario) -> AsyncIterator[Callable[[], Awaitable[str]]]:
    """One agent per batch, run with ``Runner.run``."""
    agent = Agent(
        name="bench", instructions="Answer briefly.", model=OfflineModel(scenario), tools=[PING]
    )

    async def run_once() -> str:
        result = await Runner.run(agent, PROMPT, max_turns=64, run_config=RUN_CONFIG)
        return str(result.final_output)

    yield run_once


if __name__ == "__main__":
    asyncio.run(serve("openai-agents", version("openai-agents"), session))
