"""Gemini generateContent: the contents and configuration, and the event → part mapping, without
HTTP."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from effectagent.ai import (
    AssistantMessage,
    AuthenticationFailed,
    InputTokens,
    MalformedResponse,
    Message,
    ModelRequest,
    ModelUnavailable,
    NativeReasoningContent,
    OutputFormat,
    RateLimited,
    ReasoningContent,
    ResponsePart,
    SystemMessage,
    TextContent,
    ToolCallContent,
    ToolMessage,
    ToolParamsDeltaPart,
    ToolResultContent,
    Usage,
    UserMessage,
)
from effectagent.ai._usage import OutputTokens
from effectagent.providers._errors import error_from_payload, error_from_status
from effectagent.providers._gemini_content import (
    GeminiDecoder,
    gemini_contents,
    gemini_request,
    signature_bytes,
)
from effectagent.providers._gemini_model import Gemini, takes_output_with_tools

from .helpers import WEATHER, reduce
from .wire import GeminiWire


def with_native(
    history: tuple[Message, ...], native: list[NativeReasoningContent]
) -> tuple[Message, ...]:
    """``history`` with ``native`` added to its first assistant turn (as the log projects it)."""
    at = next(i for i, m in enumerate(history) if isinstance(m, AssistantMessage))
    turn = history[at]
    assert isinstance(turn, AssistantMessage)
    return (*history[:at], AssistantMessage((*turn.content, *native)), *history[at + 1 :])


def native_of(parts: list[ResponsePart]) -> list[NativeReasoningContent]:
    return [p for p in reduce(parts).content if isinstance(p, NativeReasoningContent)]


HISTORY = (
    SystemMessage("Be brief."),
    UserMessage.text("Weather in Oslo and Lima?"),
    AssistantMessage(
        (
            ReasoningContent("Two calls."),
            TextContent("Looking."),
            ToolCallContent("c1", "weather", {"city": "Oslo"}),
            ToolCallContent("c2", "weather", "not json"),
        )
    ),
    ToolMessage(
        (
            ToolResultContent("c1", "weather", {"high_c": 4}),
            ToolResultContent("c2", "weather", "bad arguments", is_failure=True),
        )
    ),
    UserMessage.text("Thanks."),
    SystemMessage("Answer in French."),
)

SCHEMA = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "properties": {"answer": {"type": "string"}},
    "required": ["answer"],
}


def events(raw: list[bytes]) -> list[dict[str, Any]]:
    return [json.loads(e.decode().split("data: ", 1)[1]) for e in raw]


def run(items: list[dict[str, Any]], decoder: GeminiDecoder | None = None) -> list[ResponsePart]:
    decoder = decoder or GeminiDecoder()
    parts: list[ResponsePart] = []
    for item in items:
        parts.extend(decoder.feed(item))
    parts.extend(decoder.end())
    return parts


# ---- the request --------------------------------------------------------------------------------


def test_system_merged_turns_and_tool_results() -> None:
    system, contents = gemini_contents(HISTORY)
    assert system == "Be brief.\n\nAnswer in French."
    assert contents == [
        {"role": "user", "parts": [{"text": "Weather in Oslo and Lima?"}]},
        {
            "role": "model",
            "parts": [
                {"text": "Looking."},  # plain reasoning text is not sent back
                {"function_call": {"id": "c1", "name": "weather", "args": {"city": "Oslo"}}},
                {"function_call": {"id": "c2", "name": "weather", "args": {"value": "not json"}}},
            ],
        },
        {
            "role": "user",  # the results and the next user text: one turn
            "parts": [
                {
                    "function_response": {
                        "id": "c1",
                        "name": "weather",
                        "response": {"output": {"high_c": 4}},
                    }
                },
                {
                    "function_response": {
                        "id": "c2",
                        "name": "weather",
                        "response": {"error": "bad arguments"},
                    }
                },
                {"text": "Thanks."},
            ],
        },
    ]


@pytest.mark.parametrize(
    ("choice", "calling"),
    [
        ("auto", {"mode": "AUTO"}),
        ("none", {"mode": "NONE"}),
        ("required", {"mode": "ANY"}),
        ("weather", {"mode": "ANY", "allowed_function_names": ["weather"]}),
    ],
)
def test_tools_and_tool_choice(choice: str, calling: dict[str, Any]) -> None:
    request = ModelRequest(HISTORY[:2], (WEATHER,), tool_choice=choice)
    _, config = gemini_request(request, max_tokens=100)
    assert config["tools"] == [
        {
            "function_declarations": [
                {
                    "name": "weather",
                    "description": WEATHER.description,
                    "parameters_json_schema": dict(WEATHER.parameters),
                }
            ]
        }
    ]
    assert config["tool_config"] == {"function_calling_config": calling}


def test_the_cap_thinking_and_options() -> None:
    request = ModelRequest(HISTORY[:2], max_output_tokens=321)
    _, config = gemini_request(
        request,
        max_tokens=100,
        thinking={"thinking_budget": 512, "include_thoughts": True},
        options={"temperature": 0.3, "max_output_tokens": 9},
    )
    assert config == {
        "max_output_tokens": 321,  # the request's cap; an option never overrides what is set
        "system_instruction": "Be brief.",
        "thinking_config": {"thinking_budget": 512, "include_thoughts": True},
        "temperature": 0.3,
    }
    _, config = gemini_request(ModelRequest(HISTORY[1:2]), max_tokens=100)
    assert config == {"max_output_tokens": 100}


def test_the_output_schema_goes_natively_without_its_annotation() -> None:
    request = ModelRequest(HISTORY[1:2], output=OutputFormat("Verdict", SCHEMA))
    _, config = gemini_request(request, max_tokens=100, output_with_tools=False)
    assert config["response_mime_type"] == "application/json"
    assert config["response_json_schema"] == {k: v for k, v in SCHEMA.items() if k != "$schema"}
    assert "system_instruction" not in config


def test_with_tools_a_model_before_gemini_3_gets_the_schema_in_its_instruction() -> None:
    request = ModelRequest(HISTORY[:2], (WEATHER,), output=OutputFormat("Verdict", SCHEMA))
    _, config = gemini_request(request, max_tokens=100, output_with_tools=False)
    assert "response_json_schema" not in config
    assert "response_mime_type" not in config
    assert config["system_instruction"].startswith("Be brief.\n\nYour final answer must be")
    assert '"required":["answer"]' in config["system_instruction"]
    _, config = gemini_request(request, max_tokens=100, output_with_tools=True)
    assert config["response_json_schema"]["required"] == ["answer"]
    assert config["system_instruction"] == "Be brief."


@pytest.mark.parametrize(
    ("model", "takes"),
    [
        ("gemini-3-flash-preview", True),
        ("gemini-3.1-pro", True),
        ("models/gemini-3-pro-preview", True),
        ("gemini-2.5-flash", False),
        ("gemini-2.0-flash", False),
        ("gemini-flash-latest", False),  # unknown: the schema goes where it always works
    ],
)
def test_which_models_take_a_schema_with_tools(model: str, takes: bool) -> None:
    assert takes_output_with_tools(model) is takes


@pytest.mark.parametrize(
    ("settings", "config"),
    [
        (Gemini("m"), None),
        (Gemini("m", thinking_budget=1024), {"thinking_budget": 1024, "include_thoughts": True}),
        (Gemini("m", thinking_budget=0), {"thinking_budget": 0}),
        (Gemini("m", thinking_level="low"), {"thinking_level": "low", "include_thoughts": True}),
        (
            Gemini("m", thinking_level="high", include_thoughts=False),
            {"thinking_level": "high", "include_thoughts": False},
        ),
        (Gemini("m", include_thoughts=True), {"include_thoughts": True}),
    ],
)
def test_the_thinking_settings(settings: Gemini, config: dict[str, Any] | None) -> None:
    assert settings.thinking_config() == config


# ---- thought signatures -------------------------------------------------------------------------


SIG_1 = base64.b64encode(b"\xfb\xff signature one").decode()  # holds '+' and '/'
SIG_2 = base64.urlsafe_b64encode(b"\xfb\xff signature two").decode()  # holds '-' and '_'


def test_signatures_are_read_in_either_base64_alphabet() -> None:
    assert signature_bytes(SIG_1) == b"\xfb\xff signature one"
    assert signature_bytes(SIG_2) == b"\xfb\xff signature two"
    assert signature_bytes(SIG_1.rstrip("=")) == b"\xfb\xff signature one"
    assert signature_bytes("not base64!") is None


def test_a_turn_that_called_tools_is_replayed_with_its_signatures_where_they_came() -> None:
    wire = GeminiWire()
    decoder = GeminiDecoder(model="gemini-3-pro")
    parts = run(
        events(
            [
                wire.event({"text": "Plan: ", "thought": True}),
                wire.event({"text": "both.", "thought": True, "thoughtSignature": SIG_2}),
                wire.event({"text": "Looking."}),
                wire.event(
                    wire.call("c1", "weather", '{"city": "Oslo"}', SIG_1),
                    wire.call("c2", "weather", '{"city": "Lima"}'),  # parallel: unsigned
                    finish="STOP",
                ),
            ]
        ),
        decoder,
    )
    assert decoder.call_ids == ["c1", "c2"]
    native = native_of(parts)
    assert [(n.provider, n.model, n.data) for n in native] == [
        ("google", "gemini-3-pro", {"kind": "thought", "text": "Plan: both.", "signature": SIG_2}),
        ("google", "gemini-3-pro", {"kind": "call", "id": "c1", "index": 0, "signature": SIG_1}),
    ]
    _, contents = gemini_contents(with_native(HISTORY, native), "gemini-3-pro")
    assert contents[1]["parts"] == [
        {"thought": True, "text": "Plan: both.", "thought_signature": signature_bytes(SIG_2)},
        {"text": "Looking."},
        {
            "function_call": {"id": "c1", "name": "weather", "args": {"city": "Oslo"}},
            "thought_signature": b"\xfb\xff signature one",
        },
        {"function_call": {"id": "c2", "name": "weather", "args": {"value": "not json"}}},
    ]
    # A turn without native reasoning, or with another model's, goes without signatures.
    for history, model in ((HISTORY, "gemini-3-pro"), (with_native(HISTORY, native), "gemini-2.5")):
        _, unknown = gemini_contents(history, model)
        assert all("thought_signature" not in part for part in unknown[1]["parts"])
        assert all(not part.get("thought") for part in unknown[1]["parts"])
    # A call the engine gave a fresh ID (its first was used before) gets its signature by place.
    renamed = tuple(
        AssistantMessage(
            tuple(
                ToolCallContent("c1-1", p.name, p.arguments)
                if isinstance(p, ToolCallContent) and p.id == "c1"
                else p
                for p in m.content
            )
        )
        if isinstance(m, AssistantMessage)
        else m
        for m in with_native(HISTORY, native)
    )
    _, contents = gemini_contents(renamed, "gemini-3-pro")
    assert contents[1]["parts"][2]["thought_signature"] == b"\xfb\xff signature one"
    assert "thought_signature" not in contents[1]["parts"][3]


def test_a_text_signature_goes_back_on_the_turns_text() -> None:
    wire = GeminiWire()
    parts = run(
        events(
            [
                wire.event({"text": "Looking."}),
                wire.event(wire.call("c1", "weather", '{"city": "Oslo"}')),
                wire.event({"text": "", "thoughtSignature": SIG_1}, finish="STOP"),
            ]
        ),
        GeminiDecoder(model="g"),
    )
    native = native_of(parts)
    assert [n.data for n in native] == [{"kind": "text", "signature": SIG_1}]
    turn = AssistantMessage((ToolCallContent("c1", "weather", {"city": "Oslo"}), *native))
    _, contents = gemini_contents((UserMessage.text("?"), turn), "g")
    assert contents[1]["parts"][0] == {"text": "", "thought_signature": signature_bytes(SIG_1)}


# ---- the stream ---------------------------------------------------------------------------------


def test_text_thoughts_and_usage_with_cache_and_thinking() -> None:
    wire = GeminiWire("gemini-2.5-pro", "resp-9")
    usage = {
        "promptTokenCount": 900,
        "toolUsePromptTokenCount": 100,
        "cachedContentTokenCount": 600,
        "candidatesTokenCount": 100,
        "thoughtsTokenCount": 200,
    }
    parts = run(
        events(
            [
                wire.event({"text": "Hmm, ", "thought": True}),
                wire.event({"text": "easy.", "thought": True}, usage=wire.usage(5, 0)),
                wire.event({"text": "4"}),
                wire.event({"text": "2"}, finish="STOP", usage=usage),
            ]
        )
    )
    response = reduce(parts)
    assert (response.reasoning, response.text) == ("Hmm, easy.", "42")
    assert response.metadata is not None
    assert response.metadata.id == "resp-9"
    assert response.metadata.model == "gemini-2.5-pro"
    assert response.finish_reason == "stop"
    assert response.usage == Usage(InputTokens(1000, 400, 600, 0), OutputTokens(300, 100, 200))


def test_calls_without_ids_are_numbered_and_kept_unique() -> None:
    wire = GeminiWire()
    parts = run(
        events(
            [
                wire.event(wire.call(None, "weather", '{"city": "Oslo"}')),
                wire.event(
                    wire.call(None, "weather", '{"city": "Lima"}'),
                    wire.call("call_0", "weather", "{}"),
                    finish="STOP",
                ),
            ]
        )
    )
    response = reduce(parts)
    assert response.finish_reason == "tool-calls"
    assert [(c.id, c.arguments) for c in response.tool_calls] == [
        ("call_0", '{"city":"Oslo"}'),
        ("call_1", '{"city":"Lima"}'),
        ("call_0-2", "{}"),
    ]
    deltas = [p for p in parts if isinstance(p, ToolParamsDeltaPart)]
    assert len(deltas) == 3  # each call streams whole, at once


def test_a_length_finish_leaves_the_calls_undeclared() -> None:
    wire = GeminiWire()
    response = reduce(
        run(events([wire.event(wire.call("c1", "weather", "{}"), finish="MAX_TOKENS")]))
    )
    assert response.finish_reason == "length"
    assert response.tool_calls == ()
    assert [t.id for t in response.truncated_calls] == ["c1"]


@pytest.mark.parametrize(
    ("reason", "finish"),
    [
        ("STOP", "stop"),
        ("MAX_TOKENS", "length"),
        ("SAFETY", "content-filter"),
        ("RECITATION", "content-filter"),
        ("PROHIBITED_CONTENT", "content-filter"),
        ("MALFORMED_FUNCTION_CALL", "error"),
        ("UNEXPECTED_TOOL_CALL", "error"),
        ("FINISH_REASON_UNSPECIFIED", "unknown"),
        ("LANGUAGE", "other"),
        ("SOMETHING_NEW", "other"),
    ],
)
def test_finish_reasons(reason: str, finish: str) -> None:
    wire = GeminiWire()
    response = reduce(run(events([wire.event({"text": "x"}, finish=reason)])))
    assert response.finish_reason == finish


def test_a_blocked_prompt_is_content_filtered() -> None:
    blocked = {
        "promptFeedback": {"blockReason": "SAFETY"},
        "usageMetadata": {"promptTokenCount": 8},
    }
    response = reduce(run([blocked]))
    assert response.finish_reason == "content-filter"
    assert response.text == ""
    assert response.usage.input.total == 8


def test_an_error_event_is_typed() -> None:
    error = {"error": {"code": 503, "message": "The model is overloaded.", "status": "UNAVAILABLE"}}
    decoder = GeminiDecoder()
    decoder.feed(events([GeminiWire().event({"text": "Hel"})])[0])
    with pytest.raises(ModelUnavailable, match="The model is overloaded"):
        decoder.feed(error)


@pytest.mark.parametrize(
    ("event", "message"),
    [
        ({"candidates": {"0": {}}}, "candidates are not a list"),
        ({"candidates": [{"content": {"parts": "text"}}]}, "parts are not a list"),
        ({"candidates": [{"content": {"parts": [{"functionCall": {"args": {}}}]}}]}, "name"),
        (
            {"candidates": [{"content": {"parts": [{"functionCall": {"name": "f", "args": 1}}]}}]},
            "not a JSON object",
        ),
        ([1, 2], "not a JSON object"),
    ],
)
def test_events_that_break_the_format_are_malformed(event: object, message: str) -> None:
    with pytest.raises(MalformedResponse, match=message):
        GeminiDecoder().feed(event)


def test_a_body_that_ends_before_a_finish_reason_is_malformed() -> None:
    decoder = GeminiDecoder()
    decoder.feed(events([GeminiWire().event({"text": "Hel"})])[0])
    with pytest.raises(MalformedResponse, match="ended before the model finished"):
        decoder.end()


def test_other_candidates_and_parts_are_ignored() -> None:
    wire = GeminiWire()
    event = events([wire.event({"text": "mine"}, finish="STOP")])[0]
    event["candidates"].append(
        {"index": 1, "content": {"parts": [{"text": "not mine"}]}, "finishReason": "SAFETY"}
    )
    event["candidates"][0]["content"]["parts"].append({"executableCode": {"code": "1+1"}})
    response = reduce(run([event]))
    assert (response.text, response.finish_reason) == ("mine", "stop")


# ---- Google's errors ----------------------------------------------------------------------------


def google(code: int, status: str, message: str, *details: dict[str, Any]) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "status": status, "details": list(details)}}


def test_resource_exhausted_waits_the_retry_delay_unless_a_header_says_otherwise() -> None:
    retry = {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "7.5s"}
    body = google(429, "RESOURCE_EXHAUSTED", "You exceeded your current quota.", retry)
    error = error_from_status("Gemini", 429, {}, body)
    assert isinstance(error, RateLimited)
    assert error.retry_after == 7.5
    assert error.message == (
        "Gemini answered HTTP 429 (RESOURCE_EXHAUSTED): You exceeded your current quota."
    )
    error = error_from_status("Gemini", 429, {"retry-after": "2"}, body)
    assert isinstance(error, RateLimited)
    assert error.retry_after == 2.0


def test_a_key_the_api_refuses_with_400_is_an_authentication_failure() -> None:
    reason = {"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "API_KEY_INVALID"}
    body = google(
        400, "INVALID_ARGUMENT", "API key not valid. Please pass a valid API key.", reason
    )
    assert isinstance(error_from_status("Gemini", 400, {}, body), AuthenticationFailed)


def test_google_statuses_mid_stream() -> None:
    assert isinstance(
        error_from_payload("Gemini", google(500, "INTERNAL", "boom")), ModelUnavailable
    )
    assert isinstance(
        error_from_payload("Gemini", google(429, "RESOURCE_EXHAUSTED", "slow")), RateLimited
    )
