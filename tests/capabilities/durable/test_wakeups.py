"""Wake-ups: an idle worker looks for work as soon as some may have arrived — on PostgreSQL when
another process admits it (``NOTIFY`` in the admitting write), on SQLite when this opened
database does — and, a wake-up lost, at its next poll."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import psycopg
import trio
import trio.testing

from capabilities.durable._model import WorkerOptions
from capabilities.durable._queue import DurableQueue
from capabilities.durable._store import admit
from capabilities.durable._worker import DurableWorker
from capabilities.storage import Database
from capabilities.storage._postgres import open_postgres
from capabilities.storage._postgres_listen import channel
from tests.postgres import postgres_database, postgres_url

from .helpers import Stores
from .test_worker import AGENT, echo_model

#: A poll interval no test waits out: a look for work before it is a wake-up's.
NEVER = 3600.0


@asynccontextmanager
async def running(db: Database, poll_interval: float) -> AsyncIterator[DurableWorker]:
    """A worker on ``db`` running in the background, once it has looked for work once."""
    worker = DurableWorker(
        db, echo_model(), [AGENT], options=WorkerOptions(poll_interval=poll_interval)
    )
    async with trio.open_nursery() as nursery:
        await nursery.start(worker.run)
        await worker.looked(0)  # its first look found nothing; now it waits
        yield worker
        nursery.cancel_scope.cancel()


@asynccontextmanager
async def submitter(store: Stores, db: Database) -> AsyncIterator[Database]:
    """Where the work is admitted from: on PostgreSQL another opening of the schema (another
    process, as far as the server knows); on SQLite the same opened database (its wake-ups do
    not cross processes)."""
    if store.backend == "sqlite":
        yield db
        return
    async with store.open() as other:
        yield other


async def test_an_admission_wakes_an_idle_worker_long_before_its_poll(store: Stores) -> None:
    async with store.open() as db, running(db, NEVER) as worker, submitter(store, db) as other:
        receipt = await DurableQueue(other).submit(
            "echo", "hi", conversation_id="c", idempotency_key="k", principal="p"
        )
        with trio.fail_after(60):  # a bound for a failure; the poll is an hour away
            looks = await worker.looked(1)
        found = await DurableQueue(db).status(receipt.submission_id)
        assert found.attempts == 1  # that second look claimed it
        assert looks >= 2


async def test_a_lost_wake_up_delays_the_work_by_one_poll(
    store: Stores, mock_clock: trio.testing.MockClock
) -> None:
    async with store.open() as db, running(db, NEVER) as worker:
        # admitted by a write that wakes no one (as if its notification were lost)
        receipt = await db.write(
            lambda conn: admit(
                conn,
                submission_id="sub_lost",
                run_id="run_lost",
                principal="p",
                conversation_id="c",
                idempotency_key="k",
                digest="d",
                agent="echo",
                text="hi",
                mode="queue",
                now=1.0,
            )
        )
        assert worker.looks == 1
        mock_clock.jump(NEVER)  # the poll interval passes: the worker looks again
        assert await worker.looked(1) == 2
        found = await DurableQueue(db).status(receipt.submission_id)
        assert found.attempts == 1  # claimed at that poll


def test_each_schema_has_a_channel_of_its_own_within_the_server_s_limit() -> None:
    names = {channel(schema) for schema in ("effectagent", "t_1", "t_2", "x" * 63)}
    assert len(names) == 4
    assert all(len(name.encode()) <= 63 for name in names)


async def test_a_listener_whose_connection_dropped_listens_again_and_says_to_look() -> None:
    async with postgres_database() as db:
        wake_ups = await db.listen()
        listener = db._listener
        assert listener is not None
        listener.reconnect = 0.0
        pid = listener.backend_pid
        with psycopg.connect(postgres_url(), autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
        with trio.fail_after(60):  # a bound for a failure
            await wake_ups.wait(0)  # connected again: what was sent meanwhile is lost, look
            assert listener.backend_pid not in (None, pid)
            seen = wake_ups.count
            async with open_postgres(postgres_url(), schema=db.schema) as other:
                await other.write(lambda conn: None, wake=True)
            await wake_ups.wait(seen)  # and it hears again
