"""Cancelling ``DurableWorker.run`` while it starts: it ends, with ``Cancelled``, wherever the
cancellation reaches it — also in the two steps where its (shielded) host of runs is being
started or has just been — and leaves no submission taken."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any, Literal

import pytest
import trio

from capabilities.durable import DurableQueue, DurableWorker, WorkerOptions
from capabilities.storage import Database, open_database
from effectagent.core import Agent
from effectagent.testing import ScriptedModel, Turn

AGENT = Agent("echo", "Repeat what you are told.")
Where = Literal["listen", "first read after listen"]


class _CancelsAt:
    """A database that cancels ``scope`` at one point of the worker's start, then does as the
    real one does (every other attribute is the real one's)."""

    def __init__(self, real: Database, scope: trio.CancelScope, where: Where) -> None:
        self._real = real
        self._scope = scope
        self._where = where
        self._listened = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)

    async def listen(self) -> Any:
        wake_ups = await self._real.listen()
        self._listened = True
        if self._where == "listen":
            self._scope.cancel()  # the worker goes on to start its host of runs, cancelled
        return wake_ups

    async def read(self, work: Any) -> Any:
        if self._listened and self._where == "first read after listen":
            self._listened = False
            self._scope.cancel()  # its host of runs is started: the overdue check is cancelled
        return await self._real.read(work)


def _run_in_a_thread(main: Any) -> None:
    """Run ``main`` in a Trio loop of its own; fail (rather than hang the suite) if it never
    ends — a cancelled worker that waits forever for its shielded host of runs."""
    failure: list[BaseException] = []

    def target() -> None:
        try:
            trio.run(main)
        except BaseException as exc:  # reported by the test's thread
            failure.append(exc)

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(timeout=60)
    if thread.is_alive():
        pytest.fail("the cancelled worker never returned")
    if failure:
        raise failure[0]


@pytest.mark.parametrize("where", ["listen", "first read after listen"])
def test_a_worker_cancelled_while_it_starts_ends_and_takes_nothing(
    where: Where, tmp_path: Path
) -> None:
    async def main() -> None:
        async with open_database(tmp_path / "q.db") as database:
            queue = DurableQueue(database, agents=["echo"])
            receipt = await queue.submit(
                "echo", "hi", conversation_id="c", idempotency_key="k", principal="p"
            )
            with trio.CancelScope() as scope:
                worker = DurableWorker(
                    _CancelsAt(database, scope, where),
                    ScriptedModel.layer([Turn.text("done")]),
                    [AGENT],
                    options=WorkerOptions(poll_interval=0.05, lease=5.0),
                )
                await worker.run(until_idle=True)
            assert scope.cancelled_caught
            submission = await queue.status(receipt.submission_id)
            assert (submission.status, submission.attempts) == ("queued", 0)

    _run_in_a_thread(main)
