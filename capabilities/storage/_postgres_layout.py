"""The PostgreSQL layout: the tables of the SQLite layout (``_layout``, at its current version),
in a schema of their own, and how a schema is recognised as ours.

Every table has the columns of its SQLite twin, with the same names, in the same order, meaning
the same: ``INTEGER`` becomes ``BIGINT`` (sequence numbers, positions, revisions, epochs and
sizes can grow past 2^31), ``REAL`` becomes ``DOUBLE PRECISION`` (seconds), ``BLOB`` becomes
``BYTEA`` (media bytes), ``TEXT`` stays ``TEXT``; ``WITHOUT ROWID`` has no counterpart (every
PostgreSQL table is a heap with its primary key as an index); the indexes are kept, partial ones
too, with the same names and conditions; ``durable_audit.id`` is an identity column (SQLite's
``AUTOINCREMENT``: never reused). So the SQL above the storage port reads and writes both alike.

The search tables (``said*``, full-text search) are not here: their DDL differs on PostgreSQL and
lives with the search code. It plugs in through ``extra``: :func:`prepare` runs the statements it
is given after the core tables, in the same transaction, when it lays out an empty schema.

What is there is said by the table ``effectagent_layout (application, version)``, one row:
``('effectagent', <version>)``. Opening (:func:`prepare`, in one transaction under a
transaction-level advisory lock, so that many workers starting at once lay a schema out once):

1. the schema is created when missing;
2. an empty schema (no table, view or sequence of its own) gets the layout at
   :data:`LAYOUT_VERSION`;
3. a schema with tables but no ``effectagent_layout`` row of ours is another application's:
   refused (:class:`ForeignSchema`), untouched;
4. a layout newer than this code's is refused (:class:`DatabaseTooNew`), untouched;
5. an older one is upgraded by the steps in :data:`UPGRADES`, in that same transaction.

Versions (of the PostgreSQL layout, counted apart from SQLite's):

1. every table of SQLite layout 5 but its search tables; search is PostgreSQL's own instead
   (``_search_postgres.SEARCH_DDL``: functions and two indexes on ``records``), laid out with
   the tables. (``extra`` statements follow them: for tests.)
2. ``put_at`` in ``media`` and its index ``media_by_put_at``, as SQLite layout 6: when the bytes
   were last put (0 for the rows of a schema upgraded from 1: long ago), for the sweep of bytes
   nothing refers to (``_sweep``); and ``live_key``, PostgreSQL's own: one random key that live
   text is sealed with (``_postgres_live``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Final

import attrs
from psycopg import sql

from ._errors import DatabaseTooNew, ForeignDatabase
from ._search_postgres import SEARCH_DDL

if TYPE_CHECKING:
    import psycopg

__all__ = [
    "APPLICATION",
    "LAYOUT",
    "LAYOUT_LOCK",
    "LAYOUT_VERSION",
    "UPGRADES",
    "ForeignSchema",
    "prepare",
]

#: What ``effectagent_layout.application`` says in a schema of ours.
APPLICATION: Final = "effectagent"

#: The layout version this code writes.
LAYOUT_VERSION: Final = 2

#: The key of the transaction-level advisory lock taken while a schema is checked and laid out
#: ("EAGL"): the same for every schema, held for milliseconds.
LAYOUT_LOCK: Final = 0x4541474C

#: PostgreSQL's own table (no SQLite twin: live text crosses processes only here).
LIVE_KEY_TABLE: Final = "CREATE TABLE live_key (key BYTEA NOT NULL)"
LIVE_KEY_ROW: Final = (
    "INSERT INTO live_key SELECT sha256(convert_to("
    "gen_random_uuid()::text || gen_random_uuid()::text || gen_random_uuid()::text, 'UTF8'))"
)

#: The tables of the current layout version, in the order they are made.
LAYOUT: Final[tuple[str, ...]] = (
    """CREATE TABLE records (
        conversation_id TEXT NOT NULL,
        seq BIGINT NOT NULL,
        type TEXT NOT NULL,
        version INTEGER NOT NULL,
        body TEXT NOT NULL,
        PRIMARY KEY (conversation_id, seq)
    )""",
    """CREATE TABLE sessions (
        session_id TEXT NOT NULL PRIMARY KEY,
        name TEXT NOT NULL,
        revision BIGINT NOT NULL,
        conversations TEXT NOT NULL,
        metadata_version INTEGER NOT NULL,
        metadata TEXT NOT NULL,
        created_at DOUBLE PRECISION NOT NULL,
        updated_at DOUBLE PRECISION NOT NULL
    )""",
    """CREATE TABLE agent_state (
        slot TEXT NOT NULL,
        key TEXT NOT NULL,
        revision BIGINT NOT NULL,
        status TEXT NOT NULL,
        version INTEGER NOT NULL,
        value TEXT,
        reason TEXT NOT NULL,
        run_id TEXT NOT NULL,
        updated_at DOUBLE PRECISION NOT NULL,
        PRIMARY KEY (slot, key)
    )""",
    "CREATE INDEX agent_state_unsettled ON agent_state (status) WHERE status != 'committed'",
    """CREATE TABLE steering_inputs (
        input_id TEXT NOT NULL PRIMARY KEY,
        conversation_id TEXT NOT NULL,
        position BIGINT NOT NULL,
        kind TEXT NOT NULL,
        text TEXT,
        author TEXT NOT NULL,
        at DOUBLE PRECISION NOT NULL,
        status TEXT NOT NULL,
        seq BIGINT,
        reason TEXT NOT NULL,
        epoch BIGINT,
        parts TEXT
    )""",
    "CREATE INDEX steering_queued ON steering_inputs (conversation_id) WHERE status = 'queued'",
    "CREATE INDEX steering_by_lane ON steering_inputs (conversation_id, epoch, position)",
    """CREATE TABLE submissions (
        submission_id TEXT NOT NULL PRIMARY KEY,
        principal TEXT NOT NULL,
        conversation_id TEXT NOT NULL,
        idempotency_key TEXT NOT NULL,
        payload_digest TEXT NOT NULL,
        agent TEXT NOT NULL,
        input TEXT,
        mode TEXT NOT NULL,
        position BIGINT NOT NULL,
        status TEXT NOT NULL,
        run_id TEXT NOT NULL,
        attempts BIGINT NOT NULL,
        next_attempt_at DOUBLE PRECISION NOT NULL,
        admitted_at DOUBLE PRECISION NOT NULL,
        started_at DOUBLE PRECISION,
        settled_at DOUBLE PRECISION,
        settlement TEXT,
        reserved TEXT,
        outcome TEXT,
        joined_into TEXT,
        base_seq BIGINT,
        parts TEXT,
        UNIQUE (principal, conversation_id, idempotency_key),
        UNIQUE (conversation_id, position)
    )""",
    "CREATE INDEX submissions_open ON submissions (conversation_id, position) "
    "WHERE status NOT IN ('completed', 'failed', 'aborted', 'joined')",
    "CREATE INDEX submissions_waiting ON submissions (next_attempt_at) "
    "WHERE status IN ('queued', 'active')",
    """CREATE TABLE lanes (
        conversation_id TEXT NOT NULL PRIMARY KEY,
        submission_id TEXT,
        attempt_id TEXT,
        epoch BIGINT NOT NULL,
        worker_id TEXT,
        lease_until DOUBLE PRECISION NOT NULL
    )""",
    """CREATE TABLE durable_steps (
        conversation_id TEXT NOT NULL,
        run_id TEXT NOT NULL,
        tool_call_id TEXT NOT NULL,
        name TEXT NOT NULL,
        version INTEGER NOT NULL,
        epoch BIGINT NOT NULL,
        result TEXT NOT NULL,
        at DOUBLE PRECISION NOT NULL,
        PRIMARY KEY (run_id, tool_call_id, name, version)
    )""",
    """CREATE TABLE aborts (
        abort_id TEXT NOT NULL PRIMARY KEY,
        submission_id TEXT NOT NULL,
        author TEXT NOT NULL,
        reason TEXT NOT NULL,
        at DOUBLE PRECISION NOT NULL
    )""",
    "CREATE INDEX aborts_submission ON aborts (submission_id)",
    """CREATE TABLE durable_audit (
        id BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
        submission_id TEXT,
        conversation_id TEXT NOT NULL,
        epoch BIGINT,
        at DOUBLE PRECISION NOT NULL,
        kind TEXT NOT NULL,
        detail TEXT NOT NULL
    )""",
    "CREATE INDEX durable_audit_submission ON durable_audit (submission_id)",
    "CREATE INDEX durable_audit_kind ON durable_audit (kind)",
    """CREATE TABLE quarantine (
        conversation_id TEXT NOT NULL,
        seq BIGINT NOT NULL,
        reason TEXT NOT NULL,
        at DOUBLE PRECISION NOT NULL,
        PRIMARY KEY (conversation_id, seq)
    )""",
    """CREATE TABLE media (
        digest TEXT NOT NULL PRIMARY KEY,
        size BIGINT NOT NULL,
        data BYTEA NOT NULL,
        put_at DOUBLE PRECISION NOT NULL DEFAULT 0
    )""",
    "CREATE INDEX media_by_put_at ON media (put_at, digest)",
    # The key live text is sealed with on its NOTIFY channel (``_postgres_live``): a role that
    # may connect but not read this schema's tables can neither read nor make up live text.
    # 32 bytes from the server's strong random source (gen_random_uuid), hashed.
    LIVE_KEY_TABLE,
    LIVE_KEY_ROW,
    # SQLite's instr(haystack, needle) — where needle first starts, 0 when it is not there —
    # so the statements of the port that look for a substring are the same on both engines.
    """CREATE FUNCTION instr(haystack TEXT, needle TEXT) RETURNS INTEGER
        LANGUAGE SQL IMMUTABLE STRICT PARALLEL SAFE
        RETURN strpos(haystack, needle)""",
)

_LAYOUT_TABLE: Final = (
    "CREATE TABLE effectagent_layout (application TEXT NOT NULL, version INTEGER NOT NULL)"
)


def _to_v2(conn: psycopg.Connection[tuple[object, ...]]) -> None:
    """Layout 1 → 2: when media bytes were put (0 for those there: long ago), indexed; the live
    text key."""
    conn.execute(b"ALTER TABLE media ADD COLUMN put_at DOUBLE PRECISION NOT NULL DEFAULT 0")
    conn.execute(b"CREATE INDEX media_by_put_at ON media (put_at, digest)")
    conn.execute(LIVE_KEY_TABLE.encode())
    conn.execute(LIVE_KEY_ROW.encode())


#: Upgrade steps: ``UPGRADES[n]`` turns layout ``n`` into ``n + 1`` (inside the open
#: transaction, the schema first on the ``search_path``).
UPGRADES: Final[dict[int, Callable[[psycopg.Connection[tuple[object, ...]]], None]]] = {
    1: _to_v2,
}


@attrs.frozen
class ForeignSchema(ForeignDatabase):
    """The schema holds tables that are not effectagent's (no ``effectagent_layout`` row of
    ours). It was not modified: effectagent only lays out empty schemas and writes its own."""

    application_id: int = 0

    def __str__(self) -> str:
        return (
            f"{self.path} holds another application's tables (no effectagent layout there); it "
            "was left as it is"
        )


def _relations(conn: psycopg.Connection[tuple[object, ...]], schema: str) -> set[str]:
    """The names of the tables, views, sequences and other relations in ``schema``."""
    rows = conn.execute(
        "SELECT c.relname FROM pg_catalog.pg_class c "
        "JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = %s AND c.relkind IN ('r', 'p', 'v', 'm', 'f', 'S')",
        (schema,),
    ).fetchall()
    return {str(row[0]) for row in rows}


def _version(conn: psycopg.Connection[tuple[object, ...]], schema: str, where: str) -> int | None:
    """The layout version of ``schema`` — None when it is empty; raises when it is another
    application's or too new."""
    relations = _relations(conn, schema)
    if not relations:
        return None
    if "effectagent_layout" not in relations:
        raise ForeignSchema(where)
    rows = conn.execute(
        sql.SQL("SELECT application, version FROM {}.effectagent_layout").format(
            sql.Identifier(schema)
        )
    ).fetchall()
    if len(rows) != 1 or rows[0][0] != APPLICATION or not isinstance(rows[0][1], int):
        raise ForeignSchema(where)
    version = rows[0][1]
    if version > LAYOUT_VERSION:
        raise DatabaseTooNew(where, version, LAYOUT_VERSION)
    return version


def prepare(
    conn: psycopg.Connection[tuple[object, ...]],
    schema: str,
    where: str,
    *,
    extra: Sequence[str] = (),
) -> bool:
    """Check that ``schema`` is ours (or empty, or missing) and current; create it, lay it out or
    upgrade it (see the module notes). ``conn`` is in autocommit mode; this runs one transaction
    and leaves the connection idle. ``extra``: statements laid out after :data:`LAYOUT` in an
    empty schema (the search tables). Returns whether it changed anything. Raises
    :class:`ForeignSchema` or :class:`DatabaseTooNew` with nothing changed; ``where`` names the
    schema in them (never with a password)."""
    name = sql.Identifier(schema)
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (LAYOUT_LOCK,))
        exists = conn.execute(
            "SELECT 1 FROM pg_catalog.pg_namespace WHERE nspname = %s", (schema,)
        ).fetchone()
        if exists is None:
            conn.execute(sql.SQL("CREATE SCHEMA {}").format(name))
        version = _version(conn, schema, where)
        if version == LAYOUT_VERSION:
            return exists is None
        conn.execute(sql.SQL("SET LOCAL search_path TO {}").format(name))
        if version is None:
            for statement in (*LAYOUT, *SEARCH_DDL, *extra):
                conn.execute(statement.encode())  # DDL: no parameters
            conn.execute(_LAYOUT_TABLE.encode())
            conn.execute(
                "INSERT INTO effectagent_layout (application, version) VALUES (%s, %s)",
                (APPLICATION, LAYOUT_VERSION),
            )
            return True
        while version < LAYOUT_VERSION:
            UPGRADES[version](conn)
            version += 1
        conn.execute("UPDATE effectagent_layout SET version = %s", (LAYOUT_VERSION,))
        return True
