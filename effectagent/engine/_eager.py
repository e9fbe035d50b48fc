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
"""

from __future__ import annotations

import types
from collections.abc import Callable, Coroutine, Generator
from contextvars import Context
from typing import Any, TypeVar

__all__ = ["in_context"]

T = TypeVar("T")


@types.coroutine
def in_context(
    coro: Coroutine[Any, Any, T],
    context: Context,
    on_wait: Callable[[], object] | None = None,
) -> Generator[Any, Any, T]:
    """``await in_context(coro, context, on_wait)`` runs ``coro`` to its end in ``context``.

    ``context`` must not be entered anywhere else meanwhile (a fresh ``copy_context()`` is what
    the engine passes). Returns what ``coro`` returns; raises what it raises.

    Cancellation: exactly as ``coro``'s own — a ``Cancelled`` thrown into the awaiting task is
    thrown into ``coro`` at its current checkpoint, which handles or propagates it.
    """
    run = context.run
    try:
        trap = run(coro.send, None)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]
    while True:
        if on_wait is not None:
            on_wait()
        try:
            sent = yield trap
        except GeneratorExit:
            # The awaiting coroutine is being closed: close this one too, in its context.
            run(coro.close)
            raise
        except BaseException as thrown:
            try:
                trap = run(coro.throw, thrown)
            except StopIteration as done:
                return done.value  # type: ignore[no-any-return]
        else:
            try:
                trap = run(coro.send, sent)
            except StopIteration as done:
                return done.value  # type: ignore[no-any-return]
