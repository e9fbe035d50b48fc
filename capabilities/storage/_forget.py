"""Deleting conversations from the SQLite storage: their records, what was indexed of them, their
queued steering — and, in the same transaction, the media bytes no remaining record refers to.

A person who deletes a conversation (or a session with its conversations) expects its images
gone from the file. Media bytes are kept once per digest and may be shared by conversations, so
a digest the deleted records referred to is deleted only when no record left refers to it. That
is found by the records themselves (no reference table to keep in step): the records of the
kinds that carry media (a user input's parts, a tool success's media) whose body holds the
digest's text are decoded, and the digest is kept when one of them refers to it — a body that
merely quotes the digest does not keep it, and one that cannot be decoded does (when in doubt,
bytes are kept, never a reference left without its bytes). Bytes that input not yet delivered
names (steering still queued, a durable submission not settled, of another conversation) stay
for it too.

A conversation with a run going (its lane held under a live lease, by this process or another)
or a durable submission not settled (queued, retrying, suspended: it would write to it) is
refused with :class:`ConversationInUse`, and nothing is deleted. A settled durable submission's
row stays (with its idempotency key: ``capabilities.durable``). Its lane row stays: a lane's
epochs are never reused, so a conversation created again under the same ID starts after them.

Bytes put for a record that was never appended (a run that failed in between, steering that
expired, a durable submission aborted before it ran) are referred to by nothing; ``_sweep``
deletes them, with the same test of what still refers to bytes (:func:`referred_digests`): at
an open that is alone, and when ``capabilities.storage.sweep_media`` is called.
"""

from __future__ import annotations

import contextlib
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any, Final

import attrs

from effectagent.core import ToolCallSettled, ToolSuccess, UserInputRecorded

from ._codec import RecordCodec
from ._errors import ConversationInUse, CorruptRecord, UnknownRecordVersion
from ._lanes import read_lane, same_process
from ._port import Connection, dialect_of

__all__ = [
    "FEW_DIGESTS",
    "Forgotten",
    "forget_conversations",
    "record_digests",
    "referred_digests",
    "referrers",
]

#: The statuses of a durable submission that will write no more (``_layout_durable``).
_SETTLED: Final = "('completed', 'failed', 'aborted', 'joined')"
#: The record types that may refer to media.
_IN_CARRIERS: Final = "('UserInputRecorded', 'ToolCallSettled')"
#: The parts of input not yet delivered: steering still queued, durable submissions not settled.
_UNDELIVERED_PARTS: Final = (
    "SELECT parts FROM steering_inputs WHERE status = 'queued' AND parts IS NOT NULL",
    f"SELECT parts FROM submissions WHERE status NOT IN {_SETTLED} AND parts IS NOT NULL",
)
#: How every digest effectagent makes starts (``effectagent.ai``'s media parts).
_DIGEST_MARK: Final = "sha256:"
#: Up to this many digests are looked for in the records one by one; more, in one pass.
FEW_DIGESTS: Final = 16
#: Records read at once by the one pass.
_PAGE: Final = 500


@attrs.frozen
class Forgotten:
    """What a deletion removed: ``records`` of ``conversations``, and ``media`` digests whose
    bytes no remaining record referred to."""

    conversations: int
    records: int
    media: int


def record_digests(record: object) -> tuple[str, ...]:
    """The media digests ``record`` refers to (a user input's parts, a tool success's media).
    Pure."""
    values: Iterable[Any]
    if isinstance(record, UserInputRecorded):
        values = (v for k, v in record.parts if k == "media")
    elif isinstance(record, ToolCallSettled) and isinstance(record.outcome, ToolSuccess):
        values = record.outcome.media
    else:
        return ()
    return tuple(
        v["digest"] for v in values if isinstance(v, Mapping) and isinstance(v.get("digest"), str)
    )


def _digests_in(codec: RecordCodec, rows: Iterable[tuple[str, int, str, int, str]]) -> set[str]:
    """The digests the rows' records refer to (a row that does not decode is passed over)."""
    found: set[str] = set()
    for conversation_id, seq, tag, version, body in rows:
        try:
            found.update(record_digests(codec.decode(conversation_id, seq, tag, version, body)))
        except (CorruptRecord, UnknownRecordVersion):
            continue
    return found


def _referred(
    codec: RecordCodec, rows: Iterable[tuple[str, int, str, int, str]], wanted: Collection[str]
) -> set[str]:
    """Which of ``wanted`` the rows' records refer to — a row that does not decode refers to
    each of them its body holds (when in doubt, kept). Stops reading once all of them are."""
    found: set[str] = set()
    for conversation_id, seq, tag, version, body in rows:
        try:
            record = codec.decode(conversation_id, seq, tag, version, body)
        except (CorruptRecord, UnknownRecordVersion):
            found.update(d for d in wanted if d in body)
        else:
            found.update(d for d in record_digests(record) if d in wanted)
        if len(found) == len(wanted):
            break
    return found


def _records_refer(conn: Connection, codec: RecordCodec, digests: Collection[str]) -> set[str]:
    """Which of ``digests`` a record refers to. A few are looked for one by one (a search of the
    records' text each); more, in one pass over every record of a kind that carries media and
    holds a digest, page by page."""
    wanted = set(digests)
    found: set[str] = set()
    if len(wanted) <= FEW_DIGESTS:
        for digest in sorted(wanted):
            holding = conn.execute(
                "SELECT conversation_id, seq, type, version, body FROM records "
                f"WHERE type IN {_IN_CARRIERS} AND instr(body, ?) > 0",
                (digest,),
            )
            with contextlib.closing(holding):  # it may stop at the first row: end the statement
                found |= _referred(codec, holding, (digest,))
        return found
    # Every digest effectagent makes starts with its algorithm: only bodies holding one matter.
    marker = _DIGEST_MARK if all(d.startswith(_DIGEST_MARK) for d in wanted) else ""
    after: tuple[str, int] = ("", -1)
    while len(found) < len(wanted):
        rows = conn.execute(
            "SELECT conversation_id, seq, type, version, body FROM records "
            f"WHERE type IN {_IN_CARRIERS} AND instr(body, ?) > 0 "
            "AND (conversation_id > ? OR (conversation_id = ? AND seq > ?)) "
            "ORDER BY conversation_id, seq LIMIT ?",
            (marker, after[0], after[0], after[1], _PAGE),
        ).fetchall()
        if not rows:
            break
        found |= _referred(codec, rows, wanted - found)
        after = (rows[-1][0], rows[-1][1])
    return found


def _undelivered_refer(conn: Connection, digests: Collection[str]) -> set[str]:
    """Which of ``digests`` input not yet delivered — steering still queued, a durable
    submission not settled — names in its parts: its bytes stay for it. A substring match: when
    in doubt, kept. (Such input is short-lived: its parts are read whole.)"""
    texts = [
        str(parts)
        for statement in _UNDELIVERED_PARTS
        for (parts,) in conn.execute(statement).fetchall()
    ]
    return {d for d in digests if any(d in text for text in texts)}


def referred_digests(
    conn: Connection, digests: Collection[str], *, codec: RecordCodec | None = None
) -> set[str]:
    """Which of ``digests`` something still refers to: a record (decoded: a body that merely
    quotes a digest does not refer to it, one that cannot be decoded refers to each digest it
    holds), steering still queued or a durable submission not settled. Their bytes must stay;
    the others' may go. Runs inside the caller's transaction; reads only."""
    undelivered, by_records = referrers(conn, digests, codec=codec)
    return undelivered | by_records


def referrers(
    conn: Connection, digests: Collection[str], *, codec: RecordCodec | None = None
) -> tuple[set[str], set[str]]:
    """:func:`referred_digests`, told apart: those input not yet delivered refers to (for a
    while), and the others of them a record refers to (until its conversation is deleted)."""
    wanted = set(digests)
    if not wanted:
        return set(), set()
    undelivered = _undelivered_refer(conn, wanted)
    rest = wanted - undelivered
    by_records = _records_refer(conn, codec or RecordCodec(), rest) if rest else set()
    return undelivered, by_records


def forget_conversations(
    conn: Connection,
    conversation_ids: Sequence[str],
    *,
    now: float,
    codec: RecordCodec | None = None,
) -> Forgotten:
    """Delete the conversations' records, indexed text and queued steering, and the media bytes
    no remaining record refers to. Runs inside a write transaction (the caller's: a session's
    row may go in the same one). Raises :class:`ConversationInUse` — before deleting anything —
    when one of them has a run going."""
    codec = codec or RecordCodec()
    ids = list(dict.fromkeys(conversation_ids))
    for conversation_id in ids:
        lane = read_lane(conn, conversation_id)
        if lane is not None and lane.held(now):
            holder = lane.worker_id or ""
            raise ConversationInUse(conversation_id, holder, elsewhere=not same_process(holder))
        waiting = conn.execute(
            "SELECT submission_id FROM submissions WHERE conversation_id = ? "
            f"AND status NOT IN {_SETTLED} LIMIT 1",
            (conversation_id,),
        ).fetchone()
        if waiting is not None:  # a durable run queued or suspended: it would write to it
            raise ConversationInUse(conversation_id, f"durable submission {waiting[0]}")
    candidates: set[str] = set()
    records = 0
    for conversation_id in ids:
        rows = conn.execute(
            "SELECT conversation_id, seq, type, version, body FROM records "
            f"WHERE conversation_id = ? AND type IN {_IN_CARRIERS} "
            "AND instr(body, 'sha256:') > 0",
            (conversation_id,),
        ).fetchall()
        candidates |= _digests_in(codec, rows)
        records += conn.execute(
            "DELETE FROM records WHERE conversation_id = ?", (conversation_id,)
        ).rowcount
        if dialect_of(conn) == "sqlite":  # its search index's marks (PostgreSQL's is kept)
            conn.execute("DELETE FROM said_marks WHERE conversation_id = ?", (conversation_id,))
        conn.execute("DELETE FROM steering_inputs WHERE conversation_id = ?", (conversation_id,))
    needed = referred_digests(conn, candidates, codec=codec)
    media = 0
    for digest in sorted(candidates - needed):
        media += conn.execute("DELETE FROM media WHERE digest = ?", (digest,)).rowcount
    return Forgotten(len(ids), records, media)
