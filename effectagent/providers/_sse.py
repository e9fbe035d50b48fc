"""Server-sent events: split a byte stream into events — pure, incremental, no I/O.

Every provider here streams ``text/event-stream`` (the WHATWG format): lines end with LF, CR or
CRLF; ``event:`` names an event, ``data:`` lines accumulate its payload, a line starting with ``:``
is a comment, and a blank line dispatches the event. ``id:`` and ``retry:`` are accepted and
ignored (nothing here reconnects). A byte order mark that opens the stream is dropped, as the
format says (kept, it would make the first line's field unknown, and its event lost). The decoder keeps an unterminated line until more bytes come,
and remembers a CR that ended a chunk (its LF, if any, opens the next one), so chunk boundaries
never change the events.

Linear in its input: each chunk is scanned once for line endings, from where the last scan
stopped; the start of a line that a chunk leaves unterminated is kept as pieces and joined once,
when its line ends. Bounded: a line longer than ``max_line_bytes`` or an event whose data is
longer than ``max_event_bytes`` raises :class:`EventTooLarge` as soon as it grows past the bound
(what it held so far is dropped), so a server can never make the decoder hold more than that.
"""

from __future__ import annotations

import re
from typing import Final, NamedTuple, final

__all__ = [
    "DEFAULT_MAX_EVENT_BYTES",
    "DEFAULT_MAX_LINE_BYTES",
    "EventTooLarge",
    "ServerSentEvent",
    "SSEDecoder",
]

#: The longest line the decoder takes by default, in bytes.
DEFAULT_MAX_LINE_BYTES: Final = 16 * 1024 * 1024
#: The longest data an event may have by default, in bytes (its ``data:`` lines together).
DEFAULT_MAX_EVENT_BYTES: Final = 16 * 1024 * 1024

#: A line ending: CRLF, CR or LF.
_LINE_END: Final = re.compile(rb"\r\n?|\n")
#: The UTF-8 byte order mark.
_BOM: Final = b"\xef\xbb\xbf"


class ServerSentEvent(NamedTuple):
    """One dispatched event: its ``event`` name (None when the stream gave none) and ``data``."""

    event: str | None
    data: str


class EventTooLarge(ValueError):
    """A line or an event of the stream is longer than the decoder's bound. ``what`` is
    ``"line"`` or ``"event"``, ``limit`` the bound in bytes."""

    def __init__(self, what: str, limit: int) -> None:
        super().__init__(f"a server-sent {what} is longer than {limit} bytes")
        self.what = what
        self.limit = limit


@final
class SSEDecoder:
    """Feed bytes with :meth:`feed`, call :meth:`finish` at the end of the body.

    Payload bytes are decoded as UTF-8 (the format's only encoding); invalid UTF-8 raises
    ``UnicodeDecodeError``, which the caller reports as a malformed stream. A line or event past
    its bound raises :class:`EventTooLarge` (see the module notes); the decoder is not to be fed
    after that.
    """

    __slots__ = (
        "_after_cr",
        "_data",
        "_data_size",
        "_event",
        "_head",
        "_max_event",
        "_max_line",
        "_pending",
        "_pending_size",
    )

    def __init__(
        self,
        *,
        max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
        max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
    ) -> None:
        if max_line_bytes < 1 or max_event_bytes < 1:
            raise ValueError("the bounds of an event stream are positive numbers of bytes")
        self._max_line = max_line_bytes
        self._max_event = max_event_bytes
        # The start of the current line, in pieces (each scanned once), and their total size.
        self._pending: list[bytes] = []
        self._pending_size = 0
        # Whether the last chunk ended with a CR: an LF that opens the next one belongs to it.
        self._after_cr = False
        self._event: str | None = None
        self._data: list[bytes] = []
        self._data_size = 0
        # The stream's first bytes while they may still be the start of a byte order mark
        # (None once they cannot).
        self._head: bytes | None = b""

    def feed(self, chunk: bytes) -> list[ServerSentEvent]:
        """The events that ``chunk`` completes, in order."""
        if self._head is not None:
            head = self._head + chunk
            if len(head) < len(_BOM) and _BOM.startswith(head):
                self._head = head
                return []
            self._head = None
            chunk = head[len(_BOM) :] if head.startswith(_BOM) else head
        events: list[ServerSentEvent] = []
        size = len(chunk)
        start = 0
        if self._after_cr and size:
            self._after_cr = False
            if chunk[0] == 0x0A:  # the LF of a CRLF split between two chunks
                start = 1
        search = _LINE_END.search
        while start < size:
            found = search(chunk, start)
            if found is None:
                self._hold(chunk, start)
                break
            end = found.start()
            if self._pending:
                line = self._joined(chunk[start:end])
            else:
                if end - start > self._max_line:
                    raise EventTooLarge("line", self._max_line)
                line = chunk[start:end]
            start = found.end()
            if start == size and chunk[end] == 0x0D and start - end == 1:
                self._after_cr = True
            event = self._line(line)
            if event is not None:
                events.append(event)
        return events

    def finish(self) -> list[ServerSentEvent]:
        """Whatever the end of the body completes: a last line without its line ending counts as
        a line; an event never followed by a blank line is *not* dispatched (the format drops it),
        so a body cut in the middle of an event yields nothing for that event."""
        events: list[ServerSentEvent] = []
        if self._pending:
            event = self._line(self._joined(b""))
            if event is not None:
                events.append(event)
        self._after_cr = False
        self._event = None
        self._data = []
        self._data_size = 0
        return events

    def _hold(self, chunk: bytes, start: int) -> None:
        """Keep ``chunk[start:]``, the start of a line that has not ended yet."""
        piece = chunk[start:] if start else chunk
        self._pending_size += len(piece)
        if self._pending_size > self._max_line:
            self._pending = []
            self._pending_size = 0
            raise EventTooLarge("line", self._max_line)
        self._pending.append(piece)

    def _joined(self, tail: bytes) -> bytes:
        """The held start of the line and its ``tail``, as one line (held pieces dropped)."""
        pieces = self._pending
        pieces.append(tail)
        size = self._pending_size + len(tail)
        self._pending = []
        self._pending_size = 0
        if size > self._max_line:
            raise EventTooLarge("line", self._max_line)
        return b"".join(pieces)

    def _line(self, line: bytes) -> ServerSentEvent | None:
        if not line:
            if not self._data and self._event is None:
                return None
            data = b"\n".join(self._data).decode("utf-8")
            event = ServerSentEvent(self._event, data)
            self._event = None
            self._data = []
            self._data_size = 0
            return event
        if line[0] == 0x3A:  # ":" — a comment (keep-alives look like this)
            return None
        name, colon, value = line.partition(b":")
        if colon and value[:1] == b" ":
            value = value[1:]
        if name == b"data":
            self._data_size += len(value) + 1  # and the newline that joins it to the next
            if self._data_size > self._max_event + 1:
                self._data = []
                self._data_size = 0
                raise EventTooLarge("event", self._max_event)
            self._data.append(value)
        elif name == b"event":
            self._event = value.decode("utf-8") or None
        # "id", "retry" and unknown fields are ignored.
        return None
