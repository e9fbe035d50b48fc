"""A tolerant parser of a JSON document's prefix: the value the text so far stands for.

``parse_partial(text)`` reads the start of a JSON document as it streams and gives what is known
of its value: every member and element that is complete, exactly as the whole document will have
it, and the one still arriving (the last) as far as it goes — an object or array partly filled, a
string cut short (its text so far, an escape cut in the middle left out). A number or a literal
(``true``, ``false``, ``null``) cut short is left out, not guessed: ``12`` may be the start of
``125``. An object key cut short leaves its member out.

So the value is *prefix-consistent* with the final one: a completed field equals the final field,
the last one is a prefix-consistent view of it (``tests/engine/test_partial_json.py`` checks it
for generated documents and every cut point). Pure; no I/O.

What is not JSON (a bad token, text after the value) gives :data:`UNPARSABLE`: the caller stops
reading partial values and waits for the final answer, which is decoded strictly.
"""

from __future__ import annotations

import json
import re
from typing import Any, Final, final

__all__ = ["INCOMPLETE", "UNPARSABLE", "parse_partial"]


@final
class _Marker:
    __slots__ = ("_name",)

    def __init__(self, name: str) -> None:
        self._name = name

    def __repr__(self) -> str:
        return self._name


#: Nothing is known yet (empty text, or only the start of a scalar).
INCOMPLETE: Final[Any] = _Marker("INCOMPLETE")
#: The text is not the start of a JSON document.
UNPARSABLE: Final[Any] = _Marker("UNPARSABLE")

#: How deep the parser goes: deeper documents are UNPARSABLE here (the final answer still decodes
#: strictly, with its own limits).
MAX_DEPTH = 64

_WS = re.compile(r"[ \t\n\r]*")
_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?")
# A string's body up to its closing quote, or to the end of the text (then cut short).
_STRING_CLOSED = re.compile(r'"((?:[^"\\\x00-\x1f]|\\(?:["\\/bfnrt]|u[0-9a-fA-F]{4}))*)"')
_STRING_OPEN = re.compile(
    r'"((?:[^"\\\x00-\x1f]|\\(?:["\\/bfnrt]|u[0-9a-fA-F]{4}))*)(\\(?:u[0-9a-fA-F]{0,3})?)?\Z'
)
_NUMBER_CHARS = frozenset("0123456789.eE+-")
_LITERALS = {"true": True, "false": False, "null": None}


class _Bad(Exception):
    """The text is not the start of a JSON document."""


def parse_partial(text: str) -> Any:
    """The value the JSON prefix ``text`` stands for (see the module notes): the value, or
    :data:`INCOMPLETE` when nothing of it is known yet, or :data:`UNPARSABLE`."""
    try:
        at = _WS.match(text, 0).end()  # type: ignore[union-attr]
        if at == len(text):
            return INCOMPLETE
        value, at, complete = _value(text, at, 0)
        if complete:
            rest = _WS.match(text, at).end()  # type: ignore[union-attr]
            if rest != len(text):
                return UNPARSABLE
        return value
    except _Bad:
        return UNPARSABLE


def _value(text: str, at: int, depth: int) -> tuple[Any, int, bool]:
    """The value starting at ``at``: (value or INCOMPLETE, where it ends, whether complete).
    An incomplete value always runs to the end of the text."""
    char = text[at]
    if char == "{":
        return _object(text, at + 1, depth + 1)
    if char == "[":
        return _array(text, at + 1, depth + 1)
    if char == '"':
        return _string(text, at)
    if char in "-0123456789":
        match = _NUMBER.match(text, at)
        end = match.end() if match is not None else at
        if match is None or end == len(text) or text[end] in _NUMBER_CHARS:
            # Cut short ("-", "12", "0.", "1e"): unknown yet — or not a number at all.
            if not _number_prefix(text[at:]):
                raise _Bad
            return INCOMPLETE, len(text), False
        return json.loads(match.group()), end, True
    for word, literal in _LITERALS.items():
        if text.startswith(word, at):
            return literal, at + len(word), True
        if word.startswith(text[at:]):  # the text ends inside the word
            return INCOMPLETE, len(text), False
    raise _Bad


def _number_prefix(rest: str) -> bool:
    """Whether ``rest`` (to the end of the text) may be the start of a JSON number."""
    return re.fullmatch(r"-?(?:0|[1-9][0-9]*)?(?:\.[0-9]*)?(?:[eE][-+]?[0-9]*)?", rest) is not None


def _string(text: str, at: int) -> tuple[Any, int, bool]:
    closed = _STRING_CLOSED.match(text, at)
    if closed is not None:
        return json.loads(closed.group()), closed.end(), True
    cut = _STRING_OPEN.match(text, at)
    if cut is None:
        raise _Bad
    value = json.loads(f'"{cut.group(1)}"')
    if value and "\ud800" <= value[-1] <= "\udbff":  # a surrogate pair cut between its halves
        value = value[:-1]
    return value, len(text), False


def _object(text: str, at: int, depth: int) -> tuple[Any, int, bool]:
    if depth > MAX_DEPTH:
        raise _Bad
    result: dict[str, Any] = {}
    end = len(text)
    at = _WS.match(text, at).end()  # type: ignore[union-attr]
    if at == end:
        return result, end, False
    if text[at] == "}":
        return result, at + 1, True
    while True:
        if text[at] != '"':
            raise _Bad
        key, at, complete = _string(text, at)
        if not complete:
            return result, end, False  # a key cut short: its member is not known yet
        at = _WS.match(text, at).end()  # type: ignore[union-attr]
        if at == end:
            return result, end, False
        if text[at] != ":":
            raise _Bad
        at = _WS.match(text, at + 1).end()  # type: ignore[union-attr]
        if at == end:
            return result, end, False
        value, at, complete = _value(text, at, depth)
        if value is not INCOMPLETE:
            result[key] = value
        if not complete:
            return result, end, False
        at = _WS.match(text, at).end()  # type: ignore[union-attr]
        if at == end:
            return result, end, False
        if text[at] == "}":
            return result, at + 1, True
        if text[at] != ",":
            raise _Bad
        at = _WS.match(text, at + 1).end()  # type: ignore[union-attr]
        if at == end:
            return result, end, False


def _array(text: str, at: int, depth: int) -> tuple[Any, int, bool]:
    if depth > MAX_DEPTH:
        raise _Bad
    result: list[Any] = []
    end = len(text)
    at = _WS.match(text, at).end()  # type: ignore[union-attr]
    if at == end:
        return result, end, False
    if text[at] == "]":
        return result, at + 1, True
    while True:
        value, at, complete = _value(text, at, depth)
        if value is not INCOMPLETE:
            result.append(value)
        if not complete:
            return result, end, False
        at = _WS.match(text, at).end()  # type: ignore[union-attr]
        if at == end:
            return result, end, False
        if text[at] == "]":
            return result, at + 1, True
        if text[at] != ",":
            raise _Bad
        at = _WS.match(text, at + 1).end()  # type: ignore[union-attr]
        if at == end:
            return result, end, False
