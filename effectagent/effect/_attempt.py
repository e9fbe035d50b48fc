"""Running async code for its Exit.

``attempt`` is the boundary between ordinary raising code and reified outcomes: declared errors become
``Fail``, anything else ``Die``. It is *transparent to cancellation*: when a ``trio.Cancelled`` is part of
what escaped, the original exception is re-raised untouched, so Trio's cancel scopes keep their exact
semantics (a retry loop built on ``attempt`` can never spin on a cancelled scope). Interruption is
observed as a value where we own the cancel scope — :meth:`Fiber.join` and Scope finalizers.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Awaitable, Callable
from typing import Any, Never, TypeVar, TypeVarTuple, Unpack, overload

import trio

from ._cause import Cause, Exit, Failure, Success, error_classes, is_passthrough, reify

__all__ = [
    "attempt",
    "attempt_sync",
    "is_async_callable",
    "not_async_function",
    "propagates",
    "starts_coroutine",
]

A = TypeVar("A")
E = TypeVar("E", bound=BaseException)
Ts = TypeVarTuple("Ts")


def _contains_cancelled(exc: BaseException) -> bool:
    if isinstance(exc, trio.Cancelled):
        return True
    if isinstance(exc, BaseExceptionGroup):
        return any(_contains_cancelled(e) for e in exc.exceptions)
    return False


def is_async_callable(fn: object) -> bool:
    """Whether calling ``fn`` starts a coroutine: an ``async def`` function or method, a
    ``functools.partial`` of one, an object whose ``__call__`` is ``async def``, or one whose
    class says so (``starts_coroutine = True``: a handler ``@tool`` made, which returns the
    function's coroutine without a frame of its own). What a field that takes an async function
    checks, so a plain function fails where it is given, not when first awaited."""
    while isinstance(fn, functools.partial):
        fn = fn.func
    if inspect.iscoroutinefunction(fn) or getattr(type(fn), "starts_coroutine", False) is True:
        return True
    # The class's own ``__call__`` (a callable instance), looked up without binding it.
    call = inspect.getattr_static(type(fn), "__call__", None) if callable(fn) else None
    return inspect.iscoroutinefunction(call)


def starts_coroutine(fn: object) -> bool:
    """:func:`is_async_callable`, told at once for an ``async def`` function or bound method
    (what the engine passes for every tool call: its flag is read, nothing inspected)."""
    code = getattr(fn, "__code__", None)
    if code is not None and code.co_flags & inspect.CO_COROUTINE:
        return True
    return is_async_callable(fn)


def propagates(exc: BaseException) -> bool:
    """Whether :func:`attempt` lets ``exc`` propagate as it is rather than return it as a
    ``Failure``: a cancellation, ``KeyboardInterrupt``, ``SystemExit`` or ``GeneratorExit`` —
    alone or as any leaf of a group. (For code that awaits a function itself, where a frame
    less matters, and must keep ``attempt``'s rule.)"""
    return is_passthrough(exc) or _contains_cancelled(exc)


# The overloads type ``attempt(fn)`` (nothing declared) as ``Exit[A, Never]``; with a single
# signature and ``errors=()`` strict mypy cannot infer E and asks callers for an annotation.
@overload
async def attempt(fn: Callable[[Unpack[Ts]], Awaitable[A]], *args: *Ts) -> Exit[A, Never]: ...
@overload
async def attempt(
    fn: Callable[[Unpack[Ts]], Awaitable[A]], *args: *Ts, errors: tuple[type[E], ...]
) -> Exit[A, E]: ...
async def attempt(
    fn: Callable[[Unpack[Ts]], Awaitable[A]],
    *args: *Ts,
    errors: tuple[type[E], ...] = (),
) -> Exit[A, E]:
    """Await ``fn(*args)`` and return its :data:`Exit` instead of raising.

    Instances of ``errors`` become declared failures (``Fail``); any other exception is a defect
    (``Die``). ``KeyboardInterrupt``/``SystemExit`` propagate.

    ``errors`` is a tuple of exception classes; one class or another collection of them is
    converted, and anything else (a str) refused with a ``TypeError`` naming ``errors``, before
    ``fn`` runs. What a tuple holds is checked where it is used — per failure, not per call (a
    Tool's ``failure`` was checked when the Tool was made): a member that is not an exception
    class is a ``TypeError`` naming ``errors``, raised from ``fn``'s own exception.

    ``fn`` is an async function (see :func:`is_async_callable`): anything else — a plain ``def``,
    a lambda, a value that is not callable — is a ``TypeError`` naming ``fn``, raised before
    anything is called (not a ``Die`` after calling it). A plain function that returns an
    awaitable runs wrapped in an ``async def`` that awaits it.

    Cancellation: ``attempt`` checkpoints exactly as ``fn`` does. If a ``trio.Cancelled`` escapes
    ``fn`` (alone or inside a group) the original exception is re-raised unchanged, so the enclosing
    cancel scope handles it as usual.
    """
    given: object = errors  # checked at run time too: not every caller runs mypy
    if given.__class__ is not tuple:
        errors = error_classes(given)  # type: ignore[assignment]
    if not starts_coroutine(fn):
        raise TypeError(not_async_function("attempt", fn))
    try:
        return Success(await fn(*args))
    except trio.Cancelled:
        raise
    except BaseException as exc:
        if propagates(exc):
            raise
        return Failure(_reified(exc, errors))


def not_async_function(owner: str, fn: object, wanted: str = "fn must be an async function") -> str:
    """Why ``owner`` refuses ``fn``, which is not an async function (see
    :func:`is_async_callable`): what it ``wanted``, then ``fn`` named by its type and, for a
    function, its name."""
    if not callable(fn):
        return f"{owner}: {wanted}, got {type(fn).__name__} (not callable)"
    name = getattr(fn, "__qualname__", None)
    if isinstance(name, str):
        return f"{owner}: {wanted} (async def), got {name!r}, a plain one"
    return (
        f"{owner}: {wanted} (async def), "
        f"got a {type(fn).__name__} object whose __call__ is not async"
    )


def _reified(exc: BaseException, errors: tuple[type[E], ...]) -> Cause[E]:
    """``exc`` as a Cause, once the members of ``errors`` are checked (a failure's cost, not a
    call's); a ``TypeError`` for one that is not an exception class, from ``exc``."""
    if errors:
        try:
            error_classes(errors)
        except TypeError as problem:
            raise problem from exc
    return reify(exc, errors)


@overload
def attempt_sync(fn: Callable[..., A], *args: Any) -> Exit[A, Never]: ...
@overload
def attempt_sync(fn: Callable[..., A], *args: Any, errors: tuple[type[E], ...]) -> Exit[A, E]: ...
def attempt_sync(fn: Callable[..., A], *args: Any, errors: tuple[type[E], ...] = ()) -> Exit[A, E]:
    """Call a synchronous ``fn(*args)`` and return its Exit instead of raising (``errors`` as
    :func:`attempt` takes them, checked before ``fn`` runs)."""
    given: object = errors  # checked at run time too: not every caller runs mypy
    if given.__class__ is not tuple:
        errors = error_classes(given)  # type: ignore[assignment]
    try:
        return Success(fn(*args))
    except BaseException as exc:
        if is_passthrough(exc):
            raise
        return Failure(_reified(exc, errors))
