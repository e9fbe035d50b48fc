"""Waiting for approval or a worker's stop spends no retry budget, and a store that fails for a
moment fails no run.

* A run that suspends for approval again and again, decided each time, is never dead-lettered:
  the claims that took it to a suspension spent nothing of its budget (``attempts`` still counts
  every claim).
* Nor is a run whose workers were stopped (cancelled: SIGTERM, a drain) more often than the
  budget allows: a claim given back by a stopping worker is no failed attempt.
* A read or write the store fails for a moment (a connection lost, the write lock held too long)
  puts the submission back in the queue — the next claim carries its run on from its records —
  instead of letting the engine record the run ``failed`` with ``StorageFailed`` once the store
  answers again: a failure that no later try would have met, settled for good.

Each test runs on both backends; none sleeps for a state (the workers run until idle, bounded).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import attrs
import trio

from capabilities.durable import (
    DurableQueue,
    DurableWorker,
    LedgerFacts,
    LogFacts,
    RetryBudget,
    WorkerOptions,
    classify,
)
from capabilities.storage import Database
from capabilities.storage._errors import ReadFailed, WriteFailed
from effectagent.ai import ModelRequest, Tool, ToolCallContext, Toolkit, ToolMessage
from effectagent.core import Agent
from effectagent.testing import FunctionModel, Turn

from .helpers import Stores, rows

FAST = WorkerOptions(
    poll_interval=0.02, lease=5.0, retry=RetryBudget(max_attempts=2, base=0.01, cap=0.02)
)


@attrs.frozen
class Amount:
    n: int


transfer = Tool("transfer", "Move money.", parameters=Amount, success=str, needs_approval=True)
MOVER = Agent("mover", "Move the money asked for.", toolkit=Toolkit(transfer))
ECHO = Agent("echo", "Repeat what you are told.")


async def _moved(params: Amount, call: ToolCallContext) -> str:
    return "moved"


async def test_a_run_suspended_for_approval_more_often_than_its_budget_is_never_dead_lettered(
    store: Stores,
) -> None:
    rounds = FAST.retry.max_attempts + 3

    def respond(request: ModelRequest) -> Turn | str:
        done = sum(isinstance(message, ToolMessage) for message in request.messages)
        if done < rounds:
            return Turn.tool_calls(("transfer", {"n": done}))
        return "all moved"

    layer = Toolkit(transfer).handlers(transfer.bind(_moved)) + FunctionModel.layer(respond)
    async with store.open() as db:
        q = DurableQueue(db)
        receipt = await q.submit(
            "mover", "move it", conversation_id="c", idempotency_key="k", principal="p"
        )
        sid = receipt.submission_id
        with trio.fail_after(60):
            for _ in range(rounds):
                await DurableWorker(db, layer, [MOVER], options=FAST).run(until_idle=True)
                found = await q.status(sid)
                assert found.status == "suspended", found  # not dead
                [request] = await q.waiting(sid)
                await q.decide(sid, request.tool_call_id, True, author="boss")
            await DurableWorker(db, layer, [MOVER], options=FAST).run(until_idle=True)
        found = await q.status(sid)
        assert (found.status, found.settlement) == ("completed", "final")
        assert found.attempts == rounds + 1  # every claim is counted, none was spent
        assert await q.verify("c") == ()


def test_the_classifier_spends_the_claims_the_ledger_counts() -> None:
    """The claims that took the run to a suspension are left out of ``LedgerFacts.attempts`` by
    the ledger (its ``suspended`` audit rows: the log has no record of a suspension); the
    classifier spends what is left."""
    budget = RetryBudget(max_attempts=2)
    decided = LogFacts(records=9, responded=True, suspended=True)
    assert classify(LedgerFacts("queued", attempts=2), decided, retry=budget).action == "resume"
    assert classify(LedgerFacts("queued", attempts=3), decided, retry=budget).action == "dead"
    settled = LogFacts(records=4, responded=True)
    assert classify(LedgerFacts("active", attempts=3), settled, retry=budget).action == "dead"


async def test_workers_stopped_more_often_than_the_budget_during_one_run_do_not_dead_letter_it(
    store: Stores,
) -> None:
    stuck = trio.Event()  # never set: each worker but the last is stopped in its model call

    async with store.open() as db:
        q = DurableQueue(db)
        receipt = await q.submit(
            "echo", "m", conversation_id="c", idempotency_key="k", principal="p"
        )
        stops = FAST.retry.max_attempts + 2
        with trio.fail_after(60):
            for stop in range(1, stops + 1):
                entered = trio.Event()

                async def hang(request: ModelRequest, entered: trio.Event = entered) -> str:
                    entered.set()
                    await stuck.wait()
                    return "never"

                worker = DurableWorker(db, FunctionModel.layer(hang), [ECHO], options=FAST)
                async with trio.open_nursery() as nursery:

                    async def work(worker: DurableWorker = worker) -> None:
                        await worker.run(until_idle=True)  # returns if it finds nothing to run
                        nursery.cancel_scope.cancel()

                    nursery.start_soon(work)
                    await entered.wait()
                    nursery.cancel_scope.cancel()  # as on SIGTERM: its lanes are let go
                found = await q.status(receipt.submission_id)
                assert (found.status, found.attempts) == ("queued", stop)  # counted, not dead
            done = FunctionModel.layer(lambda request: "done")
            await DurableWorker(db, done, [ECHO], options=FAST).run(until_idle=True)
        found = await q.status(receipt.submission_id)
        assert (found.status, found.attempts) == ("completed", stops + 1)
        assert await q.verify("c") == ()
        kinds = [k for (k,) in await rows(db, "SELECT kind FROM durable_audit ORDER BY id")]
        assert kinds.count("stopped") == stops


class _FlakyStore:
    """A database whose next fenced append (the log's) fails as a lost connection does, once
    :attr:`armed` — what a store restarting for a moment does to a write; all else is the
    database's."""

    def __init__(self, database: Database) -> None:
        self._database = database
        self.armed = False
        self.failed = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._database, name)

    def write(self, work: Callable[[Any], Any], **options: Any) -> Awaitable[Any]:
        if self.armed and getattr(work, "__name__", "") == "fenced":
            self.armed = False
            self.failed += 1
            return self._fail()
        return self._database.write(work, **options)

    async def _fail(self) -> Any:
        await trio.lowlevel.checkpoint()
        raise WriteFailed("the server closed the connection while the write was sent")


async def test_a_write_the_store_fails_for_a_moment_puts_the_run_back_instead_of_failing_it(
    store: Stores,
) -> None:
    async with store.open() as db:
        flaky = _FlakyStore(db)
        calls = 0

        def respond(request: ModelRequest) -> str:
            nonlocal calls
            calls += 1
            if calls == 1:
                flaky.armed = True  # the append of this answer fails; the store is back after
            return "done"

        q = DurableQueue(db)
        receipt = await q.submit(
            "echo", "m", conversation_id="c", idempotency_key="k", principal="p"
        )
        worker = DurableWorker(flaky, FunctionModel.layer(respond), [ECHO], options=FAST)
        with trio.fail_after(60):
            await worker.run(until_idle=True)
        assert flaky.failed == 1
        found = await q.status(receipt.submission_id)
        assert (found.status, found.diagnostic) == ("completed", None)
        assert calls == 2  # the answer lost with the write was asked for again
        types = [t for (t,) in await rows(db, "SELECT type FROM records ORDER BY seq")]
        assert types.count("RunCompletedRecord") == 1
        assert "RunFailedRecord" not in types  # no StorageFailed, recorded or settled
        audit = [k for (k,) in await rows(db, "SELECT kind FROM durable_audit ORDER BY id")]
        assert audit == ["requeue", "recovery"]
        assert await q.verify("c") == ()


class _ReadsFailStore:
    """A database whose first :attr:`failing` reads fail as a lost connection does (a server
    restarting: ``ReadFailed`` once its one retry met the same) — whichever read they are; all
    else is the database's."""

    def __init__(self, database: Database, failing: int) -> None:
        self._database = database
        self.failing = failing
        self.failed = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._database, name)

    def read(self, work: Callable[[Any], Any]) -> Awaitable[Any]:
        if self.failed < self.failing:
            self.failed += 1
            return self._fail()
        return self._database.read(work)

    async def _fail(self) -> Any:
        await trio.lowlevel.checkpoint()
        raise ReadFailed("terminating connection due to administrator command")


async def test_a_worker_until_idle_outlives_reads_the_store_fails_for_a_moment(
    store: Stores,
) -> None:
    """The first reads a worker makes fail (its look for overdue settlements, its look for work,
    its look whether anything is left): a worker run ``until_idle`` raised ``ReadFailed`` out of
    ``run`` when the last of those failed — a store restarting for a moment stopped the worker,
    on PostgreSQL when pg_terminate_backend met it twice. It looks again at the next poll, runs
    the submission and ends idle."""
    async with store.open() as db:
        q = DurableQueue(db)
        receipt = await q.submit(
            "echo", "m", conversation_id="c", idempotency_key="k", principal="p"
        )
        flaky = _ReadsFailStore(db, failing=3)
        model = FunctionModel.layer(lambda request: "done")
        with trio.fail_after(60):
            await DurableWorker(flaky, model, [ECHO], options=FAST).run(until_idle=True)
        assert flaky.failed == 3
        found = await q.status(receipt.submission_id)
        assert (found.status, found.attempts) == ("completed", 1)
        assert await q.verify("c") == ()
