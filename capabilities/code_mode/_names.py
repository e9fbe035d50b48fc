"""The names a program sees: namespaces and methods as JavaScript identifiers.

A tool's name may hold characters an identifier cannot (``get-weather``), so each name is
*sanitized* — every character outside ``[A-Za-z0-9_$]`` becomes ``_``, and a leading digit gets a
``_`` before it — and two names that sanitize to the same identifier are a collision, refused
rather than resolved by a rule the model could not guess. A namespace becomes a binding in the
program's scope, so it must also not be a reserved word (``class``) nor shadow a global the
program needs (``JSON``, ``Promise``, ``console``). Methods are properties of a frozen,
prototype-less object: any identifier will do there.

Everything here is pure.
"""

from __future__ import annotations

import re
from typing import Final

__all__ = ["IDENTIFIER", "is_identifier", "sanitize", "taken_by_javascript"]

#: An ASCII JavaScript identifier (all a sanitized name can be).
IDENTIFIER: Final = re.compile(r"[A-Za-z_$][A-Za-z0-9_$]*")

_NOT_IDENTIFIER_CHAR: Final = re.compile(r"[^A-Za-z0-9_$]")

# Reserved words of ECMAScript, in strict mode and inside async functions (where the program
# runs), plus the two names strict mode forbids as bindings.
_RESERVED: Final = frozenset((
    "await", "break", "case", "catch", "class", "const", "continue", "debugger", "default",
    "delete", "do", "else", "enum", "export", "extends", "false", "finally", "for", "function",
    "if", "implements", "import", "in", "instanceof", "interface", "let", "new", "null", "package",
    "private", "protected", "public", "return", "static", "super", "switch", "this", "throw",
    "true", "try", "typeof", "var", "void", "while", "with", "yield", "arguments", "eval",
))  # fmt: skip

# Globals a program may use: shadowing one with a namespace would break the program silently.
_GLOBALS: Final = frozenset((
    "globalThis", "Infinity", "NaN", "undefined", "isFinite", "isNaN", "parseFloat", "parseInt",
    "decodeURI", "decodeURIComponent", "encodeURI", "encodeURIComponent", "escape", "unescape",
    "AggregateError", "Array", "ArrayBuffer", "Atomics", "BigInt", "BigInt64Array",
    "BigUint64Array", "Boolean", "DataView", "Date", "Error", "EvalError", "FinalizationRegistry",
    "Float16Array", "Float32Array", "Float64Array", "Function", "Int8Array", "Int16Array",
    "Int32Array", "Intl", "Iterator", "JSON", "Map", "Math", "Number", "Object", "Promise",
    "Proxy", "RangeError", "ReferenceError", "Reflect", "RegExp", "Set", "SharedArrayBuffer",
    "String", "Symbol", "SyntaxError", "TypeError", "Uint8Array", "Uint8ClampedArray",
    "Uint16Array", "Uint32Array", "URIError", "WeakMap", "WeakRef", "WeakSet", "WebAssembly",
    "console", "Deno", "structuredClone", "queueMicrotask", "setTimeout", "clearTimeout",
    "setInterval", "clearInterval", "TextEncoder", "TextDecoder", "URL", "URLSearchParams", "atob",
    "btoa", "crypto", "performance", "fetch", "Request", "Response", "Headers", "AbortController",
    "AbortSignal", "Event", "EventTarget", "Blob", "File", "FormData", "ReadableStream",
    "WritableStream", "TransformStream", "navigator", "self", "window", "process", "Buffer",
    "global", "require", "module", "exports",
))  # fmt: skip


def sanitize(name: str) -> str:
    """``name`` as an identifier: characters outside ``[A-Za-z0-9_$]`` become ``_``; a leading
    digit (or an empty name) gets a ``_`` in front."""
    out = _NOT_IDENTIFIER_CHAR.sub("_", name)
    if not out or out[0].isdigit():
        out = "_" + out
    return out


def is_identifier(name: str) -> bool:
    """Whether ``name`` is an ASCII JavaScript identifier."""
    return IDENTIFIER.fullmatch(name) is not None


def taken_by_javascript(name: str) -> str | None:
    """Why ``name`` cannot be a binding in the program's scope, or None if it can."""
    if name in _RESERVED:
        return f"{name!r} is a reserved word in JavaScript"
    if name in _GLOBALS:
        return f"{name!r} would shadow the JavaScript global of that name"
    return None
