"""Every adapter against the replay server: what it streams, and how each failure surfaces.

The scenarios are the same for OpenAI Chat Completions, OpenAI Responses, Anthropic Messages and
an OpenAI-compatible server; each replays its own documented wire format (``wire.py``). Every
stream that completes is reduced by the engine's ``ResponseReducer``.
"""

from __future__ import annotations

import json

import pytest
import trio

from effectagent.ai import (
    AuthenticationFailed,
    ContextLengthExceeded,
    FinishPart,
    MalformedResponse,
    ModelNetworkError,
    ModelUnavailable,
    ProviderError,
    RateLimited,
    ResponseMetadataPart,
    TextDeltaPart,
    ToolCallPart,
    ToolParamsDeltaPart,
    ToolParamsStartPart,
    close_stream,
)

from .conftest import KEY
from .helpers import WEATHER, collect, failure, reduce, request
from .replay import ReplayServer, Reply
from .targets import Target
from .wire import sse


async def test_text_streams_as_deltas_and_reduces(target: Target, server: ReplayServer) -> None:
    server.script(Reply.sse(target.text("Hel", "lo, ", "world")))
    parts = await collect(target.settings(server.url, KEY))
    assert [p.delta for p in parts if isinstance(p, TextDeltaPart)] == ["Hel", "lo, ", "world"]
    assert isinstance(parts[0], ResponseMetadataPart)
    assert parts[0].id is not None
    assert parts[0].model is not None
    response = reduce(parts)
    assert response.text == "Hello, world"
    assert response.finish_reason == "stop"
    assert response.usage.input.total > 0
    (sent,) = server.requests
    assert sent.path == target.path  # Gemini streams by its path: streamGenerateContent?alt=sse
    assert target.name == "gemini" or sent.json()["stream"] is True


async def test_three_parallel_calls_with_interleaved_arguments(
    target: Target, server: ReplayServer
) -> None:
    calls = (
        ("call_a", "weather", '{"city": "Oslo"}'),
        ("call_b", "weather", '{"city": "Lima"}'),
        ("call_c", "weather", '{"city": "Pune", "days": [1, 2]}'),
    )
    server.script(Reply.sse(target.calls(*calls)))
    parts = await collect(target.settings(server.url, KEY), request(tools=(WEATHER,)))
    starts = [p.id for p in parts if isinstance(p, ToolParamsStartPart)]
    assert starts == ["call_a", "call_b", "call_c"]
    deltas = [p.id for p in parts if isinstance(p, ToolParamsDeltaPart)]
    assert deltas[:3] == ["call_a", "call_b", "call_c"]  # interleaved as they came
    declared = [(p.id, p.name, p.arguments) for p in parts if isinstance(p, ToolCallPart)]
    assert declared == [(i, name, target.arguments(text)) for i, name, text in calls]
    response = reduce(parts)
    assert response.finish_reason == "tool-calls"
    assert [c.id for c in response.tool_calls] == ["call_a", "call_b", "call_c"]
    assert [json.loads(c.arguments)["city"] for c in response.tool_calls] == [
        "Oslo",
        "Lima",
        "Pune",
    ]


async def test_cancelling_the_consumer_closes_the_http_stream(
    target: Target, server: ReplayServer
) -> None:
    server.script(Reply.sse(target.begun(), ending="hang"))
    seen: list[object] = []
    async with target.settings(server.url, KEY).open() as model:
        with trio.CancelScope() as scope:
            async for part in model.stream(request()):
                seen.append(part)
                if isinstance(part, TextDeltaPart):
                    scope.cancel()  # the server is still holding the stream open
        assert scope.cancelled_caught
        with trio.fail_after(5):
            await server.disconnected.wait()
    assert any(isinstance(p, TextDeltaPart) for p in seen)


async def test_cancelling_before_the_response_begins_drops_the_request(
    target: Target, server: ReplayServer
) -> None:
    server.script(Reply.stall())
    async with target.settings(server.url, KEY).open() as model:
        with trio.CancelScope() as scope:
            stream = model.stream(request())
            try:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(_cancel_once_received, server, scope)
                    async for _ in stream:
                        raise AssertionError("a stalled server streams nothing")
            finally:
                await close_stream(stream)
        assert scope.cancelled_caught
        with trio.fail_after(5):
            await server.disconnected.wait()


async def _cancel_once_received(server: ReplayServer, scope: trio.CancelScope) -> None:
    await server.received.wait()
    scope.cancel()


async def test_closing_the_iterator_early_closes_the_http_stream(
    target: Target, server: ReplayServer
) -> None:
    server.script(Reply.sse(target.begun(), ending="hang"))
    async with target.settings(server.url, KEY).open() as model:
        stream = model.stream(request())
        async for part in stream:
            if isinstance(part, TextDeltaPart):
                break
        await stream.aclose()  # type: ignore[attr-defined]
        with trio.fail_after(5):
            await server.disconnected.wait()


async def test_429_is_rate_limited_with_the_retry_after_header(
    target: Target, server: ReplayServer
) -> None:
    body = target.error_body("rate_limit_error", "rate_limit_exceeded", "Slow down.")
    server.script(Reply.json(429, body, headers=[("retry-after", "7")]))
    error, parts = await failure(target.settings(server.url, KEY))
    assert isinstance(error, RateLimited)
    assert error.retry_after == 7.0
    assert error.is_retryable
    assert "Slow down." in error.message
    assert parts == []
    assert error.__cause__ is None
    assert error.__context__ is None


async def test_429_retry_after_in_milliseconds(target: Target, server: ReplayServer) -> None:
    body = target.error_body("rate_limit_error", "rate_limit_exceeded", "Slow down.")
    server.script(Reply.json(429, body, headers=[("retry-after-ms", "1500")]))
    error, _ = await failure(target.settings(server.url, KEY))
    assert isinstance(error, RateLimited)
    assert error.retry_after == 1.5


async def test_400_context_length_is_typed_for_compaction(
    target: Target, server: ReplayServer
) -> None:
    message = {
        "anthropic": "prompt is too long: 208000 tokens > 200000 maximum",
        "gemini": "The input token count (208000) exceeds the maximum number of tokens allowed "
        "(200000).",
    }.get(
        target.name,
        "This model's maximum context length is 128000 tokens. However, your messages "
        "resulted in 130000 tokens.",
    )
    body = target.error_body("invalid_request_error", "context_length_exceeded", message)
    server.script(Reply.json(400, body))
    error, _ = await failure(target.settings(server.url, KEY))
    assert isinstance(error, ContextLengthExceeded)
    assert error.limit == (200000 if target.name in ("anthropic", "gemini") else 128000)
    assert not error.is_retryable


async def test_401_is_authentication_failed(target: Target, server: ReplayServer) -> None:
    body = target.error_body("authentication_error", "invalid_api_key", "Invalid API key.")
    server.script(Reply.json(401, body))
    error, _ = await failure(target.settings(server.url, KEY))
    assert isinstance(error, AuthenticationFailed)
    assert not error.is_retryable


async def test_500_before_the_stream_is_model_unavailable(
    target: Target, server: ReplayServer
) -> None:
    body = target.error_body("api_error", "server_error", "Internal server error")
    server.script(Reply.json(500, body))
    error, parts = await failure(target.settings(server.url, KEY))
    assert isinstance(error, ModelUnavailable)
    assert error.is_retryable
    assert parts == []


async def test_an_error_mid_stream_is_typed(target: Target, server: ReplayServer) -> None:
    kind = "overloaded_error" if target.name == "anthropic" else "server_error"
    events = [*target.begun(), target.stream_error(kind, "The server had an error.")]
    server.script(Reply.sse(events))
    error, parts = await failure(target.settings(server.url, KEY))
    assert isinstance(error, ModelUnavailable)
    assert "The server had an error." in error.message
    assert [p.delta for p in parts if isinstance(p, TextDeltaPart)] == ["Hel"]


async def test_a_connection_lost_mid_stream_is_a_network_error(
    target: Target, server: ReplayServer
) -> None:
    server.script(Reply.sse(target.begun(), ending="drop"))
    error, parts = await failure(target.settings(server.url, KEY))
    assert isinstance(error, ModelNetworkError)
    assert error.is_retryable
    assert any(isinstance(p, TextDeltaPart) for p in parts)


async def test_no_server_is_a_network_error(target: Target) -> None:
    with trio.socket.socket() as sock:  # a port nobody listens on
        await sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    error, _ = await failure(target.settings(f"http://127.0.0.1:{port}", KEY))
    assert isinstance(error, ModelNetworkError)


async def test_data_that_is_not_json_is_malformed(target: Target, server: ReplayServer) -> None:
    server.script(Reply.sse([*target.begun(), b'data: {"choices": [\n\n']))
    error, _ = await failure(target.settings(server.url, KEY))
    assert isinstance(error, MalformedResponse)
    assert "not JSON" in error.message


async def test_an_event_that_breaks_the_format_is_malformed(
    target: Target, server: ReplayServer
) -> None:
    server.script(Reply.sse([*target.begun(), b"data: [1, 2, 3]\n\n"]))
    error, _ = await failure(target.settings(server.url, KEY))
    assert isinstance(error, MalformedResponse)


async def test_a_stream_truncated_before_the_finish_is_malformed(
    target: Target, server: ReplayServer
) -> None:
    # The body ends properly, but in the middle of the response (and of its last event).
    events = [*target.begun(), target.text("never")[-2][:20]]
    server.script(Reply.sse(events))
    error, parts = await failure(target.settings(server.url, KEY))
    assert isinstance(error, MalformedResponse)
    assert "ended" in error.message
    assert not any(isinstance(p, FinishPart) for p in parts)


async def test_a_truncated_body_without_chunking_is_malformed(
    target: Target, server: ReplayServer
) -> None:
    server.script(Reply.sse(target.begun(), ending="eof"))
    error, _ = await failure(target.settings(server.url, KEY))
    assert isinstance(error, MalformedResponse)


async def test_a_200_that_is_not_an_event_stream_is_malformed(
    target: Target, server: ReplayServer
) -> None:
    server.script(Reply.json(200, {"id": "x", "object": "not a stream"}))
    error, _ = await failure(target.settings(server.url, KEY))
    assert isinstance(error, MalformedResponse)
    assert "event stream" in error.message


@pytest.mark.parametrize("status", [503, 529])
async def test_overloaded_statuses_are_model_unavailable(
    target: Target, server: ReplayServer, status: int
) -> None:
    body = target.error_body("overloaded_error", "", "Overloaded")
    server.script(Reply.json(status, body))
    error, _ = await failure(target.settings(server.url, KEY))
    assert isinstance(error, ModelUnavailable)


async def test_the_sdk_never_retries(target: Target, server: ReplayServer) -> None:
    body = target.error_body("api_error", "server_error", "boom")
    server.script(Reply.json(500, body), Reply.sse(target.text("late")))
    error, _ = await failure(target.settings(server.url, KEY))
    assert isinstance(error, ModelUnavailable)
    assert len(server.requests) == 1


async def test_one_client_serves_consecutive_requests(target: Target, server: ReplayServer) -> None:
    server.script(Reply.sse(target.text("one")), Reply.sse(target.text("two")))
    async with target.settings(server.url, KEY).open() as model:
        first = await model.generate(request())
        second = await model.generate(request())
    assert (first.text, second.text) == ("one", "two")
    assert len(server.requests) == 2


def _coded_error(target: Target, code: str) -> bytes:
    """An error event mid-stream in the target's own shape, with ``code`` as its code."""
    if target.name == "openai-responses":
        return sse({"type": "error", "code": code, "message": "odd"}, "error")
    if target.name == "anthropic":
        error = {"type": "error", "error": {"type": "x", "code": code, "message": "odd"}}
        return sse(error, "error")
    if target.name == "gemini":
        return sse({"error": {"code": code, "message": "odd", "status": "X"}}, end="\r\n")
    return sse({"error": {"message": "odd", "type": "x", "code": code}})


@pytest.mark.parametrize("code", ["²", "9" * 5000, "٥٠٣"], ids=["superscript", "long", "arabic"])
async def test_an_error_code_of_digits_int_cannot_read_is_still_typed(
    target: Target, server: ReplayServer, code: str
) -> None:
    # ``str.isdigit`` takes these; ``int`` refuses the first two. Each is an error's code, not
    # an HTTP status: the typed error of the rest of the event, never a bare ValueError.
    server.script(Reply.sse([*target.begun(), _coded_error(target, code)]))
    error, _ = await failure(target.settings(server.url, KEY))
    assert type(error) is ProviderError
    assert error.status is None
    assert "odd" in error.message


@pytest.mark.parametrize("where", ["id", "name"])
async def test_a_lone_surrogate_in_a_call_id_or_name_can_still_go_back(
    target: Target, server: ReplayServer, where: str
) -> None:
    # JSON's "\ud83d" decodes to half a character. The call's ID and name go back with the
    # call and its result on the next request, which no SDK could encode with it: each is
    # made well-formed as it streams, like text and arguments.
    call = ("call_\ud83d", "weather", '{"city": "Oslo"}')
    if where == "name":
        call = ("call_1", "weather\ud83d", '{"city": "Oslo"}')
    server.script(Reply.sse(target.calls(call)))
    parts = await collect(target.settings(server.url, KEY), request(tools=(WEATHER,)))
    (sent,) = [p for p in parts if isinstance(p, ToolCallPart)]
    assert (sent.id, sent.name) in (("call_\ufffd", "weather"), ("call_1", "weather\ufffd"))
    (start,) = [p for p in parts if isinstance(p, ToolParamsStartPart)]
    assert (start.id, start.name) == (sent.id, sent.name)
    sent.id.encode()
    sent.name.encode()
