"""What the cassette tests share: a small agent with one tool, and runs recorded and replayed
through the real engine on Trio's mock clock."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import trio
import trio.testing

from effectagent import Agent, AgentPolicy, Toolkit, open_runtime, tool
from effectagent.core import LogEntry
from effectagent.effect import Layer
from effectagent.engine import RunResult
from effectagent.testing import ScriptedModel, Turn

__all__ = ["CANARY", "agent_with", "forecast", "run_on", "scripted_weather", "weather"]

#: A made-up secret: it must never reach a cassette.
CANARY = "sk-canary-5f2e9d7c41b0"


@tool(readonly=True, timeout=30)
async def forecast(city: str) -> float:
    """Today's high in a city, in °C.

    Args:
        city: The city's name.
    """
    await trio.sleep(1)
    return {"Oslo": 4.0, "Rome": 17.5}.get(city, 10.0)


def agent_with(*tools: Any, policy: AgentPolicy | None = None) -> Agent[Any]:
    """The weather agent with ``tools`` (its own ``forecast`` by default)."""
    return Agent(
        "weather",
        "Answer with today's high.",
        policy or AgentPolicy(max_duration=120),
        Toolkit(*(tools or (forecast,))),
    )


weather = agent_with()


def scripted_weather() -> ScriptedModel:
    """Two forecasts in parallel, then the answer."""
    return ScriptedModel(
        [
            Turn.tool_calls(
                ("forecast", {"city": "Oslo"}, "call_1"), ("forecast", {"city": "Rome"}, "call_2")
            ),
            Turn.text("4 °C in Oslo, 17.5 °C in Rome.", chunk=7),
        ]
    )


def run_on(
    layer: Layer,
    agent: Agent[Any] = weather,
    prompts: Sequence[str] = ("How warm is it in Oslo and Rome?",),
    *,
    secrets: Sequence[str] = (),
) -> tuple[list[RunResult[Any]], list[LogEntry]]:
    """Run ``agent`` on each prompt in turn, in one conversation, on a mock clock: the results
    and the conversation's log."""

    async def main() -> tuple[list[RunResult[Any]], list[LogEntry]]:
        results: list[RunResult[Any]] = []
        async with open_runtime(
            layer + agent.toolkit.handlers(), agents=[agent], secrets=secrets
        ) as runtime:
            for prompt in prompts:
                conversation = results[0].conversation_id if results else None
                results.append(await runtime.run(agent, prompt, conversation_id=conversation))
            entries = list(await runtime.log.entries(results[0].conversation_id))
        return results, entries

    return trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))


def lines(path: Path) -> list[str]:
    """The cassette's lines."""
    return path.read_text(encoding="utf-8").splitlines()
