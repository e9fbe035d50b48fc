"""Anthropic Messages: the request body and the event → part mapping, without HTTP."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from effectagent.ai import (
    AssistantMessage,
    InputTokens,
    MalformedResponse,
    ModelRequest,
    ModelUnavailable,
    NativeReasoningContent,
    OutputFormat,
    ReasoningContent,
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
from effectagent.providers import Anthropic
from effectagent.providers._anthropic_messages import MessagesDecoder, anthropic_request_body

from .conftest import KEY
from .helpers import WEATHER, collect, reduce
from .replay import ReplayServer, Reply
from .wire import AnthropicWire

HISTORY = (
    SystemMessage("Be brief."),
    UserMessage.text("Weather in Oslo and Lima?"),
    AssistantMessage(
        (
            ReasoningContent("Two calls."),
            TextContent(""),
            ToolCallContent("toolu_1", "weather", {"city": "Oslo"}),
            ToolCallContent("toolu_2", "weather", "not json"),
        )
    ),
    ToolMessage(
        (
            ToolResultContent("toolu_1", "weather", {"high_c": 4}),
            ToolResultContent("toolu_2", "weather", "bad arguments", is_failure=True),
        )
    ),
    UserMessage.text("Thanks."),
    SystemMessage("Answer in French."),
)


def events(raw: list[bytes]) -> list[dict[str, Any]]:
    return [json.loads(e.decode().split("data: ", 1)[1]) for e in raw]


def run(items: list[dict[str, Any]], decoder: MessagesDecoder | None = None) -> list[ResponsePart]:
    decoder = decoder or MessagesDecoder()
    parts: list[ResponsePart] = []
    for item in items:
        parts.extend(decoder.feed(item))
    parts.extend(decoder.end())
    return parts


def test_messages_system_merged_turns_and_tool_results() -> None:
    body = anthropic_request_body(ModelRequest(HISTORY), "claude-sonnet-4-5", max_tokens=1024)
    assert body["system"] == "Be brief.\n\nAnswer in French."
    assert body["max_tokens"] == 1024
    assert body["stream"] is True
    assert body["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "Weather in Oslo and Lima?"}]},
        {
            "role": "assistant",
            "content": [
                {"type": "tool_use", "id": "toolu_1", "name": "weather", "input": {"city": "Oslo"}},
                {
                    "type": "tool_use",
                    "id": "toolu_2",
                    "name": "weather",
                    "input": {"value": "not json"},
                },
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": '{"high_c":4}'},
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_2",
                    "content": "bad arguments",
                    "is_error": True,
                },
                {"type": "text", "text": "Thanks."},
            ],
        },
    ]
    assert "Two calls." not in json.dumps(body)  # unsigned reasoning is never sent


def test_native_thinking_in_the_prompt_goes_back_signed_before_the_tool_use() -> None:
    thinking = {"type": "thinking", "thinking": "Two calls.", "signature": "sig"}
    redacted = {"type": "redacted_thinking", "data": "opaque"}
    turn = HISTORY[2]
    assert isinstance(turn, AssistantMessage)
    native = (
        NativeReasoningContent("anthropic", "m", thinking),
        NativeReasoningContent("anthropic", "other-claude", redacted),
        NativeReasoningContent("openai-responses", "o4", {"type": "reasoning", "id": "rs"}),
        NativeReasoningContent("anthropic", "m", None, "too-large", 9),  # a marker: nothing
    )
    history = (*HISTORY[:2], AssistantMessage((*turn.content, *native)), *HISTORY[3:])
    body = anthropic_request_body(ModelRequest(history), "m", max_tokens=9000, thinking_budget=2048)
    content = body["messages"][1]["content"]
    assert content[:2] == [thinking, redacted]  # first, whatever their place in the turn
    assert [b["type"] for b in content[2:]] == ["tool_use", "tool_use"]
    assert body["thinking"] == {"type": "enabled", "budget_tokens": 2048}
    # A turn without tool calls sends no thinking back (the API only needs the tool loop's).
    answer = AssistantMessage((TextContent("Done."), native[0]))
    body = anthropic_request_body(
        ModelRequest((HISTORY[1], answer)), "m", max_tokens=9000, thinking_budget=2048
    )
    assert body["messages"][1]["content"] == [{"type": "text", "text": "Done."}]


@pytest.mark.parametrize(
    ("choice", "sent"),
    [
        ("auto", {"type": "auto"}),
        ("none", {"type": "none"}),
        ("required", {"type": "any"}),
        ("weather", {"type": "tool", "name": "weather"}),
    ],
)
def test_tools_choice_and_the_request_cap(choice: str, sent: dict[str, str]) -> None:
    body = anthropic_request_body(
        ModelRequest(HISTORY[:2], (WEATHER,), choice, 77), "m", max_tokens=9
    )
    assert body["tools"] == [
        {
            "name": "weather",
            "description": WEATHER.description,
            "input_schema": dict(WEATHER.parameters),
        }
    ]
    assert body["tool_choice"] == sent
    assert body["max_tokens"] == 77


def test_an_expressible_output_schema_is_native_output_config() -> None:
    schema = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "properties": {"high_c": {"type": "number", "minimum": -90}},
        "required": ["high_c"],
        "additionalProperties": False,
    }
    body = anthropic_request_body(
        ModelRequest(HISTORY[:2], output=OutputFormat("F", schema)), "m", max_tokens=9
    )
    sent = body["output_config"]["format"]
    assert sent["type"] == "json_schema"
    assert sent["schema"]["properties"]["high_c"] == {
        "type": "number",
        "description": "Constraints: minimum=-90.",
    }
    assert body["system"] == "Be brief."


def test_an_inexpressible_output_schema_goes_into_the_system_prompt() -> None:
    schema = {"type": "object", "additionalProperties": {"type": "integer"}}
    body = anthropic_request_body(
        ModelRequest(HISTORY[1:2], output=OutputFormat("Counts", schema)), "m", max_tokens=9
    )
    assert "output_config" not in body
    assert body["system"].startswith("Your final answer must be a single JSON value")
    assert json.dumps(schema, separators=(",", ":")) in body["system"]


def test_thinking_then_text_with_cache_usage() -> None:
    wire = AnthropicWire()
    raw = [
        wire.start(100, read=5000, written=300),
        wire.ping(),
        *wire.thinking_block(0, "Let me ", "think."),
        *wire.text_block(1, "Hello", "!"),
        *wire.finish("end_turn", 50, output_tokens_details={"thinking_tokens": 20}),
    ]
    decoder = MessagesDecoder(model="claude-x")
    response = reduce(run(events(raw), decoder))
    assert (response.reasoning, response.text, response.finish_reason) == (
        "Let me think.",
        "Hello!",
        "stop",
    )
    assert response.metadata is not None
    assert response.metadata.id == "msg_01"
    assert response.usage == Usage(InputTokens(5400, 100, 5000, 300), OutputTokens(50, 30, 20))
    native = [p for p in response.content if isinstance(p, NativeReasoningContent)]
    assert native == [
        NativeReasoningContent(
            "anthropic",
            "claude-x",
            {"type": "thinking", "thinking": "Let me think.", "signature": "sig-abc"},
            size=68,  # its compact JSON, in bytes
        )
    ]


def test_cumulative_usage_in_message_delta_replaces_the_start() -> None:
    wire = AnthropicWire()
    raw = [
        wire.start(10),
        *wire.text_block(0, "x"),
        *wire.finish("end_turn", 7, input_tokens=12, cache_read_input_tokens=3),
    ]
    response = reduce(run(events(raw)))
    assert response.usage.input == InputTokens(15, 12, 3, 0)
    assert response.usage.output.total == 7


@pytest.mark.parametrize(
    ("reason", "finish"),
    [
        ("end_turn", "stop"),
        ("stop_sequence", "stop"),
        ("max_tokens", "length"),
        ("model_context_window_exceeded", "length"),
        ("tool_use", "tool-calls"),
        ("pause_turn", "pause"),
        ("refusal", "content-filter"),
        ("something_new", "other"),
        (None, "unknown"),
    ],
)
def test_stop_reasons(reason: str | None, finish: str) -> None:
    wire = AnthropicWire()
    response = reduce(run(events([wire.start(), *wire.text_block(0, "x"), *wire.finish(reason)])))
    assert response.finish_reason == finish


def test_tool_use_with_a_whole_input_and_a_call_cut_by_max_tokens() -> None:
    wire = AnthropicWire()
    whole = [
        wire.start(),
        wire.block_start(
            0, {"type": "tool_use", "id": "t1", "name": "weather", "input": {"city": "Oslo"}}
        ),
        wire.block_stop(0),
        wire.block_start(1, {"type": "tool_use", "id": "t2", "name": "weather", "input": {}}),
        wire.block_stop(1),
        *wire.finish("tool_use"),
    ]
    calls = reduce(run(events(whole))).tool_calls
    assert [(c.id, c.arguments) for c in calls] == [("t1", '{"city":"Oslo"}'), ("t2", "{}")]
    cut = [
        wire.start(),
        wire.block_start(0, {"type": "tool_use", "id": "t1", "name": "weather", "input": {}}),
        wire.delta(0, {"type": "input_json_delta", "partial_json": '{"ci'}),
        wire.block_stop(0),
        *wire.finish("max_tokens"),
    ]
    response = reduce(run(events(cut)))
    assert response.tool_calls == ()
    assert [t.partial_arguments for t in response.truncated_calls] == ['{"ci']


def test_server_tool_blocks_and_citations_are_skipped() -> None:
    wire = AnthropicWire()
    raw = [
        wire.start(),
        wire.block_start(
            0, {"type": "server_tool_use", "id": "srv", "name": "web_search", "input": {}}
        ),
        wire.delta(0, {"type": "input_json_delta", "partial_json": "{}"}),
        wire.block_stop(0),
        *wire.text_block(1, "Found it."),
        wire.delta(1, {"type": "citations_delta", "citation": {}}),
        *wire.finish("end_turn"),
    ]
    response = reduce(run(events(raw)))
    assert response.text == "Found it."
    assert response.tool_calls == ()


def test_an_error_event_raises_the_typed_error() -> None:
    decoder = MessagesDecoder()
    with pytest.raises(ModelUnavailable, match="Overloaded"):
        decoder.feed(
            {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
        )


@pytest.mark.parametrize(
    "broken",
    [
        {"type": "content_block_delta", "index": 3, "delta": {"type": "text_delta", "text": "x"}},
        {"type": "content_block_stop", "index": 3},
        {"type": "content_block_start", "content_block": {"type": "text"}},
        {
            "type": "content_block_start",
            "index": 0,
            "content_block": {"type": "tool_use", "name": "f"},
        },
        {"type": "message_start", "message": None},
        {"type": 7},
    ],
)
def test_events_that_break_the_format(broken: dict[str, Any]) -> None:
    with pytest.raises(MalformedResponse):
        MessagesDecoder().feed(broken)


def test_a_delta_of_the_wrong_kind_and_an_early_end_are_malformed() -> None:
    decoder = MessagesDecoder()
    decoder.feed(
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}
    )
    with pytest.raises(MalformedResponse, match="input_json_delta inside a text block"):
        decoder.feed(
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "input_json_delta", "partial_json": "{"},
            }
        )
    with pytest.raises(MalformedResponse, match="before message_stop"):
        MessagesDecoder().end()


def test_the_thinking_budget_fits_each_request_cap() -> None:
    def thinking(cap: int | None) -> object:
        request = ModelRequest(HISTORY[:2], max_output_tokens=cap)
        return anthropic_request_body(request, "m", max_tokens=8192, thinking_budget=4096).get(
            "thinking"
        )

    assert thinking(None) == {"type": "enabled", "budget_tokens": 4096}
    assert thinking(2000) == {"type": "enabled", "budget_tokens": 1999}
    assert thinking(1000) is None  # below the API's minimum budget: no thinking for this one
    assert "thinking" not in anthropic_request_body(ModelRequest(HISTORY[:2]), "m", max_tokens=9)


@pytest.mark.parametrize("call_id", ["functions.weather:0", "call 1", "é" * 300])
async def test_a_call_id_another_provider_made_goes_as_the_messages_api_takes_it(
    server: ReplayServer, call_id: str
) -> None:
    """A conversation that moved to Anthropic (a fallback, a switch of model) holds calls with
    the IDs another server gave them; the API takes letters, digits, ``_`` and ``-`` only. The
    call and its result go with one ID of that form; an ID Anthropic made goes as it is."""
    history = (
        UserMessage.text("Weather in Oslo?"),
        AssistantMessage(
            (
                ToolCallContent(call_id, "weather", {"city": "Oslo"}),
                ToolCallContent("toolu_01A-b_2", "weather", {"city": "Lima"}),
            )
        ),
        ToolMessage(
            (
                ToolResultContent(call_id, "weather", {"high_c": 4}),
                ToolResultContent("toolu_01A-b_2", "weather", {"high_c": 20}),
            )
        ),
    )
    server.script(Reply.sse(AnthropicWire().text("Fine.")))
    await collect(
        Anthropic("claude-sonnet-4-5", api_key=KEY, base_url=server.url),
        ModelRequest(history, tools=(WEATHER,)),
    )
    messages = server.requests[0].json()["messages"]
    calls = [block["id"] for block in messages[1]["content"]]
    results = [block["tool_use_id"] for block in messages[2]["content"]]
    assert calls == results
    assert calls[1] == "toolu_01A-b_2"
    assert re.fullmatch(r"[A-Za-z0-9_-]{1,100}", calls[0])
    assert calls[0] != calls[1]
