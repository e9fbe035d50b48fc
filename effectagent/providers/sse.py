"""Server-sent events: split a byte stream into events — pure, incremental, no I/O.

Every provider here streams ``text/event-stream`` (the WHATWG format): lines end with LF, CR or
CRLF; ``event:`` names an event, ``data:`` lines accumulate its payload, a line starting with ``:``
is a comment, and a blank line dispatches the event. ``id:`` and ``retry:`` are accepted and
ignored (nothing here reconnects). The decoder keeps an unterminated line — and a trailing CR,
whose LF may arrive in the next chunk — until more bytes come, so chunk boundaries never change the
events.
"""

from __future__ import annotations

from typing import NamedTuple, final

__all__ = ["ServerSentEvent", "SSEDecoder"]


class ServerSentEvent(NamedTuple):
    """One dispatched event: its ``event`` name (None when the stream gave none) and ``data``."""

    event: str | None
    data: str


@final
class SSEDecoder:
    """Feed bytes with :meth:`feed`, call :meth:`finish` at the end of the body.

    Payload bytes are decoded as UTF-8 (the format's only encoding); invalid UTF-8 raises
    ``UnicodeDecodeError``, which the caller reports as a malformed stream.
    """

    __slots__ = ("_data", "_event", "_pending")

    def __init__(self) -> None:
        self._pending = b""
        self._event: str | None = None
        self._data: list[bytes] = []

    def feed(self, chunk: bytes) -> list[ServerSentEvent]:
        """The events that ``chunk`` completes, in order."""
        buffer = self._pending + chunk if self._pending else chunk
        if not buffer:
            return []
        lines = buffer.splitlines(keepends=True)
        last = lines[-1]
        # An unterminated last line waits for more bytes; so does a line ending in CR, whose LF
        # (if any) belongs to the same line ending.
        if last.endswith(b"\r") or not last.endswith(b"\n"):
            self._pending = lines.pop()
        else:
            self._pending = b""
        events: list[ServerSentEvent] = []
        for line in lines:
            event = self._line(line.rstrip(b"\r\n"))
            if event is not None:
                events.append(event)
        return events

    def finish(self) -> list[ServerSentEvent]:
        """Whatever the end of the body completes: a last line without its line ending counts as
        a line; an event never followed by a blank line is *not* dispatched (the format drops it),
        so a body cut in the middle of an event yields nothing for that event."""
        pending, self._pending = self._pending, b""
        events: list[ServerSentEvent] = []
        if pending:
            event = self._line(pending.rstrip(b"\r\n"))
            if event is not None:
                events.append(event)
        self._event = None
        self._data = []
        return events

    def _line(self, line: bytes) -> ServerSentEvent | None:
        if not line:
            if not self._data and self._event is None:
                return None
            data = b"\n".join(self._data).decode("utf-8")
            event = ServerSentEvent(self._event, data)
            self._event = None
            self._data = []
            return event
        if line[0] == 0x3A:  # ":" — a comment (keep-alives look like this)
            return None
        name, colon, value = line.partition(b":")
        if colon and value[:1] == b" ":
            value = value[1:]
        if name == b"data":
            self._data.append(value)
        elif name == b"event":
            self._event = value.decode("utf-8") or None
        # "id", "retry" and unknown fields are ignored.
        return None
