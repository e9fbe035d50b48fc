"""Commands and operations on stored data: abort, rebuilding the ledger from the log, verify,
explain, the overdue and Unknown lists — driven by a hand-made worker (``helpers.HandWorker``)."""

from __future__ import annotations

import json
import logging

import pytest

from capabilities.durable._queue import DurableQueue
from capabilities.storage._errors import LaneLost
from capabilities.storage._lanes import read_lane
from effectagent.core import ApprovalRequest, ToolApprovalRequested

from .helpers import Clock, HandWorker, Stores, rows


async def _one(
    q: DurableQueue, conversation: str = "c", key: str = "k", mode: str = "queue"
) -> str:
    receipt = await q.submit(
        "a",
        f"text {key}",
        conversation_id=conversation,
        idempotency_key=key,
        principal="p",
        mode=mode,  # type: ignore[arg-type]
    )
    return receipt.submission_id


async def test_an_inactive_submission_is_aborted_at_once_and_an_abort_is_idempotent(
    store: Stores,
) -> None:
    clock = Clock()
    async with store.open() as db:
        q = DurableQueue(db, clock=clock)
        submission_id = await _one(q)
        aborted = await q.abort(submission_id, author="ops", reason="not needed", abort_id="a1")
        assert (aborted.status, aborted.settlement, aborted.seq) == ("aborted", "final", None)
        assert aborted.diagnostic is not None
        assert aborted.diagnostic.tag == "Aborted"
        assert "ops" in aborted.diagnostic.message
        assert await q.abort(submission_id, author="ops", reason="again", abort_id="a1") == aborted
        assert await q.abort(submission_id, author="bob", reason="other", abort_id="a2") == aborted
        assert await rows(db, "SELECT count(*) FROM records") == [(0,)]  # it never ran
        assert await rows(db, "SELECT abort_id FROM aborts ORDER BY 1") == [("a1",), ("a2",)]
        assert await q.verify("c") == ()
        # nothing to claim: the lane is free for what comes next
        assert await HandWorker(db, clock).claim() == []


async def test_an_abort_never_rewrites_a_completed_settlement(store: Stores) -> None:
    clock = Clock()
    async with store.open() as db:
        q = DurableQueue(db, clock=clock)
        submission_id = await _one(q)
        worker = HandWorker(db, clock)
        [claimed] = await worker.claim()
        seq = await worker.run_to_completion(claimed)
        after = await q.abort(submission_id, author="ops", reason="too late")
        assert (after.status, after.seq, after.diagnostic) == ("completed", seq, None)
        assert await rows(db, "SELECT count(*) FROM records") == [(4,)]


async def test_an_active_run_is_aborted_in_its_log_before_its_worker_learns_and_is_fenced_out(
    store: Stores,
) -> None:
    clock = Clock()
    async with store.open() as db:
        q = DurableQueue(db, clock=clock)
        submission_id = await _one(q)
        worker = HandWorker(db, clock)
        [claimed] = await worker.claim()
        await worker.start(claimed)
        await worker.respond(claimed, ("call-1", "charge"))
        after = await q.abort(submission_id, author="ops", reason="wrong customer")
        assert (after.status, after.settlement, after.seq) == ("aborted", "final", 4)
        [(kind, body)] = await rows(db, "SELECT type, body FROM records WHERE seq = 4")
        assert kind == "RunFailedRecord"
        assert json.loads(body)["reason"] == "aborted"
        # the worker is fenced out: its next write is refused whole, its renewal finds the lane gone
        with pytest.raises(LaneLost):
            await worker.prepare(claimed, "call-1", "charge")
        lane = await db.read(lambda conn: read_lane(conn, "c"))
        assert lane is not None
        assert lane.epoch == claimed.lane.epoch + 1
        assert lane.worker_id is None  # and free for the next submission
        assert await rows(db, "SELECT count(*) FROM records") == [(4,)]
        assert await q.verify("c") == ()


async def test_a_call_under_way_when_its_run_is_aborted_is_listed_unknown(store: Stores) -> None:
    """Prepared and not settled when the abort came, the call may have happened (a charge
    made, its result not recorded yet): it was listed nowhere, so no one looked."""
    clock = Clock()
    async with store.open() as db:
        q = DurableQueue(db, clock=clock)
        submission_id = await _one(q)
        worker = HandWorker(db, clock)
        [claimed] = await worker.claim()
        await worker.start(claimed)
        await worker.respond(claimed, ("call-1", "charge"), ("call-2", "lookup"))
        await worker.prepare(claimed, "call-1", "charge")  # call-2 never started
        after = await q.abort(submission_id, author="ops", reason="wrong customer")
        assert (after.status, after.settlement) == ("aborted", "final")
        listed = [(c.submission_id, c.tool_call_id, c.tool_name) for c in await q.unknown()]
        assert listed == [(submission_id, "call-1", "charge")]
        await q.abort(submission_id, author="ops", reason="again")  # listed once
        await q.rebuild_ledger("c")
        assert len(await q.unknown()) == 1
        assert await q.verify("c") == ()


async def test_aborting_a_run_whose_end_is_recorded_settles_it_as_the_log_says(
    store: Stores,
) -> None:
    clock = Clock()
    async with store.open() as db:
        q = DurableQueue(db, clock=clock)
        submission_id = await _one(q)
        worker = HandWorker(db, clock)
        [claimed] = await worker.claim()
        await worker.start(claimed)
        await worker.respond(claimed)
        seq = await worker.complete(claimed)  # recorded, not settled yet
        after = await q.abort(submission_id, author="ops", reason="race")
        assert (after.status, after.seq) == ("completed", seq)
        with pytest.raises(LaneLost):
            await worker.settle(claimed, "completed", seq)
        assert await q.verify("c") == ()


async def test_the_ledger_is_rebuilt_from_the_log(store: Stores) -> None:
    clock = Clock()
    async with store.open() as db:
        q = DurableQueue(db, clock=clock)
        first, second, third = [await _one(q, key=k) for k in ("1", "2", "3")]
        worker = HandWorker(db, clock)
        [one] = await worker.claim()
        await worker.run_to_completion(one)
        [two] = await worker.claim()
        await worker.start(two)
        failed_at = await worker.fail(two, reason="ModelFailed")
        await worker.settle(two, "failed", failed_at)
        before = {s.submission_id: (s.status, s.seq) for s in await q.submissions("c")}
        assert before[third] == ("queued", None)
        # damage the ledger: every settlement forgotten
        await db.write(
            lambda conn: conn.execute(
                "UPDATE submissions SET status = 'active', settlement = NULL, reserved = NULL, "
                "outcome = NULL WHERE submission_id IN (?, ?)",
                (first, second),
            )
        )
        problems = await q.verify("c")
        assert any(first in problem and "terminal record" in problem for problem in problems)
        changes = await q.rebuild_ledger("c")
        assert {(c["submission"], c["to"]) for c in changes} == {
            (first, "completed"),
            (second, "failed"),
        }
        after = {s.submission_id: (s.status, s.seq) for s in await q.submissions("c")}
        assert after == before
        assert await q.verify("c") == ()
        assert await q.rebuild_ledger("c") == []  # nothing left to change


async def test_verify_finds_duplicate_and_late_records(store: Stores) -> None:
    clock = Clock()
    async with store.open() as db:
        q = DurableQueue(db, clock=clock)
        await _one(q)
        worker = HandWorker(db, clock)
        [claimed] = await worker.claim()
        await worker.start(claimed)
        await worker.respond(claimed)
        seq = await worker.complete(claimed)
        await worker.fail(claimed)  # a second terminal record: what a stale worker must never do
        await worker.settle(claimed, "completed", seq)
        problems = await q.verify("c")
        assert any("2 terminal records" in problem for problem in problems)
        assert any("after its terminal record" in problem for problem in problems)


async def test_explain_shows_the_ledger_the_run_s_tail_the_audit_and_what_recovery_would_do(
    store: Stores,
) -> None:
    clock = Clock()
    async with store.open() as db:
        q = DurableQueue(db, clock=clock)
        submission_id = await _one(q)
        worker = HandWorker(db, clock)
        [claimed] = await worker.claim(lease=5)
        await worker.start(claimed)
        await worker.respond(claimed, ("call-1", "charge"))
        await worker.prepare(claimed, "call-1", "charge")
        clock.advance(10)  # the worker died: its lease ran out
        explained = await q.explain(submission_id, tail=2)
        assert explained.submission.status == "active"
        assert [type(e.record).__name__ for e in explained.tail] == [
            "ModelResponseRecorded",
            "ToolCallPrepared",
        ]
        decision = explained.decision
        assert (decision.crash_point, decision.action) == ("after-prepare", "resume")
        assert decision.calls == (("call-1", "charge", "unknown"),)


async def test_overdue_settlements_are_listed_and_logged_with_identifiers_only(
    store: Stores, caplog: pytest.LogCaptureFixture
) -> None:
    clock = Clock()
    async with store.open() as db:
        q = DurableQueue(db, clock=clock)
        old = await _one(q, key="old")
        clock.advance(100)
        await _one(q, conversation="d", key="new")
        with caplog.at_level(logging.WARNING, logger="effectagent.capabilities"):
            found = await q.overdue(50)
        assert [s.submission_id for s in found] == [old]
        [line] = [r.getMessage() for r in caplog.records if "overdue" in r.getMessage()]
        assert old in line
        assert "text old" not in line  # never the input


async def test_the_unknown_list_reads_what_settlements_recorded(store: Stores) -> None:
    clock = Clock()
    async with store.open() as db:
        q = DurableQueue(db, clock=clock)
        submission_id = await _one(q)
        await db.write(
            lambda conn: conn.execute(
                "INSERT INTO durable_audit (submission_id, conversation_id, epoch, at, kind, "
                "detail) VALUES (?, 'c', 1, 5.0, 'unknown', ?)",
                (submission_id, json.dumps({"tool_call_id": "call-9", "tool": "charge"})),
            )
        )
        [call] = await q.unknown()
        assert (call.submission_id, call.tool_call_id, call.tool_name) == (
            submission_id,
            "call-9",
            "charge",
        )


async def test_explain_a_submission_that_never_ran(store: Stores) -> None:
    async with store.open() as db:
        q = DurableQueue(db, clock=Clock())
        submission_id = await _one(q)
        explained = await q.explain(submission_id)
        assert (explained.submission.status, explained.tail, explained.audit) == ("queued", (), ())
        assert (explained.decision.crash_point, explained.decision.action) == (
            "after-admission",
            "run",
        )


async def test_a_suspended_or_dead_submission_is_aborted_in_its_log_and_frees_its_conversation(
    store: Stores,
) -> None:
    clock = Clock()
    async with store.open() as db:
        q = DurableQueue(db, clock=clock)
        suspended, dead, behind = [await _one(q, key=k) for k in ("1", "2", "3")]
        worker = HandWorker(db, clock)
        [first] = await worker.claim()
        await worker.start(first)
        await worker.respond(first, ("call-1", "transfer"))
        await worker.append(
            first,
            [
                ToolApprovalRequested(
                    conversation_id="c",
                    run_id=first.submission.run_id,
                    request=ApprovalRequest(
                        run_id=first.submission.run_id,
                        conversation_id="c",
                        agent="payer",
                        tool_name="transfer",
                        tool_call_id="call-1",
                        summary="Transfer",
                        targets=(),
                        risk="high",
                        input_preview={},
                        expires_at=0.0,
                        arguments_digest="d",
                    ),
                    at=1.0,
                )
            ],
        )
        await db.write(
            lambda conn: conn.execute(
                "UPDATE submissions SET status = 'suspended' WHERE submission_id = ?", (suspended,)
            )
        )
        await db.write(lambda conn: conn.execute("UPDATE lanes SET worker_id = NULL"))
        assert await worker.claim() == []  # the suspended head holds its conversation's FIFO
        after = await q.abort(suspended, author="ops", reason="no decision is coming")
        assert (after.status, after.seq) == ("aborted", 5)
        [second] = await worker.claim()
        assert second.submission.submission_id == dead
        await worker.start(second)
        await db.write(
            lambda conn: conn.execute(
                "UPDATE submissions SET status = 'dead' WHERE submission_id = ?", (dead,)
            )
        )
        await db.write(lambda conn: conn.execute("UPDATE lanes SET worker_id = NULL"))
        assert await worker.claim() == []  # a dead head holds it too, until retried or aborted
        after = await q.abort(dead, author="ops", reason="give up")
        assert after.status == "aborted"
        [third] = await worker.claim()
        assert third.submission.submission_id == behind
        assert await q.verify("c") == ()


async def test_a_joining_submission_s_abort_waits_for_the_run_it_was_handed_to(
    store: Stores,
) -> None:
    clock = Clock()
    async with store.open() as db:
        q = DurableQueue(db, clock=clock)
        head = await _one(q, key="1")
        joining = await _one(q, key="2", mode="join")
        worker = HandWorker(db, clock)
        [claimed] = await worker.claim()
        await db.write(
            lambda conn: conn.execute(
                "UPDATE submissions SET status = 'joining', joined_into = ? "
                "WHERE submission_id = ?",
                (head, joining),
            )
        )
        after = await q.abort(joining, author="ops", reason="never mind")
        assert (after.status, after.settlement) == ("joining", None)  # the run may take it yet
        await worker.run_to_completion(claimed)  # … it did not
        found = await q.status(joining)
        assert (found.status, found.settlement) == ("aborted", "final")
        assert await q.verify("c") == ()


async def test_aborting_a_submission_behind_the_head_leaves_the_run_going_alone(
    store: Stores,
) -> None:
    clock = Clock()
    async with store.open() as db:
        q = DurableQueue(db, clock=clock)
        await _one(q, key="1")
        behind = await _one(q, key="2")
        worker = HandWorker(db, clock)
        [head] = await worker.claim()
        await worker.start(head)
        after = await q.abort(behind, author="ops", reason="not this one")
        assert (after.status, after.seq) == ("aborted", None)
        await worker.respond(head)  # the head's worker still holds its lane
        seq = await worker.complete(head)
        assert await worker.settle(head, "completed", seq)
        assert await q.verify("c") == ()
