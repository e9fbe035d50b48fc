"""ResponseReducer: every protocol violation is a MalformedResponse; truncated calls under "length"
never become executable calls; content keeps the model's order; usage comes from the finish part.
``generate`` reduces a model's stream and always closes it."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence

import pytest
import trio
import trio.testing

from effectagent.ai import (
    FinishPart,
    MalformedResponse,
    ModelRequest,
    ModelResponse,
    RateLimited,
    ReasoningContent,
    ReasoningDeltaPart,
    ReasoningEndPart,
    ReasoningStartPart,
    ResponseMetadataPart,
    ResponsePart,
    ResponseReducer,
    TextContent,
    TextDeltaPart,
    TextEndPart,
    TextStartPart,
    ToolCallPart,
    ToolParamsDeltaPart,
    ToolParamsEndPart,
    ToolParamsStartPart,
    TruncatedToolCall,
    Usage,
    UserMessage,
    generate,
)
from effectagent.ai._response import ErrorPart

STOP = FinishPart("stop", Usage.of(7, 3))


def _reduce(parts: Sequence[ResponsePart]) -> ModelResponse:
    reducer = ResponseReducer()
    for part in parts:
        reducer.feed(part)
    return reducer.finish()


def _call(call_id: str, name: str, arguments: str) -> list[ResponsePart]:
    return [
        ToolParamsStartPart(call_id, name),
        ToolParamsDeltaPart(call_id, arguments),
        ToolParamsEndPart(call_id),
        ToolCallPart(call_id, name, arguments),
    ]


MALFORMED: dict[str, list[ResponsePart]] = {
    "text delta before start": [TextDeltaPart("t", "hi"), STOP],
    "reasoning delta before start": [ReasoningDeltaPart("r", "hm"), STOP],
    "text end before start": [TextEndPart("t"), STOP],
    "text started twice": [TextStartPart("t"), TextStartPart("t"), STOP],
    "reasoning started twice": [
        ReasoningStartPart("r"),
        ReasoningEndPart("r"),
        ReasoningStartPart("r"),
        STOP,
    ],
    "text delta after end": [
        TextStartPart("t"),
        TextEndPart("t"),
        TextDeltaPart("t", "late"),
        STOP,
    ],
    "text ended twice": [TextStartPart("t"), TextEndPart("t"), TextEndPart("t"), STOP],
    "text part after finish": [TextStartPart("t"), TextEndPart("t"), STOP, TextStartPart("u")],
    "tool call after finish": [STOP, ToolCallPart("c", "f", "{}")],
    "second finish": [STOP, STOP],
    "duplicate tool call id": [ToolCallPart("c", "f", "{}"), ToolCallPart("c", "g", "{}"), STOP],
    "tool params restarted after its call": [
        *_call("c", "f", "{}"),
        ToolParamsStartPart("c", "f"),
        STOP,
    ],
    "tool params started twice": [
        ToolParamsStartPart("c", "f"),
        ToolParamsStartPart("c", "f"),
        STOP,
    ],
    "tool params delta before start": [ToolParamsDeltaPart("c", "{"), STOP],
    "tool params delta after end": [
        ToolParamsStartPart("c", "f"),
        ToolParamsEndPart("c"),
        ToolParamsDeltaPart("c", "}"),
        STOP,
    ],
    "tool params end before start": [ToolParamsEndPart("c"), STOP],
    "call renamed between params and call": [
        ToolParamsStartPart("c", "f"),
        ToolParamsEndPart("c"),
        ToolCallPart("c", "g", "{}"),
        STOP,
    ],
    "stream without finish": [TextStartPart("t"), TextDeltaPart("t", "hi"), TextEndPart("t")],
    "empty stream": [],
    "unfinished params, stop": [
        ToolParamsStartPart("c", "f"),
        ToolParamsDeltaPart("c", '{"a'),
        FinishPart("stop"),
    ],
    "unfinished params, tool-calls": [ToolParamsStartPart("c", "f"), FinishPart("tool-calls")],
    "text block never ended, stop": [TextStartPart("t"), TextDeltaPart("t", "hi"), STOP],
}


@pytest.mark.parametrize("parts", list(MALFORMED.values()), ids=list(MALFORMED))
def test_malformed_sequences_raise(parts: list[ResponsePart]) -> None:
    with pytest.raises(MalformedResponse):
        _reduce(parts)


def test_text_and_reasoning_are_assembled_in_order() -> None:
    response = _reduce(
        [
            ReasoningStartPart("r"),
            ReasoningDeltaPart("r", "think"),
            ReasoningDeltaPart("r", "ing"),
            ReasoningEndPart("r"),
            TextStartPart("t"),
            TextDeltaPart("t", "Hello, "),
            TextDeltaPart("t", "world"),
            TextEndPart("t"),
            STOP,
        ]
    )
    assert response.content == (ReasoningContent("thinking"), TextContent("Hello, world"))
    assert response.text == "Hello, world"
    assert response.reasoning == "thinking"
    assert response.tool_calls == ()
    assert response.finish_reason == "stop"


def test_content_keeps_interleaved_order_of_text_reasoning_and_calls() -> None:
    response = _reduce(
        [
            TextStartPart("a"),
            TextDeltaPart("a", "first"),
            TextEndPart("a"),
            *_call("c1", "f", '{"x": 1}'),
            ReasoningStartPart("r"),
            ReasoningDeltaPart("r", "hmm"),
            ReasoningEndPart("r"),
            ToolCallPart("c2", "g", "{}"),
            TextStartPart("b"),
            TextDeltaPart("b", "last"),
            TextEndPart("b"),
            FinishPart("tool-calls"),
        ]
    )
    kinds = [part.type for part in response.content]
    assert kinds == ["text", "tool-call", "reasoning", "tool-call", "text"]
    assert [c.id for c in response.tool_calls] == ["c1", "c2"]
    assert response.tool_calls[0] == ToolCallPart("c1", "f", '{"x": 1}')
    assert response.text == "firstlast"


def test_interleaved_blocks_with_distinct_ids_are_kept_apart() -> None:
    response = _reduce(
        [
            TextStartPart("a"),
            TextStartPart("b"),
            TextDeltaPart("b", "B"),
            TextDeltaPart("a", "A"),
            TextEndPart("a"),
            TextEndPart("b"),
            STOP,
        ]
    )
    assert response.content == (TextContent("A"), TextContent("B"))


def test_usage_and_metadata_come_from_their_parts() -> None:
    usage = Usage.of(120, 30, cache_read=100, cache_write=5)
    response = _reduce(
        [
            ResponseMetadataPart(id="resp_1", model="m-1"),
            TextStartPart("t"),
            TextEndPart("t"),
            FinishPart("stop", usage),
        ]
    )
    assert response.usage == usage
    assert response.usage.input.uncached == 15
    assert response.metadata == ResponseMetadataPart(id="resp_1", model="m-1")


def test_truncated_calls_under_length_are_reported_not_executable() -> None:
    response = _reduce(
        [
            *_call("c1", "f", "{}"),
            ToolParamsStartPart("c2", "g"),
            ToolParamsDeltaPart("c2", '{"que'),
            ToolParamsDeltaPart("c2", "ry"),
            FinishPart("length"),
        ]
    )
    assert [c.id for c in response.tool_calls] == ["c1"]
    assert response.truncated_calls == (TruncatedToolCall("c2", "g", '{"query', "length", 7),)
    assert response.finish_reason == "length"


def test_an_open_text_block_is_tolerated_when_the_model_was_cut_off() -> None:
    response = _reduce([TextStartPart("t"), TextDeltaPart("t", "partial"), FinishPart("length")])
    assert response.text == "partial"


def test_a_provider_error_part_is_raised_at_finish() -> None:
    reducer = ResponseReducer()
    error = RateLimited("slow down", retry_after=2.0)
    reducer.feed(TextStartPart("t"))
    reducer.feed(ErrorPart(error))
    assert reducer.error is error
    with pytest.raises(RateLimited) as caught:
        reducer.finish()
    assert caught.value is error


class _ListModel:
    """A minimal LanguageModel over a fixed list of parts that records being closed."""

    def __init__(self, parts: Sequence[ResponsePart]) -> None:
        self.parts = list(parts)
        self.closed = False
        self.requests: list[ModelRequest] = []

    async def stream(self, request: ModelRequest) -> AsyncIterator[ResponsePart]:
        self.requests.append(request)
        try:
            for part in self.parts:
                yield part
        finally:
            self.closed = True

    async def generate(self, request: ModelRequest) -> ModelResponse:
        return await generate(self, request)


async def test_generate_reduces_the_stream_and_closes_it() -> None:
    model = _ListModel([TextStartPart("t"), TextDeltaPart("t", "hi"), TextEndPart("t"), STOP])
    request = ModelRequest((UserMessage.text("hello"),))
    response = await model.generate(request)
    assert response.text == "hi"
    assert response.usage == STOP.usage
    assert model.requests == [request]
    assert model.closed


async def test_generate_closes_the_stream_when_it_is_malformed() -> None:
    model = _ListModel([TextDeltaPart("t", "x"), STOP, TextStartPart("u")])
    with pytest.raises(MalformedResponse):
        await generate(model, ModelRequest(()))
    assert model.closed


class _SlowToCloseModel:
    """Streams a malformed part (a delta for a block never started); closing it takes a second
    of awaited cleanup."""

    def __init__(self) -> None:
        self.cleaned_up = False

    async def stream(self, request: ModelRequest) -> AsyncIterator[ResponsePart]:
        try:
            yield TextDeltaPart("t", "x")
        finally:
            await trio.sleep(1)  # e.g. closing a connection
            self.cleaned_up = True

    async def generate(self, request: ModelRequest) -> ModelResponse:
        return await generate(self, request)


async def test_generate_closes_the_stream_even_when_the_caller_is_cancelled(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The caller is already cancelled when the reducer rejects a part: the generator, suspended
    at that part, is still closed to the end of its cleanup (shielded), and the error surfaces."""
    model = _SlowToCloseModel()
    with trio.CancelScope() as scope:
        scope.cancel()
        with pytest.raises(MalformedResponse):
            await generate(model, ModelRequest(()))
    assert model.cleaned_up
