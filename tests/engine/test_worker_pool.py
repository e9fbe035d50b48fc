"""WorkerPool, the pure bookkeeping of which task runs which call of a batch — no Trio, no engine.

A simulation drives the pool through every interleaving hypothesis finds: a worker's call may run
on, wait, resume or finish, and a worker the pool asked for may start at any later moment. After
every step: each call was taken once, in declaration order; the pool counts exactly the workers
that exist; there are never more workers than calls; and no call is held up by waiting ones —
whenever every worker's call is waiting, nothing is queued or a new worker is on its way.
"""

from __future__ import annotations

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from effectagent.engine._scheduler import WorkerPool


@attrs.define
class _Worker:
    call: int | None = None  # the call it runs; None while it is starting
    waiting: bool = False


def _take(pool: WorkerPool, worker: _Worker, taken: list[int], live: list[_Worker]) -> None:
    index = pool.take()
    if index is None:
        live.remove(worker)
        return
    taken.append(index)
    worker.call, worker.waiting = index, False


@given(calls=st.integers(1, 12), data=st.data())
def test_every_interleaving_takes_each_call_once_in_order_and_never_starves(
    calls: int, data: st.DataObject
) -> None:
    pool = WorkerPool(calls)
    taken: list[int] = []
    first = _Worker()
    live = [first]
    _take(pool, first, taken, live)  # the batch's own task takes the first call at once
    starting: list[_Worker] = []
    finished = 0
    for _ in range(400):
        if not live:
            break
        worker = data.draw(st.sampled_from(live))
        if worker in starting:
            starting.remove(worker)
            pool.worker_started()
            _take(pool, worker, taken, live)
        elif worker.waiting:
            worker.waiting = data.draw(st.booleans())  # resumes, or is still waiting
        else:
            action = data.draw(st.sampled_from(["wait", "finish"]))
            if action == "wait":
                worker.waiting = True
                if pool.call_waits():
                    helper = _Worker()
                    live.append(helper)
                    starting.append(helper)
            else:
                finished += 1
                _take(pool, worker, taken, live)

        assert taken == list(range(len(taken)))  # once each, in declaration order
        assert pool.queued == calls - len(taken)
        assert pool.workers == len(live)
        assert pool.workers <= calls
        if live and all(w.waiting for w in live if w not in starting) and not starting:
            assert pool.queued == 0, "calls queued behind waiting calls, and no worker coming"
    if not live:  # every worker left: every call was taken and finished
        assert taken == list(range(calls))
        assert finished == calls


def test_calls_that_never_wait_need_no_worker_but_the_batch_task() -> None:
    pool = WorkerPool(10)
    assert [pool.take() for _ in range(10)] == list(range(10))
    assert pool.take() is None
    assert pool.workers == 0


def test_only_one_worker_is_starting_at_a_time() -> None:
    pool = WorkerPool(5)
    assert pool.take() == 0
    assert pool.call_waits() is True
    assert pool.call_waits() is False  # the one starting will take the next call
    pool.worker_started()
    assert pool.take() == 1
    assert pool.call_waits() is True
    assert pool.workers == 3


def test_a_wait_with_nothing_queued_starts_no_worker() -> None:
    pool = WorkerPool(1)
    assert pool.take() == 0
    assert pool.call_waits() is False
    assert pool.workers == 1


def test_a_pool_needs_a_call() -> None:
    with pytest.raises(ValueError, match="at least one call"):
        WorkerPool(0)
