"""Server-Sent Events framing and resumption. Pure (no I/O).

One event per log entry: ``id:`` its sequence number in the conversation's log, ``event:`` the
record's kind, ``data:`` the record as JSON on one line (``json.dumps`` escapes every line break,
so a value cannot end the event or forge a field). A client that reconnects sends the last ``id``
it saw as ``Last-Event-ID`` and gets the entries after it: exactly the ones it missed, none twice.

Live text (``delta``, ``discard``) is framed without ``id:``: it is not in the log, so it never
moves where a client resumes — a client keeps the last ``id`` it saw, as the SSE specification
says — and the recorded response that follows it holds the whole text.

An event is always UTF-8: text that is not Unicode (a lone UTF-16 surrogate, which a JSON escape
can make) is sent as a JSON escape, ``\\udfff``, rather than break the stream.
"""

from __future__ import annotations

import json
from typing import Any, Final

__all__ = [
    "COMMENT",
    "MAX_EVENT_ID",
    "MAX_EVENT_ID_DIGITS",
    "event_bytes",
    "live_bytes",
    "resume_after",
]

#: A heartbeat: a comment line, which clients ignore (it lets a dead connection be noticed).
COMMENT: Final = b": keep-alive\n\n"

#: The largest ``Last-Event-ID`` (a sequence number: the log's are signed 64-bit integers).
MAX_EVENT_ID: Final = 2**63 - 1

#: The longest ``Last-Event-ID`` read (the digits of :data:`MAX_EVENT_ID`).
MAX_EVENT_ID_DIGITS: Final = len(str(MAX_EVENT_ID))


def _fields(kind: str, data: Any) -> bytes:
    if not kind or not all(c.isascii() and (c.isalnum() or c in "-_") for c in kind):
        raise ValueError(f"an event kind must be a plain name, got {kind!r}")
    body = json.dumps(data, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    try:
        return f"event: {kind}\ndata: {body}\n\n".encode()
    except UnicodeEncodeError:  # a lone surrogate: every character escaped, the stream goes on
        body = json.dumps(data, ensure_ascii=True, separators=(",", ":"), allow_nan=False)
        return f"event: {kind}\ndata: {body}\n\n".encode()


def event_bytes(seq: int, kind: str, data: Any) -> bytes:
    """One event: ``id``, ``event`` and one ``data`` line, ended by a blank line. ``kind`` must
    be a plain name (letters, digits, ``-``, ``_``). Always UTF-8 (see the module notes). Pure."""
    return f"id: {seq}\n".encode() + _fields(kind, data)


def live_bytes(kind: str, data: Any) -> bytes:
    """One event without ``id`` (live text: see the module notes). Pure."""
    return _fields(kind, data)


def resume_after(last_event_id: str | None, after: str | None = None) -> int:
    """The sequence number to resume after: the ``Last-Event-ID`` header when given, else the
    ``after`` query parameter, else 0 (from the start; an empty ``Last-Event-ID`` too — an empty
    ``after`` is no number). Raises ``ValueError`` with a sentence for a value that is not a
    sequence number (digits only, at most :data:`MAX_EVENT_ID`). Pure."""
    for name, value in (("Last-Event-ID", last_event_id), ("after", after)):
        if value is None:
            continue
        text = value.strip()
        if text == "" and name == "Last-Event-ID":
            return 0  # an empty Last-Event-ID resets, as the SSE specification says
        if (
            not (text.isascii() and text.isdigit())
            or len(text) > MAX_EVENT_ID_DIGITS
            or int(text) > MAX_EVENT_ID
        ):
            raise ValueError(
                f"{name} must be the sequence number of an event (a whole number from 0 to "
                f"{MAX_EVENT_ID})"
            )
        return int(text)
    return 0
