"""The durable runtime's tables (``capabilities.durable``), added by layout version 2 of the
effectagent database (``_layout``: ``UPGRADES[1]`` runs :data:`DURABLE_TABLES`, and a new database
gets them directly).

* ``submissions`` — the ledger: one row per admitted submission, its idempotency key (unique per
  principal and conversation) and payload digest, its FIFO position in its conversation, its
  status, run, attempts, the settlement reserved or final and its bounded outcome. Its input is
  kept until it is settled (the log then holds the canonical, redacted copy).
* ``lanes`` — per conversation: who holds it (submission, attempt, worker), under which epoch
  (monotonic, never reused, kept when released) and until when (the lease). A free lane has no
  worker and a lease of 0. ``_lanes`` (claim, renew, release, the fence) and the plain runs'
  holds build on these columns.
* ``durable_steps`` — a tool call's durable steps' results, by run, call, name and version, with
  the epoch of the lane that wrote them.
* ``aborts`` — abort commands, by ID (an abort given twice is one).
* ``durable_audit`` — what recovery and settlement decided, and why.
* ``quarantine`` — records that could not be read; their conversation is set aside.
"""

from __future__ import annotations

from typing import Final

__all__ = ["DURABLE_TABLES"]

#: The statements that add the tables (run in the layout's upgrade transaction).
DURABLE_TABLES: Final[tuple[str, ...]] = (
    """CREATE TABLE submissions (
        submission_id TEXT NOT NULL PRIMARY KEY,
        principal TEXT NOT NULL,
        conversation_id TEXT NOT NULL,
        idempotency_key TEXT NOT NULL,
        payload_digest TEXT NOT NULL,
        agent TEXT NOT NULL,
        input TEXT,
        mode TEXT NOT NULL,
        position INTEGER NOT NULL,
        status TEXT NOT NULL,
        run_id TEXT NOT NULL,
        attempts INTEGER NOT NULL,
        next_attempt_at REAL NOT NULL,
        admitted_at REAL NOT NULL,
        started_at REAL,
        settled_at REAL,
        settlement TEXT,
        reserved TEXT,
        outcome TEXT,
        joined_into TEXT,
        base_seq INTEGER,
        UNIQUE (principal, conversation_id, idempotency_key),
        UNIQUE (conversation_id, position)
    ) WITHOUT ROWID""",
    "CREATE INDEX submissions_open ON submissions (conversation_id, position) "
    "WHERE status NOT IN ('completed', 'failed', 'aborted', 'joined')",
    "CREATE INDEX submissions_waiting ON submissions (next_attempt_at) "
    "WHERE status IN ('queued', 'active')",
    """CREATE TABLE lanes (
        conversation_id TEXT NOT NULL PRIMARY KEY,
        submission_id TEXT,
        attempt_id TEXT,
        epoch INTEGER NOT NULL,
        worker_id TEXT,
        lease_until REAL NOT NULL
    ) WITHOUT ROWID""",
    """CREATE TABLE durable_steps (
        conversation_id TEXT NOT NULL,
        run_id TEXT NOT NULL,
        tool_call_id TEXT NOT NULL,
        name TEXT NOT NULL,
        version INTEGER NOT NULL,
        epoch INTEGER NOT NULL,
        result TEXT NOT NULL,
        at REAL NOT NULL,
        PRIMARY KEY (run_id, tool_call_id, name, version)
    ) WITHOUT ROWID""",
    """CREATE TABLE aborts (
        abort_id TEXT NOT NULL PRIMARY KEY,
        submission_id TEXT NOT NULL,
        author TEXT NOT NULL,
        reason TEXT NOT NULL,
        at REAL NOT NULL
    ) WITHOUT ROWID""",
    "CREATE INDEX aborts_submission ON aborts (submission_id)",
    """CREATE TABLE durable_audit (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        submission_id TEXT,
        conversation_id TEXT NOT NULL,
        epoch INTEGER,
        at REAL NOT NULL,
        kind TEXT NOT NULL,
        detail TEXT NOT NULL
    )""",
    "CREATE INDEX durable_audit_submission ON durable_audit (submission_id)",
    "CREATE INDEX durable_audit_kind ON durable_audit (kind)",
    """CREATE TABLE quarantine (
        conversation_id TEXT NOT NULL,
        seq INTEGER NOT NULL,
        reason TEXT NOT NULL,
        at REAL NOT NULL,
        PRIMARY KEY (conversation_id, seq)
    ) WITHOUT ROWID""",
)
