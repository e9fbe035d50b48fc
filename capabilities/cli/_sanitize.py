"""What untrusted text may put on a terminal: nothing the terminal would obey, nothing invisible.

A model, an MCP server or a tool can put characters into its text that a terminal does not show
but obeys or hides: ESC and the other C0/C1 controls (cursor moves, erasing, window titles, the
clipboard through OSC 52, links through OSC 8, device-status queries the terminal answers by
typing into our input), DEL, the bidirectional controls that reorder what is shown (U+202E), and
the zero-width and other format characters that hide text between visible letters. Every one of
those is *hidden* here (:func:`is_hidden`); the functions below show each as an escape a person can
read, so what the screen shows is exactly what was sent:

* :func:`visible` — for a terminal: ``\\x1b``, ``\\x9b``, ``\\u202e``, ``\\U000e0041``. Newline and
  tab stay as they are when ``lines`` is true (text meant to span lines: a model's answer); in a
  one-line field (a name, a preview, an error) they are escaped too (``\\n``, ``\\t``), so no field
  can start a line of its own.
* :func:`json_safe` — for JSON text: the same characters as JSON escapes (``\\u001b``,
  ``\\u202e``, a surrogate pair above U+FFFF), so the document stays valid and parses to exactly
  the same value.

The hidden characters are the Unicode categories Cc (controls), Cf (format: bidi controls,
zero-width characters, tags, the soft hyphen…), Cs (lone surrogates, which cannot even be encoded
for output), Zl and Zp (line and paragraph separators). Pure functions, no I/O.
"""

from __future__ import annotations

import re
from typing import Final

__all__ = ["HIDDEN", "is_hidden", "json_safe", "visible"]

# Categories Cc, Cf, Cs, Zl and Zp as of Unicode 15.1, written out: computing them from
# ``unicodedata`` at import would cost a walk over every code point. A test checks this class
# against the ``unicodedata`` of the running Python.
_RANGES: Final = (
    "\x00-\x1f"  # C0 controls (newline and tab are told apart below)
    "\x7f-\x9f"  # DEL, C1 controls
    "\xad"  # soft hyphen
    "\u0600-\u0605\u061c\u06dd\u070f\u0890\u0891\u08e2"  # Arabic and Syriac format, ALM
    "\u180e"  # Mongolian vowel separator
    "\u200b-\u200f"  # zero width space / non-joiner / joiner, LRM, RLM
    "\u2028-\u202e"  # line and paragraph separators, bidi embeddings and overrides
    "\u2060-\u2064"  # word joiner, invisible operators
    "\u2066-\u206f"  # bidi isolates, deprecated format characters
    "\ud800-\udfff"  # lone surrogates
    "\ufeff"  # zero width no-break space (BOM)
    "\ufff9-\ufffb"  # interlinear annotations
    "\U000110bd\U000110cd"  # Kaithi number signs
    "\U00013430-\U0001343f"  # Egyptian hieroglyph format controls
    "\U0001bca0-\U0001bca3"  # shorthand format controls
    "\U0001d173-\U0001d17a"  # musical symbol format controls
    "\U000e0001\U000e0020-\U000e007f"  # language tag, tag characters
)

#: Every character :func:`is_hidden` is true of, as a regular expression character class.
HIDDEN: Final = f"[{_RANGES}]"

_IN_LINE: Final = re.compile(HIDDEN)
_IN_TEXT: Final = re.compile(f"(?![\n\t]){HIDDEN}")
_IN_JSON: Final = re.compile(f"(?![\n\t\r]){HIDDEN}")  # JSON's whitespace is its own
_SHORT: Final = {"\n": "\\n", "\t": "\\t", "\r": "\\r"}


def is_hidden(char: str) -> bool:
    """Whether the terminal would obey ``char`` or not show it (see the module notes)."""
    return _IN_LINE.fullmatch(char) is not None


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    short = _SHORT.get(char)
    if short is not None:
        return short
    code = ord(char)
    if code < 0x100:
        return f"\\x{code:02x}"
    if code < 0x10000:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def visible(text: str, *, lines: bool = False) -> str:
    """``text`` with every hidden character shown as an escape (``\\x1b``, ``\\u202e``); newline
    and tab kept when ``lines`` is true, escaped (``\\n``, ``\\t``) otherwise."""
    pattern = _IN_TEXT if lines else _IN_LINE
    if pattern.search(text) is None:  # the common case: nothing to change, no copy
        return text
    return pattern.sub(_escape, text)


def _json_escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    if code < 0x10000:
        return f"\\u{code:04x}"
    code -= 0x10000
    return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"


def json_safe(document: str) -> str:
    """JSON text (as ``json.dumps(..., ensure_ascii=False)`` writes it) with every hidden
    character written as a JSON escape: still valid JSON, parsing to the same value.

    Outside its strings JSON text is ASCII punctuation, digits, letters and whitespace (kept as
    it is), and inside them a control character is always escaped already; so any other hidden
    character is inside a string, where an escape means the same character."""
    if _IN_JSON.search(document) is None:
        return document
    return _IN_JSON.sub(_json_escape, document)
