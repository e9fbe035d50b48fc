"""Typed input, computed instructions, the context hook and the status note on each provider's
wire (#29 items 1-3): one run per adapter against the loopback replay server; the request must
carry the computed instructions where the provider takes instructions, the input rendered as JSON,
the hook's context item and the status note — and the record keep the input's JSON value."""

from __future__ import annotations

import json
from typing import Any

import attrs

from effectagent import Agent, AgentPolicy, open_runtime
from effectagent.core import (
    ContextItem,
    InstructionsContext,
    InstructionsRecorded,
    PreparedContext,
    TurnContext,
    UserInputRecorded,
)

from .conftest import KEY
from .replay import ReplayServer, Reply
from .targets import Target


@attrs.frozen
class Query:
    city: str
    days: int


async def instructions(context: InstructionsContext[Query]) -> str:
    return f"Forecast {context.input.days} days for {context.input.city}, briefly."


async def prepare(context: TurnContext[Query]) -> PreparedContext:
    return PreparedContext(items=[ContextItem(kind="doc", source="almanac", text="Oslo is cold.")])


agent = Agent(
    "weather",
    instructions,
    AgentPolicy(status_note=True),
    input=Query,
    prepare_context=prepare,
)


def strings(value: Any) -> list[str]:
    """Every string in a JSON body, depth first."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for item in value.values() for s in strings(item)]
    if isinstance(value, list):
        return [s for item in value for s in strings(item)]
    return []


def instructions_of(target: Target, body: dict[str, Any]) -> list[str]:
    """Where the provider takes the instructions."""
    if target.name == "anthropic":
        return strings(body["system"])
    if target.name == "gemini":
        return strings(body["systemInstruction"])
    if target.name == "openai-responses" and "instructions" in body:
        return [body["instructions"]]
    items = body.get("messages") or body.get("input") or []
    return [
        s for item in items if item.get("role") in ("system", "developer") for s in strings(item)
    ]


async def test_the_wire_carries_the_rendered_input_and_the_computed_instructions(
    target: Target, server: ReplayServer
) -> None:
    server.script(Reply.sse(target.text("Cold all week.")))
    model = target.settings(server.url, KEY).layer()
    async with open_runtime(model, agents=[agent]) as runtime:
        result = await runtime.run(agent, Query("Oslo", 3))
        log = [e.record for e in await runtime.log.entries(result.conversation_id)]
    assert result.status == "completed", result.error
    (body,) = (r.json() for r in server.requests)
    assert "Forecast 3 days for Oslo, briefly." in instructions_of(target, body)
    sent = strings(body)
    rendered = json.dumps({"city": "Oslo", "days": 3})
    assert rendered in sent
    assert "[Context: doc almanac]\nOslo is cold." in sent
    assert any(s.startswith("[Run status: turn 1 of at most 20") for s in sent)
    (record,) = [r for r in log if isinstance(r, UserInputRecorded)]
    assert (record.text, record.value) == (rendered, {"city": "Oslo", "days": 3})
    (recorded,) = [r for r in log if isinstance(r, InstructionsRecorded)]
    assert recorded.text == "Forecast 3 days for Oslo, briefly."
    assert server.unscripted == 0
