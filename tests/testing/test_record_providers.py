"""Recording against the real provider adapters: each provider's wire format, served by the
loopback replay server of the provider tests; then replayed with that server stopped — the same
records, and not one more request reached the server. The API key is the canary: it never
reaches the cassette."""

from __future__ import annotations

from pathlib import Path

import attrs
import pytest
import trio

from effectagent import Agent, AgentPolicy, Toolkit, open_runtime, tool
from effectagent.core import LogEntry
from effectagent.effect import Layer
from effectagent.testing import Cassette, ReplayModel, assert_same_records, record
from tests.providers.replay import ReplayServer, Reply, start_server
from tests.providers.targets import TARGETS, Target

#: A made-up key: the canary that must never reach a cassette.
KEY = "sk-test-canary-0123456789abcdef"


@tool(readonly=True)
async def high(city: str) -> float:
    """Today's high in a city, in °C.

    Args:
        city: The city's name.
    """
    return 4.5 if city == "Oslo" else 20.0


@attrs.frozen
class Forecast:
    city: str
    high_c: float


agent = Agent(
    "weather",
    "Answer with today's high.",
    AgentPolicy(max_duration=60),
    Toolkit(high),
    output=Forecast,
)


@pytest.fixture(params=TARGETS, ids=[t.name for t in TARGETS])
def target(request: pytest.FixtureRequest) -> Target:
    value: Target = request.param
    return value


async def run(layer: Layer, *prompts: str) -> list[LogEntry]:
    """Each prompt, one run after the other in one conversation; the conversation's log."""
    async with open_runtime(layer + agent.toolkit.handlers(), agents=[agent], secrets=[KEY]) as rt:
        conversation: str | None = None
        for prompt in prompts:
            result = await rt.run(agent, prompt, conversation_id=conversation)
            assert result.status == "completed", result.error
            conversation = result.conversation_id
        assert conversation is not None
        return list(await rt.log.entries(conversation))


async def test_a_run_recorded_on_each_provider_replays_offline_with_the_same_records(
    target: Target, tmp_path: Path
) -> None:
    cassette = tmp_path / f"{target.name}.jsonl"
    async with trio.open_nursery() as nursery:
        server: ReplayServer = await start_server(nursery)
        server.script(
            Reply.sse(
                target.calls(
                    ("call_1", "high", '{"city": "Oslo"}'), ("call_2", "high", '{"city": "Rome"}')
                )
            ),
            Reply.sse(target.text('{"city": "Oslo", ', '"high_c": 4.5}')),
            Reply.sse(target.text('{"city": "Rome", "high_c": 20.0}')),
        )
        model = target.settings(server.url, KEY).layer()
        recorded = await run(record(model, cassette, secrets=[KEY]), "Oslo or Rome?", "And Rome?")
        nursery.cancel_scope.cancel()  # the server stops: the replay has no network to use
    asked = len(server.requests)
    assert asked == 3

    replay = ReplayModel(cassette, secrets=[KEY])
    replayed = await run(replay.as_layer(), "Oslo or Rome?", "And Rome?")
    assert_same_records(recorded, replayed)
    assert replay.served == 3
    assert len(server.requests) == asked

    text = cassette.read_text()
    assert KEY not in text
    read = Cassette.read(cassette)
    settings = target.settings("http://x", KEY)
    async with settings.open() as live:  # the name the provider's price is found by
        priced_by = live.model_name
    named = {"name": settings.layer().name, "native_output": True}
    # The header names that model only where it is not the layer's own name.
    assert read.model == named | ({} if priced_by == named["name"] else {"model_name": priced_by})
    assert replay.model_name == priced_by  # so the replay is costed as the recording was
    first = read.exchanges[0].request
    # The wrapper is the model the engine sees: it says what the provider takes natively, so the
    # schema went as the provider's output format, not appended to the instructions.
    assert first["messages"][0] == {"role": "system", "content": "Answer with today's high."}
    assert first["output"]["name"]  # the output schema went with each request…
    assert replay.requests[0].output is not None  # …and the replayed run sent it the same way
    assert first["tools"][0]["name"] == "high"
