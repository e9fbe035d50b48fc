"""A durable worker process for the scale-out tests and benchmark: ``python -m
tests.scale_out.worker STORE [options]``.

``STORE`` is a ``postgresql://`` URL (with ``--schema``) or a SQLite file's path. The worker runs
one agent, ``scale``, whose model is a plain function answering at once: the first turn of a run
calls the tool ``note`` once, the next answers ``done``. ``note`` appends a line
``<run ID> <call ID>`` to the effects file (``--effects``; one file per worker) before it
returns — its side effect, which a test counts; with ``--tool-delay`` it takes that long first
(a worker whose runs are mostly in a tool call when it is cut off).

Once its runtime is open it prints one line, ``ready <worker ID>``, and then works until it is
sent SIGTERM or SIGINT (it lets its lanes go and exits 0), or — with ``--until-idle`` — until no
submission is left for a worker.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import attrs
import trio

from capabilities.durable import DurableWorker, RetryBudget, WorkerOptions
from capabilities.storage import Database, open_database, open_postgres
from effectagent import Agent, Tool, ToolCallContext, Toolkit
from effectagent.ai import ModelRequest, ToolMessage, UserMessage
from effectagent.effect import Layer
from effectagent.testing import FunctionModel, Turn

__all__ = ["AGENT", "NOTE", "layer", "open_store", "respond"]


@attrs.frozen
class Note:
    """The no-op tool's parameters."""

    n: int = 0


NOTE = Tool("note", "Note that the work was done.", parameters=Note, success=str)
AGENT = Agent("scale", "Note the work, then say it is done.", toolkit=Toolkit(NOTE))


def respond(request: ModelRequest) -> Turn | str:
    """One call of ``note`` for the input just given, then the answer (earlier runs of the
    conversation are in the request too: only its last message counts)."""
    last = request.messages[-1]
    if isinstance(last, UserMessage):
        return Turn.tool_calls(("note", {"n": len(request.messages)}))
    assert isinstance(last, ToolMessage)
    return "done"


def layer(effects: str, delay: float = 0.0) -> Layer:
    """The tool's handler (writing to ``effects``, after ``delay`` seconds) and the model."""

    async def note(params: Note, call: ToolCallContext) -> str:
        if delay:
            await trio.sleep(delay)
        if effects != os.devnull:
            with open(effects, "a", encoding="utf-8") as out:  # noqa: ASYNC230 - one short line
                out.write(f"{call.run_id} {call.tool_call_id}\n")
                out.flush()
        return "noted"

    return Toolkit(NOTE).handlers(NOTE.bind(note)) + FunctionModel.layer(respond)


@asynccontextmanager
async def open_store(store: str, schema: str, *, pool_size: int = 4) -> AsyncIterator[Database]:
    """The database at ``store``: a PostgreSQL URL (``schema`` in it), else a SQLite file."""
    if store.startswith(("postgresql://", "postgres://")):
        async with open_postgres(store, schema=schema, pool_size=pool_size) as database:
            yield database
    else:
        async with open_database(store, synchronous="normal") as database:
            yield database


async def main(arguments: Any) -> None:
    async with open_store(arguments.store, arguments.schema) as database:
        options = WorkerOptions(
            max_active=arguments.max_active,
            lease=arguments.lease,
            poll_interval=arguments.poll,
            retry=RetryBudget(max_attempts=20, base=0.05, cap=0.5),
        )
        worker = DurableWorker(
            database, layer(arguments.effects, arguments.tool_delay), [AGENT], options=options
        )
        with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async with trio.open_nursery() as nursery:

                async def work(task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
                    await worker.run(until_idle=arguments.until_idle, task_status=task_status)
                    nursery.cancel_scope.cancel()  # idle: the signal watch ends too

                await nursery.start(work)
                print("ready", worker.worker_id, flush=True)
                async for _ in signals:  # stopped: the worker lets its lanes go, then ends
                    nursery.cancel_scope.cancel()
                    break


def parse(argv: list[str]) -> Any:
    parser = argparse.ArgumentParser(prog="python -m tests.scale_out.worker")
    parser.add_argument("store", help="a postgresql:// URL or a SQLite file")
    parser.add_argument("--schema", default="effectagent")
    parser.add_argument("--effects", default=os.devnull)
    parser.add_argument("--tool-delay", type=float, default=0.0, help="seconds the tool takes")
    parser.add_argument("--lease", type=float, default=10.0)
    parser.add_argument("--poll", type=float, default=0.1)
    parser.add_argument("--max-active", type=int, default=8)
    parser.add_argument("--until-idle", action="store_true")
    return parser.parse_args(argv)


if __name__ == "__main__":
    # The durable runtime's warnings (a lane lost, a claim that failed) go to stderr.
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="%(message)s")
    trio.run(main, parse(sys.argv[1:]))
