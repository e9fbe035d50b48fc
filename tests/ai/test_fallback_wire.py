"""FallbackModel over the loopback wire formats, through the engine: a 429 storm on the first model
lands every turn on the second, and the records, the events and the usage say so; a stream that
opens and then reports an overloaded error falls back too, and nothing of it is shown."""

from __future__ import annotations

import pytest
import trio

from effectagent import Agent, Toolkit, open_runtime
from effectagent.ai import FallbackModel, ModelKey
from effectagent.core import (
    ModelResponseRecorded,
    ModelRetrying,
    RunCompleted,
    TextDelta,
    TurnCompleted,
)
from effectagent.effect import MissingServicesError
from effectagent.providers import model_layer
from tests.engine.helpers import HandlerProbe, entries, events_of, forecast_tool, run_events
from tests.providers.conftest import KEY
from tests.providers.replay import Reply, start_server
from tests.providers.targets import TARGETS
from tests.providers.wire import AnthropicWire, ChatWire, sse

PRIMARY, BACKUP = ModelKey("primary"), ModelKey("backup")


def rate_limited() -> Reply:
    body = {"error": {"message": "Rate limit reached", "type": "requests", "code": "rate_limit"}}
    return Reply.json(429, body, headers=[("retry-after", "20")])


async def test_a_429_storm_lands_every_turn_on_the_second_model_and_the_records_say_so(
    nursery: trio.Nursery,
) -> None:
    primary, backup = await start_server(nursery), await start_server(nursery)
    primary.script(*[rate_limited()] * 4)
    wire = ChatWire("backup-model")
    backup.script(
        Reply.sse(wire.calls(("call_1", "forecast", '{"city": "Oslo"}'))),
        Reply.sse(wire.text("4 °C in Oslo.", usage=wire.usage(50, 6))),
    )
    tool = forecast_tool()
    agent = Agent("weather", "Answer.", toolkit=Toolkit(tool))
    settings = [
        (PRIMARY, "openai-compatible:primary-model", primary.url),
        (BACKUP, "openai-compatible:backup-model", backup.url),
    ]
    members = [
        key.layer(model_layer(string, base_url=f"{url}/v1", api_key=KEY))
        for key, string, url in settings
    ]
    fallback = FallbackModel.layer(PRIMARY, BACKUP).provide_merge(members[0] + members[1])
    layer = Toolkit(tool).handlers(tool.bind(HandlerProbe().forecast())) + fallback
    async with open_runtime(layer, agents=[agent]) as runtime:
        events = await run_events(runtime, agent, "How warm is Oslo?")
        (done,) = events_of(events, RunCompleted)
        records = [e.record for e in await entries(runtime, done.conversation_id)]
    assert done.text == "4 °C in Oslo."
    # Each turn asked the first model, was refused, and was answered by the second at once.
    assert [r.json()["model"] for r in primary.requests] == ["primary-model"] * 2
    assert [r.json()["model"] for r in backup.requests] == ["backup-model"] * 2
    assert events_of(events, ModelRetrying) == []
    responses = [r for r in records if isinstance(r, ModelResponseRecorded)]
    assert [r.model for r in responses] == ["backup", "backup"]
    assert [t.model for t in events_of(events, TurnCompleted)] == ["backup", "backup"]
    assert done.model == "backup"
    assert [name for name, _ in done.usage.by_model] == ["backup"]
    assert dict(done.usage.by_model)["backup"].input_tokens == 20 + 50


async def test_an_overloaded_stream_falls_back_and_shows_nothing_of_itself(
    nursery: trio.Nursery,
) -> None:
    primary, backup = await start_server(nursery), await start_server(nursery)
    anthropic = next(t for t in TARGETS if t.name == "anthropic")
    overloaded = anthropic.stream_error("overloaded_error", "Overloaded")
    primary.script(Reply.sse([AnthropicWire().start(), sse({"type": "ping"}, "ping"), overloaded]))
    backup.script(Reply.sse(ChatWire("backup-model").text("from the backup")))
    agent = Agent("plain", "Answer.")
    layer = FallbackModel.layer(PRIMARY, BACKUP).provide(
        PRIMARY.layer(anthropic.settings(primary.url, KEY).layer())
        + BACKUP.layer(model_layer("openai-compatible:backup-model", base_url=f"{backup.url}/v1"))
    )
    async with open_runtime(layer, agents=[agent]) as runtime:
        events = await run_events(runtime, agent, "hi")
    assert [e.text for e in events_of(events, TextDelta)] == ["from the backup"]
    (done,) = events_of(events, RunCompleted)
    assert done.model == "backup"
    assert len(primary.requests) == 1


async def test_a_missing_member_is_named_before_anything_is_built() -> None:
    agent = Agent("plain", "Answer.")
    with pytest.raises(MissingServicesError) as caught:
        async with open_runtime(FallbackModel.layer(PRIMARY, BACKUP), agents=[agent]):
            pass
    assert {(m.key.name, m.required_by) for m in caught.value.missing} == {
        ("model primary", "layer 'fallback: primary then backup'"),
        ("model backup", "layer 'fallback: primary then backup'"),
    }
