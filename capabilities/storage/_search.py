"""Full-text search over what was said in every conversation (layout version 3).

What is indexed: what a person said (a ``UserInputRecorded`` of kind user, steering or
follow-up) and what the model answered in text (the ``text`` parts of a
``ModelResponseRecorded``, joined). Tool calls and their results, reasoning, the engine's own
feedback to the model and compaction summaries are not: a person searches for what was said in
the conversation, and tool output (files, pages, command output) would outweigh it many times,
in the index's size and in the hits.

The index is brought up to date by the search, never by an append: appending costs every run,
searching is rare, so an append writes its records and nothing else. Three tables:

* ``said`` — one row per message indexed: its conversation, its ``seq`` in the log, who
  (``user``, ``steering``, ``follow-up`` or ``assistant``), when (the record's ``at``) and its
  text, taken from the stored (redacted) record body by SQLite's JSON functions. Its ``rowid``
  is the order the messages were indexed in.
* ``said_index`` — the FTS5 index over ``said.text`` (an external-content table: the text is
  kept once, in ``said``). Words are separated the ``unicode61`` way (letters, digits and private
  use characters make words; everything else separates them); case does not matter, accents do.
* ``said_marks`` — each conversation's high-water mark: every record of it up to that ``seq``
  is indexed. (``records`` has no rowid, and its keys are per conversation, so the mark is too.)

A search reads, in one snapshot, the index and the records appended since it was last brought up
to date (:func:`look_up`, :func:`find_said`): those are matched in a small in-memory index made
like the stored one, so what it finds is what the log holds at that moment. Finding them reads
two index entries per conversation, never the records themselves (:data:`_BEHIND`). When it met
any, the search then catches the index up (:func:`catch_up`, in one write transaction, so a crash
at any point leaves index and marks agreeing): the records past each conversation's mark become
messages, in the order they were said (their ``at``), and the marks move to the conversation's
last record. When more than :data:`QUICK_TAIL` records wait (the first search of a long log),
it catches up first, then searches. When the catch-up cannot have the write lock (another process
keeps it past the storage's busy bound), the search still answers: from the index and the newest
:data:`TAIL_BOUND` messages it lacks; how many older ones it left out is in :class:`SaidFound`.

A record deleted from ``records`` or rewritten in place takes its message out of the index (or
puts the new one in) by triggers on deletes and updates (an append fires neither); a deletion
lowers the conversation's mark below the deleted record, so a record later written at a reused
``seq`` is indexed. The log never deletes nor rewrites today: compaction appends a summary and
keeps what it summarized, and deleting a session keeps its conversations' records.

The query is :func:`match_expression` (pure): each word searched for is quoted, so whatever a
person types is matched as words, never read as FTS5 syntax (``OR``, ``NEAR(``, ``*``, ``-``,
``col:``, quotes); every word must be there.
"""

from __future__ import annotations

import itertools
import json
import re
import sqlite3
import unicodedata
from collections.abc import Sequence
from typing import Any, Final

import attrs

from ._port import Connection

__all__ = [
    "Said",
    "SaidFound",
    "QUICK_TAIL",
    "SEARCH_WORDS_MOST",
    "TAIL_BOUND",
    "add_search",
    "behind",
    "catch_up",
    "find_said",
    "look_up",
    "match_expression",
    "searchable",
    "unindexed",
    "word_count",
]

#: What a message's text and kind are, from a ``records`` row named ``{r}`` (``new`` in a
#: trigger): NULL text for a record that is not one a person searches. (A body that is not JSON
#: is left out rather than make the write fail: the codec reports it when it is read.)
_TEXT: Final = """CASE
    WHEN NOT json_valid({r}.body) THEN NULL
    WHEN {r}.type = 'UserInputRecorded' THEN
        CASE WHEN json_extract({r}.body, '$.kind') IN ('user', 'steering', 'follow-up')
             THEN json_extract({r}.body, '$.text') END
    WHEN {r}.type = 'ModelResponseRecorded' THEN (
        SELECT group_concat(json_extract(part.value, '$[1]'), '')
        FROM json_each({r}.body, '$.content') AS part
        WHERE json_extract(part.value, '$[0]') = 'text'
          AND json_type(part.value, '$[1]') = 'text')
END"""

_WHO: Final = """CASE WHEN {r}.type = 'ModelResponseRecorded' THEN 'assistant'
    ELSE json_extract({r}.body, '$.kind') END"""


def _messages(r: str, source: str = "") -> str:
    """``SELECT`` of the messages in the ``records`` rows ``r`` (``new`` in a trigger, where
    ``source`` is empty; else ``source`` is the ``FROM`` clause naming the rows ``r``)."""
    return (
        f"SELECT * FROM (SELECT {r}.conversation_id AS conversation_id, {r}.seq AS seq, "
        f"{_WHO.format(r=r)} AS who, json_extract({r}.body, '$.at') AS at, "
        f"{_TEXT.format(r=r)} AS text {source}) WHERE typeof(text) = 'text' AND text != ''"
    )


_SAID: Final = """CREATE TABLE said (
    rowid INTEGER PRIMARY KEY,
    conversation_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    who TEXT NOT NULL,
    at REAL,
    text TEXT NOT NULL,
    UNIQUE (conversation_id, seq)
)"""

_MARKS: Final = """CREATE TABLE said_marks (
    conversation_id TEXT NOT NULL PRIMARY KEY,
    seq INTEGER NOT NULL
) WITHOUT ROWID"""

#: The FTS5 table's options (the stored index, and the in-memory one of what it lacks).
_TOKENIZE: Final = "tokenize='unicode61 remove_diacritics 0'"

_INDEX: Final = (
    f"CREATE VIRTUAL TABLE said_index USING fts5(text, content='said', content_rowid='rowid', "
    f"{_TOKENIZE})"
)

_KINDS: Final = "('UserInputRecorded', 'ModelResponseRecorded')"

#: Lower ``old``'s conversation's mark below ``old.seq``: a record there is gone, and a later
#: one may be written at that ``seq`` (an append numbers after the last record left). Records
#: past the lowered mark that the index holds already are skipped by the catch-up.
_LOWER_MARK: Final = """UPDATE said_marks SET seq = old.seq - 1
        WHERE conversation_id = old.conversation_id AND seq >= old.seq"""

_TRIGGERS: Final = (
    # said → its index (the external-content pattern: the index is told what it held)
    """CREATE TRIGGER said_added AFTER INSERT ON said BEGIN
        INSERT INTO said_index (rowid, text) VALUES (new.rowid, new.text);
    END""",
    """CREATE TRIGGER said_removed AFTER DELETE ON said BEGIN
        INSERT INTO said_index (said_index, rowid, text) VALUES ('delete', old.rowid, old.text);
    END""",
    # records → said: deletions and rewrites only (an append is indexed by the next search)
    f"""CREATE TRIGGER records_unsaid AFTER DELETE ON records BEGIN
        DELETE FROM said WHERE conversation_id = old.conversation_id AND seq = old.seq;
        {_LOWER_MARK};
    END""",
    f"""CREATE TRIGGER records_resaid AFTER UPDATE ON records BEGIN
        DELETE FROM said WHERE conversation_id = old.conversation_id AND seq = old.seq;
        {_LOWER_MARK};
        INSERT INTO said (conversation_id, seq, who, at, text)
            SELECT * FROM ({_messages("new")}) WHERE new.type IN {_KINDS};
    END""",
)

#: The conversations with records past their mark: ``(conversation, mark, last seq)``. Walks
#: the primary key of ``records`` from one conversation to the next (two index lookups each),
#: never reading a record's body.
_BEHIND: Final = """WITH RECURSIVE conversation (id) AS (
    SELECT min(conversation_id) FROM records
    UNION ALL
    SELECT (SELECT min(conversation_id) FROM records WHERE conversation_id > conversation.id)
    FROM conversation WHERE conversation.id IS NOT NULL
)
SELECT id, mark, last FROM (
    SELECT id,
        coalesce((SELECT seq FROM said_marks WHERE conversation_id = id), 0) AS mark,
        (SELECT max(seq) FROM records WHERE conversation_id = id) AS last
    FROM conversation WHERE id IS NOT NULL
) WHERE last > mark"""

#: The messages of the records past the marks in ``?`` (a JSON list of ``[conversation, mark,
#: last]``) that the index does not hold, as ``said`` columns (ordered by the caller).
_UNINDEXED: Final = _messages(
    "r",
    "FROM json_each(?) AS behind JOIN records AS r "
    "ON r.conversation_id = json_extract(behind.value, '$[0]') "
    "AND r.seq > json_extract(behind.value, '$[1]') "
    "AND r.seq <= json_extract(behind.value, '$[2]') "
    f"WHERE r.type IN {_KINDS} AND NOT EXISTS (SELECT 1 FROM said "
    "WHERE said.conversation_id = r.conversation_id AND said.seq = r.seq)",
)

#: The most messages not yet indexed that a search matches without the index (when it could not
#: bring the index up to date: see the module notes).
TAIL_BOUND: Final = 10_000

#: The most records not yet indexed that a search matches in memory before it brings the index
#: up to date (more: it catches up first, then searches; see ``SqliteConversationLog.search``).
QUICK_TAIL: Final = 1_000


def add_search(conn: Connection) -> None:
    """Add the search tables and their triggers, empty: every conversation's mark is 0, so the
    first search indexes what the log holds. Runs inside the layout upgrade's transaction (layout
    2 → 3, fast however much the log holds; a new database passes through it too)."""
    conn.execute(_SAID)
    conn.execute(_MARKS)
    conn.execute(_INDEX)
    for trigger in _TRIGGERS:
        conn.execute(trigger)


def behind(conn: Connection) -> list[tuple[str, int, int]]:
    """``(conversation, mark, last seq)`` of each conversation with records not yet indexed.
    Reads index entries only (two per conversation)."""
    return [(str(c), int(mark), int(last)) for c, mark, last in conn.execute(_BEHIND)]


def catch_up(conn: Connection) -> int:
    """Index every message appended since each conversation's mark — in the order they were said
    (their ``at``), after those indexed before — and move the marks to each conversation's last
    record; return the messages indexed. Runs inside a write transaction (its statements fail or
    succeed with it: index and marks always agree)."""
    late = behind(conn)
    if not late:
        return 0
    pending = json.dumps(late)
    indexed = conn.execute(
        f"INSERT INTO said (conversation_id, seq, who, at, text) {_UNINDEXED} "
        "ORDER BY at, conversation_id, seq",
        (pending,),
    ).rowcount
    conn.execute(
        "INSERT INTO said_marks (conversation_id, seq) "
        "SELECT json_extract(value, '$[0]'), json_extract(value, '$[2]') FROM json_each(?) "
        "WHERE true ON CONFLICT (conversation_id) DO UPDATE SET seq = excluded.seq",
        (pending,),
    )
    return indexed


def searchable(word: str) -> bool:
    """Whether ``word`` holds a character the index makes words of (a letter, a digit, a private
    use character): a word of punctuation alone matches nothing, and is left out."""
    return any(
        unicodedata.category(char)[0] in "LN" or unicodedata.category(char) == "Co" for char in word
    )


#: The most words a search takes, each word searched for counted by its parts (``e-mail`` is
#: two): PostgreSQL fails a query of some thousands ("stack depth limit exceeded"), and no
#: message a person looks for needs as many.
SEARCH_WORDS_MOST: Final = 1_000

#: A run of characters the index makes words of: a letter or a number (``[^\W_]``), or a
#: private use character (the ranges of category ``Co``).
_WORD: Final = re.compile("(?:[^\\W_]|[\ue000-\uf8ff\U000f0000-\U000ffffd\U00100000-\U0010fffd])+")


def word_count(words: Sequence[str]) -> int:
    """How many words ``words`` hold as the index splits them (each a run of letters, numbers
    and private use characters), counted to :data:`SEARCH_WORDS_MOST` + 1 at most. Pure."""
    found = 0
    for word in words:
        for _ in _WORD.finditer(word):
            found += 1
            if found > SEARCH_WORDS_MOST:
                return found
    return found


def match_expression(words: Sequence[str]) -> str | None:
    """The FTS5 query that finds the messages holding every one of ``words``, each matched as
    written (quoted: no word is read as FTS5 syntax); None when no word is :func:`searchable`.
    Pure."""
    quoted = ['"' + word.replace('"', '""') + '"' for word in words if searchable(word)]
    return " AND ".join(quoted) if quoted else None


@attrs.frozen
class Said:
    """A message found: its conversation, its place in the log, who said it (``user``,
    ``steering``, ``follow-up``, ``assistant``), when, and its text (as the log holds it)."""

    conversation_id: str
    seq: int
    who: str
    at: float
    text: str


@attrs.frozen
class SaidFound:
    """What a search found: the messages (the last written first), how many conversations were
    searched, and ``unsearched``: messages appended since the index was last brought up to date
    that the search could not match — the oldest of them beyond :data:`TAIL_BOUND`, only when
    the index could not be brought up to date (another process kept the write lock); else 0."""

    said: tuple[Said, ...]
    conversations: int
    unsearched: int = 0


def _said(rows: Sequence[tuple[Any, ...]]) -> list[Said]:
    return [
        Said(str(c), int(seq), str(who), float(at or 0.0), _text_of(text))
        for c, seq, who, at, text in rows
    ]


def _text_of(data: object) -> str:
    """A message's text read as bytes (``CAST(text AS BLOB)``): SQLite's JSON functions write a
    lone surrogate the record holds (``"\\ud800"``) as its three bytes, which are not UTF-8 —
    read as text, the whole search failed. Decoded back to the str the record holds."""
    if isinstance(data, bytes):
        return data.decode("utf-8", "surrogatepass")
    return str(data)


def _matching(
    tail: Sequence[tuple[Any, ...]], expression: str, limit: int
) -> list[tuple[Any, ...]]:
    """Those of ``tail`` (``said`` rows, the last written first) that ``expression`` matches,
    the first ``limit`` of them: an in-memory FTS5 index made like the stored one, so the words
    are the same."""
    memory = sqlite3.connect(":memory:")
    try:
        memory.execute(f"CREATE VIRTUAL TABLE tail USING fts5(text, {_TOKENIZE})")
        memory.executemany(
            "INSERT INTO tail (rowid, text) VALUES (?, ?)",
            # (as the bytes the stored index was given: a lone surrogate is no UTF-8)
            ((place, row[4].encode("utf-8", "surrogatepass")) for place, row in enumerate(tail)),
        )
        places = memory.execute(
            "SELECT rowid FROM tail WHERE tail MATCH ? ORDER BY rowid LIMIT ?", (expression, limit)
        ).fetchall()
    finally:
        memory.close()
    return [tail[place] for (place,) in places]


def unindexed(
    conn: Connection, bound: int, late: list[tuple[str, int, int]] | None = None
) -> tuple[list[tuple[Any, ...]], int]:
    """The newest ``bound`` messages the log holds and the index does not yet (``said`` rows
    without the ``rowid``, the last said first), and how many older ones there are beyond them;
    ``late`` is :func:`behind` when the caller has it. Reads (inside the caller's transaction,
    for one snapshot)."""
    late = behind(conn) if late is None else late
    if not late:
        return [], 0
    rows = conn.execute(  # the text as bytes: see _text_of
        "SELECT conversation_id, seq, who, at, CAST(text AS BLOB) "
        f"FROM ({_UNINDEXED}) ORDER BY at DESC, conversation_id DESC, seq DESC",
        (json.dumps(late),),
    )
    newest = [(*row[:4], _text_of(row[4])) for row in itertools.islice(rows, max(bound, 0))]
    return newest, sum(1 for _ in rows)


def _searched(
    conn: Connection,
    expression: str | None,
    limit: int,
    tail_bound: int,
    late: list[tuple[str, int, int]],
) -> SaidFound:
    """The search of :func:`find_said`, inside the caller's read transaction; ``late`` is
    :func:`behind` in it."""
    tail, unsearched = unindexed(conn, tail_bound, late)
    hits = _matching(tail, expression, limit) if expression and limit > 0 and tail else []
    if expression is not None and len(hits) < limit:
        hits += conn.execute(
            "SELECT said.conversation_id, said.seq, said.who, said.at, CAST(said.text AS BLOB) "
            "FROM said_index JOIN said ON said.rowid = said_index.rowid "
            "WHERE said_index MATCH ? ORDER BY said_index.rowid DESC LIMIT ?",
            (expression, limit - len(hits)),
        ).fetchall()
    (conversations,) = conn.execute("SELECT count(DISTINCT conversation_id) FROM said").fetchone()
    for conversation in {row[0] for row in tail}:  # those only the tail has messages of
        known = conn.execute(
            "SELECT 1 FROM said WHERE conversation_id = ? LIMIT 1", (conversation,)
        ).fetchone()
        conversations += known is None
    return SaidFound(tuple(_said(hits)), int(conversations), unsearched)


def find_said(
    conn: Connection, words: Sequence[str], limit: int, tail_bound: int = TAIL_BOUND
) -> SaidFound:
    """The ``limit`` messages written last that hold every one of ``words`` (none when no word is
    searchable), the last first, and the conversations searched — in what the log holds now:
    the index, and the newest ``tail_bound`` messages appended since it was brought up to date.
    Runs in a reader thread, in one snapshot (one transaction)."""
    conn.execute("BEGIN")
    try:
        return _searched(conn, match_expression(words), limit, tail_bound, behind(conn))
    finally:
        conn.execute("COMMIT")


def look_up(
    conn: Connection, words: Sequence[str], limit: int, *, within: int
) -> tuple[SaidFound | None, int]:
    """What :func:`find_said` finds, and how many records the log holds past the index's marks
    (at most: 0 when it is up to date) — or None for what it finds when that is more than
    ``within`` records (the caller brings the index up to date first, rather than match them
    in memory). Runs in a reader thread, in one snapshot (one transaction)."""
    conn.execute("BEGIN")
    try:
        late = behind(conn)
        waiting = sum(last - mark for _, mark, last in late)
        if waiting > within:
            return None, waiting
        return _searched(conn, match_expression(words), limit, TAIL_BOUND, late), waiting
    finally:
        conn.execute("COMMIT")
