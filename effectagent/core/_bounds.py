"""Bounding tool results for model context and records (RUN-022). Pure.

A result whose compact JSON is larger than the bound is replaced by a marker that keeps the original
size, a head and a tail, so the model knows what it is missing. The marker itself fits the bound.
Bounding never raises on a JSON value, lone surrogates included. An integer is measured by its
decimal digits like any value, one longer than Python's ``str`` writes
(``sys.get_int_max_str_digits()``) included: its digits are written in pieces, for the marker.

Strict JSON: NaN and ±Infinity are not JSON values. Whatever the engine shows (previews, progress,
results, records) passes through here, so this is the last line that refuses them: ``compact_json``
raises ValueError on one, and the bounding functions never pass one through without encoding (the
checks upstream — argument parsing, ``Tool.encode_success``, ``encode_failure`` — already refuse
them with a message for the model; handler progress reaches here directly, so a NaN in it raises
at the handler's ``progress`` call).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from typing import Any

from ._policy import ToolResultBounds

__all__ = [
    "PARSED_BYTES_PER_CHAR",
    "bounded_json",
    "bounded_json_and_size",
    "bounded_parsed",
    "compact_json",
]

_MARKER_OVERHEAD = 160
# Class tuples for isinstance, built once (a ``X | Y`` union would be built on every call).
_NUMBERS = (bool, int, float)
_isfinite = math.isfinite
# What ``json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)`` builds on
# every call; one shared encoder (stateless between calls) saves that on the per-tool-call path.
_COMPACT = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def compact_json(value: Any) -> str:
    """Compact JSON text of a JSON-safe value (non-ASCII kept). Raises ValueError for NaN and
    ±Infinity (not JSON: ``json``'s default would write the non-JSON tokens ``NaN``/``Infinity``)."""
    return _COMPACT.encode(value)


#: Every int strictly between ``_SHORT_LOW`` and ``_SHORT_HIGH`` fits the smallest bound
#: (``MIN_RESULT_BYTES``) as it stands; only a longer one is measured.
_SHORT_HIGH = 10**20
_SHORT_LOW = -_SHORT_HIGH


def _int_text(value: int) -> str:
    """The decimal digits of ``value`` as JSON writes them, however many: ``str`` refuses more
    than ``sys.get_int_max_str_digits()``, so a longer int is written in two halves, each
    again within the limit or halved."""
    try:
        return int.__repr__(value)
    except ValueError:
        pass
    if value < 0:
        return "-" + _int_text(-value)
    half = int(value.bit_length() * 0.30103) // 2  # about half its digits (log10(2) a bit)
    high, low = divmod(value, 10**half)
    return _int_text(high) + _int_text(low).zfill(half)


def _long_int_json(value: Any, path: set[int]) -> Iterator[str]:
    """The pieces of ``compact_json(value)`` for a value holding an int longer than ``str``
    writes (see :func:`_int_text`); any other value, as ``compact_json`` writes it (so NaN and
    infinities raise the same ValueError). Only called when ``compact_json`` raised."""
    if isinstance(value, int) and type(value) is not bool:
        yield _int_text(value)
        return
    is_dict = isinstance(value, dict)
    if not is_dict and not isinstance(value, (list, tuple)):
        yield compact_json(value)
        return
    if id(value) in path:
        raise ValueError("Circular reference detected")
    path.add(id(value))
    yield "{" if is_dict else "["
    for i, item in enumerate(value.items() if is_dict else value):
        if i:
            yield ","
        if is_dict:
            key, item = item
            yield compact_json({key: 0})[1:-2]  # the key as JSON writes it, and the colon
        yield from _long_int_json(item, path)
    yield "}" if is_dict else "]"
    path.discard(id(value))


def _cut_head(data: bytes, n: int) -> str:
    return data[:n].decode("utf-8", errors="ignore")


def _cut_tail(data: bytes, n: int) -> str:
    return data[len(data) - n :].decode("utf-8", errors="ignore") if n else ""


def _marker(data: bytes, bounds: ToolResultBounds) -> dict[str, Any]:
    budget = bounds.max_bytes - _MARKER_OVERHEAD
    head = bounds.head_bytes if bounds.head_bytes is not None else budget // 2
    tail = bounds.tail_bytes if bounds.tail_bytes is not None else budget - head
    head, tail = min(head, budget), min(tail, max(0, budget - head))
    marker = {
        "_tag": "Truncated",
        "original_bytes": len(data),
        "head": _cut_head(data, head),
        "tail": _cut_tail(data, tail),
    }
    # JSON escaping can grow the text; shrink until the marker honours the bound.
    while len(compact_json(marker).encode("utf-8")) > bounds.max_bytes and (head or tail):
        head, tail = head * 3 // 4, tail * 3 // 4
        marker["head"], marker["tail"] = _cut_head(data, head), _cut_tail(data, tail)
    return marker


def _worst_case_size(value: Any, budget: int) -> int:
    """An upper bound of the bytes of ``compact_json(value)``, or more than ``budget`` when it
    cannot tell cheaply (a large, deep or unusual value): then the caller encodes to find out.

    Per JSON type: an ASCII string is at most 6 bytes per character (a control character escapes
    to ``\\u0000``) plus its quotes; a float's ``repr`` is at most 24 characters. Anything but
    plain JSON types, ASCII text and moderate integers is left to the encoder. (A non-ASCII string
    is left to it too: exactly as encoded, a lone surrogate must fail the same way.)

    Scalars are counted where they are met, among their container's members; only nested
    containers wait on the stack, so a flat object — most tool arguments and results — takes one
    pass.
    """
    over = budget + 1
    total = 0
    kind = type(value)
    if kind is dict or kind is list or kind is tuple:  # the usual case: start with its members
        members: Any = ()
        stack: list[Any] = [value]
    else:
        members, stack = (value,), []
    while True:
        for member in members:
            kind = type(member)
            if kind is str:
                if not member.isascii():
                    return over
                total += len(member) * 6 + 2
            elif kind is int:
                total += 21 if -(10**20) < member < 10**20 else over
            elif member is None or kind is bool:
                total += 5
            elif kind is float:
                # NaN and infinities are left to the encoder, which refuses them.
                total += 24 if _isfinite(member) else over
            elif kind is dict or kind is list or kind is tuple:
                stack.append(member)
            else:
                return over
        if total > budget:
            return over
        if not stack:
            return total
        container = stack.pop()
        if type(container) is dict:
            total += 2 + 2 * len(container)  # braces, and a colon and a comma per member
            for key in container:
                if type(key) is not str or not key.isascii():
                    return over
                total += len(key) * 6 + 2
            members = container.values()
        else:
            total += 2 + len(container)  # brackets, and a comma per element
            members = container


def bounded_json(value: Any, bounds: ToolResultBounds) -> Any:
    """``value``, or its truncation marker when its compact JSON is larger than the bound. A value
    whose worst-case size already fits is returned without being encoded. Raises ValueError for a
    value holding NaN or ±Infinity (see :func:`compact_json`)."""
    if _worst_case_size(value, bounds.max_bytes) <= bounds.max_bytes:
        return value
    return bounded_json_and_size(value, bounds)[0]


#: The compact JSON of a value parsed from JSON text takes at most this many bytes per character
#: of the text (plus 2): a string's character re-encodes to at most 4 bytes, a number's token to at
#: most 4.5 times its length (``1e15`` becomes ``1000000000000000.0``), and text that does not parse
#: stays a string — at most 6 bytes a character (``\\u0000``) plus its quotes.
PARSED_BYTES_PER_CHAR = 6


def bounded_parsed(value: Any, text: str, bounds: ToolResultBounds) -> Any:
    """:func:`bounded_json` of ``value``, which is what parsing ``text`` strictly gave
    (``parse_arguments``: no NaN or infinities; unchanged since: not
    redacted): text short enough that nothing parsed from it can exceed the bound needs no walk."""
    if len(text) * PARSED_BYTES_PER_CHAR + 2 <= bounds.max_bytes:
        return value
    return bounded_json(value, bounds)


def bounded_json_and_size(value: Any, bounds: ToolResultBounds) -> tuple[Any, bool, int]:
    """:func:`bounded_json` with what it measured: ``(value or truncation marker, truncated?,
    original size in bytes)``. Raises ValueError for a value holding NaN or ±Infinity."""
    if value is None or isinstance(value, _NUMBERS):
        if type(value) is float and not _isfinite(value):
            raise ValueError(f"not JSON: {value!r} (NaN and infinities have no JSON form)")
        if not isinstance(value, int) or type(value) is bool or _SHORT_LOW < value < _SHORT_HIGH:
            return value, False, 0
        text = _int_text(value)
    # Fast path only when even the worst case fits: a control character escapes to 6 bytes
    # ("\u0000"), more than its 4-byte UTF-8 maximum; plus the two quotes.
    elif isinstance(value, str) and len(value) * 6 + 2 <= bounds.max_bytes:
        return value, False, len(value)
    else:
        try:
            text = compact_json(value)
        except ValueError:  # NaN, or an int too long for ``str``: written here, or NaN again
            text = "".join(_long_int_json(value, set()))
    # A lone surrogate (JSON can carry one as a ``\\ud800`` escape) has no UTF-8 form: measure
    # it as the three bytes it would be written as, and let the marker's cut drop it.
    data = text.encode("utf-8", "surrogatepass")
    if len(data) <= bounds.max_bytes:
        return value, False, len(data)
    return _marker(data, bounds), True, len(data)
