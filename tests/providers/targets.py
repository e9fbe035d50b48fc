"""The five adapters under test, each with what a test needs to script its wire format."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import attrs

from effectagent.providers import (
    Anthropic,
    Gemini,
    ModelSettings,
    OpenAIChat,
    OpenAICompatible,
    OpenAIResponses,
)

from .wire import AnthropicWire, ChatWire, GeminiWire, ResponsesWire, sse

__all__ = ["TARGETS", "Target"]


@attrs.frozen
class Target:
    """One adapter: how to configure it against the replay server, and its wire format."""

    name: str
    #: (server root URL, API key) → the model's settings.
    settings: Callable[[str, str], ModelSettings]
    #: A whole text answer streaming these pieces.
    text: Callable[..., list[bytes]]
    #: Tool calls ``(id, name, arguments)`` with interleaved argument deltas.
    calls: Callable[..., list[bytes]]
    #: The events of a response that has begun and streamed the text "Hel" — no end.
    begun: Callable[[], list[bytes]]
    #: An error the provider reports inside the stream: (error type/code, message) → event.
    stream_error: Callable[[str, str], bytes]
    #: The JSON body of an HTTP error: (error type, code, message) → body.
    error_body: Callable[[str, str, str], Any]
    #: The path the adapter posts to.
    path: str
    #: A call's arguments as the adapter reports them, given the text the test scripted: the
    #: text itself where the wire streams argument text; where it carries the arguments as a
    #: JSON object (Gemini), that object as compact JSON.
    arguments: Callable[[str], str] = lambda text: text


def _openai_error(kind: str, code: str, message: str) -> Any:
    return {"error": {"message": message, "type": kind, "param": None, "code": code or None}}


def _anthropic_error(kind: str, code: str, message: str) -> Any:
    return {"type": "error", "error": {"type": kind, "message": message}}


#: A Google error's HTTP status and canonical code, by the error type a test names.
GOOGLE_STATUS = {
    "rate_limit_error": (429, "RESOURCE_EXHAUSTED"),
    "invalid_request_error": (400, "INVALID_ARGUMENT"),
    "authentication_error": (401, "UNAUTHENTICATED"),
    "api_error": (500, "INTERNAL"),
    "server_error": (500, "INTERNAL"),
    "overloaded_error": (503, "UNAVAILABLE"),
}


def google_error(kind: str, code: str, message: str) -> Any:
    """A Google API error body (``code`` is the HTTP status; the type is the ``status``)."""
    number, status = GOOGLE_STATUS[kind]
    return {"error": {"code": number, "message": message, "status": status}}


def _gemini_begun() -> list[bytes]:
    return [GeminiWire().event({"text": "Hel"})]


def _compact(text: str) -> str:
    return json.dumps(json.loads(text), ensure_ascii=False, separators=(",", ":"))


def _chat_begun() -> list[bytes]:
    wire = ChatWire()
    return [wire.chunk({"role": "assistant", "content": ""}), wire.chunk({"content": "Hel"})]


def _compatible_begun() -> list[bytes]:
    wire = ChatWire("qwen3")
    return [wire.chunk({"role": "assistant", "content": ""}), wire.chunk({"content": "Hel"})]


def _responses_begun() -> list[bytes]:
    wire = ResponsesWire()
    return [wire.created(), *wire.message("msg_1", 0, "Hel")[:3]]


def _anthropic_begun() -> list[bytes]:
    wire = AnthropicWire()
    return [wire.start(), *wire.text_block(0, "Hel")[:2]]


TARGETS = (
    Target(
        "openai-chat",
        lambda url, key: OpenAIChat("gpt-4.1", api_key=key, base_url=f"{url}/v1"),
        lambda *p: ChatWire().text(*p),
        lambda *c: ChatWire().calls(*c),
        _chat_begun,
        lambda kind, message: sse({"error": {"message": message, "type": kind, "code": None}}),
        _openai_error,
        "/v1/chat/completions",
    ),
    Target(
        "openai-responses",
        lambda url, key: OpenAIResponses("gpt-4.1", api_key=key, base_url=f"{url}/v1"),
        lambda *p: ResponsesWire().text(*p),
        lambda *c: ResponsesWire().calls(*c),
        _responses_begun,
        lambda kind, message: sse(
            {"type": "error", "code": kind, "message": message, "param": None}, "error"
        ),
        _openai_error,
        "/v1/responses",
    ),
    Target(
        "anthropic",
        lambda url, key: Anthropic("claude-sonnet-4-5", api_key=key, base_url=url),
        lambda *p: AnthropicWire().text(*p),
        lambda *c: [
            AnthropicWire().start(),
            *AnthropicWire().calls(*c),
            *AnthropicWire().finish("tool_use"),
        ],
        _anthropic_begun,
        lambda kind, message: sse(
            {"type": "error", "error": {"type": kind, "message": message}}, "error"
        ),
        _anthropic_error,
        "/v1/messages",
    ),
    Target(
        "openai-compatible",
        lambda url, key: OpenAICompatible("qwen3", base_url=f"{url}/v1", api_key=key),
        lambda *p: ChatWire("qwen3").text(*p),
        lambda *c: ChatWire("qwen3").calls(*c),
        _compatible_begun,
        lambda kind, message: sse({"error": {"message": message, "type": kind, "code": None}}),
        _openai_error,
        "/v1/chat/completions",
    ),
    Target(
        "gemini",
        lambda url, key: Gemini("gemini-3-flash-preview", api_key=key, base_url=url),
        lambda *p: GeminiWire().text(*p),
        lambda *c: GeminiWire().calls(*c),
        _gemini_begun,
        lambda kind, message: sse(google_error(kind, "", message), end="\r\n"),
        google_error,
        "/v1beta/models/gemini-3-flash-preview:streamGenerateContent?alt=sse",
        _compact,
    ),
)
