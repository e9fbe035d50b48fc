"""Redaction: secrets never reach model context, events, records, logs or errors.

The default :class:`SecretRedactor` replaces every registered secret value (and its JSON-escaped form)
by ``[REDACTED]`` in strings, recursively through JSON values, keys included. Values shorter than
4 characters are refused: redacting them would shred ordinary text and still not be a secret.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any, Protocol, final

__all__ = ["REDACTED", "Redactor", "SecretRedactor", "StreamRedactor"]

#: What a redacted secret is replaced with.
REDACTED = "[REDACTED]"
# Class tuples for isinstance, built once (a ``X | Y`` union would be built on every call).
_CONTAINERS = (dict, list, tuple)
_SEQUENCES = (list, tuple)


class Redactor(Protocol):
    """Removes sensitive content from text and JSON values."""

    def redact_text(self, text: str) -> str:
        """``text`` with sensitive content replaced."""
        ...

    def redact(self, value: Any) -> Any:
        """A JSON value with sensitive content replaced (keys and strings, recursively)."""
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
    secret is held back until the next piece (or dropped if the block never continues). Needs a
    redactor with ``partial_secret_suffix`` (as :class:`SecretRedactor`); any other redactor gets
    each piece redacted on its own.
    """

    __slots__ = ("_knows_active", "_pending", "_redactor", "_suffix")

    def __init__(self, redactor: Redactor) -> None:
        self._redactor = redactor
        # A redactor that can say it has nothing to redact (yet) lets pieces pass unchanged then.
        self._knows_active = hasattr(redactor, "active")
        self._suffix = getattr(redactor, "partial_secret_suffix", None)
        self._pending: dict[object, str] = {}

    def feed(self, block: object, piece: str) -> str:
        """The redacted text of ``block`` that can be shown now (possibly empty)."""
        if self._knows_active and not self._pending and not self._redactor.active:  # type: ignore[attr-defined]
            return piece
        if self._suffix is None:
            return self._redactor.redact_text(piece)
        text = self._redactor.redact_text(self._pending.pop(block, "") + piece)
        held = self._suffix(text)
        if held:
            self._pending[block] = text[-held:]
            return text[:-held]
        return text

    def end(self, block: object) -> str:
        """What was held back of ``block``, now that it has ended (never a whole secret)."""
        return self._pending.pop(block, "") if self._pending else ""
