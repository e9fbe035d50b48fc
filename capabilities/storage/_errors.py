"""What can go wrong with the SQLite store, as typed errors.

Every error names *where* — the database file, the conversation and sequence number of a record —
and never *what*: records, metadata and state may hold user text, so no message carries a stored
value, only identifiers, numbers, type names and the store's own words.
"""

from __future__ import annotations

import attrs

from effectagent.effect import TaggedError

__all__ = [
    "CannotOpenDatabase",
    "CorruptRecord",
    "DatabaseInUse",
    "DatabaseTooNew",
    "ForeignDatabase",
    "LogGap",
    "NotADatabase",
    "RecordNotEncodable",
    "ReadFailed",
    "RecordReadError",
    "StorageClosed",
    "StorageError",
    "UnknownRecordVersion",
    "WriteFailed",
]


@attrs.frozen
class StorageError(TaggedError):
    """Base of every error of the SQLite store."""


# ---- opening --------------------------------------------------------------------------------------


@attrs.frozen
class CannotOpenDatabase(StorageError):
    """SQLite could not open the file (missing directory, no permission, a directory …)."""

    path: str
    reason: str


@attrs.frozen
class NotADatabase(StorageError):
    """The file exists but is not an SQLite database. It was not modified."""

    path: str


@attrs.frozen
class ForeignDatabase(StorageError):
    """An SQLite database that another application owns (it has tables, or another application
    id). It was not modified: effectagent only writes to empty databases and to its own."""

    path: str
    application_id: int


@attrs.frozen
class DatabaseTooNew(StorageError):
    """The database was written by a newer version of effectagent (its layout version is higher
    than this version knows). It was not modified."""

    path: str
    found: int
    supported: int


@attrs.frozen
class DatabaseInUse(StorageError):
    """Another process has the database open: one process owns a database file at a time
    (deployment class P is one node, one process). Retry once that process has exited."""

    path: str
    is_retryable = True


@attrs.frozen
class StorageClosed(StorageError):
    """The store was closed (its Layer was torn down); nothing more can be written or read."""


# ---- writing --------------------------------------------------------------------------------------


@attrs.frozen
class RecordNotEncodable(StorageError):
    """A record of an append does not encode to JSON (a NaN, an object JSON cannot hold). Nothing
    of the append was written. ``index`` is the record's position in the append."""

    conversation_id: str
    index: int
    record_type: str
    reason: str


@attrs.frozen
class WriteFailed(StorageError):
    """SQLite refused the transaction (disk full, I/O error, …). Nothing of the write was
    committed. ``reason`` is SQLite's message, which names no stored value."""

    reason: str
    is_retryable = True


# ---- reading --------------------------------------------------------------------------------------


@attrs.frozen
class ReadFailed(StorageError):
    """SQLite could not read (I/O error, a damaged page). ``reason`` is SQLite's message."""

    reason: str


@attrs.frozen
class RecordReadError(StorageError):
    """A stored record cannot be read back; the read fails rather than skip it. Other
    conversations are unaffected."""

    conversation_id: str
    seq: int


@attrs.frozen
class CorruptRecord(RecordReadError):
    """The stored record is damaged: its body is not JSON, or does not match its type."""

    detail: str


@attrs.frozen
class UnknownRecordVersion(RecordReadError):
    """The record was written by a newer version of effectagent: a record type or a schema
    version this version does not know."""

    record_type: str
    version: int
    supported: int


@attrs.frozen
class LogGap(RecordReadError):
    """Sequence numbers are missing before ``seq`` (rows were deleted behind the store's back):
    the history is incomplete, so it is not handed out as if it were whole."""

    expected: int
