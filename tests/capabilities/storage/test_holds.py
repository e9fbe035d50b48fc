"""Plain runs hold their conversation's lane: two runs of one conversation never go at once on
one file — the second is refused, nothing of it written — a run whose hold was taken over writes
nothing more, and a killed process's hold expires with its lease."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import attrs
import pytest
import trio

from capabilities.storage import Database, DatabaseService
from capabilities.storage._database import open_database
from capabilities.storage._errors import ConversationInUse, LaneLost
from capabilities.storage._holds import AppendShape, Held, Proceed, Refuse, decide, shape_of
from capabilities.storage._lanes import DEFAULT_LEASE, LaneState, process_prefix
from capabilities.storage._log import SqliteConversationLog
from effectagent import Agent, Tool, ToolCallContext, Toolkit, open_runtime
from effectagent.core import (
    RunCompletedRecord,
    RunFailedRecord,
    StorageFailed,
    UserInputRecorded,
)
from effectagent.effect import Layer
from effectagent.engine import Runtime
from effectagent.testing import ScriptedModel, Turn
from tests.capabilities.durable.helpers import Stores

ROOT = Path(__file__).resolve().parents[3]


# ---- the decisions, pure ------------------------------------------------------------------------


def _lane(epoch: int, worker: str | None, attempt: str | None, until: float) -> LaneState:
    return LaneState("c", epoch, attempt, worker, None, until)


def _said(run: str, kind: str = "user") -> UserInputRecorded:
    return UserInputRecorded(
        conversation_id="c",
        run_id=run,
        input_id=f"in-{run}",
        kind=kind,  # type: ignore[arg-type]
        text="t",
        author="a",
        at=1.0,
    )


def test_the_shape_of_an_append() -> None:
    done = RunCompletedRecord(
        conversation_id="c", run_id="r1", output=None, finish_reason="stop", at=1
    )
    cut = RunFailedRecord(conversation_id="c", run_id="r1", error=None, reason="interrupted", at=1)
    assert shape_of([_said("r1")]) == AppendShape(frozenset({"r1"}), "r1", None)
    assert shape_of([_said("r1", "steering")]) == AppendShape(frozenset({"r1"}))
    assert shape_of([done]).ends == ("r1", "completed")
    assert shape_of([cut]).ends == ("r1", "interrupted")


ME, OTHER = f"{process_prefix()}me", "pid-999999999-other"
WORKER = f"{process_prefix()}host-worker"  # a durable worker of this process
START, GOING, END = (
    AppendShape(frozenset({"r1"}), "r1"),
    AppendShape(frozenset({"r1"})),
    AppendShape(frozenset({"r1"}), None, ("r1", "completed")),
)


@pytest.mark.parametrize(
    ("lane", "known", "shape", "decided"),
    [
        (None, None, START, Proceed(claim="r1")),  # a run starts: it claims
        (_lane(2, None, "x", 0), None, START, Proceed(claim="r1")),  # released before
        (_lane(2, OTHER, "x", 5), None, START, Proceed(claim="r1")),  # a lease that ran out
        (_lane(2, OTHER, "x", 50), None, START, "in use elsewhere"),  # a live one: refused
        (_lane(2, OTHER, "x", 50), None, GOING, "in use elsewhere"),
        (_lane(2, ME, "x", 50), None, START, "in use here"),  # another run of ours
        (_lane(2, ME, "x", 50), None, GOING, Proceed()),  # a durable run's state write
        (_lane(2, WORKER, "x", 50), None, GOING, Proceed()),  # ... its worker's lane
        (_lane(2, WORKER, "x", 50), None, START, "in use here"),
        (_lane(2, WORKER, "x", 50), None, END, "in use here"),  # a refused run's failure
        (_lane(2, ME, "r1", 50), None, GOING, Proceed()),  # claimed in this very transaction
        (_lane(2, ME, "r1", 50), Held("r1", 2), GOING, Proceed()),
        (_lane(2, ME, "r1", 5), Held("r1", 2), GOING, Proceed()),  # ran out, not taken over
        (_lane(2, ME, "r1", 50), Held("r1", 2), END, Proceed(release="completed")),
        (_lane(3, OTHER, "x", 50), Held("r1", 2), GOING, "lost"),  # taken over
        (_lane(3, OTHER, "x", 50), Held("r1", 2), END, "lost"),
        (_lane(2, None, "r1", 0), Held("r1", 2), GOING, "lost"),  # released under it
        (
            _lane(2, ME, "r1", 50),
            Held("r1", 2),
            AppendShape(frozenset({"r2"}), "r2"),
            "in use here",
        ),
        (None, None, AppendShape(), Proceed()),  # records of no run
    ],
)
def test_hold_decisions(
    lane: LaneState | None, known: Held | None, shape: AppendShape, decided: object
) -> None:
    got = decide("c", lane, me=ME, known=known, shape=shape, now=10.0)
    if isinstance(decided, str):
        assert isinstance(got, Refuse)
        error = got.error
        assert error.conversation_id == "c"
        if decided == "lost":
            assert isinstance(error, LaneLost)
        else:
            assert isinstance(error, ConversationInUse)
            assert error.elsewhere == (decided == "in use elsewhere")
    else:
        assert got == decided


# ---- runs through the engine --------------------------------------------------------------------


@attrs.frozen
class Nothing:
    """No arguments."""


wait = Tool("wait", "Wait.", parameters=Nothing, success=str)
AGENT = Agent("holder", "Hold on.", toolkit=Toolkit(wait))


def _layer(storage: Layer, turns: list[Turn], parked: trio.Event, go: trio.Event) -> Layer:
    async def park(_: Nothing, call: ToolCallContext) -> str:
        parked.set()
        await go.wait()
        return "released"

    model = ScriptedModel(turns)
    return (AGENT.toolkit.handlers({wait: park}) + model.as_layer()).provide_merge(storage)


def _database(runtime: Runtime) -> Database:
    return runtime.context[DatabaseService]


def _answer(text: str) -> list[Turn]:
    return [Turn.text(text)]


async def test_a_second_run_of_a_conversation_on_the_same_file_is_refused_and_writes_nothing(
    store: Stores,
) -> None:
    parked, go, never = trio.Event(), trio.Event(), trio.Event()
    first_turns = [Turn.tool_calls(("wait", {})), Turn.text("First done.")]
    async with (
        open_runtime(_layer(store.storage(), first_turns, parked, go), agents=[AGENT]) as first,
        open_runtime(
            _layer(store.storage(), _answer("Second."), never, never), agents=[AGENT]
        ) as second,
        trio.open_nursery() as nursery,
    ):
        results: list[object] = []

        async def run_first() -> None:
            results.append(await first.run(AGENT, "Go.", conversation_id="c", create=True))

        nursery.start_soon(run_first)
        await parked.wait()
        before = len(await first.log.entries("c"))
        refused = await second.run(AGENT, "Me too.", conversation_id="c")
        assert refused.status == "failed"
        assert isinstance(refused.error, StorageFailed)
        assert refused.error.reason == (
            "conversation c has a run going in this process: nothing was written to it; wait "
            "for that run to end"
        )
        assert len(await first.log.entries("c")) == before  # nothing of the second run
        go.set()
    assert [getattr(r, "status", None) for r in results] == ["completed"]
    async with open_runtime(
        _layer(store.storage(), _answer("Third."), never, never), agents=[AGENT]
    ) as third:
        again = await third.run(AGENT, "Now?", conversation_id="c")  # the lane was let go
        assert again.status == "completed"
        runs = {getattr(e.record, "run_id", None) for e in await third.log.entries("c")}
    assert refused.run_id not in runs


async def test_a_run_whose_hold_was_taken_over_writes_nothing_more(store: Stores) -> None:
    parked, go, never = trio.Event(), trio.Event(), trio.Event()
    turns = [Turn.tool_calls(("wait", {})), Turn.text("Too late.")]
    async with (
        open_runtime(_layer(store.storage(), turns, parked, go), agents=[AGENT]) as slow,
        open_runtime(
            _layer(store.storage(), _answer("Mine now."), never, never), agents=[AGENT]
        ) as late,
        trio.open_nursery() as nursery,
    ):
        results: list[object] = []

        async def run_slow() -> None:
            results.append(await slow.run(AGENT, "Go.", conversation_id="c", create=True))

        nursery.start_soon(run_slow)
        await parked.wait()
        holds = _database(late).holds
        holds.clock = lambda: time.time() + DEFAULT_LEASE + 1  # the slow run's lease ran out
        taken = await late.run(AGENT, "Take over.", conversation_id="c")
        assert taken.status == "completed"
        go.set()
    (result,) = results
    assert getattr(result, "status", None) == "failed"
    error = getattr(result, "error", None)
    assert isinstance(error, StorageFailed)
    assert "taken over" in error.reason
    async with store.open() as database:
        entries = await SqliteConversationLog(database).entries("c")
    slow_run = getattr(result, "run_id", None)
    kinds = [
        type(e.record).__name__ for e in entries if getattr(e.record, "run_id", "") == slow_run
    ]
    # The slow run's records end where the other took over: no settlement, no terminal record.
    assert kinds == ["UserInputRecorded", "ModelResponseRecorded", "ToolCallPrepared"]
    assert type(entries[-1].record).__name__ == "RunCompletedRecord"


async def test_a_hold_is_renewed_while_it_lasts_and_let_go_when_the_database_closes(
    tmp_path: Path, autojump_clock: object
) -> None:
    path = tmp_path / "renew.db"
    wall = [1_000.0]
    async with open_database(path) as keeper, open_database(path, lease=9.0) as database:
        database.holds.clock = lambda: wall[0]
        log = SqliteConversationLog(database)
        await log.claim("c", "r1")
        await log.claim("c", "r1")  # again: nothing changes
        with pytest.raises(ConversationInUse):
            await log.claim("c", "r2")
        lane = await database.lanes.current("c")
        assert lane is not None
        assert (lane.attempt_id, lane.lease_until) == ("r1", 1_009.0)
        wall[0] += 4.0  # more than a third of the lease
        # The renewer wakes every third of a lease (mock time, which jumps while threads
        # work: on a loaded machine a renewal may take many of its wakes to land).
        for _ in range(5_000):
            await trio.sleep(3.0)
            lane = await database.lanes.current("c")
            assert lane is not None
            if lane.lease_until == 1_013.0:
                break
        assert lane.lease_until == 1_013.0
        await log.append("c", [_said("r1")])  # the claim is the run's: its input goes in
        await database.aclose()
        lane = await keeper.lanes.current("c")  # (the keeper keeps the file open: no recovery)
        assert lane is not None
        assert lane.worker_id is None  # released at close


async def test_an_explicit_release_lets_a_run_without_terminal_record_go(store: Stores) -> None:
    async with store.open() as one, store.open() as two:
        first, second = SqliteConversationLog(one), SqliteConversationLog(two)
        await first.append("c", [_said("r1")])
        with pytest.raises(ConversationInUse):
            await second.append("c", [_said("r2")])
        await first.release("c", "r2")  # not its run: nothing
        await first.release("c", "r1")
        await first.release("c", "r1")  # again: nothing
        assert await second.append("c", [_said("r2")]) == 2


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


async def test_another_process_run_is_named_and_its_hold_expires_with_its_lease_when_killed(
    tmp_path: Path,
) -> None:
    path = tmp_path / "procs.db"
    never = trio.Event()
    with _holder(path, "c") as holder:
        assert holder.stdout is not None
        line = await trio.to_thread.run_sync(holder.stdout.readline)
        assert line == "parked\n", holder.stderr.read() if holder.stderr else ""
        sqlite = Stores("sqlite", tmp_path)  # the holder process opens the file: SQLite here
        layer = _layer(sqlite.storage("procs"), _answer("Mine.") * 2, never, never)
        async with open_runtime(layer, agents=[AGENT]) as runtime:
            refused = await runtime.run(AGENT, "Me too.", conversation_id="c")
            assert isinstance(refused.error, StorageFailed)
            assert f"has a run going in another process (process {holder.pid})" in str(
                refused.error
            )
            os.kill(holder.pid, signal.SIGKILL)
            await trio.to_thread.run_sync(holder.wait)
            # Killed: its hold stays until its lease runs out (30 s) ...
            again = await runtime.run(AGENT, "Still?", conversation_id="c")
            assert again.status == "failed"
            # ... and then the next run takes the lane over.
            _database(runtime).holds.clock = lambda: time.time() + DEFAULT_LEASE + 1
            taken = await runtime.run(AGENT, "Now.", conversation_id="c")
            assert taken.status == "completed"
            lane = await _database(runtime).lanes.current("c")
            assert lane is not None
            assert lane.epoch == 2


async def test_a_hold_a_renewal_finds_taken_over_is_renewed_no_more_and_still_refuses(
    tmp_path: Path,
) -> None:
    path = tmp_path / "lost.db"
    async with open_database(path) as one, open_database(path) as two:
        first, second = SqliteConversationLog(one), SqliteConversationLog(two)
        await first.append("c", [_said("r1")])
        two.holds.clock = lambda: time.time() + DEFAULT_LEASE + 1  # r1's lease ran out
        await second.append("c", [_said("r2")])  # taken over
        await one.holds._renew(time.time())
        batches = one.writer.batches
        await one.holds._renew(time.time())  # lost: nothing more to renew, nothing written
        assert one.writer.batches == batches
        with pytest.raises(LaneLost, match="taken over"):  # never claimed again by a late append
            await first.append("c", [_said("r1", "steering")])
        assert [getattr(e.record, "run_id", "") for e in await second.entries("c")] == ["r1", "r2"]


async def test_an_append_of_an_iterator_holds_the_lane_as_one_of_a_list_does(
    store: Stores,
) -> None:
    """An append read its records twice — to encode them, then to see which run they start —
    so an iterator was empty the second time: its records were written, its run's lane never
    claimed, and a second run of the conversation was let in. Now any iterable is taken once,
    and what is not one is refused before anything is written."""
    async with store.open() as one, store.open() as other:
        first, second = SqliteConversationLog(one), SqliteConversationLog(other)
        await first.append("c", iter([_said("r1")]))  # type: ignore[arg-type]
        with pytest.raises(ConversationInUse):
            await second.append("c", [_said("r2")])
        for records in (None, "abc", b"abc", 5):
            with pytest.raises(TypeError, match=r"^records must be a sequence of records, got"):
                await first.append("c", records)  # type: ignore[arg-type]
        assert [e.record.run_id for e in await first.entries("c")] == ["r1"]  # type: ignore[union-attr]
