"""OpenAI Responses: the request body and the event → part mapping, without HTTP."""

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
    NativeReasoningContent,
    OutputFormat,
    RateLimited,
    ReasoningContent,
    ResponsePart,
    TextContent,
    ToolCallContent,
    ToolMessage,
    ToolResultContent,
    Usage,
    UserMessage,
)
from effectagent.ai._usage import OutputTokens
from effectagent.providers._openai_responses import ResponsesDecoder, responses_request_body

from .helpers import WEATHER, reduce
from .wire import ResponsesWire

HISTORY = (
    UserMessage.text("Weather in Oslo?"),
    AssistantMessage(
        (
            ReasoningContent("Call the tool."),
            TextContent("Checking."),
            ToolCallContent("call_1", "weather", {"city": "Oslo"}),
        )
    ),
    ToolMessage((ToolResultContent("call_1", "weather", {"high_c": 4}),)),
)


def events(raw: list[bytes]) -> list[dict[str, Any]]:
    """The decoded JSON of each SSE event of the wire builders."""
    return [json.loads(e.decode().split("data: ", 1)[1]) for e in raw]


def run(items: list[dict[str, Any]], decoder: ResponsesDecoder | None = None) -> list[ResponsePart]:
    decoder = decoder or ResponsesDecoder()
    parts: list[ResponsePart] = []
    for item in items:
        parts.extend(decoder.feed(item))
    parts.extend(decoder.end())
    return parts


def test_input_items_and_reasoning_text_alone_is_not_sent() -> None:
    body = responses_request_body(ModelRequest(HISTORY), "gpt-4.1")
    assert body["input"] == [
        {"role": "user", "content": [{"type": "input_text", "text": "Weather in Oslo?"}]},
        {"role": "assistant", "content": "Checking."},
        {
            "type": "function_call",
            "call_id": "call_1",
            "name": "weather",
            "arguments": '{"city":"Oslo"}',
        },
        {"type": "function_call_output", "call_id": "call_1", "output": '{"high_c":4}'},
    ]
    assert body["store"] is False
    assert body["stream"] is True
    assert "include" not in body
    assert "reasoning" not in body


def test_native_reasoning_items_in_the_prompt_go_back_before_their_turn() -> None:
    item = {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "gAAA"}
    turn = HISTORY[1]
    assert isinstance(turn, AssistantMessage)
    native = (
        NativeReasoningContent("anthropic", "claude", {"type": "thinking", "signature": "s"}),
        NativeReasoningContent("openai-responses", "o4-mini", item),
    )
    history = (HISTORY[0], AssistantMessage((*turn.content, *native)), HISTORY[2])
    body = responses_request_body(
        ModelRequest(history), "o4-mini", reasoning={"effort": "low", "summary": "auto"}
    )
    assert body["input"][1] == item  # only OpenAI's own item, first in its turn
    assert [i.get("type", i.get("role")) for i in body["input"][2:]] == [
        "assistant",
        "function_call",
        "function_call_output",
    ]
    assert body["reasoning"] == {"effort": "low", "summary": "auto"}
    assert body["include"] == ["reasoning.encrypted_content"]
    stored = responses_request_body(
        ModelRequest(HISTORY), "o4-mini", store=True, reasoning={"effort": "low"}
    )
    assert "include" not in stored


def test_tools_choice_cap_and_output_format() -> None:
    schema = {
        "type": "object",
        "properties": {"high_c": {"type": "number"}},
        "required": ["high_c"],
        "additionalProperties": False,
    }
    body = responses_request_body(
        ModelRequest(
            HISTORY[:1], (WEATHER,), "weather", 300, output=OutputFormat("Forecast", schema)
        ),
        "gpt-4.1",
    )
    assert body["tools"] == [
        {
            "type": "function",
            "name": "weather",
            "description": WEATHER.description,
            "parameters": dict(WEATHER.parameters),
            "strict": False,
        }
    ]
    assert body["tool_choice"] == {"type": "function", "name": "weather"}
    assert body["max_output_tokens"] == 300
    assert body["text"] == {
        "format": {"type": "json_schema", "name": "Forecast", "schema": schema, "strict": True}
    }


def test_reasoning_summaries_then_text_with_cached_usage() -> None:
    wire = ResponsesWire("o4-mini")
    usage = wire.usage(1000, 300, cached=600, written=100, reasoning=200)
    raw = [
        wire.created(),
        *wire.reasoning("rs_1", 0, "Think", "ing."),
        *wire.message("msg_1", 1, "Hi"),
        wire.completed(usage),
    ]
    decoder = ResponsesDecoder(model="o4-mini")
    parts = run(events(raw), decoder)
    response = reduce(parts)
    assert (response.reasoning, response.text, response.finish_reason) == (
        "Thinking.",
        "Hi",
        "stop",
    )
    assert response.metadata is not None
    assert response.metadata.id == "resp_1"
    assert response.usage == Usage(InputTokens(1000, 300, 600, 100), OutputTokens(300, 100, 200))
    native = [p.data for p in response.content if isinstance(p, NativeReasoningContent)]
    assert native == [
        {
            "type": "reasoning",
            "id": "rs_1",
            "summary": [{"type": "summary_text", "text": "Thinking."}],
            "encrypted_content": "gAAAAB-opaque",
        }
    ]
    # Neither stored nor encrypted, an item cannot go back: it is not recorded.
    raw = [wire.created(), *wire.reasoning("rs_1", 0, "Hm.", encrypted=""), wire.completed(usage)]
    response = reduce(run(events(raw), ResponsesDecoder()))
    assert not [p for p in response.content if isinstance(p, NativeReasoningContent)]
    response = reduce(run(events(raw), ResponsesDecoder(store=True)))  # stored: by its ID
    assert [
        p.data["id"] for p in response.content if isinstance(p, NativeReasoningContent) if p.data
    ] == ["rs_1"]


def test_each_summary_part_is_a_reasoning_block() -> None:
    wire = ResponsesWire()
    raw = [
        wire.created(),
        wire.event(
            "response.reasoning_summary_part.added",
            item_id="rs",
            output_index=0,
            summary_index=0,
            part={},
        ),
        wire.event(
            "response.reasoning_summary_text.delta",
            item_id="rs",
            output_index=0,
            summary_index=0,
            delta="A",
        ),
        wire.event(
            "response.reasoning_summary_part.added",
            item_id="rs",
            output_index=0,
            summary_index=1,
            part={},
        ),
        wire.event(
            "response.reasoning_summary_text.delta",
            item_id="rs",
            output_index=0,
            summary_index=1,
            delta="B",
        ),
        wire.completed(),
    ]
    response = reduce(run(events(raw)))
    assert [c.text for c in response.content if isinstance(c, ReasoningContent)] == ["A", "B"]


@pytest.mark.parametrize(
    ("status", "details", "finish"),
    [
        ("incomplete", {"reason": "max_output_tokens"}, "length"),
        ("incomplete", {"reason": "content_filter"}, "content-filter"),
        ("incomplete", {"reason": "something_new"}, "other"),
        ("incomplete", None, "other"),
        ("cancelled", None, "other"),
    ],
)
def test_incomplete_responses(status: str, details: Any, finish: str) -> None:
    wire = ResponsesWire()
    end = wire.event(
        "response.incomplete" if status == "incomplete" else "response.completed",
        response=wire.response(status, wire.usage(1, 1), incomplete_details=details),
    )
    response = reduce(run(events([wire.created(), *wire.message("m", 0, "x"), end])))
    assert response.finish_reason == finish


def test_a_call_cut_by_max_output_tokens_is_truncated() -> None:
    wire = ResponsesWire()
    raw = [
        wire.created(),
        wire.call_added(0, "fc_0", "call_0", "weather"),
        wire.event(
            "response.function_call_arguments.delta", item_id="fc_0", output_index=0, delta='{"ci'
        ),
        wire.event(
            "response.incomplete",
            response=wire.response(
                "incomplete", None, incomplete_details={"reason": "max_output_tokens"}
            ),
        ),
    ]
    response = reduce(run(events(raw)))
    assert response.finish_reason == "length"
    assert response.tool_calls == ()
    assert [t.partial_arguments for t in response.truncated_calls] == ['{"ci']


def test_a_refusal_is_text_with_a_content_filter_finish() -> None:
    wire = ResponsesWire()
    raw = [
        wire.created(),
        wire.event(
            "response.refusal.delta", item_id="m", output_index=0, content_index=0, delta="No."
        ),
        wire.completed(),
    ]
    response = reduce(run(events(raw)))
    assert (response.text, response.finish_reason) == ("No.", "content-filter")


def test_failed_responses_and_error_events_raise_typed_errors() -> None:
    wire = ResponsesWire()
    failed = wire.response("failed", None, error={"code": "server_error", "message": "boom"})
    decoder = ResponsesDecoder()
    decoder.feed(events([wire.created()])[0])
    with pytest.raises(ModelUnavailable, match="boom"):
        decoder.feed({"type": "response.failed", "response": failed})
    with pytest.raises(RateLimited):
        ResponsesDecoder().feed({"type": "error", "code": "rate_limit_exceeded", "message": "slow"})


@pytest.mark.parametrize(
    "broken",
    [
        {"no": "type"},
        {"type": "response.output_text.delta", "item_id": "m"},
        {"type": "response.function_call_arguments.delta", "item_id": "ghost", "delta": "{"},
        {"type": "response.output_item.added", "item": {"type": "function_call", "id": "fc"}},
        {
            "type": "response.output_item.done",
            "item": {"type": "function_call", "id": "fc", "call_id": "c"},
        },
        {"type": "response.completed", "response": "done"},
    ],
)
def test_events_that_break_the_format(broken: dict[str, Any]) -> None:
    with pytest.raises(MalformedResponse):
        ResponsesDecoder().feed(broken)


def test_unknown_events_are_skipped_and_an_early_end_is_malformed() -> None:
    decoder = ResponsesDecoder()
    assert decoder.feed({"type": "response.web_search_call.searching", "item_id": "w"}) == []
    with pytest.raises(MalformedResponse, match="before the response completed"):
        decoder.end()
    assert isinstance(
        run(events([ResponsesWire().created(), ResponsesWire().completed()]))[-1], FinishPart
    )
