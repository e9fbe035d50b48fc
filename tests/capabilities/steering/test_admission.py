"""Admission and per-conversation FIFO of steering and follow-ups, without Trio: every
interleaving of runs starting and ending, submissions, persistence finishing or failing, and the
engine draining steering and taking follow-ups."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from capabilities.steering import SteeringLimits
from capabilities.steering._admission import Admissions, Closing, Entry
from effectagent.engine import SteeringInput

LIMITS = SteeringLimits(max_chars=10, max_pending=4)

OPS = st.lists(
    st.one_of(
        st.tuples(st.just("start"), st.sampled_from(["r1", "r2"])),
        st.tuples(st.just("end"), st.sampled_from(["r1", "r2"])),
        st.tuples(
            st.just("admit"),
            st.tuples(
                st.sampled_from(["steering", "follow-up"]),
                st.sampled_from(["", "hi", "x" * 11, "go on"]),
            ),
        ),
        st.tuples(st.just("commit"), st.integers(0, 30)),
        st.tuples(st.just("abandon"), st.integers(0, 30)),
        st.tuples(st.just("drain"), st.none()),
        st.tuples(st.just("take"), st.none()),
    ),
    max_size=50,
)


@given(ops=OPS)
def test_admission_fifo_and_delivery_hold_in_every_interleaving(ops: list[tuple[str, Any]]) -> None:
    """Invariants of ``_admission`` (see its module notes): an input is accepted only while a run
    is going and not ending, non-empty, within the limit, with room; steering is handed out in
    admission order and only by a drain, every queued input by a take, in admission order; each
    at most once; when the last run ends every accepted entry not abandoned is either handed out
    already or in the closing (none disappears); ``take`` returning nothing makes later
    submissions "run-ending"."""
    admissions = Admissions(LIMITS)
    active: set[str] = set()
    stopping = 0
    accepted: list[Entry] = []  # in admission order
    handed: list[SteeringInput] = []
    closed: list[Closing] = []
    counter = 0
    for op, arg in ops:
        if op == "start":
            admissions.run_started("c", arg)
            active.add(arg)
        elif op == "end":
            closing = admissions.run_ended("c", arg)
            if arg in active:
                active.discard(arg)
                stopping = max(0, stopping - 1)
                if not active:
                    assert closing is not None
                    closed.append(closing)
                    left = {id(e) for e in closing.entries}
                    for entry in accepted:
                        if entry.state in ("reserved", "queued") and not entry.orphaned:
                            assert id(entry) in left
                    assert all(e.orphaned for e in closing.entries)
                    stopping = 0
                else:
                    assert closing is None
            else:
                assert closing is None
        elif op == "admit":
            kind, text = arg
            counter += 1
            item = SteeringInput(f"i{counter}", kind, text, "ann", 0.0)
            queued = sum(
                1 for e in accepted if not e.orphaned and e.state in ("reserved", "queued")
            )
            assert admissions.queued("c") == queued
            decided = admissions.admit("c", item)
            if not text.strip():
                assert decided == "empty"
            elif len(text) > LIMITS.max_chars:
                assert decided == "too-large"
            elif not active:
                assert decided == "no-active-run"
            elif len(active) <= stopping:
                assert decided == "run-ending"
            elif queued >= LIMITS.max_pending:
                assert decided == "queue-full"
            else:
                assert isinstance(decided, Entry)
                assert decided.state == "reserved"
                accepted.append(decided)
        elif op in ("commit", "abandon"):
            reserved = [e for e in accepted if e.state == "reserved"]
            if reserved:
                entry = reserved[arg % len(reserved)]
                if op == "commit":
                    admissions.commit(entry.input.input_id)
                    assert entry.state == "queued"
                else:
                    admissions.abandon(entry.input.input_id)
                    assert entry.state == "abandoned"
        elif op == "drain":
            before = [e for e in accepted if not e.orphaned and e.state in ("reserved", "queued")]
            expected = []
            for entry in before:
                if entry.input.kind != "steering":
                    continue
                if entry.state == "reserved":
                    break
                expected.append(entry.input)
            got = admissions.drain_steering("c")
            assert got == expected
            handed.extend(got)
        elif op == "take":
            before = [e for e in accepted if not e.orphaned and e.state in ("reserved", "queued")]
            expected = []
            for entry in before:
                if entry.state == "reserved":
                    break
                expected.append(entry.input)
            got = admissions.take_follow_ups("c")
            assert got == expected
            handed.extend(got)
            if not got and len(active) > stopping:
                stopping += 1
    ids = [i.input_id for i in handed]
    assert len(ids) == len(set(ids))  # never handed out twice
    order = {e.input.input_id: n for n, e in enumerate(accepted)}
    for kind in ("steering", "follow-up"):
        mine = [order[i.input_id] for i in handed if i.kind == kind]
        assert mine == sorted(mine)  # FIFO per kind
    for closing in closed:
        for entry in closing.entries:
            assert entry.state in ("reserved", "queued", "taken", "abandoned")


def test_a_run_that_would_stop_and_finds_nothing_ends_admission() -> None:
    admissions = Admissions()
    admissions.run_started("c", "r1")
    first = admissions.admit("c", SteeringInput("a", "follow-up", "more", "ann", 0.0))
    assert isinstance(first, Entry)
    admissions.commit("a")
    assert admissions.drain_steering("c") == []  # a follow-up is not steering
    assert [i.input_id for i in admissions.take_follow_ups("c")] == ["a"]
    assert admissions.take_follow_ups("c") == []  # the run now ends
    assert admissions.admit("c", SteeringInput("b", "steering", "late", "ann", 0.0)) == "run-ending"
    closing = admissions.run_ended("c", "r1")
    assert closing is not None
    assert [e.input.input_id for e in closing.taken] == ["a"]
    assert admissions.admit("c", SteeringInput("c", "steering", "x", "ann", 0.0)) == "no-active-run"


@given(order=st.permutations([0, 1, 2, 3]))
def test_steering_is_handed_out_in_the_order_of_the_positions_its_receipts_give(
    order: list[int],
) -> None:
    """A database may persist admissions at other positions than were reserved (a transaction
    run again takes the next free one): whatever positions the store gives, steering is handed
    out in the order of those positions — the order its receipts and statuses say."""
    admissions = Admissions(LIMITS)
    admissions.run_started("c", "r1")
    ids = ["a", "b", "c", "d"]
    for input_id in ids:
        assert isinstance(
            admissions.admit("c", SteeringInput(input_id, "steering", "x", "ann", 0.0)), Entry
        )
    stored = {input_id: 10 + order[i] for i, input_id in enumerate(ids)}
    for input_id in sorted(ids, key=stored.__getitem__):  # committed in the store's order
        admissions.commit(input_id, stored[input_id])
    handed = [i.input_id for i in admissions.drain_steering("c")]
    assert handed == sorted(ids, key=stored.__getitem__)


# ---- input admitted by other processes ----------------------------------------------------------

MIXED = st.lists(
    st.one_of(
        st.tuples(st.just("local"), st.sampled_from(["steering", "follow-up"])),
        st.tuples(st.just("commit"), st.just("")),
        st.tuples(st.just("remote"), st.sampled_from(["steering", "follow-up"])),
        st.tuples(st.just("poll"), st.just("")),
        st.tuples(st.just("drain"), st.just("")),
        st.tuples(st.just("take"), st.just("")),
    ),
    max_size=40,
)


@given(ops=MIXED)
def test_input_adopted_from_elsewhere_takes_its_place_by_position_and_is_handed_out_once(
    ops: list[tuple[str, str]],
) -> None:
    """Positions are given as admissions commit, wherever they were made (a counter, as the
    database gives them); local ones commit in admission order, input admitted elsewhere becomes
    visible only when polled, and a poll may see it again. Whatever the interleaving: each drain
    or take hands inputs out in the order of their positions, each input at most once; a poll
    adopts each at most once; nothing adopted is lost while the run goes."""
    admissions = Admissions(SteeringLimits(max_pending=100))
    admissions.run_started("c", "r1")
    position = 0
    reserved: list[str] = []
    elsewhere: list[tuple[SteeringInput, int]] = []  # committed elsewhere, visible to polls
    positions: dict[str, int] = {}
    handed: list[str] = []
    adopted: set[str] = set()
    ending = False
    for n, (op, kind) in enumerate(ops):
        if op == "local":
            decided = admissions.admit("c", SteeringInput(f"l{n}", kind, "hi", "ann", 0.0))  # type: ignore[arg-type]
            if ending:
                assert decided == "run-ending"
            else:
                assert isinstance(decided, Entry)
                reserved.append(decided.input.input_id)
        elif op == "commit":
            if reserved:
                position += 1
                positions[reserved[0]] = position
                admissions.commit(reserved.pop(0), position)
        elif op == "remote":
            position += 1
            item = SteeringInput(f"r{n}", kind, "hi", "bo", 0.0)  # type: ignore[arg-type]
            positions[item.input_id] = position
            elsewhere.append((item, position))
        elif op == "poll":
            for item, at in elsewhere:
                entry = admissions.adopt("c", item, at)
                if entry is not None:
                    assert item.input_id not in adopted
                    assert not ending
                    adopted.add(item.input_id)
                else:
                    assert item.input_id in adopted or ending
        else:
            got = (
                admissions.drain_steering("c") if op == "drain" else admissions.take_follow_ups("c")
            )
            if op == "take" and not got:
                ending = True
            batch = [positions[i.input_id] for i in got]
            assert batch == sorted(batch)  # each hand-out in position order
            handed.extend(i.input_id for i in got)
    assert len(handed) == len(set(handed))  # never twice
    closing = admissions.run_ended("c", "r1")
    left = {e.input.input_id for e in closing.entries} if closing is not None else set()
    for input_id in adopted:  # every adopted input was handed out, or is handed back now
        assert input_id in handed or input_id in left
