"""Reading a submission's run from the log, a page at a time, inside a read or write transaction.

Used by recovery (the log tail of a claimed submission), settlement (its terminal record, the
inputs it absorbed, its Unknown outcomes), abort and decide (in their own transactions), and the
operations. Pages are :data:`PAGE` records; a record that cannot be decoded stops the reading
and is reported by its sequence number (recovery quarantines the conversation).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

from effectagent.core import LogEntry

from ..storage._codec import RecordCodec
from ..storage._errors import CorruptRecord, UnknownRecordVersion
from ..storage._port import Connection
from ._facts import FactsFolder

__all__ = ["PAGE", "Undecodable", "fold_run", "read_page"]

#: Records read per query.
PAGE: Final = 256

_codec = RecordCodec()


class Undecodable(Exception):
    """A record of the conversation cannot be decoded (damaged, or written by a newer
    version)."""

    def __init__(self, conversation_id: str, seq: int, reason: str) -> None:
        super().__init__(
            f"record {seq} of conversation {conversation_id!r} cannot be read: {reason}"
        )
        self.conversation_id = conversation_id
        self.seq = seq
        self.reason = reason


def read_page(
    conn: Connection, conversation_id: str, after: int, limit: int = PAGE
) -> list[LogEntry]:
    """Up to ``limit`` entries of the conversation after sequence number ``after``, in order.
    Raises :class:`Undecodable` for the first that does not decode."""
    rows = conn.execute(
        "SELECT seq, type, version, body FROM records WHERE conversation_id = ? AND seq > ? "
        "ORDER BY seq LIMIT ?",
        (conversation_id, after, limit),
    ).fetchall()
    entries: list[LogEntry] = []
    for seq, tag, version, body in rows:
        try:
            record = _codec.decode(conversation_id, seq, tag, version, body)
        except (CorruptRecord, UnknownRecordVersion) as exc:
            raise Undecodable(conversation_id, seq, str(exc)) from None
        entries.append(LogEntry(seq, record))
    return entries


def fold_run(
    conn: Connection,
    conversation_id: str,
    run_id: str,
    base_seq: int,
    watched: Iterable[str] = (),
) -> tuple[FactsFolder, int | None]:
    """Fold every record after ``base_seq`` (the run's) into a :class:`FactsFolder`; return it
    and the sequence number of a record that could not be decoded (None: all were read)."""
    folder = FactsFolder(run_id, watched)
    after = base_seq
    while True:
        try:
            page = read_page(conn, conversation_id, after)
        except Undecodable as exc:
            return folder, exc.seq
        for entry in page:
            folder.add(entry)
        if len(page) < PAGE:
            return folder, None
        after = page[-1].seq
