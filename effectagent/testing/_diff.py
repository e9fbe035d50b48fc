"""Where two JSON values first differ, and how to say it — the diff of a replay divergence and of
two runs' canonical records. Pure functions over plain JSON; no I/O, no Trio.

A path is a tuple of object keys and array indexes, written ``messages[3].content[0].result``.
What to leave out of a comparison is a sequence of rules (see :class:`Ignore`):

* a **path pattern** (a ``str``) leaves out every value at a matching path: keys by name (any
  name without ``.``, ``[`` or ``]``), indexes in brackets, ``*`` matches one key or index,
  ``**`` any number of them (``[*]`` is the same as ``.*``). ``"messages[0].content"``
  skips the system prompt, ``"**.id"`` every ``id``, ``"tools[*].description"`` tool descriptions;
* a **text pattern** (a compiled ``re.Pattern``) is replaced by ``<ignored>`` in every string on
  both sides before comparing: ``re.compile(r"\\d{4}-\\d{2}-\\d{2}")`` makes a date in the system
  prompt not matter, while the rest of the prompt still does.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final, TypeAlias, final

import attrs

__all__ = [
    "MISSING",
    "Difference",
    "Ignore",
    "IgnoreRule",
    "Path",
    "first_difference",
    "render_path",
    "show_value",
]

#: A place in a JSON value: object keys and array indexes.
Path: TypeAlias = tuple[str | int, ...]
#: One rule of what to ignore: a path pattern, or a compiled regular expression for text.
IgnoreRule: TypeAlias = "str | re.Pattern[str]"

_SEGMENT = re.compile(r"\.?(?:(\*\*|\*|[^.\[\]]+)|\[(\*|\d+)\])")
_PLACEHOLDER = "<ignored>"


@final
class _Missing:
    """What one side lacks (a key, an element)."""

    def __repr__(self) -> str:
        return "MISSING"


#: The value on the side that lacks what the other has.
MISSING: Final = _Missing()


def parse_pattern(pattern: str) -> tuple[str | int, ...]:
    """A path pattern's segments; ``ValueError`` for one that is not a pattern."""
    if not pattern.strip():
        raise ValueError(f"an ignore path must be a non-empty string, got {pattern!r}")
    segments: list[str | int] = []
    position = 0
    while position < len(pattern):
        match = _SEGMENT.match(pattern, position)
        if match is None or (position == 0 and pattern.startswith(".")):
            raise ValueError(
                f"{pattern!r} is not an ignore path (e.g. 'messages[0].content', "
                f"'tools[*].description', '**.id'): unexpected {pattern[position:]!r}"
            )
        name, index = match.groups()
        if index is not None:
            segments.append("*" if index == "*" else int(index))
        else:
            segments.append(name)
        position = match.end()
    return tuple(segments)


def _matches(pattern: Sequence[str | int], path: Path) -> bool:
    if not pattern:
        return not path
    head, rest = pattern[0], pattern[1:]
    if head == "**":
        return any(_matches(rest, path[i:]) for i in range(len(path) + 1))
    if not path:
        return False
    if head == "*" or head == path[0]:
        return _matches(rest, path[1:])
    return False


@final
@attrs.frozen
class Ignore:
    """What a comparison leaves out: path patterns and text patterns (see the module notes)."""

    paths: tuple[tuple[str | int, ...], ...] = ()
    texts: tuple[re.Pattern[str], ...] = ()
    rules: tuple[str, ...] = ()

    @staticmethod
    def of(rules: Iterable[str | re.Pattern[str]] | Ignore = ()) -> Ignore:
        """Rules as given to ``ignore=``; ``ValueError`` for a path that is not a pattern,
        ``TypeError`` for a rule that is neither a string nor a compiled pattern."""
        if isinstance(rules, Ignore):
            return rules
        if isinstance(rules, str | re.Pattern):
            rules = [rules]
        given: object = rules  # checked at run time too: not every caller runs mypy
        if not isinstance(given, Iterable):
            raise TypeError(
                "ignore= takes path patterns (str) and compiled regular expressions "
                f"(re.compile(...)), or a list of them, got {type(given).__name__}"
            )
        paths: list[tuple[str | int, ...]] = []
        texts: list[re.Pattern[str]] = []
        shown: list[str] = []
        for rule in rules:
            if isinstance(rule, re.Pattern):
                if not isinstance(rule.pattern, str):
                    raise TypeError("an ignore pattern must match text (str), not bytes")
                texts.append(rule)
                shown.append(f"text /{rule.pattern}/")
            elif isinstance(rule, str):
                paths.append(parse_pattern(rule))
                shown.append(rule)
            else:
                raise TypeError(
                    "ignore= takes path patterns (str) and compiled regular expressions "
                    f"(re.compile(...)), got {type(rule).__name__}"
                )
        return Ignore(tuple(paths), tuple(texts), tuple(shown))

    def skips(self, path: Path) -> bool:
        """Whether the value at ``path`` is left out."""
        return any(_matches(pattern, path) for pattern in self.paths)

    def scrub(self, value: Any) -> Any:
        """``value`` with every text pattern replaced by ``<ignored>`` in its strings."""
        if not self.texts:
            return value
        if isinstance(value, str):
            for pattern in self.texts:
                value = pattern.sub(_PLACEHOLDER, value)
            return value
        if isinstance(value, Mapping):
            return {key: self.scrub(item) for key, item in value.items()}
        if isinstance(value, list | tuple):
            return [self.scrub(item) for item in value]
        return value


NOTHING_IGNORED = Ignore()


@final
@attrs.frozen
class Difference:
    """The first place two values differ: its path, and what each side has there (or
    :data:`MISSING`)."""

    path: Path
    recorded: Any
    received: Any


def first_difference(
    recorded: Any, received: Any, ignore: Ignore = NOTHING_IGNORED
) -> Difference | None:
    """The first difference between two JSON values, depth first in the recorded value's order
    (None when they are equal, ``ignore`` applied). In arrays, elements are compared pairwise
    first; only when the common part is equal is the first extra or missing element the
    difference."""
    return _walk(ignore.scrub(recorded), ignore.scrub(received), (), ignore)


def _walk(recorded: Any, received: Any, path: Path, ignore: Ignore) -> Difference | None:
    if path and ignore.skips(path):
        return None
    if isinstance(recorded, Mapping) and isinstance(received, Mapping):
        for key in recorded:
            found = _walk(recorded[key], received.get(key, MISSING), (*path, key), ignore)
            if found is not None:
                return found
        for key in received:
            if key not in recorded:
                found = _walk(MISSING, received[key], (*path, key), ignore)
                if found is not None:
                    return found
        return None
    if isinstance(recorded, list) and isinstance(received, list):
        for index, (mine, theirs) in enumerate(zip(recorded, received, strict=False)):
            found = _walk(mine, theirs, (*path, index), ignore)
            if found is not None:
                return found
        for index in range(len(received), len(recorded)):
            found = _walk(recorded[index], MISSING, (*path, index), ignore)
            if found is not None:
                return found
        for index in range(len(recorded), len(received)):
            found = _walk(MISSING, received[index], (*path, index), ignore)
            if found is not None:
                return found
        return None
    if recorded is MISSING or received is MISSING:
        return Difference(path, recorded, received)
    if type(recorded) is not type(received) and not (
        isinstance(recorded, int | float)
        and isinstance(received, int | float)
        and not isinstance(recorded, bool)
        and not isinstance(received, bool)
    ):
        return Difference(path, recorded, received)
    if recorded != received:
        return Difference(path, recorded, received)
    return None


def render_path(path: Path) -> str:
    """``("messages", 3, "content")`` as ``messages[3].content`` (``(the whole value)`` for
    the empty path)."""
    out = ""
    for segment in path:
        if isinstance(segment, int):
            out += f"[{segment}]"
        else:
            out += f".{segment}" if out else segment
    return out or "(the whole value)"


_SHOWN = 240


def show_value(value: Any, other: Any = MISSING) -> str:
    """A value as the diff shows it: compact JSON, cut to a few hundred characters — for two
    long strings, the stretch around the first character where ``value`` differs from
    ``other``."""
    if value is MISSING:
        return "(nothing)"
    if isinstance(value, str) and isinstance(other, str) and len(value) > 80:
        at = next(
            (i for i, (a, b) in enumerate(zip(value, other, strict=False)) if a != b),
            min(len(value), len(other)),
        )
        start = max(0, at - 30)
        piece = value[start : at + 50]
        head = "…" if start else ""
        tail = "…" if at + 50 < len(value) else ""
        return f"{head}{json.dumps(piece, ensure_ascii=False)}{tail} (from character {at + 1})"
    text = json.dumps(value, ensure_ascii=False, separators=(", ", ": "), default=str)
    if len(text) > _SHOWN:
        return f"{text[:_SHOWN]}… ({len(text)} characters)"
    return text
