"""A weighted, FIFO-fair semaphore whose permits are released on every exit path.

The bookkeeping (:class:`PermitLedger`) is a plain object: who holds what, who waits in which order,
whom a release wakes. The Trio part only parks and unparks tasks. Fairness is strict FIFO (head-of-line
blocking), so a large request is never starved by a stream of small ones.

Capacities and weights are ints (not bools): anything else is a ``TypeError`` where it is given —
a float weight would be granted and leave fractional permits behind.
"""

from __future__ import annotations

from collections import deque
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import final

import trio

__all__ = ["PermitLedger", "Semaphore"]


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@final
class _Waiter:
    __slots__ = ("event", "granted", "weight")

    def __init__(self, weight: int) -> None:
        self.weight = weight
        self.granted = False
        self.event = trio.Event()


@final
class PermitLedger:
    """The bookkeeping of a weighted semaphore. It calls nothing of Trio: it only queues the
    waiters (each carries the event its task waits on) and says whom a release grants."""

    __slots__ = ("available", "capacity", "queue")

    def __init__(self, capacity: int) -> None:
        if not _is_int(capacity):
            raise TypeError(f"capacity must be an int, got {type(capacity).__name__}")
        if capacity < 1:
            raise ValueError(f"capacity must be at least 1, got {capacity}")
        self.capacity = capacity
        self.available = capacity
        self.queue: deque[_Waiter] = deque()

    def check_weight(self, weight: int) -> None:
        """Reject weights that could never be granted: not an int (``TypeError``), or outside
        1 to the capacity (``ValueError``)."""
        if not _is_int(weight):
            raise TypeError(f"permit weight must be an int, got {type(weight).__name__}")
        if weight < 1 or weight > self.capacity:
            raise ValueError(f"permit weight must be between 1 and {self.capacity}, got {weight}")

    def try_take(self, weight: int) -> bool:
        """Take ``weight`` permits now if nobody is queued ahead and enough are free."""
        if not self.queue and self.available >= weight:
            self.available -= weight
            return True
        return False

    def give_back(self, weight: int) -> Sequence[_Waiter]:
        """Return ``weight`` permits; grant queued waiters in FIFO order; return those granted."""
        if weight.__class__ is not int and not _is_int(weight):
            raise TypeError(f"permit weight must be an int, got {type(weight).__name__}")
        if weight < 1:  # a release of 0 or less would take permits nobody acquired
            raise ValueError(f"permit weight must be at least 1, got {weight}")
        self.available += weight
        if self.available > self.capacity:
            self.available -= weight
            raise RuntimeError("released more permits than were acquired")
        return self.grant() if self.queue else ()

    def grant(self) -> list[_Waiter]:
        """Grant from the head of the queue while permits suffice."""
        granted: list[_Waiter] = []
        while self.queue and self.queue[0].weight <= self.available:
            waiter = self.queue.popleft()
            self.available -= waiter.weight
            waiter.granted = True
            granted.append(waiter)
        return granted

    @property
    def in_use(self) -> int:
        """Permits currently held."""
        return self.capacity - self.available


@final
class Semaphore:
    """A weighted semaphore for Trio. ``async with sem.permits(n): ...`` releases on every exit."""

    __slots__ = ("_ledger",)

    def __init__(self, capacity: int) -> None:
        """``capacity``: the total permits, an int of at least 1 (``TypeError``/``ValueError``)."""
        self._ledger = PermitLedger(capacity)

    @property
    def capacity(self) -> int:
        """Total permits."""
        return self._ledger.capacity

    @property
    def available(self) -> int:
        """Permits free right now."""
        return self._ledger.available

    @property
    def waiting(self) -> int:
        """Tasks queued for permits."""
        return len(self._ledger.queue)

    async def acquire(self, weight: int = 1) -> None:
        """Wait for ``weight`` permits (FIFO).

        Cancellation: always a checkpoint. If cancelled while waiting, nothing is held afterwards —
        including the race where permits were granted just as the cancellation arrived.
        """
        ledger = self._ledger
        ledger.check_weight(weight)
        await trio.lowlevel.checkpoint_if_cancelled()
        if ledger.try_take(weight):
            await trio.lowlevel.cancel_shielded_checkpoint()
            return
        waiter = _Waiter(weight)
        ledger.queue.append(waiter)
        try:
            await waiter.event.wait()
        except BaseException:
            if waiter.granted:
                self._wake(ledger.give_back(weight))
            else:
                ledger.queue.remove(waiter)
                # Leaving the head of the queue may unblock those behind us.
                self._wake(ledger.grant())
            raise

    def acquire_nowait(self, weight: int = 1) -> bool:
        """Take ``weight`` permits if free right now (and nobody waits); return whether taken."""
        ledger = self._ledger
        if weight.__class__ is not int or weight != 1:  # one permit is always a valid weight
            ledger.check_weight(weight)
        return ledger.try_take(weight)

    def release(self, weight: int = 1) -> None:
        """Return ``weight`` permits, waking queued tasks in FIFO order."""
        self._wake(self._ledger.give_back(weight))

    @staticmethod
    def _wake(waiters: Sequence[_Waiter]) -> None:
        for waiter in waiters:
            waiter.event.set()

    @asynccontextmanager
    async def permits(self, weight: int = 1) -> AsyncIterator[None]:
        """Hold ``weight`` permits for the block; released on success, error and cancellation."""
        await self.acquire(weight)
        try:
            yield
        finally:
            self.release(weight)
