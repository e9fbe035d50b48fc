"""Full-text search over what was said in every conversation, on PostgreSQL.

It finds what the SQLite search (``_search``) finds: the same messages — what a person said (a
``UserInputRecorded`` of kind user, steering or follow-up) and what the model answered in text
(the ``text`` parts of a ``ModelResponseRecorded``, joined), never tool calls, tool output,
reasoning, feedback or summaries; each word searched for is matched as written, never read as
query syntax, as whole words, any case; every word must be there; the last said first, bounded.

How it is made, natively (the :data:`SEARCH_DDL` statements, laid out with the tables in the
store's schema):

* ``said_text(type, body)`` — the text of the message a ``records`` row holds, or NULL: the
  extraction the SQLite index makes with SQLite's JSON functions, made with ``jsonb`` operators.
  A body that does not parse, or holds what ``jsonb`` cannot (a ``\\u0000`` escape), is no
  message: it is left out of the index, never a failed append. (PL/pgSQL, for its exception
  handler — PostgreSQL 15 has no ``pg_input_is_valid`` — and because PL/pgSQL keeps its plans
  for the session: a SQL function that is not inlined is planned again by every statement.)
* ``said_clean(text)`` — its words, lower case, one space between them: each run of word
  characters (a letter, a digit, a private use character — the SQLite index's ``unicode61``
  rule, :func:`~capabilities.storage._search.searchable`'s) is a word, everything else
  separates words. Lower case and letters are ICU's (the ``und-x-icu`` collation: the server
  must be built with ICU, as every common build is, and the database encoded in UTF-8),
  whatever the database's locale.
* ``said_words(text)`` — those words as a ``tsvector``, each with its place:
  ``to_tsvector('simple', said_clean(text))``. PostgreSQL's text-search parser is given the
  words alone: given the text, it keeps ``e-mail``, ``name@host.org``, ``example.com`` or
  ``/usr/bin`` whole, and in a database of the ``C`` locale it lowers no ``É``.
* ``said_query(word)`` — the ``tsquery`` of one word searched for:
  ``phraseto_tsquery('simple', said_clean(word))``, its parts one after another (``e-mail``
  finds ``E mail``, as on SQLite), NULL when it has none. Nothing a person types is read as
  ``tsquery`` syntax (``&``, ``|``, ``!``, ``<->``, ``:*``, quotes, backslashes are not word
  characters); a search joins its words' queries with ``&&``, each a parameter. It lives in the
  schema with the index, so a search always splits words as its index did.
* ``records_said`` — a partial GIN index on ``said_words(said_text(type, body))`` over the two
  record types that carry said text; ``records_said_by`` — a partial B-tree index on the
  conversation of each row that holds a message, which counts the conversations searched
  without reading a body.

The functions are ``IMMUTABLE`` (their results depend on their arguments alone); the SQL ones
have SQL-standard bodies, whose references are bound when they are made, and are inlined where
they are used; nothing they call depends on a session's ``search_path``.

So there is no catch-up and no marks table: PostgreSQL keeps the index with the rows, in the
appending transaction, and a search sees exactly what its snapshot of the log holds (a deleted
or rewritten record takes its message out, or changes it, in the same way).
``SaidFound.unsearched`` is always 0.

What an append pays: for a row of another type (tool calls and results, the bulk of a log),
nothing (the indexes are partial). For a message: ``said_text`` twice (once for each index: its
body parsed as ``jsonb``), its words split, two index entries (GIN's go to its pending list,
merged in bulk by vacuum — or by the append that finds the list past
``gin_pending_list_limit``, which pays for the merge). Measured on the test cluster (2 shared,
busy cores; the best of 4 runs): indexing costs about 0.5 ms of the server's time per message
of 1 KB of text (2,000 of them inserted by one statement: 0.55 ms a row with the indexes,
0.01 ms without); 2,000 such appends through the Conversation Log, one a transaction, took 15
to 55 % longer with them. Searches run at ``REPEATABLE READ`` (``Database.read``) and take no
predicate locks, so they never make a serializable append fail.

What a search costs: the GIN index gives the rows holding every word; their bodies are then read
to order them and keep ``limit`` of them — a search for words most messages hold reads most
messages. Counting the conversations takes an index lookup per conversation.

Differences from the SQLite search, for text that is rare: messages are ordered by when they
were said (their ``at``, then conversation, then ``seq``) — SQLite orders them as its index took
them in, which is that same order but for a message appended after a search with an older
``at``; a word of 255 characters or more is not indexed (nor found); only the first 200,000
characters of a message's words are indexed (a ``tsvector`` holds 1 MB); past its 16,383rd
word, a message's words are all at that place, so a word with punctuation inside is not found
there (a plain word is); letters, digits and lower case are those of the server's ICU (its
Unicode version); and in a database whose ``LC_CTYPE`` is not ``C``, a character the C library
calls neither a letter nor a digit (², ①, private use characters) separates words instead.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from ._port import Connection
from ._search import Said, SaidFound, searchable

__all__ = ["SEARCH_DDL", "find_said_pg"]

#: The word characters outside ICU's ``[:alnum:]`` (letters and decimal digits): the other
#: numbers (``Nl`` and ``No``: ², ½, Ⅻ, ①, …, as of Unicode 15.1) and the private use areas —
#: as code point ranges, ``first-last`` in hex. (Checked against :func:`searchable`, for the
#: characters Python's Unicode knows, by ``test_the_word_class_is_the_sqlite_one``.)
_MORE_WORD_CHARACTERS: Final = (
    "b2-b3 b9 bc-be 9f4-9f9 b72-b77 bf0-bf2 c78-c7e d58-d5e d70-d78 f2a-f33 1369-137c 16ee-16f0 "
    "17f0-17f9 19da 2070 2074-2079 2080-2089 2150-2182 2185-2189 2460-249b 24ea-24ff 2776-2793 "
    "2cfd 3007 3021-3029 3038-303a 3192-3195 3220-3229 3248-324f 3251-325f 3280-3289 32b1-32bf "
    "a6e6-a6ef a830-a835 e000-f8ff 10107-10133 10140-10178 1018a-1018b 102e1-102fb 10320-10323 "
    "10341 1034a 103d1-103d5 10858-1085f 10879-1087f 108a7-108af 108fb-108ff 10916-1091b "
    "109bc-109bd 109c0-109cf 109d2-109ff 10a40-10a48 10a7d-10a7e 10a9d-10a9f 10aeb-10aef "
    "10b58-10b5f 10b78-10b7f 10ba9-10baf 10cfa-10cff 10e60-10e7e 10f1d-10f26 10f51-10f54 "
    "10fc5-10fcb 11052-11065 111e1-111f4 1173a-1173b 118ea-118f2 11c5a-11c6c 11fc0-11fd4 "
    "12400-1246e 16b5b-16b61 16e80-16e96 1d2c0-1d2d3 1d2e0-1d2f3 1d360-1d378 1e8c7-1e8cf 1ec71-1ecab "
    "1ecad-1ecaf 1ecb1-1ecb4 1ed01-1ed2d 1ed2f-1ed3d 1f100-1f10c f0000-ffffd 100000-10fffd"
)


def _escape(point: int) -> str:
    """A code point as a regular expression's character-entry escape."""
    return f"\\u{point:04x}" if point <= 0xFFFF else f"\\U{point:08x}"


def _word_class() -> str:
    ranges = []
    for piece in _MORE_WORD_CHARACTERS.split():
        first, _, last = piece.partition("-")
        low = int(first, 16)
        high = int(last, 16) if last else low
        ranges.append(_escape(low) if low == high else f"{_escape(low)}-{_escape(high)}")
    return "[[:alnum:]" + "".join(ranges) + "]"


#: The regular expression bracket of a word character (under the ICU collation: a letter, a
#: digit or another number, a private use character).
_WORD_CLASS: Final = _word_class()

#: The ICU collation, for word characters and lower case whatever the database's locale.
_ICU: Final = 'pg_catalog."und-x-icu"'

#: The record types that may carry said text (the indexes are partial on them).
_KINDS: Final = "('UserInputRecorded', 'ModelResponseRecorded')"

#: The longest word indexed, in characters (a longer one is left out, on both sides).
_LONGEST: Final = 254

#: How much of a message's words are indexed, in characters: a ``tsvector`` holds 1 MB at
#: most, with room for the places of each word.
_INDEXED: Final = 200_000

_SAID_TEXT: Final = f"""CREATE FUNCTION said_text(type text, body text) RETURNS text
    LANGUAGE plpgsql IMMUTABLE
AS $body$
DECLARE
    said jsonb;
BEGIN
    IF body IS NULL OR type IS NULL OR type NOT IN {_KINDS} THEN
        RETURN NULL;
    END IF;
    BEGIN
        said := body::jsonb;
    EXCEPTION WHEN data_exception OR program_limit_exceeded OR statement_too_complex THEN
        RETURN NULL;  -- not JSON, or what jsonb cannot hold (a \\u0000 escape)
    END;
    IF type = 'UserInputRecorded' THEN
        IF said ->> 'kind' IN ('user', 'steering', 'follow-up')
                AND jsonb_typeof(said -> 'text') = 'string' THEN
            RETURN nullif(said ->> 'text', '');
        END IF;
        RETURN NULL;
    END IF;
    IF jsonb_typeof(said -> 'content') IS DISTINCT FROM 'array' THEN
        RETURN NULL;
    END IF;
    RETURN (
        SELECT nullif(string_agg(part.value ->> 1, '' ORDER BY part.place), '')
        FROM jsonb_array_elements(said -> 'content') WITH ORDINALITY AS part (value, place)
        WHERE part.value ->> 0 = 'text' AND jsonb_typeof(part.value -> 1) = 'string');
END
$body$"""

_SAID_CLEAN: Final = f"""CREATE FUNCTION said_clean(said text) RETURNS text
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
RETURN regexp_replace(left(regexp_replace(
    regexp_replace(lower(said COLLATE {_ICU}), '[^{_WORD_CLASS[1:-1]}]+', ' ', 'g'),
    '[^ ]{{{_LONGEST + 1}}}[^ ]*', ' ', 'g') || ' ', {_INDEXED + 1}), '[^ ]+$', '')"""

_SAID_WORDS: Final = """CREATE FUNCTION said_words(said text) RETURNS tsvector
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
RETURN to_tsvector('simple', said_clean(said))"""

_SAID_QUERY: Final = """CREATE FUNCTION said_query(word text) RETURNS tsquery
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
RETURN CASE WHEN btrim(said_clean(word)) != ''
            THEN phraseto_tsquery('simple', said_clean(word)) END"""

_SAID: Final = f"type IN {_KINDS}"
_A_MESSAGE: Final = f"{_SAID} AND said_text(type, body) IS NOT NULL"

#: The statements that add the search to an empty schema (``_postgres_layout.prepare``'s
#: ``extra``: run after the tables, in their transaction, the schema alone on the
#: ``search_path``).
SEARCH_DDL: Final[tuple[str, ...]] = (
    _SAID_TEXT,
    _SAID_CLEAN,
    _SAID_WORDS,
    _SAID_QUERY,
    f"CREATE INDEX records_said ON records USING gin (said_words(said_text(type, body))) "
    f"WHERE {_SAID}",
    f"CREATE INDEX records_said_by ON records (conversation_id) WHERE {_A_MESSAGE}",
)

#: The messages holding every word (``{query}``: ``said_query(?)`` of each, joined by ``&&``),
#: the last said first, ``?`` of them.
_FIND: Final = f"""SELECT conversation_id, seq, who, at, text FROM (
    SELECT r.conversation_id, r.seq,
        CASE WHEN r.type = 'ModelResponseRecorded' THEN 'assistant'
             ELSE parsed.j ->> 'kind' END AS who,
        CASE WHEN jsonb_typeof(parsed.j -> 'at') = 'number'
             THEN (parsed.j ->> 'at')::double precision END AS at,
        said_text(r.type, r.body) AS text
    FROM records AS r, LATERAL (SELECT r.body::jsonb AS j OFFSET 0) AS parsed
    WHERE r.{_SAID} AND said_words(said_text(r.type, r.body)) @@ ({{query}})
) AS hits
ORDER BY at DESC NULLS LAST, conversation_id COLLATE "C" DESC, seq DESC
LIMIT ?"""

#: How many conversations hold a message: from one conversation to the next on
#: ``records_said_by`` (an index lookup each), never reading a body.
_CONVERSATIONS: Final = f"""WITH RECURSIVE said_by (id) AS (
    SELECT min(conversation_id) FROM records WHERE {_A_MESSAGE}
    UNION ALL
    SELECT (SELECT min(conversation_id) FROM records
            WHERE {_A_MESSAGE} AND conversation_id > said_by.id)
    FROM said_by WHERE said_by.id IS NOT NULL
)
SELECT count(id) FROM said_by"""


def _said(rows: Sequence[tuple[Any, ...]]) -> tuple[Said, ...]:
    return tuple(
        Said(str(c), int(seq), str(who), float(at or 0.0), str(text))
        for c, seq, who, at, text in rows
    )


def find_said_pg(conn: Connection, words: Sequence[str], limit: int) -> SaidFound:
    """The ``limit`` messages said last that hold every one of ``words`` (whole words, any
    case, each matched as written; a word of punctuation alone is left out, and when none is
    left nothing is found), the last said first, and how many conversations were searched —
    in what the log holds in the caller's snapshot (a ``Database.read`` work function: its
    two statements see one snapshot there). ``unsearched`` is always 0: the index is never
    behind the log."""
    (conversations,) = conn.execute(_CONVERSATIONS).fetchone()
    wanted = [word for word in words if searchable(word)]
    if not wanted or limit <= 0:
        return SaidFound((), int(conversations))
    query = " && ".join(["said_query(?)"] * len(wanted))
    # NUL separates words, as any character but a word character does (and is no parameter).
    wanted = [word.replace("\0", " ") for word in wanted]
    rows = conn.execute(_FIND.format(query=query), (*wanted, limit)).fetchall()
    return SaidFound(_said(rows), int(conversations))
