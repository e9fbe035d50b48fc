"""Lanes: a conversation is claimed with an attempt, a monotonic epoch and a lease; a live lease
keeps other claimers out, an expired one is taken over with the next epoch, and the fence refuses
every holder that was taken over or released."""

from __future__ import annotations

import os
import sqlite3

import pytest
from hypothesis import given
from hypothesis import strategies as st

from capabilities.storage import _lanes
from capabilities.storage._errors import ConversationInUse, LaneLost
from capabilities.storage._lanes import (
    Lane,
    Lanes,
    LaneState,
    check_lane,
    claim_decision,
    claim_lane,
    fence_refusal,
    read_lane,
    release_lane,
    renew_lane,
)
from capabilities.storage._layout import prepare
from tests.capabilities.durable.helpers import Stores

LEASE = 10.0


def _memory() -> sqlite3.Connection:
    conn = sqlite3.connect(":memory:", isolation_level=None)
    prepare(conn, ":memory:")
    return conn


# ---- the decisions, pure ------------------------------------------------------------------------


def _state(epoch: int, worker: str | None, attempt: str, until: float) -> LaneState:
    return LaneState("c", epoch, attempt, worker, None, until)


@pytest.mark.parametrize(
    ("current", "worker", "attempt", "now", "decided"),
    [
        (None, "w1", "a1", 0.0, 1),  # never claimed: the first epoch
        (_state(3, None, "a0", 0.0), "w1", "a1", 5.0, 4),  # released: the next epoch
        (_state(3, "w2", "a2", 5.0), "w1", "a1", 5.0, 4),  # lease ran out (at 5.0): taken over
        (_state(3, "w2", "a2", 6.0), "w1", "a1", 5.0, "in use"),  # live: refused
        (_state(3, "w1", "a0", 6.0), "w1", "a1", 5.0, "in use"),  # the same worker, another try
        (_state(3, "w1", "a1", 6.0), "w1", "a1", 5.0, 3),  # the same claim again: the same
    ],
)
def test_claim_decisions(
    current: LaneState | None, worker: str, attempt: str, now: float, decided: int | str
) -> None:
    got = claim_decision(current, worker_id=worker, attempt_id=attempt, now=now)
    if decided == "in use":
        assert isinstance(got, ConversationInUse)
        assert got.conversation_id == "c"
    else:
        assert got == decided


@pytest.mark.parametrize(
    ("current", "refused"),
    [
        (None, "never claimed"),
        (_state(4, "w1", "a1", 9.0), "taken over"),  # a later epoch
        (_state(3, "w1", "other", 9.0), "taken over"),  # the same epoch, another attempt
        (_state(3, None, "a1", 0.0), "released"),
        (_state(3, "w1", "a1", 0.0), None),  # expired but not taken over: may still write
        (_state(3, "w1", "a1", 9.0), None),
    ],
)
def test_fence_decisions(current: LaneState | None, refused: str | None) -> None:
    reason = fence_refusal(current, 3, "a1")
    if refused is None:
        assert reason is None
    else:
        assert reason is not None
        assert refused in reason


# ---- any sequence of claims, renewals and releases ----------------------------------------------

WORKERS = ("w1", "w2", "w3")
OPERATION = st.tuples(
    st.sampled_from(("claim", "renew", "release", "write")),
    st.sampled_from(WORKERS),
    st.floats(0, 2 * LEASE),  # time passing before it
)


@given(st.lists(OPERATION, max_size=40))
def test_epochs_only_grow_one_holder_at_a_time_and_stale_holders_are_fenced(
    operations: list[tuple[str, str, float]],
) -> None:
    conn = _memory()
    now = 0.0
    held: dict[str, Lane] = {}  # what each worker believes it holds
    epochs: list[int] = []  # every epoch a claim took
    attempts = 0
    for op, worker, elapsed in operations:
        now += elapsed
        before = read_lane(conn, "c")
        mine = held.get(worker)
        if op == "claim":
            attempts += 1
            live = before is not None and before.held(now)
            try:
                lane = claim_lane(
                    conn,
                    "c",
                    worker_id=worker,
                    attempt_id=f"{worker}-{attempts}",
                    now=now,
                    lease=LEASE,
                )
            except ConversationInUse:
                assert live, "refused although nobody held it"
            else:
                assert not live, "claimed while another holder's lease was live"
                assert not epochs or lane.epoch == max(epochs) + 1
                epochs.append(lane.epoch)
                held[worker] = lane
        elif mine is not None:
            valid = fence_refusal(before, mine.epoch, mine.attempt_id) is None
            if op == "renew":
                try:
                    held[worker] = renew_lane(conn, mine, now=now, lease=LEASE)
                except LaneLost:
                    assert not valid
                else:
                    assert valid
            elif op == "release":
                assert release_lane(conn, mine) == valid
                del held[worker]
            else:
                try:
                    check_lane(conn, mine)
                except LaneLost:
                    assert not valid
                else:
                    assert valid
        after = read_lane(conn, "c")
        # Whoever the table says holds the lane, only the last claim's holder passes the fence.
        valid_holders = [
            w
            for w, lane in held.items()
            if fence_refusal(after, lane.epoch, lane.attempt_id) is None
        ]
        assert len(valid_holders) <= 1
        if after is not None:
            assert after.epoch == (max(epochs) if epochs else after.epoch)
    assert epochs == sorted(set(epochs))  # never reused


# ---- the async API, and what a claim and a release do to waiting steering ------------------------


def _queued(conn: sqlite3.Connection, input_id: str, epoch: int | None) -> None:
    conn.execute(
        "INSERT INTO steering_inputs (input_id, conversation_id, position, kind, text, author, at, "
        "status, seq, reason, epoch) VALUES (?, 'c', 1, 'steering', 'hi', 'ann', 1.0, 'queued', "
        "NULL, '', ?)",
        (input_id, epoch),
    )


def _steering(conn: sqlite3.Connection) -> dict[str, tuple[str, str]]:
    rows = conn.execute("SELECT input_id, status, reason FROM steering_inputs").fetchall()
    return {input_id: (status, reason) for input_id, status, reason in rows}


async def test_a_worker_claims_renews_and_releases_and_a_late_one_takes_over(
    store: Stores,
) -> None:
    async with store.open() as one, store.open() as two:
        now = 1_000.0
        first = Lanes(one, worker_id="worker-1", lease=LEASE, clock=lambda: now)
        second = Lanes(two, worker_id="worker-2", lease=LEASE, clock=lambda: now)
        lane = await first.claim("c", submission_id="s1")
        assert (lane.epoch, lane.worker_id, lane.submission_id) == (1, "worker-1", "s1")
        with pytest.raises(ConversationInUse) as raised:
            await second.claim("c")
        assert raised.value.holder == "worker-1"
        now += LEASE / 2
        lane = await first.renew(lane)
        assert lane.lease_until == now + LEASE
        now += LEASE + 1  # worker 1 stops renewing: its lease runs out
        taken = await second.claim("c")
        assert taken.epoch == 2
        with pytest.raises(LaneLost, match="taken over"):
            await first.renew(lane)
        assert not await first.release(lane)  # nothing of the stale holder changes the lane
        state = await first.current("c")
        assert state is not None
        assert (state.epoch, state.worker_id) == (2, "worker-2")
        assert await second.release(taken)
        state = await second.current("c")
        assert state is not None
        assert (state.epoch, state.worker_id, state.held(now)) == (2, None, False)
        assert (await first.claim("c")).epoch == 3  # the epoch survives the release


async def test_the_database_lanes_hold_as_its_own_holder(store: Stores) -> None:
    async with store.open() as database:
        lane = await database.lanes.claim("c")
        assert lane.worker_id == database.holder_id
        assert database.holder_id.startswith("pid-")
        with pytest.raises(ValueError, match="lease"):
            Lanes(database, lease=0)


def test_a_release_expires_steering_queued_under_its_epoch_and_a_claim_what_is_older() -> None:
    conn = _memory()
    lane = claim_lane(conn, "c", worker_id="w", attempt_id="a", now=0.0, lease=LEASE)
    _queued(conn, "mine", lane.epoch)
    _queued(conn, "unlaned", None)  # admitted before lanes existed: left to its run's inbox
    assert release_lane(conn, lane, reason="the run completed before it took the input")
    assert _steering(conn)["mine"] == ("expired", "the run completed before it took the input")
    assert _steering(conn)["unlaned"][0] == "queued"

    second = claim_lane(conn, "c", worker_id="w", attempt_id="b", now=1.0, lease=LEASE)
    _queued(conn, "second", second.epoch)
    # The holder dies; the next claim takes over and expires what the dead run never took.
    third = claim_lane(conn, "c", worker_id="w2", attempt_id="c", now=2 * LEASE, lease=LEASE)
    assert third.epoch == second.epoch + 1
    status, reason = _steering(conn)["second"]
    assert status == "expired"
    assert "stopped before it took it" in reason


def test_a_process_with_the_same_pid_elsewhere_is_not_this_one() -> None:
    """Holder IDs carry a token drawn per process: a holder of this pid on another machine (or
    in another container) sharing a PostgreSQL database is someone else."""
    mine = _lanes.holder_id()
    assert mine.startswith(f"pid-{os.getpid()}-")
    assert _lanes.same_process(mine)
    assert _lanes.same_process(_lanes.holder_id())  # every holder ID of this process
    other_machine = f"pid-{os.getpid()}-{'0' * 8}-{'1' * 12}"
    assert other_machine != mine
    assert not _lanes.same_process(other_machine)
    assert not _lanes.same_process(f"pid-{os.getpid()}-")  # no token: not this process


def test_a_forked_child_draws_a_token_of_its_own() -> None:
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report its prefix and leave at once
        os.write(write, _lanes.process_prefix().encode())
        os._exit(0)
    os.close(write)
    child = os.read(read, 200).decode()
    os.close(read)
    os.waitpid(pid, 0)
    assert child.startswith(f"pid-{pid}-")
    assert child != _lanes.process_prefix()
