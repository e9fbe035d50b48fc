"""Full-text search over what was said, on PostgreSQL (``_search_postgres``), on the test cluster:
the messages it searches are those the SQLite search does (what a person said, the model's text;
never tool output, reasoning or feedback); every word must be there, as whole words, any case,
matched as written whatever it holds (never ``tsquery`` syntax); the last said first, bounded;
the index follows deletions and rewrites, and a body that is not JSON is left out without failing
its append; and, for all conversations and searches, what it finds is what a plain-Python
reading of the log says it should, and what the SQLite search finds in the same records."""

from __future__ import annotations

import sqlite3
import unicodedata
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import trio
from hypothesis import example, given, settings
from hypothesis import strategies as st

from capabilities.cli._history import holds, said_in
from capabilities.storage import Connection
from capabilities.storage._codec import RecordCodec
from capabilities.storage._layout import prepare
from capabilities.storage._log import SqliteConversationLog
from capabilities.storage._postgres import PostgresDatabase
from capabilities.storage._search import Said, SaidFound, find_said, searchable
from capabilities.storage._search_postgres import (
    _CONVERSATIONS,
    _FIND,
    _MORE_WORD_CHARACTERS,
    SEARCH_DDL,
    find_said_pg,
)
from effectagent.core import ConversationCreated, LogEntry, Record
from tests.postgres import postgres_database

from ..conftest import EXAMPLES
from .test_search import PIECES, answer, user

CODEC = RecordCodec()
R = TypeVar("R")


@asynccontextmanager
async def searched() -> AsyncIterator[tuple[PostgresDatabase, SqliteConversationLog]]:
    """A fresh schema laid out with the search, and a log on it (appends without lanes)."""
    async with postgres_database() as database:  # the search is part of the layout
        yield database, SqliteConversationLog(database, fence=lambda conn, conversation: None)


def search(database: PostgresDatabase, words: list[str], limit: int = 10) -> Awaitable[SaidFound]:
    return database.read(lambda conn: find_said_pg(conn, words, limit))


def test_the_word_class_is_the_sqlite_one() -> None:
    """ICU's ``[:alnum:]`` (letters, decimal digits) and the listed ranges are exactly the
    characters :func:`searchable` makes words of (of those Python's Unicode knows)."""
    listed: set[int] = set()
    for piece in _MORE_WORD_CHARACTERS.split():
        first, _, last = piece.partition("-")
        listed.update(range(int(first, 16), int(last or first, 16) + 1))
    for point in range(0x110000):
        category = unicodedata.category(chr(point))
        if category in ("Cs", "Cn"):  # a surrogate; unassigned in this Python's Unicode
            continue
        ours = category[0] == "L" or category == "Nd" or point in listed
        assert ours == searchable(chr(point)), hex(point)


async def test_it_searches_what_was_said_not_tool_output_nor_reasoning() -> None:
    async with searched() as (database, log):
        await log.append("a", [ConversationCreated(conversation_id="a", agent="oslo", at=1.0)])
        await log.append("a", [user("a", "Trip to Oslo?", at=2.0)])
        await log.append(
            "a",
            [
                answer(
                    "a",
                    ("reasoning", "Oslo is far north"),
                    ("tool-call", {"id": "t", "name": "oslo", "arguments": {"q": "oslo"}}),
                    ("text", "Oslo is cold; "),
                    ("text", "pack a coat."),
                    at=3.0,
                )
            ],
        )
        await log.append(
            "b", [user("b", "oslo", kind="feedback", at=4.0), user("b", "oslo", "steering", at=4.0)]
        )
        await log.append("c", [user("c", "north", kind="feedback", at=5.0)])
        found = await search(database, ["oslo"])
        assert [(s.conversation_id, s.seq, s.who, s.at, s.text) for s in found.said] == [
            ("b", 2, "steering", 4.0, "oslo"),
            ("a", 3, "assistant", 3.0, "Oslo is cold; pack a coat."),
            ("a", 2, "user", 2.0, "Trip to Oslo?"),
        ]
        assert found.conversations == 2  # c holds no message
        assert found.unsearched == 0
        assert (await search(database, ["north"])).said == ()  # reasoning, feedback
        assert (await search(database, ["cold", "coat"])).said[0].at == 3.0
        assert (await search(database, ["...", "?"])).said == ()
        assert (await search(database, ["oslo"], limit=0)).said == ()


async def test_every_word_whole_any_case_as_written_newest_first_bounded() -> None:
    async with searched() as (database, log):
        await log.append(
            "c",
            [
                user("c", "foo and bar", at=1.0),
                user("c", "just foo", at=2.0),
                user("c", "foo OR bar", at=3.0),
            ],
        )

        async def seqs(words: list[str], limit: int = 10) -> list[int]:
            return [s.seq for s in (await search(database, words, limit)).said]

        assert await seqs(["foo", "OR", "bar"]) == [3]  # every word, OR a word
        assert await seqs(["FOO"]) == [3, 2, 1]  # any case, newest first
        assert await seqs(["foo"], 2) == [3, 2]  # bounded
        assert await seqs(["fo"]) == []  # whole words only
        assert await seqs(["foo|just"]) == []  # never tsquery syntax: foo then just
        assert await seqs(["just|foo"]) == [2]
        assert await seqs(["!foo", "(bar)"]) == [3, 1]
        assert await seqs(["foo:*"]) == [3, 2, 1]
        assert await seqs(["bar<->foo"]) == []
        await log.append("d", [user("d", "Un CAFÉ, Oslofjord. it's a\\b e-mail", at=4.0)])
        assert [s.text for s in (await search(database, ["café"])).said] == [
            "Un CAFÉ, Oslofjord. it's a\\b e-mail"
        ]
        assert await seqs(["cafe"]) == []  # accents count
        assert await seqs(["oslo"]) == []
        assert await seqs(["it's", "'s"]) == [1]
        assert await seqs(["a\\b", "E.MAIL"]) == [1]
        assert await seqs(["b\\a"]) == []
        assert await seqs(["'", "\\", "&", "<->"]) == []  # no word at all: nothing
        await log.append("e", [user("e", "tie one", at=9.0), user("e", "tie two", at=9.0)])
        await log.append("f", [user("f", "tie three", at=9.0)])
        ties = [(s.conversation_id, s.seq) for s in (await search(database, ["tie"])).said]
        assert ties == [("f", 1), ("e", 2), ("e", 1)]  # said at once: by conversation, seq


async def test_a_deleted_record_leaves_the_results_and_a_rewritten_one_is_searched_anew() -> None:
    async with searched() as (database, log):
        await log.append("a", [user("a", "oslo one", at=1.0), user("a", "oslo two", at=2.0)])
        await database.write(
            lambda conn: conn.execute("DELETE FROM records WHERE conversation_id = 'a' AND seq = 2")
        )
        assert [s.text for s in (await search(database, ["oslo"])).said] == ["oslo one"]
        tag, version, body, _ = CODEC.encode(user("a", "bergen now", at=1.0))

        def rewrite(conn: Connection) -> None:
            conn.execute(
                "UPDATE records SET type = ?, version = ?, body = ? WHERE seq = 1",
                (tag, version, body),
            )

        await database.write(rewrite)
        assert (await search(database, ["oslo"])).said == ()
        found = await search(database, ["bergen"])
        assert [s.text for s in found.said] == ["bergen now"]
        await database.write(lambda conn: conn.execute("DELETE FROM records"))
        assert await search(database, ["bergen"]) == SaidFound((), 0)


async def test_a_search_while_appends_commit_sees_one_moment_of_the_log() -> None:
    """Invariant, whatever commits while it runs: a search finds, of each conversation, its
    messages up to some point and none past it (the appends of a conversation commit in
    order), and counts exactly the conversations it found messages of — one snapshot."""
    async with searched() as (database, log):
        done = trio.Event()
        searches: list[SaidFound] = []

        async def append() -> None:
            for number in range(60):
                conversation = f"c{number % 4}"
                await log.append(conversation, [user(conversation, f"oslo {number}")])
            done.set()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(append)
            while not done.is_set():
                searches.append(await search(database, ["oslo"], limit=100))
        searches.append(await search(database, ["oslo"], limit=100))
        for found in searches:
            seqs: dict[str, list[int]] = {}
            for said in found.said:
                seqs.setdefault(said.conversation_id, []).append(said.seq)
            for found_seqs in seqs.values():
                assert sorted(found_seqs) == list(range(1, len(found_seqs) + 1))
            assert found.conversations == len(seqs)
        assert len(searches[-1].said) == 60


async def test_a_body_that_is_not_json_is_left_out_and_its_append_succeeds() -> None:
    """Neither a body that does not parse nor one ``jsonb`` cannot hold (a NUL character) fails
    the write: the message is left out of the index; the others are found."""
    async with searched() as (database, log):
        await log.append("a", [user("a", "nul\x00 oslo", at=1.0), user("a", "plain oslo", at=2.0)])

        def broken(conn: Connection) -> None:
            conn.execute(
                "INSERT INTO records (conversation_id, seq, type, version, body) "
                "VALUES ('a', 3, 'UserInputRecorded', 1, '{not json')"
            )

        await database.write(broken)
        found = await search(database, ["oslo"])
        assert [s.text for s in found.said] == ["plain oslo"]
        assert found.conversations == 1
        assert [s.text for s in (await search(database, ["plain\x00oslo"])).said] == ["plain oslo"]
        assert await log.last_seq("a") == 3


async def test_a_message_holding_nul_or_a_lone_surrogate_is_kept_and_not_found() -> None:
    """What the scale-out guide says: a message holding NUL or a lone surrogate is kept (its
    append succeeds, the log reads it back as written) but the search does not find it — and a
    search that would have matched it answers, finding the others."""
    async with searched() as (database, log):
        texts = ["walrus a\x00b", "walrus a\ud800b", "walrus ok"]
        await log.append("a", [user("a", text, at=float(n)) for n, text in enumerate(texts)])
        held = [entry.record for entry in await log.entries("a")]
        assert [getattr(record, "text", None) for record in held] == texts
        assert [s.text for s in (await search(database, ["walrus"])).said] == ["walrus ok"]


async def test_a_long_word_or_message_is_indexed_as_far_as_the_index_holds() -> None:
    """A word of 255 characters or more is not indexed (nor found), and a message is found by
    the first 200,000 characters of its words — past its 16,383rd word, by plain words only;
    never a failed append."""
    async with searched() as (database, log):
        long = "x" * 255
        words = [f"w{n}" for n in range(60_000)]  # about 400,000 characters
        words[20_000] = "e mail"
        await log.append(
            "a",
            [user("a", f"{long} oslo {'y' * 254}", at=1.0), user("a", " ".join(words), at=2.0)],
        )
        assert [s.seq for s in (await search(database, ["oslo"])).said] == [1]
        assert (await search(database, [long])).said == ()
        assert [s.seq for s in (await search(database, ["y" * 254])).said] == [1]
        assert [s.seq for s in (await search(database, ["w10", "w25000"])).said] == [2]
        assert [s.seq for s in (await search(database, ["mail"])).said] == [2]
        assert (await search(database, ["e-mail"])).said == ()  # past 16,383 words
        assert (await search(database, ["w40000"])).said == ()  # past 200,000 characters


async def test_the_statements_run_through_the_port_and_searches_use_the_indexes() -> None:
    """``SEARCH_DDL`` holds no ``%`` nor ``?`` (it runs as a work function's statements too);
    on a log of thousands of messages, a search finds its rows through ``records_said`` and
    counts conversations on ``records_said_by``."""
    assert not any("%" in statement or "?" in statement for statement in SEARCH_DDL)
    async with postgres_database() as database:

        def lay_out(conn: Connection) -> None:
            # The layout made them; made again here, as work-function statements, by the port.
            conn.execute("DROP INDEX records_said, records_said_by")
            conn.execute("DROP FUNCTION said_query, said_words, said_clean, said_text")
            for statement in SEARCH_DDL:
                conn.execute(statement)
            conn.execute(
                "INSERT INTO records SELECT 'c' || mod(i, 50), i, 'UserInputRecorded', 1, "
                "json_build_object('kind', 'user', 'text', 'word' || i || ' common', 'at', i)"
                "::text FROM generate_series(1, 5000) AS i"
            )
            conn.execute("ANALYZE records")

        await database.write(lay_out)
        found = await search(database, ["WORD42"])
        assert [(s.conversation_id, s.seq, s.at) for s in found.said] == [("c42", 42, 42.0)]
        assert found.conversations == 50

        def plans(conn: Connection) -> tuple[str, str]:
            find = _FIND.format(query="said_query(?)")
            found = conn.execute(f"EXPLAIN {find}", ("word42", 10)).fetchall()
            counted = conn.execute(f"EXPLAIN {_CONVERSATIONS}").fetchall()
            return "\n".join(r[0] for r in found), "\n".join(r[0] for r in counted)

        find_plan, count_plan = await database.read(plans)
        assert "Bitmap Index Scan on records_said " in find_plan
        assert "using records_said_by on records" in count_plan


# ---- for all: what it finds is what the log says ---------------------------------------------

#: The SQLite search tests' pieces of text, and what ``tsquery`` would read as syntax.
TSQUERY = st.sampled_from(
    ["&", "|", "!", "!oslo", "oslo|rome", "<->", "oslo<->rome", "<2>", "oslo:*", "rome:AB",
     "'", "'oslo'", "it's", "\\", "a\\b", "(oslo", "OSLO&ROME", "Ünïcode", "ÜNÏCODE", "x²"]
)  # fmt: skip
PG_PIECES = st.one_of(PIECES, TSQUERY)
TEXTS = st.lists(PG_PIECES, max_size=8).map(" ".join)
WORDS = st.lists(PG_PIECES.filter(lambda p: p.strip() != ""), min_size=1, max_size=3)

AT = st.sampled_from([1.0, 2.0, 3.0])

RECORDS = st.one_of(
    st.builds(
        user,
        st.sampled_from(["a", "b", "c"]),
        TEXTS,
        st.sampled_from(["user", "steering", "follow-up", "feedback"]),
        AT,
    ),
    st.builds(
        lambda c, parts, at: answer(c, *parts, at=at),
        st.sampled_from(["a", "b", "c"]),
        st.lists(
            st.one_of(
                st.tuples(st.sampled_from(["text", "reasoning"]), TEXTS),
                st.just(("tool-call", {"id": "t", "name": "oslo", "arguments": {"q": "oslo"}})),
            ),
            max_size=4,
        ),
        AT,
    ),
)

OPERATIONS = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.lists(RECORDS, min_size=1, max_size=3)),
        st.tuples(st.just("delete"), st.integers(0, 20)),
        st.tuples(st.just("corrupt"), st.integers(0, 20)),
    ),
    max_size=8,
)

SEARCHES = st.lists(st.tuples(WORDS, st.integers(1, 6)), min_size=1, max_size=4)


def _messages(conn: Connection) -> list[tuple[str, int, str, float, str]]:
    """The messages of the log's readable records, as the plain-Python history reads them."""
    messages = []
    rows = conn.execute("SELECT conversation_id, seq, type, version, body FROM records")
    for conversation, seq, tag, version, body in rows.fetchall():
        try:
            record = CODEC.decode(conversation, seq, tag, version, body)
        except Exception:
            continue  # a body that does not read is no message
        for number, who, at, text in said_in([LogEntry(seq, record)]):
            messages.append((str(conversation), number, who, at, text))
    return messages


def _records(conn: Connection) -> list[tuple[Any, ...]]:
    return conn.execute("SELECT conversation_id, seq, type, version, body FROM records").fetchall()


def _sqlite_copy(records: list[tuple[Any, ...]]) -> sqlite3.Connection:
    """An SQLite database holding the same records, for its own search (not caught up: it
    matches them in memory, the last said first, as a first search of a log does)."""
    conn = sqlite3.connect(":memory:", isolation_level=None)
    prepare(conn, ":memory:")
    conn.executemany(
        "INSERT INTO records (conversation_id, seq, type, version, body) VALUES (?, ?, ?, ?, ?)",
        records,
    )
    return conn


def _expected(
    messages: list[tuple[str, int, str, float, str]], words: list[str], limit: int
) -> SaidFound:
    """What a search should find: every message holding every word (none when no word is
    searchable), the last said first — by ``at``, then conversation, then ``seq`` — bounded."""
    hits = [m for m in messages if any(map(searchable, words)) and holds(m[4], words)]
    hits.sort(key=lambda m: (m[3], m[0], m[1]), reverse=True)
    return SaidFound(tuple(Said(*m) for m in hits[:limit]), len({m[0] for m in messages}))


def test_what_it_finds_is_what_the_log_says_for_all_conversations_and_searches() -> None:
    """For all appends, deletions and corrupted bodies, and all searches (every piece the SQLite
    search is tried with: either case, accents, digits, quotes, FTS5 and tsquery look-alikes),
    the messages found, their order, the bound and the conversations counted are those of a
    plain-Python reading of the records (``said_in``, ``holds``), and those the SQLite search
    finds in the same records."""

    async def main() -> None:
        async with searched() as (database, log):

            def run(work: Callable[..., Awaitable[R]], *args: Any) -> R:
                return trio.from_thread.run(work, *args)

            @settings(max_examples=max(10, EXAMPLES // 8), deadline=None)
            @given(OPERATIONS, SEARCHES)
            @example(
                [("append", [user("a", "e-mail x_y", at=1.0), user("b", "E mail", at=2.0)])],
                [(["e-mail"], 5), (["X_Y"], 5), (["mail", "e"], 1)],
            )
            def check(operations: list[Any], searches: list[tuple[list[str], int]]) -> None:
                run(database.write, _forget_all)
                for operation in operations:
                    run(_operate, database, log, operation)
                messages = run(database.read, _messages)
                sqlite = _sqlite_copy(run(database.read, _records))
                try:
                    for words, limit in searches:
                        found = run(search, database, words, limit)
                        assert found == _expected(messages, words, limit), (words, limit)
                        assert found == find_said(sqlite, words, limit), (words, limit)
                finally:
                    sqlite.close()

            await trio.to_thread.run_sync(check)

    trio.run(main)


def _forget_all(conn: Connection) -> None:
    conn.execute("DELETE FROM records")


async def _operate(
    database: PostgresDatabase, log: SqliteConversationLog, operation: tuple[Any, ...]
) -> None:
    kind = operation[0]
    if kind == "append":
        records: list[Record] = operation[1]
        for record in records:
            await log.append(record.conversation_id, [record])
        return
    rows = await database.read(
        lambda conn: conn.execute(
            "SELECT conversation_id, seq FROM records ORDER BY 1, 2"
        ).fetchall()
    )
    if not rows:
        return
    where = tuple(rows[operation[1] % len(rows)])
    if kind == "delete":
        statement = "DELETE FROM records WHERE conversation_id = ? AND seq = ?"
    else:
        statement = "UPDATE records SET body = '{not json' WHERE conversation_id = ? AND seq = ?"
    await database.write(lambda conn: conn.execute(statement, where))
