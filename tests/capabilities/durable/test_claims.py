"""Claims on PostgreSQL: workers claiming at once take different conversations (``FOR UPDATE SKIP
LOCKED``) and none of them runs its transaction again; takeovers of expired leases stay
serializable. On both backends: a look that finds nothing to claim writes nothing."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from capabilities.durable._claims import claim_lanes
from capabilities.durable._store import Claimed, claim, claim_free, release
from capabilities.storage._port import Connection

from ..conftest import EXAMPLES
from .helpers import Clock, HandWorker, Stores, queue, stores

#: A bound on how long one claim waits for the others inside its transaction: reached only when
#: a claim blocks on another's locks (the failure this file looks for), never on success.
_BARRIER_BOUND = 20.0


class _CountingWrites:
    """A database whose writes are counted (reads and everything else pass through)."""

    def __init__(self, database: Any) -> None:
        self._database = database
        self.writes = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._database, name)

    async def write(self, work: Any, **options: Any) -> Any:
        self.writes += 1
        return await self._database.write(work, **options)


async def test_a_look_that_finds_nothing_to_claim_writes_nothing(store: Stores) -> None:
    """Idle workers look for work every poll; each look was a write — on SQLite the file's one
    write lock, on PostgreSQL a serializable transaction (two, with the takeovers). A look reads
    first and writes only to claim what it found: a free head, then an expired lease."""
    clock = Clock()
    ids = (f"attempt-{n}" for n in itertools.count())
    async with store.open() as db:
        counting = _CountingWrites(db)

        async def look(worker_id: str) -> list[Claimed]:
            return await claim_lanes(
                counting, now=clock(), worker_id=worker_id, lease=30.0, limit=4, attempt_ids=ids
            )

        assert await look("w1") == []
        assert counting.writes == 0  # nothing queued: nothing written
        await queue(db, clock).submit(
            "a", "x", conversation_id="c", idempotency_key="k", principal="p"
        )
        (claimed,) = await look("w1")
        assert claimed.lane.worker_id == "w1"
        assert counting.writes == 1  # the claim alone: no takeover to look for
        assert await look("w2") == []  # its lane is held, under its lease
        assert counting.writes == 1
        clock.advance(31.0)  # the lease runs out: a takeover to make
        (taken,) = await look("w2")
        assert (taken.lane.worker_id, taken.lane.conversation_id) == ("w2", "c")
        assert counting.writes == 2


@pytest.mark.parametrize("claimers", [2, 3])
async def test_concurrent_claims_take_different_conversations_and_none_runs_again(
    tmp_path: Path, claimers: int
) -> None:
    clock = Clock()
    with stores("postgresql", tmp_path) as made:
        async with made.open() as db:
            q = queue(db, clock)
            for n in range(claimers):
                await q.submit(
                    "a", "x", conversation_id=f"c{n}", idempotency_key="k", principal="p"
                )
        # Every claim's transaction claims, then waits inside it until all have claimed: the
        # transactions overlap, none commits before every one has read and written.
        barrier = threading.Barrier(claimers, timeout=_BARRIER_BOUND)
        calls = [0] * claimers
        got: list[list[Claimed]] = [[] for _ in range(claimers)]

        def work_of(index: int) -> Callable[[Connection], list[Claimed]]:
            def work(conn: Connection) -> list[Claimed]:
                calls[index] += 1
                claimed = claim_free(
                    conn,
                    now=clock(),
                    worker_id=f"w{index}",
                    lease=30.0,
                    limit=1,
                    attempt_ids=(f"w{index}-{n}" for n in range(1_000)),
                )
                if calls[index] == 1:
                    barrier.wait()
                return claimed

            return work

        async def claimer(index: int) -> None:
            # one opening of the schema per claimer: its own pool, as another process has
            async with made.open() as own:
                got[index] = await own.write(work_of(index))

        async with trio.open_nursery() as nursery:
            for index in range(claimers):
                nursery.start_soon(claimer, index)

    assert calls == [1] * claimers  # no transaction ran again
    taken = [c.lane.conversation_id for claimed in got for c in claimed]
    assert sorted(taken) == [f"c{n}" for n in range(claimers)]  # one each, all different
    assert all(c.lane.epoch == 1 and c.submission.attempts == 1 for g in got for c in g)


async def test_a_free_claim_leaves_an_expired_lease_to_the_serializable_takeover(
    tmp_path: Path,
) -> None:
    """``claim_free`` takes free lanes only (never held, or released); a lane held by someone
    whose lease ran out is taken over by ``claim(..., takeovers_only=True)``, the next epoch."""
    clock = Clock()

    def free(conn: Connection) -> list[Claimed]:
        return claim_free(
            conn, now=clock(), worker_id="w2", lease=10, limit=10, attempt_ids=iter("ab")
        )

    def takeovers(conn: Connection) -> list[Claimed]:
        return claim(
            conn,
            now=clock(),
            worker_id="w2",
            lease=10,
            limit=10,
            attempt_ids=iter("cd"),
            takeovers_only=True,
        )

    with stores("postgresql", tmp_path) as made:
        async with made.open() as db:
            q = queue(db, clock)
            await q.submit("a", "x", conversation_id="A", idempotency_key="1", principal="p")
            await q.submit("a", "y", conversation_id="B", idempotency_key="1", principal="p")
            [first] = await HandWorker(db, clock, "w1").claim(limit=1, lease=10)
            clock.advance(11)  # its lease ran out
            [other] = await db.write(free)
            assert other.lane.conversation_id != first.lane.conversation_id
            [taken] = await db.write(takeovers)
            assert taken.lane.conversation_id == first.lane.conversation_id
            assert taken.lane.epoch == first.lane.epoch + 1
            assert taken.submission.attempts == 2
            assert await db.write(free) == []
            assert await db.write(takeovers) == []


#: Lane states a conversation may start in: none yet, free (released), held, held but expired.
_LANES = st.sampled_from(["none", "released", "held", "expired"])


@settings(
    max_examples=max(5, EXAMPLES // 20),  # each example lays out a fresh PostgreSQL schema
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    conversations=st.lists(st.tuples(st.integers(1, 3), _LANES), min_size=1, max_size=5),
    limits=st.lists(st.integers(1, 3), min_size=2, max_size=3),
)
def test_overlapping_free_claims_are_disjoint_heads_of_free_lanes_and_never_run_again(
    tmp_path_factory: pytest.TempPathFactory,
    conversations: list[tuple[int, str]],
    limits: list[int],
) -> None:
    """For all conversations (queued submissions, a lane in any state) and claimers claiming at
    once: what they claim is disjoint, each a conversation's FIFO head whose lane was free (never
    held, or released), and no claim's transaction runs again or waits for another's."""
    clock = Clock()
    claimers = len(limits)
    barrier = threading.Barrier(claimers, timeout=_BARRIER_BOUND)
    calls = [0] * claimers
    got: list[list[Claimed]] = [[] for _ in range(claimers)]
    heads: dict[str, str] = {}

    async def main(made: Stores) -> None:
        async with made.open() as db:
            q = queue(db, clock)
            for n, (count, lane) in enumerate(conversations):
                name = f"c{n}"
                for k in range(count):
                    receipt = await q.submit(
                        "a", "x", conversation_id=name, idempotency_key=str(k), principal="p"
                    )
                    heads.setdefault(name, receipt.submission_id)
                if lane != "none":
                    [held] = await HandWorker(db, clock, f"h{n}").claim(
                        limit=1,
                        exclude=tuple(f"c{m}" for m in range(len(conversations)) if m != n),
                        lease=5.0 if lane == "expired" else 600.0,
                    )
                    if lane == "released":
                        await db.write(lambda conn, lane=held.lane: release(conn, lane))
            clock.advance(10)  # "expired" leases have run out; "held" ones have not

        def work_of(index: int) -> Callable[[Connection], list[Claimed]]:
            def work(conn: Connection) -> list[Claimed]:
                calls[index] += 1
                claimed = claim_free(
                    conn,
                    now=clock(),
                    worker_id=f"w{index}",
                    lease=30.0,
                    limit=limits[index],
                    attempt_ids=(f"w{index}-{n}" for n in range(1_000)),
                )
                if calls[index] == 1:
                    barrier.wait()
                return claimed

            return work

        async def claimer(index: int) -> None:
            async with made.open() as own:
                got[index] = await own.write(work_of(index))

        async with trio.open_nursery() as nursery:
            for index in range(claimers):
                nursery.start_soon(claimer, index)

    with stores("postgresql", tmp_path_factory.mktemp("claims")) as made:
        trio.run(main, made)
    assert calls == [1] * claimers
    taken = [c.lane.conversation_id for claimed in got for c in claimed]
    assert len(taken) == len(set(taken))  # disjoint
    free = {f"c{n}" for n, (_, lane) in enumerate(conversations) if lane in ("none", "released")}
    assert set(taken) <= free
    for claimed in got:
        for c in claimed:
            assert c.submission.submission_id == heads[c.lane.conversation_id]
