"""The database's layout: its tables, its version, and how a file is recognised as ours.

A database effectagent writes carries ``PRAGMA application_id`` = :data:`APPLICATION_ID` and
``PRAGMA user_version`` = its layout version. Opening a file checks, in order, without writing
anything until every check passed:

1. it is an SQLite database at all (else :class:`NotADatabase`);
2. it is empty, or ours (else :class:`ForeignDatabase` — we never add tables to another
   application's database);
3. its layout version is not newer than this code's (else :class:`DatabaseTooNew`);

then an empty database gets the layout, and an older one is upgraded by the registered steps in
:data:`UPGRADES`, all in one transaction. A new database is laid out as version 1 and upgraded
in that same transaction, so it is never seen at an older version, and a new file and an
upgraded one have the same tables.

Versions:

1. the tables below;
2. the durable runtime's tables (``_layout_durable``: submissions, lanes, durable steps, aborts,
   audit, quarantine) and, in ``steering_inputs``, the ``epoch`` of the conversation's lane an
   input was admitted under (input admitted for a run that has ended is never delivered to a
   later one: see ``_lanes``);
3. full-text search over what was said (``_search``: the ``said`` table, its FTS5 index
   ``said_index``, each conversation's high-water mark in ``said_marks``, and triggers on
   deletions and rewrites of ``records``); an append writes none of them — a search brings the
   index up to date — so the upgrade adds them empty, at once however long the log;
4. ``media``: the bytes of the images, documents and audio the records refer to, once per
   SHA-256 digest (a record holds the digest, never the bytes); added empty;
5. ``parts`` in ``steering_inputs`` and ``submissions``: on input with images, documents or
   audio, the input's order as JSON — ``["text", length]`` for each text part (the text itself
   stays in the row's text column, joined by blank lines, and is cleared with it) and
   ``["media", reference]`` by digest, the bytes in ``media``, put in the transaction that
   admits the input — so the process that runs it builds it again (``capabilities.steering.
   _parts``); NULL for text alone (and for every row before);
6. ``put_at`` in ``media``: when the bytes were last put (seconds since the epoch; 0 for every
   row before: long ago), and the index ``media_by_put_at`` — bytes put for something never
   written are swept by it (``_sweep``).

Tables (one per concern; a session or the agent state never holds conversation history):

* ``records`` — the Conversation Log: ``(conversation_id, seq)`` → type tag, schema version, body.
* ``sessions`` — session records with their revision and schema-versioned metadata.
* ``agent_state`` — persistent agent state: ``(slot, key)`` → revision, status, versioned value.
* ``steering_inputs`` — admitted steering and follow-ups until they become canonical (or expire);
  their text is cleared then, the log holding the (redacted) canonical copy (``parts``, which
  holds no text, stays).
* ``media`` — media bytes by digest: ``digest`` → ``size``, ``data`` (written once, never changed),
  ``put_at`` (stamped again by each put of the digest); deleted with the last record referring
  to it (``_forget``), or swept when nothing came to refer to it (``_sweep``).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from typing import Final

from ._busy import BusyPolicy, begin_immediate
from ._errors import DatabaseTooNew, ForeignDatabase, NotADatabase
from ._layout_durable import DURABLE_TABLES
from ._search import add_search

__all__ = ["APPLICATION_ID", "LAYOUT_VERSION", "MEDIA_PUT_AT", "UPGRADES", "prepare"]

#: ``PRAGMA application_id`` of an effectagent database ("EAG1").
APPLICATION_ID: Final = 0x45414731

#: The layout version this code writes.
LAYOUT_VERSION: Final = 6

_LAYOUT_V1: Final = (
    """CREATE TABLE records (
        conversation_id TEXT NOT NULL,
        seq INTEGER NOT NULL,
        type TEXT NOT NULL,
        version INTEGER NOT NULL,
        body TEXT NOT NULL,
        PRIMARY KEY (conversation_id, seq)
    ) WITHOUT ROWID""",
    """CREATE TABLE sessions (
        session_id TEXT NOT NULL PRIMARY KEY,
        name TEXT NOT NULL,
        revision INTEGER NOT NULL,
        conversations TEXT NOT NULL,
        metadata_version INTEGER NOT NULL,
        metadata TEXT NOT NULL,
        created_at REAL NOT NULL,
        updated_at REAL NOT NULL
    ) WITHOUT ROWID""",
    """CREATE TABLE agent_state (
        slot TEXT NOT NULL,
        key TEXT NOT NULL,
        revision INTEGER NOT NULL,
        status TEXT NOT NULL,
        version INTEGER NOT NULL,
        value TEXT,
        reason TEXT NOT NULL,
        run_id TEXT NOT NULL,
        updated_at REAL NOT NULL,
        PRIMARY KEY (slot, key)
    ) WITHOUT ROWID""",
    "CREATE INDEX agent_state_unsettled ON agent_state (status) WHERE status != 'committed'",
    """CREATE TABLE steering_inputs (
        input_id TEXT NOT NULL PRIMARY KEY,
        conversation_id TEXT NOT NULL,
        position INTEGER NOT NULL,
        kind TEXT NOT NULL,
        text TEXT,
        author TEXT NOT NULL,
        at REAL NOT NULL,
        status TEXT NOT NULL,
        seq INTEGER,
        reason TEXT NOT NULL
    ) WITHOUT ROWID""",
    "CREATE INDEX steering_queued ON steering_inputs (conversation_id) WHERE status = 'queued'",
)


def _to_v2(conn: sqlite3.Connection) -> None:
    """Layout 1 → 2: the durable tables, and the lane epoch of each steering input (NULL for
    those admitted before: no lane held them)."""
    for statement in DURABLE_TABLES:
        conn.execute(statement)
    conn.execute("ALTER TABLE steering_inputs ADD COLUMN epoch INTEGER")
    conn.execute(
        "CREATE INDEX steering_by_lane ON steering_inputs (conversation_id, epoch, position)"
    )


def _to_v3(conn: sqlite3.Connection) -> None:
    """Layout 2 → 3: the search tables, empty (the first search indexes the log: see
    ``_search``)."""
    add_search(conn)


#: The table of media bytes (layout 4).
MEDIA_TABLE: Final = """CREATE TABLE media (
    digest TEXT NOT NULL PRIMARY KEY,
    size INTEGER NOT NULL,
    data BLOB NOT NULL
)"""


def _to_v4(conn: sqlite3.Connection) -> None:
    """Layout 3 → 4: the media table, empty."""
    conn.execute(MEDIA_TABLE)


def _to_v5(conn: sqlite3.Connection) -> None:
    """Layout 4 → 5: the ``parts`` of steering inputs and submissions (NULL: text alone)."""
    conn.execute("ALTER TABLE steering_inputs ADD COLUMN parts TEXT")
    conn.execute("ALTER TABLE submissions ADD COLUMN parts TEXT")


#: The column and index layout 6 adds to ``media`` (PostgreSQL's layout 2 adds the same).
MEDIA_PUT_AT: Final = (
    "ALTER TABLE media ADD COLUMN put_at REAL NOT NULL DEFAULT 0",
    "CREATE INDEX media_by_put_at ON media (put_at, digest)",
)


def _to_v6(conn: sqlite3.Connection) -> None:
    """Layout 5 → 6: when media bytes were put (0 for those there: long ago), indexed."""
    for statement in MEDIA_PUT_AT:
        conn.execute(statement)


#: Upgrade steps: ``UPGRADES[n]`` turns layout ``n`` into ``n + 1`` (inside the open transaction).
UPGRADES: Final[dict[int, Callable[[sqlite3.Connection], None]]] = {
    1: _to_v2,
    2: _to_v3,
    3: _to_v4,
    4: _to_v5,
    5: _to_v6,
}


def _not_a_database(exc: sqlite3.DatabaseError) -> bool:
    return "not a database" in str(exc) or "malformed" in str(exc)


def _layout_version(conn: sqlite3.Connection, path: str) -> int | None:
    """The layout version of a database that is ours, None for an empty one; raises for one that
    is not SQLite, another application's, or too new."""
    try:
        application_id = conn.execute("PRAGMA application_id").fetchone()[0]
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        tables = conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]
    except sqlite3.DatabaseError as exc:
        if _not_a_database(exc):
            raise NotADatabase(path) from None
        raise
    if application_id != APPLICATION_ID and (application_id != 0 or tables):
        raise ForeignDatabase(path, application_id)
    if version > LAYOUT_VERSION:
        raise DatabaseTooNew(path, version, LAYOUT_VERSION)
    return None if application_id == 0 else int(version)


def prepare(conn: sqlite3.Connection, path: str, busy: BusyPolicy | None = None) -> None:
    """Check that the database behind ``conn`` is ours (or empty) and current; lay it out or
    upgrade it. Writes nothing unless every check passed; ``busy`` says how long to wait for
    another process's write lock (None: not at all). Runs in a worker thread.

    A database at the current version is only read (its checks take no write lock, so processes
    opening a shared file do not queue for it)."""
    if _layout_version(conn, path) == LAYOUT_VERSION:
        return
    try:
        if busy is None:
            conn.execute("BEGIN IMMEDIATE")
        else:
            begin_immediate(conn, busy)
    except sqlite3.DatabaseError as exc:
        if _not_a_database(exc):
            raise NotADatabase(path) from None
        raise
    try:
        version = _layout_version(conn, path)  # again: another process may have laid it out
        changed = version != LAYOUT_VERSION
        if version is None:
            for statement in _LAYOUT_V1:
                conn.execute(statement)
            version = 1
        while version < LAYOUT_VERSION:
            UPGRADES[version](conn)
            version += 1
        if changed:
            conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
            conn.execute(f"PRAGMA user_version = {LAYOUT_VERSION}")
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
