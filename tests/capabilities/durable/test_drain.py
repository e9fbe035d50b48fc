"""Four worker processes on one database (a SQLite file, a PostgreSQL schema) drain 1,000 submissions over 100 conversations:
FIFO per conversation, none lost, none settled twice — and what each run recorded is one
unbroken block of its conversation's log, in admission order."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import trio

from capabilities.durable import FAILPOINT_ENV, DurableQueue

from .helpers import Stores

ROOT = Path(__file__).resolve().parents[3]
CONVERSATIONS = 100
PER_CONVERSATION = 10
WORKERS = 4


def test_four_workers_drain_a_thousand_submissions_fifo_each_settled_once(
    store: Stores,
) -> None:

    async def admit() -> dict[str, list[str]]:
        async with store.open() as database:
            q = DurableQueue(database)
            order: dict[str, list[str]] = {f"c{n}": [] for n in range(CONVERSATIONS)}

            async def conversation(name: str) -> None:
                for index in range(PER_CONVERSATION):
                    receipt = await q.submit(
                        "scripted",
                        f"{name} message {index}",
                        conversation_id=name,
                        idempotency_key=str(index),
                        principal="p",
                    )
                    assert receipt.position == index + 1
                    order[name].append(receipt.submission_id)

            async with trio.open_nursery() as nursery:
                for name in order:
                    nursery.start_soon(conversation, name)
            return order

    order = trio.run(admit)
    env = {k: v for k, v in os.environ.items() if k != FAILPOINT_ENV}
    command = [
        sys.executable,
        "-m",
        "tests.capabilities.durable.worker_process",
        store.spec(),
        "--max-active",
        "16",
        "--lease",
        "10",
    ]
    processes = [
        subprocess.Popen(command, cwd=ROOT, env=env, stderr=subprocess.PIPE) for _ in range(WORKERS)
    ]
    for process in processes:
        _, stderr = process.communicate(timeout=300)
        assert process.returncode == 0, stderr.decode(errors="replace")[-4000:]

    async def check() -> None:
        async with store.open() as database:
            q = DurableQueue(database)
            for conversation, ids in order.items():
                submissions = await q.submissions(conversation)
                assert [s.submission_id for s in submissions] == ids
                for s in submissions:
                    assert (s.status, s.settlement) == ("completed", "final"), s
                assert await q.verify(conversation) == ()

            def runs_in_log_order(conn: object) -> dict[str, list[str]]:
                found: dict[str, list[str]] = {}
                for conversation, body in conn.execute(  # type: ignore[attr-defined]
                    "SELECT conversation_id, body FROM records ORDER BY conversation_id, seq"
                ):
                    run_id = json.loads(body).get("run_id")
                    if run_id is None:
                        continue
                    runs = found.setdefault(conversation, [])
                    if not runs or runs[-1] != run_id:
                        runs.append(run_id)
                return found

            blocks = await database.read(runs_in_log_order)
            for conversation, ids in order.items():
                # one block per run (never interleaved), in admission order
                assert blocks[conversation] == ["run_" + i.removeprefix("sub_") for i in ids]

    trio.run(check)
