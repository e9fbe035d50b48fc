"""Steering and follow-ups through the real engine (spec §4).

The generated interleavings run on the mock clock with the in-memory inbox (a task waiting for
the SQLite thread would let the mock clock jump: see ``storage/test_continue.py``); the SQLite
inbox is tested on the real clock for what it adds — persisted before the receipt, delivered in
the transaction of its record, expired after a restart.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import Any

import attrs
import psycopg
import psycopg.sql
import pytest
import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st

from capabilities import in_memory_storage, postgres_storage, sqlite_storage
from capabilities.steering import InputReceipt, SteeringLimits, SteeringService
from capabilities.steering._admission import Admissions, Entry
from capabilities.steering._journal import SqliteJournal
from capabilities.storage._database import open_database
from effectagent import Agent, AgentPolicy, Tool, ToolCallContext, Toolkit, open_runtime
from effectagent.ai import UserMessage
from effectagent.core import (
    LogEntry,
    ModelResponseRecorded,
    ToolCallSettled,
    UserInputRecorded,
)
from effectagent.engine import SteeringInput
from effectagent.testing import ScriptedModel, Turn

from ..conftest import EXAMPLES


@attrs.frozen
class Wait:
    seconds: float


@attrs.frozen
class Done:
    ok: bool


work = Tool("work", "Work for a while.", parameters=Wait, success=Done)
TOOLKIT = Toolkit(work)
AGENT = Agent(
    "worker",
    "Work.",
    AgentPolicy(max_turns=200, max_tool_calls=400, max_duration=10_000, tool_concurrency=2),
    TOOLKIT,
)


async def do_work(params: Wait, call: ToolCallContext) -> Done:
    await trio.sleep(params.seconds)
    return Done(True)


HANDLERS = TOOLKIT.handlers({work: do_work})

# A turn: a tool batch (calls, each working ``seconds``) or the answer, streamed after ``delay``.
TurnPlan = tuple[int, float, float]
TURNS = st.lists(
    st.tuples(st.integers(0, 2), st.sampled_from([0.0, 0.5, 1.0]), st.sampled_from([0.0, 1.0])),
    min_size=1,
    max_size=5,
)
# A submission: (at what time, steering or follow-up, text).
Submission = tuple[float, str, str]
SUBMISSIONS = st.lists(
    st.tuples(
        st.sampled_from([0.0, 0.25, 0.5, 1.0, 1.5, 2.0, 3.0, 5.0, 8.0]),
        st.sampled_from(["steering", "follow-up"]),
        st.sampled_from(["left", "right", "stop"]),
    ),
    max_size=8,
)


def script(turns: list[TurnPlan]) -> list[Turn]:
    out = []
    for calls, seconds, delay in turns:
        if calls:
            batch = [("work", {"seconds": seconds}, f"call_{i}") for i in range(calls)]
            out.append(Turn.tool_calls(*batch, delay=delay))
    out.append(Turn.text("finished", delay=1.0))
    # Follow-ups make the agent go on: plenty of answers for the turns they add.
    return out + [Turn.text("more", delay=0.5)] * 64


@settings(max_examples=max(20, EXAMPLES // 2))
@given(turns=TURNS, submissions=SUBMISSIONS, start=st.sampled_from([0.0, 1.0]))
def test_steering_and_follow_ups_are_fifo_and_enter_at_safe_points(
    turns: list[TurnPlan], submissions: list[Submission], start: float
) -> None:
    """Under generated interleavings of turns, tool batches and submissions:

    * an input is accepted only while the run is going; every accepted input is delivered
      exactly once (the run completes), its receipt and status agree with the log;
    * steering is delivered in admission order, follow-ups too;
    * an input enters only at a safe point: never inside a tool batch (between a response with
      tool calls and the last settlement of that batch), and the very next model request
      carries it;
    * the batch in flight finishes normally: every call succeeds.
    """
    model = ScriptedModel(script(turns))
    receipts, statuses, log, window = trio.run(
        _steer_a_run,
        model,
        submissions,
        start,
        clock=trio.testing.MockClock(autojump_threshold=0),
    )
    began, ended = window
    for (at, _, _), receipt in zip(sorted(submissions, key=lambda s: s[0]), receipts, strict=True):
        if receipt.accepted:
            assert began <= at <= ended
        if at < began or at > ended:
            assert receipt.rejection == "no-active-run"
    accepted = [r for r in receipts if r.accepted]
    delivered = {
        e.record.input_id: e
        for e in log
        if isinstance(e.record, UserInputRecorded) and e.record.kind != "user"
    }
    assert set(delivered) == {r.input_id for r in accepted}
    for receipt, status in zip(accepted, statuses, strict=True):
        entry = delivered[receipt.input_id]
        assert isinstance(entry.record, UserInputRecorded)
        assert (entry.record.kind, entry.record.author) == (receipt.kind, "ann")
        assert status is not None
        assert (status.state, status.seq) == ("delivered", entry.seq)
    for kind in ("steering", "follow-up"):
        admitted = [r.input_id for r in accepted if r.kind == kind]
        seqs = [delivered[i].seq for i in admitted]
        assert seqs == sorted(seqs)
    _assert_safe_points(log, model)
    settled = [e.record for e in log if isinstance(e.record, ToolCallSettled)]
    assert all(s.outcome.kind == "success" for s in settled)


async def _steer_a_run(
    model: ScriptedModel, submissions: list[Submission], start: float
) -> tuple[list[InputReceipt], list[Any], list[LogEntry], tuple[float, float]]:
    receipts: list[InputReceipt] = []
    window = [float("inf"), float("inf")]
    async with open_runtime(
        (HANDLERS + model.as_layer()).provide_merge(in_memory_storage()), agents=[AGENT]
    ) as runtime:
        steering = runtime.context[SteeringService]
        conversation = "conv-steered"

        async def run() -> None:
            await trio.sleep(start)
            window[0] = trio.current_time()
            result = await runtime.run(AGENT, "Go.", conversation_id=conversation, create=True)
            window[1] = trio.current_time()
            assert result.status == "completed"

        async def submit() -> None:
            now = 0.0
            for at, kind, text in sorted(submissions, key=lambda s: s[0]):
                await trio.sleep(at - now)
                now = at
                method = steering.steer if kind == "steering" else steering.follow_up
                receipts.append(await method(conversation, text, author="ann"))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(run)
            nursery.start_soon(submit)
        statuses = [await steering.status(r.input_id) for r in receipts if r.accepted]
        log = list(await runtime.log.entries(conversation))
    return receipts, statuses, log, (window[0], window[1])


def _assert_safe_points(log: Sequence[LogEntry], model: ScriptedModel) -> None:
    responses = 0
    open_calls: set[str] = set()
    for entry in log:
        record = entry.record
        if isinstance(record, ModelResponseRecorded):
            responses += 1
            open_calls = {c["id"] for k, c in record.content if k == "tool-call"}
        elif isinstance(record, ToolCallSettled):
            open_calls.discard(record.tool_call_id)
        elif isinstance(record, UserInputRecorded) and record.kind != "user":
            assert not open_calls, "input entered in the middle of a tool batch"
            # The next request (the one whose response is the next record of the model) has it.
            request = model.requests[responses]
            assert UserMessage.text(record.text) in request.messages


@pytest.mark.parametrize("storage", ["memory", "sqlite", "postgresql"])
async def test_steering_during_a_tool_call_enters_before_the_next_request(
    storage: str, tmp_path: Path, postgres_schema: tuple[str, str]
) -> None:
    """The batch in flight finishes, then the steering is canonical before the next request. In
    a database the admission is durable: persisted before the receipt, marked delivered (its
    text cleared) by the append that makes it canonical, in one transaction."""
    path = tmp_path / "steer.db"
    url, schema = postgres_schema
    seen: dict[str, Any] = {}

    def committed(sql: str, *params: Any) -> list[tuple[Any, ...]]:
        """What another connection sees: only what was committed."""
        if storage == "postgresql":
            with psycopg.connect(url, autocommit=True) as pg:
                pg.execute(
                    psycopg.sql.SQL("SET search_path TO {}").format(psycopg.sql.Identifier(schema))
                )
                return [tuple(row) for row in pg.execute(sql.replace("?", "%s"), params)]
        conn = sqlite3.connect(path)
        try:
            return [tuple(row) for row in conn.execute(sql, params)]
        finally:
            conn.close()

    async def handle(params: Wait, call: ToolCallContext) -> Done:
        steering = seen["steering"]
        receipt = await steering.steer(call.conversation_id, "use Celsius", author="ann")
        seen.setdefault("receipts", []).append(receipt)
        if storage != "memory":
            seen["row"] = committed(
                "SELECT status, text FROM steering_inputs WHERE input_id = ?", receipt.input_id
            )[0]
        await trio.sleep(0.01)  # the call goes on after the steering arrived: it finishes
        return Done(True)

    model = ScriptedModel(
        [Turn.tool_calls(("work", {"seconds": 0}), ("work", {"seconds": 0})), Turn.text("4 °C")]
    )
    layer = (TOOLKIT.handlers({work: handle}) + model.as_layer()).provide_merge(
        in_memory_storage()
        if storage == "memory"
        else postgres_storage(url, schema=schema)
        if storage == "postgresql"
        else sqlite_storage(path)
    )
    async with open_runtime(layer, agents=[AGENT]) as runtime:
        seen["steering"] = runtime.context[SteeringService]
        result = await runtime.run(AGENT, "Weather?")
        # The two calls steer at once, so which receipt comes back last is not the test's to
        # choose: the one admitted last (the higher position) is the one looked at.
        receipt = max(seen["receipts"], key=lambda r: r.position)
        status = await seen["steering"].status(receipt.input_id)
        log = list(await runtime.log.entries(result.conversation_id))
    positions = sorted(r.position for r in seen["receipts"])
    if storage == "postgresql":
        # Both admissions read the last position and write the next at once: SERIALIZABLE may
        # run one again, which then takes the position after the other's (2 and 3).
        assert positions in ([1, 2], [2, 3])
    else:
        assert positions == [1, 2]
    assert receipt.admission == "accepted"
    assert receipt.durable is (storage != "memory")
    assert result.status == "completed"
    assert [o.kind for o in result.outcomes] == ["success", "success"]
    assert UserMessage.text("use Celsius") not in model.requests[0].messages
    assert UserMessage.text("use Celsius") in model.requests[1].messages
    kinds = [type(e.record).__name__ for e in log]
    steered = [
        i
        for i, e in enumerate(log)
        if isinstance(e.record, UserInputRecorded) and e.record.kind == "steering"
    ]
    assert len(steered) == 2  # both calls steered; both inputs entered after the whole batch
    assert kinds[steered[0] - 2 : steered[0]] == ["ToolCallSettled", "ToolCallSettled"]
    assert status is not None
    assert (status.state, status.seq) == ("delivered", log[steered[1]].seq)
    if storage != "memory":
        assert seen["row"] == ("queued", "use Celsius")
        rows = committed("SELECT status, text FROM steering_inputs")
        assert rows == [("delivered", None), ("delivered", None)]


async def test_rejections_are_typed_receipts(tmp_path: Path) -> None:
    gate, working = trio.Event(), trio.Event()

    async def handle(params: Wait, call: ToolCallContext) -> Done:
        working.set()
        await gate.wait()
        return Done(True)

    model = ScriptedModel([Turn.tool_calls(("work", {"seconds": 0})), Turn.text("done")])
    storage = sqlite_storage(
        tmp_path / "r.db", steering_limits=SteeringLimits(max_chars=20, max_pending=2)
    )
    layer = (TOOLKIT.handlers({work: handle}) + model.as_layer()).provide_merge(storage)
    async with open_runtime(layer, agents=[AGENT]) as runtime:
        steering = runtime.context[SteeringService]
        idle = await steering.steer("conv-r", "hello", author="ann")
        assert (idle.admission, idle.rejection) == ("rejected", "no-active-run")
        async with trio.open_nursery() as nursery:
            nursery.start_soon(
                partial(runtime.run, AGENT, "Go.", conversation_id="conv-r", create=True)
            )
            await working.wait()  # the run is going, in its tool batch
            assert (await steering.steer("conv-r", "   ", author="ann")).rejection == "empty"
            assert (await steering.steer("conv-r", "x" * 21, author="ann")).rejection == "too-large"
            assert (await steering.steer("conv-r", "one", author="ann")).accepted
            assert (await steering.follow_up("conv-r", "two", author="ann")).accepted
            full = await steering.steer("conv-r", "three", author="ann")
            assert full.rejection == "queue-full"
            gate.set()
        late = await steering.follow_up("conv-r", "after", author="ann")
        assert late.rejection == "no-active-run"
    for bad in (None, 3):
        try:
            await steering.steer(bad, "x", author="ann")  # type: ignore[arg-type]
        except TypeError:
            pass
        else:  # pragma: no cover
            raise AssertionError("a conversation ID that is not a str is refused")


async def test_the_size_bound_counts_the_text_as_it_is_kept_redacted() -> None:
    """The steering guide: ``max_chars`` bounds the text as it is kept, redacted — a secret in
    it counts as its ``[REDACTED]``, which is what the journal and the log hold."""
    gate, working = trio.Event(), trio.Event()

    async def handle(params: Wait, call: ToolCallContext) -> Done:
        working.set()
        await gate.wait()
        return Done(True)

    model = ScriptedModel([Turn.tool_calls(("work", {"seconds": 0})), Turn.text("done")])
    storage = in_memory_storage(steering_limits=SteeringLimits(max_chars=10))
    layer = (TOOLKIT.handlers({work: handle}) + model.as_layer()).provide_merge(storage)
    async with open_runtime(layer, agents=[AGENT], secrets=["hunter2"]) as runtime:
        steering = runtime.context[SteeringService]
        async with trio.open_nursery() as nursery:
            nursery.start_soon(
                partial(runtime.run, AGENT, "Go.", conversation_id="conv-s", create=True)
            )
            await working.wait()
            assert (await steering.steer("conv-s", "x" * 10, author="ann")).accepted
            secret = await steering.steer("conv-s", "pw hunter2", author="ann")  # 10 characters
            assert secret.rejection == "too-large"  # kept as "pw [REDACTED]": 13
            gate.set()


async def test_input_left_waiting_expires_with_its_run_and_after_a_restart(tmp_path: Path) -> None:
    """A run that ends without reaching a safe point (here: interrupted while its tool works)
    expires what it never took; a process that dies leaves queued input that expires when the
    database is opened again. Neither is lost silently: the status says which and why."""
    path = tmp_path / "x.db"
    parked = trio.Event()

    async def park(params: Wait, call: ToolCallContext) -> Done:
        parked.set()
        await trio.sleep_forever()
        raise AssertionError  # pragma: no cover

    model = ScriptedModel([Turn.tool_calls(("work", {"seconds": 0}))])
    layer = (TOOLKIT.handlers({work: park}) + model.as_layer()).provide_merge(sqlite_storage(path))
    async with open_runtime(layer, agents=[AGENT]) as runtime:
        steering = runtime.context[SteeringService]
        async with trio.open_nursery() as nursery:
            nursery.start_soon(
                partial(runtime.run, AGENT, "Go.", conversation_id="conv-x", create=True)
            )
            await parked.wait()
            receipt = await steering.steer("conv-x", "too late", author="ann")
            assert receipt.accepted
            nursery.cancel_scope.cancel()  # interrupted before its next turn
        status = await steering.status(receipt.input_id)
    assert status is not None
    assert (status.state, status.seq) == ("expired", None)
    assert "interrupted" in status.reason

    # A process that dies with an admitted input still queued (written as the inbox writes it).
    admissions = Admissions()
    admissions.run_started("conv-y", "run-y")
    entry = admissions.admit("conv-y", SteeringInput("input-y", "follow-up", "later", "bo", 1.0))
    assert isinstance(entry, Entry)
    async with open_database(path) as database:
        await SqliteJournal(database).admitted(entry)
    model = ScriptedModel([])
    async with open_runtime(model.as_layer() + sqlite_storage(path)) as runtime:
        status = await runtime.context[SteeringService].status("input-y")
    assert status is not None
    assert (status.state, status.kind, status.author) == ("expired", "follow-up", "bo")
    assert "process ended" in status.reason


def _bytes_on_disk(directory: Path) -> bytes:
    """Everything SQLite wrote under ``directory`` (database, WAL, shared memory)."""
    return b"".join(p.read_bytes() for p in sorted(directory.glob("steer.db*")) if p.is_file())


async def test_a_secret_in_steering_never_reaches_the_journal_even_while_it_waits(
    tmp_path: Path,
) -> None:
    """Steering is redacted as it is admitted, with the runtime's redaction: the row that waits
    in SQLite for delivery holds the redacted text, and so do the log and the model's request."""
    from effectagent.core import REDACTED

    path = tmp_path / "steer.db"
    seen: dict[str, Any] = {}

    async def handle(params: Wait, call: ToolCallContext) -> Done:
        receipt = await seen["steering"].steer(
            call.conversation_id, "the password is hunter2", author="ann"
        )
        conn = sqlite3.connect(path)  # what is at rest while the input waits
        seen["row"] = conn.execute(
            "SELECT text FROM steering_inputs WHERE input_id = ?", (receipt.input_id,)
        ).fetchone()
        conn.close()
        return Done(True)

    model = ScriptedModel([Turn.tool_calls(("work", {"seconds": 0})), Turn.text("noted")])
    layer = (TOOLKIT.handlers({work: handle}) + model.as_layer()).provide_merge(
        sqlite_storage(path)
    )
    async with open_runtime(layer, agents=[AGENT], secrets=["hunter2"]) as runtime:
        seen["steering"] = runtime.context[SteeringService]
        result = await runtime.run(AGENT, "Weather?")
        log = list(await runtime.log.entries(result.conversation_id))
    assert seen["row"] == (f"the password is {REDACTED}",)
    steered = [e.record for e in log if isinstance(e.record, UserInputRecorded)][-1]
    assert steered.text == f"the password is {REDACTED}"
    assert UserMessage.text(f"the password is {REDACTED}") in model.requests[1].messages
    assert b"hunter2" not in _bytes_on_disk(tmp_path)
    assert "hunter2" not in repr(log) + repr(model.requests)


async def test_a_secret_in_the_author_is_redacted_like_the_text(tmp_path: Path) -> None:
    """The author is kept with the input — in the journal, the receipt, its status and the
    record in the log — so a registered secret there is redacted as the text is."""
    from effectagent.core import REDACTED

    path = tmp_path / "author.db"
    seen: dict[str, Any] = {}

    async def handle(params: Wait, call: ToolCallContext) -> Done:
        steering = seen["steering"]
        seen["receipts"] = [
            await steering.steer(call.conversation_id, "Go on.", author="ann hunter2"),
            await steering.follow_up(call.conversation_id, "Then stop.", author="hunter2"),
        ]
        return Done(True)

    model = ScriptedModel(
        [Turn.tool_calls(("work", {"seconds": 0})), Turn.text("going"), Turn.text("stopped")]
    )
    layer = (TOOLKIT.handlers({work: handle}) + model.as_layer()).provide_merge(
        sqlite_storage(path)
    )
    async with open_runtime(layer, agents=[AGENT], secrets=["hunter2"]) as runtime:
        steering = seen["steering"] = runtime.context[SteeringService]
        result = await runtime.run(AGENT, "Weather?")
        log = list(await runtime.log.entries(result.conversation_id))
        statuses = [await steering.status(r.input_id) for r in seen["receipts"]]
    receipts: list[InputReceipt] = seen["receipts"]
    assert [r.author for r in receipts] == [f"ann {REDACTED}", REDACTED]
    assert [s.author for s in statuses if s is not None] == [f"ann {REDACTED}", REDACTED]
    assert [s.state for s in statuses if s is not None] == ["delivered", "delivered"]
    steered = [e.record for e in log if isinstance(e.record, UserInputRecorded)][1:]
    assert [r.author for r in steered] == [f"ann {REDACTED}", REDACTED]
    assert "hunter2" not in repr(log) + repr(receipts) + repr(statuses)
    assert b"hunter2" not in _bytes_on_disk(tmp_path)


@pytest.mark.parametrize("storage", ["memory", "sqlite"])
async def test_a_receipt_refused_before_any_run_holds_the_redacted_author(
    storage: str, tmp_path: Path
) -> None:
    """Before the runtime ran anything, input is redacted all the same: the runtime's redaction
    is the inbox's from the start, whatever keeps it."""
    from effectagent.core import REDACTED

    layer = ScriptedModel([Turn.text("x")]).as_layer()
    kept = in_memory_storage() if storage == "memory" else sqlite_storage(tmp_path / "early.db")
    agent = Agent("idle", "Answer briefly.")
    async with open_runtime(layer + kept, agents=[agent], secrets=["hunter2"]) as runtime:
        steering = runtime.context[SteeringService]
        steered = await steering.steer("conv_none", "Go on, hunter2.", author="ann hunter2")
        followed = await steering.follow_up("conv_none", ["hunter2"], author="hunter2")
    assert (steered.admission, steered.rejection) == ("rejected", "no-active-run")
    assert [steered.author, followed.author] == [f"ann {REDACTED}", REDACTED]
    assert "hunter2" not in repr([steered, followed])


@pytest.mark.parametrize(
    ("conversation_id", "author"), [("conv", ""), ("conv", " \t"), ("", "ann"), ("  ", "ann")]
)
async def test_an_empty_or_blank_conversation_or_author_is_refused_at_the_call(
    conversation_id: str, author: str
) -> None:
    quiet = Agent("quiet", "Answer.")
    async with open_runtime(ScriptedModel.layer([]) + in_memory_storage(), agents=[quiet]) as rt:
        steering = rt.context[SteeringService]
        for submit in (steering.steer, steering.follow_up):
            with pytest.raises(ValueError, match="must not be empty or blank"):
                await submit(conversation_id, "Go on.", author=author)


async def test_input_accepted_before_the_grace_turn_enters_its_prompt_and_later_is_refused(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The run's deadline cuts a tool call short while steering and a follow-up wait: no turn
    boundary drained them, yet the grace turn's request is a next model request, so both are
    canonical before it (they used to expire undelivered). Once the grace turn began the run
    takes no more input: a submission during it is refused ``"run-ending"`` instead of being
    accepted only to expire."""
    seen: dict[str, Any] = {}

    async def handle(params: Wait, call: ToolCallContext) -> Done:
        steering = seen["steering"]
        seen["early"] = [
            await steering.steer(call.conversation_id, "use Celsius", author="ann"),
            await steering.follow_up(call.conversation_id, "and the wind", author="ann"),
        ]
        await trio.sleep_forever()  # until the run's deadline cuts it short
        raise AssertionError("unreachable")

    async def submit_during_grace(conversation_id: str) -> None:
        await trio.sleep(95)  # the grace turn streams from 90 s (the deadline) to 99 s
        seen["late"] = await seen["steering"].steer(conversation_id, "too late", author="ann")

    short = attrs.evolve(AGENT, policy=AgentPolicy(max_turns=5, max_duration=100))
    model = ScriptedModel([Turn.tool_calls(("work", {"seconds": 0})), Turn.text("4 °C", delay=9)])
    layer = (TOOLKIT.handlers({work: handle}) + model.as_layer()).provide_merge(in_memory_storage())
    async with open_runtime(layer, agents=[short]) as runtime:
        steering = seen["steering"] = runtime.context[SteeringService]
        async with trio.open_nursery() as nursery:
            nursery.start_soon(submit_during_grace, "conv-graced")
            result = await runtime.run(
                short, "Weather?", conversation_id="conv-graced", create=True
            )
        statuses = [await steering.status(r.input_id) for r in seen["early"]]
        log = list(await runtime.log.entries(result.conversation_id))
    assert result.status == "completed"
    assert result.text == "4 °C"
    assert [s.state for s in statuses if s is not None] == ["delivered", "delivered"]
    grace_request = model.requests[-1]
    assert UserMessage.text("use Celsius") in grace_request.messages
    assert UserMessage.text("and the wind") in grace_request.messages
    inputs = [e.record for e in log if isinstance(e.record, UserInputRecorded)]
    assert [(r.kind, r.text) for r in inputs] == [
        ("user", "Weather?"),
        ("steering", "use Celsius"),
        ("follow-up", "and the wind"),
    ]
    late: InputReceipt = seen["late"]
    assert (late.accepted, late.rejection) == (False, "run-ending")


@pytest.mark.parametrize("storage", ["memory", "sqlite"])
@pytest.mark.parametrize(
    ("conversation_id", "author", "which"),
    [
        ("conv\x00x", "ann", "conversation_id"),
        ("conv\ud800", "ann", "conversation_id"),
        ("conv", "ann\x00", "author"),
        ("conv", "ann\udfff", "author"),
    ],
)
async def test_an_id_or_author_no_store_keeps_is_refused_the_same_by_every_store(
    storage: str, conversation_id: str, author: str, which: str, tmp_path: Path
) -> None:
    """NUL (PostgreSQL's text cannot hold it) or a lone surrogate (it has no UTF-8 form) in the
    conversation ID or the author is a ``ValueError`` naming the argument, as a run refuses
    such a conversation ID — in memory as in a database, where it used to be the driver's
    ``UnicodeEncodeError`` (or, on PostgreSQL, a storage error); an input ID like it was never
    accepted: its status is None."""
    quiet = Agent("quiet", "Answer.")
    kept = in_memory_storage() if storage == "memory" else sqlite_storage(tmp_path / "ids.db")
    async with open_runtime(ScriptedModel.layer([]) + kept, agents=[quiet]) as runtime:
        steering = runtime.context[SteeringService]
        for submit in (steering.steer, steering.follow_up):
            with pytest.raises(ValueError, match=f"^{which} must not hold NUL or a lone surrogate"):
                await submit(conversation_id, "Go on.", author=author)
        assert await steering.status(conversation_id) is None


@pytest.mark.parametrize("storage", ["memory", "sqlite", "postgresql"])
async def test_an_id_or_author_longer_than_a_run_takes_is_refused_by_every_store(
    storage: str, tmp_path: Path, postgres_schema: tuple[str, str]
) -> None:
    """A conversation ID or author longer than 512 bytes in UTF-8 is a ``ValueError`` naming
    the argument, as a run refuses it — it used to be admitted (a receipt, rejected or not, and
    on a database a row of the journal); 512 bytes are taken."""
    url, schema = postgres_schema
    quiet = Agent("quiet", "Answer.")
    kept = (
        in_memory_storage()
        if storage == "memory"
        else sqlite_storage(tmp_path / "long.db")
        if storage == "sqlite"
        else postgres_storage(url, schema=schema)
    )
    longest = "é" * 256  # 512 bytes
    async with open_runtime(ScriptedModel.layer([]) + kept, agents=[quiet]) as runtime:
        steering = runtime.context[SteeringService]
        for submit in (steering.steer, steering.follow_up):
            for conversation_id, author, which in (
                ("c" * 513, "ann", "conversation_id"),
                (longest + "é", "ann", "conversation_id"),
                ("conv", "a" * 513, "author"),
                ("conv", longest + "x", "author"),
            ):
                with pytest.raises(
                    ValueError, match=f"^{which} must be at most 512 bytes in UTF-8$"
                ):
                    await submit(conversation_id, "Go on.", author=author)
            receipt = await submit(longest, "Go on.", author=longest)
            assert receipt.rejection == "no-active-run"  # checked, then not admitted: no run
        with pytest.raises(ValueError, match=r"^conversation_id must be at most 512 bytes"):
            await runtime.run(quiet, "Hi.", conversation_id="c" * 513)  # as a run refuses it


@pytest.mark.parametrize("storage", ["sqlite", "postgresql"])
async def test_text_holding_nul_or_a_lone_surrogate_is_admitted_and_delivered_whole(
    storage: str, tmp_path: Path, postgres_schema: tuple[str, str]
) -> None:
    """A run's input may hold NUL or a lone surrogate; steering may too: the journal's text
    column, which cannot keep them, used to refuse the admission (``UnicodeEncodeError``, a
    storage error on PostgreSQL). The run here takes the input from memory, whole."""
    url, schema = postgres_schema
    seen: dict[str, Any] = {}
    texts = ["nul \x00 here", "lone \ud800 here"]

    async def handle(params: Wait, call: ToolCallContext) -> Done:
        steering = seen["steering"]
        seen["receipts"] = [
            await steering.steer(call.conversation_id, text, author="ann") for text in texts
        ]
        return Done(True)

    model = ScriptedModel([Turn.tool_calls(("work", {"seconds": 0})), Turn.text("done")])
    kept = (
        postgres_storage(url, schema=schema)
        if storage == "postgresql"
        else sqlite_storage(tmp_path / "text.db")
    )
    layer = (TOOLKIT.handlers({work: handle}) + model.as_layer()).provide_merge(kept)
    async with open_runtime(layer, agents=[AGENT]) as runtime:
        seen["steering"] = runtime.context[SteeringService]
        result = await runtime.run(AGENT, "Go.")
        statuses = [await seen["steering"].status(r.input_id) for r in seen["receipts"]]
        log = list(await runtime.log.entries(result.conversation_id))
    assert [r.admission for r in seen["receipts"]] == ["accepted", "accepted"]
    assert [s.state for s in statuses if s is not None] == ["delivered", "delivered"]
    steered = [e.record.text for e in log if isinstance(e.record, UserInputRecorded)][1:]
    assert steered == texts
    for text in texts:
        assert UserMessage.text(text) in model.requests[1].messages
