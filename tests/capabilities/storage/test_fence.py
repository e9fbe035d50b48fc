"""Fenced appends: two workers on one file, one of them stale (its lease ran out and the other
took the lane over). Every append of the stale one is refused — atomically, in its own
transaction — and nothing of it reaches the log, nor marks steering delivered."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from capabilities.storage import Connection
from capabilities.storage._database import open_database
from capabilities.storage._errors import LaneLost, LogWriteFailed, StorageError
from capabilities.storage._lanes import Lanes
from capabilities.storage._log import SqliteConversationLog
from effectagent.core import UserInputRecorded
from effectagent.engine import ConversationLogError
from tests.capabilities.durable.helpers import Stores

LEASE = 30.0


def said(who: str, n: int, kind: str = "user") -> UserInputRecorded:
    return UserInputRecorded(
        conversation_id="c",
        run_id=f"run-{who}",
        input_id=f"{who}-{n}",
        kind=kind,  # type: ignore[arg-type]
        text=f"{who} {n}",
        author="ann",
        at=1.0,
    )


def _queue_steering(conn: Connection, input_id: str) -> None:
    conn.execute(
        "INSERT INTO steering_inputs (input_id, conversation_id, position, kind, text, author, at, "
        "status, seq, reason) VALUES (?, 'c', 1, 'steering', 'hi', 'ann', 1.0, 'queued', NULL, '')",
        (input_id,),
    )


async def test_every_append_of_a_stale_worker_is_refused_and_nothing_of_it_is_written(
    store: Stores,
) -> None:
    clock = [1_000.0]
    async with store.open("two") as one, store.open("two") as two:  # as two processes would
        first = Lanes(one, worker_id="worker-1", lease=LEASE, clock=lambda: clock[0])
        second = Lanes(two, worker_id="worker-2", lease=LEASE, clock=lambda: clock[0])
        stale_lane = await first.claim("c")
        stale = SqliteConversationLog(one, fence=first.fence(stale_lane))
        assert await stale.append("c", [said("one", 1)]) == 1

        clock[0] += LEASE + 1  # worker 1 hung: its lease ran out, worker 2 takes over
        fresh_lane = await second.claim("c")
        fresh = SqliteConversationLog(two, fence=second.fence(fresh_lane))
        await one.write(lambda conn: _queue_steering(conn, "one-steer"))
        assert await fresh.append("c", [said("two", 1)]) == 2

        for records in (
            [said("one", 2)],
            [said("one", 3), said("one", 4)],
            [said("one-steer", 0, kind="steering")],  # would mark a queued input delivered
        ):
            with pytest.raises(LaneLost) as raised:
                await stale.append("c", records)
            assert isinstance(raised.value, ConversationLogError)
            assert isinstance(raised.value, StorageError)
            assert raised.value.conversation_id == "c"
            assert raised.value.seq is None
            assert "taken over (epoch 2" in str(raised.value)
        assert await fresh.append("c", [said("two", 2)]) == 3

        entries = await fresh.entries("c")
        assert [e.record.input_id for e in entries] == ["one-1", "two-1", "two-2"]  # type: ignore[union-attr]
        status = await two.read(
            lambda conn: conn.execute(
                "SELECT status FROM steering_inputs WHERE input_id = 'one-steer'"
            ).fetchone()[0]
        )
        assert status == "queued"

        assert await second.release(fresh_lane)
        with pytest.raises(LaneLost, match="released"):  # released: refused too
            await fresh.append("c", [said("two", 3)])


@settings(max_examples=25, deadline=None)
@given(
    order=st.lists(st.sampled_from(["stale", "fresh"]), min_size=1, max_size=16),
    sizes=st.lists(st.integers(1, 3), min_size=16, max_size=16),
)
def test_under_any_interleaving_only_the_fresh_worker_appends_land(
    order: list[str], sizes: list[int]
) -> None:
    """Both workers append at once, in group-committed batches that mix them: the stale one's
    are all refused, the fresh one's all there, whole and in order."""

    async def main() -> None:
        with tempfile.TemporaryDirectory() as directory:
            path = Path(directory) / "mix.db"
            clock = [1_000.0]
            async with open_database(path) as one, open_database(path) as two:
                first = Lanes(one, worker_id="worker-1", lease=LEASE, clock=lambda: clock[0])
                second = Lanes(two, worker_id="worker-2", lease=LEASE, clock=lambda: clock[0])
                stale = SqliteConversationLog(one, fence=first.fence(await first.claim("c")))
                clock[0] += LEASE + 1
                fresh = SqliteConversationLog(two, fence=second.fence(await second.claim("c")))
                refused: list[int] = []
                landed: list[tuple[int, int]] = []

                async def append(n: int, who: str) -> None:
                    log = stale if who == "stale" else fresh
                    records = [said(who, n * 10 + i) for i in range(sizes[n])]
                    try:
                        seq = await log.append("c", records)
                    except LaneLost:
                        assert who == "stale"
                        refused.append(n)
                    else:
                        assert who == "fresh"
                        landed.append((n, seq))

                async with trio.open_nursery() as nursery:
                    for n, who in enumerate(order):
                        nursery.start_soon(append, n, who)
                entries = await fresh.entries("c")
            assert sorted(refused) == [n for n, who in enumerate(order) if who == "stale"]
            ids = [e.record.input_id for e in entries]  # type: ignore[union-attr]
            assert all(i.startswith("fresh") for i in ids)
            for n, seq in landed:
                assert ids[seq - sizes[n] : seq] == [f"fresh-{n * 10 + i}" for i in range(sizes[n])]
            assert len(ids) == sum(sizes[n] for n, _ in landed)

    trio.run(main)


async def test_what_a_fence_raises_is_lane_lost_in_its_words_and_an_sqlite_error_a_failed_write(
    tmp_path: Path,
) -> None:
    seen: list[str] = []

    def refuses(conn: Connection, conversation_id: str) -> None:
        seen.append(conversation_id)
        raise RuntimeError("the worker was told to stop")

    def broken(conn: Connection, conversation_id: str) -> None:
        conn.execute("SELECT * FROM no_such_table")

    async with open_database(tmp_path / "f.db") as database:
        with pytest.raises(LaneLost) as raised:
            await SqliteConversationLog(database, fence=refuses).append("c", [said("x", 1)])
        assert seen == ["c"]
        assert str(raised.value) == (
            "an append to conversation c was refused: the worker was told to stop; nothing of it "
            "was written"
        )
        with pytest.raises(LogWriteFailed, match="no_such_table"):
            await SqliteConversationLog(database, fence=broken).append("c", [said("x", 1)])
        assert await SqliteConversationLog(database).entries("c") == []
