"""What can go wrong with the SQLite store, as typed errors.

Every error names *where* — the database file, the conversation and sequence number of a record —
and never *what*: records, metadata and state may hold user text, so no message carries a stored
value, only identifiers, numbers, type names and the store's own words. ``str()`` of each is a
sentence a person can read.

What the Conversation Log raises from ``append`` and ``entries`` is also the engine's
``ConversationLogError`` (it has ``conversation_id`` and ``seq``): a run that meets it ends failed
with ``StorageFailed``, its conversation and sequence number kept as fields.
"""

from __future__ import annotations

from typing import Final

import attrs

from effectagent.effect import TaggedError
from effectagent.engine import ConversationLogError

from .._rules import ID_BYTES_MOST

__all__ = [
    "CannotOpenDatabase",
    "CommitOutcomeUnknown",
    "ConversationInUse",
    "CorruptRecord",
    "DatabaseBusy",
    "DatabaseInUse",
    "DatabaseTooNew",
    "ForeignDatabase",
    "ID_BYTES_MOST",
    "IdNotStorable",
    "LaneLost",
    "LogClosed",
    "LogGap",
    "LogReadFailed",
    "LogWriteFailed",
    "NotADatabase",
    "RecordNotEncodable",
    "ReadFailed",
    "RecordReadError",
    "StorageClosed",
    "StorageError",
    "UnknownRecordVersion",
    "UnsafeDatabaseFile",
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

    def __str__(self) -> str:
        return f"the database {self.path} cannot be opened: {self.reason}"


@attrs.frozen
class UnsafeDatabaseFile(StorageError):
    """The database path is a symbolic link, not a regular file, or a file another user owns (or
    so is its lock file). SQLite would follow a link and write the history wherever it points, and
    a file another user planted could be read or swapped by them: refused, and left as it is."""

    path: str
    reason: str

    def __str__(self) -> str:
        return f"the database {self.path} was refused: {self.reason}; it was left as it is"


@attrs.frozen
class NotADatabase(StorageError):
    """The file exists but is not an SQLite database. It was not modified."""

    path: str

    def __str__(self) -> str:
        return f"{self.path} is not an SQLite database; it was left as it is"


@attrs.frozen
class ForeignDatabase(StorageError):
    """An SQLite database that another application owns (it has tables, or another application
    id). It was not modified: effectagent only writes to empty databases and to its own."""

    path: str
    application_id: int

    def __str__(self) -> str:
        return (
            f"{self.path} is another application's SQLite database (application id "
            f"{self.application_id}); it was left as it is"
        )


@attrs.frozen
class DatabaseTooNew(StorageError):
    """The database was written by a newer version of effectagent (its layout version is higher
    than this version knows). It was not modified."""

    path: str
    found: int
    supported: int

    def __str__(self) -> str:
        return (
            f"the database {self.path} was written by a newer version of effectagent (layout "
            f"{self.found}; this version reads up to {self.supported}); it was left as it is"
        )


@attrs.frozen
class DatabaseInUse(StorageError):
    """A process holds the database file for itself alone and kept it longer than opening waits:
    an older version of effectagent, which let one process use a file at a time. (Processes of
    this version share a file; see ``_database``.) Retry once that process has exited."""

    path: str
    is_retryable = True

    def __str__(self) -> str:
        return (
            f"the database {self.path} is held for itself alone by another process (an older "
            "version of effectagent): try again once that one has ended"
        )


@attrs.frozen
class StorageClosed(StorageError):
    """The store was closed (its Layer was torn down); nothing more can be written or read."""

    def __str__(self) -> str:
        return "the store is closed: nothing more can be read or written"


# ---- writing --------------------------------------------------------------------------------------


@attrs.frozen
class RecordNotEncodable(StorageError, ConversationLogError):
    """A record of an append does not encode to JSON (a NaN, an object JSON cannot hold). Nothing
    of the append was written. ``index`` is the record's position in the append."""

    conversation_id: str
    index: int
    record_type: str
    reason: str
    seq = None  # the record has no sequence number: it was never stored

    def __str__(self) -> str:
        return (
            f"record {self.index + 1} of an append to conversation {self.conversation_id} (a "
            f"{self.record_type}) cannot be stored: {self.reason}; nothing of the append was "
            "written"
        )


#: The most characters of an ID an error shows (escaped); a longer one is cut, with ``…``.
_SHOWN_CHARS: Final = 64


def _escaped(value: str) -> str:
    """``value`` escaped as ``ascii`` shows it — cut after at most :data:`_SHOWN_CHARS`
    characters of its escaped form, and ``…`` ending it then."""
    shown = ascii(value)
    if len(shown) <= _SHOWN_CHARS + 2:  # the quotes
        return shown
    end = _SHOWN_CHARS
    while end and len(ascii(value[:end])) > _SHOWN_CHARS + 2:
        end -= 1
    cut = ascii(value[:end])
    return f"{cut[:-1]}…{cut[-1]}"


@attrs.frozen
class IdNotStorable(StorageError, ConversationLogError, ValueError):
    """A conversation ID or run ID no database can keep: it holds NUL (PostgreSQL's text
    cannot) or a lone surrogate (it has no UTF-8 form), or — ``too_long`` — it is longer than
    :data:`ID_BYTES_MOST` bytes in UTF-8 (PostgreSQL's index cannot take it). Refused the same
    way on SQLite and PostgreSQL, before anything is read or written; also a ``ValueError`` (an
    invalid argument). A run refuses such an ID when it is asked for (``ValueError``), before
    the log sees it. ``what`` says which ID (``"conversation ID"`` or ``"run ID"``); the message
    shows it escaped, cut after 64 characters when it is longer."""

    conversation_id: str
    what: str = "conversation ID"
    value: str = ""
    too_long: bool = False
    seq = None  # no record is at fault

    def __str__(self) -> str:
        shown = self.value if self.what != "conversation ID" else self.conversation_id
        cut = _escaped(shown)
        if self.too_long:
            return (
                f"the {self.what} {cut} is longer than {ID_BYTES_MOST} bytes in UTF-8, more than "
                "a database index keeps; nothing was read or written"
            )
        return (
            f"the {self.what} {cut} holds NUL or a lone surrogate, which no database can "
            "keep; nothing was read or written"
        )


@attrs.frozen
class WriteFailed(StorageError):
    """SQLite refused the transaction (disk full, I/O error, …). Nothing of the write was
    committed. ``reason`` is SQLite's message, which names no stored value."""

    reason: str
    is_retryable = True

    def __str__(self) -> str:
        return f"the database refused the write ({self.reason}); nothing of it was written"


@attrs.frozen
class CommitOutcomeUnknown(WriteFailed):
    """The connection failed while the transaction was committing (PostgreSQL): it may or may
    not have been written, and it is not run again. A :class:`WriteFailed` whose message says
    the outcome is unknown rather than that nothing was written; ``reason`` says so, with the
    driver's message, which names no stored value."""

    def __str__(self) -> str:
        return self.reason


@attrs.frozen
class LogWriteFailed(WriteFailed, ConversationLogError):
    """An append to the Conversation Log that the database refused (see :class:`WriteFailed`)
    — or, ``unknown``, whose commit's outcome is unknown (:class:`CommitOutcomeUnknown`): it may
    have been written."""

    conversation_id: str
    reason: str
    unknown: bool = attrs.field(default=False, kw_only=True)
    seq = None  # no one record is at fault

    def __str__(self) -> str:
        if self.unknown:
            return f"an append to conversation {self.conversation_id} failed: {self.reason}"
        return (
            f"the database refused an append to conversation {self.conversation_id} "
            f"({self.reason}); nothing of it was written"
        )


@attrs.frozen
class DatabaseBusy(WriteFailed):
    """Other writers kept a write from committing for longer than it waits (bounded retries
    with backoff, ``waited`` seconds in all): on SQLite, another connection held the file's
    write lock (``conflicts`` False); on PostgreSQL, each attempt conflicted with concurrent
    transactions (``conflicts`` True). Nothing of the write was written."""

    waited: float = 0.0
    conflicts: bool = False
    reason: str = attrs.field(default="", init=False)

    def __attrs_post_init__(self) -> None:
        object.__setattr__(
            self,
            "reason",
            f"concurrent transactions kept conflicting with it for {self.waited:.1f} s, as "
            "long as a write runs again"
            if self.conflicts
            else f"another connection, usually another process, kept the write lock for "
            f"{self.waited:.1f} s, as long as a write waits for it",
        )

    def __str__(self) -> str:
        return f"the database refused the write ({self.reason}); nothing of it was written"


@attrs.frozen
class LaneLost(StorageError, ConversationLogError):
    """A write was refused because its writer no longer holds the conversation's lane: another
    holder took it over (with a higher epoch) after this one's lease ran out, or it was released.
    Nothing of the write was written. ``reason`` says which (the fence's own words)."""

    conversation_id: str
    reason: str
    seq = None  # no one record is at fault

    def __str__(self) -> str:
        return (
            f"an append to conversation {self.conversation_id} was refused: {self.reason}; "
            "nothing of it was written"
        )


@attrs.frozen
class ConversationInUse(StorageError, ConversationLogError):
    """The conversation has a run going elsewhere — in another process, or another run on this
    database in this one — which holds its lane; a second run of it is refused, and nothing of
    it is written. ``holder`` names who holds it (``pid-<n>-…`` for a process), ``elsewhere``
    says whether that is another process. Retry once that run has ended."""

    conversation_id: str
    holder: str
    elsewhere: bool = True
    seq = None
    is_retryable = True

    @property
    def where(self) -> str:
        """Where the run that holds it goes: "in another process (process 1234)", or "in this
        process"."""
        if not self.elsewhere:
            return "in this process"
        return f"in another process ({_process_of(self.holder)})"

    def __str__(self) -> str:
        return (
            f"conversation {self.conversation_id} has a run going {self.where}: nothing was "
            "written to it; wait for that run to end"
        )


def _process_of(holder: str) -> str:
    """``pid-1234-ab12…`` as "process 1234"; any other holder's ID as it is."""
    parts = holder.split("-")
    if len(parts) >= 2 and parts[0] == "pid" and parts[1].isdigit():
        return f"process {parts[1]}"
    return holder


@attrs.frozen
class LogClosed(StorageClosed, ConversationLogError):
    """The Conversation Log was used after its store closed (see :class:`StorageClosed`)."""

    conversation_id: str
    seq = None

    def __str__(self) -> str:
        return f"conversation {self.conversation_id} cannot be read or written: the store is closed"


# ---- reading --------------------------------------------------------------------------------------


@attrs.frozen
class ReadFailed(StorageError):
    """SQLite could not read (I/O error, a damaged page). ``reason`` is SQLite's message."""

    reason: str

    def __str__(self) -> str:
        return f"the database could not be read ({self.reason})"


@attrs.frozen
class LogReadFailed(ReadFailed, ConversationLogError):
    """Reading a conversation from the Conversation Log failed (see :class:`ReadFailed`)."""

    conversation_id: str
    reason: str
    seq = None

    def __str__(self) -> str:
        return f"conversation {self.conversation_id} could not be read ({self.reason})"


@attrs.frozen
class RecordReadError(StorageError, ConversationLogError):
    """A stored record cannot be read back; the read fails rather than skip it. Other
    conversations are unaffected."""

    conversation_id: str
    seq: int

    def __str__(self) -> str:
        return f"record {self.seq} of conversation {self.conversation_id} cannot be read"


@attrs.frozen
class CorruptRecord(RecordReadError):
    """The stored record is damaged: its body is not JSON, or does not match its type."""

    detail: str

    def __str__(self) -> str:
        return f"record {self.seq} of conversation {self.conversation_id} is damaged: {self.detail}"


@attrs.frozen
class UnknownRecordVersion(RecordReadError):
    """The record was written by a newer version of effectagent: a record type or a schema
    version this version does not know."""

    record_type: str
    version: int
    supported: int

    def __str__(self) -> str:
        return (
            f"record {self.seq} of conversation {self.conversation_id} was written by a newer "
            f"version of effectagent ({self.record_type} version {self.version}; this version "
            f"reads up to {self.supported})"
        )


@attrs.frozen
class LogGap(RecordReadError):
    """Sequence numbers are missing before ``seq`` (rows were deleted behind the store's back):
    the history is incomplete, so it is not handed out as if it were whole."""

    expected: int

    def __str__(self) -> str:
        missing = (
            f"record {self.expected} is"
            if self.seq - self.expected == 1
            else f"records {self.expected} to {self.seq - 1} are"
        )
        return (
            f"{missing} missing from conversation {self.conversation_id}: its history is incomplete"
        )
