"""The run-scoped bookkeeping of agent state, as pure objects: which runs are going, their
run-local values, their compensations, and what settling a run means for each cell.

Invariants (tested in ``tests/capabilities/state/test_ledger.py`` without Trio):

* a run-local value is seen by its own run only, and nothing of a run is left once it ended;
* a run-local write succeeds only at the revision its run currently sees, and then raises it by 1;
* settling a run that completed commits, per cell, the last revision it wrote compensatably;
  settling one that did not lists every compensation once, newest first, and per cell the
  revision to restore from and the value to restore: the one before the run's first write — or,
  when another writer stored a value between two of the run's writes, that writer's value, which
  a restore never wipes out;
* a value another run wrote over and that settles meanwhile is restored as it settled
  (:meth:`RunLedger.resolved`), and one restored to a new revision is settled there by its own
  run (:meth:`RunLedger.moved`): no cell is left pending on a run that has settled.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Literal, final

import attrs

__all__ = [
    "STORED_STATUSES",
    "Cell",
    "Compensation",
    "LocalConflict",
    "LocalValue",
    "RunLedger",
    "Settlement",
    "StoredCell",
    "StoredStatus",
    "settle",
]

#: A cell: (slot name, key).
Cell = tuple[str, str]

#: The status of a stored cell.
StoredStatus = Literal["absent", "committed", "pending", "uncertain"]

#: Every stored status.
STORED_STATUSES: frozenset[str] = frozenset({"absent", "committed", "pending", "uncertain"})


@attrs.frozen
class StoredCell:
    """A cell as a backend stores it: ``value`` is the versioned JSON text (None: absent)."""

    slot: str
    key: str
    revision: int
    status: StoredStatus
    version: int
    value: str | None
    reason: str
    run_id: str
    updated_at: float


@attrs.frozen
class LocalValue:
    """A run-local value of one run."""

    text: str
    version: int
    revision: int
    updated_at: float


@attrs.frozen
class Compensation:
    """One compensatable write of a run: the revision it wrote, what the cell held before, and
    the function that undoes its external effect."""

    cell: Cell
    revision: int
    previous: StoredCell | None
    compensate: Callable[[], Awaitable[None]]


class LocalConflict(Exception):
    """A run-local write named a revision its run no longer sees."""

    def __init__(self, actual: int) -> None:
        super().__init__(actual)
        self.actual = actual


@final
class _Run:
    __slots__ = ("compensations", "locals")

    def __init__(self) -> None:
        self.locals: dict[Cell, LocalValue] = {}
        self.compensations: list[Compensation] = []


@attrs.frozen
class Settlement:
    """What settling one run asks of the store.

    ``commit``: (cell, revision) whose pending status becomes committed (the run completed).
    ``compensations``: every compensation to run, newest first (the run did not complete).
    ``restore``: per cell, (the last revision the run wrote, the cell as it was before the run's
    last unbroken series of writes to it) — applied once every compensation of that cell
    succeeded; otherwise the cell is marked uncertain.
    """

    commit: tuple[tuple[Cell, int], ...] = ()
    compensations: tuple[Compensation, ...] = ()
    restore: tuple[tuple[Cell, int, StoredCell | None], ...] = ()


def settle(compensations: Sequence[Compensation], completed: bool) -> Settlement:
    """The :class:`Settlement` of a run with these compensatable writes (in write order). Pure."""
    latest: dict[Cell, int] = {}
    original: dict[Cell, StoredCell | None] = {}
    for compensation in compensations:
        cell, previous = compensation.cell, compensation.previous
        before = latest.get(cell)
        if before is None or previous is None or previous.revision != before:
            # The run's first write to the cell, or one over what another writer stored after
            # the run's last: restoring goes back to that writer's value, never past it.
            original[cell] = previous
        latest[cell] = compensation.revision
    if completed:
        return Settlement(commit=tuple(latest.items()))
    return Settlement(
        compensations=tuple(reversed(compensations)),
        restore=tuple((cell, latest[cell], original[cell]) for cell in latest),
    )


@final
class RunLedger:
    """The runs going now, with their run-local values and compensations. Pure."""

    __slots__ = ("_runs",)

    def __init__(self) -> None:
        self._runs: dict[str, _Run] = {}

    def start(self, run_id: str) -> None:
        """Run ``run_id`` is going (idempotent)."""
        self._runs.setdefault(run_id, _Run())

    def active(self, run_id: str) -> bool:
        """Whether run ``run_id`` is going."""
        return run_id in self._runs

    @property
    def runs(self) -> int:
        """How many runs are going."""
        return len(self._runs)

    def end(self, run_id: str, completed: bool) -> Settlement:
        """Run ``run_id`` settled: forget it (its run-local values with it) and say what to do."""
        run = self._runs.pop(run_id, None)
        if run is None:
            return Settlement()
        return settle(run.compensations, completed)

    def local(self, run_id: str | None, cell: Cell) -> LocalValue | None:
        """The run-local value of ``cell`` that run ``run_id`` sees, if any."""
        if run_id is None:
            return None
        run = self._runs.get(run_id)
        return None if run is None else run.locals.get(cell)

    def write_local(
        self,
        run_id: str,
        cell: Cell,
        expected: int,
        persisted: int,
        text: str,
        version: int,
        now: float,
    ) -> int:
        """Store a run-local value if the run sees ``cell`` at ``expected`` (its own run-local
        revision, else ``persisted``); return the new revision. Raises :class:`LocalConflict`,
        or ``KeyError`` if the run is not going."""
        run = self._runs[run_id]
        current = run.locals.get(cell)
        seen = current.revision if current is not None else persisted
        if expected != seen:
            raise LocalConflict(seen)
        run.locals[cell] = LocalValue(text, version, seen + 1, now)
        return seen + 1

    def drop_local(self, run_id: str, cell: Cell) -> None:
        """Forget the run's run-local value of ``cell`` (a stored write superseded it)."""
        run = self._runs.get(run_id)
        if run is not None:
            run.locals.pop(cell, None)

    def add_compensation(self, run_id: str, compensation: Compensation) -> None:
        """Register a compensatable write of the run (``KeyError`` if it is not going)."""
        self._runs[run_id].compensations.append(compensation)

    def moved(self, owner: str, cell: Cell, revision: int, now: int) -> bool:
        """Run ``owner``'s pending value of ``cell`` at ``revision`` now stands at revision
        ``now`` (another run's settlement restored it there): ``owner``'s own settlement
        commits or restores it there. False if ``owner`` is not going."""
        run = self._runs.get(owner)
        if run is None:
            return False
        run.compensations = [
            attrs.evolve(c, revision=now) if c.cell == cell and c.revision == revision else c
            for c in run.compensations
        ]
        return True

    def resolved(
        self,
        owner: str,
        cell: Cell,
        revision: int,
        settle_as: Callable[[StoredCell | None], StoredCell | None],
    ) -> None:
        """Run ``owner`` settled its pending value of ``cell`` at ``revision``, which other runs
        going now wrote over: what each of them would restore becomes ``settle_as`` of it
        (committed, the value before it, or uncertain) rather than a value pending on a run
        that has settled."""
        for run in self._runs.values():
            run.compensations = [
                attrs.evolve(c, previous=settle_as(c.previous))
                if c.cell == cell and _pending_on(c.previous, owner, revision)
                else c
                for c in run.compensations
            ]


def _pending_on(cell: StoredCell | None, owner: str, revision: int) -> bool:
    return (
        cell is not None
        and cell.status == "pending"
        and cell.run_id == owner
        and cell.revision == revision
    )
