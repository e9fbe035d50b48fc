"""The agent state store: the rules of the four write classes over a backend.

It is a run observer (``observe_runs(AgentStateService)``): the engine tells it when each run
starts and how it ended, which is when run-local values are dropped and compensatable writes are
committed or compensated. It checks every value against its slot's type before anything is
written, and decodes every value strictly when it is read.

Settling a run that did not complete runs each compensation once, newest first, each bounded by
``compensation_timeout`` (settling happens shielded, so a compensation that hangs must not hold
the run's end forever); a compensation that raises or times out leaves its cell ``"uncertain"``
with the reason, for the next run to see. A cell another writer changed since the run wrote it is
left as that writer left it. Nothing a settlement does raises out of it: failures are logged with
identifiers only.

What a crash loses: compensations are functions, held in memory. If the process ends while a run
has pending writes, nothing runs them; the SQLite store marks those cells uncertain when a process
next opens the database alone with the file (see ``capabilities.storage._recovery``: while other
processes have it open, they stay pending), so the next run knows.

A run that ends *suspended* has not settled: it waits on a decision and continues later. Its
pending writes stay pending and its run-local values stay with it; when it continues in this
process (``Runtime.resume``, the same run ID) and ends, they are committed or compensated then.
A suspended run continued by another process finds none of them here: its pending writes stay
pending until recovery marks them uncertain, as after a crash.
"""

from __future__ import annotations

import re
import time
from functools import partial
from typing import Any, Final, TypeVar, final

import attrs
import trio

from effectagent.core import AgentStateWritten
from effectagent.engine import RunEnding, RunInfo

from .._logging import log_warning
from .._rules import storable
from .._versioned import StoredValueCorrupt, ValueRejected, ValueTooLarge, VersionUnsupported
from ..storage import StorageError
from ._backends import StateBackend
from ._ledger import Cell, Compensation, LocalConflict, RunLedger, Settlement, StoredCell
from ._model import (
    MAX_KEY_CHARS,
    Compensatable,
    CorruptState,
    RunLocal,
    RunNotObserved,
    StateConflict,
    StateSlot,
    StateStatus,
    StateUnavailable,
    StateValueInvalid,
    StateValueTooLarge,
    StateView,
    StateWritten,
    Uncertain,
    UnknownStateVersion,
    UnsettledState,
    WithRecord,
    WriteClass,
)

__all__ = ["AgentStateStore"]

T = TypeVar("T")

_MAX_REASON_CHARS: Final = 1_000


def _check_cell(slot: object, key: object) -> Cell:
    if not isinstance(slot, StateSlot):
        raise TypeError(f"state lives in a StateSlot, got {type(slot).__name__}")
    if not isinstance(key, str) or not key or len(key) > MAX_KEY_CHARS or not storable(key):
        raise StateValueInvalid(
            slot.name,
            "?",
            f"a key is a non-empty str of at most {MAX_KEY_CHARS} characters, "
            "without a NUL or a lone surrogate",
        )
    return slot.name, key


#: A path segment naming a mapping's key (``["sk-…"]``): the key is part of the value.
_KEY_SEGMENT: Final = re.compile(r'\["(?:[^"\\]|\\.)*"\]')


def _blind(path: str) -> str:
    """``path`` with every mapping key in it replaced by ``[…]``: an error says where a value
    went wrong, never what it holds — and a key is as much the value's as its items are."""
    return _KEY_SEGMENT.sub("[…]", path)


def _load(slot: StateSlot[T], key: str, version: int, text: str) -> T:
    try:
        return slot.codec.load(version, text)
    except VersionUnsupported as exc:
        raise UnknownStateVersion(slot.name, key, exc.version, exc.current) from None
    except StoredValueCorrupt as exc:
        raise CorruptState(slot.name, key, _blind(exc.detail)) from None


def _dump(slot: StateSlot[T], key: str, value: T) -> str:
    if value is None:
        raise StateValueInvalid(slot.name, key, "None is not a value (it is how absence reads)")
    try:
        return slot.codec.dump(value)
    except ValueRejected as exc:
        where = ", ".join(_blind(path) for path in exc.paths[:10]) or "$"
        raise StateValueInvalid(
            slot.name, key, f"does not match the slot's type at {where}"
        ) from None
    except ValueTooLarge as exc:
        raise StateValueTooLarge(slot.name, key, exc.size, exc.limit) from None


def check_compensation_timeout(value: object) -> None:
    """Raise ``TypeError``/``ValueError`` unless ``value`` is a positive, finite number of
    seconds: settling is shielded, so a compensation without a bound could hold a run's end
    for ever."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"compensation_timeout must be a number of seconds, got {value!r}")
    if not 0 < value < float("inf"):
        raise ValueError(f"compensation_timeout must be positive and finite, got {value!r}")


@final
class AgentStateStore:
    """Typed, revisioned agent state with four write classes (see ``capabilities.state``).

    ``backend`` keeps the cells (:class:`InMemoryStateBackend`, :class:`SqliteStateBackend`);
    ``compensation_timeout`` bounds each compensation when a run did not complete.
    """

    __slots__ = ("_backend", "_ledger", "compensation_timeout")

    def __init__(self, backend: StateBackend, *, compensation_timeout: float = 30.0) -> None:
        check_compensation_timeout(compensation_timeout)
        self._backend = backend
        self._ledger = RunLedger()
        self.compensation_timeout = compensation_timeout

    @property
    def active_runs(self) -> int:
        """Runs the store was told started and not yet that they ended."""
        return self._ledger.runs

    # ---- reading ------------------------------------------------------------------------------

    async def read(
        self, slot: StateSlot[T], key: str, *, run_id: str | None = None
    ) -> StateView[T]:
        """The cell ``(slot, key)``; with ``run_id``, as that run sees it (its run-local value
        if it wrote one). An absent cell reads as ``value=None`` with its revision (0 if never
        written). Raises :class:`UnknownStateVersion`, :class:`CorruptState`,
        :class:`StateUnavailable`.

        Cancellation: a checkpoint; nothing changes.
        """
        cell = _check_cell(slot, key)
        if run_id is not None and not isinstance(run_id, str):
            raise TypeError(f"run_id must be a str or None, got {type(run_id).__name__}")
        local = self._ledger.local(run_id, cell)
        if local is not None:
            await trio.lowlevel.checkpoint()
            return StateView(
                slot.name,
                key,
                _load(slot, key, local.version, local.text),
                local.revision,
                "run-local",
                run_id or "",
                "",
                local.updated_at,
            )
        stored = await self._call(cell, self._backend.load(cell))
        if stored is None:
            return StateView(slot.name, key, None, 0, "absent")
        value: T | None = (
            None if stored.value is None else _load(slot, key, stored.version, stored.value)
        )
        status: StateStatus = stored.status if value is not None else "absent"
        return StateView(
            slot.name,
            key,
            value,
            stored.revision,
            status,
            stored.run_id,
            stored.reason,
            stored.updated_at,
        )

    async def unsettled(self) -> tuple[UnsettledState, ...]:
        """Every stored cell that is uncertain, or pending on a run that has not settled — what a
        run should look at first. Cancellation: a checkpoint; nothing changes."""
        cells = await self._call(("*", "*"), self._backend.unsettled())
        return tuple(
            UnsettledState(
                c.slot,
                c.key,
                c.revision,
                c.status,
                c.run_id,
                c.reason,
                c.updated_at,
            )
            for c in cells
        )

    # ---- writing ------------------------------------------------------------------------------

    async def write(
        self,
        slot: StateSlot[T],
        key: str,
        value: T,
        *,
        expected_revision: int,
        write: WriteClass,
    ) -> StateWritten:
        """Write ``value`` to ``(slot, key)`` if the cell is at ``expected_revision`` (the one the
        caller read; 0 for a cell never written), as the chosen write class:

        * :class:`RunLocal` — seen by that run only, gone when it settles;
        * :class:`WithRecord` — committed with an ``AgentStateWritten`` record (``seq`` in the
          receipt), both or neither;
        * :class:`Compensatable` — stored as pending; committed when the run completes,
          compensated and restored when it does not;
        * :class:`Uncertain` — stored as uncertain with the reason.

        Raises :class:`StateConflict`, :class:`StateValueInvalid`, :class:`StateValueTooLarge`,
        :class:`RunNotObserved` (run-local and compensatable writes need the store to observe
        runs), :class:`StateUnavailable`.

        Cancellation: all or nothing — raising (``Cancelled`` included) means nothing was
        written; returning means the write took (a stored write already running is waited for).
        """
        cell = _check_cell(slot, key)
        if type(expected_revision) is not int or expected_revision < 0:
            raise StateValueInvalid(slot.name, key, "expected_revision is an int of at least 0")
        text = _dump(slot, key, value)
        now = time.time()
        match write:
            case RunLocal(run_id):
                return await self._write_local(slot, key, cell, text, expected_revision, run_id)
            case WithRecord(conversation_id, run_id):
                revision = expected_revision + 1
                stored = StoredCell(
                    slot.name, key, revision, "committed", slot.version, text, "", run_id, now
                )
                record = AgentStateWritten(
                    conversation_id=conversation_id,
                    run_id=run_id,
                    slot=slot.name,
                    key=key,
                    revision=revision,
                    at=now,
                )
                seq = await self._call(
                    cell, self._backend.put(stored, expected_revision, (conversation_id, record))
                )
                self._ledger.drop_local(run_id, cell)
                return StateWritten(slot.name, key, revision, "committed", seq)
            case Compensatable(run_id, compensate):
                return await self._write_compensatable(
                    slot, key, cell, text, expected_revision, run_id, compensate, now
                )
            case Uncertain(run_id, reason):
                stored = StoredCell(
                    slot.name,
                    key,
                    expected_revision + 1,
                    "uncertain",
                    slot.version,
                    text,
                    str(reason)[:_MAX_REASON_CHARS],
                    run_id,
                    now,
                )
                await self._call(cell, self._backend.put(stored, expected_revision, None))
                self._ledger.drop_local(run_id, cell)
                return StateWritten(slot.name, key, expected_revision + 1, "uncertain")
            case _:
                raise TypeError(
                    "write= must be RunLocal, WithRecord, Compensatable or Uncertain, "
                    f"got {type(write).__name__}"
                )

    async def _write_local(
        self, slot: StateSlot[Any], key: str, cell: Cell, text: str, expected: int, run_id: str
    ) -> StateWritten:
        ledger = self._ledger
        if not ledger.active(run_id):
            raise RunNotObserved(run_id)
        persisted = 0
        if ledger.local(run_id, cell) is None:
            stored = await self._call(cell, self._backend.load(cell))
            persisted = stored.revision if stored is not None else 0
        else:
            await trio.lowlevel.checkpoint()
        if not ledger.active(run_id):
            raise RunNotObserved(run_id)
        try:
            revision = ledger.write_local(
                run_id, cell, expected, persisted, text, slot.version, time.time()
            )
        except LocalConflict as exc:
            raise StateConflict(slot.name, key, expected, exc.actual) from None
        return StateWritten(slot.name, key, revision, "run-local")

    async def _write_compensatable(
        self,
        slot: StateSlot[Any],
        key: str,
        cell: Cell,
        text: str,
        expected: int,
        run_id: str,
        compensate: Any,
        now: float,
    ) -> StateWritten:
        ledger = self._ledger
        if not ledger.active(run_id):
            raise RunNotObserved(run_id)
        if not callable(compensate):
            raise TypeError("Compensatable.compensate must be an async function of no arguments")
        previous = await self._call(cell, self._backend.load(cell))
        actual = previous.revision if previous is not None else 0
        if actual != expected:
            raise StateConflict(slot.name, key, expected, actual)
        revision = expected + 1
        stored = StoredCell(
            slot.name, key, revision, "pending", slot.version, text, "", run_id, now
        )
        # The compare-and-set makes ``previous`` exactly what this write replaced.
        await self._call(cell, self._backend.put(stored, expected, None))
        ledger.drop_local(run_id, cell)
        if ledger.active(run_id):
            ledger.add_compensation(run_id, Compensation(cell, revision, previous, compensate))
        else:  # the run settled while this write was on its way: nobody will settle it
            reason = "written after its run settled: its compensation was not registered"
            # Shielded: the value is stored, so this write must return (never raise
            # ``Cancelled``), and the value must not stay pending on a run that has settled.
            # A store that fails the mark leaves it pending — stored all the same, so this is
            # no error (raising would say nothing was written): the write says "pending", and a
            # later run or recovery finds it so.
            with trio.CancelScope(shield=True):
                try:
                    await self._backend.mark(cell, revision, "uncertain", reason)
                except StorageError as exc:
                    log_warning(
                        "state written after its run settled stays pending",
                        slot=slot.name,
                        key=key,
                        error=exc.tag,
                    )
                    return StateWritten(slot.name, key, revision, "pending")
            return StateWritten(slot.name, key, revision, "uncertain")
        return StateWritten(slot.name, key, revision, "pending")

    @staticmethod
    async def _call(cell: Cell, operation: Any) -> Any:
        try:
            return await operation
        except StorageError as exc:
            raise StateUnavailable(cell[0], cell[1], str(exc)) from None

    # ---- runs ---------------------------------------------------------------------------------

    async def run_started(self, run: RunInfo) -> None:
        """Run ``run`` is going. Does not yield (the engine calls it for every run)."""
        self._ledger.start(run.run_id)

    async def run_ended(self, run: RunInfo, ending: RunEnding) -> None:
        """Run ``run`` settled: its run-local values are dropped; its pending writes are
        committed if it completed, else compensated (see the module notes) — unless it was
        suspended: then it has not settled, and keeps both until it continues and ends. Never
        raises (failures are logged).

        Cancellation: the engine calls it shielded; each compensation is bounded by
        ``compensation_timeout``.
        """
        if ending == "suspended":
            return  # not settled: it continues later (module notes)
        settlement = self._ledger.end(run.run_id, completed=ending == "completed")
        if settlement.commit or settlement.compensations:
            await self._settle(run.run_id, ending, settlement)

    async def _settle(self, run_id: str, ending: str, settlement: Settlement) -> None:
        backend = self._backend
        ledger = self._ledger
        for cell, revision in settlement.commit:
            # Another run going now may have written over the value: it restores it committed.
            ledger.resolved(run_id, cell, revision, _committed)
            try:
                await backend.mark(cell, revision, "committed", "")
            except StorageError as exc:
                log_warning(
                    "state commit failed", run_id=run_id, slot=cell[0], key=cell[1], error=exc.tag
                )
        failed: set[Cell] = set()
        for compensation in settlement.compensations:
            if not await self._compensate(run_id, compensation):
                failed.add(compensation.cell)
        for cell, latest, original in settlement.restore:
            reason = f"the run {ending} and its compensation failed"
            if cell in failed:
                ledger.resolved(run_id, cell, latest, partial(_uncertain, reason))
            else:
                ledger.resolved(run_id, cell, latest, partial(_as_before, original))
            try:
                if cell in failed:
                    await backend.mark(cell, latest, "uncertain", reason)
                    continue
                now = time.time()
                restored = (
                    self._restored(cell, latest + 1, original, now)
                    if original is not None
                    else StoredCell(
                        cell[0],
                        cell[1],
                        latest + 1,
                        "absent",
                        1,
                        None,
                        f"restored: the run {ending}",
                        run_id,
                        now,
                    )
                )
                await backend.put(restored, latest, None)
                if original is not None and restored.status == "pending":
                    ledger.moved(original.run_id, cell, original.revision, latest + 1)
            except StateConflict:
                log_warning(
                    "state changed before its run was compensated",
                    run_id=run_id,
                    slot=cell[0],
                    key=cell[1],
                )
            except StorageError as exc:
                log_warning(
                    "state compensation could not be stored",
                    run_id=run_id,
                    slot=cell[0],
                    key=cell[1],
                    error=exc.tag,
                )

    def _restored(self, cell: Cell, revision: int, original: StoredCell, now: float) -> StoredCell:
        """``original`` stored again at ``revision``. A value pending on a run that is not going
        here has nobody to settle it: it comes back uncertain."""
        status, reason = original.status, original.reason
        if status == "pending" and not self._ledger.active(original.run_id):
            status = "uncertain"
            reason = f"restored a value pending on run {original.run_id}, which is not going here"
        return StoredCell(
            cell[0],
            cell[1],
            revision,
            status,
            original.version,
            original.value,
            reason,
            original.run_id,
            now,
        )

    async def _compensate(self, run_id: str, compensation: Compensation) -> bool:
        with trio.move_on_after(self.compensation_timeout):
            try:
                await compensation.compensate()
            except Exception as exc:
                log_warning(
                    "compensation failed",
                    run_id=run_id,
                    slot=compensation.cell[0],
                    key=compensation.cell[1],
                    error=type(exc).__name__,
                )
                return False
            return True
        log_warning(
            "compensation timed out",
            run_id=run_id,
            slot=compensation.cell[0],
            key=compensation.cell[1],
        )
        return False


def _committed(cell: StoredCell | None) -> StoredCell | None:
    return None if cell is None else attrs.evolve(cell, status="committed", reason="")


def _uncertain(reason: str, cell: StoredCell | None) -> StoredCell | None:
    return None if cell is None else attrs.evolve(cell, status="uncertain", reason=reason)


def _as_before(before: StoredCell | None, _: StoredCell | None) -> StoredCell | None:
    return before
