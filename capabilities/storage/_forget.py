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

Bytes put for a record that was never appended (a run that failed in between) are referred to
by no record; they stay until the file is compacted by hand (``effectagent`` has no sweep of
them yet).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

import attrs

from effectagent.core import ToolCallSettled, ToolSuccess, UserInputRecorded

from ._codec import RecordCodec
from ._errors import ConversationInUse, CorruptRecord, UnknownRecordVersion
from ._lanes import read_lane, same_process
from ._port import Connection, dialect_of

__all__ = ["Forgotten", "forget_conversations", "record_digests"]

#: The statuses of a durable submission that will write no more (``_layout_durable``).
_SETTLED: Final = "('completed', 'failed', 'aborted', 'joined')"
#: The record types that may refer to media.
_IN_CARRIERS: Final = "('UserInputRecorded', 'ToolCallSettled')"


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


def _digests_in(
    codec: RecordCodec, rows: Iterable[tuple[str, int, str, int, str]], wanted: str | None = None
) -> set[str] | bool:
    """The digests the rows' records refer to — or, with ``wanted``, whether one refers to it
    (a row that does not decode counts as referring to it)."""
    found: set[str] = set()
    for conversation_id, seq, tag, version, body in rows:
        try:
            digests = record_digests(codec.decode(conversation_id, seq, tag, version, body))
        except (CorruptRecord, UnknownRecordVersion):
            if wanted is not None:
                return True
            continue
        if wanted is not None and wanted in digests:
            return True
        found.update(digests)
    return False if wanted is not None else found


def _queued_input_needs(conn: Connection, digest: str) -> bool:
    """Whether input not yet delivered — steering still queued, a durable submission not settled
    (of another conversation: the deleted ones' were refused or removed above) — names
    ``digest`` in its parts: its bytes stay for it. A substring match: when in doubt, kept."""
    steering = conn.execute(
        "SELECT 1 FROM steering_inputs WHERE status = 'queued' AND parts IS NOT NULL "
        "AND instr(parts, ?) > 0 LIMIT 1",
        (digest,),
    ).fetchone()
    if steering is not None:
        return True
    submission = conn.execute(
        f"SELECT 1 FROM submissions WHERE status NOT IN {_SETTLED} AND parts IS NOT NULL "
        "AND instr(parts, ?) > 0 LIMIT 1",
        (digest,),
    ).fetchone()
    return submission is not None


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
        found = _digests_in(codec, rows)
        assert isinstance(found, set)
        candidates |= found
        records += conn.execute(
            "DELETE FROM records WHERE conversation_id = ?", (conversation_id,)
        ).rowcount
        if dialect_of(conn) == "sqlite":  # its search index's marks (PostgreSQL's is kept)
            conn.execute("DELETE FROM said_marks WHERE conversation_id = ?", (conversation_id,))
        conn.execute("DELETE FROM steering_inputs WHERE conversation_id = ?", (conversation_id,))
    media = 0
    for digest in sorted(candidates):
        if _queued_input_needs(conn, digest):
            continue
        holding = conn.execute(
            "SELECT conversation_id, seq, type, version, body FROM records "
            f"WHERE type IN {_IN_CARRIERS} AND instr(body, ?) > 0",
            (digest,),
        )
        with contextlib.closing(holding):  # it may stop at the first row: end the statement
            referred = _digests_in(codec, holding, digest)
        if not referred:
            media += conn.execute("DELETE FROM media WHERE digest = ?", (digest,)).rowcount
    return Forgotten(len(ids), records, media)
