"""The one way text reaches the terminal: a :class:`Console` over standard output and standard
error, with one :class:`Channel` for each.

**Everything written is escaped.** A channel takes *parts*: a ``str`` is a one-line field (a
name, a preview, an error) — every hidden character, newline and tab included, is shown as an
escape (:func:`~capabilities.cli._sanitize.visible`); a :class:`Text` is text meant to span lines
(a model's answer) — newline and tab are kept, every other hidden character escaped; a
:class:`Styled` is either of those in one of our own styles. Our ANSI codes are added here, after
the escaping, and only for the style names of :data:`STYLES` — so the only escape sequences that
ever reach the terminal are ours, and no caller can forget the escaping: a channel has no way to
write but through the console.

**A prompt owns the screen while it waits.** :meth:`Console.hold` (called by whoever shows a
prompt) makes every other write wait, in order, in a bounded queue, until :meth:`Console.release`:
a result, an error or a model's text arriving meanwhile cannot move the cursor, overwrite the
prompt or print a forged one below it. The prompt itself writes with :meth:`Channel.show`, which
is never held.

Not thread-safe: use it from one thread (the Trio run's).
"""

from __future__ import annotations

import codecs
import logging
import os
from collections.abc import Callable
from typing import Final, Literal, Protocol, TypeAlias

import attrs

from . import _rich
from ._sanitize import visible

__all__ = [
    "STYLES",
    "Channel",
    "Console",
    "LogLines",
    "Markdown",
    "OutputClosed",
    "Part",
    "Style",
    "Styled",
    "Table",
    "Text",
    "TextSink",
]

Style: TypeAlias = Literal["dim", "bold", "red", "green", "yellow", "cyan", "gray"]

#: Our own styles: the only escape sequences the console writes.
STYLES: Final[dict[str, str]] = {
    "dim": "\x1b[2m",
    "bold": "\x1b[1m",
    "red": "\x1b[31m",
    "green": "\x1b[32m",
    "yellow": "\x1b[33m",
    "cyan": "\x1b[36m",
    "gray": "\x1b[90m",
}
_RESET: Final = "\x1b[0m"

#: How much held output is kept while a prompt waits; what comes beyond it is counted, and
#: said to have been left out when the prompt is answered.
HELD_CHARS: Final = 1 << 20


class TextSink(Protocol):
    """A text stream the console writes to (``sys.stdout``, ``io.StringIO``); ``flush`` is
    called after each write when it has one."""

    def write(self, text: str, /) -> object: ...


@attrs.frozen
class Text:
    """Untrusted text that may span lines: newline and tab are kept, every other hidden
    character is escaped."""

    text: str


@attrs.frozen
class Styled:
    """A part in one of our own styles (the text itself is escaped as any other)."""

    style: Style
    text: str | Text


@attrs.frozen
class Markdown:
    """Untrusted text of a complete message, drawn as Markdown with rich when the console does
    (else written as a :class:`Text`)."""

    text: str


@attrs.frozen
class Table:
    """Rows of untrusted one-line cells under a header: drawn with rich when the console does,
    else as columns two spaces apart (the last one not padded). A header ending in ``>`` is a
    column aligned to the right in the drawn table (the mark is not shown)."""

    header: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]


#: What a channel writes: a one-line field, a text of lines, either of them styled, a Markdown
#: message or a table.
Part: TypeAlias = str | Text | Styled | Markdown | Table


def _columns(table: Table) -> str:
    """``table`` as plain columns: every cell escaped, then padded (the last column is not)."""
    rows = [
        [visible(cell) for cell in row]
        for row in ([name.removesuffix(">") for name in table.header], *table.rows)
    ]
    if not rows[0]:
        return ""
    widths = [max(len(row[column]) for row in rows) for column in range(len(rows[0]) - 1)]
    lines = []
    for row in rows:
        cells = [cell.ljust(width) for cell, width in zip(row, widths, strict=False)]
        lines.append("  ".join([*cells, row[-1]]))
    return "\n".join(lines)


def _escaped(part: str | Text) -> str:
    if isinstance(part, Text):
        return visible(part.text, lines=True)
    return visible(part)


class OutputClosed(Exception):
    """Standard output can no longer be written: whoever read it went away (a broken pipe, as
    in ``effectagent run … | head``), it was closed, or its disk is full. The message says which,
    in a sentence."""


class _Stream:
    """One of the console's streams and where its cursor is (at the start of a line or not).

    A stream that cannot be written (see :class:`OutputClosed`) is *closed* from then on: what
    is written to it later is dropped. Standard output's failure is raised, as
    :class:`OutputClosed` (``fatal``): what the command is for cannot reach anyone; standard
    error's is not — a run whose notes cannot be shown still gives its answer."""

    __slots__ = ("at_line_start", "closed", "fatal", "sink")

    def __init__(self, sink: TextSink | None, *, fatal: bool) -> None:
        self.sink = sink
        self.at_line_start = True
        self.closed = False
        self.fatal = fatal

    def put(self, text: str) -> None:
        if not text or self.closed:
            return
        try:
            try:
                _write_through(self.sink, text)
            except UnicodeEncodeError as exc:  # an encoding that lacks a character: not UTF-8
                text = _encodable(text, exc.encoding)
                _write_through(self.sink, text)
        except (OSError, ValueError) as exc:  # ValueError: I/O operation on a closed file
            self.closed = True
            if self.fatal:
                raise OutputClosed(_why_closed(exc)) from None
            return
        self.at_line_start = text.endswith("\n")


def _write_through(sink: TextSink | None, text: str) -> None:
    """Write ``text`` to ``sink`` and flush it; a ``ValueError`` when there is no sink (the
    process was started with the stream closed)."""
    if sink is None:
        raise ValueError("the stream is closed")
    sink.write(text)
    flush = getattr(sink, "flush", None)
    if callable(flush):
        flush()


def _json_style(error: UnicodeError) -> tuple[str, int]:
    """A :mod:`codecs` error handler: each character the encoding lacks as a JSON escape
    (``\\u00e9``; a surrogate pair above U+FFFF), readable in text and still valid in JSON."""
    if not isinstance(error, UnicodeEncodeError):
        raise error
    pieces = []
    for char in error.object[error.start : error.end]:
        code = ord(char)
        if code >= 0x10000:
            code -= 0x10000
            pieces.append(f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}")
        else:
            pieces.append(f"\\u{code:04x}")
    return "".join(pieces), error.end


codecs.register_error("effectagent-json-style", _json_style)


def _encodable(text: str, encoding: str) -> str:
    """``text`` with every character ``encoding`` lacks written as its escape (``\\u00e9``):
    a terminal in a locale that is not UTF-8 shows ``caf\\u00e9`` rather than nothing at all,
    and a ``--json`` line stays JSON that parses to the same value."""
    return text.encode(encoding, "effectagent-json-style").decode(encoding)


def _why_closed(exc: OSError | ValueError) -> str:
    """Why standard output cannot be written, as a sentence."""
    if isinstance(exc, BrokenPipeError):
        return "standard output was closed by its reader (a broken pipe)"
    if isinstance(exc, OSError):
        return f"standard output cannot be written ({exc.strerror or type(exc).__name__})"
    return "standard output is closed"


class Console:
    """Standard output (``out``) and standard error (``err``, the same stream when not given)
    as :class:`Channel` s; see the module notes. ``color`` turns our styles on; ``rich`` draws
    :class:`Markdown` and :class:`Table` parts with rich (when it is installed)."""

    __slots__ = (
        "_color",
        "_drafts",
        "_dropped",
        "_dropped_on",
        "_held",
        "_held_chars",
        "_holding",
        "_rich",
        "err",
        "out",
    )

    def __init__(
        self,
        out: TextSink | None,
        err: TextSink | None = None,
        *,
        color: bool = False,
        rich: bool = False,
    ) -> None:
        for sink in (out, err):
            if sink is not None and not callable(getattr(sink, "write", None)):
                raise TypeError(f"a console writes to text streams, got {type(sink).__name__}")
        first = _Stream(out, fatal=True)
        second = first if err is None or err is out else _Stream(err, fatal=False)
        self._color = bool(color)
        self._rich = bool(rich) and _rich.available()
        self._drafts: dict[int, tuple[_Stream, str]] = {}  # drafts hidden while a prompt holds
        self._holding = False
        self._held: list[tuple[_Stream, str]] = []
        self._held_chars = 0
        self._dropped = 0
        self._dropped_on = first
        self.out = Channel(self, first)
        self.err = Channel(self, second)

    @property
    def color(self) -> bool:
        """Whether our styles are on."""
        return self._color

    @property
    def rich(self) -> bool:
        """Whether Markdown and tables are drawn with rich."""
        return self._rich

    @property
    def holding(self) -> bool:
        """Whether a prompt holds the screen (other writes wait)."""
        return self._holding

    def hold(self) -> None:
        """A prompt is on the screen: every write but :meth:`Channel.show` waits from now on,
        and a draft on the screen is hidden until :meth:`release`."""
        self._holding = True
        for stream, _ in self._drafts.values():
            _set_draft(stream, "")

    def release(self) -> None:
        """The prompt is answered (or gone): what waited is written, in order."""
        self._holding = False
        held, self._held = self._held, []
        self._held_chars = 0
        for stream, text in held:
            stream.put(text)
        if self._dropped:
            dropped, self._dropped = self._dropped, 0
            stream = self._dropped_on
            if not stream.at_line_start:
                stream.put("\n")
            stream.put(
                f"({dropped} characters of output that came while the prompt waited were left "
                "out)\n"
            )
        for stream, text in self._drafts.values():
            _set_draft(stream, text)

    def render(self, parts: tuple[Part, ...], width: int = 80) -> str:
        """``parts`` as the text written: escaped, our styles around the styled ones; Markdown
        and tables drawn ``width`` columns wide."""
        pieces: list[str] = []
        for part in parts:
            if isinstance(part, Styled):
                text = _escaped(part.text)
                pieces.append(f"{STYLES[part.style]}{text}{_RESET}" if self._color else text)
            elif isinstance(part, Markdown):
                if self._rich:
                    pieces.append(_rich.markdown(part.text, width=width, color=self._color))
                else:
                    pieces.append(_escaped(Text(part.text)))
            elif isinstance(part, Table):
                if self._rich:
                    pieces.append(
                        _rich.table(part.header, part.rows, width=width, color=self._color)
                    )
                else:
                    pieces.append(_columns(part))
            else:
                pieces.append(_escaped(part))
        return "".join(pieces)

    def _draft(self, stream: _Stream, text: str) -> None:
        if text:
            self._drafts[id(stream)] = (stream, text)
        else:
            self._drafts.pop(id(stream), None)
        if not self._holding:
            _set_draft(stream, text)

    def _write(self, stream: _Stream, text: str, *, held: bool) -> None:
        if not held or not self._holding:
            stream.put(text)
        elif self._held_chars + len(text) <= HELD_CHARS:
            self._held.append((stream, text))
            self._held_chars += len(text)
        else:
            if not self._dropped:
                self._dropped_on = stream
            self._dropped += len(text)


def _set_draft(stream: _Stream, text: str) -> None:
    show: Callable[[str], object] | None = getattr(stream.sink, "set_draft", None)
    if show is not None:
        show(text)


class Channel:
    """One stream of a :class:`Console`: everything written is escaped (module notes)."""

    __slots__ = ("_console", "_stream")

    def __init__(self, console: Console, stream: _Stream) -> None:
        self._console = console
        self._stream = stream

    @property
    def console(self) -> Console:
        """The console this channel belongs to."""
        return self._console

    @property
    def color(self) -> bool:
        """Whether our styles are on."""
        return self._console.color

    @property
    def at_line_start(self) -> bool:
        """Whether the last thing written to the stream ended a line."""
        return self._stream.at_line_start

    def _render(self, parts: tuple[Part, ...]) -> str:
        drawn = any(isinstance(part, Markdown | Table) for part in parts)
        return self._console.render(parts, self.size()[0] if drawn else 80)

    def write(self, *parts: Part) -> None:
        """Write ``parts``, escaped (module notes); held while a prompt waits."""
        self._console._write(self._stream, self._render(parts), held=True)

    def line(self, *parts: Part) -> None:
        """Write ``parts`` and end the line; held while a prompt waits."""
        self._console._write(self._stream, self._render(parts) + "\n", held=True)

    def show(self, *parts: Part, end: str = "\n") -> None:
        """The prompt's own writes: never held. ``end`` ("\\n" or "") ends what is shown."""
        if end not in ("\n", ""):
            raise ValueError("end must be a newline or nothing")
        self._console._write(self._stream, self._render(parts) + end, held=False)

    def draft(self, *parts: Part) -> None:
        """Show ``parts`` (escaped) as the draft of a message still being written, in place of
        the last draft (no parts: none). A stream that cannot show a draft shows nothing; while
        a prompt holds the screen the draft is hidden (and shown again once it is answered)."""
        self._console._draft(self._stream, self._console.render(parts) if parts else "")

    def line_ended(self) -> None:
        """The person's Enter ended the line the cursor was on (an answer typed at a prompt)."""
        self._stream.at_line_start = True

    def size(self, fallback: tuple[int, int] = (80, 24)) -> tuple[int, int]:
        """The terminal's (columns, rows), or ``fallback`` when the stream is not a terminal."""
        fileno: Callable[[], int] | None = getattr(self._stream.sink, "fileno", None)
        if fileno is None:
            return fallback
        try:
            size = os.get_terminal_size(fileno())
        except (OSError, ValueError):
            return fallback
        return (size.columns or fallback[0], size.lines or fallback[1])


class LogLines(logging.Handler):
    """Log records at WARNING and above as lines of a console ``channel`` —
    ``effectagent: NAME: message`` (``effectagent: message`` without ``named``) — escaped like
    everything else and waiting while a prompt does; records of loggers under ``skip`` are left
    out. A line that cannot be written never breaks the command."""

    def __init__(self, channel: Channel, *, named: bool = True, skip: str | None = None) -> None:
        super().__init__(logging.WARNING)
        self._channel = channel
        self._named = named
        self._skip = skip

    def filter(self, record: logging.LogRecord) -> bool:
        return self._skip is None or not record.name.startswith(self._skip)

    def emit(self, record: logging.LogRecord) -> None:
        try:
            name = f"{record.name}: " if self._named else ""
            self._channel.line(f"effectagent: {name}{record.getMessage()}")
        except Exception:  # a log line must never break the command
            self.handleError(record)
