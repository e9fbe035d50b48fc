"""What an approval prompt shows, as plain lines: built only from our own data — the tool's
registered name, where the tool comes from, and the call's whole arguments — never from a
summary or description a tool's server wrote. Pure, tested without a terminal.

The arguments are pretty-printed JSON with every string escaped (:func:`argument_lines`): a
control character, a bidi override or a zero-width character shows as its JSON escape
(``\\u001b``, ``\\u202e``), and a string's newline shows as ``\\n`` *and* breaks the line, so
``"echo cleaning caches\\nrm -f important.txt"`` reads as the two commands it is. Nothing is cut:
when the lines do not fit the screen, :func:`pages` splits them into screenfuls, and the prompt
takes a "yes" only once every page has been shown.
"""

from __future__ import annotations

import json
import unicodedata
from typing import Any, Final

from ._sanitize import json_safe

__all__ = ["TRUNCATED", "argument_lines", "is_truncated", "pages", "width"]

#: The tag of the engine's marker for a value too large to carry whole (``bounded_json``).
TRUNCATED: Final = "Truncated"

_STEP: Final = "  "


def is_truncated(arguments: object) -> bool:
    """Whether ``arguments`` is the engine's truncation marker instead of the arguments: only
    their head and tail were kept, so they cannot be shown whole."""
    return (
        isinstance(arguments, dict)
        and arguments.get("_tag") == TRUNCATED
        and "original_bytes" in arguments
    )


def _scalar(value: Any) -> str:
    try:
        text = json.dumps(value, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError):
        text = json.dumps(str(value), ensure_ascii=False)
    return json_safe(text)


def _string(value: str, column: int) -> list[str]:
    """A JSON string, its newlines shown as ``\\n`` that also end the line; the lines after the
    first start under its first character (``column``)."""
    pieces = [json_safe(json.dumps(piece, ensure_ascii=False))[1:-1] for piece in value.split("\n")]
    lines = [piece + "\\n" for piece in pieces[:-1]] + [pieces[-1]]
    lines[0] = '"' + lines[0]
    lines[-1] += '"'
    pad = " " * column
    return [lines[0], *(pad + line for line in lines[1:])]


def _value(value: Any, indent: str, column: int) -> list[str]:
    """``value`` as lines: the first goes after what precedes it on its line (which ends at
    ``column``), the others are whole lines."""
    if isinstance(value, str):
        return _string(value, column + 1)
    if isinstance(value, dict) and value:
        inner = indent + _STEP
        lines = ["{"]
        for index, (key, item) in enumerate(value.items()):
            head = f"{inner}{_scalar(str(key))}: "
            shown = _value(item, inner, width(head))
            shown[0] = head + shown[0]
            if index < len(value) - 1:
                shown[-1] += ","
            lines.extend(shown)
        lines.append(indent + "}")
        return lines
    if isinstance(value, list | tuple) and value:
        inner = indent + _STEP
        lines = ["["]
        for index, item in enumerate(value):
            shown = _value(item, inner, width(inner))
            shown[0] = inner + shown[0]
            if index < len(value) - 1:
                shown[-1] += ","
            lines.extend(shown)
        lines.append(indent + "]")
        return lines
    if isinstance(value, dict):
        return ["{}"]
    if isinstance(value, list | tuple):
        return ["[]"]
    return [_scalar(value)]


def argument_lines(arguments: Any) -> list[str]:
    """The arguments as pretty-printed JSON lines, escaped (see the module notes). Every line is
    free of hidden characters: nothing in it can move a terminal's cursor or hide a letter."""
    return _value(arguments, "", 0)


def width(text: str) -> int:
    """The columns ``text`` takes on a terminal: two for a wide character, none for a combining
    one (an estimate — enough to cut lines into rows)."""
    total = 0
    for char in text:
        if unicodedata.combining(char):
            continue
        total += 2 if unicodedata.east_asian_width(char) in ("W", "F") else 1
    return total


def _rows(line: str, columns: int) -> list[str]:
    """``line`` cut into pieces of at most ``columns`` columns (a terminal would wrap it)."""
    if width(line) <= columns:
        return [line]
    rows: list[str] = []
    current: list[str] = []
    used = 0
    for char in line:
        size = 2 if unicodedata.east_asian_width(char) in ("W", "F") else 1
        if unicodedata.combining(char):
            size = 0
        if used + size > columns and current:
            rows.append("".join(current))
            current, used = [], 0
        current.append(char)
        used += size
    rows.append("".join(current))
    return rows


def pages(lines: list[str], columns: int, rows: int) -> list[list[str]]:
    """``lines`` as screenfuls of at most ``rows`` rows of at most ``columns`` columns each (a
    line longer than the screen is wide is cut into rows). Every character is on exactly one
    page, in order; at least one page, even for no lines."""
    columns, rows = max(columns, 8), max(rows, 1)
    screen: list[str] = [row for line in lines for row in _rows(line, columns)]
    return [screen[start : start + rows] for start in range(0, len(screen), rows)] or [[]]
