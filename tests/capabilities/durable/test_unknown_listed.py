"""A call settled ``Unknown`` is listed by ``DurableQueue.unknown`` however its submission is
settled — not only when its run completes: an abort of the run (going, or suspended for
approval) settled it without listing the call, and no one was told to check it."""

from __future__ import annotations

import attrs
import trio

from capabilities.durable import DurableQueue, DurableWorker, WorkerOptions
from effectagent.ai import ModelRequest, Tool, ToolCallContext, Toolkit, ToolMessage
from effectagent.core import Agent
from effectagent.testing import FunctionModel, Turn

from .helpers import Stores

OPTIONS = WorkerOptions(poll_interval=0.02, lease=5.0)


@attrs.frozen
class Amount:
    n: int


charge = Tool("charge", "Charge a card.", parameters=Amount, success=str)
transfer = Tool("transfer", "Move money.", parameters=Amount, success=str, needs_approval=True)
TOOLS = Toolkit(charge, transfer)
BILLING = Agent("billing", "Charge, then move the money.", toolkit=TOOLS)


def _respond(request: ModelRequest) -> Turn:
    done = sum(isinstance(message, ToolMessage) for message in request.messages)
    return Turn.tool_calls(("charge", {"n": 1}) if done == 0 else ("transfer", {"n": 2}))


async def test_a_call_left_unknown_is_listed_when_its_suspended_run_is_aborted(
    store: Stores,
) -> None:
    entered = trio.Event()

    async def hang(params: Amount, call: ToolCallContext) -> str:
        entered.set()
        await trio.sleep_forever()
        raise AssertionError("never")

    async def moved(params: Amount, call: ToolCallContext) -> str:
        return "moved"

    layer = TOOLS.handlers(charge.bind(hang), transfer.bind(moved)) + FunctionModel.layer(_respond)
    async with store.open() as db:
        q = DurableQueue(db)
        receipt = await q.submit(
            "billing", "bill Ann", conversation_id="c", idempotency_key="k", principal="p"
        )
        sid = receipt.submission_id
        with trio.fail_after(60):
            # the first worker stops while the charge is under way: whether it happened is unknown
            first = DurableWorker(db, layer, [BILLING], options=OPTIONS)
            async with trio.open_nursery() as nursery:
                nursery.start_soon(first.run)
                await entered.wait()
                nursery.cancel_scope.cancel()
            # the next one settles it Unknown, and the run goes on to wait for an approval
            await DurableWorker(db, layer, [BILLING], options=OPTIONS).run(until_idle=True)
        assert (await q.status(sid)).status == "suspended"
        aborted = await q.abort(sid, author="ops", reason="not wanted")
        assert aborted.status == "aborted"
        [listed] = await q.unknown()
        assert (listed.submission_id, listed.tool_name) == (sid, "charge")
        # listed once: settling it again changes nothing
        await q.rebuild_ledger("c")
        assert len(await q.unknown()) == 1
        assert await q.verify("c") == ()
