"""Scope = a Trio nursery + a finalizer stack; Fiber = a child task with a reified Exit.

Design notes
------------
A :class:`Scope` is the lifetime of some resources and child tasks. Leaving the ``async with`` block

1. waits for every child (no fiber outlives its scope — this is just Trio's nursery);
2. computes the :data:`Exit` that closed the scope: ``Success(None)``, the reified exception of the body,
   or an interruption when the scope was cancelled or a fiber was cut short by a cancellation;
3. runs the finalizers **once each, in reverse order of registration, shielded from cancellation**, each
   receiving that Exit. A finalizer that raises does not stop the others; its error is reported after.

Forking gives a :class:`Fiber`. A fiber runs in its own cancel scope (``interrupt()``), never raises into
the nursery (so one crashing fiber does not cancel its siblings) and records its Exit for ``join()``.
Nothing is lost: when a scope closes, the defect of any fiber whose Exit nobody observed (``join`` or
``poll``) is raised out of the scope.

Spawning (:meth:`Scope.spawn`) is the cheap sibling of forking for fire-and-forget children that are
never joined or interrupted one by one: a plain child task of the nursery, without a Fiber, its own
cancel scope or a completion event. Its outcome follows the rule of an unobserved fiber: a
cancellation ends it quietly (the scope then closes with an interruption), a defect is kept and
raised out of the scope when it closes, and it never cancels its siblings. What the body raised leaves the scope as itself, not
wrapped in the nursery's one-member ExceptionGroup; several errors (body, lost defects,
finalizers) form a group.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import Any, Generic, Never, TypeVar, TypeVarTuple, Unpack, final, overload

import trio

from ._attempt import not_async_function, starts_coroutine
from ._cause import Cause, Die, Exit, Failure, Success, error_classes, is_passthrough, reify

__all__ = ["Fiber", "Finalizer", "Scope", "ScopeClosedError", "open_scope"]

A = TypeVar("A")
E = TypeVar("E", bound=BaseException)
# A Fiber is only ever read from outside (join/poll), so it is covariant: a Fiber[int, Never]
# (nothing declared) is usable wherever a Fiber[int, SomeError] is expected.
A_co = TypeVar("A_co", covariant=True)
E_co = TypeVar("E_co", bound=BaseException, covariant=True)
Ts = TypeVarTuple("Ts")

#: A release action: called once with the Exit that closed the scope, shielded from cancellation.
Finalizer = Callable[[Exit[Any, Any]], Awaitable[None]]

_SUCCESS_NONE: Success[None] = Success(None)


class ScopeClosedError(RuntimeError):
    """The scope is closing or closed: it takes no new fibers or finalizers."""


@final
class Fiber(Generic[A_co, E_co]):
    """A child task forked into a :class:`Scope`, with its outcome as an :data:`Exit`."""

    __slots__ = ("_cancel_scope", "_done", "_exit", "_observed", "name")

    def __init__(self, name: str) -> None:
        self.name = name
        self._cancel_scope = trio.CancelScope()
        self._done = trio.Event()
        self._exit: Exit[A_co, E_co] | None = None
        self._observed = False

    @property
    def done(self) -> bool:
        """True once the fiber has finished and its Exit is known."""
        return self._exit is not None

    def interrupt(self) -> None:
        """Request cancellation of this fiber only. Idempotent; does not wait (see :meth:`join`)."""
        self._cancel_scope.cancel()

    def poll(self) -> Exit[A_co, E_co] | None:
        """The Exit if the fiber has finished, else None. Observing a finished Exit counts as joined."""
        if self._exit is not None:
            self._observed = True
        return self._exit

    async def join(self) -> Exit[A_co, E_co]:
        """Wait for the fiber to finish and return its Exit.

        Cancellation: a checkpoint. If the *joining* task is cancelled, ``join`` raises
        ``trio.Cancelled`` and the fiber keeps running (it belongs to its scope, not to the joiner).
        """
        if self._exit is None:
            await self._done.wait()
        else:
            await trio.lowlevel.checkpoint()
        assert self._exit is not None
        self._observed = True
        return self._exit

    async def interrupt_and_join(self) -> Exit[A_co, E_co]:
        """Interrupt the fiber and wait for its Exit (an interruption unless it finished first)."""
        self.interrupt()
        return await self.join()

    def __repr__(self) -> str:
        state = "running" if self._exit is None else type(self._exit).__name__
        return f"<Fiber {self.name!r} {state}>"


@final
class Scope:
    """A nursery plus a finalizer stack. Create with :func:`open_scope`; use as ``async with``."""

    __slots__ = (
        "_closing",
        "_failed_fibers",
        "_fiber_interrupted",
        "_finalizers",
        "_lost_defects",
        "_nursery",
        "_nursery_cm",
    )

    def __init__(self) -> None:
        self._nursery_cm = trio.open_nursery()
        self._nursery: trio.Nursery | None = None
        self._finalizers: list[Finalizer] = []
        self._failed_fibers: list[Fiber[Any, Any]] = []
        # Defects of spawned children (nobody can observe those): raised when the scope closes.
        self._lost_defects: list[BaseException] = []
        # Set when a fiber was cut short by a cancellation other than its own interrupt(): the
        # body may have ended normally, but the scope's work was interrupted.
        self._fiber_interrupted = False
        self._closing = False

    @property
    def cancel_scope(self) -> trio.CancelScope:
        """The cancel scope of the scope's nursery."""
        return self._open_nursery().cancel_scope

    def cancel(self) -> None:
        """Cancel the body and every fiber of this scope. The scope then closes with an interruption."""
        self._open_nursery().cancel_scope.cancel()

    def add_finalizer(self, finalizer: Finalizer) -> None:
        """Register ``finalizer``; it runs once when the scope closes, shielded, before earlier ones.

        ``finalizer`` is an async callable of the closing Exit: anything else (not callable, or
        a plain ``def``) is a ``TypeError`` here, not an error of the scope's teardown after a
        plain function ran. Only an open scope takes one (:class:`ScopeClosedError` before it is
        entered, and once it is closing)."""
        if self._closing:
            raise ScopeClosedError("cannot add a finalizer to a closing scope")
        if self._nursery is None:  # it would run only if the scope were entered later
            raise ScopeClosedError("cannot add a finalizer to a scope that is not open")
        if not starts_coroutine(finalizer):
            raise TypeError(
                not_async_function(
                    "add_finalizer", finalizer, "finalizer must be an async callable of the Exit"
                )
            )
        self._finalizers.append(finalizer)

    # Overloads so that ``scope.fork(fn)`` (nothing declared) is a ``Fiber[A, Never]`` rather than
    # a Fiber whose error type strict mypy cannot infer.
    @overload
    def fork(
        self,
        fn: Callable[[Unpack[Ts]], Awaitable[A]],
        *args: *Ts,
        name: str | None = None,
    ) -> Fiber[A, Never]: ...
    @overload
    def fork(
        self,
        fn: Callable[[Unpack[Ts]], Awaitable[A]],
        *args: *Ts,
        errors: tuple[type[E], ...],
        name: str | None = None,
    ) -> Fiber[A, E]: ...
    def fork(
        self,
        fn: Callable[[Unpack[Ts]], Awaitable[A]],
        *args: *Ts,
        errors: tuple[type[E], ...] = (),
        name: str | None = None,
    ) -> Fiber[A, E]:
        """Start ``fn(*args)`` as a child fiber of this scope and return it at once.

        ``errors`` are the declared error classes (they become ``Fail``; anything else ``Die``),
        checked here (``TypeError``), before anything starts. So is ``fn``: one that is not an
        async function (a plain ``def``, a lambda) is a ``TypeError`` here, never called.
        """
        nursery = self._open_nursery()
        if self._closing:
            raise ScopeClosedError("cannot fork into a closing scope")
        if not starts_coroutine(fn):
            raise TypeError(not_async_function("fork", fn))
        errors = error_classes(errors)  # type: ignore[assignment]
        fiber: Fiber[A, E] = Fiber(name or str(getattr(fn, "__qualname__", fn)))
        nursery.start_soon(self._run_fiber, fiber, fn, args, errors, name=fiber.name)
        return fiber

    def spawn(self, fn: Callable[[Unpack[Ts]], Awaitable[object]], *args: *Ts) -> None:
        """Start ``fn(*args)`` as a plain child task of this scope, with no :class:`Fiber`.

        Cheaper than :meth:`fork` (no per-child cancel scope, completion event or Exit), for children
        that are never joined, polled or interrupted individually. Its result is discarded.
        ``fn`` is an async function: anything else is a ``TypeError`` here, never called.

        Cancellation and errors: the child is cancelled only together with the whole scope
        (:meth:`cancel`, or a cancellation of the task tree around it). A ``trio.Cancelled`` that
        ends it is absorbed and the scope closes with an interruption — as for a fiber. Any other
        exception is a defect: it does not cancel the siblings and is raised out of the scope when
        the scope closes (exactly like the defect of a fiber whose Exit nobody observed).
        ``KeyboardInterrupt``/``SystemExit`` propagate at once, as from a fiber.
        """
        nursery = self._open_nursery()
        if self._closing:
            raise ScopeClosedError("cannot spawn into a closing scope")
        if not starts_coroutine(fn):
            raise TypeError(not_async_function("spawn", fn))
        nursery.start_soon(self._run_spawned, fn, args, name=fn)  # the task is named after fn

    async def _run_spawned(
        self, fn: Callable[..., Awaitable[object]], args: tuple[Any, ...]
    ) -> None:
        try:
            await fn(*args)
        except BaseException as exc:
            if is_passthrough(exc):
                raise
            # Swallowing a Cancelled is harmless here: the task ends, and the cancelled scope
            # stays cancelled for every other task in it.
            cause: Cause[Never] = reify(exc, ())
            self._lost_defects.extend(cause.defects)
            if cause.is_interrupted:
                self._fiber_interrupted = True

    async def _run_fiber(
        self,
        fiber: Fiber[A, E],
        fn: Callable[..., Awaitable[A]],
        args: tuple[Any, ...],
        errors: tuple[type[E], ...],
    ) -> None:
        exit_: Exit[A, E] | None = None
        try:
            with fiber._cancel_scope:
                exit_ = Success(await fn(*args))
            if exit_ is None:
                exit_ = Failure(Cause.interrupt())
        except BaseException as exc:
            if is_passthrough(exc):
                exit_ = Failure(Cause.die(exc))
                raise
            # The task ends here, so swallowing a Cancelled from an outer scope is harmless: that
            # scope stays cancelled for every other task in it.
            exit_ = Failure(reify(exc, errors))
            if exit_.cause.defects:
                self._failed_fibers.append(fiber)
            if exit_.cause.is_interrupted:
                self._fiber_interrupted = True
        finally:
            fiber._exit = exit_
            fiber._done.set()

    def _open_nursery(self) -> trio.Nursery:
        if self._nursery is None:
            raise ScopeClosedError("the scope is not open")
        return self._nursery

    async def __aenter__(self) -> Scope:
        if self._nursery is not None:
            raise ScopeClosedError("a scope is entered once: open another with open_scope()")
        self._nursery = await self._nursery_cm.__aenter__()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        nursery = self._open_nursery()
        raised: BaseException | None = None
        suppressed = False
        try:
            suppressed = bool(await self._nursery_cm.__aexit__(exc_type, exc, tb))
        except BaseException as body_exc:
            raised = body_exc
        self._closing = True
        if (
            isinstance(raised, BaseExceptionGroup)
            and raised is not exc
            and len(raised.exceptions) == 1
        ):
            # Fibers reify everything but KeyboardInterrupt/SystemExit, so the nursery's (strict)
            # group wraps just what the body raised: give the caller that exception itself, as a
            # plain ``async with`` would.
            raised = raised.exceptions[0]

        unobserved = [
            f._exit.cause.defects
            for f in self._failed_fibers
            if not f._observed and isinstance(f._exit, Failure)
        ]
        if raised is not None:
            # Not ``Cause.from_exception``, which refuses an interpreter exit: a scope closing on
            # one (a KeyboardInterrupt) still runs its finalizers, telling them it as a Die.
            closing_exit: Exit[Any, Any] = Failure(reify(raised, ()))
        elif nursery.cancel_scope.cancel_called or self._fiber_interrupted:
            # cancel_called, not cancelled_caught: after ``scope.cancel()`` the body may end without
            # another checkpoint, or fibers may swallow the Cancelled while the body waits here.
            closing_exit = Failure(Cause.interrupt())
        else:
            closing_exit = _SUCCESS_NONE
        lost = [d for defects in unobserved for d in defects]
        lost.extend(self._lost_defects)
        if lost:
            extra: Cause[Any] = Cause(tuple(Die(d) for d in lost))
            closing_exit = (
                Failure(extra)
                if isinstance(closing_exit, Success)
                else Failure(closing_exit.cause + extra)
            )

        finalizer_errors = await self._run_finalizers(closing_exit)

        errors: list[BaseException] = []
        if raised is not None:
            errors.append(raised)
        errors.extend(lost)
        errors.extend(finalizer_errors)
        if not errors:
            return suppressed
        if len(errors) == 1 and raised is not None:
            raise raised
        raise BaseExceptionGroup("errors while closing a scope", errors)

    async def _run_finalizers(self, closing_exit: Exit[Any, Any]) -> list[BaseException]:
        finalizers, self._finalizers = self._finalizers, []
        errors: list[BaseException] = []
        if not finalizers:
            return errors
        with trio.CancelScope(shield=True):
            for finalizer in reversed(finalizers):
                try:
                    await finalizer(closing_exit)
                except BaseException as exc:  # every finalizer runs; errors are reported after
                    errors.append(exc)
        return errors


def open_scope() -> Scope:
    """Open a :class:`Scope`: ``async with open_scope() as scope: ...``.

    Cancellation: entering is a checkpoint-free nursery open; leaving waits for every fiber (it is a
    checkpoint) and then runs finalizers shielded from cancellation.
    """
    return Scope()
