"""The framed protocol between the host and the Deno harness, as pure objects (sans-IO).

Design notes
------------
Harness → host frames are ``nonce (16 bytes) | kind (1 byte) | length (4 bytes, big-endian) |
body | newline``. The trailing newline (:data:`TERMINATOR`, checked) is for speed: Deno's stdout is
line-buffered and writes a frame whose last newline is not its last byte in two ``write`` calls,
which can wake the host twice per frame. The nonce is fresh per pass and reaches the harness in the start message, before the
program runs; a frame without it was not written by the harness's writer (for example the program
writing raw bytes to stdout) and is a protocol violation. The nonce is defence in depth, not what
keeps the host safe: :class:`FrameDecoder` checks every header against a per-kind size ceiling
*before* buffering the body (so no frame, forged or not, is ever buffered beyond its ceiling) and
:func:`parse_json` accepts only strict JSON. How deep a JSON text nests is measured on its bytes
(:func:`nesting_exceeds`) before it is parsed, so a deep value is reported as such instead of
surfacing as the parser's recursion error. Host → harness messages are ``length (4 bytes) |
JSON``; the harness trusts them.

Before the start message the harness writes the fixed :data:`READY_MARKER`, so a warm-pool
process can be known to be fully started before it is handed out.
"""

from __future__ import annotations

import json
import re
from itertools import accumulate
from typing import Final, Literal, TypeAlias, cast

import attrs

from effectagent.effect import JSONValue

from ._code import LogLevel

__all__ = [
    "HEADER_SIZE",
    "KIND_CALL",
    "KIND_CALL_TOO_LARGE",
    "KIND_INVALID",
    "KIND_LOG",
    "KIND_RESULT",
    "KIND_RESULT_TOO_LARGE",
    "KIND_THREW",
    "NONCE_SIZE",
    "READY_MARKER",
    "TERMINATOR",
    "CallFrame",
    "CallTooLargeFrame",
    "Frame",
    "FrameDecoder",
    "InvalidFrame",
    "LogFrame",
    "OversizeFrame",
    "ProtocolViolation",
    "ResultFrame",
    "ResultTooLargeFrame",
    "ThrewFrame",
    "encode_message",
    "encode_reply",
    "nesting_exceeds",
    "parse_json",
]

READY_MARKER: Final = b"EAHRDY01"
TERMINATOR: Final = 0x0A
"""The byte that ends every harness → host frame (a newline: see the notes above)."""
NONCE_SIZE: Final = 16
HEADER_SIZE: Final = NONCE_SIZE + 1 + 4

KIND_LOG: Final = ord("L")
KIND_CALL: Final = ord("C")
KIND_CALL_TOO_LARGE: Final = ord("A")
KIND_RESULT: Final = ord("R")
KIND_RESULT_TOO_LARGE: Final = ord("B")
KIND_THREW: Final = ord("T")
KIND_INVALID: Final = ord("I")

_LEVELS: Final[dict[int, LogLevel]] = {
    ord("d"): "debug",
    ord("i"): "info",
    ord("l"): "log",
    ord("w"): "warn",
    ord("e"): "error",
}


class ProtocolViolation(Exception):
    """Bytes from the workload that are not a well-formed frame of this pass."""


class OversizeFrame(Exception):
    """A frame header declares a body larger than the ceiling for its kind (never buffered)."""

    def __init__(self, kind: int, size: int) -> None:
        super().__init__(f"frame {chr(kind)!r} of {size} bytes is over its ceiling")
        self.kind = kind
        self.size = size


@attrs.frozen
class LogFrame:
    """One console line: its level and its UTF-8 bytes (possibly cut mid-character)."""

    level: LogLevel
    data: bytes


@attrs.frozen
class CallFrame:
    """A host-call request: ``argument`` is the raw JSON text as sent (its size is the budget's)."""

    call_id: int
    name: str
    argument: bytes


@attrs.frozen
class CallTooLargeFrame:
    """The harness refused to send a host-call argument of ``size`` bytes."""

    name: str
    size: int


@attrs.frozen
class ResultFrame:
    """The final result as raw JSON text."""

    data: bytes


@attrs.frozen
class ResultTooLargeFrame:
    """The final result encoded to ``size`` bytes, over the budget; it was not sent."""

    size: int


@attrs.frozen
class ThrewFrame:
    """The program threw: the thrown value's name and message, bounded by the harness."""

    name: str
    message: str


@attrs.frozen
class InvalidFrame:
    """The source did not evaluate to one async function."""

    message: str


Frame: TypeAlias = (
    LogFrame
    | CallFrame
    | CallTooLargeFrame
    | ResultFrame
    | ResultTooLargeFrame
    | ThrewFrame
    | InvalidFrame
)


def _reject_constant(name: str) -> None:
    raise ValueError(f"{name} is not JSON")


#: One decoder for every frame: ``json.loads`` with options builds a new one each time.
_DECODER: Final = json.JSONDecoder(parse_constant=_reject_constant)


_SURROGATE: Final = re.compile("[\ud800-\udfff]")
_ESCAPED_SURROGATE: Final = re.compile(rb"\\u[dD][89a-fA-F]")


def _well_formed(value: JSONValue) -> JSONValue:
    """``value`` with every lone surrogate in its strings (keys too) replaced by U+FFFD."""
    if isinstance(value, str):
        return _SURROGATE.sub("\ufffd", value)
    if isinstance(value, list):
        return [_well_formed(item) for item in value]
    if isinstance(value, dict):
        return {_SURROGATE.sub("\ufffd", key): _well_formed(item) for key, item in value.items()}
    return value


def parse_json(data: bytes) -> JSONValue:
    """Strict JSON from UTF-8 bytes; :class:`ProtocolViolation` for anything else.

    Rejects invalid UTF-8, ``NaN``/``Infinity`` and nesting too deep to parse. A JavaScript string
    may hold a lone surrogate (half of a pair, e.g. from slicing an emoji), which JSON can carry
    only as a ``\\u`` escape and no UTF-8 text can hold: each is replaced by U+FFFD, as the
    harness's text encoder does for console lines, so every string the host gets is encodable.
    """
    try:
        text = data.decode("utf-8")
        value = cast(JSONValue, _DECODER.decode(text))
        # Strict UTF-8 holds no surrogate: one can only come from an escape, and the decoder
        # joins paired escapes, so only a text with an escaped surrogate needs the walk.
        if _ESCAPED_SURROGATE.search(data) is not None:
            value = _well_formed(value)
    except (ValueError, RecursionError) as exc:
        raise ProtocolViolation(f"malformed JSON in a frame: {type(exc).__name__}") from None
    return value


_STRING: Final = re.compile(rb'"(?:[^"\\]|\\.)*"', re.DOTALL)
_NOT_BRACKETS: Final = bytes(byte for byte in range(256) if byte not in b"[]{}")
_STEP: Final = [0] * 256
for _open, _close in (b"[]", b"{}"):
    _STEP[_open], _STEP[_close] = 1, -1


def nesting_exceeds(data: bytes, limit: int) -> bool:
    """Whether the JSON text ``data`` nests arrays and objects more than ``limit`` deep.

    Brackets inside strings do not count. Fast when ``data`` has at most ``limit`` brackets (no
    deeper nesting is possible then); otherwise strings are cut out and the brackets left are
    summed, both at C speed. Meant for valid JSON: for anything else the answer only has to be
    safe, since the text is parsed (and refused) afterwards.
    """
    if data.count(b"[") + data.count(b"{") <= limit:
        return False
    brackets = _STRING.sub(b"", data).translate(None, _NOT_BRACKETS)
    return max(accumulate(_STEP[byte] for byte in brackets), default=0) > limit


def _text(data: bytes, what: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise ProtocolViolation(f"{what} is not UTF-8") from None


def _size(text: str, what: str) -> int:
    if not text.isdecimal() or len(text) > 15:
        raise ProtocolViolation(f"{what} is not a size")
    return int(text)


def _string_member(value: JSONValue, key: str) -> str:
    member = value.get(key) if isinstance(value, dict) else None
    if not isinstance(member, str):
        raise ProtocolViolation(f"frame member {key!r} is missing or not a string")
    return member


def _parse(kind: int, body: bytes) -> Frame:
    if kind == KIND_LOG:
        if not body or body[0] not in _LEVELS:
            raise ProtocolViolation("log frame without a level")
        return LogFrame(_LEVELS[body[0]], body[1:])
    if kind == KIND_CALL:
        parts = body.split(b"\n", 2)
        if len(parts) != 3:
            raise ProtocolViolation("malformed host-call frame")
        call_id = _size(_text(parts[0], "a call id"), "a call id")
        return CallFrame(call_id, _text(parts[1], "a host-call name"), parts[2])
    if kind == KIND_CALL_TOO_LARGE:
        name, sep, size = _text(body, "a host-call notice").rpartition("\n")
        if not sep:
            raise ProtocolViolation("malformed host-call notice")
        return CallTooLargeFrame(name, _size(size, "an argument size"))
    if kind == KIND_RESULT:
        return ResultFrame(body)
    if kind == KIND_RESULT_TOO_LARGE:
        return ResultTooLargeFrame(_size(_text(body, "a result size"), "a result size"))
    if kind == KIND_THREW:
        value = parse_json(body)
        return ThrewFrame(_string_member(value, "name"), _string_member(value, "message"))
    if kind == KIND_INVALID:
        return InvalidFrame(_string_member(parse_json(body), "message"))
    raise ProtocolViolation(f"unknown frame kind {kind:#04x}")


class FrameDecoder:
    """Turns the harness's stdout bytes into frames, bounding every frame by its kind's ceiling.

    ``ceilings`` maps each frame kind to the largest body it may have; a kind absent from it is a
    protocol violation. Feed bytes with :meth:`feed`; :meth:`next_frame` returns a frame, or
    ``None`` when more bytes are needed, and raises :class:`OversizeFrame` as soon as a header
    declares an oversize body and :class:`ProtocolViolation` for anything malformed (a frame
    not followed by :data:`TERMINATOR` included). The buffer never holds more than one header,
    one bounded body with its terminator and the bytes of one :meth:`feed`.
    """

    __slots__ = ("_buffer", "_ceilings", "_nonce", "_pending")

    def __init__(self, nonce: bytes, ceilings: dict[int, int]) -> None:
        if len(nonce) != NONCE_SIZE:
            raise ValueError("the nonce is 16 bytes")
        self._nonce = nonce
        self._ceilings = dict(ceilings)
        self._buffer = bytearray()
        self._pending: tuple[int, int] | None = None  # (kind, size) of a header already checked

    def feed(self, data: bytes | bytearray) -> None:
        """Append bytes read from the workload."""
        self._buffer += data

    @property
    def buffered(self) -> int:
        """Bytes held and not yet returned as frames."""
        return len(self._buffer)

    def next_frame(self) -> Frame | None:
        """The next complete frame, or ``None`` if more bytes are needed."""
        if self._pending is None:
            if len(self._buffer) < HEADER_SIZE:
                return None
            header = bytes(self._buffer[:HEADER_SIZE])
            if header[:NONCE_SIZE] != self._nonce:
                raise ProtocolViolation(
                    "bytes on stdout that the harness did not frame (no pass nonce)"
                )
            kind = header[NONCE_SIZE]
            size = int.from_bytes(header[NONCE_SIZE + 1 :], "big")
            ceiling = self._ceilings.get(kind)
            if ceiling is None:
                raise ProtocolViolation(f"unknown frame kind {kind:#04x}")
            if size > ceiling:
                raise OversizeFrame(kind, size)
            del self._buffer[:HEADER_SIZE]
            self._pending = (kind, size)
        kind, size = self._pending
        if len(self._buffer) <= size:
            return None
        if self._buffer[size] != TERMINATOR:
            raise ProtocolViolation("a frame without its terminating newline")
        body = bytes(self._buffer[:size])
        del self._buffer[: size + 1]
        self._pending = None
        return _parse(kind, body)


def encode_message(body: bytes) -> bytes:
    """One host → harness message: the 4-byte big-endian length, then ``body`` (JSON)."""
    return len(body).to_bytes(4, "big") + body


def encode_reply(call_id: int, *, value: bytes | None = None, error: bytes | None = None) -> bytes:
    """The reply to host call ``call_id``: ``value`` or ``error`` is already-encoded JSON."""
    if (value is None) == (error is None):
        raise ValueError("a reply carries exactly one of value and error")
    ok: Literal[b"true", b"false"] = b"true" if value is not None else b"false"
    member = b'"value":' + value if value is not None else b'"error":' + cast(bytes, error)
    return encode_message(b'{"id":%d,"ok":%s,%s}' % (call_id, ok, member))
