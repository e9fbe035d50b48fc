"""The event-stream decoder: chunk boundaries never change the events."""

from __future__ import annotations

import itertools
import tracemalloc
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from effectagent.providers._sse import (
    DEFAULT_MAX_LINE_BYTES,
    EventTooLarge,
    ServerSentEvent,
    SSEDecoder,
)

STREAM = (
    b": keep-alive comment\n"
    b"event: message_start\n"
    b'data: {"a": 1}\n'
    b"\n"
    b"data: first line\r\n"
    b"data: second line\r\n"
    b"\r\n"
    b"id: 7\rretry: 100\revent: ping\rdata:no-space\r\r"
    b"data: [DONE]\n\n"
)
EXPECTED = [
    ServerSentEvent("message_start", '{"a": 1}'),
    ServerSentEvent(None, "first line\nsecond line"),
    ServerSentEvent("ping", "no-space"),
    ServerSentEvent(None, "[DONE]"),
]


def decode(pieces: list[bytes]) -> list[ServerSentEvent]:
    decoder = SSEDecoder()
    events = [event for piece in pieces for event in decoder.feed(piece)]
    return events + decoder.finish()


def test_lf_crlf_and_cr_line_endings_comments_and_ignored_fields() -> None:
    assert decode([STREAM]) == EXPECTED


@given(st.lists(st.integers(0, len(STREAM)), max_size=12))
def test_any_split_of_the_bytes_gives_the_same_events(cuts: list[int]) -> None:
    points = sorted({0, len(STREAM), *cuts})
    pieces = [STREAM[a:b] for a, b in itertools.pairwise(points)]
    assert decode(pieces) == EXPECTED


def test_a_crlf_split_between_chunks_is_one_line_ending() -> None:
    assert decode([b"data: a\r", b"\ndata: b\r\n\r\n"]) == [ServerSentEvent(None, "a\nb")]


def test_an_event_cut_before_its_blank_line_is_dropped() -> None:
    assert decode([b"data: whole\n\n", b'data: {"half": ']) == [ServerSentEvent(None, "whole")]


def test_invalid_utf8_is_refused() -> None:
    decoder = SSEDecoder()
    with pytest.raises(UnicodeDecodeError):
        decoder.feed(b"data: \xff\xfe\n\n")


# ---- linear in its input, and bounded ------------------------------------------------------------

MiB = 1024 * 1024
CHUNK = b"x" * (64 * 1024)


def _allocated_while_feeding(
    decoder: SSEDecoder, chunks: int, last: bytes
) -> tuple[int, list[Any]]:
    """Feed ``chunks`` times the same 64 KiB chunk, then ``last``: the bytes the decoder
    allocated for its own work, summed over the feeds (each feed's peak above what was traced
    before it), and the events it gave."""
    events: list[Any] = []
    tracemalloc.start()
    try:
        total = 0
        for piece in itertools.chain(itertools.repeat(CHUNK, chunks), [last]):
            before = tracemalloc.get_traced_memory()[0]
            tracemalloc.reset_peak()
            events += decoder.feed(piece)
            total += tracemalloc.get_traced_memory()[1] - before
    finally:
        tracemalloc.stop()
    return total, events


def test_a_64_mb_line_is_decoded_in_linear_work() -> None:
    """A 64 MB ``data:`` line in 64 KiB chunks (under a bound raised above it): the decoder
    allocates, over all its feeds, a small multiple of the line — the line joined once and
    decoded once — where re-copying what it holds on every chunk would be ~1000 times more."""
    decoder = SSEDecoder(max_line_bytes=128 * MiB, max_event_bytes=128 * MiB)
    decoder.feed(b"data: ")
    chunks = 64 * MiB // len(CHUNK)
    allocated, events = _allocated_while_feeding(decoder, chunks, b"\n\n")
    (event,) = events
    assert len(event.data) == 64 * MiB
    assert allocated < 4 * 64 * MiB


@pytest.mark.parametrize("size", [1 * MiB, 4 * MiB])
def test_the_work_grows_with_the_size_not_its_square(size: int) -> None:
    """The same measure at two sizes: four times the line, at most about four times the work."""
    works = []
    for scale in (1, 4):
        decoder = SSEDecoder(max_line_bytes=64 * MiB)
        allocated, _ = _allocated_while_feeding(decoder, scale * size // len(CHUNK), b"\n")
        works.append(allocated)
    assert works[1] < 5 * works[0]


def test_a_64_mb_line_is_refused_at_the_bound_holding_no_more_than_it() -> None:
    decoder = SSEDecoder()  # 16 MiB lines and events
    decoder.feed(b"data: ")
    fed = 6
    # Up to the bound, the chunks are taken; the one that crosses it is refused.
    while fed + len(CHUNK) <= DEFAULT_MAX_LINE_BYTES:
        assert decoder.feed(CHUNK) == []
        fed += len(CHUNK)
    with pytest.raises(EventTooLarge) as raised:
        decoder.feed(CHUNK)
    assert (raised.value.what, raised.value.limit) == ("line", DEFAULT_MAX_LINE_BYTES)
    assert decoder._pending == []  # what it held is dropped


def test_a_line_longer_than_the_bound_in_one_chunk_is_refused() -> None:
    decoder = SSEDecoder(max_line_bytes=10)
    assert decoder.feed(b"data: 1234\n") == []
    with pytest.raises(EventTooLarge, match="a server-sent line is longer than 10 bytes"):
        decoder.feed(b"data: 12345\n")


def test_an_event_of_many_short_lines_is_bounded_too() -> None:
    decoder = SSEDecoder(max_line_bytes=100, max_event_bytes=20)
    assert decoder.feed(b"data: 0123456789\ndata: 012345678\n\n") == [
        ServerSentEvent(None, "0123456789\n012345678")  # 20 bytes: at the bound
    ]
    with pytest.raises(EventTooLarge) as raised:
        decoder.feed(b"data: 0123456789\ndata: 0123456789\n")
    assert raised.value.what == "event"


@given(st.lists(st.integers(0, len(STREAM)), max_size=12), st.integers(40, 200))
def test_bounds_above_every_line_change_nothing(cuts: list[int], bound: int) -> None:
    points = sorted({0, len(STREAM), *cuts})
    decoder = SSEDecoder(max_line_bytes=bound, max_event_bytes=bound)
    events = [e for a, b in itertools.pairwise(points) for e in decoder.feed(STREAM[a:b])]
    assert events + decoder.finish() == EXPECTED


def test_a_cr_ending_a_chunk_dispatches_at_once_and_its_lf_is_skipped() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b"data: a\r\r") == [ServerSentEvent(None, "a")]
    assert decoder.feed(b"\ndata: b\n\n") == [ServerSentEvent(None, "b")]
