"""A storage problem ends a run as a typed storage failure, never as an engine defect.

What the Conversation Log cannot read or write is a ``ConversationLogError``; the run then fails
with ``StorageFailed``, which keeps the conversation and the sequence number of the record at fault
as fields and says what happened in a sentence — never what a record holds. When even the failure
record cannot be written, the run still ends with exactly one ``RunFailed``.

The storage here is the real SQLite store, damaged or made to refuse writes the way a disk would.
Engine tests over SQLite run on Trio's real clock (see ``tests/capabilities/storage``); nothing
here waits for time to pass.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import attrs
import pytest
import trio

from capabilities import sqlite_storage
from capabilities.storage import DatabaseService
from capabilities.storage._codec import RecordCodec
from capabilities.storage._layers import sqlite_database, sqlite_log
from effectagent import Agent, open_runtime
from effectagent.core import (
    EngineDefect,
    EventBase,
    LogEntry,
    Record,
    RunFailed,
    RunFailedRecord,
    RunStarted,
    StorageFailed,
)
from effectagent.effect import Layer
from effectagent.engine import (
    ConversationLogError,
    ConversationLogService,
    InMemoryConversationLog,
)
from effectagent.testing import ScriptedModel, Turn

from .helpers import assert_well_formed, engine_logs, run_events

R = TypeVar("R")

#: A bound on a scenario that takes milliseconds. A run whose failure record could not be written
#: once never ended, and the runtime waited for it, shielded, for ever: such a scenario runs in a
#: thread of its own (:func:`ended`), so that it fails the test rather than hang the suite.
NEVER = 60

#: What a user said: it must reach no error, event or log line about the storage.
CANARY = "canary-4471-the-users-own-words"
AGENT = Agent("helper", "Answer briefly.")


def leaked(events: Sequence[EventBase], logs: Sequence[Any]) -> bool:
    """Whether the canary is in any event but the run's start (which shows the run's input) or
    in any log line."""
    shown = [event for event in events if not isinstance(event, RunStarted)]
    return any(CANARY in repr(item) for item in [*shown, *logs])


def rows(path: Path, conversation_id: str) -> list[tuple[int, str, str]]:
    """The conversation's stored rows, read behind the store's back."""
    conn = sqlite3.connect(path)
    try:
        return conn.execute(
            "SELECT seq, type, body FROM records WHERE conversation_id = ? ORDER BY seq",
            (conversation_id,),
        ).fetchall()
    finally:
        conn.close()


async def test_a_damaged_row_fails_the_continued_run_with_a_storage_failure(
    tmp_path: Path,
) -> None:
    """The row of the user's first input is damaged on disk (its body no longer matches its
    type, and still holds the user's words): continuing the conversation fails with
    ``StorageFailed`` naming conversation and seq 2 — as fields — and the failure is recorded."""
    path = tmp_path / "conversations.db"
    model = ScriptedModel([Turn.text("Hello.")])
    async with open_runtime(model.as_layer() + sqlite_storage(path), agents=[AGENT]) as runtime:
        first = await runtime.run(AGENT, f"I am Ann; {CANARY}.")
    conversation = first.conversation_id
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        damaged = conn.execute(
            "UPDATE records SET body = ? WHERE conversation_id = ? AND seq = 2",
            (f'{{"text": "{CANARY}"}}', conversation),
        )
        assert damaged.rowcount == 1
    finally:
        conn.close()

    model = ScriptedModel([Turn.text("never asked")])
    with engine_logs(logging.DEBUG) as logs:
        async with open_runtime(model.as_layer() + sqlite_storage(path), agents=[AGENT]) as runtime:
            events = await run_events(runtime, AGENT, "Who am I?", conversation_id=conversation)
    terminal = assert_well_formed(events)
    assert isinstance(terminal, RunFailed)
    error = terminal.error
    assert isinstance(error, StorageFailed), error
    assert (error.conversation_id, error.seq) == (conversation, 2)
    assert error.reason == (
        f"record 2 of conversation {conversation} is damaged: the body does not match "
        "UserInputRecorded version 1"
    )
    assert str(error) == f"the conversation's storage failed: {error.reason}"
    assert not leaked(events, logs)
    assert model.requests == []  # the model was never asked on a history that is not whole
    seq, tag, body = rows(path, conversation)[-1]
    assert tag == "RunFailedRecord"
    record = RecordCodec().decode(conversation, seq, tag, 1, body)
    assert isinstance(record, RunFailedRecord)
    assert isinstance(record.error, StorageFailed)
    assert attrs.astuple(record.error) == attrs.astuple(error)


def ended(scenario: Callable[[], Awaitable[R]]) -> R:
    """Run ``scenario`` under Trio in a thread of its own and return what it returns; fail if it
    has not ended within ``NEVER`` seconds (the thread, a daemon, is then left behind)."""
    outcome: list[Any] = []

    def run() -> None:
        try:
            outcome.append((True, trio.run(scenario)))
        except BaseException as exc:
            outcome.append((False, exc))

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(NEVER)
    assert outcome, f"the scenario did not end within {NEVER} s: a run never ended"
    ok, value = outcome[0]
    if not ok:
        raise value
    return value  # type: ignore[no-any-return]


def write_pragma(statement: str) -> Any:
    """A write job that sets a pragma on the store's writer connection."""
    return lambda conn: conn.execute(statement).fetchall()


async def test_an_append_the_disk_refuses_fails_the_run_and_the_failure_is_recorded(
    tmp_path: Path,
) -> None:
    """The database may grow no more (as on a full disk): the run's first append — a large
    input — is refused, so the run fails with ``StorageFailed`` (no record at fault: seq None);
    the small failure record still fits, and is the only record written."""
    path = tmp_path / "full.db"
    layer = ScriptedModel([Turn.text("never asked")]).as_layer() + sqlite_storage(path)
    async with open_runtime(layer, agents=[AGENT]) as runtime:
        database = runtime.context[DatabaseService]
        (pages,) = (await database.write(write_pragma("PRAGMA page_count")))[0]
        await database.write(write_pragma(f"PRAGMA max_page_count = {pages}"))
        result = await runtime.run(AGENT, CANARY + " " + "x" * 200_000)
    assert result.status == "failed"
    error = result.error
    assert isinstance(error, StorageFailed), error
    assert (error.conversation_id, error.seq) == (result.conversation_id, None)
    assert error.reason == (
        f"the database refused an append to conversation {result.conversation_id} "
        "(database or disk is full); nothing of it was written"
    )
    assert CANARY not in str(error)
    assert [tag for _, tag, _ in rows(path, result.conversation_id)] == ["RunFailedRecord"]


def log_only(path: Path) -> Layer:
    """The SQLite Conversation Log alone (no other store that writes when a run starts)."""
    return sqlite_log().provide_merge(sqlite_database(path))


def test_when_not_even_the_failure_can_be_written_the_run_still_ends_once_failed(
    tmp_path: Path,
) -> None:
    """Every write is refused: the run's input cannot be recorded, nor its failure. The run
    still ends with exactly one terminal event, ``RunFailed`` with ``StorageFailed``, and says
    in the log that its failure record was not written."""
    path = tmp_path / "readonly.db"
    layer = ScriptedModel([Turn.text("never asked")]).as_layer() + log_only(path)

    async def scenario() -> list[EventBase]:
        async with open_runtime(layer, agents=[AGENT]) as runtime:
            database = runtime.context[DatabaseService]
            await database.write(write_pragma("PRAGMA query_only = ON"))
            return await run_events(runtime, AGENT, CANARY)

    with engine_logs(logging.WARNING) as logs:
        events = ended(scenario)
    terminal = assert_well_formed(events)
    assert isinstance(terminal, RunFailed)
    assert isinstance(terminal.error, StorageFailed)
    assert terminal.error.seq is None
    assert "attempt to write a readonly database" in terminal.error.reason
    unwritten = [line for line in logs if "failure record was not written" in line["event"]]
    assert len(unwritten) == 1
    assert unwritten[0]["error"] == "StorageFailed"
    assert rows(path, terminal.conversation_id) == []
    assert not leaked(events, logs)


# ---- the seam, without SQLite ----------------------------------------------------------------


@attrs.frozen
class ShelfGone(ConversationLogError):
    """A log's own error: the shelf that held the conversation is gone."""

    conversation_id: str
    seq: int | None

    def __str__(self) -> str:
        return f"the shelf of conversation {self.conversation_id} is gone"


@attrs.frozen
class FlakyLog:
    """An in-memory log whose appends fail with ``error`` from the ``fail_from``-th on."""

    error: Exception
    fail_from: int
    log: InMemoryConversationLog = attrs.field(factory=InMemoryConversationLog)
    appends: list[int] = attrs.field(factory=list)

    async def append(self, conversation_id: str, records: Sequence[Record]) -> int:
        self.appends.append(len(records))
        if len(self.appends) >= self.fail_from:
            await trio.lowlevel.checkpoint()
            raise self.error
        return await self.log.append(conversation_id, records)

    async def entries(self, conversation_id: str, *, after: int = 0) -> Sequence[LogEntry]:
        return await self.log.entries(conversation_id, after=after)


@pytest.mark.parametrize("fail_from", [1, 2])
def test_any_conversation_log_error_is_a_storage_failure_and_others_stay_defects(
    fail_from: int,
) -> None:
    """The engine knows the seam's error, not SQLite's: a log's own ``ConversationLogError``
    fails the run with ``StorageFailed`` carrying its fields and sentence — whether the first
    append fails (and so the failure record too: one ``RunFailed`` all the same) or a later one
    — while anything else the log raises is still an engine defect."""
    for error, expected in [
        (ShelfGone("c1", 7), StorageFailed("c1", 7, "the shelf of conversation c1 is gone")),
        (RuntimeError("a bug"), EngineDefect("RuntimeError: a bug")),
    ]:
        log = FlakyLog(error, fail_from)
        layer = ScriptedModel([Turn.text("Hello.")]).as_layer() + Layer.succeed(
            ConversationLogService, log
        )

        async def scenario() -> list[EventBase]:
            async with open_runtime(layer, agents=[AGENT]) as runtime:  # noqa: B023 - awaited here
                return await run_events(runtime, AGENT, "Hi.")

        events = ended(scenario)
        terminal = assert_well_formed(events)
        assert isinstance(terminal, RunFailed)
        assert type(terminal.error) is type(expected)
        assert attrs.astuple(terminal.error) == attrs.astuple(expected)
        written = trio.run(log.log.entries, terminal.conversation_id)
        # The first append (input) wrote or not; every later one, the failure record included,
        # was refused.
        assert [type(entry.record).__name__ for entry in written] == (
            [] if fail_from == 1 else ["ConversationCreated", "UserInputRecorded"]
        )


def test_an_interrupted_run_whose_record_cannot_be_written_still_ends() -> None:
    """The run is interrupted while its model hangs, and the log refuses the interruption's
    record: the run still ends with its one ``RunInterrupted`` (the unwritten record logged), so
    the runtime that waits for it on close does not wait for ever."""
    log = FlakyLog(ShelfGone("c1", None), fail_from=2)
    layer = ScriptedModel([Turn.hanging()]).as_layer() + Layer.succeed(ConversationLogService, log)

    async def scenario() -> list[EventBase]:
        events: list[EventBase] = []
        async with (
            open_runtime(layer, agents=[AGENT]) as runtime,
            runtime.stream(AGENT, "Hi.") as stream,
        ):
            async for event in stream:
                events.append(event)
                if type(event).__name__ == "ModelStarted":
                    stream.interrupt()
        return events

    with engine_logs(logging.WARNING) as logs:
        events = ended(scenario)
    terminal = assert_well_formed(events)
    assert type(terminal).__name__ == "RunInterrupted"
    assert any("its record was not written" in line["event"] for line in logs)
