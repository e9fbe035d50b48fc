"""Running a coroutine eagerly: in the current task, in a context of its own, noticing each wait.

A tool call whose handler never has to wait (a cache hit, a computation, a no-op) does not need a
Trio task of its own — a task costs more than such a whole call. :func:`in_context` runs a coroutine
in the awaiting task instead, with two things a task would have given it:

* **its own context** — a copy of the awaiting task's ``contextvars`` context, as a child task
  gets: a context variable the coroutine sets stays in that copy and never reaches the awaiting
  task (or the next call it runs);
* **a hook when it waits** — ``on_wait`` is called each time the coroutine yields to the Trio
  scheduler (a checkpoint, an I/O wait, a lock), just before it does. The batch uses it to start
  another task for the calls still queued, so a waiting call never holds up the calls after it.

Everything else passes through unchanged: what the coroutine yields goes to Trio's scheduler and
what Trio sends or throws back (values, ``Cancelled``, ``KeyboardInterrupt``) goes to the
coroutine, so cancel scopes, nurseries and cancellation inside it work exactly as in the awaiting
task — which is the task it runs in (``trio.lowlevel.current_task()`` is that task).

The go-between is a small object, not a generator: the awaiting coroutine delegates to it as to
any iterator (``send``, ``throw``, ``close``), and the coroutine's return ends it the way it ends
a generator (its ``StopIteration`` carries the value). A call parked in its handler — possibly
one of very many runs parked at once — keeps three references here, not a generator's frame.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Coroutine, Generator
from contextvars import Context
from typing import Any, TypeVar, final

__all__ = ["in_context"]

T = TypeVar("T")


def in_context(
    coro: Coroutine[Any, Any, T],
    context: Context,
    on_wait: Callable[[], object] | None = None,
) -> Awaitable[T]:
    """``await in_context(coro, context, on_wait)`` runs ``coro`` to its end in ``context``.

    ``context`` must not be entered anywhere else meanwhile (a fresh ``copy_context()`` is what
    the engine passes). Returns what ``coro`` returns; raises what it raises. Await it once.

    Cancellation: exactly as ``coro``'s own — a ``Cancelled`` thrown into the awaiting task is
    thrown into ``coro`` at its current checkpoint, which handles or propagates it.
    """
    return _InContext(coro, context, on_wait)


@final
class _InContext(Generator[Any, Any, T]):
    """What the awaiting coroutine delegates to (see the module notes). Each step runs ``coro``
    in ``context``; a ``StopIteration`` (the coroutine returned) or any exception it raises
    passes through unchanged, and so ends the ``await``."""

    __slots__ = ("_context", "_coro", "_on_wait")

    def __init__(
        self,
        coro: Coroutine[Any, Any, T],
        context: Context,
        on_wait: Callable[[], object] | None,
    ) -> None:
        self._coro = coro
        self._context = context
        self._on_wait = on_wait

    def __await__(self) -> Generator[Any, Any, T]:
        return self

    def __iter__(self) -> Generator[Any, Any, T]:
        return self

    def __next__(self) -> Any:
        # The first step (``await`` starts with it): the same as ``send(None)``.
        trap = self._context.run(self._coro.send, None)
        on_wait = self._on_wait
        if on_wait is not None:
            on_wait()
        return trap

    def send(self, value: Any, /) -> Any:
        """Resume the coroutine with ``value`` (what Trio sent the task)."""
        trap = self._context.run(self._coro.send, value)
        on_wait = self._on_wait
        if on_wait is not None:
            on_wait()
        return trap

    def throw(self, typ: Any, val: Any = None, tb: Any = None, /) -> Any:
        """Throw what Trio threw into the task (a ``Cancelled``, ``KeyboardInterrupt``…) into the
        coroutine at its current checkpoint."""
        if val is None and tb is None:
            trap = self._context.run(self._coro.throw, typ)
        else:  # the old three-argument form, passed on as it came
            trap = self._context.run(self._coro.throw, typ, val, tb)
        on_wait = self._on_wait
        if on_wait is not None:
            on_wait()
        return trap

    def close(self) -> None:
        """The awaiting coroutine is being closed: close this one too, in its context."""
        self._context.run(self._coro.close)
