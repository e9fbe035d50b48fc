"""Batch bookkeeping, exactly (pure, no Trio; ``make mutate`` runs these against
``effectagent/engine/_scheduler.py``): what a ledger refuses, in words, and the worker pool's
count of workers on their way — zero or one, never more."""

from __future__ import annotations

import pytest

from effectagent.core import ToolSuccess
from effectagent.engine._scheduler import BatchLedger, WorkerPool


def test_a_batch_with_a_repeated_call_id_is_refused_in_words() -> None:
    with pytest.raises(ValueError, match=r"^tool call IDs in a batch must be unique$"):
        BatchLedger(["a", "b", "a"])


def test_a_ledger_says_which_slot_an_outcome_was_settled_at_and_what_is_missing() -> None:
    ledger = BatchLedger(["a", "b"])
    with pytest.raises(ValueError, match=r"^outcome for 'b' settled at the slot of 'a'$"):
        ledger.settle(0, ToolSuccess("b", "tool", 1))
    ledger.settle(0, ToolSuccess("a", "tool", 1))
    with pytest.raises(RuntimeError, match=r"^tool call 'a' settled twice$"):
        ledger.settle(0, ToolSuccess("a", "tool", 2))
    with pytest.raises(RuntimeError, match=r"^1 tool call\(s\) of the batch have not settled$"):
        ledger.commit()


def test_a_pool_starts_with_no_worker_on_its_way_and_asks_for_one_at_a_time() -> None:
    pool = WorkerPool(3)
    assert (pool.workers, pool.starting, pool.queued) == (1, 0, 3)
    assert pool.take() == 0
    assert pool.call_waits()
    assert (pool.workers, pool.starting) == (2, 1)
    assert not pool.call_waits()  # one is already on its way
    assert (pool.workers, pool.starting) == (2, 1)
    pool.worker_started()
    assert (pool.workers, pool.starting) == (2, 0)
    assert pool.take() == 1
    assert pool.call_waits()
    assert pool.starting == 1


def test_a_pool_needs_a_call() -> None:
    with pytest.raises(ValueError, match=r"^a worker pool needs at least one call, got 0$"):
        WorkerPool(0)
