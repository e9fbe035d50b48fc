"""The worker in-process, on a real database file and the real engine with a model computed from
each request: runs, FIFO lanes, settlement, lost lanes, unknown agents, the retry budget."""

from __future__ import annotations

import logging
import time
from typing import Any

import attrs
import pytest
import trio

from capabilities.durable._model import MAX_MESSAGE_BYTES, RetryBudget, WorkerOptions
from capabilities.durable._queue import DurableQueue
from capabilities.durable._serve import Serving
from capabilities.durable._worker import _SERVING, DurableWorker, _FencedLog
from capabilities.state import AgentStateService
from capabilities.state._layers import sqlite_state
from capabilities.storage import open_database
from capabilities.storage._errors import LaneLost
from effectagent.ai import AuthenticationFailed, ModelRequest, UserMessage
from effectagent.core import Agent, RunCompletedRecord, RunFailedRecord
from effectagent.effect import Layer
from effectagent.engine import ConversationLogService, InMemoryConversationLog
from effectagent.testing import FunctionModel, Turn

from .helpers import Clock, HandWorker, Stores, rows

AGENT = Agent("echo", "Repeat what you are told.")
FAST = WorkerOptions(poll_interval=0.02, lease=5.0, retry=RetryBudget(max_attempts=3, base=0.01))


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
    store: Stores,
) -> None:
    seen: list[str] = []
    async with store.open() as db:
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
    store: Stores,
) -> None:
    async with store.open() as db:
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
    store: Stores,
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

    async with store.open() as db:
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
    store: Stores,
) -> None:
    async with store.open() as db:
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


async def test_a_worker_whose_lease_ran_out_is_fenced_out_and_its_run_stopped_unsettled(
    store: Stores,
) -> None:
    entered = trio.Event()
    stuck = trio.Event()  # never set: the first worker's model hangs

    async def hang(request: ModelRequest) -> str:
        entered.set()
        await stuck.wait()
        return "never"

    async with store.open() as db:
        q = DurableQueue(db)
        submission_id = await _submit(q, "c", "m")
        first = DurableWorker(db, FunctionModel.layer(hang), [AGENT], options=FAST)
        # the second worker's clock is past the first one's lease: to it, the first has died
        ahead = DurableWorker(
            db, echo_model(), [AGENT], options=FAST, clock=lambda: time.time() + 60
        )
        with trio.fail_after(60):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(first.run)
                await entered.wait()
                [(first_epoch,)] = await rows(db, "SELECT epoch FROM lanes")
                await ahead.run(until_idle=True)
                # the first worker finds its lane gone at its next renewal and stops the run
                for _ in range(1000):  # bounded by the fail_after above
                    if not first.held:
                        break
                    await trio.sleep(FAST.poll_interval)
                assert first.held == ()
                nursery.cancel_scope.cancel()
        found = await q.status(submission_id)
        assert (found.status, found.attempts) == ("completed", 2)
        assert await q.verify("c") == ()
        # nothing of the first worker's after the takeover: one run start, one terminal record
        types = [t for (t,) in await rows(db, "SELECT type FROM records ORDER BY seq")]
        assert types.count("UserInputRecorded") == 1
        assert types.count("RunCompletedRecord") == 1
        assert "RunFailedRecord" not in types  # its interruption was refused
        [(epoch,)] = await rows(db, "SELECT epoch FROM lanes")
        assert epoch > first_epoch


async def test_a_record_that_cannot_be_read_sets_its_conversation_aside_and_others_go_on(
    store: Stores,
) -> None:
    async with store.open() as db:
        q = DurableQueue(db)
        broken = await _submit(q, "broken", "m1")
        fine = await _submit(q, "fine", "m2")
        await _plant_foreign_run(db, "broken", "run_other")
        # a claim that died after its run started, on a log whose record is damaged
        await db.write(
            lambda conn: conn.execute(
                "UPDATE submissions SET status = 'active', attempts = 1, started_at = 1, "
                "base_seq = 0 WHERE submission_id = ?",
                (broken,),
            )
        )
        await db.write(
            lambda conn: conn.execute(
                "UPDATE records SET body = '{not json' WHERE conversation_id = 'broken' AND seq = 2"
            )
        )
        with trio.fail_after(60):
            await DurableWorker(db, echo_model(), [AGENT], options=FAST).run(until_idle=True)
        assert (await q.status(fine)).status == "completed"
        assert (await q.status(broken)).status == "queued"  # set aside, not lost
        [quarantined] = await q.quarantined()
        assert (quarantined.conversation_id, quarantined.seq) == ("broken", 2)
        # repaired, and woken: it is run again
        await _plant_foreign_run(db, "elsewhere", "run_other")
        await db.write(
            lambda conn: conn.execute(
                "UPDATE records SET body = (SELECT body FROM records WHERE "
                "conversation_id = 'elsewhere' AND seq = 2) WHERE conversation_id = 'broken' "
                "AND seq = 2"
            )
        )
        await q.wake("broken")
        assert await q.quarantined() == ()
        with trio.fail_after(60):
            await DurableWorker(db, echo_model(), [AGENT], options=FAST).run(until_idle=True)
        assert (await q.status(broken)).status == "completed"


async def test_a_worker_logs_settlements_overdue_past_its_threshold(
    store: Stores, caplog: pytest.LogCaptureFixture
) -> None:
    async with store.open() as db:
        q = DurableQueue(db, clock=lambda: time.time() - 7200)  # admitted two hours ago
        submission_id = await _submit(q, "c", "canary-input-7f3a")
        recent = await DurableQueue(db).submit(
            "echo", "x", conversation_id="d", idempotency_key="k", principal="p"
        )
        worker = DurableWorker(
            db, echo_model(), [AGENT], options=attrs.evolve(FAST, overdue_after=3600.0)
        )
        with caplog.at_level(logging.WARNING, logger="effectagent.capabilities"):
            with trio.fail_after(60):
                await worker.run(until_idle=True)
        lines = [r.getMessage() for r in caplog.records if "overdue" in r.getMessage()]
        assert len(lines) == 1
        assert submission_id in lines[0]
        assert recent.submission_id not in lines[0]
        assert "canary-input-7f3a" not in lines[0]  # identifiers only


async def test_a_run_that_fails_settles_failed_with_its_bounded_diagnostic(store: Stores) -> None:
    def refuse(request: ModelRequest) -> Turn:
        return Turn.fail(AuthenticationFailed("the key was refused " + "x" * 40_000))

    async with store.open() as db:
        q = DurableQueue(db)
        submission_id = await _submit(q, "c", "m")
        with trio.fail_after(60):
            await DurableWorker(db, FunctionModel.layer(refuse), [AGENT], options=FAST).run(
                until_idle=True
            )
        found = await q.status(submission_id)
        assert (found.status, found.attempts) == (
            "failed",
            1,
        )  # a failure is an outcome, not retried
        assert found.diagnostic is not None
        assert found.diagnostic.tag == "ModelFailed"
        assert "AuthenticationFailed" in found.diagnostic.message
        assert len(found.diagnostic.message.encode()) <= MAX_MESSAGE_BYTES
        assert await q.verify("c") == ()


async def test_a_secret_in_a_submission_reaches_no_record_audit_row_or_log_line(
    store: Stores, caplog: pytest.LogCaptureFixture
) -> None:
    canary = "sk-canary-5b1e9d"
    async with store.open() as db:
        q = DurableQueue(db)
        first = await _submit(q, "c", f"my key is {canary}", key="1")
        await _submit(q, "c", f"again {canary}", key="2")
        worker = DurableWorker(db, echo_model(), [AGENT], options=FAST, secrets=[canary])
        with caplog.at_level(logging.DEBUG):
            with trio.fail_after(60):
                await worker.run(until_idle=True)
        assert (await q.status(first)).status == "completed"
        found: list[str] = []
        for table in ("records", "submissions", "durable_audit", "lanes"):
            found.extend(str(row) for row in await rows(db, f"SELECT * FROM {table}"))
        dump = "\n".join(found)
        assert "my key is" in dump  # the records are there …
        assert canary not in dump  # … redacted; the settled input cleared
        assert canary not in caplog.text


@pytest.mark.parametrize(
    ("secrets", "message"),
    [
        ("sk-canary-5b1e9d", "^secrets must be a sequence of str, not a lone str"),
        (b"sk-canary-5b1e9d", "^secrets must be a sequence of str, not a lone bytes"),
        (["sk-canary-5b1e9d", 5], "^each of secrets must be a str, got int$"),
    ],
)
async def test_a_lone_secret_is_refused_when_the_worker_is_made_without_echoing_it(
    secrets: Any, message: str
) -> None:
    """Taken letter by letter, one secret would redact every ``s``, ``k``, ``-``... of every
    run, and the worker only found out when it ran the first."""
    async with open_database(":memory:") as db:
        with pytest.raises(TypeError, match=message) as caught:
            DurableWorker(db, echo_model(), [AGENT], options=FAST, secrets=secrets)
    assert "canary" not in str(caught.value)


async def test_an_abort_reaches_the_worker_running_it_which_stops_the_run_unsettled(
    store: Stores,
) -> None:
    entered = trio.Event()
    stuck = trio.Event()  # never set

    async def hang(request: ModelRequest) -> str:
        entered.set()
        await stuck.wait()
        return "never"

    async with store.open() as db:
        q = DurableQueue(db)
        submission_id = await _submit(q, "c", "m")
        after = await _submit(q, "c", "next")
        worker = DurableWorker(db, FunctionModel.layer(hang), [AGENT], options=FAST)
        with trio.fail_after(60):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(worker.run)
                await entered.wait()
                aborted = await q.abort(submission_id, author="ops", reason="stop it")
                assert (aborted.status, aborted.settlement) == ("aborted", "final")
                for _ in range(1000):  # bounded by the fail_after above
                    if not any(lane.submission_id == submission_id for lane in worker.held):
                        break
                    await trio.sleep(FAST.poll_interval)
                nursery.cancel_scope.cancel()
        found = await q.status(submission_id)
        assert (found.status, found.seq) == ("aborted", 3)
        types = [t for (t,) in await rows(db, "SELECT type FROM records ORDER BY seq")]
        # the abort's record is the run's one terminal record: its interruption was refused
        assert types[:3] == ["ConversationCreated", "UserInputRecorded", "RunFailedRecord"]
        assert types.count("RunFailedRecord") == 1
        assert (await q.status(after)).status in ("queued", "active", "completed")
        assert await q.verify("c") == ()


async def test_each_append_is_fenced_by_the_claim_of_the_run_that_makes_it(
    store: Stores,
) -> None:
    clock = Clock()
    async with store.open() as db:
        q = DurableQueue(db, clock=clock)
        await _submit(q, "c", "m")
        hand = HandWorker(db, clock)
        [earlier] = await hand.claim(lease=5)
        clock.advance(10)  # its lease ran out: the conversation is claimed again
        [later] = await hand.claim(lease=5)
        log = _FencedLog(db)
        record = RunFailedRecord(
            conversation_id="c", run_id="run_x", error=None, reason="interrupted", at=1.0
        )
        old = Serving(earlier.lane, earlier.submission.submission_id, trio.CancelScope())
        new = Serving(later.lane, later.submission.submission_id, trio.CancelScope())
        # the earlier claim's run, late with its interruption, while the later claim runs
        token = _SERVING.set(old)
        with pytest.raises(LaneLost):
            await log.append("c", [record])
        _SERVING.reset(token)
        with pytest.raises(LaneLost):  # a task that serves no claim writes nothing
            await log.append("c", [record])
        token = _SERVING.set(new)
        assert await log.append("c", [record]) == 1
        new.lost = True  # given up (the worker stops): refused before the lane is even read
        with pytest.raises(LaneLost):
            await log.append("c", [record])
        _SERVING.reset(token)
        # and a conversation whose claim is still finishing here is not claimed again
        await q.abort(later.submission.submission_id, author="ops", reason="r")
        await _submit(q, "c", "next", key="n")
        assert await hand.claim(exclude=("c",)) == []
        assert len(await hand.claim()) == 1


async def test_the_application_s_layer_builds_on_the_worker_s_services_and_may_not_replace_them(
    store: Stores,
) -> None:

    async with store.open() as db:
        q = DurableQueue(db)
        submission_id = await _submit(q, "c", "m")
        # agent state needs the database and the Conversation Log: the worker's are given to it
        layer = echo_model() + sqlite_state()
        assert AgentStateService in layer.provides
        with trio.fail_after(60):
            await DurableWorker(db, layer, [AGENT], options=FAST).run(until_idle=True)
        assert (await q.status(submission_id)).status == "completed"
        unfenced = Layer.succeed(ConversationLogService, InMemoryConversationLog())
        with pytest.raises(ValueError, match=r"effectagent\.ConversationLog"):
            DurableWorker(db, echo_model() + unfenced, [AGENT])
