"""Putting media bytes, and sweeping the bytes nothing refers to.

Media bytes (images, documents, audio) are kept once per SHA-256 digest in the ``media`` table,
and they are put *before* what refers to them is written: the log's ``put_media`` before the
record that names them is appended (another transaction), steering and durable submissions in
the transaction that admits the input (:func:`put_media_rows`, the one statement all three use).
Deleting conversations deletes the bytes no remaining record refers to (``_forget``); bytes put
for something that was never written — a run that failed between its put and its append,
steering that expired, a durable submission aborted before it ran — are referred to by nothing
and would stay forever. This sweeps them.

Every put stamps the row with ``put_at`` (seconds since the epoch; rows of layouts before it
have 0: long ago), and a put of a digest already kept stamps it again (never back in time): the
bytes are about to be referred to anew. A sweep deletes the rows put before a moment ``before``
that nothing refers to — no record (decoded), no steering still queued, no durable submission
not settled (``_forget.referred_digests``; when in doubt, kept). What makes that safe is the
choice of ``before``:

* at an open that is alone (``_recovery``), ``before`` is now: no other process has the
  database open, so nobody is between a put and its append;
* otherwise (:func:`sweep_media`, for deployments where no opener is ever alone) ``before`` is
  ``grace`` seconds ago: bytes put more recently may be about to be referred to. A put whose
  record is appended more than ``grace`` seconds later may find its bytes swept — the grace must
  exceed the longest time between a put and its append (the engine puts bytes right before it
  appends the record that refers to them: well under a second, but for a stalled database).
  Wall clocks: on PostgreSQL, the clocks of the machines that put and of the one that sweeps
  should agree to well within it.

Cost: a sweep reads, once and page by page, every record of a kind that carries media (a user
input, a tool call settled) whose body holds a digest, and decodes it (a few candidates are
searched for one by one instead: ``_forget.FEW_DIGESTS``) — for its candidates only: bytes a
sweep found a record referring to are marked (``put_at`` :data:`KEPT_FOR_RECORDS`) and are no
candidates again until they are put again, since a record refers to its bytes until its
conversation is deleted (``_forget`` decides about the bytes then). So an open that is alone
examines the bytes put since the last sweep, and those queued input held, not the whole history.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Collection, Iterable
from typing import Final

from ._codec import RecordCodec
from ._forget import referrers
from ._port import Connection, Database

__all__ = [
    "DEFAULT_GRACE",
    "KEPT_FOR_RECORDS",
    "examine_media",
    "PUT_MEDIA",
    "put_media_rows",
    "sweep_media",
    "sweep_unreferenced",
]

#: How long ago bytes must have been put for :func:`sweep_media` to delete them, by default.
DEFAULT_GRACE: Final = 3600.0

#: The statement that puts one digest's bytes (kept once), stamping ``put_at`` — again, forward
#: only, when the digest is kept already.
PUT_MEDIA: Final = (
    "INSERT INTO media (digest, size, data, put_at) VALUES (?, ?, ?, ?) "
    "ON CONFLICT (digest) DO UPDATE SET put_at = CASE WHEN excluded.put_at > media.put_at "
    "THEN excluded.put_at ELSE media.put_at END"
)

#: Digests per ``IN (…)`` list (well under either engine's limit on parameters).
_CHUNK: Final = 500


def put_media_rows(conn: Connection, rows: Iterable[tuple[str, int, bytes]], *, now: float) -> None:
    """Put media bytes — ``(digest, size, bytes)`` rows — inside the caller's write transaction,
    stamped ``now``: a digest kept already keeps its bytes and is stamped again."""
    conn.executemany(PUT_MEDIA, [(digest, size, data, now) for digest, size, data in rows])


def _chunks(values: Collection[str]) -> Iterable[list[str]]:
    ordered = sorted(values)
    for start in range(0, len(ordered), _CHUNK):
        yield ordered[start : start + _CHUNK]


#: ``put_at`` of bytes a sweep found a record referring to: never a candidate again until put
#: again (a record refers to its bytes until its conversation is deleted, and ``_forget`` deals
#: with the bytes then).
KEPT_FOR_RECORDS: Final = -1.0


def examine_media(
    conn: Connection,
    *,
    before: float,
    among: Collection[str] | None = None,
    codec: RecordCodec | None = None,
    stamped_only: bool = False,
) -> tuple[set[str], set[str]]:
    """Of the digests put before ``before`` (of ``among``, when given) and not found referred to
    by a record at an earlier sweep: those nothing refers to, and those a record refers to (see
    the module notes). ``stamped_only``: leave out bytes whose put is not stamped (``put_at``
    0: put before the column, or by a process of an older version still running — its record
    may be about to follow); only an open that is alone takes those. Reads only."""
    low = "put_at > 0" if stamped_only else "put_at >= 0"
    if among is None:
        candidates = {
            str(digest)
            for (digest,) in conn.execute(
                f"SELECT digest FROM media WHERE {low} AND put_at < ?", (before,)
            ).fetchall()
        }
    else:
        candidates = set()
        for chunk in _chunks(among):
            marks = ", ".join("?" * len(chunk))
            candidates.update(
                str(digest)
                for (digest,) in conn.execute(
                    f"SELECT digest FROM media WHERE {low} AND put_at < ? AND digest IN ({marks})",
                    (before, *chunk),
                ).fetchall()
            )
    if not candidates:
        return set(), set()
    undelivered, by_records = referrers(conn, candidates, codec=codec)
    return candidates - undelivered - by_records, by_records


def sweep_unreferenced(
    conn: Connection,
    *,
    before: float,
    among: Collection[str] | None = None,
    codec: RecordCodec | None = None,
    stamped_only: bool = False,
) -> int:
    """Delete the media rows put before ``before`` (of ``among``, when given) that nothing
    refers to, and mark those a record refers to (:data:`KEPT_FOR_RECORDS`: the next sweep
    reads no record for them), inside the caller's write transaction; return how many it
    deleted."""
    gone, kept = examine_media(
        conn, before=before, among=among, codec=codec, stamped_only=stamped_only
    )
    _mark_kept(conn, kept, before)
    return _delete(conn, gone, before)


def _mark_kept(conn: Connection, digests: Collection[str], before: float) -> None:
    for chunk in _chunks(digests):
        marks = ", ".join("?" * len(chunk))
        conn.execute(
            f"UPDATE media SET put_at = ? WHERE put_at >= 0 AND put_at < ? AND digest IN ({marks})",
            (KEPT_FOR_RECORDS, before, *chunk),
        )


def _delete(conn: Connection, digests: Collection[str], before: float) -> int:
    deleted = 0
    for chunk in _chunks(digests):
        marks = ", ".join("?" * len(chunk))
        # put_at checked again: bytes put anew since they were examined stay
        deleted += conn.execute(
            f"DELETE FROM media WHERE put_at >= 0 AND put_at < ? AND digest IN ({marks})",
            (before, *chunk),
        ).rowcount
    return deleted


async def sweep_media(
    database: Database,
    *,
    grace: float = DEFAULT_GRACE,
    clock: Callable[[], float] = time.time,
) -> int:
    """Delete the media bytes put more than ``grace`` seconds ago that nothing refers to — no
    record, no steering still queued, no durable submission not settled — and return how many
    digests' bytes it deleted. For long-running deployments, where no opener is ever alone (an
    open that is alone sweeps by itself): call it now and then. ``grace`` must exceed the
    longest time between bytes being put and the record that refers to them being appended (see
    the module notes). Bytes whose put was never stamped (put before layout 6 / PostgreSQL
    layout 2, or by a process of an older version still running) are left to an open that is
    alone.

    The digests to delete are found on a read snapshot, then checked again and deleted in one
    write transaction (so the write holds no lock while every record is read). Raises
    ``ValueError`` for a negative or non-finite ``grace``; ``WriteFailed``/``ReadFailed`` as a
    write or a read does. Cancellation: all or nothing (one write transaction)."""
    if isinstance(grace, bool) or not isinstance(grace, (int, float)):
        raise TypeError(f"grace must be a number of seconds, got {type(grace).__name__}")
    if not math.isfinite(grace) or grace < 0:
        raise ValueError(f"grace must be a finite number of seconds, at least 0, got {grace!r}")
    before = clock() - grace
    codec = RecordCodec()
    found, kept = await database.read(
        lambda conn: examine_media(conn, before=before, codec=codec, stamped_only=True)
    )
    if not found and not kept:
        return 0

    def sweep(conn: Connection) -> int:
        _mark_kept(conn, kept, before)  # a record refers to these: no one reads them again
        return sweep_unreferenced(conn, before=before, among=found, codec=codec, stamped_only=True)

    return await database.write(sweep, weight=len(found) + len(kept))
