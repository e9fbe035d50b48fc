"""How TypeScript is written out: doc comments, literals, property names, continuation lines.

Pure helpers of the declaration renderer (``_typescript``).
"""

from __future__ import annotations

import json
import re
from typing import Final

__all__ = ["comment_lines", "indent", "jsdoc", "literal", "property_name", "tag"]

_IDENTIFIER: Final = re.compile(r"[A-Za-z_$][A-Za-z0-9_$]*")


def jsdoc(lines: tuple[str, ...] | list[str], prefix: str) -> list[str]:
    """``lines`` as a doc comment indented by ``prefix`` (one line when it fits), or nothing."""
    if not lines:
        return []
    if len(lines) == 1:
        return [f"{prefix}/** {lines[0]} */"]
    body = [f"{prefix} *" + (f" {line}" if line else "") for line in lines]
    return [f"{prefix}/**", *body, f"{prefix} */"]


def property_name(name: str) -> str:
    """A property key as written in a type: bare when an identifier, else a string literal."""
    return name if _IDENTIFIER.fullmatch(name) else literal(name)


def comment_lines(text: str) -> list[str]:
    """Text for a doc comment: one entry per line, ``*/`` defused, blank edges dropped."""
    safe = text.replace("*/", "*\\/").encode("utf-8", "replace").decode("utf-8")
    lines = [line.rstrip() for line in safe.splitlines()]
    while lines and not lines[0]:
        lines.pop(0)
    while lines and not lines[-1]:
        lines.pop()
    return lines


def literal(value: object) -> str:
    """Compact JSON (non-ASCII kept, lone surrogates escaped); ValueError for non-JSON."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = json.dumps(value, separators=(",", ":"), allow_nan=False)
    return text


def indent(text: str, prefix: str) -> str:
    """Indent every line of ``text`` after the first by ``prefix`` (the first continues a line
    that is already indented so)."""
    return text.replace("\n", "\n" + prefix)


def tag(name: str, value: object) -> list[str]:
    """The doc-comment tag ``@name value`` (a pattern or format as written, anything else as
    JSON); ``TypeError``/``ValueError`` for a value that is not JSON."""
    text = value if name in ("pattern", "format") and isinstance(value, str) else literal(value)
    assert isinstance(text, str)
    lines = comment_lines(text) or [""]
    return [f"@{name} {lines[0]}".rstrip(), *lines[1:]]
