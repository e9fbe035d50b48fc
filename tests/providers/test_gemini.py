"""Gemini over HTTP, beyond the cross-provider matrices: thinking, thought signatures replayed in
a tool loop, a schema with tools on a model before Gemini 3, the SDK's request options, Google's
retry delay, calls without IDs, and concurrent calls on one client each reading its own body."""

from __future__ import annotations

import base64
import json

import attrs
import pytest
import trio

from effectagent import Agent, Tool, ToolCallContext, Toolkit, open_runtime
from effectagent.ai import (
    ModelNetworkError,
    ModelUnavailable,
    OutputFormat,
    RateLimited,
    ReasoningDeltaPart,
)
from effectagent.effect import json_schema
from effectagent.providers import Gemini

from .conftest import KEY
from .helpers import WEATHER, collect, failure, reduce, request
from .replay import Recorded, ReplayServer, Reply
from .test_engine import Forecast, Lookup, Reading
from .wire import GeminiWire

#: Thought signatures in the standard base64 alphabet, as a test server may send them.
SIG_1 = base64.b64encode(b"\xfb\xff step one").decode()
SIG_2 = base64.b64encode(b"\xfb\xef thinking").decode()


def same_bytes(sent: str, given: str) -> bool:
    """Whether two base64 texts (either alphabet) hold the same bytes."""
    return base64.urlsafe_b64decode(sent) == base64.b64decode(given)


async def test_thinking_streams_as_reasoning(server: ReplayServer) -> None:
    wire = GeminiWire("gemini-2.5-flash")
    server.script(
        Reply.sse(
            [
                wire.event({"text": "Hmm, ", "thought": True}),
                wire.event({"text": "easy.", "thought": True}),
                wire.event({"text": "4"}, finish="STOP", usage=wire.usage(5, 1, thoughts=9)),
            ]
        )
    )
    settings = Gemini("gemini-2.5-flash", api_key=KEY, base_url=server.url, thinking_budget=2048)
    parts = await collect(settings)
    assert [p.delta for p in parts if isinstance(p, ReasoningDeltaPart)] == ["Hmm, ", "easy."]
    response = reduce(parts)
    assert (response.reasoning, response.text) == ("Hmm, easy.", "4")
    assert response.usage.output.reasoning == 9
    config = server.requests[0].json()["generationConfig"]
    assert config["thinkingConfig"] == {"thinking_budget": 2048, "include_thoughts": True}


lookup = Tool("lookup", "Look a city up.", parameters=Lookup, success=Reading, readonly=True)


async def handle(params: Lookup, call: ToolCallContext) -> Reading:
    return Reading(4.5 if params.city == "Oslo" else 20.0)


async def test_thought_signatures_are_replayed_on_their_parts_in_the_tool_loop(
    server: ReplayServer,
) -> None:
    wire = GeminiWire()
    first = [
        wire.event({"text": "Both cities.", "thought": True, "thoughtSignature": SIG_2}),
        wire.event(
            wire.call("fc_1", "lookup", '{"city": "Oslo"}', SIG_1),
            wire.call("fc_2", "lookup", '{"city": "Lima"}'),
            finish="STOP",
            usage=wire.usage(20, 10),
        ),
    ]
    server.script(Reply.sse(first), Reply.sse(GeminiWire().text("4.5 and 20 °C")))
    thinker = Agent("thinker", "Think, then answer.", toolkit=Toolkit(lookup))
    settings = Gemini("gemini-3-flash-preview", api_key=KEY, base_url=server.url)
    layer = settings.layer() + Toolkit(lookup).handlers({lookup: handle})
    async with open_runtime(layer, agents=[thinker]) as runtime:
        result = await runtime.run(thinker, "Oslo and Lima?")
    assert result.status == "completed", result.error
    model_turn = server.requests[1].json()["contents"][1]
    assert model_turn["role"] == "model"
    thought, call_1, call_2 = model_turn["parts"]
    assert (thought["thought"], thought["text"]) == (True, "Both cities.")
    assert same_bytes(thought["thoughtSignature"], SIG_2)
    assert call_1["functionCall"] == {"id": "fc_1", "name": "lookup", "args": {"city": "Oslo"}}
    assert same_bytes(call_1["thoughtSignature"], SIG_1)  # the same bytes, where they came
    assert "thoughtSignature" not in call_2
    results = server.requests[1].json()["contents"][2]["parts"]
    assert [r["functionResponse"]["id"] for r in results] == ["fc_1", "fc_2"]
    assert [r["functionResponse"]["response"] for r in results] == [
        {"output": {"high_c": 4.5}},
        {"output": {"high_c": 20.0}},
    ]


async def test_before_gemini_3_a_schema_with_tools_goes_in_the_system_instruction(
    server: ReplayServer,
) -> None:
    """Gemini 2.5 refuses a response schema next to function declarations: the request that
    offers tools carries the schema in its instruction, and the answer is decoded all the
    same."""
    wire = GeminiWire("gemini-2.5-flash")
    server.script(
        Reply.sse(wire.calls(("c1", "lookup", '{"city": "Oslo"}'))),
        Reply.sse(wire.text('{"city": "Oslo", "high_c": 4.5}')),
    )
    agent = Agent("weather", "Answer.", toolkit=Toolkit(lookup), output=Forecast)
    settings = Gemini("gemini-2.5-flash", api_key=KEY, base_url=server.url)
    layer = settings.layer() + Toolkit(lookup).handlers({lookup: handle})
    async with open_runtime(layer, agents=[agent]) as runtime:
        result = await runtime.run(agent, "Oslo?")
    assert result.status == "completed", result.error
    assert result.output == Forecast("Oslo", 4.5)
    for sent in server.requests:
        body = sent.json()
        assert "responseJsonSchema" not in body["generationConfig"]
        (instruction,) = body["systemInstruction"]["parts"]
        assert instruction["text"].startswith("Answer.\n\nYour final answer must be")
        assert '"high_c":{"type":"number"}' in instruction["text"]
    forced = attrs.evolve(settings, output_with_tools=True)  # a setting says otherwise
    server.script(Reply.sse(wire.text("{}")))
    output = OutputFormat("Forecast", json_schema(Forecast))
    await collect(forced, request(tools=(WEATHER,), output=output))
    assert "responseJsonSchema" in server.requests[-1].json()["generationConfig"]


async def test_settings_reach_the_request(server: ReplayServer) -> None:
    server.script(Reply.sse(GeminiWire().text("ok")))
    settings = Gemini(
        "gemini-2.5-flash",
        api_key=KEY,
        base_url=server.url,
        temperature=0.25,
        max_tokens=777,
        headers={"x-team": "weather"},
        extra_body={"generationConfig": {"topK": 3}, "safetySettings": []},
        api_version="v1",
        timeout=30,
    )
    await collect(settings)
    sent = server.requests[0]
    assert sent.path == "/v1/models/gemini-2.5-flash:streamGenerateContent?alt=sse"
    assert sent.headers["x-team"] == "weather"
    assert sent.headers["x-goog-api-key"] == KEY
    assert sent.headers["x-server-timeout"] == "30"
    body = sent.json()
    assert body["generationConfig"] == {"temperature": 0.25, "maxOutputTokens": 777, "topK": 3}
    assert body["safetySettings"] == []
    assert body["contents"] == [{"role": "user", "parts": [{"text": "Hi"}]}]


@pytest.mark.parametrize(("timeout", "millis"), [(0.0004, 1), (0.0015, 2), (30, 30_000)])
async def test_a_timeout_under_a_millisecond_is_still_a_timeout(
    timeout: float, millis: int
) -> None:
    """The SDK takes whole milliseconds and reads 0 as no timeout at all: a timeout is rounded
    up, never down to none (what the SDK's client was given shows it)."""
    settings = Gemini("gemini-2.5-flash", api_key=KEY, timeout=timeout)
    async with settings.open() as model:
        options = model._client._api_client._http_options  # the SDK client's own record
    assert options.timeout == millis


async def test_resource_exhausted_waits_googles_retry_delay(server: ReplayServer) -> None:
    retry = {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "7s"}
    body = {
        "error": {
            "code": 429,
            "message": "You exceeded your current quota.",
            "status": "RESOURCE_EXHAUSTED",
            "details": [retry],
        }
    }
    server.script(Reply.json(429, body))
    error, _ = await failure(Gemini("gemini-2.5-flash", api_key=KEY, base_url=server.url))
    assert isinstance(error, RateLimited)
    assert error.retry_after == 7.0
    assert len(server.requests) == 1  # the SDK did not retry on its own


async def test_a_retry_delay_too_large_to_read_is_no_retry_after(server: ReplayServer) -> None:
    """A ``retryDelay`` past what a float holds is unreadable, as such a header is: the engine's
    backoff decides the wait (an infinite ``retry_after`` would end the run without a retry)."""
    retry = {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "9" * 400 + "s"}
    body = {"error": {"code": 429, "message": "slow down", "status": "RESOURCE_EXHAUSTED"}}
    body["error"]["details"] = [retry]
    server.script(Reply.json(429, body))
    error, _ = await failure(Gemini("gemini-2.5-flash", api_key=KEY, base_url=server.url))
    assert isinstance(error, RateLimited)
    assert error.retry_after is None


async def test_calls_without_ids_are_answered_with_the_ids_they_were_given(
    server: ReplayServer,
) -> None:
    wire = GeminiWire()
    server.script(
        Reply.sse(wire.calls((None, "lookup", '{"city": "Oslo"}'), (None, "lookup", "{}"))),  # type: ignore[arg-type]
        Reply.sse(wire.text("done")),
    )
    agent = Agent("a", "Answer.", toolkit=Toolkit(lookup))
    layer = Gemini("gemini-3-flash-preview", api_key=KEY, base_url=server.url).layer()
    async with open_runtime(
        layer + Toolkit(lookup).handlers({lookup: handle}), agents=[agent]
    ) as rt:
        result = await rt.run(agent, "?")
    assert [(o.tool_call_id, o.kind) for o in result.outcomes] == [
        ("call_0", "success"),
        ("call_1", "invalid-input"),
    ]
    contents = server.requests[1].json()["contents"]
    assert [p["functionCall"]["id"] for p in contents[1]["parts"]] == ["call_0", "call_1"]
    assert [p["functionResponse"]["id"] for p in contents[2]["parts"]] == ["call_0", "call_1"]


async def test_concurrent_calls_on_one_client_each_read_their_own_body(
    server: ReplayServer,
) -> None:
    """The transport takes a body for the call waiting in that task only: eight calls at once on
    one model, each answered with its own prompt, each read back its own answer."""

    def echo(sent: Recorded) -> Reply:
        prompt = sent.json()["contents"][0]["parts"][0]["text"]
        return Reply.sse(GeminiWire().text("echo ", prompt))

    server.script(*[echo] * 8)
    answers: dict[str, str] = {}
    async with Gemini("gemini-2.5-flash", api_key=KEY, base_url=server.url).open() as model:

        async def ask(prompt: str) -> None:
            answers[prompt] = (await model.generate(request(prompt))).text

        async with trio.open_nursery() as nursery:
            for n in range(8):
                nursery.start_soon(ask, f"prompt {n}")
    assert answers == {f"prompt {n}": f"echo prompt {n}" for n in range(8)}
    assert sorted(
        json.loads(r.body)["contents"][0]["parts"][0]["text"] for r in server.requests
    ) == [f"prompt {n}" for n in range(8)]


async def test_an_error_page_that_is_not_json_is_still_typed(server: ReplayServer) -> None:
    page = Reply(502, (("content-type", "text/html"),), (b"<html>Bad gateway</html>",), "eof")
    server.script(page)
    error, parts = await failure(Gemini("gemini-2.5-flash", api_key=KEY, base_url=server.url))
    assert isinstance(error, ModelUnavailable)
    assert error.message == "Gemini answered HTTP 502 (Bad Gateway): <html>Bad gateway</html>"
    assert parts == []


async def test_a_connection_lost_after_the_finish_reason_loses_no_answer(
    server: ReplayServer,
) -> None:
    # Gemini's stream has no end event: its last event carries the finish reason. A connection
    # lost after it lost only the end of the body — the answer is whole, and is not retried.
    server.script(Reply.sse(GeminiWire().text("4 °C in ", "Oslo."), ending="drop"))
    settings = Gemini("gemini-3-flash-preview", api_key=KEY, base_url=server.url)
    response = reduce(await collect(settings))
    assert (response.text, response.finish_reason) == ("4 °C in Oslo.", "stop")


async def test_a_connection_lost_before_the_finish_reason_is_a_network_error(
    server: ReplayServer,
) -> None:
    server.script(Reply.sse(GeminiWire().text("4 °C in ", "Oslo.")[:-1], ending="drop"))
    settings = Gemini("gemini-3-flash-preview", api_key=KEY, base_url=server.url)
    error, _ = await failure(settings)
    assert isinstance(error, ModelNetworkError)
