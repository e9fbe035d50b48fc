"""ResponseReducer's bounds: a response stops at ``max_bytes`` (the part that crosses it raises
ResponseTooLarge, nothing after it is taken); a tool call's arguments past ``max_argument_bytes``
stop being kept — only a head stays — and the call ends as a "too-large" TruncatedToolCall that
never runs. Sizes are UTF-8 bytes; every block or call opened costs PART_OVERHEAD too."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from effectagent.ai import (
    DEFAULT_MAX_RESPONSE_BYTES,
    DEFAULT_MAX_TOOL_ARGUMENT_BYTES,
    FinishPart,
    ReasoningDeltaPart,
    ReasoningStartPart,
    ResponseReducer,
    ResponseTooLarge,
    TextDeltaPart,
    TextEndPart,
    TextStartPart,
    ToolCallPart,
    ToolParamsDeltaPart,
    ToolParamsEndPart,
    ToolParamsStartPart,
    TruncatedToolCall,
    format_bytes,
)
from effectagent.ai._reduce import ARGUMENT_HEAD_CHARS, PART_OVERHEAD


def _opened(reducer: ResponseReducer, block: str = "t") -> int:
    reducer.feed(TextStartPart(block))
    return PART_OVERHEAD + len(block)


@given(
    deltas=st.lists(st.text(max_size=40), min_size=1, max_size=40),
    limit=st.integers(PART_OVERHEAD + 1, PART_OVERHEAD + 600),
)
def test_the_response_stops_at_the_first_delta_that_takes_it_past_the_limit(
    deltas: list[str], limit: int
) -> None:
    """For every sequence of deltas and every limit: the deltas are taken while the UTF-8 size
    stays within the limit; the one that takes it past raises, naming the limit."""
    reducer = ResponseReducer(max_bytes=limit)
    size = _opened(reducer)
    for delta in deltas:
        size += len(delta.encode("utf-8", "surrogatepass"))
        if size > limit:
            with pytest.raises(ResponseTooLarge) as raised:
                reducer.feed(TextDeltaPart("t", delta))
            assert raised.value.limit == limit
            return
        reducer.feed(TextDeltaPart("t", delta))
    reducer.feed(TextEndPart("t"))
    reducer.feed(FinishPart("stop"))
    assert reducer.finish().text == "".join(deltas)


def test_non_ascii_text_counts_its_utf8_bytes() -> None:
    reducer = ResponseReducer(max_bytes=PART_OVERHEAD + 1 + 8)
    _opened(reducer)
    reducer.feed(TextDeltaPart("t", "ééé"))  # 6 bytes, 3 characters
    reducer.feed(TextDeltaPart("t", "é"))  # 8 bytes: exactly the limit
    with pytest.raises(ResponseTooLarge):
        reducer.feed(TextDeltaPart("t", "a"))


def test_reasoning_and_arguments_count_toward_the_response() -> None:
    reducer = ResponseReducer(max_bytes=1000)
    reducer.feed(ReasoningStartPart("r"))
    reducer.feed(ReasoningDeltaPart("r", "x" * 500))
    reducer.feed(ToolParamsStartPart("c", "f"))
    with pytest.raises(ResponseTooLarge):
        reducer.feed(ToolParamsDeltaPart("c", "y" * 400))


def test_an_endless_stream_of_empty_blocks_is_bounded_too() -> None:
    reducer = ResponseReducer(max_bytes=64 * 1024)

    def open_and_end(block: str) -> None:
        reducer.feed(TextStartPart(block))
        reducer.feed(TextEndPart(block))

    blocks = 64 * 1024 // (PART_OVERHEAD + 5)  # what fits: each costs the overhead and its ID
    for n in range(blocks):
        open_and_end(f"t{n:04}")
    with pytest.raises(ResponseTooLarge):
        open_and_end("t9999")


def test_the_message_is_a_sentence_with_the_limit_rounded() -> None:
    reducer = ResponseReducer()
    _opened(reducer)
    with pytest.raises(ResponseTooLarge) as raised:
        reducer.feed(TextDeltaPart("t", "x" * DEFAULT_MAX_RESPONSE_BYTES))
    assert str(raised.value) == (
        "the response grew past 4 MiB, the most a response may be, and was stopped there"
    )
    assert not raised.value.is_retryable


def _streamed_call(reducer: ResponseReducer, call_id: str, pieces: list[str]) -> None:
    reducer.feed(ToolParamsStartPart(call_id, "write"))
    for piece in pieces:
        reducer.feed(ToolParamsDeltaPart(call_id, piece))
    reducer.feed(ToolParamsEndPart(call_id))
    reducer.feed(ToolCallPart(call_id, "write", "".join(pieces)))


def test_arguments_past_their_limit_are_not_kept_and_the_call_never_runs() -> None:
    reducer = ResponseReducer(max_bytes=10_000_000, max_argument_bytes=1000)
    pieces = ['{"text": "'] + ["a" * 100] * 50 + ['"}']
    _streamed_call(reducer, "big", pieces)
    _streamed_call(reducer, "small", ['{"text": "hi"}'])
    # Only the head stayed once the limit was crossed: nothing more is kept of the call.
    reducer.feed(FinishPart("tool-calls"))
    response = reducer.finish()
    assert [c.id for c in response.tool_calls] == ["small"]
    size = sum(map(len, pieces))
    head = "".join(pieces)[:ARGUMENT_HEAD_CHARS]
    assert response.truncated_calls == (TruncatedToolCall("big", "write", head, "too-large", size),)


def test_a_call_past_its_limit_keeps_no_more_than_the_limit_while_it_streams() -> None:
    reducer = ResponseReducer(max_bytes=10_000_000, max_argument_bytes=1000)
    reducer.feed(ToolParamsStartPart("big", "write"))
    for _ in range(1000):
        reducer.feed(ToolParamsDeltaPart("big", "a" * 100))
    params = reducer._params["big"]
    assert params.over
    assert params.chunks == []
    assert len(params.head) == ARGUMENT_HEAD_CHARS
    assert params.size == 100_000


def test_arguments_declared_whole_past_their_limit_make_a_too_large_call() -> None:
    reducer = ResponseReducer(max_argument_bytes=100)
    arguments = '{"text": "' + "é" * 60 + '"}'  # 72 characters, 132 bytes
    reducer.feed(ToolCallPart("c", "write", arguments))
    reducer.feed(FinishPart("tool-calls"))
    response = reducer.finish()
    assert response.tool_calls == ()
    assert response.truncated_calls == (
        TruncatedToolCall("c", "write", arguments, "too-large", 132),
    )


def test_arguments_restated_after_streaming_count_only_what_they_add() -> None:
    arguments = '{"text": "' + "a" * 300 + '"}'
    overhead = PART_OVERHEAD + len("c") + len("write")
    reducer = ResponseReducer(max_bytes=overhead + len(arguments))
    _streamed_call(reducer, "c", [arguments[:150], arguments[150:]])
    reducer.feed(FinishPart("tool-calls"))
    assert reducer.finish().tool_calls == (ToolCallPart("c", "write", arguments),)


def test_a_call_cut_off_by_length_past_its_limit_is_too_large() -> None:
    reducer = ResponseReducer(max_argument_bytes=10)
    reducer.feed(ToolParamsStartPart("c", "write"))
    reducer.feed(ToolParamsDeltaPart("c", '{"text": "abcdefgh'))
    reducer.feed(FinishPart("length"))
    (cut,) = reducer.finish().truncated_calls
    assert (cut.reason, cut.size, cut.partial_arguments) == ("too-large", 18, '{"text": "abcdefgh')


def test_the_defaults() -> None:
    assert DEFAULT_MAX_RESPONSE_BYTES == 4 * 1024 * 1024
    assert DEFAULT_MAX_TOOL_ARGUMENT_BYTES == 256 * 1024
    with pytest.raises(ValueError, match="positive"):
        ResponseReducer(max_bytes=0)


@pytest.mark.parametrize(
    ("size", "text"),
    [
        (1, "1 byte"),
        (512, "512 bytes"),
        (256 * 1024, "256 KiB"),
        (1536 * 1024, "1.5 MiB"),
        (100 * 1024 * 1024 + 7, "100 MiB"),
        (3 * 1024**3 + 200 * 1024**2, "3.2 GiB"),
    ],
)
def test_format_bytes_rounds_for_a_person(size: int, text: str) -> None:
    assert format_bytes(size) == text


def test_a_size_that_would_read_as_its_limit_is_given_exactly() -> None:
    """ "20 MiB, over the limit of 20 MiB" never: beside a count that rounds the same, both are
    exact; beside one that rounds differently (or an equal one), the rounded figure stays."""
    mib = 1024 * 1024
    assert format_bytes(20 * mib + 1, apart_from=20 * mib) == "20,971,521 bytes"
    assert format_bytes(20 * mib, apart_from=20 * mib + 1) == "20,971,520 bytes"
    assert format_bytes(30 * mib, apart_from=20 * mib) == "30 MiB"
    assert format_bytes(20 * mib, apart_from=20 * mib) == "20 MiB"
    assert format_bytes(1023, apart_from=1000) == "1023 bytes"
