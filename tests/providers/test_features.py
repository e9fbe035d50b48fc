"""Reasoning, cache-aware usage, structured output and reasoning replay, over HTTP per provider."""

from __future__ import annotations

from effectagent import Agent, Tool, ToolCallContext, Toolkit, open_runtime
from effectagent.ai import InputTokens, OutputFormat, ReasoningDeltaPart, Usage
from effectagent.ai._usage import OutputTokens
from effectagent.providers import Anthropic, OpenAICompatible, OpenAIResponses

from .conftest import KEY
from .helpers import collect, reduce, request
from .replay import ReplayServer, Reply
from .targets import Target
from .test_engine import Forecast, Lookup, Reading
from .wire import AnthropicWire, ChatWire, GeminiWire, ResponsesWire


async def test_compatible_servers_stream_reasoning_content(server: ReplayServer) -> None:
    wire = ChatWire("qwen3")
    events = [
        wire.chunk({"role": "assistant", "reasoning_content": "The user"}),
        wire.chunk({"reasoning_content": " greets."}),
        wire.chunk({"reasoning": " (Ollama names it so.)"}),
        wire.chunk({"content": "Hello!"}),
        wire.chunk({}, "stop"),
        wire.usage(12, 9, reasoning=6),
    ]  # no [DONE]: some servers end the body after the usage chunk
    server.script(Reply.sse(events))
    settings = OpenAICompatible("qwen3", base_url=f"{server.url}/v1")
    parts = await collect(settings)
    response = reduce(parts)
    assert response.reasoning == "The user greets. (Ollama names it so.)"
    assert response.text == "Hello!"
    assert response.usage.output == OutputTokens(9, 3, 6)
    assert server.requests[0].headers["authorization"] == "Bearer no-key"


async def test_responses_stream_reasoning_summaries(server: ReplayServer) -> None:
    wire = ResponsesWire("o4-mini")
    events = [
        wire.created(),
        *wire.reasoning("rs_1", 0, "Plan", "ning."),
        *wire.message("msg_1", 1, "Done."),
        wire.completed(wire.usage(40, 30, reasoning=20)),
    ]
    server.script(Reply.sse(events))
    settings = OpenAIResponses(
        "o4-mini",
        api_key=KEY,
        base_url=f"{server.url}/v1",
        reasoning_effort="low",
        reasoning_summary="auto",
    )
    parts = await collect(settings)
    assert [p.delta for p in parts if isinstance(p, ReasoningDeltaPart)] == ["Plan", "ning."]
    assert reduce(parts).reasoning == "Planning."
    body = server.requests[0].json()
    assert body["reasoning"] == {"effort": "low", "summary": "auto"}
    assert body["include"] == ["reasoning.encrypted_content"]
    assert body["store"] is False


async def test_anthropic_streams_thinking(server: ReplayServer) -> None:
    wire = AnthropicWire()
    events = [
        wire.start(),
        *wire.thinking_block(0, "Hmm, ", "easy."),
        *wire.text_block(1, "4"),
        *wire.finish("end_turn"),
    ]
    server.script(Reply.sse(events))
    settings = Anthropic(
        "claude-sonnet-4-5", api_key=KEY, base_url=server.url, thinking_budget=2048, max_tokens=4096
    )
    response = reduce(await collect(settings))
    assert (response.reasoning, response.text) == ("Hmm, easy.", "4")
    body = server.requests[0].json()
    assert body["thinking"] == {"type": "enabled", "budget_tokens": 2048}
    assert body["max_tokens"] == 4096


def usage_events(target: Target) -> list[bytes]:
    """A text answer whose usage reports 1000 input tokens: 600 read from the cache, 100
    written to it — and 300 output tokens of which 200 were reasoning."""
    if target.name == "anthropic":
        claude = AnthropicWire()
        return [
            claude.start(300, read=600, written=100),
            *claude.text_block(0, "ok"),
            *claude.finish("end_turn", 300, output_tokens_details={"thinking_tokens": 200}),
        ]
    if target.name == "gemini":  # the API reports no cache writes
        gemini = GeminiWire()
        usage = gemini.usage(1000, 100, cached=600, thoughts=200)
        return [gemini.event({"text": "ok"}, finish="STOP", usage=usage)]
    if target.name == "openai-responses":
        responses = ResponsesWire()
        usage = responses.usage(1000, 300, cached=600, written=100, reasoning=200)
        return [responses.created(), *responses.message("m", 0, "ok"), responses.completed(usage)]
    chat = ChatWire()
    return chat.text("ok", usage=chat.usage(1000, 300, cached=600, written=100, reasoning=200))


async def test_usage_keeps_cache_reads_and_writes_apart(
    target: Target, server: ReplayServer
) -> None:
    server.script(Reply.sse(usage_events(target)))
    response = reduce(await collect(target.settings(server.url, KEY)))
    written = 0 if target.name == "gemini" else 100
    assert response.usage == Usage(
        InputTokens(1000, 400 - written, 600, written), OutputTokens(300, 100, 200)
    )


async def test_the_output_schema_is_sent_natively(target: Target, server: ReplayServer) -> None:
    schema = {
        "type": "object",
        "properties": {"answer": {"type": "string"}},
        "required": ["answer"],
        "additionalProperties": False,
    }
    server.script(Reply.sse(target.text('{"answer": "yes"}')))
    req = request(output=OutputFormat("Verdict", schema))
    response = reduce(await collect(target.settings(server.url, KEY), req))
    assert response.text == '{"answer": "yes"}'
    body = server.requests[0].json()
    if target.name == "anthropic":
        assert body["output_config"] == {"format": {"type": "json_schema", "schema": schema}}
    elif target.name == "gemini":
        assert body["generationConfig"]["responseMimeType"] == "application/json"
        assert body["generationConfig"]["responseJsonSchema"] == schema
    elif target.name == "openai-responses":
        assert body["text"]["format"] == {
            "type": "json_schema",
            "name": "Verdict",
            "schema": schema,
            "strict": True,
        }
    else:
        assert body["response_format"] == {
            "type": "json_schema",
            "json_schema": {"name": "Verdict", "schema": schema, "strict": True},
        }


lookup = Tool("lookup", "Look a city up.", parameters=Lookup, success=Reading, readonly=True)
thinker = Agent("thinker", "Think, then answer.", toolkit=Toolkit(lookup))


async def handle(params: Lookup, call: ToolCallContext) -> Reading:
    return Reading(1.0)


async def test_anthropic_thinking_is_replayed_signed_in_the_tool_loop(server: ReplayServer) -> None:
    wire = AnthropicWire()
    first = [
        wire.start(),
        *wire.thinking_block(0, "I need the tool.", signature="sig-turn-1"),
        *wire.calls(("toolu_1", "lookup", '{"city": "Oslo"}'), first=1),
        *wire.finish("tool_use"),
    ]
    server.script(Reply.sse(first), Reply.sse(wire.text("1 °C")))
    settings = Anthropic(
        "claude-sonnet-4-5", api_key=KEY, base_url=server.url, thinking_budget=1024
    )
    layer = settings.layer() + Toolkit(lookup).handlers({lookup: handle})
    async with open_runtime(layer, agents=[thinker]) as runtime:
        result = await runtime.run(thinker, "Oslo?")
    assert result.status == "completed", result.error
    assistant = server.requests[1].json()["messages"][1]
    assert assistant["role"] == "assistant"
    assert assistant["content"][0] == {
        "type": "thinking",
        "thinking": "I need the tool.",
        "signature": "sig-turn-1",
    }
    assert assistant["content"][1]["type"] == "tool_use"


async def test_responses_reasoning_items_are_replayed_in_the_tool_loop(
    server: ReplayServer,
) -> None:
    wire = ResponsesWire("o4-mini")
    first = [
        wire.created(),
        *wire.reasoning("rs_1", 0, "Use the tool.", encrypted="enc-1"),
        wire.call_added(1, "fc_1", "call_1", "lookup"),
        *wire.call_done(1, "fc_1", "call_1", "lookup", '{"city": "Oslo"}'),
        wire.completed(),
    ]
    server.script(Reply.sse(first), Reply.sse(ResponsesWire("o4-mini").text("1 °C")))
    settings = OpenAIResponses(
        "o4-mini", api_key=KEY, base_url=f"{server.url}/v1", reasoning_effort="low"
    )
    layer = settings.layer() + Toolkit(lookup).handlers({lookup: handle})
    async with open_runtime(layer, agents=[thinker]) as runtime:
        result = await runtime.run(thinker, "Oslo?")
    assert result.status == "completed", result.error
    replayed = server.requests[1].json()["input"]
    kinds = [item.get("type", item.get("role")) for item in replayed]
    assert kinds[:5] == ["system", "user", "reasoning", "function_call", "function_call_output"]
    assert replayed[2]["id"] == "rs_1"
    assert replayed[2]["encrypted_content"] == "enc-1"


async def test_a_compatible_server_without_a_format_next_to_tools_gets_the_schema_in_its_system(
    server: ReplayServer,
) -> None:
    """Groq and llama.cpp refuse a response format in a request that offers tools:
    ``output_with_tools=False`` sends the schema in the system message of such a request, and
    the answer is decoded all the same."""
    wire = ChatWire("llama")
    server.script(
        Reply.sse(wire.calls(("call_1", "lookup", '{"city": "Oslo"}'))),
        Reply.sse(wire.text('{"city": "Oslo", "high_c": 1.0}')),
    )
    agent = Agent("weather", "Answer.", toolkit=Toolkit(lookup), output=Forecast)
    settings = OpenAICompatible("llama", base_url=f"{server.url}/v1", output_with_tools=False)
    layer = settings.layer() + Toolkit(lookup).handlers({lookup: handle})
    async with open_runtime(layer, agents=[agent]) as runtime:
        result = await runtime.run(agent, "Oslo?")
    assert result.status == "completed", result.error
    assert result.output == Forecast("Oslo", 1.0)
    for sent in server.requests:
        body = sent.json()
        assert "response_format" not in body
        system = body["messages"][0]
        assert system["role"] == "system"
        assert system["content"].startswith("Answer.\n\nYour final answer must be a single JSON")
        assert system["content"].count("Your final answer") == 1  # said once, by the adapter
