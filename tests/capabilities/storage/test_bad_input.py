"""Bad input to the SQLite store: files that are not ours, rows damaged behind its back, records
from a newer version, a refused transaction — each a typed error naming where, nothing lost, and
no other conversation affected."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio

from capabilities.storage import CannotOpenDatabase, Connection, DatabaseTooNew
from capabilities.storage._database import open_database
from capabilities.storage._errors import (
    CommitOutcomeUnknown,
    CorruptRecord,
    ForeignDatabase,
    LogClosed,
    LogGap,
    LogWriteFailed,
    NotADatabase,
    RecordNotEncodable,
    StorageClosed,
    UnknownRecordVersion,
    WriteFailed,
)
from capabilities.storage._layout import LAYOUT_VERSION
from capabilities.storage._log import SqliteConversationLog
from capabilities.storage._writer import run_batch
from effectagent.core import ConversationCreated, UserInputRecorded
from effectagent.engine import ConversationLogError

SECRET = "the-users-private-words"


def user(conversation: str, text: str = SECRET) -> UserInputRecorded:
    return UserInputRecorded(
        conversation_id=conversation,
        run_id="r",
        input_id="i",
        kind="user",
        text=text,
        author="ann",
        at=1.0,
    )


async def filled(path: Path) -> None:
    async with open_database(path) as database:
        log = SqliteConversationLog(database)
        await log.append(
            "damaged",
            [ConversationCreated(conversation_id="damaged", agent="a", at=1.0), user("damaged")],
        )
        await log.append(
            "healthy",
            [ConversationCreated(conversation_id="healthy", agent="a", at=1.0), user("healthy")],
        )


def tamper(path: Path, sql: str, *args: Any) -> None:
    """Change the file behind the store's back (another program, a disk fault)."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute(sql, args)
    finally:
        conn.close()


@pytest.mark.parametrize(
    ("sql", "error", "seq"),
    [
        ("UPDATE records SET body = '{\"text\": 3' WHERE seq = 2", CorruptRecord, 2),
        ("UPDATE records SET body = '{}' WHERE seq = 2", CorruptRecord, 2),
        ("UPDATE records SET version = 7 WHERE seq = 2", UnknownRecordVersion, 2),
        ("UPDATE records SET type = 'FromTheFuture' WHERE seq = 1", UnknownRecordVersion, 1),
        ("DELETE FROM records WHERE seq = 1", LogGap, 2),
    ],
)
async def test_a_damaged_row_is_a_typed_error_and_other_conversations_read_on(
    tmp_path: Path, sql: str, error: type[Exception], seq: int
) -> None:
    path = tmp_path / "d.db"
    await filled(path)
    tamper(path, sql.replace("WHERE", "WHERE conversation_id = 'damaged' AND"))
    async with open_database(path) as database:
        log = SqliteConversationLog(database)
        with pytest.raises(error) as raised:
            await log.entries("damaged")
        # The engine's seam error too: a run that reads this fails with StorageFailed.
        assert isinstance(raised.value, ConversationLogError)
        assert (raised.value.conversation_id, raised.value.seq) == ("damaged", seq)
        assert str(raised.value).startswith(("record ", "records "))
        assert "conversation damaged" in str(raised.value)
        assert SECRET not in str(raised.value)
        assert [e.record for e in await log.entries("healthy")][1] == user("healthy")
        # The failed read left no stale snapshot behind: a later write is seen at once.
        await log.append("healthy", [user("healthy", "later")])
        assert (await log.entries("healthy", after=2))[0].record == user("healthy", "later")
        # Nothing was skipped or repaired behind the caller's back: the row is still there.
        assert await log.last_seq("damaged") == 2


async def test_a_file_that_is_not_sqlite_is_refused_unmodified(tmp_path: Path) -> None:
    path = tmp_path / "notes.db"
    content = b"these are my notes, not a database\n" * 200
    path.write_bytes(content)
    with pytest.raises(NotADatabase):
        async with open_database(path):
            pass
    assert path.read_bytes() == content


async def test_another_applications_database_is_refused_unmodified(tmp_path: Path) -> None:
    path = tmp_path / "theirs.db"
    tamper(path, "CREATE TABLE invoices (id INTEGER PRIMARY KEY, total REAL)")
    before = path.read_bytes()
    with pytest.raises(ForeignDatabase):
        async with open_database(path):
            pass
    assert path.read_bytes() == before


async def test_a_database_from_a_newer_version_is_refused_unmodified(tmp_path: Path) -> None:
    path = tmp_path / "new.db"
    await filled(path)
    tamper(path, "PRAGMA user_version = 99")
    before = path.read_bytes()
    with pytest.raises(DatabaseTooNew) as raised:
        async with open_database(path):
            pass
    assert (raised.value.found, raised.value.supported) == (99, LAYOUT_VERSION)
    assert path.read_bytes() == before


async def test_a_path_that_cannot_be_opened_is_a_typed_error(tmp_path: Path) -> None:
    with pytest.raises(CannotOpenDatabase):
        async with open_database(tmp_path):  # a directory
            pass
    with pytest.raises(CannotOpenDatabase):
        async with open_database(tmp_path / "missing" / "dir" / "x.db"):
            pass


async def test_a_write_sqlite_refuses_is_write_failed_and_writes_nothing(tmp_path: Path) -> None:
    async with open_database(tmp_path / "ro.db") as database:
        log = SqliteConversationLog(database)
        await log.append("c", [user("c", "one")])

        def break_it(conn: Connection) -> None:
            conn.execute("INSERT INTO no_such_table VALUES (1)")

        with pytest.raises(WriteFailed):
            await database.write(break_it)
        assert await log.append("c", [user("c", "two")]) == 2


class _FailingCommit(sqlite3.Connection):
    """A connection whose COMMIT fails, as on a full disk."""

    def execute(self, sql: str, *args: Any) -> sqlite3.Cursor:
        if sql == "COMMIT":
            raise sqlite3.OperationalError("database or disk is full")
        return super().execute(sql, *args)


def test_a_refused_commit_fails_every_write_of_its_batch_and_keeps_none(tmp_path: Path) -> None:
    """run_batch, the transaction of a group commit: one refused COMMIT fails each write in it
    (each was all-or-nothing: none is in the database)."""
    conn = sqlite3.connect(tmp_path / "f.db", isolation_level=None, factory=_FailingCommit)
    conn.execute("CREATE TABLE t (x INTEGER)")

    class Job:
        def __init__(self, x: int) -> None:
            self.work = lambda c: c.execute("INSERT INTO t VALUES (?)", (x,)).rowcount
            self.weight, self.result, self.error = 1, None, None

    batch = [Job(1), Job(2)]
    run_batch(conn, batch)  # type: ignore[arg-type]
    assert all(isinstance(job.error, WriteFailed) for job in batch)
    assert all(job.result is None for job in batch)
    assert conn.execute("SELECT count(*) FROM t").fetchone()[0] == 0


async def test_a_closed_store_refuses_writes_and_reads(tmp_path: Path) -> None:
    async with open_database(tmp_path / "z.db") as database:
        log = SqliteConversationLog(database)
    with pytest.raises(StorageClosed) as appending:
        await log.append("c", [user("c")])
    with pytest.raises(StorageClosed) as reading:
        await log.entries("c")
    for raised in (appending, reading):
        assert isinstance(raised.value, LogClosed)
        assert (raised.value.conversation_id, raised.value.seq) == ("c", None)
        assert str(raised.value) == "conversation c cannot be read or written: the store is closed"


async def test_an_append_whose_commit_outcome_is_unknown_never_says_nothing_was_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A connection lost while PostgreSQL committed: the append may have been written. The
    log's error said "…: whether it was written is unknown); nothing of it was written"."""
    async with open_database(tmp_path / "u.db") as database:
        log = SqliteConversationLog(database)

        async def lost(*args: Any, **kwargs: Any) -> Any:
            raise CommitOutcomeUnknown("the connection failed: whether it was written is unknown")

        monkeypatch.setattr(type(database), "write", lost)
        with pytest.raises(LogWriteFailed) as raised:
            await log.append("c", [user("c")])
    assert raised.value.unknown
    assert str(raised.value) == (
        "an append to conversation c failed: the connection failed: whether it was written is "
        "unknown"
    )


async def test_an_append_sqlite_refuses_names_its_conversation(tmp_path: Path) -> None:
    """What the log's append raises when SQLite refuses it is a WriteFailed and the engine's
    ConversationLogError: it names the conversation (no one record is at fault: seq None)."""
    async with open_database(tmp_path / "ro.db") as database:
        log = SqliteConversationLog(database)
        await database.write(lambda conn: conn.execute("PRAGMA query_only = ON").fetchall())
        with pytest.raises(WriteFailed) as raised:
            await log.append("c", [user("c")])
    assert isinstance(raised.value, LogWriteFailed)
    assert isinstance(raised.value, ConversationLogError)
    assert (raised.value.conversation_id, raised.value.seq) == ("c", None)
    assert str(raised.value) == (
        "the database refused an append to conversation c (attempt to write a readonly "
        "database); nothing of it was written"
    )
    assert raised.value.is_retryable


async def test_a_record_that_cannot_be_stored_is_a_conversation_log_error() -> None:
    async with open_database(":memory:") as database:
        log = SqliteConversationLog(database)
        with pytest.raises(RecordNotEncodable) as raised:
            await log.append("c", [user("c"), attrs.evolve(user("c"), at=float("nan"))])
    assert isinstance(raised.value, ConversationLogError)
    assert (raised.value.conversation_id, raised.value.seq) == ("c", None)
    assert str(raised.value) == (
        "record 2 of an append to conversation c (a UserInputRecorded) cannot be stored: it "
        "holds a value JSON cannot represent (ValueError); nothing of the append was written"
    )


async def test_closing_writes_what_is_queued_first(tmp_path: Path) -> None:
    path = tmp_path / "q.db"
    async with open_database(path) as database:
        log = SqliteConversationLog(database)
        async with trio.open_nursery() as nursery:
            for i in range(20):
                nursery.start_soon(log.append, f"c{i}", [user(f"c{i}")])
            await trio.testing.wait_all_tasks_blocked()
            nursery.start_soon(database.aclose)
    async with open_database(path) as database:
        assert len(await SqliteConversationLog(database).conversations()) == 20
