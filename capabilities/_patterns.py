"""Shell-style name patterns, as the access, approval and skill rules use them. Pure.

A pattern is matched with :func:`fnmatch.fnmatchcase` — case-sensitive on every platform, ``*``
for any run of characters (``/`` included), ``?`` for one, ``[…]`` for a set — against the whole
name. Rules take one pattern or several; several match when any of them does.
"""

from __future__ import annotations

from collections.abc import Iterable
from fnmatch import fnmatchcase

__all__ = ["Patterns", "matches_any", "patterns"]

#: One or more patterns, normalised to a tuple of non-empty strings.
Patterns = tuple[str, ...]


def patterns(value: str | Iterable[str], *, field: str) -> Patterns:
    """``value`` as a tuple of patterns: a string is one pattern. Raises ``TypeError`` for
    anything but strings and ``ValueError`` for an empty pattern or an empty collection, naming
    ``field``."""
    items = (value,) if isinstance(value, str) else value
    if not isinstance(items, Iterable):
        raise TypeError(f"{field} must be a pattern or patterns (str), got {type(value).__name__}")
    found = tuple(items)
    for item in found:
        if not isinstance(item, str):
            raise TypeError(f"{field} must hold str patterns, got {type(item).__name__}")
        if not item:
            raise ValueError(f"{field}: a pattern cannot be empty")
    if not found:
        raise ValueError(f"{field} needs at least one pattern")
    return found


def matches_any(name: str, candidates: Patterns) -> bool:
    """Whether ``name`` matches one of ``candidates``."""
    return any(fnmatchcase(name, candidate) for candidate in candidates)
