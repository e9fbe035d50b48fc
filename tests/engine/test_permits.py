"""The run's permit pool (``engine._permits``): the bookkeeping, property-tested without Trio, and
the Trio pool under cancellation."""

from __future__ import annotations

import pytest
import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    consumes,
    invariant,
    rule,
    run_state_machine_as_test,
)

from effectagent.engine._permits import Permit, PermitBook, PermitPool, _Waiter


class PermitBookMachine(RuleBasedStateMachine):
    """Takes, waits, gives up and returns in every order; the book's promises hold after each."""

    held = Bundle("held")
    waiting = Bundle("waiting")

    def __init__(self) -> None:
        super().__init__()
        self.book = PermitBook(3)
        self.outstanding: list[Permit] = []  # permits given out and not returned
        self.queued: list[_Waiter] = []

    @rule(target=held, data=st.data())
    def take(self, data: st.DataObject) -> Permit:
        lender = self._lender(data)
        permit = self.book.try_take(lender)
        if permit is None:
            # Taken only when neither the lender's permit nor a pool permit could be had.
            assert lender is None or lender.lent
            assert self.book.free == 0 or self.book.queue
            waiter = self.book.enqueue(lender)
            self.queued.append(waiter)
            return Permit()  # a placeholder that is never returned (see ``give_back``)
        self.outstanding.append(permit)
        return permit

    @rule(permit=consumes(held))
    def give_back(self, permit: Permit) -> None:
        if permit not in self.outstanding or permit.lent:
            return  # a placeholder, or a lender whose call is still waiting on its loan
        self.outstanding.remove(permit)
        for waiter in self.book.give_back(permit):
            self._granted(waiter)

    @rule(data=st.data())
    def a_waiter_gives_up(self, data: st.DataObject) -> None:
        """Its task was cancelled — before or after the book granted it a permit."""
        if not self.queued:
            return
        waiter = data.draw(st.sampled_from(self.queued))
        self.queued.remove(waiter)
        for other in self.book.withdraw(waiter):
            self._granted(other)

    @rule()
    def granted_waiters_take_their_permits(self) -> None:
        for waiter in list(self.queued):
            if waiter.granted is not None:
                self.queued.remove(waiter)
                self.outstanding.append(waiter.granted)

    def _granted(self, waiter: _Waiter) -> None:
        assert waiter.granted is not None
        assert waiter not in self.book.queue

    def _all_held(self) -> list[Permit]:
        """Permits held: given out, or granted to a waiter whose task has not run yet."""
        pending = [w.granted for w in self.queued if w.granted is not None]
        return self.outstanding + pending

    def _lender(self, data: st.DataObject) -> Permit | None:
        if not self.outstanding or data.draw(st.booleans()):
            return None
        return data.draw(st.sampled_from(self.outstanding))

    @invariant()
    def pool_permits_never_exceed_the_capacity(self) -> None:
        book = self.book
        own = [p for p in self._all_held() if p.lender is None]
        assert 0 <= book.free <= book.capacity
        assert book.in_use == len(own)

    @invariant()
    def a_permit_is_lent_to_one_borrower_at_most(self) -> None:
        held = self._all_held()
        for permit in held:
            borrowers = [p for p in held if p.lender is permit]
            assert len(borrowers) == (1 if permit.lent else 0)

    @invariant()
    def nobody_waits_who_could_be_granted(self) -> None:
        for waiter in self.book.queue:
            assert waiter.granted is None
            assert self.book.free == 0
            assert waiter.lender is None or waiter.lender.lent or waiter.lender.returned


def test_the_permit_book_keeps_its_promises_in_every_order() -> None:
    run_state_machine_as_test(
        PermitBookMachine,
        settings=settings(max_examples=150, stateful_step_count=40, deadline=None),
    )


def test_a_permit_is_returned_once_and_never_while_lent() -> None:
    book = PermitBook(1)
    outer = book.try_take(None)
    assert outer is not None
    inner = book.try_take(outer)
    assert inner is not None
    assert inner.lender is outer
    assert outer.lent
    with pytest.raises(RuntimeError, match="lent"):
        book.give_back(outer)
    book.give_back(inner)
    book.give_back(outer)
    with pytest.raises(RuntimeError, match="twice"):
        book.give_back(outer)
    assert book.free == 1


@settings(max_examples=60, deadline=None)
@given(
    capacity=st.integers(1, 3),
    outer_calls=st.integers(1, 4),
    inner_calls=st.lists(st.integers(0, 4), min_size=4, max_size=4),
    waits=st.lists(st.integers(0, 3), min_size=16, max_size=16),
)
def test_calls_that_call_tools_never_exceed_the_pool_and_always_finish(
    capacity: int, outer_calls: int, inner_calls: list[int], waits: list[int]
) -> None:
    """Outer calls each hold a permit and make inner calls at once (as a Code Mode program's
    ``Promise.all`` does): handlers doing work at once never exceed the capacity — a lender waits
    on its loan — and every call finishes (no deadlock, whatever the capacity)."""
    pool = PermitPool(capacity)
    working = 0
    peak = 0
    finished = 0

    async def handler(lender: Permit | None, index: int, inner: int) -> None:
        nonlocal working, peak, finished
        permit = await pool.take(lender)
        try:
            working += 1
            peak = max(peak, working)
            await trio.sleep(waits[index % len(waits)])
            if inner:
                working -= 1  # waiting on its inner calls, not working
                async with trio.open_nursery() as nursery:
                    for j in range(inner):
                        nursery.start_soon(handler, permit, index * 5 + j + 1, 0)
                working += 1
            finished += 1
        finally:
            working -= 1
            pool.give_back(permit)

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            for i in range(outer_calls):
                nursery.start_soon(handler, None, i, inner_calls[i])

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    assert finished == outer_calls + sum(inner_calls[:outer_calls])
    assert peak <= capacity
    assert pool.in_use == 0


async def test_a_cancelled_waiter_holds_nothing_afterwards(
    autojump_clock: trio.testing.MockClock,
) -> None:
    pool = PermitPool(1)
    first = await pool.take()
    with trio.move_on_after(1):
        await pool.take()
    assert pool.in_use == 1
    pool.give_back(first)
    assert pool.in_use == 0
    # Granted just as the cancellation arrives: the taker gets it (and gives it back), or gets
    # nothing — never a permit that nobody holds.
    first = await pool.take()
    async with trio.open_nursery() as nursery:

        async def wait_then_be_cancelled(task_status: trio.TaskStatus[trio.CancelScope]) -> None:
            with trio.CancelScope() as scope:
                task_status.started(scope)
                permit = await pool.take()
                pool.give_back(permit)

        scope = await nursery.start(wait_then_be_cancelled)
        pool.give_back(first)  # grants the waiter ...
        scope.cancel()  # ... which is cancelled before it runs again
    assert pool.in_use == 0
