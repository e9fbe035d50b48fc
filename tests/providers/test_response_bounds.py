"""Nothing a server sends is unbounded (the adapters' side), over HTTP per provider: every request
carries an output cap (the request's, else one that fits the model); a line or event past the
event-stream bound ends the response as ResponseTooLarge and drops the connection; JSON nested
200,000 deep is a MalformedResponse, never a RecursionError; tool-call IDs are unique in a response
and new to the request's history."""

from __future__ import annotations

from typing import Any

import attrs
import pytest
import trio

from effectagent.ai import (
    AssistantMessage,
    AuthenticationFailed,
    MalformedResponse,
    ModelRequest,
    ModelUnavailable,
    ProviderError,
    ResponseTooLarge,
    ToolCallContent,
    ToolCallPart,
    ToolMessage,
    ToolResultContent,
    UserMessage,
)
from effectagent.providers import model_settings
from effectagent.providers._common import CallIds, StreamedCall, default_max_tokens

from .conftest import KEY
from .helpers import WEATHER, collect, failure, reduce, request
from .replay import ReplayServer, Reply
from .targets import Target

#: Where each API takes the output cap.
CAP_FIELD = {
    "openai-chat": "max_completion_tokens",
    "openai-responses": "max_output_tokens",
    "anthropic": "max_tokens",
    "openai-compatible": "max_tokens",
    "gemini": "maxOutputTokens",  # in generationConfig
}
#: The cap each target's model gets when the request sets none.
DEFAULT_CAP = {
    "openai-chat": 32768,  # gpt-4.1
    "openai-responses": 32768,
    "anthropic": 8192,  # claude-sonnet-4-5
    "openai-compatible": 4096,  # somebody else's server
    "gemini": 65536,  # gemini-3-flash-preview
}


def cap_of(target: Target, body: dict[str, Any]) -> object:
    """The output cap the request body carried."""
    config = body["generationConfig"] if target.name == "gemini" else body
    return config[CAP_FIELD[target.name]]


@pytest.mark.parametrize("cap", [None, 321])
async def test_every_request_carries_an_output_cap(
    server: ReplayServer, target: Target, cap: int | None
) -> None:
    server.script(Reply.sse(target.text("Hi.")))
    await collect(target.settings(server.url, KEY), request(max_output_tokens=cap))
    body = server.requests[0].json()
    assert cap_of(target, body) == (DEFAULT_CAP[target.name] if cap is None else cap)


async def test_the_settings_cap_applies_when_the_request_sets_none(
    server: ReplayServer, target: Target
) -> None:
    server.script(Reply.sse(target.text("Hi.")))
    await collect(attrs.evolve(target.settings(server.url, KEY), max_tokens=555))
    assert cap_of(target, server.requests[0].json()) == 555


@pytest.mark.parametrize(
    ("provider", "model", "cap"),
    [
        ("anthropic", "claude-sonnet-4-5", 8192),
        ("anthropic", "claude-3-5-haiku-latest", 8192),
        ("anthropic", "claude-3-haiku-20240307", 4096),
        ("openai", "gpt-4o-mini", 16384),
        ("openai", "gpt-4.1-mini", 32768),
        ("openai", "o4-mini", 32768),
        ("openai", "gpt-4-turbo", 4096),
        ("openai", "gpt-3.5-turbo", 4096),
        ("openai", "some-future-model", 16384),
        ("compatible", "llama3.1:8b", 4096),
        ("google", "gemini-2.5-flash", 65536),
        ("google", "gemini-3-pro-preview", 65536),
        ("google", "gemini-2.0-flash", 8192),
        ("google", "gemini-1.5-pro", 8192),
    ],
)
def test_the_default_cap_fits_the_model(provider: str, model: str, cap: int) -> None:
    assert default_max_tokens(provider, model) == cap


@pytest.mark.parametrize(
    ("value", "error"), [(0, ValueError), (-5, ValueError), (True, TypeError), ("8k", TypeError)]
)
def test_a_bad_cap_is_refused_naming_the_setting(value: object, error: type[Exception]) -> None:
    with pytest.raises(error, match=r"Anthropic\.max_tokens must be"):
        model_settings("anthropic:claude-sonnet-4-5", max_tokens=value)  # type: ignore[arg-type]


# ---- the event-stream bound -----------------------------------------------------------------------


async def test_a_line_past_the_event_bound_stops_the_response(
    server: ReplayServer, target: Target
) -> None:
    line = b"data: " + b"x" * (17 * 1024 * 1024)  # never ends: the server hangs after it
    server.script(Reply.sse([*target.begun(), line], ending="hang"))
    error, _ = await failure(target.settings(server.url, KEY))
    assert isinstance(error, ResponseTooLarge)
    assert error.limit == 16 * 1024 * 1024
    assert "a server-sent line grew past 16 MiB, the most one may be" in error.message
    # The connection was dropped, not read to its end (the server's task notices the hang-up
    # when it next runs, which under load may be after the error has reached this test).
    with trio.fail_after(60):  # a bound for a failure, not a timing
        await server.disconnected.wait()


async def test_json_nested_200000_deep_is_a_malformed_response(
    server: ReplayServer, target: Target
) -> None:
    deep = b"data: " + b"[" * 200_000 + b"]" * 200_000 + b"\n\n"
    server.script(Reply.sse([*target.begun(), deep]))
    error, _ = await failure(target.settings(server.url, KEY))
    assert isinstance(error, MalformedResponse)
    assert "nests deeper than 64 levels" in error.message


# ---- tool-call IDs --------------------------------------------------------------------------------


async def test_a_call_id_twice_in_a_response_gets_a_fresh_one(
    server: ReplayServer, target: Target
) -> None:
    calls = [("call_1", "weather", '{"city": "Oslo"}'), ("call_1", "weather", '{"city": "Rome"}')]
    server.script(Reply.sse(target.calls(*calls)))
    response = reduce(await collect(target.settings(server.url, KEY), request(tools=(WEATHER,))))
    assert [(c.id, c.arguments) for c in response.tool_calls] == [
        ("call_1", target.arguments('{"city": "Oslo"}')),
        ("call_1-2", target.arguments('{"city": "Rome"}')),
    ]


async def test_a_call_id_the_history_holds_gets_a_fresh_one(
    server: ReplayServer, target: Target
) -> None:
    """The request replays an earlier turn with ``call_1``; the model names its new call
    ``call_1`` again: the adapter streams it as ``call_1-2``, so the next request carries two
    calls and two results, each pair with its own ID."""
    history = (
        UserMessage.text("Oslo?"),
        AssistantMessage((ToolCallContent("call_1", "weather", {"city": "Oslo"}),)),
        ToolMessage((ToolResultContent("call_1", "weather", "4 °C"),)),
    )
    server.script(Reply.sse(target.calls(("call_1", "weather", '{"city": "Rome"}'))))
    settings = target.settings(server.url, KEY)
    parts = await collect(settings, ModelRequest(history, (WEATHER,)))
    (call,) = reduce(parts).tool_calls
    assert call == ToolCallPart("call_1-2", "weather", target.arguments('{"city": "Rome"}'))


def test_call_ids_skip_every_taken_suffix() -> None:
    ids = CallIds(["a", "a-2", "a-3"])
    assert [ids.unique(i) for i in ["a", "b", "a", "b", "a-2"]] == [
        "a-4",
        "b",
        "a-5",
        "b-2",
        "a-2-2",
    ]


def test_a_streamed_call_keeps_no_more_than_its_bound() -> None:
    call = StreamedCall("c", "write", max_bytes=1000)
    out: list[Any] = []
    for _ in range(9):
        call.delta("x" * 100, out)
    with pytest.raises(ResponseTooLarge, match="the arguments of tool call 'write' grew past"):
        call.delta("é" * 60, out)  # 120 bytes, 60 characters
    assert call.size == 1020
    assert sum(map(len, call.chunks)) == 900


@pytest.mark.parametrize(
    ("status", "content_type", "expected"),
    [
        (500, "application/json", ModelUnavailable),
        (401, "text/plain", AuthenticationFailed),
        (302, "text/html", ProviderError),
        (200, "text/html", MalformedResponse),
    ],
)
async def test_a_body_that_is_no_event_stream_is_read_no_further_than_its_start(
    target: Target, server: ReplayServer, status: int, content_type: str, expected: type
) -> None:
    """An error's body, or a 200 that is not an event stream (a proxy's page), is never read to
    its end: here it would not end (the server holds the connection open after a MiB), yet
    the typed error comes at once, its message shortened."""
    body = b'{"error": {"message": "' + b"x" * (1 << 20) + b'"'
    server.script(Reply(status, (("content-type", content_type),), (body,), "hang"))
    with trio.fail_after(30):  # a guard against a hang only: no timing is asserted
        error, parts = await failure(target.settings(server.url, KEY))
    assert type(error) is expected
    assert len(error.message) <= 1201
    assert parts == []
