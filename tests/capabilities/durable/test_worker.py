"""The worker in-process, on a real database file and the real engine with a model computed from
each request: runs, FIFO lanes, settlement, lost lanes, unknown agents, the retry budget."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import trio

from capabilities.durable._model import RetryPolicy, WorkerOptions
from capabilities.durable._queue import DurableQueue
from capabilities.durable._worker import DurableWorker
from effectagent.ai import ModelRequest, UserMessage
from effectagent.core import Agent, RunCompletedRecord
from effectagent.testing import FunctionModel

from .helpers import database, rows

AGENT = Agent("echo", "Repeat what you are told.")
FAST = WorkerOptions(poll_interval=0.02, lease=5.0, retry=RetryPolicy(max_attempts=3, base=0.01))


def _last_user_text(request: ModelRequest) -> str:
    for message in reversed(request.messages):
        if isinstance(message, UserMessage):
            return "".join(getattr(part, "text", "") for part in message.content)
    return ""


def echo_model(seen: list[str] | None = None) -> Any:
    def respond(request: ModelRequest) -> str:
        text = _last_user_text(request)
        if seen is not None:
            seen.append(text)
        return f"echo: {text}"

    return FunctionModel.layer(respond)


async def _submit(q: DurableQueue, conversation: str, text: str, key: str | None = None) -> str:
    receipt = await q.submit(
        "echo", text, conversation_id=conversation, idempotency_key=key or text, principal="p"
    )
    return receipt.submission_id


async def test_a_worker_runs_each_submission_in_fifo_order_and_settles_it_once(
    tmp_path: Path,
) -> None:
    seen: list[str] = []
    async with database(tmp_path / "d.db") as db:
        q = DurableQueue(db)
        ids = [await _submit(q, f"c{i % 3}", f"m{i}") for i in range(9)]
        worker = DurableWorker(db, echo_model(seen), [AGENT], options=FAST)
        with trio.fail_after(60):
            await worker.run(until_idle=True)
        for index, submission_id in enumerate(ids):
            found = await q.status(submission_id)
            assert (found.status, found.settlement, found.attempts) == ("completed", "final", 1)
            answer = await q.answer(submission_id)
            assert answer is not None
            assert isinstance(answer.record, RunCompletedRecord)
            assert answer.record.output == f"echo: m{index}"
        for conversation in ("c0", "c1", "c2"):
            assert await q.verify(conversation) == ()
            order = [s for s in seen if int(s[1:]) % 3 == int(conversation[1:])]
            assert order == sorted(order, key=lambda s: int(s[1:]))  # FIFO within a conversation
        # the input is kept only until the submission is settled
        assert await rows(db, "SELECT count(*) FROM submissions WHERE input IS NOT NULL") == [(0,)]
        assert await rows(db, "SELECT count(*) FROM lanes WHERE worker_id IS NOT NULL") == [(0,)]


async def test_an_agent_the_worker_does_not_know_fails_the_submission_with_a_diagnostic(
    tmp_path: Path,
) -> None:
    async with database(tmp_path / "d.db") as db:
        q = DurableQueue(db)
        receipt = await q.submit(
            "ghost", "x", conversation_id="c", idempotency_key="k", principal="p"
        )
        worker = DurableWorker(db, echo_model(), [AGENT], options=FAST)
        with trio.fail_after(60):
            await worker.run(until_idle=True)
        found = await q.status(receipt.submission_id)
        assert (found.status, found.settlement) == ("failed", "final")
        assert found.diagnostic is not None
        assert found.diagnostic.tag == "AgentNotFound"
        assert "'ghost'" in found.diagnostic.message
        assert "'echo'" in found.diagnostic.message
        assert await q.verify("c") == ()


async def test_a_worker_that_stops_lets_its_lanes_go_and_another_finishes_the_work(
    tmp_path: Path,
) -> None:
    entered = trio.Event()
    release = trio.Event()
    calls = 0

    async def slow(request: ModelRequest) -> str:
        nonlocal calls
        calls += 1
        entered.set()
        await release.wait()
        return "late"

    async with database(tmp_path / "d.db") as db:
        q = DurableQueue(db)
        submission_id = await _submit(q, "c", "m")
        first = DurableWorker(db, FunctionModel.layer(slow), [AGENT], options=FAST)
        with trio.fail_after(60):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(first.run)
                await entered.wait()
                nursery.cancel_scope.cancel()
            # its run's interruption was fenced out: nothing terminal, the submission waits again
            found = await q.status(submission_id)
            assert (found.status, found.settlement) == ("queued", None)
            assert await rows(
                db,
                "SELECT count(*) FROM records WHERE type IN ('RunFailedRecord', 'RunCompletedRecord')",
            ) == [(0,)]
            second = DurableWorker(db, echo_model(), [AGENT], options=FAST)
            await second.run(until_idle=True)
        found = await q.status(submission_id)
        assert (found.status, found.attempts) == ("completed", 2)
        assert await q.verify("c") == ()
        [(_, detail)] = await rows(
            db, "SELECT kind, detail FROM durable_audit WHERE kind = 'recovery'"
        )
        assert '"action":"resume"' in detail


async def test_a_submission_that_keeps_failing_to_start_is_dead_lettered_and_retry_revives_it(
    tmp_path: Path,
) -> None:
    async with database(tmp_path / "d.db") as db:
        q = DurableQueue(db)
        submission_id = await _submit(q, "c", "m")
        # a run ID already in the conversation's log: every attempt to start it is refused
        await db.write(
            lambda conn: conn.execute(
                "UPDATE submissions SET run_id = 'run_taken' WHERE submission_id = ?",
                (submission_id,),
            )
        )
        worker = DurableWorker(db, echo_model(), [AGENT], options=FAST)
        await _plant_foreign_run(db, "c", "run_taken")
        with trio.fail_after(60):
            await worker.run(until_idle=True)
        found = await q.status(submission_id)
        assert (found.status, found.attempts) == ("dead", FAST.retry.max_attempts + 1)
        kinds = [k for (k,) in await rows(db, "SELECT kind FROM durable_audit ORDER BY id")]
        assert kinds.count("requeue") == FAST.retry.max_attempts
        revived = await q.retry(submission_id)
        assert (revived.status, revived.attempts) == ("queued", 0)


async def _plant_foreign_run(db: Any, conversation: str, run_id: str) -> None:
    from capabilities.storage._log import SqliteConversationLog, write_records
    from effectagent.core import ConversationCreated, Record, UserInputRecorded

    records: list[Record] = [
        ConversationCreated(conversation_id=conversation, agent="echo", at=1.0),
        UserInputRecorded(
            conversation_id=conversation,
            run_id=run_id,
            input_id="i",
            kind="user",
            text="t",
            author="p",
            at=1.0,
        ),
    ]
    encoded = SqliteConversationLog(db).encode(conversation, records)
    await db.write(lambda conn: write_records(conn, conversation, encoded))
