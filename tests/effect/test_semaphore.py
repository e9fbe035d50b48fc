"""The weighted FIFO semaphore: capacity is never exceeded, grants are FIFO, nothing leaks."""

from __future__ import annotations

import math
from typing import Literal

import attrs
import pytest
import trio
import trio.testing
from hypothesis import given
from hypothesis import strategies as st

from effectagent.effect import Semaphore
from effectagent.effect._semaphore import PermitLedger, _Waiter

# ---- the pure ledger (no Trio running) -----------------------------------------------------------

Op = tuple[Literal["request", "release", "cancel"], int]


@given(
    capacity=st.integers(1, 6),
    ops=st.lists(
        st.tuples(st.sampled_from(["request", "release", "cancel"]), st.integers(0, 50)),
        max_size=60,
    ),
)
def test_ledger_never_overcommits_grants_fifo_and_never_strands_a_grantable_head(
    capacity: int, ops: list[Op]
) -> None:
    ledger = PermitLedger(capacity)
    holders: list[int] = []  # weights currently held
    queued: list[_Waiter] = []  # our view of who waits, in request order
    requested: list[_Waiter] = []  # every waiter ever queued, in order
    granted: list[_Waiter] = []  # every waiter ever granted, in grant order
    cancelled: set[int] = set()

    for kind, n in ops:
        if kind == "request":
            weight = 1 + n % capacity
            if ledger.try_take(weight):
                assert not queued, "nobody may jump the queue"
                holders.append(weight)
            else:
                waiter = _Waiter(weight)
                ledger.queue.append(waiter)
                queued.append(waiter)
                requested.append(waiter)
        elif kind == "release" and holders:
            weight = holders.pop(n % len(holders))
            newly = ledger.give_back(weight)
            granted.extend(newly)
        elif kind == "cancel" and queued:
            waiter = queued[n % len(queued)]
            ledger.queue.remove(waiter)
            queued.remove(waiter)
            cancelled.add(id(waiter))
            granted.extend(ledger.grant())
        else:
            continue
        for waiter in granted:
            if waiter in queued:
                assert waiter.granted
                queued.remove(waiter)
                holders.append(waiter.weight)
        # Conservation and capacity.
        assert ledger.available + sum(holders) == capacity
        assert 0 <= ledger.available <= capacity
        assert ledger.in_use == sum(holders) <= capacity
        # No lost wake-up: a head that fits would have been granted.
        assert not queued or queued[0].weight > ledger.available
        assert list(ledger.queue) == queued

    # FIFO: grants happen in request order, skipping only the cancelled.
    assert granted == [w for w in requested if id(w) not in cancelled][: len(granted)]


def test_ledger_rejects_impossible_weights_and_overreleases() -> None:
    with pytest.raises(ValueError, match="capacity"):
        PermitLedger(0)
    ledger = PermitLedger(3)
    for weight in (0, -1, 4):
        with pytest.raises(ValueError, match="between 1 and 3"):
            ledger.check_weight(weight)
    assert ledger.try_take(2)
    with pytest.raises(RuntimeError, match="released more"):
        ledger.give_back(3)
    assert ledger.available == 1  # the failed release changed nothing
    for weight in (0, -1):  # would take permits nobody acquired
        with pytest.raises(ValueError, match="at least 1"):
            ledger.give_back(weight)
    assert ledger.available == 1


# ---- the Trio semaphore: a generated mix of tasks ------------------------------------------------


@attrs.frozen
class Job:
    weight: int
    start: float  # mock seconds before requesting
    hold: int  # mock seconds holding the permits
    outcome: Literal["ok", "raise", "cancel-waiting", "cancel-holding"]
    patience: float  # for cancel-waiting: how long it waits before giving up


class JobFailed(Exception):
    pass


@attrs.define
class Books:
    capacity: int
    in_use: int = 0
    max_in_use: int = 0
    next_request: int = 0
    request_index: dict[int, int] = attrs.Factory(dict)
    pending: set[int] = attrs.Factory(set)
    resolved_at: dict[int, float] = attrs.Factory(dict)
    # For each acquirer: (time, earlier requests still pending when it resumed).
    overtaken: dict[int, tuple[float, set[int]]] = attrs.Factory(dict)
    acquired: list[int] = attrs.Factory(list)
    gave_up: list[int] = attrs.Factory(list)


async def _job(sem: Semaphore, books: Books, job_id: int, job: Job) -> None:
    await trio.sleep(job.start)
    books.request_index[job_id] = books.next_request
    books.next_request += 1
    books.pending.add(job_id)
    with trio.CancelScope() as whole, trio.CancelScope() as waiting:
        if job.outcome == "cancel-waiting":
            waiting.deadline = trio.current_time() + job.patience
        try:
            async with sem.permits(job.weight):
                now = trio.current_time()
                waiting.deadline = math.inf
                books.pending.discard(job_id)
                books.resolved_at[job_id] = now
                mine = books.request_index[job_id]
                books.overtaken[job_id] = (
                    now,
                    {j for j in books.pending if books.request_index[j] < mine},
                )
                books.acquired.append(job_id)
                books.in_use += job.weight
                assert books.in_use <= books.capacity
                books.max_in_use = max(books.max_in_use, books.in_use)
                try:
                    if job.outcome == "cancel-holding":
                        whole.deadline = now + job.hold - 0.5
                    await trio.sleep(job.hold)
                    if job.outcome == "raise":
                        raise JobFailed(job_id)
                finally:
                    books.in_use -= job.weight
        except JobFailed:
            pass
        finally:
            if job_id in books.pending:  # gave up (or was cancelled) while waiting
                books.pending.discard(job_id)
                books.resolved_at[job_id] = trio.current_time()
                books.gave_up.append(job_id)


async def _monitor(sem: Semaphore, books: Books) -> None:
    while True:
        # The ledger's count includes tasks granted but not yet resumed; ours does not.
        assert 0 <= sem.available <= sem.capacity
        assert books.in_use <= sem.capacity - sem.available
        await trio.sleep(0.5)


jobs = st.builds(
    Job,
    weight=st.integers(1, 4),
    start=st.sampled_from([0, 0, 0.5, 1, 2, 3]),
    hold=st.integers(1, 4),
    outcome=st.sampled_from(["ok", "raise", "cancel-waiting", "cancel-holding"]),
    patience=st.sampled_from([0.5, 1.5, 3.5]),
)


@given(capacity=st.integers(1, 4), job_list=st.lists(jobs, max_size=8))
def test_capacity_is_never_exceeded_grants_are_fifo_and_nothing_leaks(
    capacity: int, job_list: list[Job]
) -> None:
    job_list = [attrs.evolve(j, weight=min(j.weight, capacity)) for j in job_list]
    sem = Semaphore(capacity)
    books = Books(capacity)

    async def main() -> None:
        # Every job is done within ~40 mock seconds; a leaked permit would block some job forever,
        # which this turns into a failure instead of a hang.
        with trio.fail_after(100):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_monitor, sem, books)
                async with trio.open_nursery() as workers:
                    for job_id, job in enumerate(job_list):
                        workers.start_soon(_job, sem, books, job_id, job)
                nursery.cancel_scope.cancel()

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))

    assert sem.available == capacity
    assert sem.waiting == 0
    assert books.in_use == 0
    assert books.max_in_use <= capacity
    assert sorted(books.acquired + books.gave_up) == list(range(len(job_list)))
    for job_id in books.gave_up:
        assert job_list[job_id].outcome == "cancel-waiting"
    # FIFO: whoever was ahead in the queue when a task got its permits was served (or gave up)
    # in the same instant — nobody is overtaken across a wait.
    for job_id, (when, ahead) in books.overtaken.items():
        for earlier in ahead:
            assert books.resolved_at[earlier] == when, (earlier, "was overtaken by", job_id)


# ---- specific behaviours -------------------------------------------------------------------------


async def test_weights_outside_one_to_capacity_are_rejected() -> None:
    sem = Semaphore(3)
    for weight in (0, -2, 4):
        with pytest.raises(ValueError):
            await sem.acquire(weight)
        with pytest.raises(ValueError):
            sem.acquire_nowait(weight)
        with pytest.raises(ValueError):
            async with sem.permits(weight):
                pass
    assert sem.available == 3
    with pytest.raises(ValueError):
        Semaphore(0)


async def _hold_until(
    sem: Semaphore, weight: int, order: list[str], name: str, release: trio.Event
) -> None:
    async with sem.permits(weight):
        order.append(name)
        await release.wait()


async def test_waiters_are_served_in_request_order() -> None:
    sem = Semaphore(1)
    order: list[str] = []
    releases = {name: trio.Event() for name in "abcde"}
    async with trio.open_nursery() as nursery:
        for name in "abcde":
            nursery.start_soon(_hold_until, sem, 1, order, name, releases[name])
            await trio.testing.wait_all_tasks_blocked()
        for name in "abcde":
            assert order[-1] == name
            releases[name].set()
            await trio.testing.wait_all_tasks_blocked()
    assert order == list("abcde")


async def test_a_large_request_is_not_starved_by_small_ones() -> None:
    sem = Semaphore(2)
    order: list[str] = []
    releases = {name: trio.Event() for name in ("small-1", "large", "small-2")}
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_hold_until, sem, 1, order, "small-1", releases["small-1"])
        await trio.testing.wait_all_tasks_blocked()
        nursery.start_soon(_hold_until, sem, 2, order, "large", releases["large"])
        await trio.testing.wait_all_tasks_blocked()
        nursery.start_soon(_hold_until, sem, 1, order, "small-2", releases["small-2"])
        await trio.testing.wait_all_tasks_blocked()
        # One permit is free, but the large request is ahead: nobody overtakes it.
        assert order == ["small-1"]
        assert sem.available == 1
        assert not sem.acquire_nowait(1)
        releases["small-1"].set()
        await trio.testing.wait_all_tasks_blocked()
        assert order == ["small-1", "large"]
        releases["large"].set()
        await trio.testing.wait_all_tasks_blocked()
        assert order == ["small-1", "large", "small-2"]
        releases["small-2"].set()
    assert sem.available == 2


async def test_a_cancelled_head_unblocks_those_behind_it() -> None:
    sem = Semaphore(2)
    order: list[str] = []
    hold, rest = trio.Event(), trio.Event()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_hold_until, sem, 1, order, "holder", hold)
        await trio.testing.wait_all_tasks_blocked()
        head_scope = trio.CancelScope()

        async def head() -> None:
            with head_scope:
                await _hold_until(sem, 2, order, "head", rest)

        nursery.start_soon(head)
        await trio.testing.wait_all_tasks_blocked()
        nursery.start_soon(_hold_until, sem, 1, order, "behind", rest)
        await trio.testing.wait_all_tasks_blocked()
        assert order == ["holder"]
        assert sem.waiting == 2
        head_scope.cancel()
        await trio.testing.wait_all_tasks_blocked()
        assert order == ["holder", "behind"]
        assert sem.waiting == 0
        hold.set()
        rest.set()
    assert sem.available == 2


async def test_a_grant_racing_a_cancellation_leaks_nothing() -> None:
    sem = Semaphore(1)
    await sem.acquire()
    outcome: list[str] = []
    waiter_scope = trio.CancelScope()  # entered by the waiter, cancelled from here

    async def waiter() -> None:
        with waiter_scope:
            await sem.acquire()
            outcome.append("acquired")  # the race must not hand the permit over
        outcome.append("cancelled" if waiter_scope.cancelled_caught else "?")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(waiter)
        await trio.testing.wait_all_tasks_blocked()
        assert sem.waiting == 1
        # Cancel first, then grant — with no checkpoint in between, so the waiter is granted the
        # permit after its cancellation was delivered but before it could run.
        waiter_scope.cancel()
        sem.release()
        assert sem.available == 0  # the permit went to the (doomed) waiter
    assert outcome == ["cancelled"]
    assert sem.available == 1
    assert sem.waiting == 0
    assert sem.acquire_nowait()


async def test_a_grant_before_cancellation_hands_over_the_permit() -> None:
    sem = Semaphore(1)
    await sem.acquire()
    held: list[int] = []
    waiter_scope = trio.CancelScope()

    async def waiter() -> None:
        with waiter_scope:
            async with sem.permits():
                held.append(sem.available)
                await trio.sleep_forever()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(waiter)
        await trio.testing.wait_all_tasks_blocked()
        sem.release()  # granted and rescheduled first ...
        waiter_scope.cancel()  # ... so the cancellation lands while it holds the permit
    assert held == [0]
    assert sem.available == 1


async def test_acquire_is_a_checkpoint_even_when_permits_are_free() -> None:
    sem = Semaphore(2)
    with trio.CancelScope() as cs:
        cs.cancel()
        await sem.acquire()
    assert cs.cancelled_caught
    assert sem.available == 2


async def test_permits_are_released_on_error() -> None:
    sem = Semaphore(3)
    seen: list[int] = []

    async def fail_while_holding() -> None:
        async with sem.permits(3):
            seen.append(sem.available)
            raise JobFailed

    with pytest.raises(JobFailed):
        await fail_while_holding()
    assert seen == [0]
    assert sem.available == 3


async def test_releasing_more_than_acquired_is_an_error() -> None:
    sem = Semaphore(1)
    with pytest.raises(RuntimeError):
        sem.release()
    assert sem.available == 1


@pytest.mark.parametrize("bad", [1.5, 2.0, math.inf, True, "3", None])
async def test_capacities_and_weights_are_whole_numbers(bad: object) -> None:
    """Permits are counted in ints: a float (or a bool, or anything else) would be taken and
    leave fractional permits behind."""
    with pytest.raises(TypeError, match="capacity must be an int"):
        Semaphore(bad)  # type: ignore[arg-type]
    sem = Semaphore(3)
    with pytest.raises(TypeError, match="permit weight must be an int"):
        await sem.acquire(bad)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="permit weight must be an int"):
        sem.acquire_nowait(bad)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="permit weight must be an int"):
        async with sem.permits(bad):  # type: ignore[arg-type]
            pass
    await sem.acquire(2)
    with pytest.raises(TypeError, match="permit weight must be an int"):
        sem.release(bad)  # type: ignore[arg-type]
    assert (sem.available, sem.waiting) == (1, 0)
    sem.release(2)
    assert sem.available == 3
