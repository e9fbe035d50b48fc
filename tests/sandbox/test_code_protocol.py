"""The host side of the harness protocol, without processes: framing, bounds and strict parsing."""

from __future__ import annotations

import itertools
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sandbox._deno_protocol import (
    HEADER_SIZE,
    KIND_CALL,
    KIND_CALL_TOO_LARGE,
    KIND_INVALID,
    KIND_LOG,
    KIND_RESULT,
    KIND_RESULT_TOO_LARGE,
    KIND_THREW,
    CallFrame,
    CallTooLargeFrame,
    Frame,
    FrameDecoder,
    InvalidFrame,
    LogFrame,
    OversizeFrame,
    ProtocolViolation,
    ResultFrame,
    ResultTooLargeFrame,
    ThrewFrame,
    encode_message,
    encode_reply,
    parse_json,
)

NONCE = bytes(range(16))
CEILING = 1000
CEILINGS = dict.fromkeys(
    (
        KIND_LOG,
        KIND_CALL,
        KIND_CALL_TOO_LARGE,
        KIND_RESULT,
        KIND_RESULT_TOO_LARGE,
        KIND_THREW,
        KIND_INVALID,
    ),
    CEILING,
)


def frame(kind: int, body: bytes, nonce: bytes = NONCE) -> bytes:
    return nonce + bytes([kind]) + len(body).to_bytes(4, "big") + body + b"\n"


def decode_all(data: bytes, chunks: list[int] | None = None) -> list[Frame]:
    decoder = FrameDecoder(NONCE, CEILINGS)
    frames: list[Frame] = []
    pieces = [data] if chunks is None else _split(data, chunks)
    for piece in pieces:
        decoder.feed(piece)
        while (next_frame := decoder.next_frame()) is not None:
            frames.append(next_frame)
    assert decoder.buffered == 0
    return frames


def _split(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({min(c, len(data)) for c in cuts})
    edges = [0, *points, len(data)]
    return [data[a:b] for a, b in itertools.pairwise(edges)]


STREAM = b"".join(
    [
        frame(KIND_LOG, b"l" + "héllo".encode()),
        frame(KIND_LOG, b"e"),
        frame(KIND_CALL, b'7\nsearch\n{"q":"x"}'),
        frame(KIND_CALL_TOO_LARGE, b"search\n123456"),
        frame(KIND_THREW, b'{"name":"TypeError","message":"m"}'),
        frame(KIND_INVALID, b'{"message":"not a function"}'),
        frame(KIND_RESULT_TOO_LARGE, b"99999"),
        frame(KIND_RESULT, b"[1,2]"),
    ]
)
EXPECTED: list[Frame] = [
    LogFrame("log", "héllo".encode()),
    LogFrame("error", b""),
    CallFrame(7, "search", b'{"q":"x"}'),
    CallTooLargeFrame("search", 123456),
    ThrewFrame("TypeError", "m"),
    InvalidFrame("not a function"),
    ResultTooLargeFrame(99999),
    ResultFrame(b"[1,2]"),
]


def test_decodes_every_frame_kind() -> None:
    assert decode_all(STREAM) == EXPECTED


@given(st.lists(st.integers(min_value=0, max_value=len(STREAM)), max_size=40))
def test_decoding_does_not_depend_on_how_the_bytes_arrive(cuts: list[int]) -> None:
    assert decode_all(STREAM, cuts) == EXPECTED


def test_a_frame_without_the_pass_nonce_is_a_violation() -> None:
    decoder = FrameDecoder(NONCE, CEILINGS)
    decoder.feed(frame(KIND_RESULT, b"1", nonce=bytes(16)))
    with pytest.raises(ProtocolViolation, match="did not frame"):
        decoder.next_frame()


def test_raw_text_on_stdout_is_a_violation() -> None:
    decoder = FrameDecoder(NONCE, CEILINGS)
    decoder.feed(b"hello from a stray console.log\n")
    with pytest.raises(ProtocolViolation):
        decoder.next_frame()


def test_an_oversize_frame_is_refused_from_its_header_alone() -> None:
    decoder = FrameDecoder(NONCE, {**CEILINGS, KIND_RESULT: 10})
    header = frame(KIND_RESULT, b"x" * 11)[:HEADER_SIZE]
    decoder.feed(header)
    with pytest.raises(OversizeFrame) as info:
        decoder.next_frame()
    assert (info.value.kind, info.value.size) == (KIND_RESULT, 11)


def test_a_frame_at_its_ceiling_is_accepted() -> None:
    decoder = FrameDecoder(NONCE, {**CEILINGS, KIND_RESULT: 10})
    decoder.feed(frame(KIND_RESULT, b"1234567890"))
    assert decoder.next_frame() == ResultFrame(b"1234567890")


@given(st.integers(min_value=0, max_value=CEILING))
def test_the_buffer_holds_at_most_one_bounded_frame(declared: int) -> None:
    decoder = FrameDecoder(NONCE, CEILINGS)
    decoder.feed(frame(KIND_LOG, b"l" + b"x" * max(0, declared - 1))[: HEADER_SIZE + declared // 2])
    assert decoder.next_frame() is None
    assert decoder.buffered <= CEILING


@pytest.mark.parametrize("end", [b"x", b"\r", b"\x00"])
def test_a_frame_without_its_terminating_newline_is_a_violation(end: bytes) -> None:
    decoder = FrameDecoder(NONCE, CEILINGS)
    decoder.feed(frame(KIND_RESULT, b"[1,2]")[:-1])
    assert decoder.next_frame() is None  # the terminator may still be on its way
    decoder.feed(end)
    with pytest.raises(ProtocolViolation, match="terminating newline"):
        decoder.next_frame()


def test_an_unknown_kind_is_a_violation() -> None:
    decoder = FrameDecoder(NONCE, CEILINGS)
    decoder.feed(frame(ord("Z"), b""))
    with pytest.raises(ProtocolViolation, match="unknown frame kind"):
        decoder.next_frame()


@pytest.mark.parametrize(
    ("kind", "body"),
    [
        (KIND_LOG, b""),
        (KIND_LOG, b"?text"),
        (KIND_CALL, b"7\nno-argument"),
        (KIND_CALL, b"x\nname\n1"),
        (KIND_CALL, b"-1\nname\n1"),
        (KIND_CALL, b"1\n\xff\n1"),
        (KIND_CALL_TOO_LARGE, b"no-size"),
        (KIND_CALL_TOO_LARGE, b"name\n12e3"),
        (KIND_RESULT_TOO_LARGE, b"many"),
        (KIND_THREW, b"not json"),
        (KIND_THREW, b'{"name": 1, "message": "m"}'),
        (KIND_THREW, b'["name", "message"]'),
        (KIND_INVALID, b'{"reason": "x"}'),
    ],
)
def test_malformed_bodies_are_violations(kind: int, body: bytes) -> None:
    decoder = FrameDecoder(NONCE, CEILINGS)
    decoder.feed(frame(kind, body))
    with pytest.raises(ProtocolViolation):
        decoder.next_frame()


@pytest.mark.parametrize(
    "data",
    [b"NaN", b"[Infinity]", b'{"a": -Infinity}', b"\xff\xfe", b"[" * 100_000, b"{", b""],
)
def test_parse_json_accepts_only_strict_json(data: bytes) -> None:
    with pytest.raises(ProtocolViolation):
        parse_json(data)


@given(
    st.recursive(
        st.none()
        | st.booleans()
        | st.integers()
        | st.floats(allow_nan=False, allow_infinity=False)
        | st.text(),
        lambda children: st.lists(children) | st.dictionaries(st.text(), children),
        max_leaves=20,
    )
)
def test_parse_json_round_trips_json_values(value: object) -> None:
    assert parse_json(json.dumps(value, ensure_ascii=False).encode()) == value


def test_messages_to_the_harness_are_length_prefixed() -> None:
    assert encode_message(b'{"a":1}') == b'\x00\x00\x00\x07{"a":1}'


def test_a_reply_carries_exactly_one_of_value_and_error() -> None:
    assert json.loads(encode_reply(3, value=b'{"x":[1]}')[4:]) == {
        "id": 3,
        "ok": True,
        "value": {"x": [1]},
    }
    assert json.loads(encode_reply(4, error=b'{"_tag":"E","message":"m"}')[4:]) == {
        "id": 4,
        "ok": False,
        "error": {"_tag": "E", "message": "m"},
    }
    with pytest.raises(ValueError, match="exactly one"):
        encode_reply(5)
    with pytest.raises(ValueError, match="exactly one"):
        encode_reply(5, value=b"1", error=b"{}")


def test_the_nonce_has_sixteen_bytes() -> None:
    with pytest.raises(ValueError, match="16 bytes"):
        FrameDecoder(b"short", CEILINGS)
