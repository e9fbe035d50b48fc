"""How a worker claims: one write on SQLite; on PostgreSQL, free lanes with ``SKIP LOCKED``
then takeovers of expired leases serializably (see ``_store``'s module notes)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import trio

from .._logging import log_warning
from ..storage import Database
from ..storage._port import Connection
from ._store import Claimed, claim, claim_free

__all__ = ["claim_lanes"]


async def claim_lanes(
    database: Database,
    *,
    now: float,
    worker_id: str,
    lease: float,
    limit: int,
    attempt_ids: Iterator[str],
    exclude: Sequence[str] = (),
) -> list[Claimed]:
    """Claim up to ``limit`` due FIFO heads for ``worker_id`` (``_store.claim``), skipping the
    conversations in ``exclude``. ``attempt_ids`` must not run out (a write may run more than
    once). Raises what the first write raises; a failed takeover write after a successful
    first one is logged, and what the first claimed returned.

    Cancellation: the first write as ``Database.write`` (what it committed is returned); the
    second is shielded, so the claims of the first are never lost to a cancellation."""
    postgres = database.dialect == "postgresql"

    def first(conn: Connection) -> list[Claimed]:
        return (claim_free if postgres else claim)(
            conn,
            now=now,
            worker_id=worker_id,
            lease=lease,
            limit=limit,
            attempt_ids=attempt_ids,
            exclude=exclude,
        )

    claimed = await database.write(first)
    if not postgres or len(claimed) >= limit:
        return claimed
    taken = tuple(exclude) + tuple(c.lane.conversation_id for c in claimed)

    def takeovers(conn: Connection) -> list[Claimed]:
        return claim(
            conn,
            now=now,
            worker_id=worker_id,
            lease=lease,
            limit=limit - len(claimed),
            attempt_ids=attempt_ids,
            exclude=taken,
            takeovers_only=True,
        )

    more: list[Claimed] = []
    try:
        # Shielded (bounded by the database's retry bound): cancelled here, the lanes the first
        # write claimed would be held by nobody who knows it until their leases ran out.
        with trio.CancelScope(shield=True):
            more = await database.write(takeovers)
    except Exception as exc:  # the next poll tries again
        log_warning("durable takeover claim failed", error=type(exc).__name__)
    return claimed + more
