"""A durable worker process for the kill tests: ``python -m
tests.capabilities.durable.worker_process STORE [options]``.

``STORE`` is a store spec (``helpers.Stores.spec``: ``sqlite:<path>`` or
``postgresql:<schema>:<url>``) or the path of a SQLite file.

It runs a :class:`DurableWorker` until no submission is left for it (``until_idle``) and exits 0
— or is killed by the failpoint its environment names (``EFFECTAGENT_FAILPOINT``). Its agent,
``scripted``, answers from the request alone (a ``FunctionModel``): an input ``calls:a,b`` asks
for the tools ``a`` and ``b`` in one batch; any other input is echoed; after a batch it answers
``done``. Its tools write a line ``<tool> <call ID> <run ID>`` to the effects file (flushed and
synced) as their side effect, before they return:

* ``charge`` — not idempotent, no reconcile: crossing ``in-handler`` after its effect;
* ``lookup`` — idempotent: run again after a crash;
* ``transfer`` — needs approval (a decision not made at once suspends the run);
* ``slow`` — waits 0.5 s before its effect (a run that is still going a little while).

``--agents`` names the agents this worker knows (default: ``scripted``; none, to play a worker
without it: it knows only ``other``, which no submission names). A submission can also be made
from here (``--submit``, for the admission failpoints), or a decision given (``--decide
SUBMISSION CALL``).
"""

from __future__ import annotations

import argparse
import os
from typing import Any

import attrs
import trio

from capabilities.durable import DurableQueue, DurableWorker, RetryBudget, WorkerOptions
from capabilities.durable._failpoints import failpoint
from effectagent.ai import ModelRequest, Tool, ToolCallContext, Toolkit, UserMessage
from effectagent.core import Agent
from effectagent.effect import Layer
from effectagent.testing import FunctionModel, Turn
from tests.capabilities.durable.helpers import open_store


@attrs.frozen
class Params:
    n: int = 0


charge = Tool("charge", "Charge a card.", parameters=Params, success=str)
lookup = Tool("lookup", "Look something up.", parameters=Params, success=str, idempotent=True)
transfer = Tool("transfer", "Move money.", parameters=Params, success=str, needs_approval=True)
slow = Tool("slow", "Take a while.", parameters=Params, success=str, idempotent=True)
TOOLKIT = Toolkit(charge, lookup, transfer, slow)
AGENT = Agent("scripted", "Do as the input says.", toolkit=TOOLKIT)
OTHER = Agent("other", "An agent no submission names.")


def _respond(request: ModelRequest) -> Turn | str:
    last = request.messages[-1]
    if not isinstance(last, UserMessage):
        return "done"
    text = "".join(getattr(part, "text", "") for part in last.content)
    if text.startswith("calls:"):
        names = [name for name in text.removeprefix("calls:").split(",") if name]
        return Turn.tool_calls(*[(name, {"n": i}) for i, name in enumerate(names)])
    return f"echo: {text}"


def _layer(effects: str) -> Layer:
    def effect(call: ToolCallContext) -> None:
        with open(effects, "a", encoding="utf-8") as out:
            out.write(f"{call.tool_name} {call.tool_call_id} {call.run_id}\n")
            out.flush()
            os.fsync(out.fileno())

    async def do_charge(params: Params, call: ToolCallContext) -> str:
        effect(call)
        failpoint("in-handler")
        return "charged"

    async def do_lookup(params: Params, call: ToolCallContext) -> str:
        effect(call)
        failpoint("in-handler")
        return "found"

    async def do_transfer(params: Params, call: ToolCallContext) -> str:
        effect(call)
        return "moved"

    async def do_slow(params: Params, call: ToolCallContext) -> str:
        await trio.sleep(0.5)
        effect(call)
        return "slowly"

    handlers = TOOLKIT.handlers(
        charge.bind(do_charge),
        lookup.bind(do_lookup),
        transfer.bind(do_transfer),
        slow.bind(do_slow),
    )
    return handlers + FunctionModel.layer(_respond)


async def main(arguments: Any) -> None:
    spec = arguments.store
    if not spec.startswith(("sqlite:", "postgresql:")):
        spec = f"sqlite:{spec}"
    async with open_store(spec) as database:
        if arguments.submit:
            conversation, key, text = arguments.submit
            receipt = await DurableQueue(database).submit(
                "scripted", text, conversation_id=conversation, idempotency_key=key, principal="p"
            )
            print(receipt.submission_id, flush=True)
            return
        if arguments.decide:
            submission_id, call_id = arguments.decide
            await DurableQueue(database).decide(submission_id, call_id, True, author="boss")
            return
        agents = [AGENT] if arguments.agents == "scripted" else [OTHER]
        options = WorkerOptions(
            max_active=arguments.max_active,
            lease=arguments.lease,
            poll_interval=0.05,
            retry=RetryBudget(max_attempts=8, base=0.01, cap=0.2),
        )
        worker = DurableWorker(database, _layer(arguments.effects), agents, options=options)
        await worker.run(until_idle=True)


def parse() -> Any:
    parser = argparse.ArgumentParser()
    parser.add_argument("store")
    parser.add_argument("--effects", default=os.devnull)
    parser.add_argument("--agents", default="scripted")
    parser.add_argument("--lease", type=float, default=30.0)
    parser.add_argument("--max-active", type=int, default=4)
    parser.add_argument("--submit", nargs=3, metavar=("CONVERSATION", "KEY", "TEXT"))
    parser.add_argument("--decide", nargs=2, metavar=("SUBMISSION", "CALL"))
    return parser.parse_args()


if __name__ == "__main__":
    trio.run(main, parse())
