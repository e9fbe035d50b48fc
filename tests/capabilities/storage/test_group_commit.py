"""Group commit's bookkeeping, without Trio: every interleaving of writers arriving, withdrawing
(cancelled while they wait), leaders taking batches and batches finishing."""

from __future__ import annotations

from typing import Literal

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from capabilities.storage._group_commit import GroupCommit


@attrs.define(eq=False)
class Job:
    name: int
    weight: int


Op = tuple[Literal["submit", "withdraw", "finish", "lead"], int]

OPS = st.lists(
    st.one_of(
        st.tuples(st.just("submit"), st.integers(1, 5)),
        st.tuples(st.just("withdraw"), st.integers(0, 50)),
        st.tuples(st.just("finish"), st.just(0)),
        st.tuples(st.just("lead"), st.just(0)),
    ),
    max_size=60,
)


@given(ops=OPS, max_weight=st.integers(1, 8))
def test_every_write_is_taken_once_or_withdrawn_in_fifo_batches_with_a_leader_always(
    ops: list[Op], max_weight: int
) -> None:
    """Invariants of ``_group_commit``: each write is taken into exactly one batch or withdrawn;
    batches follow submission order; one batch at a time; whenever writes wait and none is being
    written, the oldest is the leader; a batch weighs at most ``max_weight`` unless its first
    write alone weighs more."""
    commit: GroupCommit[Job] = GroupCommit(max_weight)
    submitted: list[Job] = []
    waiting: list[Job] = []  # the model: writes waiting, in submission order
    taken: list[Job] = []
    withdrawn: list[Job] = []
    in_flight: list[Job] | None = None
    to_wake: Job | None = None  # the leader, whose task has not taken its batch yet

    def take(leader: Job) -> list[Job]:
        batch = commit.take(leader)
        assert batch[0] is leader is waiting[0]
        assert batch == waiting[: len(batch)]
        assert sum(j.weight for j in batch) <= max_weight or len(batch) == 1
        rest = waiting[len(batch) :]
        assert not rest or sum(j.weight for j in batch) + rest[0].weight > max_weight
        del waiting[: len(batch)]
        taken.extend(batch)
        return batch

    def finish() -> None:
        nonlocal in_flight, to_wake
        in_flight = None
        to_wake = commit.finish()

    for op, arg in [*ops, ("drain", 0)]:
        if op == "submit":
            job = Job(len(submitted), arg)
            submitted.append(job)
            waiting.append(job)
            if commit.submit(job):  # it leads: it takes the batch when its task runs again
                assert in_flight is None
                assert to_wake is None
                to_wake = job
        elif op == "withdraw" and submitted:
            job = submitted[arg % len(submitted)]
            was_waiting = job in waiting
            ok, leader = commit.withdraw(job)
            assert ok is was_waiting
            if ok:
                waiting.remove(job)
                withdrawn.append(job)
                if job is to_wake:
                    to_wake = leader
                else:
                    assert leader is None
        elif op == "finish" and in_flight is not None:
            finish()
        elif op == "lead" and to_wake is not None:
            leader, to_wake = to_wake, None
            in_flight = take(leader)
        elif op == "drain":
            while in_flight is not None or to_wake is not None:
                if in_flight is not None:
                    finish()
                if to_wake is not None:
                    leader, to_wake = to_wake, None
                    in_flight = take(leader)
        # After every step:
        assert commit.writing is (in_flight is not None)
        assert commit.waiting == len(waiting)
        if waiting and in_flight is None:
            assert to_wake is waiting[0] is commit.leader
        if in_flight is not None:
            assert commit.leader is None
    assert commit.idle
    assert sorted(j.name for j in taken + withdrawn) == list(range(len(submitted)))
    assert [j.name for j in taken] == sorted(j.name for j in taken)  # FIFO across batches


def test_only_the_leader_takes_and_only_a_written_batch_finishes() -> None:
    commit: GroupCommit[Job] = GroupCommit(4)
    first, second = Job(0, 1), Job(1, 1)
    assert commit.submit(first) is True
    assert commit.submit(second) is False
    with pytest.raises(RuntimeError):
        commit.take(second)
    assert commit.take(first) == [first, second]
    with pytest.raises(RuntimeError):
        commit.take(first)
    assert commit.finish() is None
    with pytest.raises(RuntimeError):
        commit.finish()
    with pytest.raises(ValueError):
        GroupCommit(0)
