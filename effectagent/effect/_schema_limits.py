"""The hostile-input guard: bounds on untrusted data, enforced before any decoding work starts.

Decoding is recursive (cattrs and our hooks call each other per nesting level) and error reporting
allocates per bad element, so input that is very deep, very large or has very many items must be
turned away *before* it reaches that machinery — the decoder itself cannot be trusted to stay
cheap on it.  The checks here are therefore deliberately iterative and allocation-light: an
explicit-stack walk over an already parsed value, and for JSON text a bracket-depth pre-scan that
runs before ``json.loads`` (which would itself recurse).  They know nothing about target types;
they only decide whether a value is small and plain enough to be worth decoding at all.
"""

from __future__ import annotations

import re
from itertools import accumulate
from math import isfinite
from typing import Any, Final, TypeAlias

import attrs

from effectagent.effect._json_schema import describe_value
from effectagent.effect._schema_errors import _SCALARS, SchemaError, SchemaIssue, _field_seg

__all__ = ["SchemaLimits"]


def _positive(_instance: object, attribute: attrs.Attribute[int], value: int) -> None:
    if type(value) is not int or value < 1:
        raise ValueError(f"SchemaLimits.{attribute.name} must be a positive int, got {value!r}")


@attrs.frozen
class SchemaLimits:
    """Bounds on untrusted input, checked before any decoding work.

    ``max_depth`` bounds array/object nesting (the top-level container is depth 1; keep it well
    below the interpreter's recursion limit), ``max_bytes`` the size of the JSON text (for an
    already-parsed value, a lower-bound estimate of its JSON size), ``max_items`` the total number
    of array elements and object members.
    """

    max_depth: int = attrs.field(default=64, validator=_positive)
    max_bytes: int = attrs.field(default=1_000_000, validator=_positive)
    max_items: int = attrs.field(default=100_000, validator=_positive)


_DEFAULT_LIMITS: Final = SchemaLimits()

_PathLink: TypeAlias = "tuple[_PathLink, str | int] | None"


def _render(link: _PathLink) -> str:
    segments: list[str] = []
    while link is not None:
        link, key = link
        segments.append(f"[{key}]" if isinstance(key, int) else _field_seg(key))
    return "$" + "".join(reversed(segments))


def _limit_error(link: _PathLink, message: str) -> SchemaError:
    return SchemaError((SchemaIssue(_render(link), message),))


def _check_limits(data: object, limits: SchemaLimits) -> None:
    """Walk the raw value iteratively: JSON types only (no NaN or infinities: JSON has none), and
    within depth, size and item bounds."""
    max_depth, max_items, max_bytes = limits.max_depth, limits.max_items, limits.max_bytes
    kind = type(data)
    if kind is not list and kind is not tuple and kind is not dict:
        if kind is str and len(data) + 2 > max_bytes:  # type: ignore[arg-type]
            raise _limit_error(None, f"input is larger than {max_bytes} bytes")
        if kind not in _SCALARS:
            raise _limit_error(None, f"not a JSON value: {kind.__qualname__}")
        if kind is float and not isfinite(data):  # type: ignore[arg-type]
            raise _limit_error(None, f"not a JSON value: {data!r}")
        return
    items = size = 0
    stack: list[tuple[Any, int, _PathLink]] = [(data, 1, None)]
    while stack:
        value, depth, link = stack.pop()
        if depth > max_depth:
            raise _limit_error(None, f"input is nested deeper than {max_depth} levels")
        items += len(value)
        if items > max_items:
            raise _limit_error(None, f"input has more than {max_items} items")
        size += len(value) + 1
        if type(value) is dict:
            for key in value:
                if type(key) is not str:
                    raise _limit_error(
                        link, f"object keys must be strings, got {describe_value(key)}"
                    )
                size += len(key) + 3
            pairs: Any = value.items()
        else:
            pairs = enumerate(value)
        for key, item in pairs:
            kind = type(item)
            if kind is str:
                size += len(item) + 2
            elif kind is list or kind is tuple or kind is dict:
                stack.append((item, depth + 1, (link, key)))
            elif kind is float:
                if not isfinite(item):
                    raise _limit_error((link, key), f"not a JSON value: {item!r}")
            elif kind not in _SCALARS:
                raise _limit_error((link, key), f"not a JSON value: {kind.__qualname__}")
        if size > max_bytes:
            raise _limit_error(None, f"input is larger than {max_bytes} bytes")


_STRING_RE: Final = re.compile(r'"(?:[^"\\]++|\\.?)*+"?', re.DOTALL)  # linear: never backtracks
_NOT_BRACKET_RE: Final = re.compile(r"[^\[\]{}]++")
_BRACKET_DELTA: Final = {"[": 1, "{": 1, "]": -1, "}": -1}


def _text_depth_exceeds(text: str, max_depth: int) -> bool:
    """Whether JSON text nests deeper than ``max_depth``; cheap, no parsing, no recursion."""
    if len(text) <= max_depth or text.count("[") + text.count("{") <= max_depth:
        return False
    brackets = _NOT_BRACKET_RE.sub("", _STRING_RE.sub("", text))
    return max(accumulate(map(_BRACKET_DELTA.__getitem__, brackets)), default=0) > max_depth
