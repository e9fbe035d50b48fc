"""The tool-call permits of a run: one pool per run, lent down to the calls a call makes.

``AgentPolicy.tool_concurrency`` is a limit for the whole run — what a user protecting a
rate-limited backend relies on. So every handler the run starts takes a permit from one pool: the
calls of the model's batches, the inner calls a tool makes through the engine (Code Mode), and the
calls of the child runs a tool starts (subagents: a child draws from its parent's pool; its own
``tool_concurrency`` adds no permits).

A call that calls tools holds a permit while it waits for them, so with one permit its inner calls
could never start. Hence *lending*: a call lends its permit to one of its inner calls at a time (the
inner call borrows it; the lender, waiting on it, does no work of its own meanwhile), and any
further inner call takes a permit from the pool like every other call. So the permits out never
exceed ``tool_concurrency`` and a call's inner calls always make progress: the first of them can
always borrow its caller's permit.

:class:`PermitBook` is the bookkeeping — pure, no Trio: who holds what, who waits in which order,
whom a release grants. Pool permits are granted strictly first in, first out (a waiter is never
overtaken by a later one for a pool permit); a returned loan goes to the first waiter of that
lender. :class:`PermitPool` is the thin Trio part: tasks park on an event until the book grants
them.

Invariants (property-tested in ``tests/engine/test_permits.py``): the permits taken from the pool
never exceed its capacity; a permit is lent to at most one borrower at a time; every permit is
returned exactly once, on every exit (success, failure, cancellation); and no waiter waits while
the book could grant it.
"""

from __future__ import annotations

from collections import deque
from typing import final

import trio

__all__ = ["Permit", "PermitBook", "PermitPool"]

_NONE: list[_Waiter] = []  # what a release grants when nobody waits (never appended to)
_NO_QUEUE: deque[_Waiter] = deque(maxlen=0)  # the queue before anyone waited (never added to)


@final
class Permit:
    """One call's right to run: taken from the pool, or borrowed from ``lender``."""

    __slots__ = ("lender", "lent", "returned")

    def __init__(self, lender: Permit | None = None) -> None:
        self.lender = lender  # None: a permit of the pool
        self.lent = False  # lent to a borrower right now
        self.returned = False


@final
class _Waiter:
    __slots__ = ("event", "granted", "lender")

    def __init__(self, lender: Permit | None) -> None:
        self.lender = lender
        self.granted: Permit | None = None
        self.event: trio.Event | None = None  # made only when the task has to park


@final
class PermitBook:
    """The bookkeeping of a run's permits (see the module notes). Calls nothing of Trio."""

    __slots__ = ("capacity", "free", "queue")

    def __init__(self, capacity: int) -> None:
        if type(capacity) is not int or capacity < 1:
            raise ValueError(f"capacity must be a positive int, got {capacity!r}")
        self.capacity = capacity
        self.free = capacity
        # Made by the first waiter (a run whose calls never wait keeps no queue: 760 bytes less
        # for each of many runs parked at once).
        self.queue: deque[_Waiter] = _NO_QUEUE

    @property
    def in_use(self) -> int:
        """Pool permits held right now (borrowed ones are not extra: they are their lender's)."""
        return self.capacity - self.free

    def try_take(self, lender: Permit | None) -> Permit | None:
        """A permit now, if one can be had without overtaking a waiter: ``lender``'s, if it is
        not lent, else a pool permit if one is free and nobody waits for one; else None."""
        if lender is not None and not lender.lent and not lender.returned:
            lender.lent = True
            return Permit(lender)
        if self.free and not self.queue:
            self.free -= 1
            return Permit()
        return None

    def enqueue(self, lender: Permit | None) -> _Waiter:
        """Queue a waiter for a permit (after :meth:`try_take` failed)."""
        waiter = _Waiter(lender)
        if self.queue is _NO_QUEUE:
            self.queue = deque()
        self.queue.append(waiter)
        return waiter

    def withdraw(self, waiter: _Waiter) -> list[_Waiter]:
        """A waiter gives up (its task was cancelled): out of the queue, or, if it was granted a
        permit meanwhile, that permit back. Returns the waiters that this grants."""
        if waiter.granted is not None:
            return self.give_back(waiter.granted)
        self.queue.remove(waiter)
        return self._grant_pool()  # leaving the head of the queue may unblock those behind

    def give_back(self, permit: Permit) -> list[_Waiter]:
        """Return ``permit`` (exactly once); return the waiters this grants."""
        if permit.returned:
            raise RuntimeError("a permit was returned twice")
        if permit.lent:
            raise RuntimeError("a permit was returned while lent to one of its call's calls")
        permit.returned = True
        lender = permit.lender
        if lender is None:
            self.free += 1
            return self._grant_pool() if self.queue else _NONE
        lender.lent = False
        for waiter in self.queue:  # the loan goes to the first waiter of that lender
            if waiter.lender is lender:
                self.queue.remove(waiter)
                lender.lent = True
                waiter.granted = Permit(lender)
                return [waiter]
        return []

    def _grant_pool(self) -> list[_Waiter]:
        granted: list[_Waiter] = []
        while self.free and self.queue:
            waiter = self.queue.popleft()
            self.free -= 1
            waiter.granted = Permit()
            granted.append(waiter)
        return granted


@final
class PermitPool:
    """The Trio side of a :class:`PermitBook`: take a permit, waiting if need be; return it."""

    __slots__ = ("book",)

    def __init__(self, capacity: int) -> None:
        self.book = PermitBook(capacity)

    @property
    def capacity(self) -> int:
        """The run's ``tool_concurrency``."""
        return self.book.capacity

    @property
    def in_use(self) -> int:
        """Pool permits held right now."""
        return self.book.in_use

    def take_nowait(self, lender: Permit | None = None) -> Permit | None:
        """A permit if one can be had now without waiting (see :meth:`PermitBook.try_take`)."""
        return self.book.try_take(lender)

    async def take(self, lender: Permit | None = None) -> Permit:
        """A permit: ``lender``'s (borrowed) or one of the pool's, waiting until one is free.

        Cancellation: a cancellation point before anything is taken; only a full checkpoint when
        it has to wait (the caller yields once per turn for fairness). If cancelled while waiting,
        nothing is held afterwards — including a permit granted just as the cancellation came.
        """
        await trio.lowlevel.checkpoint_if_cancelled()
        book = self.book
        permit = book.try_take(lender)
        if permit is not None:
            return permit
        waiter = book.enqueue(lender)
        event = waiter.event = trio.Event()
        try:
            await event.wait()
        except BaseException:
            _wake(book.withdraw(waiter))
            raise
        assert waiter.granted is not None  # set by the book before the event
        return waiter.granted

    def give_back(self, permit: Permit) -> None:
        """Return ``permit`` (exactly once), waking whoever that grants."""
        granted = self.book.give_back(permit)
        if granted:
            _wake(granted)


def _wake(waiters: list[_Waiter]) -> None:
    for waiter in waiters:
        event = waiter.event
        if event is not None:
            event.set()
