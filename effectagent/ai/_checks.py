"""Argument checks shared by Tool, Toolkit and ``@tool``: what a wrong argument is told.

A wrong type is a ``TypeError`` that names the argument and the type it needs, with the value that
was given (``tool 't': readonly must be a bool, got str 'yes'``); a ``bool`` never passes for a
number. Functions given as arguments are checked by what a call will do with them — async or
not, and whether the positional arguments the engine passes bind to the signature — so a
handler of the wrong shape fails where it is given, not in the middle of a run.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from effectagent.effect import is_async_callable

__all__ = [
    "accepts_positional",
    "check_function",
    "check_handler",
    "check_reconcile",
    "is_async_callable",
    "need",
    "shown",
]


def shown(value: object) -> str:
    """A value for an error message: its type and a short repr (``int 123``)."""
    text = repr(value)
    if len(text) > 60:
        text = f"{text[:56]}...{text[-1]}"
    return f"{type(value).__name__} {text}"


def need(
    owner: str, argument: str, value: object, kind: type | tuple[type, ...], what: str
) -> None:
    """``TypeError`` unless ``value`` is a ``kind`` (a bool is never accepted as a number)."""
    if not isinstance(value, kind) or (isinstance(value, bool) and bool not in _as_tuple(kind)):
        raise TypeError(f"{owner}: {argument} must be {what}, got {shown(value)}")


def _as_tuple(kind: type | tuple[type, ...]) -> tuple[type, ...]:
    return kind if isinstance(kind, tuple) else (kind,)


def accepts_positional(fn: Callable[..., Any], count: int) -> bool:
    """Whether ``fn`` can be called with ``count`` positional arguments (and nothing else). A
    callable whose signature cannot be read (some builtins) is given the benefit of the doubt."""
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        return True
    try:
        signature.bind(*([None] * count))
    except TypeError:
        return False
    return True


def check_handler(owner: str, handler: object) -> None:
    """``TypeError`` unless ``handler`` is an async callable taking ``(params, context)``."""
    if not callable(handler):
        raise TypeError(
            f"{owner}: the handler must be an async function of (params, context), "
            f"got {shown(handler)}"
        )
    label = getattr(handler, "__qualname__", None) or shown(handler)
    if not is_async_callable(handler):
        raise TypeError(
            f"{owner}: the handler {label} must be an async function (async def) of "
            "(params, context); it is not async"
        )
    if not accepts_positional(handler, 2):
        raise TypeError(
            f"{owner}: the handler {label} must accept two positional arguments "
            f"(params, context); its signature is {_signature(handler)}"
        )


def check_reconcile(owner: str, reconcile: object) -> None:
    """``TypeError`` unless ``reconcile`` is an async callable taking ``(params, context)``."""
    label = getattr(reconcile, "__qualname__", None) or shown(reconcile)
    if not callable(reconcile) or not is_async_callable(reconcile):
        raise TypeError(
            f"{owner}: the reconcile function {label} must be an async function (async def) "
            "of (params, context)"
        )
    if not accepts_positional(reconcile, 2):
        raise TypeError(
            f"{owner}: the reconcile function {label} must accept two positional arguments "
            f"(params, context); its signature is {_signature(reconcile)}"
        )


def check_function(owner: str, argument: str, fn: object, arguments: str) -> None:
    """``TypeError`` unless ``fn`` is a plain (not async) callable of ``arguments``."""
    count = arguments.count(",") + 1
    if not callable(fn) or is_async_callable(fn):
        raise TypeError(
            f"{owner}: {argument} must be a plain (not async) function of ({arguments}), "
            f"got {shown(fn)}"
        )
    if not accepts_positional(fn, count):
        raise TypeError(
            f"{owner}: {argument} must accept {count} positional "
            f"argument{'s' if count > 1 else ''} ({arguments}); its signature is {_signature(fn)}"
        )


def _signature(fn: Callable[..., Any]) -> str:
    try:
        return str(inspect.signature(fn))
    except (TypeError, ValueError):  # pragma: no cover - only reached when binding failed
        return "unknown"
