"""Read-only listings of the durable ledger the queue has no method for yet: the submissions of
a status, the conversations (of a principal), who a conversation belongs to, and the figures
the metrics observe. Each read names only the ``submissions`` table's identifying columns; the
rows themselves are read through :class:`~capabilities.durable.DurableQueue`.
"""

from __future__ import annotations

from typing import Final

import attrs

from ..storage import Database
from ..storage._port import Connection

__all__ = [
    "LedgerFigures",
    "conversations",
    "figures",
    "owner",
    "settled_since",
    "unsettled_before",
    "with_status",
]

_TERMINAL: Final = "('completed', 'failed', 'aborted', 'joined')"


async def with_status(
    database: Database, status: str, *, limit: int, owner: str | None = None
) -> tuple[str, ...]:
    """The IDs of up to ``limit`` submissions in ``status``, the oldest admitted first — of the
    conversations ``owner`` owns (their first submission is its) when given, chosen in the query
    (so others' never crowd its own out of the ``limit``).

    Cancellation: a checkpoint before reading; nothing changes."""

    def read(conn: Connection) -> tuple[str, ...]:
        if owner is None:
            rows = conn.execute(
                "SELECT submission_id FROM submissions WHERE status = ? "
                "ORDER BY admitted_at LIMIT ?",
                (status, limit),
            ).fetchall()
        else:
            rows = conn.execute(
                "SELECT s.submission_id FROM submissions AS s WHERE s.status = ? "
                "AND (SELECT first.principal FROM submissions AS first "
                "     WHERE first.conversation_id = s.conversation_id "
                "     ORDER BY first.position LIMIT 1) = ? "
                "ORDER BY s.admitted_at LIMIT ?",
                (status, owner, limit),
            ).fetchall()
        return tuple(str(row[0]) for row in rows)

    return await database.read(read)


async def owner(database: Database, conversation_id: str) -> str | None:
    """The principal of the conversation's first submission (None: it has none).

    Cancellation: as :func:`with_status`."""

    def read(conn: Connection) -> str | None:
        row = conn.execute(
            "SELECT principal FROM submissions WHERE conversation_id = ? ORDER BY position LIMIT 1",
            (conversation_id,),
        ).fetchone()
        return None if row is None else str(row[0])

    return await database.read(read)


ConversationRow = tuple[str, str, int, str, float]


async def conversations(
    database: Database, principal: str | None, *, limit: int
) -> tuple[ConversationRow, ...]:
    """Up to ``limit`` conversations — of ``principal`` (owned: its first submission is theirs),
    or every one for None — the last submitted to first: (conversation, owner, submissions,
    the last one's status, when it was admitted).

    Cancellation: as :func:`with_status`."""

    def read(conn: Connection) -> tuple[ConversationRow, ...]:
        where = "" if principal is None else "WHERE first.principal = ?"
        params: tuple[object, ...] = (limit,) if principal is None else (principal, limit)
        rows = conn.execute(
            "SELECT first.conversation_id, first.principal, counts.n, last.status, "
            "last.admitted_at FROM submissions AS first "
            "JOIN (SELECT conversation_id, count(*) AS n, max(position) AS top "
            "      FROM submissions GROUP BY conversation_id) AS counts "
            "  ON counts.conversation_id = first.conversation_id "
            "JOIN submissions AS last ON last.conversation_id = first.conversation_id "
            "  AND last.position = counts.top "
            f"WHERE first.position = 1 {where.replace('WHERE', 'AND')} "
            "ORDER BY last.admitted_at DESC LIMIT ?",
            params,
        ).fetchall()
        return tuple((str(c), str(p), int(n), str(s), float(a)) for c, p, n, s, a in rows)

    return await database.read(read)


@attrs.frozen
class LedgerFigures:
    """What the ledger holds at one moment: submissions by status, the oldest queued one's and
    the oldest unsettled one's admission times (None: there is none)."""

    by_status: dict[str, int]
    oldest_queued: float | None
    oldest_unsettled: float | None


async def figures(database: Database) -> LedgerFigures:
    """The ledger's figures now. Cancellation: as :func:`with_status`."""

    def read(conn: Connection) -> LedgerFigures:
        by_status = {
            str(status): int(n)
            for status, n in conn.execute(
                "SELECT status, count(*) FROM submissions GROUP BY status"
            ).fetchall()
        }
        queued = conn.execute(
            "SELECT min(admitted_at) FROM submissions WHERE status = 'queued'"
        ).fetchone()[0]
        unsettled = conn.execute(
            f"SELECT min(admitted_at) FROM submissions WHERE status NOT IN {_TERMINAL}"
        ).fetchone()[0]
        return LedgerFigures(
            by_status,
            None if queued is None else float(queued),
            None if unsettled is None else float(unsettled),
        )

    return await database.read(read)


async def unsettled_before(
    database: Database, admitted_before: float, *, limit: int
) -> tuple[str, ...]:
    """The IDs of up to ``limit`` submissions admitted before ``admitted_before`` and not
    settled, the oldest first. Cancellation: as :func:`with_status`."""

    def read(conn: Connection) -> tuple[str, ...]:
        rows = conn.execute(
            "SELECT submission_id FROM submissions WHERE admitted_at < ? "
            f"AND status NOT IN {_TERMINAL} ORDER BY admitted_at LIMIT ?",
            (admitted_before, limit),
        ).fetchall()
        return tuple(str(row[0]) for row in rows)

    return await database.read(read)


async def settled_since(
    database: Database, since: float, *, limit: int
) -> tuple[tuple[str, float, float, float], ...]:
    """Up to ``limit`` settlements made after ``since`` (wall-clock seconds), the first settled
    first: (status, admitted at, started at or admitted at, settled at).

    Cancellation: as :func:`with_status`."""

    def read(conn: Connection) -> tuple[tuple[str, float, float, float], ...]:
        rows = conn.execute(
            "SELECT status, admitted_at, coalesce(started_at, admitted_at), settled_at "
            "FROM submissions WHERE settled_at > ? AND settlement = 'final' "
            "ORDER BY settled_at LIMIT ?",
            (since, limit),
        ).fetchall()
        return tuple((str(s), float(a), float(b), float(c)) for s, a, b, c in rows)

    return await database.read(read)
