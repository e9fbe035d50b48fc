"""Edges of the stream mapping and the HTTP around it: text a server sliced between the halves of
a UTF-16 surrogate pair, parallel calls a server gives one index, content sent as chunks, a byte
order mark, bodies that are not event streams (or never end), stalls, proxies from the
environment — and the request side's blank text, text documents at URLs and turns that only
reasoned."""

from __future__ import annotations

import itertools
import json
from typing import Any

import attrs
import pytest
import trio
import trio.testing
from hypothesis import given
from hypothesis import strategies as st

from effectagent import Agent, Toolkit, open_runtime, tool
from effectagent.ai import (
    AssistantMessage,
    DocumentPart,
    ImagePart,
    MalformedResponse,
    MediaNotSupported,
    ModelNetworkError,
    ModelRequest,
    ModelUnavailable,
    NativeReasoningPart,
    RateLimited,
    ReasoningContent,
    ReasoningDeltaPart,
    ResponseMetadataPart,
    ResponsePart,
    TextContent,
    TextDeltaPart,
    ToolCallContent,
    ToolMessage,
    ToolParamsDeltaPart,
    ToolResultContent,
    UserMessage,
    close_stream,
)
from effectagent.providers import Anthropic, OpenAICompatible, OpenAIResponses
from effectagent.providers._anthropic_messages import (
    MessagesDecoder,
    anthropic_block,
    anthropic_messages,
)
from effectagent.providers._openai_chat import ChatCompletionsDecoder, chat_messages
from effectagent.providers._openai_responses import ResponsesDecoder
from effectagent.providers._sse import ServerSentEvent, SSEDecoder

from .conftest import KEY
from .helpers import WEATHER, collect, failure, reduce, request
from .replay import ReplayServer, Reply
from .targets import Target
from .wire import AnthropicWire, ChatWire, ResponsesWire

#: A stand-in image (its first bytes are a PNG's).
PNG = b"\x89PNG\r\n\x1a\n" + bytes(64)


def utf16_units(text: str) -> list[str]:
    """``text`` as a JavaScript string holds it: one item a UTF-16 code unit, a character outside
    the Basic Multilingual Plane as its two surrogates."""
    units: list[str] = []
    for char in text:
        code = ord(char)
        if code < 0x10000:
            units.append(char)
        else:
            code -= 0x10000
            units += [chr(0xD800 + (code >> 10)), chr(0xDC00 + (code & 0x3FF))]
    return units


def well_formed(parts: list[ResponsePart]) -> None:
    """Every delta can be encoded as UTF-8 (logged, recorded, sent back)."""
    for part in parts:
        if isinstance(part, TextDeltaPart | ReasoningDeltaPart | ToolParamsDeltaPart):
            part.delta.encode("utf-8")


async def test_text_cut_between_the_halves_of_an_emoji_streams_the_emoji(
    target: Target, server: ReplayServer
) -> None:
    text = "Oslo 😀 🇳🇴!"
    server.script(Reply.sse(target.text(*utf16_units(text))))  # one code unit an event
    parts = await collect(target.settings(server.url, KEY))
    well_formed(parts)
    assert reduce(parts).text == text


async def test_arguments_cut_between_the_halves_of_an_emoji(
    target: Target, server: ReplayServer
) -> None:
    arguments = '{"city": "Oslo 😀", "note": "𝄞"}'
    sliced = "".join(utf16_units(arguments))  # what a UTF-16 server cuts into 4-unit pieces
    server.script(Reply.sse(target.calls(("call_a", "weather", sliced))))
    parts = await collect(target.settings(server.url, KEY), request(tools=(WEATHER,)))
    well_formed(parts)
    (call,) = reduce(parts).tool_calls
    assert call.arguments == target.arguments(arguments)
    assert json.loads(call.arguments)["city"] == "Oslo 😀"


def chat_chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {
        "id": "c",
        "model": "m",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }


astral_text = st.text(st.sampled_from("ab é漢😀𝄞🇳"), min_size=1, max_size=12)


@given(astral_text, st.sets(st.integers(1, 30), max_size=8), astral_text)
def test_any_cut_of_the_code_units_gives_the_text_back(
    text: str, cuts: set[int], arguments_text: str
) -> None:
    units = "".join(utf16_units(text))
    bounds = [0, *sorted(c for c in cuts if c < len(units)), len(units)]
    pieces = [units[a:b] for a, b in itertools.pairwise(bounds) if a < b]
    arguments = json.dumps({"text": arguments_text}, ensure_ascii=False)
    arg_units = "".join(utf16_units(arguments))
    arg_pieces = [arg_units[i : i + 3] for i in range(0, len(arg_units), 3)]

    chat = ChatCompletionsDecoder()
    parts: list[ResponsePart] = []
    for piece in pieces:
        parts += chat.feed(chat_chunk({"reasoning_content": piece}))
    for piece in pieces:
        parts += chat.feed(chat_chunk({"content": piece}))
    start = {"index": 0, "id": "call_0", "type": "function", "function": {"name": "f"}}
    parts += chat.feed(chat_chunk({"tool_calls": [start]}))
    for piece in arg_pieces:
        parts += chat.feed(
            chat_chunk({"tool_calls": [{"index": 0, "function": {"arguments": piece}}]})
        )
    parts += chat.feed(chat_chunk({}, "tool_calls"))
    parts += chat.done()
    well_formed(parts)
    response = reduce(parts)
    assert response.text == text
    assert response.reasoning == text
    assert [c.arguments for c in response.tool_calls] == [arguments]

    anthropic = MessagesDecoder(model="claude")
    parts = anthropic.feed({"type": "message_start", "message": {"id": "m", "usage": {}}})
    block = {"type": "thinking", "thinking": "", "signature": ""}
    parts += anthropic.feed({"type": "content_block_start", "index": 0, "content_block": block})
    for piece in pieces:
        delta = {"type": "thinking_delta", "thinking": piece}
        parts += anthropic.feed({"type": "content_block_delta", "index": 0, "delta": delta})
    delta = {"type": "signature_delta", "signature": "sig"}
    parts += anthropic.feed({"type": "content_block_delta", "index": 0, "delta": delta})
    parts += anthropic.feed({"type": "content_block_stop", "index": 0})
    parts += anthropic.feed({"type": "message_delta", "delta": {"stop_reason": "end_turn"}})
    parts += anthropic.feed({"type": "message_stop"})
    well_formed(parts)
    response = reduce(parts)
    assert response.reasoning == text
    (native,) = [p for p in parts if isinstance(p, NativeReasoningPart)]
    assert native.data["thinking"] == text  # what the signature was made over


def test_a_surrogate_without_its_other_half_is_a_replacement_character() -> None:
    decoder = ChatCompletionsDecoder()
    parts: list[ResponsePart] = []
    for piece in ("a\udc00b", "c\ud83d", "d", "e\ud83d"):
        parts += decoder.feed(chat_chunk({"content": piece}))
    start = {"index": 0, "id": "call_0", "type": "function", "function": {"name": "f"}}
    parts += decoder.feed(chat_chunk({"tool_calls": [start]}))
    piece = '{"a": "\ud83d'
    parts += decoder.feed(
        chat_chunk({"tool_calls": [{"index": 0, "function": {"arguments": piece}}]})
    )
    parts += decoder.feed(chat_chunk({}, "tool_calls"))
    parts += decoder.done()
    well_formed(parts)
    response = reduce(parts)
    assert response.text == "a\ufffdbc\ufffdde\ufffd"
    assert [c.arguments for c in response.tool_calls] == ['{"a": "\ufffd']

    responses = ResponsesDecoder()
    item = {"id": "fc_0", "type": "function_call", "call_id": "call_0", "name": "f"}
    parts = responses.feed({"type": "response.output_item.added", "item": item | {"arguments": ""}})
    restated = '{"a": "\ud83d\ude00 \udc00"}'  # the item's done event restates the arguments
    parts += responses.feed(
        {"type": "response.output_item.done", "item": item | {"arguments": restated}}
    )
    parts += responses.feed({"type": "response.completed", "response": {"status": "completed"}})
    assert [c.arguments for c in reduce(parts).tool_calls] == ['{"a": "😀 \ufffd"}']


def test_parallel_calls_that_all_have_index_0_stay_apart() -> None:
    """Ollama gives every call of a parallel batch index 0, each with its own ID and name."""
    decoder = ChatCompletionsDecoder(require_done=False)
    parts: list[ResponsePart] = []
    for call_id, city in (("call_a", "Oslo"), ("call_b", "Lima"), ("call_c", "Pune")):
        start = {"index": 0, "id": call_id, "type": "function"}
        start["function"] = {"name": "weather", "arguments": ""}
        parts += decoder.feed(chat_chunk({"tool_calls": [start]}))
        for piece in ('{"city": ', f'"{city}"}}'):
            more = {"index": 0, "function": {"arguments": piece}}
            parts += decoder.feed(chat_chunk({"tool_calls": [more]}))
    parts += decoder.feed(chat_chunk({}, "tool_calls"))
    parts += decoder.end()
    calls = reduce(parts).tool_calls
    assert [(c.id, json.loads(c.arguments)) for c in calls] == [
        ("call_a", {"city": "Oslo"}),
        ("call_b", {"city": "Lima"}),
        ("call_c", {"city": "Pune"}),
    ]


def test_a_call_whose_id_every_chunk_repeats_is_one_call() -> None:
    decoder = ChatCompletionsDecoder()
    parts: list[ResponsePart] = []
    for piece in ('{"city"', ': "Oslo"}'):
        call = {"index": 0, "id": "call_a", "type": "function"}
        call["function"] = {"name": "weather", "arguments": piece}
        parts += decoder.feed(chat_chunk({"tool_calls": [call]}))
    parts += decoder.feed(chat_chunk({}, "tool_calls"))
    parts += decoder.done()
    assert [(c.id, c.arguments) for c in reduce(parts).tool_calls] == [
        ("call_a", '{"city": "Oslo"}')
    ]


async def test_ollama_parallel_calls_at_index_0_through_the_adapter(server: ReplayServer) -> None:
    wire = ChatWire("qwen3")
    events = [wire.chunk({"role": "assistant", "content": None})]
    for call_id, city in (("call_a", "Oslo"), ("call_b", "Lima")):
        call = {"index": 0, "id": call_id, "type": "function"}
        call["function"] = {"name": "weather", "arguments": json.dumps({"city": city})}
        events.append(wire.chunk({"tool_calls": [call]}))
    events += [wire.chunk({}, "tool_calls"), wire.usage(20, 30)]  # Ollama ends without [DONE]
    server.script(Reply.sse(events))
    model = OpenAICompatible("qwen3", base_url=f"{server.url}/v1")
    calls = reduce(await collect(model, request(tools=(WEATHER,)))).tool_calls
    assert [(c.id, json.loads(c.arguments)["city"]) for c in calls] == [
        ("call_a", "Oslo"),
        ("call_b", "Lima"),
    ]


@pytest.mark.parametrize(
    "content_type", ["text/html", "application/json", "application/octet-stream"]
)
async def test_a_200_that_is_not_a_stream_is_refused_without_reading_its_whole_body(
    target: Target, server: ReplayServer, content_type: str
) -> None:
    """A body that never ends (a proxy's endless page, a file): only its start is read, then
    the connection is dropped. The timeout only guards the old behaviour, which read until
    the body ended — here, never — and then failed as a lost connection."""
    block = b"<html>" + b"x" * 65536
    server.script(Reply(200, (("content-type", content_type),), (block,) * 8, "hang"))
    settings = attrs.evolve(target.settings(server.url, KEY), timeout=10.0)
    error, parts = await failure(settings)
    assert isinstance(error, MalformedResponse), error
    assert content_type in error.message
    assert parts == []
    await server.disconnected.wait()


@pytest.mark.parametrize("status", [429, 500, 503])
async def test_an_error_status_whose_body_never_ends_is_read_no_further_than_its_start(
    target: Target, server: ReplayServer, status: int
) -> None:
    """The SDKs read an error's body whole before raising: a server that never ends it was
    waited for (and its body held) until the body ended or the timeout passed. Now the typed
    error comes from the body's start and the connection is dropped."""
    block = b"x" * 65536
    headers = (("content-type", "application/json"), ("retry-after", "3"))
    server.script(Reply(status, headers, (b'{"error": ', *(block,) * 8), "hang"))
    settings = attrs.evolve(target.settings(server.url, KEY), timeout=10.0)
    error, parts = await failure(settings)
    assert isinstance(error, RateLimited if status == 429 else ModelUnavailable), error
    assert error.retry_after == 3.0
    assert len(error.message) < 2000
    assert parts == []
    await server.disconnected.wait()


async def test_every_adapter_goes_through_the_proxy_the_environment_names(
    target: Target, server: ReplayServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The SDK clients take ``HTTP_PROXY`` / ``HTTPS_PROXY`` from the environment; so does the
    HTTP client the Gemini adapter makes for its SDK (it went straight to the host)."""
    for name in ("http_proxy", "https_proxy", "all_proxy", "no_proxy", "ALL_PROXY", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HTTP_PROXY", server.url)  # the replay server stands in for the proxy
    server.script(Reply.sse(target.text("Hi")))
    parts = await collect(target.settings("http://model.invalid", KEY))
    assert reduce(parts).text == "Hi"
    (sent,) = server.requests
    assert sent.path == "http://model.invalid" + target.path  # a proxy's absolute-form target


async def test_a_byte_order_mark_opening_the_stream_loses_no_event(
    target: Target, server: ReplayServer
) -> None:
    """The event-stream format drops a leading byte order mark; kept, it made the first line's
    field unknown, and the first event (the metadata and input usage, or the first text) was
    lost."""
    events = target.text("Hel", "lo")
    server.script(Reply.sse(events), Reply.sse([b"\xef\xbb\xbf" + events[0], *events[1:]]))
    settings = target.settings(server.url, KEY)
    plain, marked = await collect(settings), await collect(settings)
    assert marked == plain
    assert reduce(marked).text == "Hello"


@given(st.lists(st.integers(0, 40), max_size=6))
def test_a_byte_order_mark_is_dropped_however_the_bytes_are_cut(cuts: list[int]) -> None:
    body = b'\xef\xbb\xbfdata: {"a": 1}\n\ndata: 2\n\n'
    bounds = [0, *sorted(c for c in cuts if c < len(body)), len(body)]
    decoder = SSEDecoder()
    events = [e for a, b in itertools.pairwise(bounds) for e in decoder.feed(body[a:b])]
    events += decoder.finish()
    assert [e.data for e in events] == ['{"a": 1}', "2"]
    decoder = SSEDecoder()  # only the stream's first bytes can be a mark
    assert decoder.feed(b"data: 1\n\n\xef\xbb\xbfdata: 2\n\n") == [ServerSentEvent(None, "1")]


async def test_a_byte_order_mark_before_the_first_chunk_loses_none_of_its_text(
    server: ReplayServer,
) -> None:
    wire = ChatWire("qwen3")
    first = wire.chunk({"role": "assistant", "content": "Hel"})
    events = [first, wire.chunk({"content": "lo"}), wire.chunk({}, "stop"), b"data: [DONE]\n\n"]
    server.script(Reply.sse([b"\xef\xbb\xbf" + events[0], *events[1:]]))
    model = OpenAICompatible("qwen3", base_url=f"{server.url}/v1")
    assert reduce(await collect(model)).text == "Hello"


async def test_anthropic_refuses_a_text_document_at_a_url_before_any_request(
    server: ReplayServer,
) -> None:
    """A URL source is a PDF's: a CSV at a URL went out as one, for the API to refuse."""
    csv = DocumentPart(url="https://example.com/sales.csv", media_type="text/csv")
    req = ModelRequest((UserMessage((TextContent("Sum it:"), csv)),))
    error, parts = await failure(
        Anthropic("claude-sonnet-4-5", api_key=KEY, base_url=server.url), req
    )
    assert isinstance(error, MediaNotSupported)
    assert "Anthropic takes a text document's bytes, not its URL" in error.message
    assert parts == []
    assert server.requests == []
    pdf = DocumentPart(url="https://example.com/report.pdf", media_type="application/pdf")
    block = anthropic_block(pdf)
    assert block["source"] == {"type": "url", "url": "https://example.com/report.pdf"}


def test_anthropic_leaves_blank_text_out_of_every_turn() -> None:
    """The API refuses a text block of spaces and line breaks ("text content blocks must
    contain non-whitespace text"): Claude's own "\\n\\n" before a tool call, sent back, failed
    the next turn of the tool loop."""
    call = ToolCallContent("toolu_1", "weather", {"city": "Oslo"})
    history = (
        UserMessage((TextContent("Weather in Oslo?"), TextContent(" \n"))),
        AssistantMessage((TextContent("\n\n"), call)),
        ToolMessage((ToolResultContent("toolu_1", "weather", " ", media=(ImagePart(PNG),)),)),
    )
    _, turns = anthropic_messages(history)
    assert turns[0]["content"] == [{"type": "text", "text": "Weather in Oslo?"}]
    assert turns[1]["content"] == [
        {"type": "tool_use", "id": "toolu_1", "name": "weather", "input": {"city": "Oslo"}}
    ]
    (result,) = turns[2]["content"]
    assert [block["type"] for block in result["content"]] == ["image"]


def test_chat_completions_leaves_out_a_turn_that_only_reasoned() -> None:
    """A turn of reasoning alone (a reasoning model cut off by its limit) went back as an
    assistant message with null content and no tool calls, which the API refuses."""
    history = (
        UserMessage.text("Hi"),
        AssistantMessage((ReasoningContent("Let me think"),)),
        UserMessage.text("Again?"),
        AssistantMessage((ReasoningContent("Hm"), ToolCallContent("call_1", "weather", {}))),
    )
    assert chat_messages(history) == [
        {"role": "user", "content": "Hi"},
        {"role": "user", "content": "Again?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "weather", "arguments": "{}"},
                }
            ],
        },
    ]


@pytest.mark.parametrize(
    "reply",
    [
        Reply(200, (("content-type", "text/html"),), (b"<html>",), "hang"),
        Reply(503, (("content-type", "application/json"),), (b'{"error": ',), "hang"),
    ],
    ids=["not-a-stream", "error-status"],
)
async def test_cancelled_while_a_body_that_is_not_a_stream_is_read(
    target: Target, server: ReplayServer, reply: Reply
) -> None:
    """Cancelled while the start of such a body is read (by the loop, or by the SDK for an
    error status): the connection is dropped and no generator of the HTTP stack is left behind
    (a ResourceWarning, an error here)."""
    server.script(reply)
    async with target.settings(server.url, KEY).open() as model:
        stream = model.stream(request())
        with trio.CancelScope() as scope:

            async def cancel_when_waiting() -> None:
                await server.received.wait()
                await trio.testing.wait_all_tasks_blocked()
                scope.cancel()

            async with trio.open_nursery() as nursery:
                nursery.start_soon(cancel_when_waiting)
                async for _ in stream:
                    raise AssertionError("no part was expected")
        await close_stream(stream)
        assert scope.cancelled_caught
        await server.disconnected.wait()


async def test_content_sent_as_a_list_of_chunks_is_text_and_reasoning(
    server: ReplayServer,
) -> None:
    """Mistral's OpenAI-compatible API streams a reasoning model's content as a list of chunks;
    read only as a string, the whole answer was lost without a word."""
    wire = ChatWire("magistral-medium-2509")

    def thinking(text: str) -> bytes:
        chunk = {"type": "thinking", "thinking": [{"type": "text", "text": text}]}
        return wire.chunk({"content": [chunk]})

    events = [
        wire.chunk({"role": "assistant", "content": ""}),
        thinking("It is a greeting"),
        thinking(", I greet back."),
        wire.chunk({"content": [{"type": "text", "text": "Hello"}]}),
        wire.chunk({"content": "!"}),
        wire.chunk({}, "stop"),
        wire.usage(10, 9),
        b"data: [DONE]\n\n",
    ]
    server.script(Reply.sse(events))
    model = OpenAICompatible("magistral-medium-2509", base_url=f"{server.url}/v1")
    response = reduce(await collect(model))
    assert response.reasoning == "It is a greeting, I greet back."
    assert response.text == "Hello!"


@pytest.mark.parametrize("begun", [False, True], ids=["before-the-response", "mid-stream"])
async def test_a_server_that_stalls_is_given_up_on_after_the_timeout(
    target: Target, server: ReplayServer, begun: bool
) -> None:
    """The timeout bounds the wait for the response and each wait between its bytes: a server
    that goes silent is a retryable network error, and the connection is dropped."""
    server.script(Reply.sse(target.begun(), ending="hang") if begun else Reply.stall())
    # Mid-stream, the begun events must come within the timeout on however busy a machine:
    # a bound the test does not control, so a wide one there (the wait is all that costs).
    settings = attrs.evolve(target.settings(server.url, KEY), timeout=2.0 if begun else 0.25)
    error, parts = await failure(settings)
    assert isinstance(error, ModelNetworkError), error
    assert error.is_retryable
    assert bool(parts) is begun
    if begun:  # not "lost": the server went silent
        assert "went silent past the timeout mid-stream" in error.message
    await server.disconnected.wait()


def test_the_metadata_come_from_the_first_chunk_that_is_the_models() -> None:
    """Azure's first chunk carries its prompt filter's results: no choices, an empty ID and
    model, a time of 0 — it made the response's metadata ("", "", 1970)."""
    decoder = ChatCompletionsDecoder()
    filtered = {"id": "", "model": "", "created": 0, "object": "", "choices": []}
    parts = decoder.feed(filtered | {"prompt_filter_results": [{"prompt_index": 0}]})
    parts += decoder.feed(
        {"id": "chatcmpl-9", "model": "gpt-4.1", "created": 1_700_000_000}
        | {"choices": [{"index": 0, "delta": {"content": "Hi"}, "finish_reason": "stop"}]}
    )
    parts += decoder.done()
    assert reduce(parts).metadata == ResponseMetadataPart("chatcmpl-9", "gpt-4.1", 1_700_000_000.0)


@tool(readonly=True)
async def weather(city: str) -> str:
    """Today's weather in a city.

    Args:
        city: The city's name.
    """
    return f"sunny in {city}"


async def test_a_tool_loop_whose_emoji_a_server_cut_in_two_runs_and_goes_back_whole(
    server: ReplayServer,
) -> None:
    """Through the engine: the thinking, the call's arguments and the answer each cut between
    the halves of an emoji. The tool gets the emoji, and the next request — which could not be
    encoded with two lone surrogates in it — carries the signed thinking as it was made."""
    wire = AnthropicWire()
    arguments = "".join(utf16_units(json.dumps({"city": "Oslo 😀"}, ensure_ascii=False)))
    first = [
        wire.start(),
        *wire.thinking_block(0, *utf16_units("I think 🤔 so")),
        *wire.calls(("toolu_1", "weather", arguments), split=3, first=1),
        *wire.finish("tool_use"),
    ]
    server.script(Reply.sse(first), Reply.sse(AnthropicWire().text(*utf16_units("Sunny 😀!"))))
    agent = Agent("weather", "Answer.", toolkit=Toolkit(weather))
    model = Anthropic("claude-sonnet-4-5", api_key=KEY, base_url=server.url, thinking_budget=2048)
    async with open_runtime(agent.toolkit.handlers() + model.layer(), agents=[agent]) as runtime:
        result = await runtime.run(agent, "Weather in Oslo?")
    assert (result.status, result.text) == ("completed", "Sunny 😀!")
    turn, results = server.requests[1].json()["messages"][1:3]
    assert turn["content"][0] == {
        "type": "thinking",
        "thinking": "I think 🤔 so",
        "signature": "sig-abc",
    }
    assert turn["content"][1]["input"] == {"city": "Oslo 😀"}
    assert results["content"][0]["content"] == "sunny in Oslo 😀"


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        ({"object": "error", "type": "InternalServerError", "message": "x", "code": 500}, True),
        ({"code": 429, "message": "Rate limit exceeded: free-models-per-min"}, True),
        ({"object": "error", "type": "BadRequestError", "message": "bad", "code": 400}, False),
    ],
)
async def test_a_server_error_mid_stream_is_typed_by_its_numeric_code(
    server: ReplayServer, error: dict[str, Any], expected: bool
) -> None:
    """vLLM and OpenRouter report a failure after the 200 as an error chunk with the status as
    its ``code``: a 5xx or a 429 is retried like the same status before the stream began."""
    wire = ChatWire()
    server.script(Reply.sse([wire.chunk({"role": "assistant", "content": "Hi"}), sse_event(error)]))
    raised, _ = await failure(OpenAICompatible("qwen3", base_url=f"{server.url}/v1"))
    assert raised.is_retryable is expected
    assert "mid-stream" in raised.message


def sse_event(error: dict[str, Any]) -> bytes:
    return f"data: {json.dumps({'error': error})}\n\n".encode()


@pytest.mark.parametrize("field", ["item_id", "call_id"])
async def test_a_responses_call_named_by_an_object_is_malformed(
    server: ReplayServer, field: str
) -> None:
    # A call looked up by an ID that is a JSON object (unhashable in Python): a typed
    # MalformedResponse, never a bare TypeError.
    wire = ResponsesWire()
    events = [wire.created(), wire.call_added(0, "fc_1", "call_1", "weather")]
    if field == "item_id":
        events.append(wire.event("response.function_call_arguments.delta", item_id={}, delta="{"))
    else:
        item = {"type": "function_call", "id": {}, "call_id": {}, "name": "weather"}
        events.append(wire.event("response.output_item.done", output_index=0, item=item))
    server.script(Reply.sse(events))
    settings = OpenAIResponses("gpt-4.1", api_key=KEY, base_url=f"{server.url}/v1")
    error, _ = await failure(settings, request(tools=(WEATHER,)))
    assert isinstance(error, MalformedResponse), error


async def test_an_anthropic_delta_of_a_type_that_is_no_string_is_passed_over(
    server: ReplayServer,
) -> None:
    # A delta whose type is a list (unhashable): like any delta this adapter does not know, it
    # carries nothing to show — never a bare TypeError.
    wire = AnthropicWire()
    odd = wire.delta(0, {"type": ["text_delta"], "text": "?"})
    block = wire.text_block(0, "Hi")
    server.script(Reply.sse([wire.start(), block[0], odd, *block[1:], *wire.finish("end_turn")]))
    settings = Anthropic("claude-sonnet-4-5", api_key=KEY, base_url=server.url)
    response = reduce(await collect(settings))
    assert response.text == "Hi"
