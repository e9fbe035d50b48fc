"""Redaction: secrets never reach model context, events, records, logs or errors.

The default :class:`SecretRedactor` replaces every registered secret value (and its JSON-escaped form)
by ``[REDACTED]`` in strings, recursively through JSON values, keys included. Values shorter than
4 characters are refused: redacting them would shred ordinary text and still not be a secret.

A redactor is more than a text filter: a streamed answer arrives in pieces and a secret can be
split between two of them, so the :class:`Redactor` protocol also asks how much of a text's end
could still become a secret (:meth:`Redactor.partial_secret_suffix`). That method is part of the
protocol — not an optional extra — because a redactor without it would leak every secret a model
happens to stream in two pieces, silently.

Tool arguments are JSON text written by a model, and JSON can spell one string many ways
(``"s\\u0065cret"``, ``"a\\/b"``). :func:`redact_arguments` therefore redacts the *decoded* value,
and for text that does not parse, the text with its JSON escapes decoded as well as the raw text.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any, Protocol, final, runtime_checkable

from ._bounds import compact_json
from ._records import parse_arguments

__all__ = [
    "REDACTED",
    "Redactor",
    "SecretRedactor",
    "StreamRedactor",
    "redact_arguments",
    "redact_json_text",
]

#: What a redacted secret is replaced with.
REDACTED = "[REDACTED]"
# Class tuples for isinstance, built once (a ``X | Y`` union would be built on every call).
_CONTAINERS = (dict, list, tuple)
_SEQUENCES = (list, tuple)


@runtime_checkable
class Redactor(Protocol):
    """Removes sensitive content from text and JSON values.

    The runtime checks, when it is opened, that a Redactor service has every member below (a
    missing one is a ``TypeError`` naming it), so a custom redactor cannot leave streamed secrets
    unredacted by omission.
    """

    @property
    def active(self) -> bool:
        """Whether anything can be redacted right now (False lets text pass unchanged, cheaply).
        Return True when unsure."""
        ...

    def redact_text(self, text: str) -> str:
        """``text`` with sensitive content replaced."""
        ...

    def redact(self, value: Any) -> Any:
        """A JSON value with sensitive content replaced (keys and strings, recursively)."""
        ...

    def partial_secret_suffix(self, text: str) -> int:
        """The length of the longest end of ``text`` that could still grow into sensitive content
        with more text after it (0 if none). A stream holds that much back until the next piece;
        a redactor that cannot tell must return ``len(text)`` (everything is held to the end)."""
        ...


@final
class SecretRedactor:
    """Redacts registered secret values. Thread-safe to read; register before running."""

    __slots__ = ("_needles",)

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        self._needles: tuple[str, ...] = ()
        for secret in secrets:
            self.register(secret)

    def register(self, secret: str) -> None:
        """Add a secret value to redact."""
        value: object = secret
        if not isinstance(value, str) or len(value) < 4:
            raise ValueError("a secret to redact must be a string of at least 4 characters")
        escaped = json.dumps(secret)[1:-1]
        needles = {*self._needles, secret, escaped}
        # Longest first, so a secret containing another is replaced whole.
        self._needles = tuple(sorted(needles, key=len, reverse=True))

    @property
    def active(self) -> bool:
        """Whether any secret is registered."""
        return bool(self._needles)

    def redact_text(self, text: str) -> str:
        """``text`` with every registered secret replaced."""
        for needle in self._needles:
            if needle in text:
                text = text.replace(needle, REDACTED)
        return text

    def partial_secret_suffix(self, text: str) -> int:
        """Length of the longest end of ``text`` that is the start (not the whole) of a secret:
        what a stream must hold back until the next piece shows whether it becomes one."""
        best = 0
        for needle in self._needles:
            for size in range(min(len(needle) - 1, len(text)), best, -1):
                if text.endswith(needle[:size]):
                    best = size
                    break
        return best

    def redact(self, value: Any) -> Any:
        """A JSON value with every registered secret replaced, recursively (iterative walk)."""
        if not self._needles:
            return value
        if isinstance(value, str):
            return self.redact_text(value)
        if not isinstance(value, _CONTAINERS):
            return value
        return self._redact_container(value)

    def _redact_container(self, value: Any) -> Any:
        root: list[Any] = [None]
        stack: list[tuple[Any, Any, Any]] = [(value, root, 0)]
        while stack:
            item, parent, key = stack.pop()
            if isinstance(item, str):
                parent[key] = self.redact_text(item)
            elif isinstance(item, dict):
                out: dict[str, Any] = {}
                parent[key] = out
                for k, v in item.items():
                    new_key = self.redact_text(k) if isinstance(k, str) else k
                    out[new_key] = None
                    stack.append((v, out, new_key))
            elif isinstance(item, _SEQUENCES):
                lst: list[Any] = [None] * len(item)
                parent[key] = lst
                for i, v in enumerate(item):
                    stack.append((v, lst, i))
            else:
                parent[key] = item
        return root[0]


@final
class StreamRedactor:
    """Redacts text that arrives in pieces (streamed text or reasoning deltas, per block).

    A secret can be split across two deltas, and each half alone matches nothing. So each piece is
    redacted together with what was held back before it, and an end that could still grow into a
    secret (:meth:`Redactor.partial_secret_suffix`) is held back until the next piece — or, when
    the block ends, shown as the redactor leaves it on its own.
    """

    __slots__ = ("_pending", "_redactor")

    def __init__(self, redactor: Redactor) -> None:
        self._redactor = redactor
        self._pending: dict[object, str] = {}

    def feed(self, block: object, piece: str) -> str:
        """The redacted text of ``block`` that can be shown now (possibly empty)."""
        redactor = self._redactor
        if not self._pending and not redactor.active:
            return piece
        text = redactor.redact_text(self._pending.pop(block, "") + piece)
        held = redactor.partial_secret_suffix(text)
        if held:
            self._pending[block] = text[-held:]
            return text[:-held]
        return text

    def end(self, block: object) -> str:
        """What was held back of ``block``, now that it has ended (redacted once more)."""
        held = self._pending.pop(block, "") if self._pending else ""
        return self._redactor.redact_text(held) if held else ""


_ESCAPE = re.compile(r'\\(?:u[0-9a-fA-F]{4}|["\\/bfnrt])')
_SIMPLE_ESCAPES = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r"}
_SIMPLE_ESCAPES["t"] = "\t"


def _unescape(match: re.Match[str]) -> str:
    escape = match.group(0)
    return chr(int(escape[2:], 16)) if escape[1] == "u" else _SIMPLE_ESCAPES[escape[1]]


def _json_unescaped(text: str) -> str:
    """``text`` with every JSON string escape decoded (surrogate pairs joined where they pair)."""
    decoded = _ESCAPE.sub(_unescape, text)
    try:
        return decoded.encode("utf-16", "surrogatepass").decode("utf-16")
    except UnicodeDecodeError:  # a lone surrogate: keep the characters as decoded
        return decoded


def redact_json_text(text: str, redactor: Redactor) -> str:
    """Redact text that is (or was meant to be) JSON but is kept as text.

    A secret spelled with JSON escapes passes a plain text match; so when decoding the escapes
    reveals something to redact, the decoded text, redacted, is what is kept.
    """
    redacted = redactor.redact_text(text)
    if "\\" not in text:
        return redacted
    unescaped = _json_unescaped(text)
    redacted_unescaped = redactor.redact_text(unescaped)
    return redacted_unescaped if redacted_unescaped != unescaped else redacted


def redact_arguments(arguments: str, redactor: Redactor) -> tuple[Any, str]:
    """``(value, text)`` of a tool call's raw argument text, redacted: the JSON value to show
    (previews, records, the prompt) and the text to record.

    Text that parses is redacted as the decoded value, so no spelling of a secret survives; text
    that does not parse stays text (see :func:`redact_json_text`).
    """
    value = parse_arguments(arguments)
    if value is arguments:  # kept as text: it did not parse
        text = redact_json_text(arguments, redactor)
        return text, text
    shown = redactor.redact(value)
    return shown, compact_json(shown)
