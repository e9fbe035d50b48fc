"""Steering across processes: input for a run another process is running is admitted into the
shared journal, reaches that run at its next turn, in FIFO order with what was admitted where the
run goes, and expires when the run ends without taking it."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path

import attrs
import pytest
import trio

from capabilities import sqlite_storage
from capabilities.steering import SteeringLimits, SteeringService
from capabilities.steering import _inbox as inbox_module
from capabilities.steering._inbox import ConversationInbox
from capabilities.steering._journal import SqliteJournal
from capabilities.storage._database import open_database
from capabilities.storage._lanes import Lanes, process_prefix
from capabilities.storage._log import SqliteConversationLog
from effectagent import Agent, Tool, ToolCallContext, Toolkit, open_runtime
from effectagent.ai import UserMessage
from effectagent.core import LogEntry, ModelResponseRecorded, ToolCallSettled, UserInputRecorded
from effectagent.effect import Layer
from effectagent.engine import RunInfo, Runtime, SteeringInput
from effectagent.testing import ScriptedModel, Turn

ROOT = Path(__file__).resolve().parents[3]
SECRET = "sk-steering-canary-42"


@attrs.frozen
class Nothing:
    """No arguments."""


wait = Tool("wait", "Wait.", parameters=Nothing, success=str)
AGENT = Agent("holder", "Hold on.", toolkit=Toolkit(wait))


@pytest.fixture
def no_poll(monkeypatch: pytest.MonkeyPatch) -> None:
    """Runs look for input admitted elsewhere only when a test says so (``adopt_waiting``)."""
    monkeypatch.setattr(inbox_module, "POLL_INTERVAL", 1e9)


def _layer(
    path: Path, model: ScriptedModel, parked: trio.Event, go: trio.Event, **storage: object
) -> Layer:
    async def park(_: Nothing, call: ToolCallContext) -> str:
        parked.set()
        await go.wait()
        return "released"

    return (AGENT.toolkit.handlers({wait: park}) + model.as_layer()).provide_merge(
        sqlite_storage(path, **storage)  # type: ignore[arg-type]
    )


def _inbox(runtime: Runtime) -> ConversationInbox:
    inbox = runtime.context[SteeringService]
    assert isinstance(inbox, ConversationInbox)
    return inbox


def _users(model: ScriptedModel) -> list[list[str]]:
    """The user texts of each request the model got."""
    texts = []
    for request in model.requests:
        users = [m for m in request.messages if isinstance(m, UserMessage)]
        texts.append([part.text for m in users for part in m.content])
    return texts


async def test_input_admitted_by_another_runtime_reaches_the_run_in_fifo_order(
    tmp_path: Path, no_poll: None
) -> None:
    path = tmp_path / "shared.db"
    parked, go, never = trio.Event(), trio.Event(), trio.Event()
    model = ScriptedModel(
        [Turn.tool_calls(("wait", {})), Turn.text("Paris."), Turn.text("2.1 million.")]
    )
    async with (
        open_runtime(_layer(path, model, parked, go), agents=[AGENT], secrets=[SECRET]) as running,
        open_runtime(_layer(path, ScriptedModel([]), never, never), agents=[AGENT]) as other,
        trio.open_nursery() as nursery,
    ):
        results: list[object] = []

        async def run() -> None:
            results.append(await running.run(AGENT, "Capital?", conversation_id="c", create=True))

        nursery.start_soon(run)
        await parked.wait()
        here, there = _inbox(running), _inbox(other)
        first = await there.steer("c", f"One word. {SECRET}", author="bo")
        local = await here.steer("c", "Be brief.", author="ann")
        later = await there.follow_up("c", "And its population?", author="bo")
        nobody = await there.steer("elsewhere", "Anyone?", author="bo")
        assert (first.accepted, first.durable, local.accepted, later.accepted) == (
            True,
            True,
            True,
            True,
        )
        assert [first.position, local.position, later.position] == [1, 2, 3]
        assert nobody.rejection == "no-active-run"
        assert await here.adopt_waiting() == 2
        assert await here.adopt_waiting() == 0  # adopted once
        go.set()
    assert [getattr(r, "status", None) for r in results] == ["completed"]
    # The steering entered before the next request, in admission order; the follow-up when the
    # model would have stopped; the secret redacted by the process that delivered it.
    assert _users(model)[1][-2:] == ["One word. [REDACTED]", "Be brief."]
    assert _users(model)[2][-1] == "And its population?"
    async with open_runtime(sqlite_storage(path)) as reader:
        statuses = [await _inbox(reader).status(r.input_id) for r in (first, local, later)]
        entries = await reader.log.entries("c")
    assert [s.state if s else None for s in statuses] == ["delivered"] * 3
    settled = next(e.seq for e in entries if isinstance(e.record, ToolCallSettled))
    steered = [e for e in entries if _kind(e) == "steering"]
    assert [e.seq for e in steered] == [settled + 1, settled + 2]  # right after the batch
    assert all(SECRET not in getattr(e.record, "text", "") for e in entries)


async def test_input_another_runtime_admits_waits_in_the_journal_redacted_by_its_runtime(
    tmp_path: Path, no_poll: None
) -> None:
    """A runtime that has run nothing yet admits steering for another's run with its own
    redaction (the secrets it was opened with): the text at rest never holds the secret."""
    path = tmp_path / "shared.db"
    parked, go, never = trio.Event(), trio.Event(), trio.Event()
    model = ScriptedModel([Turn.tool_calls(("wait", {})), Turn.text("Done.")])
    async with (
        open_runtime(_layer(path, model, parked, go), agents=[AGENT], secrets=[SECRET]) as running,
        open_runtime(
            _layer(path, ScriptedModel([]), never, never), agents=[AGENT], secrets=[SECRET]
        ) as other,
        trio.open_nursery() as nursery,
    ):
        nursery.start_soon(partial(running.run, AGENT, "Go.", conversation_id="c", create=True))
        await parked.wait()
        receipt = await _inbox(other).steer("c", f"Use {SECRET}.", author="bo")
        connection = sqlite3.connect(path)
        try:
            waiting = connection.execute(
                "SELECT text FROM steering_inputs WHERE input_id = ?", (receipt.input_id,)
            ).fetchall()
        finally:
            connection.close()
        go.set()
    assert receipt.accepted
    assert waiting == [("Use [REDACTED].",)]


def _kind(entry: LogEntry) -> str | None:
    return entry.record.kind if isinstance(entry.record, UserInputRecorded) else None


async def test_input_the_run_never_reached_expires_when_it_ends_and_the_queue_is_bounded(
    tmp_path: Path, no_poll: None
) -> None:
    path = tmp_path / "expire.db"
    parked, go, never = trio.Event(), trio.Event(), trio.Event()
    model = ScriptedModel([Turn.tool_calls(("wait", {})), Turn.text("Done.")])
    other_layer = _layer(
        path, ScriptedModel([]), never, never, steering_limits=SteeringLimits(max_pending=1)
    )
    async with (
        open_runtime(_layer(path, model, parked, go), agents=[AGENT]) as running,
        open_runtime(other_layer, agents=[AGENT]) as other,
        trio.open_nursery() as nursery,
    ):
        nursery.start_soon(lambda: running.run(AGENT, "Go.", conversation_id="c", create=True))
        await parked.wait()
        taken = await _inbox(other).follow_up("c", "Then this.", author="bo")
        full = await _inbox(other).follow_up("c", "And that.", author="bo")
        assert taken.accepted
        assert full.rejection == "queue-full"
        go.set()  # the run answers and ends before it looked for input from elsewhere
    async with open_database(path) as database:
        status = await ConversationInbox(SqliteJournal(database)).status(taken.input_id)
        entries = await SqliteConversationLog(database).entries("c")
    assert status is not None
    assert (status.state, status.reason) == (
        "expired",
        "the run completed before it took the input",
    )
    assert [type(e.record).__name__ for e in entries][-1] == "RunCompletedRecord"
    assert all(_kind(e) != "follow-up" for e in entries)


@contextmanager
def _holder(path: Path, conversation: str) -> Iterator[subprocess.Popen[str]]:
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.capabilities.storage.holder", str(path), conversation],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        yield process
    finally:
        if process.poll() is None:
            process.kill()
        process.wait()
        for stream in (process.stdin, process.stdout, process.stderr):
            if stream is not None:
                stream.close()


async def test_steering_from_another_process_reaches_the_run_at_its_next_turn(
    tmp_path: Path,
) -> None:
    """The run goes in a process of its own; this one steers it. The running process finds the
    input by itself (its poll), and takes it at the turn after its tool call."""
    path = tmp_path / "two.db"
    with _holder(path, "c") as holder:
        assert holder.stdout is not None
        assert holder.stdin is not None
        line = await trio.to_thread.run_sync(holder.stdout.readline)
        assert line == "parked\n", holder.stderr.read() if holder.stderr else ""
        async with open_runtime(sqlite_storage(path)) as here:
            receipt = await _inbox(here).steer("c", "Steered from elsewhere.", author="bo")
            assert receipt.accepted
            assert receipt.durable
            holder.stdin.write("adopt\n")
            holder.stdin.flush()
            out = await trio.to_thread.run_sync(holder.communicate)
            assert out[0].split() == ["adopted", "completed"], out[1]
            status = await _inbox(here).status(receipt.input_id)
            entries = await here.log.entries("c")
    assert status is not None
    assert status.state == "delivered"
    kinds = [(type(e.record).__name__, _kind(e)) for e in entries]
    at = kinds.index(("UserInputRecorded", "steering"))
    assert kinds[at - 1][0] == "ToolCallSettled"  # after the batch ...
    assert kinds[at + 1][0] == "ModelResponseRecorded"  # ... before the next response
    assert isinstance(entries[at + 1].record, ModelResponseRecorded)
    assert entries[at].seq == status.seq


async def test_input_waits_for_runs_whose_lane_a_holder_of_this_process_holds(
    tmp_path: Path,
) -> None:
    """A durable worker holds its lanes under a worker ID of its own; input admitted for its run
    is found in this process all the same — and never for a lane another process holds."""
    async with open_database(tmp_path / "w.db") as database:
        ours = Lanes(database, worker_id=f"{process_prefix()}host-worker")
        theirs = Lanes(database, worker_id="pid-999999999-host-worker")
        await ours.claim("mine")
        await theirs.claim("yours")
        journal = SqliteJournal(database)
        for conversation in ("mine", "yours"):
            item = SteeringInput(f"in-{conversation}", "steering", "hi", "bo", 1.0)
            assert await journal.admit_elsewhere(conversation, item, SteeringLimits()) == 1
        found = await journal.waiting(["mine", "yours"])
    assert {c: [(i.input_id, p) for i, p in found[c]] for c in found} == {"mine": [("in-mine", 1)]}


async def test_input_another_runtime_admits_holding_a_lone_surrogate_reaches_the_run(
    tmp_path: Path, no_poll: None
) -> None:
    """The journal's text column cannot keep a lone surrogate (no UTF-8 form): input holding
    one, admitted for a run another runtime is running, used to fail with the driver's
    ``UnicodeEncodeError``. It is admitted, and reaches the run with U+FFFD in its place."""
    path = tmp_path / "shared.db"
    parked, go, never = trio.Event(), trio.Event(), trio.Event()
    model = ScriptedModel([Turn.tool_calls(("wait", {})), Turn.text("Paris.")])
    async with (
        open_runtime(_layer(path, model, parked, go), agents=[AGENT]) as running,
        open_runtime(_layer(path, ScriptedModel([]), never, never), agents=[AGENT]) as other,
        trio.open_nursery() as nursery,
    ):
        nursery.start_soon(
            partial(running.run, AGENT, "Capital?", conversation_id="c", create=True)
        )
        await parked.wait()
        receipt = await _inbox(other).steer("c", "One \ud800 word.", author="bo")
        assert receipt.accepted
        assert await _inbox(running).adopt_waiting() == 1
        go.set()
    assert _users(model)[1][-1] == "One \ufffd word."


async def test_the_queue_bound_counts_input_another_runtime_admitted_that_waits(
    tmp_path: Path, no_poll: None
) -> None:
    """``max_pending`` bounds what waits for the conversation, whoever admitted it: input another
    runtime admitted for the run, not adopted yet, takes its room in the running runtime too."""
    path = tmp_path / "bound.db"
    parked, go, never = trio.Event(), trio.Event(), trio.Event()
    model = ScriptedModel([Turn.tool_calls(("wait", {})), Turn.text("Done."), Turn.text("More.")])
    limits = SteeringLimits(max_pending=1)
    async with (
        open_runtime(_layer(path, model, parked, go, steering_limits=limits), agents=[AGENT]) as a,
        open_runtime(
            _layer(path, ScriptedModel([]), never, never, steering_limits=limits), agents=[AGENT]
        ) as b,
        trio.open_nursery() as nursery,
    ):
        nursery.start_soon(partial(a.run, AGENT, "Go.", conversation_id="c", create=True))
        await parked.wait()
        there = await _inbox(b).follow_up("c", "From elsewhere.", author="bo")
        here = await _inbox(a).follow_up("c", "From here.", author="ann")
        assert await _inbox(a).adopt_waiting() == 1
        again = await _inbox(a).follow_up("c", "Still full.", author="ann")
        go.set()
        status = await _inbox(a).status(here.input_id)
    assert there.accepted
    assert (here.admission, here.rejection, status) == ("rejected", "queue-full", None)
    assert again.rejection == "queue-full"
    assert _users(model)[-1][-1] == "From elsewhere."


async def test_input_admitted_under_the_runs_lane_before_it_was_told_to_start_is_adopted_at_once(
    tmp_path: Path, no_poll: None
) -> None:
    """A run's lane is claimed (its first records appended) a moment before the inbox is told
    the run started; what is admitted in that moment goes the way of input for another
    process's run. The run adopts it as it starts — before its first turn — not a poll
    interval later, when a short run has already ended and let it expire."""
    async with open_database(tmp_path / "start.db") as database:
        await Lanes(database, worker_id=f"{process_prefix()}plain-run").claim("c")
        here = ConversationInbox(SqliteJournal(database))
        early = await here.follow_up("c", "Then this.", author="bo")  # no run here yet
        elsewhere = await ConversationInbox(SqliteJournal(database)).steer(
            "c", "Be brief.", author="ann"
        )
        await here.run_started(RunInfo("run-1", "c", "holder", "ann"))
        steering = here.drain_steering("c")
        follow_ups = here.take_follow_ups("c")
    assert (early.position, elsewhere.position) == (1, 2)
    assert [i.input_id for i in steering] == [elsewhere.input_id]
    assert [i.input_id for i in follow_ups] == [early.input_id]
