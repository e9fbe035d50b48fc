"""The PostgreSQL database behind the storage port, on a real throwaway cluster (``tests.postgres``):
the port's contract (results, all or nothing, driver errors, one snapshot per read), writes that
run again after a real serialization conflict and after their connection was killed, the layout
(empty, current, too new, another application's), who is alone, closing, cancellation, and that a
password never reaches an error."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
import trio
from hypothesis import given
from hypothesis import strategies as st
from psycopg import sql

from capabilities.storage import _postgres as postgres_module
from capabilities.storage._busy import BusyPolicy
from capabilities.storage._database import MEMORY, open_database
from capabilities.storage._errors import (
    CannotOpenDatabase,
    ConversationInUse,
    DatabaseInUse,
    DatabaseTooNew,
    ForeignDatabase,
    ReadFailed,
    StorageClosed,
    WriteFailed,
)
from capabilities.storage._port import Connection, Database, dialect_of
from capabilities.storage._postgres import PostgresDatabase, clock_skew, open_postgres
from capabilities.storage._postgres_attempts import DUPLICATE_RETRIES
from capabilities.storage._postgres_layout import APPLICATION, LAYOUT_VERSION, ForeignSchema
from capabilities.storage._postgres_listen import channel
from capabilities.storage._postgres_names import SchemaInUse, failure_kind, lock_key, redact_url
from capabilities.storage._recovery import STATE_REASON
from tests.postgres import drop_schema, fresh_schema, postgres_database, postgres_url

CANARY = "canary-Pa55w0rd-7f3e"


def _direct(schema: str | None = None) -> psycopg.Connection[Any]:
    """A connection of the test's own, outside the store (autocommit)."""
    conn = psycopg.connect(postgres_url(), autocommit=True)
    if schema is not None:
        conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(schema)))
    return conn


def _insert(conversation: str, seq: int, body: str = "{}") -> Any:
    def work(conn: Connection) -> int:
        return conn.execute(
            "INSERT INTO records (conversation_id, seq, type, version, body) "
            "VALUES (?, ?, 'T', 1, ?)",
            (conversation, seq, body),
        ).rowcount

    return work


def _count(conn: Connection) -> int:
    return int(conn.execute("SELECT count(*) FROM records").fetchone()[0])


@pytest.fixture
def schema() -> Iterator[str]:
    name = fresh_schema()
    try:
        yield name
    finally:
        with _direct() as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name)))


# ---- the port's contract --------------------------------------------------------------------------


async def test_it_is_a_database_of_the_port(postgres_db: PostgresDatabase) -> None:
    port: Database = postgres_db
    assert port.dialect == "postgresql"
    assert not port.in_memory
    assert port.holder_id.startswith("pid-")


def test_the_schema_fixture_gives_a_fresh_schema(postgres_schema: tuple[str, str]) -> None:
    url, schema = postgres_schema
    with psycopg.connect(url) as conn:
        found = conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (schema,))
        assert found.fetchone() is None  # nothing there yet: the store lays it out


async def test_a_write_returns_its_result_and_a_read_sees_it() -> None:
    async with postgres_database() as db:
        assert await db.write(_insert("c", 1, '{"a": 1}')) == 1
        rows = await db.read(lambda conn: conn.execute("SELECT seq, body FROM records").fetchall())
        assert rows == [(1, '{"a": 1}')]


async def test_executemany_writes_every_row() -> None:
    async with postgres_database() as db:

        def work(conn: Connection) -> int:
            return conn.executemany(
                "INSERT INTO records VALUES (?, ?, 'T', 1, '{}')", [("c", n) for n in range(5)]
            ).rowcount

        assert await db.write(work) == 5
        assert await db.read(_count) == 5


async def test_work_that_raises_writes_nothing_and_its_error_propagates() -> None:
    class Refused(Exception):
        pass

    async with postgres_database() as db:

        def work(conn: Connection) -> None:
            _insert("c", 1)(conn)
            raise Refused

        with pytest.raises(Refused):
            await db.write(work)
        assert await db.read(_count) == 0


async def test_a_driver_error_is_write_failed_without_the_values() -> None:
    async with postgres_database() as db:
        await db.write(_insert(CANARY, 1))
        runs: list[int] = []

        def again(conn: Connection) -> int:
            runs.append(1)
            return int(_insert(CANARY, 1)(conn))  # the same key again: a true duplicate

        with pytest.raises(WriteFailed) as caught:
            await db.write(again)
        assert "duplicate key" in str(caught.value)
        assert "23505" in str(caught.value)
        assert CANARY not in str(caught.value)  # the server's detail quotes the key: left out
        assert len(runs) == DUPLICATE_RETRIES + 1  # each newer snapshot met it: not a race
        assert await db.read(_count) == 1


async def test_a_driver_error_in_a_read_is_read_failed() -> None:
    async with postgres_database() as db:
        with pytest.raises(ReadFailed, match="no_such_table"):
            await db.read(lambda conn: conn.execute("SELECT * FROM no_such_table").fetchall())
        assert await db.read(_count) == 0  # the connection went back to the pool usable


async def test_a_statement_with_a_percent_sign_is_refused() -> None:
    async with postgres_database() as db:
        with pytest.raises(ValueError, match="parameters"):
            await db.read(lambda conn: conn.execute("SELECT 1 WHERE 'a' LIKE 'a%'").fetchall())


async def test_a_read_is_one_snapshot() -> None:
    async with postgres_database() as db:
        await db.write(_insert("c", 1))

        def work(conn: Connection) -> tuple[int, int]:
            before = _count(conn)
            with _direct(db.schema) as other:  # commits while the read goes on
                other.execute("INSERT INTO records VALUES ('c', 2, 'T', 1, '{}')")
            return before, _count(conn)

        assert await db.read(work) == (1, 1)
        assert await db.read(_count) == 2


async def test_a_read_refuses_to_write() -> None:
    async with postgres_database() as db:
        with pytest.raises(ReadFailed, match="read-only"):
            await db.read(_insert("c", 1))


# ---- running again ---------------------------------------------------------------------------------


async def test_two_writers_in_conflict_both_commit_with_no_lost_update() -> None:
    """Two writes read a counter, both wait until both have read it, then both write it plus
    one: SERIALIZABLE rolls one back (40001); it runs again, reads the other's value, and the
    counter ends at 2 — with three attempts in all."""
    async with postgres_database(pool_size=2) as db:
        await db.write(
            lambda conn: conn.execute(
                "INSERT INTO agent_state VALUES ('s', 'k', 0, 'committed', 1, NULL, '', 'r', 0)"
            )
        )
        both_read = threading.Barrier(2, timeout=30)
        attempts: list[int] = []

        def increment(conn: Connection) -> int:
            value = int(
                conn.execute("SELECT revision FROM agent_state WHERE slot = 's'").fetchone()[0]
            )
            attempts.append(value)
            if len(attempts) <= 2:
                both_read.wait()  # the first attempts of both have read the same value
            conn.execute("UPDATE agent_state SET revision = ? WHERE slot = 's'", (value + 1,))
            return value + 1

        results: list[int] = []

        async def one() -> None:
            results.append(await db.write(increment))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(one)
            nursery.start_soon(one)
        final = await db.read(
            lambda conn: conn.execute("SELECT revision FROM agent_state").fetchone()[0]
        )
        assert final == 2
        assert sorted(results) == [1, 2]
        assert len(attempts) == 3
        assert attempts[:2] == [0, 0]
        assert attempts[2] == 1


async def test_a_key_added_by_a_write_committed_after_this_ones_snapshot_is_found() -> None:
    """A write takes its snapshot, then another adds a key and commits, then the first looks
    for that key — missing from its snapshot — and adds it: the server reports a duplicate key
    (23505), not a serialization failure. It runs again, finds the row, and ends well."""
    async with postgres_database(pool_size=2) as db:
        snapshot_taken = threading.Event()
        other_committed = threading.Event()
        runs: list[str] = []

        def add_once(conn: Connection) -> str:
            conn.execute("SELECT count(*) FROM lanes").fetchone()  # the snapshot is taken
            if not runs:
                snapshot_taken.set()
                assert other_committed.wait(30)
            found = conn.execute("SELECT 1 FROM records WHERE conversation_id = 'c'").fetchone()
            runs.append("found" if found else "added")
            if found is None:
                _insert("c", 1)(conn)
            return runs[-1]

        async def late() -> None:
            assert await db.write(add_once) == "found"

        async with trio.open_nursery() as nursery:
            nursery.start_soon(late)
            await trio.to_thread.run_sync(snapshot_taken.wait)
            assert await db.write(_insert("c", 1)) == 1
            other_committed.set()
        assert runs == ["added", "found"]
        assert await db.read(_count) == 1


async def test_concurrent_read_modify_writes_lose_no_update() -> None:
    """Four tasks each add one to a counter five times, read-modify-write, all at once: every
    increment counts (conflicts run again), and each write returned a distinct value."""
    async with postgres_database(pool_size=4) as db:
        await db.write(
            lambda conn: conn.execute(
                "INSERT INTO agent_state VALUES ('s', 'k', 0, 'committed', 1, NULL, '', 'r', 0)"
            )
        )

        def increment(conn: Connection) -> int:
            value = int(conn.execute("SELECT revision FROM agent_state").fetchone()[0]) + 1
            conn.execute("UPDATE agent_state SET revision = ?", (value,))
            return value

        returned: list[int] = []

        async def task() -> None:
            for _ in range(5):
                returned.append(await db.write(increment))

        async with trio.open_nursery() as nursery:
            for _ in range(4):
                nursery.start_soon(task)
        assert sorted(returned) == list(range(1, 21))
        final = await db.read(lambda c: c.execute("SELECT revision FROM agent_state").fetchone())
        assert final == (20,)


async def test_a_write_whose_connection_is_killed_runs_again_and_commits_once() -> None:
    async with postgres_database() as db:
        backends: list[int] = []

        def work(conn: Connection) -> int:
            pid = int(conn.execute("SELECT pg_backend_pid()").fetchone()[0])
            backends.append(pid)
            if len(backends) == 1:
                with _direct() as killer:  # waits until the backend is gone
                    killed = killer.execute("SELECT pg_terminate_backend(%s, 30000)", (pid,))
                    assert killed.fetchone() == (True,)
            return int(_insert("c", 1)(conn))

        assert await db.write(work) == 1
        assert len(backends) == 2
        assert backends[0] != backends[1]
        assert await db.read(_count) == 1


async def test_a_read_whose_connection_is_killed_runs_once_more() -> None:
    async with postgres_database() as db:
        backends: list[int] = []

        def work(conn: Connection) -> int:
            pid = int(conn.execute("SELECT pg_backend_pid()").fetchone()[0])
            backends.append(pid)
            if len(backends) == 1:
                with _direct() as killer:
                    killer.execute("SELECT pg_terminate_backend(%s, 30000)", (pid,))
            return _count(conn)

        assert await db.read(work) == 0
        assert len(backends) == 2


@given(
    sqlstate=st.sampled_from(
        [None, "40001", "40P01", "23505", "23P01", "23503", "57P01", "08006", "XX000"]
    ),
    broken=st.booleans(),
    committing=st.booleans(),
)
def test_what_a_driver_error_means(sqlstate: str | None, broken: bool, committing: bool) -> None:
    kind = failure_kind(sqlstate, broken, committing=committing)
    # the server rolled it back, even when it said so at COMMIT: run again
    assert (kind == "conflict") == (sqlstate in ("40001", "40P01"))
    # a duplicate key is known by its code: nothing committed, whatever the connection did
    assert (kind == "duplicate") == (sqlstate in ("23505", "23P01"))
    # once COMMIT was sent, a dropped connection is never run again: it may have committed
    if committing:
        assert kind != "reconnect"
        if (broken or sqlstate is None) and kind not in ("conflict", "duplicate"):
            assert kind == "unknown"
    else:
        assert kind != "unknown"
        assert (kind == "reconnect") == (broken and kind not in ("conflict", "duplicate"))


async def test_a_connection_lost_while_committing_is_not_run_again() -> None:
    """A deferred trigger kills the write's own backend as its transaction commits: whether it
    committed cannot be known, so the write fails saying so and its work ran once."""
    async with postgres_database() as db:
        with _direct(db.schema) as conn:
            conn.execute(
                "CREATE FUNCTION end_me() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
                "PERFORM pg_terminate_backend(pg_backend_pid()); RETURN NULL; END $$"
            )
            conn.execute(
                "CREATE CONSTRAINT TRIGGER end_at_commit AFTER INSERT ON quarantine "
                "DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION end_me()"
            )
        runs: list[int] = []

        def work(conn: Connection) -> None:
            runs.append(1)
            conn.execute("INSERT INTO quarantine VALUES ('c', 1, 'r', 0)")

        with pytest.raises(WriteFailed, match="whether it was written is unknown") as raised:
            await db.write(work)
        assert runs == [1]
        # (it said "…: whether it was written is unknown); nothing of it was written")
        assert "nothing of it was written" not in str(raised.value)


# ---- cancellation and closing ----------------------------------------------------------------------


async def test_a_write_cancelled_before_it_starts_writes_nothing() -> None:
    async with postgres_database() as db:
        ran: list[int] = []

        def work(conn: Connection) -> int:
            ran.append(1)
            return int(_insert("c", 1)(conn))

        with trio.CancelScope() as scope:
            scope.cancel()
            await db.write(work)
        assert scope.cancelled_caught
        assert ran == []
        assert await db.read(_count) == 0


async def test_a_write_cancelled_while_it_runs_returns_its_result() -> None:
    async with postgres_database() as db:
        started = threading.Event()
        go = threading.Event()
        returned: list[int] = []

        def work(conn: Connection) -> int:
            started.set()
            assert go.wait(30)
            return int(_insert("c", 1)(conn))

        async def write() -> None:
            returned.append(await db.write(work))

        with trio.CancelScope() as scope:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(write)
                await trio.to_thread.run_sync(started.wait)
                scope.cancel()
                go.set()
        assert returned == [1]  # committed, so returned
        assert await db.read(_count) == 1


async def test_a_write_cancelled_between_attempts_is_not_run_again() -> None:
    """The first attempt meets a conflict while its task is cancelled: nothing was committed, so
    the write raises Cancelled rather than run again."""
    async with postgres_database() as db:
        started = threading.Event()
        go = threading.Event()
        runs: list[int] = []

        def work(conn: Connection) -> None:
            runs.append(1)
            _insert("c", 1)(conn)
            started.set()
            assert go.wait(30)
            raise psycopg.errors.SerializationFailure("a conflict, made up for the test")

        with trio.CancelScope() as scope:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(db.write, work)
                await trio.to_thread.run_sync(started.wait)
                scope.cancel()
                go.set()
        assert scope.cancelled_caught
        assert runs == [1]
        assert await db.read(_count) == 0


async def test_closing_is_idempotent_and_refuses_later_work() -> None:
    async with postgres_database() as db:
        await db.aclose()
        await db.aclose()
        with pytest.raises(StorageClosed):
            await db.write(_insert("c", 1))
        with pytest.raises(StorageClosed):
            await db.read(_count)


# ---- the layout ----------------------------------------------------------------------------------


def _catalog(schema: str) -> list[tuple[Any, ...]]:
    with _direct() as conn:
        return conn.execute(
            "SELECT c.relname, c.oid::bigint FROM pg_class c JOIN pg_namespace n "
            "ON n.oid = c.relnamespace WHERE n.nspname = %s ORDER BY 1",
            (schema,),
        ).fetchall()


def _columns_pg(schema: str) -> dict[str, list[str]]:
    with _direct() as conn:
        rows = conn.execute(
            "SELECT table_name, column_name FROM information_schema.columns "
            "WHERE table_schema = %s ORDER BY table_name, ordinal_position",
            (schema,),
        ).fetchall()
    found: dict[str, list[str]] = {}
    for table, column in rows:
        found.setdefault(table, []).append(column)
    return found


async def _columns_sqlite() -> tuple[dict[str, list[str]], set[str]]:
    async with open_database(MEMORY) as db:

        def work(conn: Connection) -> tuple[dict[str, list[str]], set[str]]:
            names = [
                row[0]
                for row in conn.execute(
                    "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE "
                    "'said%' AND name NOT LIKE 'sqlite%'"
                )
            ]
            indexes = {
                row[0]
                for row in conn.execute(
                    "SELECT name FROM sqlite_master WHERE type = 'index' AND sql NOT NULL"
                )
            }
            return {
                n: [r[1] for r in conn.execute(f"PRAGMA table_info({n})")] for n in names
            }, indexes

        return await db.read(work)


async def test_an_empty_schema_gets_every_table_of_the_sqlite_layout(schema: str) -> None:
    async with open_postgres(postgres_url(), schema=schema):
        pass
    tables, indexes = await _columns_sqlite()
    found = _columns_pg(schema)
    assert found.pop("effectagent_layout") == ["application", "version"]
    assert found.pop("live_key") == ["key"]  # PostgreSQL's own: live text's key
    assert found == tables  # the same tables, columns, and column order
    relations = {name for name, _ in _catalog(schema)}
    assert indexes <= relations  # the same (partial) indexes, by name
    with _direct(schema) as conn:
        assert conn.execute("SELECT * FROM effectagent_layout").fetchall() == [
            (APPLICATION, LAYOUT_VERSION)
        ]


async def test_extra_statements_are_laid_out_with_the_tables(schema: str) -> None:
    extra = ("CREATE TABLE said_test (conversation_id TEXT NOT NULL, seq BIGINT NOT NULL)",)
    async with open_postgres(postgres_url(), schema=schema, extra_layout=extra) as db:
        assert await db.read(lambda c: c.execute("SELECT count(*) FROM said_test").fetchone()) == (
            0,
        )
    before = _catalog(schema)
    async with open_postgres(postgres_url(), schema=schema, extra_layout=extra):
        pass  # current: not run again
    assert _catalog(schema) == before


async def test_reopening_a_current_schema_changes_nothing(schema: str) -> None:
    async with open_postgres(postgres_url(), schema=schema) as db:
        await db.write(_insert("c", 1))
    before = _catalog(schema)
    async with open_postgres(postgres_url(), schema=schema) as db:
        assert await db.read(_count) == 1
    assert _catalog(schema) == before


async def test_a_schema_of_a_newer_layout_is_refused_untouched(schema: str) -> None:
    async with open_postgres(postgres_url(), schema=schema):
        pass
    with _direct(schema) as conn:
        conn.execute("UPDATE effectagent_layout SET version = %s", (LAYOUT_VERSION + 1,))
    before = _catalog(schema)
    with pytest.raises(DatabaseTooNew) as caught:
        async with open_postgres(postgres_url(), schema=schema):
            pass
    assert caught.value.found == LAYOUT_VERSION + 1
    assert f"schema {schema}" in str(caught.value)
    assert _catalog(schema) == before


async def test_a_schema_of_another_application_is_refused_untouched(schema: str) -> None:
    with _direct() as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
        conn.execute(sql.SQL("CREATE TABLE {}.orders (id int)").format(sql.Identifier(schema)))
    before = _catalog(schema)
    with pytest.raises(ForeignSchema) as caught:
        async with open_postgres(postgres_url(), schema=schema):
            pass
    assert isinstance(caught.value, ForeignDatabase)
    assert "another application's tables" in str(caught.value)
    assert _catalog(schema) == before


async def test_two_schemas_are_two_stores() -> None:
    async with postgres_database() as one, postgres_database() as two:
        await one.write(_insert("c", 1))
        assert await two.read(_count) == 0
        assert one.alone
        assert two.alone
        assert lock_key(one.schema) != lock_key(two.schema)


@pytest.mark.parametrize("name", ["", "Effect", "1abc", "a-b", "a b", "pg_x", "x" * 64, 'a"b'])
async def test_a_schema_name_that_is_not_plain_is_refused(name: str) -> None:
    with pytest.raises(ValueError, match="plain lower-case name"):
        async with open_postgres(postgres_url(), schema=name):
            pass


@pytest.mark.parametrize(
    ("arguments", "error", "message"),
    [
        ({"lease": float("inf")}, ValueError, "^lease must be a finite, positive number"),
        ({"lease": 0}, ValueError, "^lease must be a finite, positive number"),
        ({"pool_size": 0}, ValueError, "^pool_size must be at least 1, got 0$"),
        ({"pool_size": 1.5}, TypeError, "^pool_size must be an int, got float$"),
        ({"pool_size": True}, TypeError, "^pool_size must be an int, got bool$"),
        ({"retry": 10}, TypeError, "^retry must be a BusyPolicy or None, got int$"),
        ({"schema": 5}, TypeError, "^schema must be a str, got int$"),
        ({"schema": None}, TypeError, "^schema must be a str, got NoneType$"),
    ],
)
async def test_bounds_that_are_no_bounds_are_refused_before_connecting(
    arguments: dict[str, Any], error: type[Exception], message: str
) -> None:
    """As ``open_database``'s: an infinite lease holds a dead process's lanes for ever."""
    with pytest.raises(error, match=message):
        async with open_postgres("postgresql://nowhere.invalid/none", **arguments):
            pass  # pragma: no cover - refused before


async def test_a_url_that_is_not_a_str_is_refused_naming_it() -> None:
    with pytest.raises(TypeError, match=r"^url must be a str, got bytes$"):
        async with open_postgres(b"postgresql://nowhere.invalid/none"):  # type: ignore[arg-type]
            pass  # pragma: no cover - refused before


# ---- alone or not ----------------------------------------------------------------------------------


async def test_the_first_opener_is_alone_and_the_next_is_not_until_both_closed(schema: str) -> None:
    url = postgres_url()
    async with (
        open_postgres(url, schema=schema) as first,
        open_postgres(url, schema=schema) as second,
    ):
        assert first.alone
        assert not second.alone
    async with open_postgres(url, schema=schema) as third:
        assert third.alone


async def test_workers_starting_at_once_lay_the_schema_out_once(schema: str) -> None:
    url = postgres_url()
    opened: list[PostgresDatabase] = []
    all_open = trio.Event()

    async def worker() -> None:
        async with open_postgres(url, schema=schema, pool_size=1) as db:
            opened.append(db)
            if len(opened) == 4:
                all_open.set()
            await all_open.wait()

    async with trio.open_nursery() as nursery:
        for _ in range(4):
            nursery.start_soon(worker)
    assert sum(db.alone for db in opened) == 1  # one cleaned up; the others shared
    with _direct(schema) as conn:
        assert conn.execute("SELECT count(*) FROM effectagent_layout").fetchone() == (1,)


async def test_an_opener_waits_bounded_for_one_cleaning_up(schema: str) -> None:
    """Another process holds the schema's lock for itself (as an opener does while it cleans
    up): opening waits as long as the retry bound, then refuses with a sentence."""
    url = postgres_url()
    async with open_postgres(url, schema=schema):
        pass
    with _direct() as holder:
        holder.execute("SELECT pg_advisory_lock(%s)", (lock_key(schema),))
        with pytest.raises(SchemaInUse) as caught:
            async with open_postgres(url, schema=schema, retry=BusyPolicy(bound=0.05)):
                pass
    assert "cleaning up after processes that ended" in str(caught.value)
    assert isinstance(caught.value, DatabaseInUse)
    async with open_postgres(url, schema=schema) as db:  # the holder is gone
        assert db.alone


async def test_a_lost_lock_connection_is_replaced_and_the_lock_shared_again(schema: str) -> None:
    """The server ends the connection holding a database's share of the openers' lock (as a
    restart or a failover would): the next check takes the lock again, shared, so a later
    opener does not count as alone and clean up what this live process holds."""
    url = postgres_url()
    async with open_postgres(url, schema=schema) as db:
        assert not await db.check_lock()  # held: nothing to do
        with _direct() as killer:
            ended = killer.execute(
                "SELECT pg_terminate_backend(%s, 30000)", (db.lock_backend_pid,)
            ).fetchone()
            assert ended == (True,)
        assert await db.check_lock()
        async with open_postgres(url, schema=schema) as later:
            assert not later.alone
            assert later.recovered == {}


async def test_an_opener_alone_recovers_what_ended_processes_left(schema: str) -> None:
    url = postgres_url()
    async with open_postgres(url, schema=schema):
        pass
    with _direct(schema) as conn:
        conn.execute("INSERT INTO agent_state VALUES ('s', 'k', 1, 'pending', 1, NULL, '', 'r', 0)")
        conn.execute(
            "INSERT INTO steering_inputs (input_id, conversation_id, position, kind, text, "
            "author, at, status, reason, epoch) VALUES ('i', 'c', 1, 'steering', 'hi', 'a', 0, "
            "'queued', '', 1)"
        )
        conn.execute("INSERT INTO lanes VALUES ('c', NULL, 'run', 1, 'pid-1-gone', 1e12)")
    async with open_postgres(url, schema=schema) as db:
        assert db.alone
        assert db.recovered == {"state": 1, "steering": 1, "lanes": 1, "media": 0}
        state = await db.read(
            lambda conn: conn.execute("SELECT status, reason FROM agent_state").fetchone()
        )
        assert state == ("uncertain", STATE_REASON)
        lane = await db.lanes.current("c")
        assert lane is not None
        assert lane.worker_id is None
        assert lane.epoch == 1


async def test_lanes_and_holds_work_on_postgres(schema: str) -> None:
    url = postgres_url()
    async with open_postgres(url, schema=schema) as db, open_postgres(url, schema=schema) as other:
        lane = await db.lanes.claim("c")
        with pytest.raises(ConversationInUse):
            await other.lanes.claim("c")
        renewed = await db.lanes.renew(lane)
        assert renewed.lease_until >= lane.lease_until
        await db.holds.claim("d", "run-1")
        assert "d" in db.holds.held
        assert await db.lanes.release(lane)
        taken = await other.lanes.claim("c")
        assert taken.epoch == lane.epoch + 1
    with _direct(schema) as conn:  # closing let the plain run's hold go, its epoch kept
        assert conn.execute(
            "SELECT worker_id, epoch FROM lanes WHERE conversation_id = 'd'"
        ).fetchone() == (None, 1)


# ---- passwords -------------------------------------------------------------------------------------


def test_a_url_is_named_without_its_password() -> None:
    url = f"postgresql://ann:{CANARY}@db.example:5432/app?sslmode=require&password={CANARY}"
    assert redact_url(url) == "postgresql://ann@db.example:5432/app?sslmode=require"
    assert CANARY not in redact_url(f"host=db.example password={CANARY} dbname=app")
    assert redact_url(f"postgresql:///app?host=/run/pg&pasword={CANARY}") == (
        "postgresql:///app?host=/run/pg"  # a misspelt parameter might be a secret too
    )


async def test_a_password_never_reaches_an_error() -> None:
    base = postgres_url()  # trust authentication: any password is accepted
    host = base.split("?", 1)[1]
    missing = f"postgresql://postgres:{CANARY}@/no_such_database?{host}"
    with pytest.raises(CannotOpenDatabase) as cannot:
        async with open_postgres(missing):
            pass
    assert "no_such_database" in str(cannot.value)
    assert CANARY not in str(cannot.value)
    assert CANARY not in repr(cannot.value)

    for unreadable, why in (
        (f"host=/nowhere password {CANARY}", "neither a postgresql:// URL"),
        (f"postgresql://ann:{CANARY}@/db?{CANARY}=1", "query parameter PostgreSQL does not take"),
        (f"postgresql://ann:{CANARY}@/db?colour=red", "the query parameter 'colour', which"),
    ):
        with pytest.raises(CannotOpenDatabase, match=why) as caught:
            async with open_postgres(unreadable):
                pass
        assert CANARY not in str(caught.value)
        assert CANARY not in repr(caught.value)
        assert "neither" not in str(caught.value) or "password" in unreadable

    schema = fresh_schema()
    try:
        with _direct() as conn:
            conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
            conn.execute(sql.SQL("CREATE TABLE {}.t (id int)").format(sql.Identifier(schema)))
        url = f"postgresql://postgres:{CANARY}@/postgres?{host}"
        with pytest.raises(ForeignSchema) as foreign:
            async with open_postgres(url, schema=schema):
                pass
        assert "postgresql://postgres@/postgres" in str(foreign.value)
        assert CANARY not in str(foreign.value)
        assert CANARY not in repr(foreign.value)
    finally:
        with _direct() as conn:
            conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(schema)))


# ---- busy ------------------------------------------------------------------------------------------


async def test_conflicts_that_outlast_the_bound_fail_busy_with_nothing_written() -> None:
    """A write that meets a serialization failure on every attempt ends with DatabaseBusy once
    the bound is spent, nothing written."""
    policy = BusyPolicy(bound=0.05, first=0.001, cap=0.01)
    async with postgres_database(retry=policy) as db:

        def work(conn: Connection) -> None:
            _insert("c", 1)(conn)
            raise psycopg.errors.SerializationFailure("made up for the test")

        with pytest.raises(WriteFailed) as caught:
            await db.write(work)
        assert type(caught.value).__name__ == "DatabaseBusy"
        assert "kept conflicting" in str(caught.value)  # not SQLite's "write lock"
        assert await db.read(_count) == 0


async def test_the_clock_difference_with_the_server_is_measured_at_open() -> None:
    """Leases are wall-clock times each machine compares with its own clock: an open measures
    how far this machine's clock is from the server's (the test cluster runs here: nearly 0), and
    the measure follows a clock that is off."""
    async with postgres_database() as database:
        assert abs(database.clock_skew) < 1.0
        pool = database._pool  # the measure itself, with a clock 100 s fast
        skew = await trio.to_thread.run_sync(lambda: clock_skew(pool, lambda: time.time() + 100))
        assert -101.0 < skew < -99.0


async def test_a_clock_a_second_or_more_off_is_a_warning_line_at_open(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The measure is said where an operator looks: a warning naming how far off, and what to
    do; a clock in step says nothing."""
    caplog.set_level("WARNING", logger="effectagent.capabilities")
    async with postgres_database():
        pass
    assert not [r for r in caplog.records if "clock" in r.getMessage()]

    def fast_clock(pool: Any) -> float:
        return clock_skew(pool, lambda: time.time() + 100)  # this machine 100 s ahead

    monkeypatch.setattr(postgres_module, "clock_skew", fast_clock)
    async with postgres_database() as database:
        assert -101.0 < database.clock_skew < -99.0
    (line,) = [r for r in caplog.records if "clock" in r.getMessage()]
    assert line.levelname == "WARNING"
    said = line.getMessage()
    assert "this machine's clock differs from the database server's" in said
    assert re.search(r"seconds=-(99|100|101)\.\d", said), said
    assert "NTP" in said


async def test_a_wake_up_is_sent_by_a_write_that_commits_and_never_by_one_rolled_back() -> None:
    """A write made with ``wake=True`` notifies inside its own transaction: its notification is
    delivered when it commits, and one rolled back at COMMIT — after its work and its NOTIFY
    ran — sends nothing. Judged by a listener of the test's own: the notifications it receives
    before a marker sent afterwards are every one sent before it."""
    async with postgres_database() as db:
        name = channel(db.schema)

        def lay_out(conn: Connection) -> None:
            conn.execute("CREATE TABLE wake_parent (id INTEGER PRIMARY KEY)")
            conn.execute(
                "CREATE TABLE wake_child (parent INTEGER REFERENCES wake_parent"
                " DEFERRABLE INITIALLY DEFERRED)"
            )

        await db.write(lay_out)
        ran: list[str] = []

        def orphan(conn: Connection) -> None:  # its foreign key is checked at COMMIT only
            conn.execute("INSERT INTO wake_child VALUES (1)")
            ran.append("work")

        def committed(conn: Connection) -> None:
            conn.execute("INSERT INTO wake_parent VALUES (1)")

        with psycopg.connect(postgres_url(), autocommit=True) as listener:
            listener.execute(sql.SQL("LISTEN {}").format(sql.Identifier(name)))
            with pytest.raises(WriteFailed):
                await db.write(orphan, wake=True)
            assert ran  # its work ran, then its NOTIFY; the COMMIT failed
            await db.write(committed, wake=True)
            listener.execute("SELECT pg_notify(%s, 'marker')", (name,))
            received: list[str] = []
            for notify in listener.notifies(timeout=60):  # a bound for a failure
                received.append(notify.payload)
                if notify.payload == "marker":
                    break
        assert received == ["", "marker"]  # the committed write's, then the marker


async def test_a_work_function_knows_the_dialect_of_its_connection() -> None:
    async with postgres_database() as database:
        assert await database.read(dialect_of) == "postgresql"
    async with open_database(MEMORY) as sqlite:
        assert await sqlite.read(dialect_of) == "sqlite"


async def test_connections_carry_the_urls_application_name_or_effectagent() -> None:
    """Operators tell workers apart in pg_stat_activity by the application_name their URL gives;
    without one, the store's connections say effectagent."""

    def names(conn: Connection) -> set[str]:
        rows = conn.execute(
            "SELECT application_name FROM pg_stat_activity WHERE pid = pg_backend_pid()"
        ).fetchall()
        return {row[0] for row in rows}

    async with postgres_database() as database:
        assert await database.read(names) == {"effectagent"}
    named = f"{postgres_url()}&application_name=worker-7"
    schema = fresh_schema()
    try:
        async with open_postgres(named, schema=schema) as database:
            assert await database.read(names) == {"worker-7"}
    finally:
        drop_schema(schema)
