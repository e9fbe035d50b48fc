"""The run-scoped bookkeeping of agent state, without Trio: run-local values and settlements."""

from __future__ import annotations

from typing import Any, Literal

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
