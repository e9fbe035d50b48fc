"""Boundaries of the agent state contract, on every implementation: two runs writing one cell
compensatably and settling in either order, names no store could keep, and write classes that
could not work, refused when they are made."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from capabilities.state import (
    Compensatable,
    RunLocal,
    StateSlot,
    Uncertain,
    WithRecord,
    WriteClass,
)
from capabilities.state._backends import SqliteStateBackend
from capabilities.state._model import (
    AgentStateError,
    CorruptState,
    RunNotObserved,
    StateValueInvalid,
)
from capabilities.state._store import AgentStateStore
from capabilities.storage import open_postgres
from effectagent.engine import RunInfo

from ..sessions.test_order import icu_url  # noqa: F401 - the fixture (an en-US database)
from .test_contract import BOOKING, Booking, state

RUN_A = RunInfo("run-a", "conv-1", "agent", "ann")
RUN_B = RunInfo("run-b", "conv-1", "agent", "ann")
ENDINGS = ["completed", "failed"]


@pytest.mark.parametrize("first", ["b", "a"])
@pytest.mark.parametrize("b_ending", ENDINGS)
@pytest.mark.parametrize("a_ending", ENDINGS)
async def test_two_runs_writing_one_cell_leave_it_as_their_endings_say(
    kind: str, tmp_path: Path, first: str, b_ending: Any, a_ending: Any
) -> None:
    """Run B books evt-b, then run A books evt-a over it; each ends completed or failed, in
    either order. The cell then holds the last booking that stands in the world — never one a
    compensation cancelled, never one pending on a run that has settled."""
    world: set[str] = set()

    def cancel(event: str) -> Any:
        async def compensate() -> None:
            world.discard(event)

        return compensate

    async with state(kind, tmp_path) as (store, _):
        await store.run_started(RUN_A)
        await store.run_started(RUN_B)
        world.add("evt-b")
        await store.write(
            BOOKING,
            "ann",
            Booking("evt-b"),
            expected_revision=0,
            write=Compensatable(RUN_B.run_id, cancel("evt-b")),
        )
        world.add("evt-a")
        await store.write(
            BOOKING,
            "ann",
            Booking("evt-a"),
            expected_revision=1,
            write=Compensatable(RUN_A.run_id, cancel("evt-a")),
        )
        endings = [(RUN_B, b_ending), (RUN_A, a_ending)]
        for run, ending in endings if first == "b" else endings[::-1]:
            await store.run_ended(run, ending)
        read = await store.read(BOOKING, "ann")
        if a_ending == "completed":
            expected = Booking("evt-a")
        elif b_ending == "completed":
            expected = Booking("evt-b")
        else:
            expected = None
        assert read.value == expected
        assert read.status == ("absent" if expected is None else "committed")
        assert expected is None or expected.event_id in world
        assert await store.unsettled() == ()


@pytest.mark.parametrize("key", ["a\x00b", "\ud800", ""])
async def test_a_key_no_store_can_keep_is_refused_by_every_store(
    kind: str, tmp_path: Path, key: str
) -> None:
    """The same key is refused the same way everywhere — not kept in memory and refused by
    PostgreSQL as an outage worth retrying."""
    async with state(kind, tmp_path) as (store, _):
        with pytest.raises(StateValueInvalid, match="without a NUL or a lone surrogate"):
            await store.write(
                BOOKING, key, Booking("e"), expected_revision=0, write=WithRecord("c", "r")
            )
        with pytest.raises(StateValueInvalid):
            await store.read(BOOKING, key)


async def test_an_error_says_where_a_value_went_wrong_never_what_its_keys_are(
    kind: str, tmp_path: Path
) -> None:
    """A mapping's keys are the value's: a wrong value under a secret key is refused, and the
    path in the error — or in a stored value that no longer reads — shows the key as ``[…]``."""
    canary = "sk-live-canary-4242"
    tokens: StateSlot[dict[str, int]] = StateSlot("tokens", dict[str, int])
    names: StateSlot[dict[str, str]] = StateSlot("tokens", dict[str, str])
    async with state(kind, tmp_path) as (store, _):
        wrong: Any = {canary: "not a number"}
        with pytest.raises(StateValueInvalid) as refused:
            await store.write(tokens, "ann", wrong, expected_revision=0, write=WithRecord("c", "r"))
        assert "at $[…]" in str(refused.value)
        assert canary not in repr(refused.value)
        await store.write(
            names, "ann", {canary: "x"}, expected_revision=0, write=WithRecord("c", "r")
        )
        with pytest.raises(CorruptState) as corrupt:
            await store.read(tokens, "ann")  # the same name, now another type
        assert "[…]" in str(corrupt.value)
        assert canary not in repr(corrupt.value)


async def test_a_read_as_a_run_names_it_by_a_str(kind: str, tmp_path: Path) -> None:
    async with state(kind, tmp_path) as (store, _):
        with pytest.raises(TypeError, match="run_id must be a str or None, got list"):
            await store.read(BOOKING, "ann", run_id=[])  # type: ignore[arg-type]


async def _nothing() -> None:
    return None


#: The classes with their types erased: these tests hand them what their annotations forbid.
Slot: Any = StateSlot
AnyRunLocal: Any = RunLocal
AnyWithRecord: Any = WithRecord
AnyCompensatable: Any = Compensatable
AnyUncertain: Any = Uncertain


@pytest.mark.parametrize(
    ("build", "error", "message"),
    [
        (lambda: Slot("a\x00b", int), ValueError, "cannot hold a NUL or a lone surrogate"),
        (lambda: Slot("\udfff", int), ValueError, "cannot hold a NUL or a lone surrogate"),
        (lambda: Slot("prefs", 5), TypeError, "the values of slot 'prefs' cannot be stored"),
        (lambda: Slot("prefs", "int"), TypeError, "cannot be stored as JSON"),
        (lambda: Slot("prefs", object), TypeError, "cannot be stored as JSON"),
        (lambda: AnyRunLocal(None), TypeError, "run_id must be a str, got NoneType"),
        (lambda: AnyRunLocal(""), ValueError, "run_id must be a non-empty str"),
        (lambda: AnyWithRecord("", "run-1"), ValueError, "conversation_id must be a non-empty"),
        (lambda: AnyWithRecord("conv-1", 5), TypeError, "run_id must be a str, got int"),
        # Longer than a run's IDs: the log would refuse the record only at the write.
        (lambda: AnyWithRecord("c" * 513, "run-1"), ValueError, "at most 512 bytes in UTF-8"),
        (lambda: AnyWithRecord("conv-1", "é" * 257), ValueError, "run_id must be at most 512"),
        (lambda: AnyRunLocal("r" * 513), ValueError, "run_id must be at most 512 bytes"),
        (lambda: AnyCompensatable("run-1", None), TypeError, "compensate must be an async"),
        (  # a plain function would fail only when a failed run awaited it: its effect stays
            lambda: AnyCompensatable("run-1", lambda: None),
            TypeError,
            "compensate must be an async function of no arguments, got function",
        ),
        (lambda: AnyCompensatable("", _nothing), ValueError, "run_id must be a non-empty"),
        (lambda: AnyUncertain("run-1", None), TypeError, "reason must be a str, got NoneType"),
        (lambda: AnyUncertain("run-1", " "), ValueError, "reason must say why"),
        (lambda: AnyUncertain("run-1", "timed \x00out"), ValueError, "reason cannot hold a NUL"),
        (lambda: AnyUncertain("run-1", "timed \ud800out"), ValueError, "or a lone surrogate"),
    ],
)
def test_what_could_not_be_stored_is_refused_when_made(
    build: Any, error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        build()


async def test_a_value_another_writer_committed_between_two_writes_of_a_failed_run_stays(
    kind: str, tmp_path: Path
) -> None:
    """Run A books evt-1, another writer commits evt-fixed over it, A books evt-2 over that, then
    A fails: both of A's bookings are cancelled and the cell holds evt-fixed again — the restore
    never wipes out a value another writer committed."""
    cancelled: list[str] = []

    def cancel(event: str) -> Any:
        async def compensate() -> None:
            cancelled.append(event)

        return compensate

    async with state(kind, tmp_path) as (store, _):
        await store.run_started(RUN_A)
        writes: list[tuple[str, WriteClass]] = [
            ("evt-1", Compensatable(RUN_A.run_id, cancel("evt-1"))),
            ("evt-fixed", WithRecord("conv-9", "run-9")),
            ("evt-2", Compensatable(RUN_A.run_id, cancel("evt-2"))),
        ]
        for revision, (event, write) in enumerate(writes):
            await store.write(
                BOOKING, "ann", Booking(event), expected_revision=revision, write=write
            )
        await store.run_ended(RUN_A, "failed")
        read = await store.read(BOOKING, "ann")
        assert (read.value, read.status, read.revision) == (Booking("evt-fixed"), "committed", 4)
        assert cancelled == ["evt-2", "evt-1"]
        assert await store.unsettled() == ()


#: Slots and keys whose code point order differs from a language's (``"B" < "a"``).
UNSETTLED_CELLS = [(slot, key) for slot in ["b", "B", "a", "_", "é", "A"] for key in ["k", "K"]]


async def _write_uncertain(store: Any) -> None:
    for slot, key in UNSETTLED_CELLS:
        write = Uncertain("run-1", "timed out")
        await store.write(StateSlot(slot, int), key, 1, expected_revision=0, write=write)


async def test_unsettled_cells_come_in_code_point_order_on_every_store(
    kind: str, tmp_path: Path
) -> None:
    """By ``(slot, key)`` as Python compares str: the in-memory store gave them in the order
    they were first written, SQLite in its own."""
    async with state(kind, tmp_path) as (store, _):
        await _write_uncertain(store)
        found = [(cell.slot, cell.key) for cell in await store.unsettled()]
        assert found == sorted(UNSETTLED_CELLS)


async def test_postgresql_gives_unsettled_cells_in_code_point_order_whatever_its_collation(
    icu_url: str,  # noqa: F811 - the fixture imported above
) -> None:
    """An ``en-US`` database put ``"a"`` before ``"B"``: SQLite and memory do not."""
    async with open_postgres(icu_url, schema="state") as database:
        store = AgentStateStore(SqliteStateBackend(database))
        await _write_uncertain(store)
        found = [(cell.slot, cell.key) for cell in await store.unsettled()]
        assert found == sorted(UNSETTLED_CELLS)


def test_an_async_migration_is_refused_when_the_slot_is_made() -> None:
    """A read calls a migration plainly: an ``async def`` one returned a coroutine, and every
    value of an older version read as damaged (``CorruptState``)."""

    async def lift(old: Any) -> Any:
        return old

    with pytest.raises(TypeError, match=r"^the migration from version 1 is an async function"):
        StateSlot("prefs", int, version=2, migrations={1: lift})


def test_an_async_generator_migration_is_refused_naming_its_slot() -> None:
    """The check lives in one place (``check_migrations``) for state slots and sessions: an
    async generator function passed it (a read then met an async generator, never the lifted
    JSON), and the message did not name the slot."""

    async def lift(old: Any) -> Any:
        yield old

    with pytest.raises(TypeError) as raised:
        StateSlot("prefs", int, version=3, migrations={1: lambda old: old, 2: lift})
    assert str(raised.value) == (
        "the migration from version 2 is an async function: a migration is a plain function of "
        "the stored JSON, called as it is when an older value of slot 'prefs' is read"
    )


async def test_every_error_of_the_store_reads_as_a_sentence_naming_its_cell(
    kind: str, tmp_path: Path
) -> None:
    """They read as a dump of their fields (``StateConflict(slot='booking', …)``); each is a
    sentence now, naming the slot and key, never the value."""
    secret = "private-booking-ref"
    caught: list[AgentStateError] = []
    async with state(kind, tmp_path) as (store, _):
        write = Uncertain("run-1", "timed out")
        await store.write(BOOKING, "ann", Booking(secret), expected_revision=0, write=write)
        newer = StateSlot("booking", Booking, version=2, migrations={1: lambda old: old})
        wrong: Any = {"event": secret}
        await store.write(newer, "bo", Booking(secret), expected_revision=0, write=write)
        attempts: list[Any] = [
            lambda: store.write(BOOKING, "ann", Booking(secret), expected_revision=0, write=write),
            lambda: store.write(BOOKING, "ann", wrong, expected_revision=1, write=write),
            lambda: store.write(
                StateSlot("booking", Booking, max_bytes=8),
                "ann",
                Booking(secret),
                expected_revision=1,
                write=write,
            ),
            lambda: store.read(BOOKING, "bo"),  # version 2: no migration lifts it to 1
            lambda: store.read(StateSlot("booking", int), "ann"),  # another type now
            lambda: store.write(
                BOOKING, "ann", Booking(secret), expected_revision=1, write=RunLocal("gone")
            ),
        ]
        for attempt in attempts:
            with pytest.raises(AgentStateError) as error:
                await attempt()
            caught.append(error.value)
    words = ["revision 1, not 0", "does not match", "bytes of JSON", "version 2", "read back", ""]
    for raised, word in zip(caught, words, strict=True):
        text = str(raised)
        assert not text.startswith(raised.tag + "("), text
        assert secret not in text
        assert word in text, text
        if not isinstance(raised, RunNotObserved):
            assert "slot 'booking'" in text, text
    assert "run gone" in str(caught[-1])
