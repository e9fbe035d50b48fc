"""Full-text search over what was said (layout version 3, ``_search``): an append never writes the
index; a search sees exactly the messages the log holds — after any appends, deletions, rewrites
and catch-ups, after a kill, and after a refused write — and once caught up the index alone holds
them; a word searched for is matched literally (never FTS5 syntax), every word must be there, any
case, newest first, bounded; a version 2 file written by the version 2 code is upgraded on opening
(indexing nothing) and searchable; a search answers while another process keeps the write lock."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest
import trio
from hypothesis import example, given
from hypothesis import strategies as st

from capabilities.cli._history import holds, said_in, tokens
from capabilities.storage import Connection, _layout, _log, _recovery
from capabilities.storage._busy import BusyPolicy
from capabilities.storage._codec import RecordCodec
from capabilities.storage._database import open_database
from capabilities.storage._layout import prepare
from capabilities.storage._log import SqliteConversationLog, write_records
from capabilities.storage._search import (
    QUICK_TAIL,
    behind,
    catch_up,
    find_said,
    match_expression,
    searchable,
    unindexed,
)
from effectagent.core import (
    ConversationCreated,
    LogEntry,
    ModelResponseRecorded,
    Record,
    UsageDelta,
    UserInputRecorded,
)
from tests.capabilities.durable.helpers import Stores

from .test_kill import _run_until

CODEC = RecordCodec()

#: Pieces of text: words in either case, accents, digits, and everything FTS5 would read as
#: syntax if it were given the text unquoted.
PIECES = st.sampled_from(
    ["oslo", "OSLO", "Rome", "café", "CAFÉ", "e-mail", "e", "mail", "42", "x_y", "OR", "AND",
     "NOT", "NEAR", "NEAR(", "(", ")", '"', '""', "*", "oslo*", "-", "-rome", "^oslo", "+",
     "text:", "said:oslo", ":", ",", ".", "{", "}", "\n", "\t", " "]
)  # fmt: skip
TEXTS = st.lists(PIECES, max_size=8).map(" ".join)
WORDS = st.lists(PIECES.filter(lambda p: p.strip() != ""), min_size=1, max_size=3)


def _connection() -> sqlite3.Connection:
    conn = sqlite3.connect(":memory:", isolation_level=None)
    prepare(conn, ":memory:")
    return conn


def user(conversation: str, text: str, kind: Any = "user", at: float = 1.0) -> UserInputRecorded:
    return UserInputRecorded(
        conversation_id=conversation,
        run_id="r",
        input_id="i",
        kind=kind,
        text=text,
        author="a",
        at=at,
    )


def answer(conversation: str, *parts: tuple[str, Any], at: float = 1.0) -> ModelResponseRecorded:
    return ModelResponseRecorded(
        conversation_id=conversation,
        run_id="r",
        turn=1,
        content=parts,
        finish_reason="stop",
        usage=UsageDelta(),
        at=at,
    )


def _append(conn: Connection, conversation: str, records: list[Record]) -> None:
    conn.execute("BEGIN IMMEDIATE")
    write_records(conn, conversation, [CODEC.encode(record) for record in records])
    conn.execute("COMMIT")


def _expected(conn: Connection) -> list[tuple[Any, ...]]:
    """The messages of the log's readable records, as ``said`` rows (no ``rowid``), sorted."""
    expected = []
    stored = conn.execute(
        "SELECT conversation_id, seq, type, version, body FROM records"
    ).fetchall()
    for conversation, seq, tag, version, body in stored:
        try:
            record = CODEC.decode(conversation, seq, tag, version, body)
        except Exception:
            continue  # an unreadable body is left out of the index
        for message in said_in([LogEntry(seq, record)]):
            expected.append((conversation, *message))
    return sorted(expected)


def _seen(conn: Connection) -> None:
    """Without writing: the index holds only messages the log holds (each as the log holds it
    now), and the index with the messages appended since it was caught up — what a search
    matches — is every message of the log."""
    expected = _expected(conn)
    indexed = conn.execute("SELECT conversation_id, seq, who, at, text FROM said").fetchall()
    assert set(indexed) <= set(expected)
    tail, beyond = unindexed(conn, 10_000)
    assert beyond == 0
    assert sorted(indexed + tail) == expected


def _caught_up(conn: Connection) -> None:
    conn.execute("BEGIN IMMEDIATE")
    catch_up(conn)
    conn.execute("COMMIT")


def _agrees(conn: Connection) -> None:
    """After a catch-up the index holds exactly what the log says was said: the ``said`` rows
    are the messages of the readable records, every conversation's mark is its last record,
    and the FTS index's every word instance is a word of those rows."""
    _seen(conn)
    _caught_up(conn)
    assert behind(conn) == []
    rows = conn.execute("SELECT rowid, conversation_id, seq, who, at, text FROM said").fetchall()
    assert sorted(row[1:] for row in rows) == _expected(conn)
    conn.execute("CREATE VIRTUAL TABLE IF NOT EXISTS temp.words USING fts5vocab(main, said_index, instance)")  # fmt: skip
    indexed = sorted(conn.execute("SELECT doc, term, offset FROM temp.words"))
    wanted = sorted(
        (rowid, word, offset)
        for rowid, *_, text in rows
        for offset, word in enumerate(tokens(text))
    )
    assert indexed == wanted


RECORDS = st.one_of(
    st.builds(
        user,
        st.sampled_from(["a", "b"]),
        TEXTS,
        st.sampled_from(["user", "steering", "follow-up", "feedback"]),
    ),
    st.builds(
        lambda c, parts: answer(c, *parts),
        st.sampled_from(["a", "b"]),
        st.lists(
            st.one_of(
                st.tuples(st.sampled_from(["text", "reasoning"]), TEXTS),
                st.just(("tool-call", {"id": "t", "name": "oslo", "arguments": {"q": "oslo"}})),
            ),
            max_size=4,
        ),
    ),
    st.builds(ConversationCreated, conversation_id=st.just("a"), agent=st.just("oslo"), at=st.just(1.0)),
)  # fmt: skip

OPERATIONS = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.lists(RECORDS, min_size=1, max_size=3)),
        st.tuples(st.just("delete"), st.integers(0, 20)),
        st.tuples(st.just("rewrite"), st.integers(0, 20), RECORDS),
        st.tuples(st.just("corrupt"), st.integers(0, 20)),
        st.tuples(st.just("search")),
    ),
    max_size=12,
)


@given(OPERATIONS)
@example(  # the newest record of a conversation deleted after a search, and its seq written again
    [
        ("append", [user("a", "oslo")]),
        ("search",),
        ("delete", 0),
        ("append", [user("a", "rome")]),
    ]
)
@example(  # a record rewritten after a search, then the next one
    [
        ("append", [user("a", "oslo"), user("a", "rome")]),
        ("search",),
        ("rewrite", 0, user("a", "bergen")),
        ("append", [user("a", "paris")]),
        ("search",),
    ]
)
def test_the_index_agrees_with_the_log_whatever_is_appended_deleted_or_rewritten(
    operations: list[Any],
) -> None:
    """Whatever happens between searches (a search catches the index up), a search sees the
    log's messages, and after one the index holds exactly them."""
    conn = _connection()
    try:
        for operation in operations:
            kind = operation[0]
            if kind == "append":
                records = operation[1]
                _append(conn, records[0].conversation_id, records)
                _seen(conn)
                continue
            if kind == "search":
                _agrees(conn)
                continue
            rows = conn.execute("SELECT conversation_id, seq FROM records ORDER BY 1, 2").fetchall()
            if not rows:
                continue
            where = rows[operation[1] % len(rows)]
            if kind == "delete":
                conn.execute("DELETE FROM records WHERE conversation_id = ? AND seq = ?", where)
            elif kind == "rewrite":
                tag, version, body, _ = CODEC.encode(operation[2])
                conn.execute(
                    "UPDATE records SET type = ?, version = ?, body = ? "
                    "WHERE conversation_id = ? AND seq = ?",
                    (tag, version, body, *where),
                )
            else:
                conn.execute(
                    "UPDATE records SET body = '{not json' WHERE conversation_id = ? AND seq = ?",
                    where,
                )
            _seen(conn)
        _agrees(conn)
    finally:
        conn.close()


@given(st.lists(TEXTS, min_size=1, max_size=5), WORDS)
def test_every_word_is_matched_as_written_never_as_query_syntax(
    texts: list[str], words: list[str]
) -> None:
    """The index finds a message exactly when every word is in it as whole words (any case):
    what the pure :func:`holds` says — whatever the words hold (quotes, OR, NEAR(, *, -, col:)."""
    conn = _connection()
    try:
        for number, text in enumerate(texts):
            _append(conn, f"c{number}", [user(f"c{number}", text)])
        unindexed = {said.conversation_id for said in find_said(conn, words, limit=100).said}
        _caught_up(conn)
        found = {said.conversation_id for said in find_said(conn, words, limit=100).said}
        assert unindexed == found  # matched without the index (not yet caught up) as with it
        if match_expression(words) is None:
            assert not any(map(searchable, words))
            assert found == set()
        else:
            assert found == {f"c{n}" for n, text in enumerate(texts) if text and holds(text, words)}
    finally:
        conn.close()


def test_the_query_quotes_each_word_and_needs_all_of_them() -> None:
    assert match_expression(["foo", "OR", "bar"]) == '"foo" AND "OR" AND "bar"'
    assert match_expression(['say "hi"']) == '"say ""hi"""'
    assert match_expression(["NEAR(", "*"]) == '"NEAR("'  # "*" alone is no word: left out
    assert match_expression(["-", '"', ":"]) is None
    conn = _connection()
    try:
        _append(
            conn, "c", [user("c", "foo and bar"), user("c", "just foo"), user("c", "foo OR bar")]
        )
        assert [s.seq for s in find_said(conn, ["foo", "OR", "bar"], 10).said] == [3]
        assert [s.seq for s in find_said(conn, ["FOO"], 10).said] == [3, 2, 1]  # newest first
        assert [s.seq for s in find_said(conn, ["foo"], 2).said] == [3, 2]  # bounded
        assert find_said(conn, ["fo"], 10).said == ()  # whole words only
        _append(conn, "d", [user("d", "Un CAFÉ, Oslofjord")])
        assert [s.text for s in find_said(conn, ["café"], 10).said] == ["Un CAFÉ, Oslofjord"]
        assert find_said(conn, ["cafe"], 10).said == ()  # accents count
        assert find_said(conn, ["oslo"], 10).said == ()
        assert find_said(conn, ["said_index:foo"], 10).said == ()  # no column filter
    finally:
        conn.close()


async def test_the_log_searches_what_was_said_not_tool_output_nor_reasoning() -> None:
    async with open_database(":memory:") as database:
        log = SqliteConversationLog(database, fence=lambda conn, conversation: None)
        await log.append("a", [ConversationCreated(conversation_id="a", agent="oslo", at=1.0)])
        await log.append("a", [user("a", "Trip to Oslo?", at=2.0)])
        await log.append(
            "a",
            [
                answer(
                    "a",
                    ("reasoning", "Oslo is far north"),
                    ("tool-call", {"id": "t", "name": "oslo", "arguments": {}}),
                    ("text", "Oslo is cold; "),
                    ("text", "pack a coat."),
                    at=3.0,
                )
            ],
        )
        await log.append(
            "b", [user("b", "oslo", kind="feedback", at=4.0), user("b", "oslo", "steering", at=4.0)]
        )
        found = await log.search(["oslo"], limit=10)
        assert [(s.conversation_id, s.seq, s.who, s.text) for s in found.said] == [
            ("b", 2, "steering", "oslo"),
            ("a", 3, "assistant", "Oslo is cold; pack a coat."),
            ("a", 2, "user", "Trip to Oslo?"),
        ]
        assert found.conversations == 2
        assert (await log.search(["north"], limit=10)).said == ()  # reasoning
        assert (await log.search(["cold", "coat"], limit=10)).said[0].at == 3.0
        assert (await log.search(["...", "?"], limit=10)).said == ()


async def test_a_message_holding_a_lone_surrogate_is_found_as_the_log_holds_it() -> None:
    """A message holding a lone surrogate (a run's prompt may: records are JSON): SQLite's JSON
    functions give its text as bytes that are not UTF-8, and every search that matched it —
    before and after the index caught up — failed with ``ReadFailed``. It is found, its text as
    the log holds it, in the records appended since the catch-up and in the index alike."""
    text = "walrus a\ud800b zebra"
    async with open_database(":memory:") as database:
        log = SqliteConversationLog(database, fence=lambda conn, conversation: None)
        await log.append("a", [user("a", text, at=1.0)])
        for _ in range(2):  # the first finds it among the new records, the second in the index
            found = await log.search(["zebra"], limit=10)
            assert [(s.conversation_id, s.text) for s in found.said] == [("a", text)]
            assert await database.read(lambda conn: unindexed(conn, 10)) == ([], 0)
        await log.append("a", [answer("a", ("text", "a\udfffb walrus"), at=2.0)])
        found = await log.search(["walrus"], limit=10)
        assert [s.text for s in found.said] == ["a\udfffb walrus", text]


@pytest.mark.parametrize(
    ("words", "limit", "error", "message"),
    [
        ("oslo", 10, TypeError, "words must be a sequence of str"),  # not letter by letter
        (b"oslo", 10, TypeError, "words must be a sequence of str"),
        ([3], 10, TypeError, "each of words must be a str, got int"),
        (["oslo"], 0, ValueError, "limit must be at least 1, got 0"),
        (["oslo"], -1, ValueError, "limit must be at least 1, got -1"),
        (["oslo"], 2.0, TypeError, "limit must be an int, got float"),
    ],
)
async def test_a_search_refuses_words_or_a_limit_it_cannot_honour(
    words: Any, limit: Any, error: type[Exception], message: str
) -> None:
    """A lone string would be searched letter by letter, and a limit below 1 would find nothing:
    both are refused, as the session store's listing refuses its limit, before anything is read."""
    async with open_database(":memory:") as database:
        log = SqliteConversationLog(database, fence=lambda conn, conversation: None)
        await log.append("a", [user("a", "Trip to Oslo?", at=2.0)])
        with pytest.raises(error, match=message):
            await log.search(words, limit=limit)
        assert len((await log.search(("oslo",), limit=1)).said) == 1


@pytest.mark.parametrize("limit", [2**63 - 1, 2**63, 10**30])
async def test_a_limit_beyond_what_a_database_counts_is_taken_as_no_limit(
    store: Stores, limit: int
) -> None:
    """``limit=10**30`` was a bare ``OverflowError`` (SQLite's integers end at 2**63 - 1): a
    limit above that is clamped to it, which no log holds as many messages as."""
    async with store.open() as database:
        log = SqliteConversationLog(database, fence=lambda conn, conversation: None)
        await log.append("a", [user("a", "Trip to Oslo?", at=2.0), user("a", "Oslo!", at=3.0)])
        found = await log.search(["oslo"], limit=limit)
        assert [said.text for said in found.said] == ["Oslo!", "Trip to Oslo?"]
        assert _log.SEARCH_LIMIT_MOST == 2**63 - 1


@pytest.mark.parametrize(
    "words",
    [["oslo"] * 8_000, ["a b c " * 5_000], ["oslo"] * 500 + ["e-mail"] * 251],
    ids=["many-words", "one-long-phrase", "parts-count"],
)
async def test_a_search_of_more_words_than_it_takes_is_refused_alike(
    store: Stores, words: list[str]
) -> None:
    """PostgreSQL failed a search of some thousands of words ("stack depth limit exceeded", a
    ``ReadFailed``) that SQLite answered: more than 1,000 — ``e-mail`` counting as two — are
    refused on both, before anything is read; 1,000 are searched."""
    async with store.open() as database:
        log = SqliteConversationLog(database, fence=lambda conn, conversation: None)
        await log.append("a", [user("a", "Trip to Oslo?", at=2.0)])
        with pytest.raises(ValueError, match=r"^a search takes at most 1000 words"):
            await log.search(words, limit=5)
        found = await log.search(["oslo"] * 999 + ["...", "TRIP"], limit=5)
        assert [said.text for said in found.said] == ["Trip to Oslo?"]


async def test_a_write_that_is_refused_indexes_nothing() -> None:
    async with open_database(":memory:") as database:
        log = SqliteConversationLog(database)

        def refused(conn: Connection) -> None:
            write_records(conn, "a", [CODEC.encode(user("a", "never said"))])
            raise RuntimeError("refused after writing")

        with pytest.raises(RuntimeError):
            await database.write(refused)
        assert (await log.search(["said"], limit=10)).said == ()
        assert await database.read(lambda c: c.execute("SELECT count(*) FROM said").fetchone()) == (
            0,
        )


def test_after_a_kill_the_index_holds_exactly_what_the_log_holds(tmp_path: Path) -> None:
    path = tmp_path / "killed.db"
    _run_until(path, 200)
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        _agrees(conn)
        (records,) = conn.execute("SELECT count(*) FROM records").fetchone()
        assert records >= 200
        assert len(find_said(conn, ["x" * 200], limit=records + 1).said) == records
    finally:
        conn.close()


async def test_a_version_2_file_written_by_the_version_2_code_is_upgraded_and_searchable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "v2.db"
    with monkeypatch.context() as patch:  # this code as it was at layout version 2
        patch.setattr(_layout, "LAYOUT_VERSION", 2)
        patch.delitem(_layout.UPGRADES, 2)
        patch.setattr(_recovery, "sweep_unreferenced", lambda conn, before: 0)  # no media yet
        async with open_database(path) as database:
            log = SqliteConversationLog(database, fence=lambda conn, conversation: None)
            await log.append("old", [user("old", "The first trip to Oslo", at=5.0)])
            await log.append("new", [user("new", "Another trip to Oslo", at=9.0)])
            await log.append("old", [answer("old", ("text", "Oslo, in winter?"), at=7.0)])
            tables = await database.read(
                lambda c: [row[0] for row in c.execute("SELECT name FROM sqlite_master")]
            )
            assert "said" not in tables
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA user_version").fetchone() == (2,)
    conn.close()

    async with open_database(path) as database:
        log = SqliteConversationLog(database, fence=lambda conn, conversation: None)
        assert (await database.read(_index_size))[:2] == (0, 0)  # the upgrade indexed nothing
        found = await log.search(["oslo"], limit=10)
        # Those indexed by the first search are ordered by when they were said.
        assert [s.text for s in found.said] == [
            "Another trip to Oslo",
            "Oslo, in winter?",
            "The first trip to Oslo",
        ]
        await log.append("old", [user("old", "Back from Oslo", at=1.0)])  # then as written
        assert (await log.search(["oslo"], limit=1)).said[0].text == "Back from Oslo"
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("PRAGMA user_version").fetchone() == (_layout.LAYOUT_VERSION,)
        _agrees(conn)
    finally:
        conn.close()


def _index_size(conn: Connection) -> tuple[int, ...]:
    """The rows of the index's every table (its messages, marks, and FTS5 segments)."""
    return tuple(
        conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
        for table in ("said", "said_marks", "said_index_data", "said_index_docsize")
    )


@pytest.mark.parametrize("quick_tail", [QUICK_TAIL, 0])
async def test_an_append_never_writes_the_index_a_search_brings_it_up_to_date(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, quick_tail: int
) -> None:
    """(``quick_tail`` 0: every search that meets new records catches the index up first.)"""
    monkeypatch.setattr(_log, "QUICK_TAIL", quick_tail)
    path = tmp_path / "lazy.db"
    async with open_database(path) as database:
        log = SqliteConversationLog(database, fence=lambda conn, conversation: None)
        empty = await database.read(_index_size)
        for number in range(5):
            await log.append(f"c{number}", [user(f"c{number}", f"Oslo trip {number}")])
            await log.append(f"c{number}", [answer(f"c{number}", ("text", "Oslo, then."))])
        assert await database.read(_index_size) == empty  # five runs in, nothing indexed
        triggers = await database.read(
            lambda conn: conn.execute(
                "SELECT sql FROM sqlite_master WHERE type = 'trigger' AND tbl_name = 'records'"
            ).fetchall()
        )
        assert triggers  # deletions and rewrites only
        assert not any("INSERT ON" in sql.upper() for (sql,) in triggers)

        found = await log.search(["oslo"], limit=100)
        assert len(found.said) == 10
        assert found.conversations == 5
        assert (await database.read(_index_size))[:2] == (10, 5)  # indexed, marks at the ends
        assert await database.read(behind) == []

        await log.append("c0", [user("c0", "Back from Oslo")])
        caught = await database.read(_index_size)
        assert caught[:2] == (10, 5)
        assert [s.text for s in (await log.search(["back"], limit=10)).said] == ["Back from Oslo"]
        assert (await database.read(_index_size))[:2] == (11, 5)
        again = await database.read(_index_size)
        await log.search(["oslo"], limit=10)  # nothing new: nothing written
        assert await database.read(_index_size) == again


async def test_a_search_answers_while_another_process_keeps_the_write_lock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The index cannot be brought up to date (the lock stays busy past the bound): the search
    matches the messages appended since the last one in memory, writes nothing, and says how
    many it left out beyond its bound."""
    path = tmp_path / "shared.db"
    async with open_database(path, busy=BusyPolicy(bound=0.05)) as database:
        log = SqliteConversationLog(database, fence=lambda conn, conversation: None)
        await log.append("a", [user("a", "indexed before", at=1.0)])
        await log.search(["indexed"], limit=10)
        await log.append("a", [user("a", "written before", at=2.0)])
        await log.append("b", [user("b", "written before too", at=3.0)])
        other = sqlite3.connect(path, isolation_level=None)  # another writer, mid-transaction
        try:
            other.execute("BEGIN IMMEDIATE")
            write_records(other, "a", [CODEC.encode(user("a", "written before, not committed"))])
            with trio.fail_after(30):
                found = await log.search(["before"], limit=10)
            assert [s.text for s in found.said] == [
                "written before too",
                "written before",
                "indexed before",
            ]
            assert (found.conversations, found.unsearched) == (2, 0)
            assert (await database.read(_index_size))[:2] == (1, 1)  # nothing written
            with monkeypatch.context() as patch:  # too much waiting to match before catching up
                patch.setattr(_log, "QUICK_TAIL", 0)
                assert await log.search(["before"], limit=10) == found
            bounded = await database.read(lambda conn: find_said(conn, ["before"], 10, 1))
            assert [s.text for s in bounded.said] == ["written before too", "indexed before"]
            assert bounded.unsearched == 1
            other.execute("COMMIT")
        finally:
            other.close()
        assert len((await log.search(["written"], limit=10)).said) == 3
        assert (await database.read(_index_size))[:2] == (4, 2)


async def test_a_search_reads_while_another_process_holds_the_write_lock(tmp_path: Path) -> None:
    path = tmp_path / "shared.db"
    async with open_database(path, busy=BusyPolicy(bound=0.05)) as database:
        log = SqliteConversationLog(database, fence=lambda conn, conversation: None)
        await log.append("a", [user("a", "written before")])
        other = sqlite3.connect(path, isolation_level=None)  # another writer, mid-transaction
        try:
            other.execute("BEGIN IMMEDIATE")
            write_records(other, "a", [CODEC.encode(user("a", "written before, not committed"))])
            with trio.fail_after(30):
                found = await log.search(["written", "before"], limit=10)
            assert [s.text for s in found.said] == ["written before"]
            other.execute("COMMIT")
        finally:
            other.close()
        assert len((await log.search(["written"], limit=10)).said) == 2
