"""Full-text search over what was said in every conversation (layout version 3).

What is indexed: what a person said (a ``UserInputRecorded`` of kind user, steering or
follow-up) and what the model answered in text (the ``text`` parts of a
``ModelResponseRecorded``, joined). Tool calls and their results, reasoning, the engine's own
feedback to the model and compaction summaries are not: a person searches for what was said in
the conversation, and tool output (files, pages, command output) would outweigh it many times,
in the index's size and in the hits.

Two tables, filled by triggers on ``records``, so the index is written by the very statement that
appends a record — in its transaction, whichever code path appends (the log, the durable queue)
— and can never disagree with the log, after a crash included:

* ``said`` — one row per message: its conversation, its ``seq`` in the log, who (``user``,
  ``steering``, ``follow-up`` or ``assistant``), when (the record's ``at``) and its text, taken
  from the stored (redacted) record body by SQLite's JSON functions. Its ``rowid`` is the order
  the messages were written in.
* ``said_index`` — the FTS5 index over ``said.text`` (an external-content table: the text is
  kept once, in ``said``). Words are separated the ``unicode61`` way (letters, digits and private
  use characters make words; everything else separates them); case does not matter, accents do.

A record deleted from ``records`` or rewritten in place takes its message out of the index (or
puts the new one in) by the same triggers. The log never does either today: compaction appends a
summary and keeps what it summarized, and deleting a session keeps its conversations' records.

The query is :func:`match_expression` (pure): each word searched for is quoted, so whatever a
person types is matched as words, never read as FTS5 syntax (``OR``, ``NEAR(``, ``*``, ``-``,
``col:``, quotes); every word must be there.
"""

from __future__ import annotations

import sqlite3
import unicodedata
from collections.abc import Sequence
from typing import Final

import attrs

__all__ = [
    "Said",
    "SaidFound",
    "add_search",
    "find_said",
    "match_expression",
    "searchable",
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

_INDEX: Final = (
    "CREATE VIRTUAL TABLE said_index USING fts5(text, content='said', content_rowid='rowid', "
    "tokenize='unicode61 remove_diacritics 0')"
)

_KINDS: Final = "('UserInputRecorded', 'ModelResponseRecorded')"

_TRIGGERS: Final = (
    # said → its index (the external-content pattern: the index is told what it held)
    """CREATE TRIGGER said_added AFTER INSERT ON said BEGIN
        INSERT INTO said_index (rowid, text) VALUES (new.rowid, new.text);
    END""",
    """CREATE TRIGGER said_removed AFTER DELETE ON said BEGIN
        INSERT INTO said_index (said_index, rowid, text) VALUES ('delete', old.rowid, old.text);
    END""",
    # records → said
    f"""CREATE TRIGGER records_said AFTER INSERT ON records
    WHEN new.type IN {_KINDS} BEGIN
        INSERT INTO said (conversation_id, seq, who, at, text) {_messages("new")};
    END""",
    """CREATE TRIGGER records_unsaid AFTER DELETE ON records BEGIN
        DELETE FROM said WHERE conversation_id = old.conversation_id AND seq = old.seq;
    END""",
    f"""CREATE TRIGGER records_resaid AFTER UPDATE ON records BEGIN
        DELETE FROM said WHERE conversation_id = old.conversation_id AND seq = old.seq;
        INSERT INTO said (conversation_id, seq, who, at, text)
            SELECT * FROM ({_messages("new")}) WHERE new.type IN {_KINDS};
    END""",
)


def add_search(conn: sqlite3.Connection) -> int:
    """Add the search tables and their triggers, and index the messages ``records`` holds
    already — oldest first by their ``at``, so that their order is the order they were said in.
    Runs inside the layout upgrade's transaction (layout 2 → 3; a new database passes through
    it too, with nothing to index); returns the messages indexed."""
    conn.execute(_SAID)
    source = f"FROM records AS r WHERE r.type IN {_KINDS}"
    conn.execute(
        f"INSERT INTO said (conversation_id, seq, who, at, text) "
        f"{_messages('r', source)} ORDER BY at, conversation_id, seq"
    )
    conn.execute(_INDEX)
    conn.execute("INSERT INTO said_index (said_index) VALUES ('rebuild')")
    for trigger in _TRIGGERS:
        conn.execute(trigger)
    return int(conn.execute("SELECT count(*) FROM said").fetchone()[0])


def searchable(word: str) -> bool:
    """Whether ``word`` holds a character the index makes words of (a letter, a digit, a private
    use character): a word of punctuation alone matches nothing, and is left out."""
    return any(
        unicodedata.category(char)[0] in "LN" or unicodedata.category(char) == "Co" for char in word
    )


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
    """What a search found: the messages (the last written first) and how many conversations
    the index holds messages of (all of them were searched)."""

    said: tuple[Said, ...]
    conversations: int


def find_said(conn: sqlite3.Connection, words: Sequence[str], limit: int) -> SaidFound:
    """The ``limit`` messages written last that hold every one of ``words``, the last first
    (none when no word is searchable), and the conversations searched. Runs in a reader
    thread."""
    expression = match_expression(words)
    rows = (
        conn.execute(
            "SELECT said.conversation_id, said.seq, said.who, said.at, said.text "
            "FROM said_index JOIN said ON said.rowid = said_index.rowid "
            "WHERE said_index MATCH ? ORDER BY said_index.rowid DESC LIMIT ?",
            (expression, limit),
        ).fetchall()
        if expression is not None and limit > 0
        else []
    )
    (conversations,) = conn.execute("SELECT count(DISTINCT conversation_id) FROM said").fetchone()
    return SaidFound(
        tuple(Said(c, int(seq), who, float(at or 0.0), text) for c, seq, who, at, text in rows),
        int(conversations),
    )
