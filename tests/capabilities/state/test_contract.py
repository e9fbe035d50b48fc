"""The agent state contract (spec §11, CAP-012), on every implementation: typed slots apart from
the history, revisions, and each of the four write classes — including a run that fails and has
its compensation run."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio

from capabilities.state import (
    AgentStateService,
    Compensatable,
    RunLocal,
    RunNotObserved,
    StateConflict,
    StateSlot,
    Uncertain,
    WithRecord,
)
from capabilities.state._backends import InMemoryStateBackend, SqliteStateBackend
from capabilities.state._layers import sqlite_state
from capabilities.state._model import (
    CorruptState,
    StateValueInvalid,
    StateValueTooLarge,
    UnknownStateVersion,
)
from capabilities.state._store import AgentStateStore
from capabilities.storage._errors import WriteFailed
from capabilities.storage._layers import sqlite_database
from capabilities.storage._log import SqliteConversationLog
from effectagent.core import AgentStateWritten
from effectagent.effect._layer import open_layer
from effectagent.engine import ConversationLog, InMemoryConversationLog, RunInfo

from ..conftest import database as open_store


@attrs.frozen
class Prefs:
    language: str
    units: str = "metric"


@attrs.frozen
class Booking:
    event_id: str


PREFS = StateSlot("preferences", Prefs, max_bytes=200)
BOOKING = StateSlot("booking", Booking)
RUN = RunInfo("run-1", "conv-1", "agent", "ann")


@asynccontextmanager
async def state(
    kind: str, directory: Path
) -> AsyncIterator[tuple[AgentStateStore, ConversationLog]]:
    """A state store of ``kind`` and the log its records go to."""
    if kind == "memory":
        log = InMemoryConversationLog()
        yield AgentStateStore(InMemoryStateBackend(log), compensation_timeout=5), log
        return
    async with open_store(kind, directory) as database:
        store = AgentStateStore(SqliteStateBackend(database), compensation_timeout=5)
        yield store, SqliteConversationLog(database)


async def test_values_are_typed_revisioned_and_absent_reads_as_none(
    kind: str, tmp_path: Path
) -> None:
    async with state(kind, tmp_path) as (store, _):
        empty = await store.read(PREFS, "ann")
        assert (empty.value, empty.revision, empty.status) == (None, 0, "absent")
        await store.run_started(RUN)
        written = await store.write(
            PREFS, "ann", Prefs("nb"), expected_revision=0, write=WithRecord("conv-1", RUN.run_id)
        )
        assert (written.revision, written.status) == (1, "committed")
        read = await store.read(PREFS, "ann")
        assert (read.value, read.revision, read.status, read.run_id) == (
            Prefs("nb"),
            1,
            "committed",
            "run-1",
        )
        with pytest.raises(StateConflict) as raised:
            await store.write(
                PREFS,
                "ann",
                Prefs("en"),
                expected_revision=0,
                write=WithRecord("conv-1", RUN.run_id),
            )
        assert (raised.value.expected_revision, raised.value.actual_revision) == (0, 1)
        assert (await store.read(PREFS, "ann")).value == Prefs("nb")
        assert (await store.read(PREFS, "bo")).revision == 0  # cells are independent
        assert (await store.read(BOOKING, "ann")).revision == 0  # so are slots


async def test_a_write_with_a_record_commits_both_or_neither(kind: str, tmp_path: Path) -> None:
    async with state(kind, tmp_path) as (store, log):
        await log.append("conv-1", [])
        written = await store.write(
            PREFS, "ann", Prefs("nb"), expected_revision=0, write=WithRecord("conv-1", "run-1")
        )
        entries = list(await log.entries("conv-1"))
        assert [e.seq for e in entries] == [written.seq] == [1]
        record = entries[0].record
        assert isinstance(record, AgentStateWritten)
        assert (record.slot, record.key, record.revision, record.run_id) == (
            "preferences",
            "ann",
            1,
            "run-1",
        )
        # A conflict writes neither the state nor the record.
        with pytest.raises(StateConflict):
            await store.write(
                PREFS, "ann", Prefs("en"), expected_revision=0, write=WithRecord("conv-1", "run-1")
            )
        assert len(await log.entries("conv-1")) == 1
        # A cancelled write: the state and the record, both or neither.
        for checkpoints in range(4):
            current = await store.read(PREFS, "ann")
            result = None
            with trio.CancelScope() as scope:
                for _ in range(checkpoints):
                    await trio.lowlevel.checkpoint()
                scope.cancel()
                result = await store.write(
                    PREFS,
                    "ann",
                    Prefs(f"l{checkpoints}"),
                    expected_revision=current.revision,
                    write=WithRecord("conv-1", "run-1"),
                )
            after = await store.read(PREFS, "ann")
            records = [e.record for e in await log.entries("conv-1")]
            assert len(records) == after.revision
            assert (after.revision == current.revision) is (result is None)


async def test_run_local_state_is_seen_by_its_run_only_and_discarded_when_it_settles(
    kind: str, tmp_path: Path
) -> None:
    other = RunInfo("run-2", "conv-2", "agent", "bo")
    async with state(kind, tmp_path) as (store, _):
        with pytest.raises(RunNotObserved):  # the store was not told of this run
            await store.write(
                PREFS, "ann", Prefs("nb"), expected_revision=0, write=RunLocal("run-1")
            )
        await store.run_started(RUN)
        await store.run_started(other)
        local = await store.write(
            PREFS, "ann", Prefs("nb"), expected_revision=0, write=RunLocal("run-1")
        )
        assert (local.revision, local.status) == (1, "run-local")
        mine = await store.read(PREFS, "ann", run_id="run-1")
        assert (mine.value, mine.status) == (Prefs("nb"), "run-local")
        assert (await store.read(PREFS, "ann", run_id="run-2")).value is None
        assert (await store.read(PREFS, "ann")).value is None  # never stored
        with pytest.raises(StateConflict):
            await store.write(
                PREFS, "ann", Prefs("en"), expected_revision=0, write=RunLocal("run-1")
            )
        await store.write(PREFS, "ann", Prefs("en"), expected_revision=1, write=RunLocal("run-1"))
        await store.run_ended(RUN, "completed")
        assert (await store.read(PREFS, "ann", run_id="run-1")).value is None
        with pytest.raises(RunNotObserved):  # it settled: no more run-local writes
            await store.write(
                PREFS, "ann", Prefs("nb"), expected_revision=0, write=RunLocal("run-1")
            )
        assert store.active_runs == 1


async def test_a_compensatable_write_commits_when_its_run_completes(
    kind: str, tmp_path: Path
) -> None:
    compensated: list[str] = []

    async def cancel_booking() -> None:
        compensated.append("cancelled")

    async with state(kind, tmp_path) as (store, _):
        await store.run_started(RUN)
        written = await store.write(
            BOOKING,
            "ann",
            Booking("evt-1"),
            expected_revision=0,
            write=Compensatable("run-1", cancel_booking),
        )
        assert written.status == "pending"
        assert (await store.read(BOOKING, "ann")).status == "pending"
        assert [u.key for u in await store.unsettled()] == ["ann"]
        await store.run_ended(RUN, "completed")
        read = await store.read(BOOKING, "ann")
        assert (read.value, read.status, read.revision) == (Booking("evt-1"), "committed", 1)
        assert compensated == []
        assert await store.unsettled() == ()


@pytest.mark.parametrize("ending", ["failed", "interrupted"])
async def test_a_run_that_does_not_complete_runs_its_compensations_and_restores(
    kind: str, tmp_path: Path, ending: Any
) -> None:
    compensated: list[str] = []

    def undo(name: str) -> Any:
        async def compensate() -> None:
            await trio.lowlevel.checkpoint()
            compensated.append(name)

        return compensate

    async with state(kind, tmp_path) as (store, _):
        await store.write(
            BOOKING,
            "bo",
            Booking("evt-0"),
            expected_revision=0,
            write=WithRecord("conv-0", "run-0"),
        )
        await store.run_started(RUN)
        await store.write(
            BOOKING,
            "ann",
            Booking("evt-1"),
            expected_revision=0,
            write=Compensatable("run-1", undo("ann 1")),
        )
        await store.write(
            BOOKING,
            "ann",
            Booking("evt-2"),
            expected_revision=1,
            write=Compensatable("run-1", undo("ann 2")),
        )
        await store.write(
            BOOKING,
            "bo",
            Booking("evt-3"),
            expected_revision=1,
            write=Compensatable("run-1", undo("bo")),
        )
        await store.run_ended(RUN, ending)
        assert compensated == ["bo", "ann 2", "ann 1"]  # newest first, each once
        ann = await store.read(BOOKING, "ann")
        assert (ann.value, ann.status, ann.revision) == (None, "absent", 3)  # restored to nothing
        bo = await store.read(BOOKING, "bo")
        assert (bo.value, bo.status, bo.revision) == (Booking("evt-0"), "committed", 3)
        assert await store.unsettled() == ()


async def test_a_failing_compensation_leaves_the_cell_uncertain_for_the_next_run(
    kind: str, tmp_path: Path
) -> None:
    async def broken() -> None:
        raise ConnectionError("calendar unreachable: user private text")

    async def hangs() -> None:
        await trio.sleep_forever()

    async with state(kind, tmp_path) as (store, _):
        store.compensation_timeout = 0.05
        await store.run_started(RUN)
        await store.write(
            BOOKING,
            "ann",
            Booking("evt-1"),
            expected_revision=0,
            write=Compensatable("run-1", broken),
        )
        await store.write(
            BOOKING,
            "bo",
            Booking("evt-2"),
            expected_revision=0,
            write=Compensatable("run-1", hangs),
        )
        await store.run_ended(RUN, "failed")
        for key, event in (("ann", "evt-1"), ("bo", "evt-2")):
            read = await store.read(BOOKING, key)
            assert (read.value, read.status) == (Booking(event), "uncertain")
            assert "compensation failed" in read.reason
            assert "private" not in read.reason
        assert sorted(u.key for u in await store.unsettled()) == ["ann", "bo"]


async def test_another_writer_after_the_run_keeps_its_value(kind: str, tmp_path: Path) -> None:
    async def compensate() -> None:
        return None

    async with state(kind, tmp_path) as (store, _):
        await store.run_started(RUN)
        await store.write(
            BOOKING,
            "ann",
            Booking("evt-1"),
            expected_revision=0,
            write=Compensatable("run-1", compensate),
        )
        await store.write(
            BOOKING,
            "ann",
            Booking("fixed"),
            expected_revision=1,
            write=WithRecord("conv-9", "run-9"),
        )
        await store.run_ended(RUN, "failed")
        read = await store.read(BOOKING, "ann")
        assert (read.value, read.status, read.revision) == (Booking("fixed"), "committed", 2)


async def test_an_uncertain_write_is_visible_until_a_run_reconciles_it(
    kind: str, tmp_path: Path
) -> None:
    async with state(kind, tmp_path) as (store, _):
        await store.write(
            BOOKING,
            "ann",
            Booking("evt-1"),
            expected_revision=0,
            write=Uncertain("run-1", "the calendar timed out"),
        )
        (note,) = await store.unsettled()
        assert (note.slot, note.key, note.status, note.reason, note.run_id) == (
            "booking",
            "ann",
            "uncertain",
            "the calendar timed out",
            "run-1",
        )
        read = await store.read(BOOKING, "ann")
        assert (read.value, read.status) == (Booking("evt-1"), "uncertain")
        await store.write(
            BOOKING,
            "ann",
            Booking("evt-1"),
            expected_revision=1,
            write=WithRecord("conv-2", "run-2"),
        )
        assert await store.unsettled() == ()


async def test_bad_values_are_refused_with_typed_errors(kind: str, tmp_path: Path) -> None:
    secret = "user-private-words"
    async with state(kind, tmp_path) as (store, _):
        write = WithRecord("conv-1", "run-1")
        with pytest.raises(StateValueInvalid) as raised:
            await store.write(PREFS, "ann", Prefs(secret, 3), expected_revision=0, write=write)  # type: ignore[arg-type]
        assert "$.units" in raised.value.problem
        assert secret not in str(raised.value)
        with pytest.raises(StateValueTooLarge):
            await store.write(PREFS, "ann", Prefs("x" * 300), expected_revision=0, write=write)
        with pytest.raises(StateValueInvalid):
            await store.write(PREFS, "ann", None, expected_revision=0, write=write)  # type: ignore[misc]
        with pytest.raises(StateValueInvalid):
            await store.write(PREFS, "", Prefs("nb"), expected_revision=0, write=write)
        with pytest.raises(StateValueInvalid):
            await store.write(PREFS, "ann", Prefs("nb"), expected_revision=-1, write=write)
        with pytest.raises(TypeError):
            await store.write(PREFS, "ann", Prefs("nb"), expected_revision=0, write="run-local")  # type: ignore[arg-type]
        with pytest.raises(TypeError):
            await store.read("preferences", "ann")  # type: ignore[arg-type]
        assert (await store.read(PREFS, "ann")).revision == 0


async def test_older_values_are_lifted_and_unknown_versions_refused(
    kind: str, tmp_path: Path
) -> None:
    v1 = StateSlot("preferences", Prefs)
    v2 = StateSlot("preferences", Prefs, version=2, migrations={1: lambda d: {**d, "units": "us"}})
    async with state(kind, tmp_path) as (store, _):
        await store.write(
            v1, "ann", Prefs("en", "metric"), expected_revision=0, write=WithRecord("c", "r")
        )
        assert (await store.read(v2, "ann")).value == Prefs("en", "us")
        await store.write(v2, "bo", Prefs("nb"), expected_revision=0, write=WithRecord("c", "r"))
        with pytest.raises(UnknownStateVersion) as raised:
            await store.read(v1, "bo")
        assert (raised.value.version, raised.value.supported) == (2, 1)


async def test_a_restart_turns_pending_writes_uncertain_and_damage_into_typed_errors(
    tmp_path: Path,
) -> None:
    async def compensate() -> None:
        return None

    async with state("sqlite-file", tmp_path) as (store, _):
        await store.run_started(RUN)
        await store.write(
            BOOKING,
            "ann",
            Booking("evt-1"),
            expected_revision=0,
            write=Compensatable("run-1", compensate),
        )
        await store.write(
            BOOKING, "bo", Booking("evt-2"), expected_revision=0, write=WithRecord("c", "r")
        )
        # The process "ends" here: the run never settles.
    conn = sqlite3.connect(tmp_path / "store.db", isolation_level=None)
    conn.execute("UPDATE agent_state SET value = '{\"event\"' WHERE key = 'bo'")
    conn.close()
    layer = sqlite_state().provide(sqlite_database(tmp_path / "store.db"))
    async with open_layer(layer) as context:
        reopened = context[AgentStateService]
        read = await reopened.read(BOOKING, "ann")
        assert (read.value, read.status) == (Booking("evt-1"), "uncertain")
        assert "never settled" in read.reason
        with pytest.raises(CorruptState) as raised:
            await reopened.read(BOOKING, "bo")
        assert (raised.value.slot, raised.value.key) == ("booking", "bo")


@attrs.define
class _InterruptedMidPut:
    """A backend whose pending put, once stored, sees its run interrupted: the run settles and
    the writer's scope is cancelled before the put returns."""

    inner: Any
    store: AgentStateStore | None = None
    scope: trio.CancelScope | None = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def put(self, cell: Any, expected: int, record: Any) -> int | None:
        seq: int | None = await self.inner.put(cell, expected, record)
        if cell.status == "pending":
            assert self.store is not None
            assert self.scope is not None
            with trio.CancelScope(shield=True):
                await self.store.run_ended(RUN, "interrupted")
            self.scope.cancel()
        return seq


@attrs.define
class _MarkFails(_InterruptedMidPut):
    """As above, and the store then refuses the mark as uncertain."""

    async def mark(self, cell: Any, revision: int, status: Any, reason: str) -> bool:
        raise WriteFailed("disk full")


async def _written_after_its_run_settled(backend: _InterruptedMidPut) -> tuple[Any, Any]:
    """A compensatable write whose run settles, and whose writer is cancelled, while its value
    is being stored: what the write returned, and the cell as read back."""
    store = AgentStateStore(backend, compensation_timeout=5)
    backend.store = store
    await store.run_started(RUN)

    async def undo() -> None:
        raise AssertionError("nobody settles this run's writes any more")

    written = None
    with trio.CancelScope() as scope:
        backend.scope = scope
        written = await store.write(
            BOOKING, "ann", Booking("e1"), expected_revision=0, write=Compensatable("run-1", undo)
        )
    return written, await store.read(BOOKING, "ann")


async def test_a_compensatable_write_whose_run_settles_and_is_cancelled_meanwhile_returns(
    kind: str, tmp_path: Path
) -> None:
    """Stored after its run settled, the value is marked uncertain and the write returns, even
    though the writer was cancelled meanwhile: before, ``write`` raised ``Cancelled`` — as if
    nothing was written — and left the value pending on a settled run for ever."""
    async with state(kind, tmp_path) as (plain, _):
        written, after = await _written_after_its_run_settled(_InterruptedMidPut(plain._backend))
    assert written is not None
    assert (written.revision, written.status) == (1, "uncertain")
    assert (after.value, after.revision, after.status) == (Booking("e1"), 1, "uncertain")


async def test_a_compensatable_write_whose_mark_fails_says_pending_and_does_not_raise(
    kind: str, tmp_path: Path
) -> None:
    """The value is stored; a refused mark used to raise StateUnavailable, which says nothing
    was written. The write now returns it as it stands: pending."""
    async with state(kind, tmp_path) as (plain, _):
        written, after = await _written_after_its_run_settled(_MarkFails(plain._backend))
    assert written is not None
    assert (written.revision, written.status) == (1, "pending")
    assert (after.value, after.revision) == (Booking("e1"), 1)


@pytest.mark.parametrize("migrations", [[lambda d: d], lambda d: d, ((1, lambda d: d),)])
def test_migrations_that_are_not_a_mapping_are_refused_saying_so(migrations: Any) -> None:
    """A list of functions said "migration keys are the versions they lift from …, got
    <function>", and a lone function "'function' object is not iterable"."""
    with pytest.raises(TypeError, match=r"^migrations must be a mapping from the version"):
        StateSlot("preferences", Prefs, version=2, migrations=migrations)
