"""Approval suspension and decisions, joined input, and durable steps — through the worker, on a
real database file and the real engine."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import attrs
import pytest
import trio

from capabilities.durable._model import NoPendingApproval, RetryBudget, WorkerOptions
from capabilities.durable._queue import DurableQueue
from capabilities.durable._steps import SqliteStepStore
from capabilities.durable._worker import DurableWorker, _joinable
from capabilities.storage._errors import LaneLost
from capabilities.storage._lanes import check_lane
from effectagent.ai import (
    ModelRequest,
    StepKey,
    Tool,
    ToolCallContext,
    Toolkit,
    UserMessage,
)
from effectagent.core import Agent
from effectagent.effect import Layer, ServiceKey
from effectagent.engine import RunEnding, RunInfo, observe_runs
from effectagent.testing import FunctionModel, Turn

from .helpers import Clock, HandWorker, Stores, rows

FAST = WorkerOptions(poll_interval=0.02, lease=5.0)


@attrs.frozen
class Amount:
    cents: int


transfer = Tool("transfer", "Move money.", parameters=Amount, success=str, needs_approval=True)
charge = Tool("charge", "Charge a card.", parameters=Amount, success=str, idempotent=True)


def _last(request: ModelRequest) -> Any:
    return request.messages[-1]


def _text(message: Any) -> str:
    return "".join(getattr(part, "text", "") for part in message.content)


def _payer(respond: Any, transfers: list[int]) -> tuple[Agent, Layer]:
    """The payer agent and its layer: ``respond`` plays the model; each transfer that runs is
    noted in ``transfers``."""

    async def handle(params: Amount, call: ToolCallContext) -> str:
        transfers.append(params.cents)
        return "ok"

    agent = Agent("payer", "Pay.", toolkit=Toolkit(transfer))
    return agent, Toolkit(transfer).handlers(transfer.bind(handle)) + FunctionModel.layer(respond)


async def _until(predicate: Any, what: str) -> None:
    """Wait (bounded) for a state another task of this test brings about."""
    with trio.fail_after(30):
        for _ in range(3000):
            if await predicate():
                return
            await trio.sleep(0.01)
    raise AssertionError(f"not reached: {what}")


async def test_a_run_waiting_for_approval_suspends_without_a_lane_and_a_decision_resumes_it(
    store: Stores,
) -> None:
    model_calls: list[str] = []
    transfers: list[int] = []

    def respond(request: ModelRequest) -> Turn | str:
        last = _last(request)
        model_calls.append(type(last).__name__)
        if isinstance(last, UserMessage):
            return Turn.tool_calls(("transfer", {"cents": 500}, "call-1"))
        return "transferred"

    agent, layer = _payer(respond, transfers)
    async with store.open() as db:
        q = DurableQueue(db)
        receipt = await q.submit(
            "payer", "pay", conversation_id="c", idempotency_key="k", principal="p"
        )
        sid = receipt.submission_id
        with trio.fail_after(60):
            await DurableWorker(db, layer, [agent], options=FAST).run(until_idle=True)
        found = await q.status(sid)
        assert (found.status, found.settlement) == ("suspended", None)
        assert await rows(db, "SELECT worker_id, lease_until FROM lanes") == [(None, 0)]
        assert transfers == []
        [(body,)] = await rows(db, "SELECT type FROM records ORDER BY seq DESC LIMIT 1")
        assert body == "ToolApprovalRequested"  # no record marks the suspension: ledger state
        assert (await q.suspended("c")) == found
        [request] = await q.waiting(sid)
        assert (request.tool_name, request.tool_call_id) == ("transfer", "call-1")
        with pytest.raises(NoPendingApproval, match="no such call"):
            await q.decide(sid, "call-9", True, author="boss")
        decided, waiting = await q.decide(sid, "call-1", True, author="boss", reason="fine")
        assert (decided.status, waiting) == ("queued", ())
        with pytest.raises(NoPendingApproval):
            await q.decide(sid, "call-1", True, author="boss")  # decided already
        with trio.fail_after(60):
            await DurableWorker(db, layer, [agent], options=FAST).run(until_idle=True)
        found = await q.status(sid)
        assert found.status == "completed"
        assert transfers == [500]
        # the model was asked for the call once and once after its result: never again for the
        # suspended batch
        assert model_calls == ["UserMessage", "ToolMessage"]
        assert await q.verify("c") == ()


class _DecidesAtOnce:
    """A run observer of the worker's runtime that decides every call a suspended run waits on
    as soon as the run ends suspended: before its worker marks the submission suspended."""

    def __init__(self, queue: DurableQueue) -> None:
        self.queue = queue
        self.statuses: list[str] = []

    async def run_started(self, run: RunInfo) -> None:
        pass

    async def run_ended(self, run: RunInfo, ending: RunEnding) -> None:
        if ending != "suspended":
            return
        for submission in await self.queue.submissions(run.conversation_id):
            for request in await self.queue.waiting(submission.submission_id):
                decided, _ = await self.queue.decide(
                    submission.submission_id, request.tool_call_id, True, author="bot"
                )
                self.statuses.append(decided.status)


async def test_decisions_made_before_the_worker_marks_the_suspension_spend_no_retry_budget(
    store: Stores,
) -> None:
    """A decision may come while the submission is still active — its run's requests are in the
    log, its worker has not marked it suspended yet. The decision takes the lane (its worker can
    no longer mark it), so the decision marks the suspension itself: a run that asks for
    approval at every turn, decided at once each time, is never dead-lettered for it."""
    transfers: list[int] = []
    turns = 4

    def respond(request: ModelRequest) -> Turn | str:
        asked = sum(1 for message in request.messages if not isinstance(message, UserMessage))
        if asked // 2 < turns:
            return Turn.tool_calls(("transfer", {"cents": asked}, f"call-{asked}"))
        return "all paid"

    agent, layer = _payer(respond, transfers)
    key: ServiceKey[_DecidesAtOnce] = ServiceKey("test.decides_at_once")
    options = WorkerOptions(
        poll_interval=0.02, lease=5.0, retry=RetryBudget(max_attempts=2, base=0.01, cap=0.02)
    )
    async with store.open() as db:
        q = DurableQueue(db)
        decider = _DecidesAtOnce(q)
        observed = layer + observe_runs(key).provide_merge(Layer.succeed(key, decider))
        sid = (
            await q.submit("payer", "pay", conversation_id="c", idempotency_key="k", principal="p")
        ).submission_id
        with trio.fail_after(60):
            await DurableWorker(db, observed, [agent], options=options).run(until_idle=True)
        found = await q.status(sid)
        assert found.status == "completed", found
        assert len(transfers) == turns
        assert decider.statuses == ["queued"] * turns  # marked suspended, then put back
        assert await q.verify("c") == ()


async def test_until_idle_returns_when_what_is_left_waits_behind_a_suspended_submission(
    store: Stores,
) -> None:
    """A submission queued behind a suspended one of its conversation cannot be taken until that
    one is decided: a worker run until idle returns (it used to look for it forever), and once
    the decision is made the next run takes both, in order."""
    transfers: list[int] = []

    def respond(request: ModelRequest) -> Turn | str:
        last = _last(request)
        if isinstance(last, UserMessage) and _text(last) == "pay":
            return Turn.tool_calls(("transfer", {"cents": 5}, "call-1"))
        return "done"

    agent, layer = _payer(respond, transfers)
    async with store.open() as db:
        q = DurableQueue(db)
        first = await q.submit(
            "payer", "pay", conversation_id="c", idempotency_key="1", principal="p"
        )
        later = await q.submit(
            "payer", "later", conversation_id="c", idempotency_key="2", principal="p"
        )
        with trio.fail_after(60):
            await DurableWorker(db, layer, [agent], options=FAST).run(until_idle=True)
        statuses = [(await q.status(r.submission_id)).status for r in (first, later)]
        assert statuses == ["suspended", "queued"]
        await q.decide(first.submission_id, "call-1", True, author="boss")
        with trio.fail_after(60):
            await DurableWorker(db, layer, [agent], options=FAST).run(until_idle=True)
        statuses = [(await q.status(r.submission_id)).status for r in (first, later)]
        assert statuses == ["completed", "completed"]
        assert transfers == [5]


async def test_a_denial_settles_the_call_rejected_without_running_it(store: Stores) -> None:
    transfers: list[int] = []

    def respond(request: ModelRequest) -> Turn | str:
        if isinstance(_last(request), UserMessage):
            return Turn.tool_calls(("transfer", {"cents": 1}, "call-1"))
        return "not allowed, then"

    agent, layer = _payer(respond, transfers)
    async with store.open() as db:
        q = DurableQueue(db)
        sid = (
            await q.submit("payer", "pay", conversation_id="c", idempotency_key="k", principal="p")
        ).submission_id
        with trio.fail_after(60):
            await DurableWorker(db, layer, [agent], options=FAST).run(until_idle=True)
            await q.decide(sid, "call-1", False, author="boss", reason="no")
            await DurableWorker(db, layer, [agent], options=FAST).run(until_idle=True)
        assert (await q.status(sid)).status == "completed"
        assert transfers == []
        settled = [
            r for (r,) in await rows(db, "SELECT body FROM records WHERE type = 'ToolCallSettled'")
        ]
        assert len(settled) == 1
        assert "ToolRejected" in settled[0] or "rejected" in settled[0]


async def test_a_submission_of_mode_join_is_absorbed_by_the_run_going_at_its_next_turn(
    store: Stores,
) -> None:
    go = trio.Event()
    asked: list[str] = []
    agent = Agent("echo", "Answer.")
    async with store.open() as db:
        q = DurableQueue(db)
        head = await _submit(q, "echo", "first", "1")
        layer = FunctionModel.layer(_first_waits_for(go, asked))
        worker = DurableWorker(db, layer, [agent], options=FAST)
        with trio.fail_after(60):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(lambda: worker.run(until_idle=True))
                await _until(lambda: _status_is(q, head, "active"), "the head runs")
                joined = await _submit(q, "echo", "also this", "2", "join")
                queued = await _submit(q, "echo", "later", "3")
                await _until(lambda: _status_is(q, joined, "joining"), "the join is recorded")
                # The status changes as the worker's write commits; the run can take the input
                # once the worker has handed it over in memory, a moment later. Letting the
                # head answer before that would rightly send the join back to the queue.
                await _until(lambda: _pending(worker, joined), "the join is handed over")
                go.set()
        found = await q.status(joined)
        assert (found.status, found.joined_into, found.settlement) == ("joined", head, "final")
        assert (await q.status(head)).status == "completed"
        assert (await q.status(queued)).status == "completed"  # ran on its own, after
        assert asked == ["first", "also this", "later"]
        inputs = [
            (r, b)
            for r, b in await rows(
                db, "SELECT type, body FROM records WHERE type = 'UserInputRecorded'"
            )
        ]
        assert sum(joined in body for _, body in inputs) == 1
        assert await q.verify("c") == ()


async def test_a_joining_submission_aborted_before_the_run_took_it_is_aborted_not_joined(
    store: Stores,
) -> None:
    """Aborted once handed over to the run going, it was absorbed all the same at the run's
    next turn (the abort returned, then the input reached the model and settled joined)."""
    go = trio.Event()
    asked: list[str] = []
    agent = Agent("echo", "Answer.")
    async with store.open() as db:
        q = DurableQueue(db)
        head = await _submit(q, "echo", "first", "1")
        layer = FunctionModel.layer(_first_waits_for(go, asked))
        worker = DurableWorker(db, layer, [agent], options=FAST)
        with trio.fail_after(60):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(lambda: worker.run(until_idle=True))
                await _until(lambda: _status_is(q, head, "active"), "the head runs")
                joined = await _submit(q, "echo", "not this", "2", "join")
                await _until(lambda: _pending(worker, joined), "the join is handed over")
                aborted = await q.abort(joined, author="ops", reason="never mind")
                assert (aborted.status, aborted.settlement) == ("joining", None)
                # the worker learns of the abort at its next renewal and takes the input back
                await _until(lambda: _not_pending(worker, joined), "the aborted join is taken back")
                go.set()
        found = await q.status(joined)
        assert (found.status, found.settlement) == ("aborted", "final")
        assert (await q.status(head)).status == "completed"
        assert asked == ["first"]  # the model never read it
        bodies = [b for (b,) in await rows(db, "SELECT body FROM records")]
        assert not any(joined in body for body in bodies)
        assert await q.verify("c") == ()


async def test_a_join_its_run_suspended_before_taking_waits_in_line_and_is_not_jumped(
    store: Stores,
) -> None:
    """Handed to a run that then suspended, a join stayed ``joining`` until that run settled:
    the resumed run took joins admitted after it, and it ran last, on its own (and an abort
    of it while the run waited for a decision did not settle it)."""
    asked = trio.Event()
    answer = trio.Event()
    resumed = trio.Event()
    texts: list[str] = []

    async def respond(request: ModelRequest) -> Turn | str:
        last = _last(request)
        if isinstance(last, UserMessage) and _text(last) == "pay":
            asked.set()
            await answer.wait()
            return Turn.tool_calls(("transfer", {"cents": 5}, "call-1"))
        if isinstance(last, UserMessage):
            texts.extend(_text(m) for m in request.messages if isinstance(m, UserMessage))
            return "noted"
        await resumed.wait()  # the resumed run's answer to the decided call waits
        return "paid"

    transfers: list[int] = []
    agent, layer = _payer(respond, transfers)
    async with store.open() as db:
        q = DurableQueue(db)
        head = await _submit(q, "payer", "pay", "0")
        first = DurableWorker(db, layer, [agent], options=FAST)
        with trio.fail_after(60):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(lambda: first.run(until_idle=True))
                await asked.wait()
                early = await _submit(q, "payer", "early", "1", "join")
                await _until(lambda: _pending(first, early), "the early join is handed over")
                answer.set()  # the run asks for approval: it suspends, the join not taken
        assert (await q.status(head)).status == "suspended"
        found = await q.status(early)
        assert (found.status, found.joined_into) == ("queued", None)  # in line again
        late = await _submit(q, "payer", "late", "2", "join")
        await q.decide(head, "call-1", True, author="boss")
        second = DurableWorker(db, layer, [agent], options=FAST)
        with trio.fail_after(60):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(lambda: second.run(until_idle=True))
                # (the run may take them at once, before the model's next answer, and end)
                await _until(lambda: _handed(q, late), "the late join handed over")
                resumed.set()
        assert [(await q.status(s)).status for s in (head, early, late)] == [
            "completed",
            "joined",
            "joined",
        ]
        assert texts == ["pay", "early", "late"]
        assert transfers == [5]
        assert await q.verify("c") == ()


async def _submit(q: DurableQueue, agent: str, text: str, key: str, mode: Any = "queue") -> str:
    """Submit ``text`` to ``agent`` in conversation ``c`` (principal ``p``); its submission ID."""
    receipt = await q.submit(
        agent, text, conversation_id="c", idempotency_key=key, principal="p", mode=mode
    )
    return receipt.submission_id


def _first_waits_for(go: trio.Event, asked: list[str]) -> Callable[[ModelRequest], Awaitable[str]]:
    """A model that answers each input with ``answer to …`` (noting it in ``asked``), the
    input ``first`` only once ``go`` is set."""

    async def respond(request: ModelRequest) -> str:
        text = _text(_last(request))
        asked.append(text)
        if text == "first":
            await go.wait()
        return f"answer to {text}"

    return respond


async def _handed(q: DurableQueue, submission_id: str) -> bool:
    return (await q.status(submission_id)).status in ("joining", "joined")


async def _not_pending(worker: DurableWorker, submission_id: str) -> bool:
    return not await _pending(worker, submission_id)


async def test_a_join_never_jumps_a_submission_that_waits_for_its_own_run(
    store: Stores,
) -> None:
    clock = Clock()
    async with store.open() as db:
        q = DurableQueue(db, clock=clock)
        modes = ["queue", "join", "join", "queue", "join"]
        ids = [
            (
                await q.submit(
                    "a",
                    f"t{i}",
                    conversation_id="c",
                    idempotency_key=str(i),
                    principal="p",
                    mode=mode,  # type: ignore[arg-type]
                )
            ).submission_id
            for i, mode in enumerate(modes)
        ]
        [head] = await HandWorker(db, clock).claim()
        assert head.submission.submission_id == ids[0]
        found = await db.read(lambda conn: _joinable(conn, "c", ids[0]))
        assert [submission_id for submission_id, _, _ in found] == ids[1:3]
        # one that waits for its own run ahead: nothing behind it joins
        await db.write(
            lambda conn: conn.execute(
                "UPDATE submissions SET mode = 'queue' WHERE submission_id = ?", (ids[1],)
            )
        )
        assert await db.read(lambda conn: _joinable(conn, "c", ids[0])) == []


async def _pending(worker: DurableWorker, submission_id: str) -> bool:
    await trio.lowlevel.checkpoint()
    return submission_id in worker.inbox.pending("c")


async def _status_is(q: DurableQueue, submission_id: str, status: str) -> bool:
    return (await q.status(submission_id)).status == status


async def test_a_durable_step_runs_once_across_a_resumed_run(store: Stores) -> None:
    charged: list[int] = []
    inside = trio.Event()
    hold = trio.Event()

    def respond(request: ModelRequest) -> Turn | str:
        if isinstance(_last(request), UserMessage):
            return Turn.tool_calls(("charge", {"cents": 700}, "call-1"))
        return "charged"

    async def handle(params: Amount, call: ToolCallContext) -> str:
        async def charge_card() -> str:
            charged.append(params.cents)
            return f"receipt-{len(charged)}"

        receipt = await call.step("charge-card", 1, charge_card)
        inside.set()
        await hold.wait()  # the first worker stops here, its step recorded
        return receipt

    agent = Agent("biller", "Bill.", toolkit=Toolkit(charge))
    layer = Toolkit(charge).handlers(charge.bind(handle)) + FunctionModel.layer(respond)
    async with store.open() as db:
        q = DurableQueue(db)
        sid = (
            await q.submit(
                "biller", "bill", conversation_id="c", idempotency_key="k", principal="p"
            )
        ).submission_id
        with trio.fail_after(60):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(DurableWorker(db, layer, [agent], options=FAST).run)
                await inside.wait()
                nursery.cancel_scope.cancel()
            hold.set()  # the resumed call does not wait
            await DurableWorker(db, layer, [agent], options=FAST).run(until_idle=True)
        assert (await q.status(sid)).status == "completed"
        assert charged == [700]  # the step ran once; the call ran twice (idempotent)
        [(body,)] = await rows(db, "SELECT body FROM records WHERE type = 'ToolCallSettled'")
        assert "receipt-1" in body
        assert await rows(db, "SELECT name, version, result FROM durable_steps") == [
            ("charge-card", 1, '"receipt-1"')
        ]


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("charge\x00card", "a step's name must not hold NUL or a lone surrogate"),
        ("\U0001f600" * 129, "a step's name must be at most 512 bytes in UTF-8"),
    ],
)
async def test_a_step_name_no_database_keeps_fails_the_call_alike_on_both_backends(
    store: Stores, name: str, message: str
) -> None:
    """Such a name was recorded on SQLite, while on PostgreSQL the call crashed with the
    database's error (``ReadFailed``/``WriteFailed``). Now the call fails alike on both, saying
    why, its function never run and nothing recorded."""
    ran: list[str] = []
    told: list[str] = []

    def respond(request: ModelRequest) -> Turn | str:
        if isinstance(_last(request), UserMessage):
            return Turn.tool_calls(("charge", {"cents": 700}, "call-1"))
        told.append(repr(_last(request)))
        return "told"

    async def handle(params: Amount, call: ToolCallContext) -> str:
        async def charge_card() -> str:
            ran.append("charged")
            return "receipt"

        return await call.step(name, 1, charge_card)

    agent = Agent("biller", "Bill.", toolkit=Toolkit(charge))
    layer = Toolkit(charge).handlers(charge.bind(handle)) + FunctionModel.layer(respond)
    async with store.open() as db:
        q = DurableQueue(db)
        receipt = await q.submit(
            "biller", "bill", conversation_id="c", idempotency_key="k", principal="p"
        )
        with trio.fail_after(60):
            await DurableWorker(db, layer, [agent], options=FAST).run(until_idle=True)
        assert (await q.status(receipt.submission_id)).status == "completed"
        assert ran == []
        [result] = told
        assert "ToolDefect" in result
        assert message in result
        assert "Failed" not in result  # no database error
        assert await rows(db, "SELECT count(*) FROM durable_steps") == [(0,)]


async def test_of_two_racers_on_one_step_only_the_lane_holder_s_result_is_recorded(
    store: Stores,
) -> None:
    clock = Clock()
    async with store.open() as db:
        q = DurableQueue(db, clock=clock)
        await q.submit("a", "x", conversation_id="c", idempotency_key="k", principal="p")
        stale_worker, winner = HandWorker(db, clock, "w1"), HandWorker(db, clock, "w2")
        [stale] = await stale_worker.claim(lease=5)
        clock.advance(10)
        [current] = await winner.claim(lease=5)

        def fence_of(lane: Any) -> Any:
            def fence(conversation_id: str) -> Any:
                def check(conn: Any) -> int:
                    check_lane(conn, lane)
                    return int(lane.epoch)

                return check

            return fence

        key = StepKey("c", current.submission.run_id, "call-1", "charge", 1)
        late = SqliteStepStore(db, fence_of(stale.lane), clock=clock)
        live = SqliteStepStore(db, fence_of(current.lane), clock=clock)
        with pytest.raises(LaneLost):
            await late.put(key, "stale result")
        assert (await live.put(key, "first")).value == "first"
        assert (await live.put(key, "second")).value == "first"  # the first recorded is canonical
        assert (await late.get(key)) is not None
        assert await rows(db, "SELECT epoch, result FROM durable_steps") == [
            (current.lane.epoch, '"first"')
        ]
