"""The Conversation Log contract, on every implementation: in memory (class E), SQLite in memory
and SQLite in a file (class P). Appends are all-or-nothing — also when cancelled — and gap-free
per conversation; what was appended reads back equal."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st

from capabilities._rules import storable
from capabilities.storage._database import open_database
from capabilities.storage._errors import RecordNotEncodable
from capabilities.storage._holds import shape_of
from capabilities.storage._log import SqliteConversationLog
from effectagent.core import (
    ConversationCreated,
    ToolCallPrepared,
    UserInputRecorded,
)
from effectagent.engine import ConversationLog

from ..conftest import EXAMPLES, KINDS, open_log
from ..records import RECORDS, same


def mark(conversation: str, append: int, index: int) -> UserInputRecorded:
    """The ``index``-th record of append number ``append``: it says which append it belongs to."""
    return UserInputRecorded(
        conversation_id=conversation,
        run_id="run",
        input_id=f"{append}.{index}",
        kind="user",
        text="t",
        author="a",
        at=1.0,
    )


def groups_of(entries: Any) -> list[tuple[int, int]]:
    """(append, index) of each entry written by :func:`mark`."""
    return [tuple(map(int, e.record.input_id.split("."))) for e in entries]  # type: ignore[misc]


async def test_appends_number_records_from_1_without_gaps_per_conversation(
    kind: str, tmp_path: Path
) -> None:
    async with open_log(kind, tmp_path) as log:
        assert await log.append("a", [mark("a", 0, 0), mark("a", 0, 1)]) == 2
        assert await log.append("b", [mark("b", 1, 0)]) == 1
        assert await log.append("a", [mark("a", 2, 0)]) == 3
        entries = await log.entries("a")
        assert [e.seq for e in entries] == [1, 2, 3]
        assert [e.seq for e in await log.entries("a", after=2)] == [3]
        assert await log.entries("a", after=3) == [] or list(await log.entries("a", after=3)) == []
        assert [e.seq for e in await log.entries("b")] == [1]
        assert list(await log.entries("nobody")) == []


def keepable_run(record: Any) -> Any:
    """``record``, with a run ID any database keeps when it starts or ends a run: the lane it
    claims or releases keeps that ID in a column, and one holding NUL or a lone surrogate is
    refused (``IdNotStorable``; ``test_unstorable``). Any other field holds any text."""
    shape = shape_of([record])
    ends = shape.ends[0] if shape.ends is not None else None
    if any(run is not None and not storable(run) for run in (shape.starts, ends)):
        run_id: str = record.run_id
        return attrs.evolve(record, run_id=run_id.encode("utf-8", "surrogatepass").hex())
    return record


@pytest.mark.parametrize("kind", KINDS)
def test_every_record_type_reads_back_equal(kind: str) -> None:
    """Through the table, not just the codec: each record as appended, in order."""

    @settings(max_examples=max(10, EXAMPLES // 10))
    @given(records=st.lists(RECORDS.map(keepable_run), min_size=1, max_size=8))
    def check(records: list[Any]) -> None:
        async def main() -> list[Any]:
            with tempfile.TemporaryDirectory() as directory:
                async with open_log(kind, Path(directory)) as log:
                    await log.append("c", records)
                    return [e.record for e in await log.entries("c")]

        back = trio.run(main)
        assert len(back) == len(records)
        assert all(same(a, b) for a, b in zip(back, records, strict=True))

    check()


AppendPlan = tuple[int, float, float | None]  # (records, start delay, cancel after)

PLANS = st.lists(
    st.tuples(
        st.integers(1, 4),
        st.sampled_from([0.0, 0.0, 0.5, 1.0]),
        st.none() | st.sampled_from([0.0, 0.25, 0.5, 1.0, 1.5, 3.0]),
    ),
    min_size=1,
    max_size=12,
)


@pytest.mark.parametrize("kind", KINDS)
def test_an_append_cancelled_at_any_point_is_all_or_nothing(kind: str) -> None:
    """Invariant: if ``append`` raises (``Cancelled`` included) none of its records is in the log;
    if it returns, all are, contiguous, at the numbers it returned — whatever the interleaving of
    concurrent appends to two conversations and of their cancellations (MockClock; the SQLite
    writer's thread makes the clock jump while a transaction runs, so cancellations land while
    writes are queued, in flight and done)."""
    examples = EXAMPLES // (2 if kind == "memory" else 8)

    @settings(max_examples=max(10, examples))
    @given(plans=PLANS)
    def check(plans: list[AppendPlan]) -> None:
        with tempfile.TemporaryDirectory() as directory:
            outcomes, entries = trio.run(
                _append_and_cancel,
                kind,
                Path(directory),
                plans,
                clock=trio.testing.MockClock(autojump_threshold=0),
            )
        for conversation in ("x", "y"):
            written = entries[conversation]
            assert [e.seq for e in written] == list(range(1, len(written) + 1))
            found: dict[int, list[tuple[int, int]]] = {}
            for seq, (append, index) in zip(
                [e.seq for e in written], groups_of(written), strict=True
            ):
                found.setdefault(append, []).append((seq, index))
            for number, (size, _, _) in enumerate(plans):
                if number % 2 != (conversation == "y"):
                    continue
                outcome = outcomes[number]
                if outcome is None:  # raised: nothing of it
                    assert number not in found
                else:  # returned: all of it, contiguous, ending at the returned number
                    got = found[number]
                    assert [i for _, i in got] == list(range(size))
                    assert [s for s, _ in got] == list(range(outcome - size + 1, outcome + 1))

    check()


async def _append_and_cancel(
    kind: str, directory: Path, plans: list[AppendPlan]
) -> tuple[list[int | None], dict[str, Any]]:
    outcomes: list[int | None] = [None] * len(plans)
    async with open_log(kind, directory) as log:

        async def one(number: int, size: int, start: float, cancel: float | None) -> None:
            conversation = "xy"[number % 2]
            records = [mark(conversation, number, i) for i in range(size)]
            with trio.CancelScope() as scope:
                if cancel is not None:
                    scope.deadline = trio.current_time() + cancel
                await trio.sleep(start)
                outcomes[number] = await log.append(conversation, records)

        async with trio.open_nursery() as nursery:
            for number, (size, start, cancel) in enumerate(plans):
                nursery.start_soon(one, number, size, start, cancel)
        entries = {c: list(await log.entries(c)) for c in "xy"}
    return outcomes, entries


async def test_concurrent_appends_share_transactions_but_stay_whole(tmp_path: Path) -> None:
    """Group commit: 100 concurrent appends take far fewer than 100 transactions, and each append
    is still contiguous and complete."""
    async with open_database(tmp_path / "g.db") as database:
        log = SqliteConversationLog(database)

        async def append(number: int) -> None:
            await log.append("c", [mark("c", number, i) for i in range(3)])

        async with trio.open_nursery() as nursery:
            for n in range(100):
                nursery.start_soon(append, n)
        entries = list(await log.entries("c"))
        assert database.writer.batches < 50
    assert [e.seq for e in entries] == list(range(1, 301))
    groups = groups_of(entries)
    for start in range(0, 300, 3):
        number = groups[start][0]
        assert groups[start : start + 3] == [(number, 0), (number, 1), (number, 2)]


async def test_a_record_that_does_not_encode_writes_nothing_of_its_append(
    tmp_path: Path,
) -> None:
    async with open_database(tmp_path / "n.db") as database:
        log = SqliteConversationLog(database)
        await log.append("c", [ConversationCreated(conversation_id="c", agent="a", at=1.0)])
        bad = ToolCallPrepared(
            conversation_id="c",
            run_id="r",
            turn=1,
            tool_call_id="t",
            tool_name="tool",
            arguments={"x": float("nan")},
            at=2.0,
        )
        with pytest.raises(RecordNotEncodable) as raised:
            await log.append("c", [mark("c", 1, 0), bad])
        assert (raised.value.conversation_id, raised.value.index) == ("c", 1)
        assert "nan" not in str(raised.value).lower()
        with pytest.raises(RecordNotEncodable):
            await log.append("c", ["not a record"])  # type: ignore[list-item]
        assert [e.seq for e in await log.entries("c")] == [1]


async def test_history_survives_closing_and_reopening(tmp_path: Path) -> None:
    path = tmp_path / "p.db"
    async with open_database(path) as database:
        await SqliteConversationLog(database).append("c", [mark("c", 0, 0), mark("c", 0, 1)])
    async with open_database(path) as database:
        log: ConversationLog = SqliteConversationLog(database)
        assert await log.append("c", [mark("c", 1, 0)]) == 3
        assert groups_of(await log.entries("c")) == [(0, 0), (0, 1), (1, 0)]


async def test_a_cancelled_append_waits_for_its_running_transaction_and_returns(
    tmp_path: Path,
) -> None:
    """The two halves of the contract, deterministically: an append cancelled while it waits for
    a transaction is withdrawn (raises, nothing written); one cancelled while its transaction runs
    is waited for and returns its number — it was written — and the cancellation reaches its
    caller at the next checkpoint."""
    import threading

    async with open_database(tmp_path / "c.db") as database:
        log = SqliteConversationLog(database)
        gates = [threading.Event(), threading.Event()]
        entered = [threading.Event(), threading.Event()]

        def blocking(i: int) -> Any:
            def work(_: Any) -> None:
                entered[i].set()
                gates[i].wait(10)

            return work

        returned: dict[str, int] = {}
        scopes: dict[str, trio.CancelScope] = {}

        async def append(name: str) -> None:
            with trio.CancelScope() as scope:
                scopes[name] = scope
                returned[name] = await log.append("c", [mark("c", ord(name), 0)])
                await trio.lowlevel.checkpoint()  # the cancellation arrives here
                returned[name + " after"] = 1

        async with trio.open_nursery() as nursery:
            nursery.start_soon(database.write, blocking(0))
            await trio.to_thread.run_sync(entered[0].wait)
            nursery.start_soon(append, "w")  # waits behind the first transaction
            await trio.testing.wait_all_tasks_blocked()
            scopes["w"].cancel()  # withdrawn before its batch is taken
            await trio.testing.wait_all_tasks_blocked()
            nursery.start_soon(database.write, blocking(1))  # leads the next batch…
            await trio.testing.wait_all_tasks_blocked()
            nursery.start_soon(append, "t")  # …which takes this append too
            await trio.testing.wait_all_tasks_blocked()
            gates[0].set()
            await trio.to_thread.run_sync(entered[1].wait)  # the second batch is running
            scopes["t"].cancel()
            await trio.testing.wait_all_tasks_blocked()
            assert "t" not in returned  # still waiting for its transaction
            gates[1].set()
        assert "w" not in returned
        assert returned["t"] == 1
        assert "t after" not in returned
        assert groups_of(await log.entries("c")) == [(ord("t"), 0)]
