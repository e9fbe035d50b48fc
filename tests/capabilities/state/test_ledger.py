"""The run-scoped bookkeeping of agent state, without Trio: run-local values and settlements."""

from __future__ import annotations

from typing import Any, Literal

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from capabilities.state._ledger import (
    Compensation,
    LocalConflict,
    RunLedger,
    StoredCell,
    settle,
)

RUNS = ["r1", "r2", "r3"]
CELLS = [("s", "a"), ("s", "b")]

Op = tuple[Literal["start", "end", "write"], int, int, int]

OPS = st.lists(
    st.tuples(
        st.sampled_from(["start", "end", "write", "write"]),
        st.integers(0, 2),
        st.integers(0, 1),
        st.integers(0, 3),
    ),
    max_size=40,
)


@given(ops=OPS)
def test_run_local_values_are_seen_by_their_run_only_and_gone_when_it_ends(ops: list[Op]) -> None:
    """Invariants: a run-local write succeeds exactly when the run sees the cell at the expected
    revision (its own value's, else the stored one), and raises it by one; another run never sees
    it; nothing of a run is left once it ended."""
    ledger = RunLedger()
    model: dict[str, dict[tuple[str, str], int]] = {}  # run -> cell -> revision it sees
    persisted = 2  # what the store holds for every cell in this test
    for op, run_index, cell_index, expected in ops:
        run, cell = RUNS[run_index], CELLS[cell_index]
        if op == "start":
            ledger.start(run)
            model.setdefault(run, {})
        elif op == "end":
            ledger.end(run, completed=True)
            model.pop(run, None)
        elif run in model:
            seen = model[run].get(cell, persisted)
            if expected != seen:
                with pytest.raises(LocalConflict) as raised:
                    ledger.write_local(run, cell, expected, persisted, "{}", 1, 0.0)
                assert raised.value.actual == seen
            else:
                revision = ledger.write_local(run, cell, expected, persisted, "{}", 1, 0.0)
                assert revision == seen + 1
                model[run][cell] = revision
        else:
            with pytest.raises(KeyError):
                ledger.write_local(run, cell, expected, persisted, "{}", 1, 0.0)
        for other in RUNS:
            for c in CELLS:
                local = ledger.local(other, c)
                mine = model.get(other, {}).get(c)
                assert (local.revision if local else None) == mine
        assert ledger.runs == len(model)


def _cell(key: str, revision: int) -> StoredCell:
    return StoredCell("s", key, revision, "committed", 1, "{}", "", "r0", 0.0)


async def _noop() -> None:
    return None


WRITES = st.lists(st.tuples(st.sampled_from(["a", "b", "c"]), st.booleans()), max_size=10)


@given(writes=WRITES, completed=st.booleans())
def test_settling_commits_or_compensates_each_write_once(
    writes: list[tuple[str, bool]], completed: bool
) -> None:
    """Invariants of ``settle``: a completed run commits, per cell, the last revision it wrote; a
    run that did not complete runs every compensation once, newest first, and restores each cell
    from the last revision it wrote to what the cell held before its first write."""
    revisions: dict[str, int] = {}
    compensations = []
    originals: dict[str, Any] = {}
    for key, existed in writes:
        previous_revision = revisions.get(key, 3 if existed else 0)
        previous = _cell(key, previous_revision) if previous_revision else None
        originals.setdefault(key, previous)
        revisions[key] = previous_revision + 1
        compensations.append(Compensation(("s", key), previous_revision + 1, previous, _noop))
    settlement = settle(compensations, completed)
    if completed:
        assert dict(settlement.commit) == {("s", k): r for k, r in revisions.items()}
        assert settlement.compensations == ()
        assert settlement.restore == ()
    else:
        assert settlement.commit == ()
        assert list(settlement.compensations) == compensations[::-1]
        assert {cell: (latest, original) for cell, latest, original in settlement.restore} == {
            ("s", k): (revisions[k], originals[k]) for k in revisions
        }


def test_a_run_that_never_started_settles_to_nothing() -> None:
    ledger = RunLedger()
    assert ledger.end("ghost", completed=False) == settle([], False)
    with pytest.raises(KeyError):
        ledger.add_compensation("ghost", Compensation(("s", "a"), 1, None, _noop))


def test_a_value_another_writer_stored_between_two_writes_of_the_run_is_what_is_restored() -> None:
    """Run r1 writes revision 1, another writer stores revision 2, r1 writes revision 3 over it:
    if r1 does not complete, the cell goes back to the other writer's value, not past it."""
    theirs = _cell("a", 2)
    compensations = [
        Compensation(("s", "a"), 1, None, _noop),
        Compensation(("s", "a"), 3, theirs, _noop),
    ]
    settlement = settle(compensations, completed=False)
    assert settlement.restore == ((("s", "a"), 3, theirs),)
    assert list(settlement.compensations) == compensations[::-1]  # both undone all the same


def test_a_value_pending_on_a_run_that_settles_is_restored_as_it_settled() -> None:
    """Run r2 wrote over r1's pending value; r1 settles first: what r2 would restore becomes r1's
    value as it settled (committed) — and a value of r1 that r2's settlement put back at a new
    revision is settled there by r1."""
    ledger = RunLedger()
    ledger.start("r1")
    ledger.start("r2")
    pending = StoredCell("s", "a", 1, "pending", 1, '"x"', "", "r1", 0.0)
    ledger.add_compensation("r1", Compensation(("s", "a"), 1, None, _noop))
    ledger.add_compensation("r2", Compensation(("s", "a"), 2, pending, _noop))
    ledger.resolved(
        "r1", ("s", "a"), 1, lambda c: None if c is None else attrs.evolve(c, status="committed")
    )
    (restore,) = ledger.end("r2", completed=False).restore
    assert restore == (("s", "a"), 2, attrs.evolve(pending, status="committed"))
    assert ledger.moved("r1", ("s", "a"), 1, 3)
    assert ledger.end("r1", completed=True).commit == ((("s", "a"), 3),)
    assert not ledger.moved("r1", ("s", "a"), 3, 4)  # r1 has settled
