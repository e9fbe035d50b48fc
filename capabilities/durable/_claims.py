"""How a worker claims: a read first, which finds whether anything waits (nothing: no write);
then one write on SQLite; on PostgreSQL, free lanes with ``SKIP LOCKED`` and takeovers of expired
leases serializably, each only when the read found one to make (see ``_store``'s module notes)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import trio

from .._logging import log_warning
from ..storage import Database
from ..storage._port import Connection
from ._store import Claimed, claim, claim_free, claimable

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
    conversations in ``exclude``; nothing is written when a read finds nothing to claim
    (``_store.claimable``). ``attempt_ids`` must not run out (a write may run more than once).
    Raises what the read or the first write raises; a failed takeover write after a successful
    first one is logged, and what the first claimed returned.

    Cancellation: the read and the first write as ``Database.read``/``write`` (what a write
    committed is returned); a second write is shielded, so the claims of the first are never lost
    to a cancellation."""
    postgres = database.dialect == "postgresql"
    free, expired = await database.read(lambda conn: claimable(conn, now=now, exclude=exclude))
    if not free and not expired:
        return []  # an idle look writes nothing
    if postgres and not free:
        return await _takeovers(database, [], now, worker_id, lease, limit, attempt_ids, exclude)

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
    if not postgres or not expired or len(claimed) >= limit:
        return claimed
    return await _takeovers(database, claimed, now, worker_id, lease, limit, attempt_ids, exclude)


async def _takeovers(
    database: Database,
    claimed: list[Claimed],
    now: float,
    worker_id: str,
    lease: float,
    limit: int,
    attempt_ids: Iterator[str],
    exclude: Sequence[str],
) -> list[Claimed]:
    """PostgreSQL: ``claimed`` (what the free-lane write claimed) and the takeovers of expired
    leases a second write makes, up to ``limit`` in all. Raises what that write raises when it
    is the only one; after a first, a failure is logged and ``claimed`` returned."""
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

    if not claimed:  # the only write of this look: as cancellable as any
        return await database.write(takeovers)
    more: list[Claimed] = []
    try:
        # Shielded (bounded by the database's retry bound): cancelled here, the lanes the first
        # write claimed would be held by nobody who knows it until their leases ran out.
        with trio.CancelScope(shield=True):
            more = await database.write(takeovers)
    except Exception as exc:  # the next poll tries again
        log_warning("durable takeover claim failed", error=type(exc).__name__)
    return claimed + more
