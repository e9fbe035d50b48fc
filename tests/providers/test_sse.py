"""The event-stream decoder: chunk boundaries never change the events."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from effectagent.providers import SSEDecoder
from effectagent.providers.sse import ServerSentEvent

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
