"""Bounding tool results for model context and records (RUN-022). Pure.

A result whose compact JSON is larger than the bound is replaced by a marker that keeps the original
size, a head and a tail, so the model knows what it is missing. The marker itself fits the bound.
"""

from __future__ import annotations

import json
from typing import Any

from ._policy import ToolResultBounds

__all__ = ["bound_json", "bound_text", "compact_json"]

_MARKER_OVERHEAD = 160
# What ``json.dumps(value, ensure_ascii=False, separators=(",", ":"))`` builds on every call; one
# shared encoder (stateless between calls) saves that on the per-tool-call path.
_COMPACT = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))


def compact_json(value: Any) -> str:
    """Compact JSON text of a JSON-safe value (non-ASCII kept)."""
    return _COMPACT.encode(value)


def _cut_head(data: bytes, n: int) -> str:
    return data[:n].decode("utf-8", errors="ignore")


def _cut_tail(data: bytes, n: int) -> str:
    return data[len(data) - n :].decode("utf-8", errors="ignore") if n else ""


def bound_text(text: str, bounds: ToolResultBounds) -> tuple[str, bool]:
    """``(text, False)`` if it fits, else ``(marker JSON text, True)``."""
    data = text.encode("utf-8")
    if len(data) <= bounds.max_bytes:
        return text, False
    return compact_json(_marker(data, bounds)), True


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


def bound_json(value: Any, bounds: ToolResultBounds) -> tuple[Any, bool, int]:
    """``(value or truncation marker, truncated?, original size in bytes)``."""
    if value is None or isinstance(value, bool | int | float):
        return value, False, 0
    # Fast path only when even the worst case fits: a control character escapes to 6 bytes
    # ("\u0000"), more than its 4-byte UTF-8 maximum; plus the two quotes.
    if isinstance(value, str) and len(value) * 6 + 2 <= bounds.max_bytes:
        return value, False, len(value)
    text = compact_json(value)
    data = text.encode("utf-8")
    if len(data) <= bounds.max_bytes:
        return value, False, len(data)
    return _marker(data, bounds), True, len(data)
