"""The Conversation Log on SQLite (deployment class P: history survives a restart).

It keeps the contract of ``effectagent.engine.ConversationLog`` exactly:

* an append is all-or-nothing, also when its caller is cancelled (see ``_writer``: a cancelled
  append either was never queued, or its transaction is waited for and the append returns);
* sequence numbers are 1-based and gap-free per conversation: each append's numbers are computed
  inside its transaction, after every earlier append's (group commit runs appends in submission
  order, each under its own savepoint);
* records round-trip through the project's schema with a stored type tag and schema version
  (``_codec``); a row that does not read back is a typed error naming its conversation and
  sequence number, never skipped, and never an error for another conversation.

What it does not give (that is deployment class DN, which will build on this store): a settlement
for every accepted submission, fenced attempts, recovery of runs that were going. A run the process
was running when it died stays as far as its last append got.

An append whose records deliver admitted steering (a ``UserInputRecorded`` of kind steering or
follow-up) marks that input delivered in the same transaction, so an input is never both queued
and canonical (see ``capabilities.steering``).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from typing import final

from effectagent.core import LogEntry, Record

from ._codec import EncodedRecord, RecordCodec
from ._database import SqliteDatabase
from ._errors import (
    LogClosed,
    LogGap,
    LogReadFailed,
    LogWriteFailed,
    ReadFailed,
    RecordNotEncodable,
    StorageClosed,
    WriteFailed,
)

__all__ = ["SqliteConversationLog", "write_records"]


#: ``INSERT`` statements of n rows (one statement: atomic without a savepoint), by n.
_INSERTS: dict[int, str] = {}
#: The most rows one ``INSERT`` takes (SQLite allows 32,766 parameters, 5 per row).
_MAX_ROWS = 1_000


def _insert(rows: int) -> str:
    sql = _INSERTS.get(rows)
    if sql is None:
        values = ", ".join(["(?, ?, ?, ?, ?)"] * rows)
        sql = _INSERTS[rows] = (
            f"INSERT INTO records (conversation_id, seq, type, version, body) VALUES {values}"
        )
    return sql


def write_records(conn: sqlite3.Connection, conversation_id: str, rows: list[EncodedRecord]) -> int:
    """Insert encoded records after the conversation's last one; return the last sequence
    number. Runs inside a write transaction (in the worker thread).

    An append of at most ``_MAX_ROWS`` records delivering no steering is one ``INSERT``, its only
    change (see :func:`single_statement`); a longer one, or one delivering steering, runs under
    its write's savepoint."""
    found = conn.execute(
        "SELECT seq FROM records WHERE conversation_id = ? ORDER BY seq DESC LIMIT 1",
        (conversation_id,),
    ).fetchone()
    last = found[0] if found is not None else 0
    if not rows:
        return last
    params = [
        (conversation_id, last + i, tag, version, body)
        for i, (tag, version, body, _) in enumerate(rows, 1)
    ]
    if len(params) <= _MAX_ROWS:
        conn.execute(_insert(len(params)), [value for row in params for value in row])
    else:
        conn.executemany(_insert(1), params)
    for i, (_, _, _, delivered) in enumerate(rows, 1):
        if delivered is not None:
            conn.execute(
                "UPDATE steering_inputs SET status = 'delivered', seq = ?, text = NULL "
                "WHERE input_id = ? AND status = 'queued'",
                (last + i, delivered),
            )
    return last + len(rows)


def single_statement(rows: list[EncodedRecord]) -> bool:
    """Whether :func:`write_records` changes the database with one statement for ``rows``."""
    return len(rows) <= _MAX_ROWS and all(delivered is None for *_, delivered in rows)


@final
class SqliteConversationLog:
    """The canonical, append-only log of every conversation, in an :class:`SqliteDatabase`."""

    __slots__ = ("_codec", "database")

    def __init__(self, database: SqliteDatabase, codec: RecordCodec | None = None) -> None:
        self.database = database
        self._codec = codec or RecordCodec()

    def encode(self, conversation_id: str, records: Sequence[Record]) -> list[EncodedRecord]:
        """The stored form of ``records``; raises :class:`RecordNotEncodable` for the first that
        does not encode. Pure (no I/O)."""
        if not isinstance(conversation_id, str):
            raise TypeError(f"conversation_id must be a str, got {type(conversation_id).__name__}")
        encode = self._codec.encode
        rows: list[EncodedRecord] = []
        for index, record in enumerate(records):
            if not self._codec.is_record(record):
                raise RecordNotEncodable(
                    conversation_id,
                    index,
                    type(record).__qualname__,
                    "it is not a canonical record type (a member of effectagent.core.Record)",
                )
            try:
                rows.append(encode(record))
            except (TypeError, ValueError, RecursionError) as exc:
                # The encoder's own message may quote the value: only its kind is kept.
                reason = (
                    "it is nested too deeply"
                    if isinstance(exc, RecursionError)
                    else f"it holds a value JSON cannot represent ({type(exc).__name__})"
                )
                raise RecordNotEncodable(
                    conversation_id, index, type(record).__qualname__, reason
                ) from None
        return rows

    def append_work(
        self, conversation_id: str, records: Sequence[Record]
    ) -> Callable[[sqlite3.Connection], int]:
        """The write of an append, to run inside another write's transaction (agent state
        committed with its record). Encodes now: raises :class:`RecordNotEncodable` at once."""
        rows = self.encode(conversation_id, records)
        return lambda conn: write_records(conn, conversation_id, rows)

    async def append(self, conversation_id: str, records: Sequence[Record]) -> int:
        """Append ``records`` atomically, in order; return the sequence number of the last one
        (for no records: the conversation's last number, 0 if it has none).

        Raises :class:`RecordNotEncodable` before anything is queued, :class:`LogWriteFailed`
        (a :class:`WriteFailed`) if SQLite refused the transaction (nothing written),
        :class:`LogClosed` (a :class:`StorageClosed`) — each the engine's
        ``ConversationLogError``, naming the conversation.

        Cancellation: all or nothing — if it raises (``Cancelled`` included), none of the records
        was appended; if it returns, all were (a transaction already running is waited for).
        """
        rows = self.encode(conversation_id, records)
        try:
            return await self.database.write(
                lambda conn: write_records(conn, conversation_id, rows),
                weight=max(1, len(rows)),
                single_statement=single_statement(rows),
            )
        except WriteFailed as exc:
            raise LogWriteFailed(conversation_id, exc.reason) from None
        except StorageClosed:
            raise LogClosed(conversation_id) from None

    async def entries(self, conversation_id: str, *, after: int = 0) -> Sequence[LogEntry]:
        """The entries with ``seq > after``, in order.

        Raises :class:`UnknownRecordVersion` / :class:`CorruptRecord` / :class:`LogGap` naming
        the conversation and sequence number of the first entry that cannot be read whole,
        :class:`LogReadFailed` (a :class:`ReadFailed`) when SQLite cannot read, :class:`LogClosed`
        — each the engine's ``ConversationLogError``.

        Cancellation: a checkpoint before reading; a read in progress finishes. Nothing changes.
        """
        if not isinstance(conversation_id, str):
            raise TypeError(f"conversation_id must be a str, got {type(conversation_id).__name__}")
        start = max(int(after), 0)
        decode = self._codec.decode

        def read(conn: sqlite3.Connection) -> list[LogEntry]:
            # Fetched whole before decoding: a row that fails to decode must not leave the
            # statement open (it would hold a read snapshot on the pooled connection).
            rows = conn.execute(
                "SELECT seq, type, version, body FROM records "
                "WHERE conversation_id = ? AND seq > ? ORDER BY seq",
                (conversation_id, start),
            ).fetchall()
            out: list[LogEntry] = []
            expected = start + 1
            for seq, tag, version, body in rows:
                if seq != expected:
                    raise LogGap(conversation_id, seq, expected)
                out.append(LogEntry(seq, decode(conversation_id, seq, tag, version, body)))
                expected += 1
            return out

        try:
            return await self.database.read(read)
        except ReadFailed as exc:
            raise LogReadFailed(conversation_id, exc.reason) from None
        except StorageClosed:
            raise LogClosed(conversation_id) from None

    async def last_seq(self, conversation_id: str) -> int:
        """The conversation's last sequence number (0 if it has no records).

        Cancellation: as :meth:`entries`."""

        def read(conn: sqlite3.Connection) -> int:
            found = conn.execute(
                "SELECT max(seq) FROM records WHERE conversation_id = ?", (conversation_id,)
            ).fetchone()
            return int(found[0] or 0)

        return await self.database.read(read)

    async def conversations(self) -> tuple[str, ...]:
        """Every conversation with at least one record, in no particular order.

        Cancellation: as :meth:`entries`."""

        def read(conn: sqlite3.Connection) -> tuple[str, ...]:
            return tuple(
                row[0] for row in conn.execute("SELECT DISTINCT conversation_id FROM records")
            )

        return await self.database.read(read)
