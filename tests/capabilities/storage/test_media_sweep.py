"""Media bytes nothing refers to are swept (``_sweep``), on SQLite and PostgreSQL: bytes put for
a record never appended, steering that expired or a durable submission aborted go once they
were put longer ago than the grace (or at an open that is alone, however recently), while bytes
a record, a queued steering input or a submission not settled refers to stay, and a put again
stamps them anew. Databases of the layout before ``put_at`` are upgraded in place, their rows
counted as put long ago."""

from __future__ import annotations

import math
import sqlite3
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, Final

import psycopg
import pytest
import trio
from hypothesis import example, given, settings
from hypothesis import strategies as st
from psycopg import sql

from capabilities.durable import DurableQueue
from capabilities.steering._parts import stored
from capabilities.storage import Connection, Database, SqliteConversationLog, _forget, sweep_media
from capabilities.storage._database import open_database
from capabilities.storage._layout import LAYOUT_VERSION
from capabilities.storage._postgres import open_postgres
from capabilities.storage._postgres_layout import LAYOUT_VERSION as PG_LAYOUT_VERSION
from capabilities.storage._sweep import (
    DEFAULT_GRACE,
    KEPT_FOR_RECORDS,
    examine_media,
    put_media_rows,
)
from effectagent.ai import ImagePart, TextContent
from effectagent.core import RunCompletedRecord, UserInputRecorded
from tests.capabilities.durable.helpers import Stores, stores
from tests.postgres import drop_schema, fresh_schema, postgres_url

PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(200))
POOL = [ImagePart(PNG + bytes([n]) * (n + 1), name=f"p{n}.png") for n in range(6)]
A, B, C, D = POOL[:4]


def _at(moment: float) -> Callable[[], float]:
    """A clock stopped at ``moment``."""
    return lambda: moment


def later(seconds: float) -> Callable[[], float]:
    """A clock ``seconds`` ahead of the wall clock."""
    return lambda: time.time() + seconds


async def _digests(db: Database) -> set[str]:
    return await db.read(lambda conn: {str(d) for (d,) in conn.execute("SELECT digest FROM media")})


async def _put_at(db: Database, digest: str) -> float:
    found = await db.read(
        lambda conn: conn.execute("SELECT put_at FROM media WHERE digest = ?", (digest,)).fetchone()
    )
    return float(found[0])


async def _put(db: Database, parts: Sequence[ImagePart], now: float) -> None:
    rows = [(p.digest, len(p.data), p.data) for p in parts]
    await db.write(lambda conn: put_media_rows(conn, rows, now=now))


def _input(
    conversation_id: str, parts: Sequence[ImagePart], text: str = "look", run: str = ""
) -> Any:
    return UserInputRecorded(
        conversation_id=conversation_id,
        run_id=f"run-{conversation_id}{run}",
        input_id=f"in-{conversation_id}{run}",
        kind="user",
        text=text,
        author="ann",
        at=1.0,
        parts=(("text", text), *(("media", p.reference()) for p in parts)),
    )


async def _record(
    log: SqliteConversationLog,
    conversation_id: str,
    parts: Sequence[ImagePart],
    text: str = "look",
    run: str = "",
) -> None:
    """A run's records whose input refers to ``parts`` (their bytes put before, as a run does)."""
    ended = RunCompletedRecord(
        conversation_id=conversation_id,
        run_id=f"run-{conversation_id}{run}",
        output="ok",
        finish_reason="stop",
        at=2.0,
    )
    await log.append(conversation_id, [_input(conversation_id, parts, text, run), ended])


async def _queue_steering(db: Database, input_id: str, parts: Sequence[ImagePart]) -> None:
    """A steering input waiting in the journal with media, as the journal admits one: its bytes
    put in the same transaction."""
    text, layout, blobs = stored((TextContent("look"), *parts), lambda s: s)
    rows = [(d, len(data), data) for d, data in blobs.items()]

    def work(conn: Connection) -> None:
        put_media_rows(conn, rows, now=time.time())
        conn.execute(
            "INSERT INTO steering_inputs (input_id, conversation_id, position, kind, text, "
            "author, at, status, seq, reason, epoch, parts) "
            "VALUES (?, 'steered', 1, 'steering', ?, 'ann', 1.0, 'queued', NULL, '', 1, ?)",
            (input_id, text, layout),
        )

    await db.write(work)


# ---- what is swept, what stays -------------------------------------------------------------------


async def test_bytes_nothing_refers_to_go_once_put_longer_ago_than_the_grace(store: Stores) -> None:
    async with store.open() as db:
        log = SqliteConversationLog(db)
        await log.put_media("c", {A.digest: A.data, B.digest: B.data})
        await _record(log, "c", [A])  # B: the run failed between its put and its append
        assert await sweep_media(db) == 0  # put just now: within the grace
        assert await sweep_media(db, grace=60.0, clock=later(59.0)) == 0
        assert await _digests(db) == {A.digest, B.digest}
        assert await sweep_media(db, grace=60.0, clock=later(61.0)) == 1
        assert await _digests(db) == {A.digest}
        assert await log.media([A.digest]) == {A.digest: A.data}
        assert await sweep_media(db, grace=0.0, clock=later(DEFAULT_GRACE * 10)) == 0


async def test_bytes_a_record_refers_to_are_examined_once_until_put_again(store: Stores) -> None:
    """A sweep reads the records for its candidates only: bytes found referred to by a record
    are marked and are no candidates again (an open that is alone examines what was put since,
    not the whole history) — until they are put again."""
    async with store.open() as db:
        log = SqliteConversationLog(db)
        await log.put_media("c", {A.digest: A.data})
        await _record(log, "c", [A])
        assert await sweep_media(db, grace=0.0, clock=later(1.0)) == 0
        assert await _put_at(db, A.digest) == KEPT_FOR_RECORDS
        soon = later(2.0)()
        nothing: tuple[set[str], set[str]] = (set(), set())
        assert await db.read(lambda conn: examine_media(conn, before=soon)) == nothing
        await log.put_media("d", {A.digest: A.data})  # put again (another input refers to it)
        found = await db.read(lambda conn: examine_media(conn, before=later(3.0)()))
        assert found == (set(), {A.digest})


async def test_bytes_put_unstamped_are_left_to_an_open_that_is_alone(store: Stores) -> None:
    """A process of an older version still running puts bytes without a time (``put_at`` 0):
    its record may be about to follow, so only an open that is alone — no such process left —
    sweeps them, never ``sweep_media``'s grace."""
    async with store.open() as db:
        await db.write(lambda conn: put_media_rows(conn, [(B.digest, len(B.data), B.data)], now=0))
        assert await sweep_media(db, grace=0.0, clock=later(DEFAULT_GRACE * 10)) == 0
        assert await _digests(db) == {B.digest}
    async with store.open() as db:
        assert db.alone
        assert db.recovered["media"] == 1
        assert await _digests(db) == set()


async def test_bytes_queued_steering_or_a_submission_not_settled_names_stay_until_it_ends(
    store: Stores,
) -> None:
    async with store.open() as db:
        await _queue_steering(db, "waiting", [A])
        queue = DurableQueue(db)
        receipt = await queue.submit(
            "looker", ["Again?", B], conversation_id="elsewhere", idempotency_key="k", principal="p"
        )
        assert await _digests(db) == {A.digest, B.digest}
        assert await sweep_media(db, clock=later(DEFAULT_GRACE * 2)) == 0
        await db.write(
            lambda conn: conn.execute(
                "UPDATE steering_inputs SET status = 'expired', text = NULL WHERE input_id = ?",
                ("waiting",),
            )
        )
        assert await sweep_media(db, clock=later(DEFAULT_GRACE * 2)) == 1
        assert await _digests(db) == {B.digest}
        settled = await queue.abort(receipt.submission_id, author="p", reason="not needed")
        assert settled.status == "aborted"
        assert await sweep_media(db, clock=later(DEFAULT_GRACE * 2)) == 1
        assert await _digests(db) == set()


async def test_a_record_that_does_not_decode_keeps_the_bytes_it_names_and_a_quote_does_not(
    store: Stores,
) -> None:
    """When in doubt, kept: a damaged record that holds a digest keeps its bytes. A record that
    decodes and merely quotes a digest in its text does not."""
    async with store.open() as db:
        log = SqliteConversationLog(db)
        await log.put_media("c", {A.digest: A.data, B.digest: B.data})
        await _record(log, "quoting", [], text=f"I sent {B.digest} earlier")
        await db.write(
            lambda conn: conn.execute(
                "INSERT INTO records VALUES ('damaged', 1, 'UserInputRecorded', 1, ?)",
                (f'{{"parts": "{A.digest}", "broken": true}}',),
            )
        )
        assert await sweep_media(db, clock=later(DEFAULT_GRACE * 2)) == 1
        assert await _digests(db) == {A.digest}


async def test_a_put_again_stamps_the_bytes_anew_and_never_back_in_time(store: Stores) -> None:
    async with store.open() as db:
        await _put(db, [A, B], now=100.0)  # long ago
        assert await _put_at(db, A.digest) == 100.0
        log = SqliteConversationLog(db)
        before = time.time()
        await log.put_media("c", {A.digest: A.data})  # for a new record, about to be appended
        assert await _put_at(db, A.digest) >= before
        await _put(db, [A], now=50.0)  # a machine whose clock is behind
        assert await _put_at(db, A.digest) >= before
        assert await sweep_media(db) == 1  # B only
        assert await _digests(db) == {A.digest}
        assert await log.media([A.digest]) == {A.digest: A.data}  # its bytes untouched


async def test_an_opener_alone_sweeps_however_recently_the_bytes_were_put(store: Stores) -> None:
    async with store.open() as db:
        log = SqliteConversationLog(db)
        await log.put_media("c", {A.digest: A.data, B.digest: B.data})
        await _record(log, "c", [A])
        await _queue_steering(db, "left", [C])  # its process ends: it expires at the next open
    async with store.open() as db:
        assert db.alone
        assert db.recovered["steering"] == 1
        assert db.recovered["media"] == 2  # B, and C with the steering that expired
        assert await _digests(db) == {A.digest}
        await _put(db, [D], now=time.time())
        async with store.open() as other:  # not alone: it sweeps nothing
            assert not other.alone
            assert other.recovered == {}
            assert await _digests(other) == {A.digest, D.digest}


async def test_many_digests_are_found_in_one_pass_over_the_records_page_by_page(
    store: Stores, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past ``FEW_DIGESTS`` candidates the records are read once, a page (of one record, here)
    at a time — within a conversation and across — with the same answers: a record refers, a
    damaged record holding the digest keeps it, a quote does not."""
    monkeypatch.setattr(_forget, "FEW_DIGESTS", 1)
    monkeypatch.setattr(_forget, "_PAGE", 1)
    async with store.open() as db:
        log = SqliteConversationLog(db)
        await log.put_media("c", {p.digest: p.data for p in POOL})
        for n, part in enumerate(POOL[:2]):  # two runs of one conversation
            await _record(log, "both", [part], run=str(n))
        await _record(log, "third", [POOL[2]])
        await _record(log, "quoting", [], text=f"see {POOL[3].digest}")
        await db.write(
            lambda conn: conn.execute(
                "INSERT INTO records VALUES ('damaged', 1, 'UserInputRecorded', 1, ?)",
                (f"[{POOL[4].digest!r}",),
            )
        )
        assert await sweep_media(db, clock=later(DEFAULT_GRACE * 2)) == 2  # 3 and 5
        assert await _digests(db) == {p.digest for p in POOL[:3]} | {POOL[4].digest}


async def test_the_grace_must_be_a_finite_number_of_seconds_not_below_zero() -> None:
    async with open_database(":memory:") as db:
        for grace in (-1.0, math.inf, math.nan):
            with pytest.raises(ValueError, match="grace"):
                await sweep_media(db, grace=grace)
        with pytest.raises(TypeError, match="grace"):
            await sweep_media(db, grace="60")  # type: ignore[arg-type]
        assert await sweep_media(db, grace=0) == 0


# ---- for any interleaving ------------------------------------------------------------------------

_OPS = st.lists(
    st.one_of(
        st.tuples(st.just("put"), st.integers(0, 2)),
        st.tuples(st.just("append"), st.integers(0, 2)),
        st.tuples(st.just("wait"), st.integers(0, 120)),
        st.tuples(st.just("sweep"), st.just(0)),
    ),
    max_size=24,
)


def _interleaving(store: Stores, ops: list[tuple[str, int]], grace: int, one_pass: bool) -> None:
    """Run ``ops`` on ``store`` (new: see the tests below), checking as it goes."""

    async def main() -> None:
        async with store.open() as db:
            log = SqliteConversationLog(db)
            now = 10_000.0
            last_put: dict[int, float] = {}
            referred: set[int] = set()
            for n, (op, value) in enumerate(ops):
                if op == "put":
                    await _put(db, [POOL[value]], now=now)
                    last_put[value] = now
                elif op == "append" and value in last_put and now - last_put[value] <= grace:
                    await _record(log, f"r{n}", [POOL[value]])
                    referred.add(value)
                elif op == "wait":
                    now += value
                elif op == "sweep":
                    await sweep_media(db, grace=grace, clock=_at(now))
                    expected = {
                        i for i, at in last_put.items() if i in referred or at >= now - grace
                    }
                    assert await _digests(db) == {POOL[i].digest for i in expected}
                assert {POOL[i].digest for i in referred} <= await _digests(db)

    with pytest.MonkeyPatch.context() as patch:
        if one_pass:
            patch.setattr(_forget, "FEW_DIGESTS", 0)
            patch.setattr(_forget, "_PAGE", 1)
        trio.run(main)


#: Put again past the grace, then swept and appended to within the grace of the second put.
_PUT_AGAIN: Final = [("put", 0), ("wait", 100), ("put", 0), ("wait", 50), ("sweep", 0)]


@settings(max_examples=80, deadline=None)
@given(ops=_OPS, grace=st.integers(1, 60), one_pass=st.booleans())
@example(ops=[*_PUT_AGAIN, ("append", 0)], grace=60, one_pass=False)
def test_no_record_appended_within_the_grace_of_its_put_ever_misses_its_bytes(
    ops: list[tuple[str, int]], grace: int, one_pass: bool
) -> None:
    """For any interleaving of puts, appends that refer to bytes put at most ``grace`` seconds
    before, waits and sweeps with that grace: every record appended has its bytes, and after
    each sweep the table holds exactly the bytes referred to or put within the grace (SQLite;
    PostgreSQL below, with fewer examples)."""
    with tempfile.TemporaryDirectory() as directory, stores("sqlite", Path(directory)) as made:
        _interleaving(made, ops, grace, one_pass)


@settings(max_examples=20, deadline=None)
@given(ops=_OPS, grace=st.integers(1, 60), one_pass=st.booleans())
@example(ops=[*_PUT_AGAIN, ("append", 0)], grace=60, one_pass=True)
def test_no_record_appended_within_the_grace_of_its_put_misses_its_bytes_on_postgresql(
    ops: list[tuple[str, int]], grace: int, one_pass: bool
) -> None:
    """The same on PostgreSQL (a schema per example: a layout each, so fewer)."""
    with stores("postgresql", Path(".")) as made:
        _interleaving(made, ops, grace, one_pass)


# ---- layouts before ``put_at`` -------------------------------------------------------------------


def _sqlite_schema(path: Path) -> dict[str, str]:
    conn = sqlite3.connect(path)
    try:
        return dict(conn.execute("SELECT name, sql FROM sqlite_master WHERE sql NOT NULL"))
    finally:
        conn.close()


async def test_a_layout_5_file_is_upgraded_its_bytes_put_long_ago(tmp_path: Path) -> None:
    path, fresh = tmp_path / "v5.db", tmp_path / "fresh.db"
    async with open_database(path) as db:
        log = SqliteConversationLog(db)
        await log.put_media("c", {A.digest: A.data, B.digest: B.data})
        await _record(log, "c", [A])
    conn = sqlite3.connect(path, isolation_level=None)
    try:  # as layout 5 left it
        conn.execute("DROP INDEX media_by_put_at")
        conn.execute("ALTER TABLE media DROP COLUMN put_at")
        conn.execute("PRAGMA user_version = 5")
    finally:
        conn.close()
    assert LAYOUT_VERSION == 6
    async with open_database(path) as db:
        assert db.recovered["media"] == 1  # B: nothing refers to it
        assert await _digests(db) == {A.digest}
        assert await _put_at(db, A.digest) == KEPT_FOR_RECORDS  # put long ago; a record's
        assert await sweep_media(db) == 0  # A: a record refers to it
    async with open_database(fresh):
        pass
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("PRAGMA user_version").fetchone() == (LAYOUT_VERSION,)
    finally:
        conn.close()
    upgraded, made = _sqlite_schema(path), _sqlite_schema(fresh)
    assert upgraded["media"] == made["media"]
    assert upgraded["media_by_put_at"] == made["media_by_put_at"]


def _pg(schema: str) -> psycopg.Connection[Any]:
    conn = psycopg.connect(postgres_url(), autocommit=True)
    conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(schema)))
    return conn


def _pg_media(schema: str) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    """The media table's columns (name, type, default) and its indexes' definitions."""
    with _pg(schema) as conn:
        columns = conn.execute(
            "SELECT column_name, data_type, is_nullable, column_default "
            "FROM information_schema.columns WHERE table_schema = %s AND table_name = 'media' "
            "ORDER BY ordinal_position",
            (schema,),
        ).fetchall()
        indexes = conn.execute(
            "SELECT indexname, replace(indexdef, %s, 'S') FROM pg_indexes "
            "WHERE schemaname = %s AND tablename = 'media' ORDER BY indexname",
            (schema, schema),
        ).fetchall()
    return columns, indexes


@pytest.fixture
def schemas() -> Iterator[tuple[str, str]]:
    """Two fresh schema names, dropped after the test."""
    names = (fresh_schema(), fresh_schema())
    try:
        yield names
    finally:
        for name in names:
            drop_schema(name)


async def test_a_layout_1_schema_is_upgraded_in_place_its_bytes_put_long_ago(
    schemas: tuple[str, str],
) -> None:
    schema, fresh = schemas
    url = postgres_url()
    async with open_postgres(url, schema=schema) as db:
        log = SqliteConversationLog(db)
        await log.put_media("c", {A.digest: A.data, B.digest: B.data})
        await _record(log, "c", [A])
    with _pg(schema) as conn:  # as layout 1 left it
        conn.execute("DROP INDEX media_by_put_at")
        conn.execute("ALTER TABLE media DROP COLUMN put_at")
        conn.execute("DROP TABLE live_key")
        conn.execute("UPDATE effectagent_layout SET version = 1")
    assert PG_LAYOUT_VERSION == 2
    async with open_postgres(url, schema=schema) as db:
        assert db.recovered["media"] == 1  # B: nothing refers to it
        assert await _digests(db) == {A.digest}
        assert await _put_at(db, A.digest) == KEPT_FOR_RECORDS  # put long ago; a record's
        assert await sweep_media(db) == 0
        (key,) = await db.read(lambda conn: conn.execute("SELECT key FROM live_key").fetchall())
        assert len(bytes(key[0])) == 32  # live text's key, made by the upgrade
    async with open_postgres(url, schema=fresh):
        pass
    with _pg(schema) as conn:
        assert conn.execute("SELECT version FROM effectagent_layout").fetchall() == [(2,)]
    assert _pg_media(schema) == _pg_media(fresh)
