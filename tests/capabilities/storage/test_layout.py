"""The layout's versions: a new file is made at the current version directly, a version 1 file
is upgraded in place (its data kept, the same tables as a new one), an upgrade that fails leaves
the file as it was, and opening a current file takes no write lock."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from capabilities.storage._busy import BusyPolicy
from capabilities.storage._database import open_database
from capabilities.storage._layout import _LAYOUT_V1, APPLICATION_ID, LAYOUT_VERSION, UPGRADES
from capabilities.storage._layout_durable import DURABLE_TABLES
from capabilities.storage._log import SqliteConversationLog

TINY = BusyPolicy(bound=0.05, first=0.001, cap=0.01)


def _schema(path: Path) -> dict[str, str]:
    conn = sqlite3.connect(path)
    try:
        return dict(conn.execute("SELECT name, sql FROM sqlite_master WHERE sql NOT NULL"))
    finally:
        conn.close()


def _pragma(path: Path, name: str) -> int:
    conn = sqlite3.connect(path)
    try:
        return int(conn.execute(f"PRAGMA {name}").fetchone()[0])
    finally:
        conn.close()


def _version_1(path: Path) -> None:
    """A file as version 1 of the layout wrote it, with a record and a queued steering input."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        for statement in _LAYOUT_V1:
            conn.execute(statement)
        conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
        conn.execute("PRAGMA user_version = 1")
        conn.execute(
            "INSERT INTO records VALUES ('c', 1, 'ConversationCreated', 1, "
            '\'{"conversation_id": "c", "agent": "a", "at": 1.0}\')'
        )
        conn.execute(
            "INSERT INTO steering_inputs VALUES ('in', 'c', 1, 'steering', NULL, 'ann', 1.0, "
            "'delivered', 2, '')"
        )
    finally:
        conn.close()


async def test_a_new_file_is_made_at_the_current_version(tmp_path: Path) -> None:
    path = tmp_path / "new.db"
    async with open_database(path):
        pass
    assert LAYOUT_VERSION == 6
    assert (_pragma(path, "user_version"), _pragma(path, "application_id")) == (6, APPLICATION_ID)
    tables = set(_schema(path))
    assert {"records", "sessions", "agent_state", "steering_inputs"} <= tables
    assert {"submissions", "lanes", "durable_steps", "aborts", "durable_audit"} <= tables
    assert "epoch INTEGER" in _schema(path)["steering_inputs"]
    assert {"said", "said_index", "said_marks", "records_unsaid", "records_resaid"} <= tables
    assert "media" in tables
    assert "parts TEXT" in _schema(path)["steering_inputs"]
    assert "parts TEXT" in _schema(path)["submissions"]
    assert "put_at REAL" in _schema(path)["media"]
    assert "media_by_put_at" in tables


async def test_a_version_1_file_is_upgraded_in_place_keeping_its_data(tmp_path: Path) -> None:
    old, new = tmp_path / "old.db", tmp_path / "new.db"
    _version_1(old)
    async with open_database(new):
        pass
    async with open_database(old) as database:
        entries = await SqliteConversationLog(database).entries("c")
        steering = await database.read(
            lambda conn: conn.execute(
                "SELECT input_id, status, seq, epoch FROM steering_inputs"
            ).fetchall()
        )
    assert [type(e.record).__name__ for e in entries] == ["ConversationCreated"]
    assert steering == [("in", "delivered", 2, None)]
    assert _pragma(old, "user_version") == LAYOUT_VERSION
    assert _schema(old) == _schema(new)  # the same tables as a file made new


async def test_an_upgrade_that_fails_leaves_the_file_as_it_was(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "old.db"
    _version_1(path)
    before = _schema(path)

    def broken(conn: sqlite3.Connection) -> None:
        conn.execute(DURABLE_TABLES[0])  # half of the step, then a failure
        raise sqlite3.OperationalError("disk I/O error")

    monkeypatch.setitem(UPGRADES, 1, broken)
    with pytest.raises(Exception, match="disk I/O error"):
        async with open_database(path):
            pass
    assert _schema(path) == before
    assert _pragma(path, "user_version") == 1


async def test_opening_a_current_file_takes_no_write_lock(tmp_path: Path) -> None:
    path = tmp_path / "x.db"
    async with open_database(path):  # open: the next opener is not alone (no recovery write)
        other = sqlite3.connect(path, isolation_level=None)
        other.execute("BEGIN IMMEDIATE")  # a writer that keeps the lock
        try:
            async with open_database(path, busy=TINY) as second:
                assert not second.alone
        finally:
            other.execute("ROLLBACK")
            other.close()


async def test_a_version_4_file_is_upgraded_to_keep_the_parts_of_waiting_input(
    tmp_path: Path,
) -> None:
    """Layout 4 → 5 adds ``parts`` to steering inputs and submissions; the rows there keep
    theirs as NULL (text alone)."""
    path = tmp_path / "v4.db"
    async with open_database(path):
        pass
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("ALTER TABLE steering_inputs DROP COLUMN parts")
        conn.execute("ALTER TABLE submissions DROP COLUMN parts")
        conn.execute("DROP INDEX media_by_put_at")  # layout 6's
        conn.execute("ALTER TABLE media DROP COLUMN put_at")
        conn.execute(
            "INSERT INTO steering_inputs (input_id, conversation_id, position, kind, text, "
            "author, at, status, seq, reason, epoch) "
            "VALUES ('in', 'c', 1, 'steering', 'hi', 'ann', 1.0, 'queued', NULL, '', 1)"
        )
        conn.execute("PRAGMA user_version = 4")
    finally:
        conn.close()
    assert 4 in UPGRADES
    async with open_database(path) as database:
        rows = await database.read(
            lambda conn: conn.execute("SELECT input_id, parts FROM steering_inputs").fetchall()
        )
    assert rows == [("in", None)]
    assert _pragma(path, "user_version") == LAYOUT_VERSION
    fresh = tmp_path / "fresh.db"
    async with open_database(fresh):
        pass
    assert _schema(path)["steering_inputs"] == _schema(fresh)["steering_inputs"]
