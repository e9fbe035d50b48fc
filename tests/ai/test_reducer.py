"""ResponseReducer: every protocol violation is a MalformedResponse; truncated calls under "length"
never become executable calls; content keeps the model's order; usage comes from the finish part.
``generate`` reduces a model's stream and always closes it."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence

import pytest
import trio
import trio.testing

from effectagent.ai import (
    ErrorPart,
    FinishPart,
    MalformedResponse,
    ModelRequest,
    ModelResponse,
    RateLimited,
    ReasoningDelta,
    ReasoningEnd,
    ReasoningStart,
    ResponseMetadata,
    ResponsePart,
    ResponseReducer,
    TextDelta,
    TextEnd,
    TextStart,
    ToolCall,
    ToolParamsDelta,
    ToolParamsEnd,
    ToolParamsStart,
    TruncatedToolCall,
    Usage,
    UserMessage,
    generate,
)

STOP = FinishPart("stop", Usage.of(7, 3))


def _reduce(parts: Sequence[ResponsePart]) -> ModelResponse:
    reducer = ResponseReducer()
    for part in parts:
        reducer.feed(part)
    return reducer.finish()


def _call(call_id: str, name: str, arguments: str) -> list[ResponsePart]:
    return [
        ToolParamsStart(call_id, name),
        ToolParamsDelta(call_id, arguments),
        ToolParamsEnd(call_id),
        ToolCall(call_id, name, arguments),
    ]


MALFORMED: dict[str, list[ResponsePart]] = {
    "text delta before start": [TextDelta("t", "hi"), STOP],
    "reasoning delta before start": [ReasoningDelta("r", "hm"), STOP],
    "text end before start": [TextEnd("t"), STOP],
    "text started twice": [TextStart("t"), TextStart("t"), STOP],
    "reasoning started twice": [ReasoningStart("r"), ReasoningEnd("r"), ReasoningStart("r"), STOP],
    "text delta after end": [TextStart("t"), TextEnd("t"), TextDelta("t", "late"), STOP],
    "text ended twice": [TextStart("t"), TextEnd("t"), TextEnd("t"), STOP],
    "text part after finish": [TextStart("t"), TextEnd("t"), STOP, TextStart("u")],
    "tool call after finish": [STOP, ToolCall("c", "f", "{}")],
    "second finish": [STOP, STOP],
    "duplicate tool call id": [ToolCall("c", "f", "{}"), ToolCall("c", "g", "{}"), STOP],
    "tool params restarted after its call": [
        *_call("c", "f", "{}"),
        ToolParamsStart("c", "f"),
        STOP,
    ],
    "tool params started twice": [ToolParamsStart("c", "f"), ToolParamsStart("c", "f"), STOP],
    "tool params delta before start": [ToolParamsDelta("c", "{"), STOP],
    "tool params delta after end": [
        ToolParamsStart("c", "f"),
        ToolParamsEnd("c"),
        ToolParamsDelta("c", "}"),
        STOP,
    ],
    "tool params end before start": [ToolParamsEnd("c"), STOP],
    "call renamed between params and call": [
        ToolParamsStart("c", "f"),
        ToolParamsEnd("c"),
        ToolCall("c", "g", "{}"),
        STOP,
    ],
    "stream without finish": [TextStart("t"), TextDelta("t", "hi"), TextEnd("t")],
    "empty stream": [],
    "unfinished params, stop": [
        ToolParamsStart("c", "f"),
        ToolParamsDelta("c", '{"a'),
        FinishPart("stop"),
    ],
    "unfinished params, tool-calls": [ToolParamsStart("c", "f"), FinishPart("tool-calls")],
    "text block never ended, stop": [TextStart("t"), TextDelta("t", "hi"), STOP],
}


@pytest.mark.parametrize("parts", list(MALFORMED.values()), ids=list(MALFORMED))
def test_malformed_sequences_raise(parts: list[ResponsePart]) -> None:
    with pytest.raises(MalformedResponse):
        _reduce(parts)


def test_text_and_reasoning_are_assembled_in_order() -> None:
    response = _reduce(
        [
            ReasoningStart("r"),
            ReasoningDelta("r", "think"),
            ReasoningDelta("r", "ing"),
            ReasoningEnd("r"),
            TextStart("t"),
            TextDelta("t", "Hello, "),
            TextDelta("t", "world"),
            TextEnd("t"),
            STOP,
        ]
    )
    assert response.content == (("reasoning", "thinking"), ("text", "Hello, world"))
    assert response.text == "Hello, world"
    assert response.reasoning == "thinking"
    assert response.tool_calls == ()
    assert response.finish_reason == "stop"


def test_content_keeps_interleaved_order_of_text_reasoning_and_calls() -> None:
    response = _reduce(
        [
            TextStart("a"),
            TextDelta("a", "first"),
            TextEnd("a"),
            *_call("c1", "f", '{"x": 1}'),
            ReasoningStart("r"),
            ReasoningDelta("r", "hmm"),
            ReasoningEnd("r"),
            ToolCall("c2", "g", "{}"),
            TextStart("b"),
            TextDelta("b", "last"),
            TextEnd("b"),
            FinishPart("tool-calls"),
        ]
    )
    kinds = [kind for kind, _ in response.content]
    assert kinds == ["text", "tool-call", "reasoning", "tool-call", "text"]
    assert [c.id for c in response.tool_calls] == ["c1", "c2"]
    assert response.tool_calls[0] == ToolCall("c1", "f", '{"x": 1}')
    assert response.text == "firstlast"


def test_interleaved_blocks_with_distinct_ids_are_kept_apart() -> None:
    response = _reduce(
        [
            TextStart("a"),
            TextStart("b"),
            TextDelta("b", "B"),
            TextDelta("a", "A"),
            TextEnd("a"),
            TextEnd("b"),
            STOP,
        ]
    )
    assert response.content == (("text", "A"), ("text", "B"))


def test_usage_and_metadata_come_from_their_parts() -> None:
    usage = Usage.of(120, 30, cache_read=100, cache_write=5)
    response = _reduce(
        [
            ResponseMetadata(id="resp_1", model="m-1"),
            TextStart("t"),
            TextEnd("t"),
            FinishPart("stop", usage),
        ]
    )
    assert response.usage == usage
    assert response.usage.input.uncached == 15
    assert response.metadata == ResponseMetadata(id="resp_1", model="m-1")


def test_truncated_calls_under_length_are_reported_not_executable() -> None:
    response = _reduce(
        [
            *_call("c1", "f", "{}"),
            ToolParamsStart("c2", "g"),
            ToolParamsDelta("c2", '{"que'),
            ToolParamsDelta("c2", "ry"),
            FinishPart("length"),
        ]
    )
    assert [c.id for c in response.tool_calls] == ["c1"]
    assert response.truncated_calls == (TruncatedToolCall("c2", "g", '{"query'),)
    assert response.finish_reason == "length"


def test_an_open_text_block_is_tolerated_when_the_model_was_cut_off() -> None:
    response = _reduce([TextStart("t"), TextDelta("t", "partial"), FinishPart("length")])
    assert response.text == "partial"


def test_a_provider_error_part_is_raised_at_finish() -> None:
    reducer = ResponseReducer()
    error = RateLimited("slow down", retry_after=2.0)
    reducer.feed(TextStart("t"))
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
    model = _ListModel([TextStart("t"), TextDelta("t", "hi"), TextEnd("t"), STOP])
    request = ModelRequest((UserMessage.text("hello"),))
    response = await model.generate(request)
    assert response.text == "hi"
    assert response.usage == STOP.usage
    assert model.requests == [request]
    assert model.closed


async def test_generate_closes_the_stream_when_it_is_malformed() -> None:
    model = _ListModel([TextDelta("t", "x"), STOP, TextStart("u")])
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
            yield TextDelta("t", "x")
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
