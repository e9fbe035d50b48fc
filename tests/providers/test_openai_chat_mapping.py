"""Chat Completions: the request body and the chunk → part mapping, without HTTP."""

from __future__ import annotations

import json
from typing import Any

import pytest

from effectagent.ai import (
    AssistantMessage,
    FinishPart,
    InputTokens,
    MalformedResponse,
    ModelRequest,
    ModelUnavailable,
    OutputFormat,
    ReasoningContent,
    ReasoningDeltaPart,
    ResponsePart,
    SystemMessage,
    TextContent,
    ToolCallContent,
    ToolMessage,
    ToolResultContent,
    Usage,
    UserMessage,
)
from effectagent.ai._usage import OutputTokens
from effectagent.providers import OpenAIChat, OpenAIResponses
from effectagent.providers._openai_chat import ChatCompletionsDecoder, chat_request_body

from .conftest import KEY
from .helpers import WEATHER, collect, reduce
from .replay import ReplayServer, Reply
from .wire import ChatWire, ResponsesWire

HISTORY = (
    SystemMessage("Be brief."),
    UserMessage.text("Weather in Oslo and Lima?"),
    AssistantMessage(
        (
            ReasoningContent("I should call the tool twice."),
            TextContent("Checking."),
            ToolCallContent("call_1", "weather", {"city": "Oslo"}),
            ToolCallContent("call_2", "weather", {"city": "Lima"}),
        )
    ),
    ToolMessage(
        (
            ToolResultContent("call_1", "weather", {"high_c": 4}),
            ToolResultContent("call_2", "weather", "unknown city", is_failure=True),
        )
    ),
    UserMessage((TextContent("And"), TextContent(" tomorrow?"))),
)


def test_messages_map_one_to_one_and_reasoning_is_not_sent_back() -> None:
    body = chat_request_body(ModelRequest(HISTORY), "gpt-4.1")
    assert body["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Weather in Oslo and Lima?"},
        {
            "role": "assistant",
            "content": "Checking.",
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "weather", "arguments": '{"city":"Oslo"}'},
                },
                {
                    "id": "call_2",
                    "type": "function",
                    "function": {"name": "weather", "arguments": '{"city":"Lima"}'},
                },
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": '{"high_c":4}'},
        {"role": "tool", "tool_call_id": "call_2", "content": "unknown city"},
        {
            "role": "user",
            "content": [{"type": "text", "text": "And"}, {"type": "text", "text": " tomorrow?"}],
        },
    ]
    assert "I should call" not in json.dumps(body)
    assert body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}
    assert "tools" not in body
    assert "tool_choice" not in body
    assert "response_format" not in body


@pytest.mark.parametrize(
    ("choice", "sent"),
    [
        ("auto", "auto"),
        ("none", "none"),
        ("required", "required"),
        ("weather", {"type": "function", "function": {"name": "weather"}}),
    ],
)
def test_tools_and_tool_choice(choice: str, sent: Any) -> None:
    body = chat_request_body(ModelRequest(HISTORY[:2], (WEATHER,), choice, 256), "gpt-4.1")
    assert body["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "weather",
                "description": WEATHER.description,
                "parameters": dict(WEATHER.parameters),
            },
        }
    ]
    assert body["tool_choice"] == sent
    assert body["max_completion_tokens"] == 256


def test_compatible_servers_get_max_tokens_and_options_never_override_the_request() -> None:
    body = chat_request_body(
        ModelRequest(HISTORY[:2], max_output_tokens=99),
        "qwen3",
        max_tokens_field="max_tokens",
        stream_usage=False,
        options={"temperature": 0.2, "model": "other", "top_k": 5},
    )
    assert body["max_tokens"] == 99
    assert "max_completion_tokens" not in body
    assert body["model"] == "qwen3"
    assert body["temperature"] == 0.2
    assert body["top_k"] == 5
    assert "stream_options" not in body


STRICT_SCHEMA = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "properties": {"high_c": {"type": "number"}},
    "required": ["high_c"],
    "additionalProperties": False,
}
LOOSE_SCHEMA = {"type": "object", "properties": {"high_c": {"type": "number"}}}


@pytest.mark.parametrize(
    ("output", "strict"),
    [
        (OutputFormat("Forecast", STRICT_SCHEMA), True),
        (OutputFormat("Forecast", STRICT_SCHEMA, strict=False), False),
        (OutputFormat("Forecast", LOOSE_SCHEMA), False),
    ],
)
def test_the_output_schema_is_a_json_schema_response_format(
    output: OutputFormat, strict: bool
) -> None:
    body = chat_request_body(ModelRequest(HISTORY[:2], output=output), "gpt-4.1")
    sent = body["response_format"]
    assert sent["type"] == "json_schema"
    assert sent["json_schema"]["name"] == "Forecast"
    assert sent["json_schema"]["strict"] is strict
    assert "$schema" not in sent["json_schema"]["schema"]
    assert sent["json_schema"]["schema"]["properties"] == {"high_c": {"type": "number"}}


def test_no_response_format_when_the_server_takes_none() -> None:
    request = ModelRequest(HISTORY[:2], output=OutputFormat("F", STRICT_SCHEMA))
    assert "response_format" not in chat_request_body(request, "m", native_output=False)


def chunk(
    delta: dict[str, Any] | None = None, finish: str | None = None, **more: Any
) -> dict[str, Any]:
    return {
        "id": "chatcmpl-9",
        "object": "chat.completion.chunk",
        "created": 1_700_000_000,
        "model": "gpt-4.1",
        "choices": [{"index": 0, "delta": delta or {}, "finish_reason": finish}],
        **more,
    }


def run(
    decoder: ChatCompletionsDecoder, chunks: list[dict[str, Any]], done: bool = True
) -> list[ResponsePart]:
    parts: list[ResponsePart] = []
    for item in chunks:
        parts.extend(decoder.feed(item))
    parts.extend(decoder.done() if done else decoder.end())
    return parts


def test_reasoning_content_from_compatible_servers_then_text() -> None:
    parts = run(
        ChatCompletionsDecoder(provider="vllm", require_done=False),
        [
            chunk({"role": "assistant", "reasoning_content": "Think"}),
            chunk({"reasoning_content": "ing."}),
            chunk({"content": "Answer"}),
            chunk({}, "stop"),
        ],
        done=False,
    )
    response = reduce(parts)
    assert response.reasoning == "Thinking."
    assert response.text == "Answer"
    assert [type(c).__name__ for c in response.content] == ["ReasoningContent", "TextContent"]
    assert [p.delta for p in parts if isinstance(p, ReasoningDeltaPart)] == ["Think", "ing."]


def test_usage_keeps_cache_reads_and_writes_apart() -> None:
    usage = {
        "prompt_tokens": 1000,
        "completion_tokens": 300,
        "total_tokens": 1300,
        "prompt_tokens_details": {"cached_tokens": 600, "cache_write_tokens": 100},
        "completion_tokens_details": {"reasoning_tokens": 200},
    }
    parts = run(
        ChatCompletionsDecoder(),
        [chunk({"content": "x"}), chunk({}, "stop"), {**chunk(), "choices": [], "usage": usage}],
    )
    finish = parts[-1]
    assert isinstance(finish, FinishPart)
    assert finish.usage == Usage(InputTokens(1000, 300, 600, 100), OutputTokens(300, 100, 200))


@pytest.mark.parametrize(
    ("reason", "finish"),
    [
        ("stop", "stop"),
        ("length", "length"),
        ("content_filter", "content-filter"),
        ("tool_calls", "tool-calls"),
        ("function_call", "tool-calls"),
        ("error", "error"),
        ("abort", "other"),
    ],
)
def test_finish_reasons(reason: str, finish: str) -> None:
    parts = run(ChatCompletionsDecoder(), [chunk({"content": "x"}), chunk({}, reason)])
    assert reduce(parts).finish_reason == finish


def test_a_refusal_is_text_and_a_content_filter_finish() -> None:
    parts = run(ChatCompletionsDecoder(), [chunk({"refusal": "I can't help."}), chunk({}, "stop")])
    response = reduce(parts)
    assert (response.text, response.finish_reason) == ("I can't help.", "content-filter")


def test_calls_that_finish_with_stop_are_reported_as_tool_calls() -> None:
    call = {
        "index": 0,
        "id": "c1",
        "type": "function",
        "function": {"name": "f", "arguments": "{}"},
    }
    parts = run(ChatCompletionsDecoder(), [chunk({"tool_calls": [call]}), chunk({}, "stop")])
    assert reduce(parts).finish_reason == "tool-calls"


def test_a_call_cut_by_the_length_limit_is_truncated_not_declared() -> None:
    call = {
        "index": 0,
        "id": "c1",
        "type": "function",
        "function": {"name": "f", "arguments": '{"a": '},
    }
    decoder = ChatCompletionsDecoder()
    parts = run(decoder, [chunk({"tool_calls": [call]}), chunk({}, "length")])
    response = reduce(parts)
    assert response.finish_reason == "length"
    assert response.tool_calls == ()


def test_servers_without_ids_or_indexes_and_with_decoded_arguments() -> None:
    whole = [
        {"function": {"name": "f", "arguments": {"a": 1}}},
        {"function": {"name": "g", "arguments": "{}"}},
    ]
    parts = run(
        ChatCompletionsDecoder(require_done=False),
        [chunk({"tool_calls": whole}), chunk({}, "tool_calls")],
        done=False,
    )
    calls = reduce(parts).tool_calls
    assert [(c.id, c.name, c.arguments) for c in calls] == [
        ("call_0", "f", '{"a":1}'),
        ("call_1", "g", "{}"),
    ]


def test_an_error_chunk_raises_the_typed_error() -> None:
    decoder = ChatCompletionsDecoder()
    decoder.feed(chunk({"content": "x"}))
    with pytest.raises(ModelUnavailable):
        decoder.feed({"error": {"message": "The server had an error", "type": "server_error"}})


@pytest.mark.parametrize(
    "broken",
    [
        [1, 2],
        {**chunk(), "choices": "nope"},
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": "{}"}}]}),
        chunk({"tool_calls": "nope"}),
    ],
)
def test_chunks_that_break_the_format(broken: object) -> None:
    with pytest.raises(MalformedResponse):
        ChatCompletionsDecoder().feed(broken)


def test_done_before_a_finish_and_an_end_without_done() -> None:
    decoder = ChatCompletionsDecoder()
    decoder.feed(chunk({"content": "x"}))
    with pytest.raises(MalformedResponse, match="before any finish"):
        decoder.done()
    strict = ChatCompletionsDecoder(require_done=True)
    strict.feed(chunk({}, "stop"))
    with pytest.raises(MalformedResponse, match=r"without \[DONE\]"):
        strict.end()
    lenient = ChatCompletionsDecoder(require_done=False)
    lenient.feed(chunk({}, "stop"))
    assert isinstance(lenient.end()[-1], FinishPart)


def test_content_after_the_finish_is_refused_and_empty_repeats_ignored() -> None:
    decoder = ChatCompletionsDecoder()
    decoder.feed(chunk({}, "stop"))
    assert decoder.feed(chunk({})) == []
    with pytest.raises(MalformedResponse, match="after its finish"):
        decoder.feed(chunk({"content": "more"}))


def test_parallel_tool_calls_is_sent_only_with_tools() -> None:
    options = {"parallel_tool_calls": False}
    without = chat_request_body(ModelRequest(HISTORY[:2]), "m", options=options)
    assert "parallel_tool_calls" not in without
    with_tools = chat_request_body(ModelRequest(HISTORY[:2], (WEATHER,)), "m", options=options)
    assert with_tools["parallel_tool_calls"] is False


def test_a_server_that_takes_no_format_next_to_tools_gets_the_schema_in_its_system_message() -> (
    None
):
    output = OutputFormat("F", STRICT_SCHEMA)
    with_tools = ModelRequest(HISTORY[:2], (WEATHER,), output=output)
    body = chat_request_body(with_tools, "m", output_with_tools=False)
    assert "response_format" not in body
    system = body["messages"][0]
    assert system["role"] == "system"
    assert system["content"].startswith("Be brief.\n\nYour final answer must be a single JSON")
    assert '"high_c":{"type":"number"}' in system["content"]
    no_system = ModelRequest(HISTORY[1:2], (WEATHER,), output=output)
    body = chat_request_body(no_system, "m", output_with_tools=False)
    assert body["messages"][0]["role"] == "system"
    assert body["messages"][1] == {"role": "user", "content": "Weather in Oslo and Lima?"}
    without_tools = ModelRequest(HISTORY[:2], output=output)  # no tools: the format goes
    body = chat_request_body(without_tools, "m", output_with_tools=False)
    assert body["response_format"]["type"] == "json_schema"
    assert body["messages"][0] == {"role": "system", "content": "Be brief."}
    # native_output=False: the engine wrote the instructions already; nothing is added here
    body = chat_request_body(with_tools, "m", native_output=False, output_with_tools=False)
    assert body["messages"][0] == {"role": "system", "content": "Be brief."}
    assert chat_request_body(with_tools, "m")["response_format"]["type"] == "json_schema"


def test_groq_usage_counts_until_a_top_level_usage_comes() -> None:
    groq = {"id": "req_1", "usage": {"prompt_tokens": 45, "completion_tokens": 3}}
    parts = run(
        ChatCompletionsDecoder(), [chunk({"content": "Hi"}), chunk({}, "stop", x_groq=groq)]
    )
    finish = parts[-1]
    assert isinstance(finish, FinishPart)
    assert (finish.usage.input.total, finish.usage.output.total) == (45, 3)
    usage = {"prompt_tokens": 46, "completion_tokens": 4}
    parts = run(
        ChatCompletionsDecoder(),
        [
            chunk({"content": "Hi"}),
            {**chunk(), "choices": [], "usage": usage},
            chunk({}, "stop", x_groq=groq),  # a top-level usage outranks Groq's own
        ],
    )
    finish = parts[-1]
    assert isinstance(finish, FinishPart)
    assert (finish.usage.input.total, finish.usage.output.total) == (46, 4)


#: Tool-call IDs other providers made: vLLM's (46 characters), a gateway's (83).
LONG_IDS = ("chatcmpl-tool-" + "0123456789abcdef" * 2, "gw_" + "x" * 80)


@pytest.mark.parametrize("api", ["chat", "responses"])
async def test_a_call_id_longer_than_openai_takes_goes_shortened(
    server: ReplayServer, api: str
) -> None:
    """Chat Completions takes tool-call IDs of 40 characters at most, the Responses API of 64: a
    conversation that moved to OpenAI with longer IDs sends each shortened — the same on the call
    and its result, two IDs never one — and an ID that fits as it is."""
    fits = "call_abc123"
    history = (
        UserMessage.text("Weather in Oslo?"),
        AssistantMessage(
            tuple(ToolCallContent(i, "weather", {"city": "Oslo"}) for i in (*LONG_IDS, fits))
        ),
        ToolMessage(tuple(ToolResultContent(i, "weather", {"c": 4}) for i in (*LONG_IDS, fits))),
    )
    req = ModelRequest(history, tools=(WEATHER,))
    if api == "chat":
        server.script(Reply.sse(ChatWire().text("Fine.")))
        await collect(OpenAIChat("gpt-4.1", api_key=KEY, base_url=f"{server.url}/v1"), req)
        body = server.requests[0].json()["messages"]
        calls = [call["id"] for call in body[1]["tool_calls"]]
        results = [message["tool_call_id"] for message in body[2:5]]
        limit = 40
    else:
        server.script(Reply.sse(ResponsesWire().text("Fine.")))
        await collect(OpenAIResponses("gpt-4.1", api_key=KEY, base_url=f"{server.url}/v1"), req)
        items = server.requests[0].json()["input"]
        calls = [item["call_id"] for item in items if item.get("type") == "function_call"]
        results = [i["call_id"] for i in items if i.get("type") == "function_call_output"]
        limit = 64
    assert calls == results
    assert all(len(call_id) <= limit for call_id in calls)
    assert len(set(calls)) == 3
    assert calls[2] == fits
    if api == "responses":  # 46 characters fit the Responses API
        assert calls[0] == LONG_IDS[0]
