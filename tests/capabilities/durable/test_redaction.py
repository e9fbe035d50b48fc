"""A queue given the runtime's secrets (``DurableQueue(secrets=...)``) redacts the words a person
gives its commands — an abort's reason, an approval decision's reason — before they are written,
as a worker redacts what its runs record: they reach the log, the ledger and every reader of them
redacted (they were written raw)."""

from __future__ import annotations

import attrs
import pytest
import trio

from capabilities.durable._model import WorkerOptions
from capabilities.durable._queue import DurableQueue
from capabilities.durable._worker import DurableWorker
from capabilities.storage._log import SqliteConversationLog
from effectagent.ai import ModelRequest, Tool, ToolCallContext, Toolkit, UserMessage
from effectagent.core import Agent, ToolApprovalDecided
from effectagent.testing import FunctionModel, Turn

from .helpers import Stores, rows

CANARY = "sk-durable-canary-6a2f9e41c7d3b508"
FAST = WorkerOptions(poll_interval=0.02, lease=5.0)


@attrs.frozen
class Amount:
    cents: int


transfer = Tool("transfer", "Move money.", parameters=Amount, success=str, needs_approval=True)


async def test_an_abort_reason_is_redacted_before_it_is_written(store: Stores) -> None:
    async with store.open() as db:
        q = DurableQueue(db, secrets=(CANARY,))
        sid = (
            await q.submit("a", "hi", conversation_id="c", idempotency_key="k", principal="p")
        ).submission_id
        aborted = await q.abort(sid, author="ops", reason=f"leaked {CANARY} here")
        assert aborted.diagnostic is not None
        assert aborted.diagnostic.message == "aborted by ops: leaked [REDACTED] here"
        assert await rows(db, "SELECT reason FROM aborts") == [("leaked [REDACTED] here",)]
        assert CANARY not in repr(await q.status(sid))


async def test_a_decision_reason_is_redacted_before_it_is_written(store: Stores) -> None:
    asked: list[str] = []

    def respond(request: ModelRequest) -> Turn | str:
        asked.append(repr(request.messages))
        if isinstance(request.messages[-1], UserMessage):
            return Turn.tool_calls(("transfer", {"cents": 5}, "call-1"))
        return "not allowed, then"

    async def handle(params: Amount, call: ToolCallContext) -> str:
        return "ok"

    agent = Agent("payer", "Pay.", toolkit=Toolkit(transfer))
    layer = Toolkit(transfer).handlers(transfer.bind(handle)) + FunctionModel.layer(respond)
    async with store.open() as db:
        q = DurableQueue(db, secrets=(CANARY,))
        sid = (
            await q.submit("payer", "pay", conversation_id="c", idempotency_key="k", principal="p")
        ).submission_id
        worker = DurableWorker(db, layer, [agent], options=FAST, secrets=(CANARY,))
        with trio.fail_after(60):
            await worker.run(until_idle=True)  # it suspends, waiting for the decision
        await q.decide(sid, "call-1", False, author="boss", reason=f"no: {CANARY}")
        with trio.fail_after(60):
            await DurableWorker(db, layer, [agent], options=FAST, secrets=(CANARY,)).run(
                until_idle=True
            )
        assert (await q.status(sid)).status == "completed"
        entries = await SqliteConversationLog(db).entries("c")
        [decided] = [e.record for e in entries if isinstance(e.record, ToolApprovalDecided)]
        assert decided.decision.reason == "no: [REDACTED]"
        assert not [e for e in entries if CANARY in repr(e.record)]
        assert asked
        assert not [a for a in asked if CANARY in a]  # the model never saw it


async def test_the_secrets_are_checked_when_the_queue_is_made(store: Stores) -> None:
    async with store.open() as db:
        with pytest.raises(TypeError, match="not a lone str"):
            DurableQueue(db, secrets=CANARY)
        with pytest.raises(TypeError, match="each of secrets must be a str, got int"):
            DurableQueue(db, secrets=[5])  # type: ignore[list-item]
        with pytest.raises(ValueError, match="at least 4 characters"):
            DurableQueue(db, secrets=["abc"])
        plain = DurableQueue(db)  # none: reasons are written as given
        sid = (
            await plain.submit("a", "hi", conversation_id="c", idempotency_key="k", principal="p")
        ).submission_id
        await plain.abort(sid, author="ops", reason="as said")
        assert await rows(db, "SELECT reason FROM aborts") == [("as said",)]
