"""The Conversation Log on SQLite (history survives a restart).

It keeps the contract of ``effectagent.engine.ConversationLog`` exactly:

* an append is all-or-nothing, also when its caller is cancelled (see ``_writer``: a cancelled
  append either was never queued, or its transaction is waited for and the append returns);
* sequence numbers are 1-based and gap-free per conversation: each append's numbers are computed
  inside its transaction, after every earlier append's (group commit runs appends in submission
  order, each under its own savepoint);
* records round-trip through the project's schema with a stored type tag and schema version
  (``_codec``); a row that does not read back is a typed error naming its conversation and
  sequence number, never skipped, and never an error for another conversation.

Several processes may write one file, so every append is checked against the conversation's
**lane** (``_lanes``) inside its own transaction, before anything is written:

* a log made with a ``fence`` (the durable runtime's: its worker's claim, ``lane_fence``) runs it
  first; when it raises, the append is refused with :class:`LaneLost` (the fence's words), and
  nothing of it — nor of the steering it would mark delivered — is written;
* a log without one holds the lane for each plain run (``_holds``): the append of a run's input
  claims it (a resumed run, which records no input, claims it as it starts: the runtime tells
  the log, :meth:`SqliteConversationLog.run_started`), the run's later appends must still hold
  it, its terminal record releases it — or, for a run that suspended for approval decisions (no
  record marks that), the run's end (:meth:`SqliteConversationLog.run_ended`); an append is
  refused with :class:`ConversationInUse` while a run elsewhere holds the lane, and
  with :class:`LaneLost` when the run's own hold was taken over.

A run the process was running when it died stays as far as its last append got (recovering it is
the durable runtime's, ``capabilities.durable``); its lane frees itself when its lease runs out.

What was said is searched (:meth:`SqliteConversationLog.search`) on a full-text index
(``_search``) that an append never writes: a search brings it up to date with the log.

Conversations are deleted whole (:meth:`SqliteConversationLog.delete_conversations`, see
``_forget``): their records, what was indexed of them and their queued steering, and — in the
same transaction — the media bytes no remaining record refers to.

An append whose records deliver admitted steering (a ``UserInputRecorded`` of kind steering or
follow-up) marks that input delivered in the same transaction, so an input is never both queued
and canonical (see ``capabilities.steering``).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import Final, final

import trio

from effectagent.core import LogEntry, Record
from effectagent.engine import RunEnding, RunInfo

from .._rules import NOT_STORABLE, storable, strings, too_long_id
from ._codec import EncodedRecord, RecordCodec
from ._errors import (
    ID_BYTES_MOST,
    CommitOutcomeUnknown,
    DatabaseBusy,
    IdNotStorable,
    LaneLost,
    LogClosed,
    LogGap,
    LogReadFailed,
    LogWriteFailed,
    ReadFailed,
    RecordNotEncodable,
    StorageClosed,
    StorageError,
    WriteFailed,
)
from ._forget import Forgotten, forget_conversations
from ._holds import AppendShape, Refuse, decide, shape_of
from ._lanes import Fence, read_lane
from ._port import NO_LIMIT, Connection, Database, driver_error
from ._search import (
    QUICK_TAIL,
    SEARCH_WORDS_MOST,
    SaidFound,
    catch_up,
    find_said,
    look_up,
    word_count,
)
from ._sweep import put_media_rows

__all__ = ["SEARCH_LIMIT_MOST", "SqliteConversationLog", "write_records"]

#: The largest ``limit`` a search passes on (SQLite's and PostgreSQL's largest integer): a larger
#: one is clamped to it — no log holds as many messages, so what is found is the same.
SEARCH_LIMIT_MOST: Final = 2**63 - 1


def checked_id(conversation_id: object) -> str:
    """``conversation_id`` if a database can keep it; ``TypeError`` when it is not a str,
    :class:`IdNotStorable` (a ``ValueError`` and a ``ConversationLogError``) when
    it holds NUL or a lone surrogate, or is longer than :data:`ID_BYTES_MOST` bytes in UTF-8 (as
    a run refuses it) — on either engine, before anything is read or written."""
    if not isinstance(conversation_id, str):
        raise TypeError(f"conversation_id must be a str, got {type(conversation_id).__name__}")
    if not storable(conversation_id):
        raise IdNotStorable(conversation_id)
    if too_long_id(conversation_id):
        raise IdNotStorable(conversation_id, too_long=True)
    return conversation_id


def _checked_runs(conversation_id: str, shape: AppendShape) -> None:
    """Refuse (:class:`IdNotStorable`) the ID of a run an append starts or ends when no
    database can keep it: the run's hold of the lane stores it in a column as the append
    claims or releases the lane (other records carry their run ID in their JSON, which
    keeps any text)."""
    ends = shape.ends[0] if shape.ends is not None else None
    for run_id in (shape.starts, ends):
        if run_id is not None and not storable(run_id):
            raise IdNotStorable(conversation_id, "run ID", run_id)
        if run_id is not None and too_long_id(run_id):
            raise IdNotStorable(conversation_id, "run ID", run_id, too_long=True)


def _records(records: object) -> tuple[Record, ...]:
    """``records`` taken once, as a tuple: an append reads them twice (to encode them and to see
    which run they start or end), and an iterator read twice would be empty the second time —
    its records written, its run's lane never claimed. ``TypeError`` when ``records`` is not an
    iterable of records (a lone str or bytes included)."""
    if isinstance(records, str | bytes | bytearray) or not isinstance(records, Iterable):
        raise TypeError(f"records must be a sequence of records, got {type(records).__name__}")
    return tuple(records)


def _digest(digest: object) -> str:
    """A media digest ``put_media`` may keep: a str a database can keep — in a key, so at most
    :data:`ID_BYTES_MOST` bytes in UTF-8 (PostgreSQL's index refused a longer one, SQLite
    kept it)."""
    if not isinstance(digest, str):
        raise TypeError(f"a media digest must be a str, got {type(digest).__name__}")
    if not digest or not storable(digest) or too_long_id(digest):
        raise ValueError(
            "a media digest must be a non-empty str without NUL or lone surrogates, of at most "
            f"{ID_BYTES_MOST} bytes in UTF-8"
        )
    return digest


def _bytes(data: object) -> bytes:
    """Media bytes ``put_media`` may keep: bytes (a bytearray or memoryview is copied)."""
    if isinstance(data, bytes):
        return data
    if isinstance(data, bytearray | memoryview):
        return bytes(data)
    raise TypeError(f"media bytes must be bytes, got {type(data).__name__}")


def _said(exc: Exception) -> str:
    """What a fence said when it refused: its own sentence, else its kind."""
    text = str(exc).strip()
    return text if text else f"its fence refused it ({type(exc).__name__})"


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


def write_records(conn: Connection, conversation_id: str, rows: list[EncodedRecord]) -> int:
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
    """The canonical, append-only log of every conversation, in an :class:`Database`."""

    __slots__ = ("_codec", "database", "fence")

    def __init__(
        self,
        database: Database,
        codec: RecordCodec | None = None,
        *,
        fence: Fence | None = None,
    ) -> None:
        self.database = database
        self._codec = codec or RecordCodec()
        #: Run inside each append's transaction, before it writes: raises to refuse (see the
        #: module notes). None: plain runs hold their lanes instead.
        self.fence = fence

    def _fenced(self, conversation_id: str, conn: Connection) -> None:
        fence = self.fence
        if fence is None:
            return
        try:
            fence(conn, conversation_id)
        except LaneLost:
            raise
        except Exception as exc:
            if driver_error(exc):  # a failed statement: the write fails, not the fence
                raise
            raise LaneLost(conversation_id, _said(exc)) from None

    def encode(self, conversation_id: str, records: Sequence[Record]) -> list[EncodedRecord]:
        """The stored form of ``records``; raises :class:`RecordNotEncodable` for the first that
        does not encode. Pure (no I/O)."""
        checked_id(conversation_id)
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
                tag, version, body, delivered = encode(record)
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
            if delivered is not None and not storable(delivered):
                delivered = None  # no admitted input has such an ID: none to mark delivered
            rows.append((tag, version, body, delivered))
        return rows

    def append_work(
        self, conversation_id: str, records: Sequence[Record]
    ) -> Callable[[Connection], int]:
        """The write of an append, to run inside another write's transaction (agent state
        committed with its record). Encodes now: raises :class:`RecordNotEncodable` at once.

        The records must neither start nor end a run: the append is only checked against the
        lane (the fence, or the run's hold), which is neither claimed nor released by it; a
        refusal raises :class:`LaneLost` or :class:`ConversationInUse` from the write."""
        records = _records(records)
        rows = self.encode(conversation_id, records)
        runs = shape_of(records).runs
        holds = self.database.holds
        known = holds.held.get(conversation_id)
        me, now = self.database.holder_id, holds.clock()

        def work(conn: Connection) -> int:
            if self.fence is not None:
                self._fenced(conversation_id, conn)
            else:
                lane = read_lane(conn, conversation_id)
                decided = decide(
                    conversation_id, lane, me=me, known=known, shape=AppendShape(runs), now=now
                )
                if isinstance(decided, Refuse):
                    raise decided.error
            return write_records(conn, conversation_id, rows)

        return work

    async def append(self, conversation_id: str, records: Sequence[Record]) -> int:
        """Append ``records`` atomically, in order; return the sequence number of the last one
        (for no records: the conversation's last number, 0 if it has none).

        Raises ``TypeError`` when ``records`` is not an iterable of records (any iterable is
        taken once, as a tuple), :class:`IdNotStorable` for a conversation ID — or, without a
        fence, the ID of a run the records start or end — holding NUL or a lone surrogate or
        longer than 512 bytes in UTF-8, and :class:`RecordNotEncodable`, before anything is
        queued; :class:`LogWriteFailed`
        (a :class:`WriteFailed`) if SQLite refused the transaction (nothing written),
        :class:`LogClosed` (a :class:`StorageClosed`), :class:`LaneLost` when the fence refused
        it or the run's hold of the lane was lost, :class:`ConversationInUse` while a run
        elsewhere holds the lane (see the module notes; nothing written) — each the engine's
        ``ConversationLogError``, naming the conversation.

        Cancellation: all or nothing — if it raises (``Cancelled`` included), none of the records
        was appended; if it returns, all were (a transaction already running is waited for).
        """
        records = _records(records)
        rows = self.encode(conversation_id, records)
        weight, single = max(1, len(rows)), single_statement(rows)
        try:
            if self.fence is None:
                shape = shape_of(records)
                _checked_runs(conversation_id, shape)
                return await self.database.holds.append(
                    conversation_id,
                    shape,
                    lambda conn: write_records(conn, conversation_id, rows),
                    weight=weight,
                    single_statement=single,
                )

            def fenced(conn: Connection) -> int:
                self._fenced(conversation_id, conn)
                return write_records(conn, conversation_id, rows)

            return await self.database.write(fenced, weight=weight, single_statement=single)
        except WriteFailed as exc:
            unknown = isinstance(exc, CommitOutcomeUnknown)
            raise LogWriteFailed(conversation_id, exc.reason, unknown=unknown) from None
        except StorageClosed:
            raise LogClosed(conversation_id) from None

    async def claim(self, conversation_id: str, run_id: str) -> None:
        """Hold the conversation's lane for the run ``run_id`` before it writes anything, so a
        second run is refused before it starts (:class:`ConversationInUse`, nothing written); the
        run's appends then find the lane their own, and its terminal record lets it go (or its
        end, told to :meth:`run_ended`, when it suspended). Claiming
        again for the same run changes nothing. With a ``fence``, the lane is its holder's
        business: nothing happens. Raises :class:`IdNotStorable` for a conversation or run ID
        holding NUL or a lone surrogate or longer than 512 bytes in UTF-8, before anything is
        written.

        Cancellation: all or nothing (one write)."""
        checked_id(conversation_id)
        if not isinstance(run_id, str):
            raise TypeError(f"run_id must be a str, got {type(run_id).__name__}")
        if self.fence is not None:
            await trio.lowlevel.checkpoint()
            return
        _checked_runs(conversation_id, AppendShape(frozenset((run_id,)), run_id))
        try:
            await self.database.holds.claim(conversation_id, run_id)
        except WriteFailed as exc:
            raise LogWriteFailed(conversation_id, exc.reason) from None
        except StorageClosed:
            raise LogClosed(conversation_id) from None

    async def release(self, conversation_id: str, run_id: str) -> None:
        """Let go of the lane held for ``run_id`` if it still is (no terminal record let it go:
        the run suspended for approval decisions, which no record marks, or its terminal record
        could not be written); nothing otherwise. Never raises a storage error: a lane that
        cannot be released frees itself when its lease runs out.

        Cancellation: all or nothing (one write)."""
        try:
            await self.database.holds.release(conversation_id, run_id)
        except Exception as exc:
            if not (isinstance(exc, StorageError) or driver_error(exc)):
                raise

    async def run_started(self, run: RunInfo) -> None:
        """Hold the run's lane (:meth:`claim`; a runtime tells its log, as a ``RunObserver``,
        when each run starts and ends): a new run's input record claimed it already, and a run
        resumed from its records — which writes no input — claims it here, so two processes
        never resume one run at once. Raises :class:`ConversationInUse` (the run fails, nothing
        written) while a run elsewhere holds it.

        Cancellation: all or nothing (one write)."""
        if self.fence is not None:  # the lane is its holder's business
            await trio.lowlevel.checkpoint()
            return
        await self.claim(run.conversation_id, run.run_id)

    async def run_ended(self, run: RunInfo, ending: RunEnding) -> None:
        """The run is over for now: let go of the lane held for it, if it still is
        (:meth:`release`) — a run that suspended wrote no record that would, and another
        runtime, here or in another process, may resume it or run the conversation. Never
        raises a storage error.

        Cancellation: the runtime calls it shielded; all or nothing (one write)."""
        if self.fence is not None:  # the lane is its holder's business
            await trio.lowlevel.checkpoint()
            return
        await self.release(run.conversation_id, run.run_id)

    async def entries(
        self, conversation_id: str, *, after: int = 0, limit: int | None = None
    ) -> Sequence[LogEntry]:
        """The entries with ``seq > after``, in order — at most ``limit`` of them when it is given
        (a page: the next one starts after the last entry of this one), all of them otherwise.

        Raises ``TypeError`` for an ``after`` or ``limit`` that is not an int (an ``after``
        past the largest sequence number finds nothing), :class:`IdNotStorable`
        before anything is read; :class:`UnknownRecordVersion` / :class:`CorruptRecord` /
        :class:`LogGap` naming the conversation and sequence number of the first entry that
        cannot be read whole,
        :class:`LogReadFailed` (a :class:`ReadFailed`) when SQLite cannot read, :class:`LogClosed`
        — each the engine's ``ConversationLogError``.

        Cancellation: a checkpoint before reading; a read in progress finishes. Nothing changes.
        """
        checked_id(conversation_id)
        if type(after) is not int:
            raise TypeError(f"after must be an int, got {type(after).__name__}")
        # Beyond the largest sequence number either database takes, nothing is after it.
        start = min(max(after, 0), NO_LIMIT)
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int)):
            raise TypeError(f"limit must be an int or None, got {type(limit).__name__}")
        if limit is not None and limit < 1:
            raise ValueError(f"limit must be at least 1, got {limit}")
        page = NO_LIMIT if limit is None else min(limit, NO_LIMIT)  # more: every row, too
        decode = self._codec.decode

        def read(conn: Connection) -> list[LogEntry]:
            # Fetched whole before decoding: a row that fails to decode must not leave the
            # statement open (it would hold a read snapshot on the pooled connection).
            rows = conn.execute(
                "SELECT seq, type, version, body FROM records "
                "WHERE conversation_id = ? AND seq > ? ORDER BY seq LIMIT ?",
                (conversation_id, start, page),
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

    async def put_media(self, conversation_id: str, blobs: Mapping[str, bytes]) -> None:
        """Keep the bytes of media parts by SHA-256 digest (``media`` table) for a record of
        ``conversation_id`` about to refer to them; a digest already kept is not written again,
        so bytes attached twice are stored once (by any conversation), but it is stamped as put
        now again. They stay while a record refers to them: a deletion of records
        (:meth:`delete_conversations`) deletes them with the last one, and bytes no record came
        to refer to are swept (``_sweep``: at an open that is alone, or by ``sweep_media`` once
        put longer ago than its grace).

        Raises ``TypeError`` when ``blobs`` is not a mapping of str to bytes, ``ValueError``
        for a digest that is empty, holds NUL or a lone surrogate or is longer than 512 bytes
        in UTF-8 (and
        :class:`IdNotStorable`), before anything is written;
        :class:`WriteFailed` / :class:`StorageClosed` as an append does. Cancellation:
        all or nothing (one write transaction)."""
        checked_id(conversation_id)
        if not isinstance(blobs, Mapping):
            raise TypeError(
                f"blobs must be a mapping of digest to bytes, got {type(blobs).__name__}"
            )
        rows = [(_digest(digest), len(data), _bytes(data)) for digest, data in blobs.items()]
        if not rows:
            return

        def work(conn: Connection) -> None:
            put_media_rows(conn, rows, now=time.time())  # in the work: a retry stamps anew

        await self.database.write(work, weight=len(rows))

    async def media(self, digests: Collection[str]) -> Mapping[str, bytes]:
        """The kept bytes of ``digests`` (a digest not kept — one holding NUL or a lone
        surrogate never is — is left out). ``TypeError`` when
        ``digests`` is not a collection of str (a lone str included).

        Cancellation: as :meth:`entries`."""
        # A digest no database can keep is kept by none: left out, on either engine.
        wanted = [d for d in strings("digests", digests, kind="collection") if storable(d)]

        def read(conn: Connection) -> dict[str, bytes]:
            found: dict[str, bytes] = {}
            for start in range(0, len(wanted), 500):
                chunk = wanted[start : start + 500]
                marks = ", ".join("?" * len(chunk))
                for digest, data in conn.execute(
                    f"SELECT digest, data FROM media WHERE digest IN ({marks})", chunk
                ):
                    found[digest] = bytes(data)
            return found

        return await self.database.read(read)

    async def delete_conversations(self, conversation_ids: Sequence[str]) -> Forgotten:
        """Delete the conversations' records (and what was indexed of them, and their queued
        steering) and, in the same transaction, the media bytes no remaining record refers to —
        bytes another conversation still refers to stay (see ``_forget``). A conversation with
        no records is no error.

        Raises :class:`ConversationInUse` while one of them has a run going (nothing deleted),
        :class:`WriteFailed` / :class:`StorageClosed` as a write does; ``TypeError`` when
        ``conversation_ids`` is not a sequence of str — a lone str included (taken letter by
        letter, ``"abc"`` would delete ``"a"``, ``"b"`` and ``"c"``) — and
        :class:`IdNotStorable`, before anything is deleted. Cancellation: all or
        nothing (one write transaction)."""
        ids = [checked_id(c) for c in strings("conversation_ids", conversation_ids)]
        codec, now = self._codec, time.time()
        return await self.database.write(
            lambda conn: forget_conversations(conn, ids, now=now, codec=codec),
            weight=max(1, len(ids)),
        )

    async def last_seq(self, conversation_id: str) -> int:
        """The conversation's last sequence number (0 if it has no records). Refuses a
        ``conversation_id`` as :meth:`entries` does.

        Cancellation: as :meth:`entries`."""
        checked_id(conversation_id)

        def read(conn: Connection) -> int:
            found = conn.execute(
                "SELECT max(seq) FROM records WHERE conversation_id = ?", (conversation_id,)
            ).fetchone()
            return int(found[0] or 0)

        return await self.database.read(read)

    async def conversations(self) -> tuple[str, ...]:
        """Every conversation with at least one record, in no particular order.

        Cancellation: as :meth:`entries`."""

        def read(conn: Connection) -> tuple[str, ...]:
            return tuple(
                row[0] for row in conn.execute("SELECT DISTINCT conversation_id FROM records")
            )

        return await self.database.read(read)

    async def search(self, words: Sequence[str], *, limit: int) -> SaidFound:
        """The ``limit`` messages written last, in every conversation, that hold every one of
        ``words`` (whole words, any case; what a person said and the model's text answers: see
        ``_search``), the last written first, and how many conversations were searched. A word
        is matched as written, never read as query syntax; NUL and lone surrogates in it
        separate words, as punctuation does; one of punctuation alone is left out, and when no
        word is left nothing is found.

        What it finds is what the log holds at one moment: the index, and the messages
        appended since the index was last brought up to date, matched in memory. A search that
        meets such messages brings the index up to date with them (one write transaction,
        waiting for another process's write lock as the database's busy policy says); when more
        than ``QUICK_TAIL`` records wait (the first search of a long log), it does so before it
        searches. When the write lock stays busy past the policy's bound, the search still
        answers, from the index and the newest messages appended since
        (``SaidFound.unsearched`` counts older ones it left out: see ``_search``). On
        PostgreSQL the index is kept by the database as records are written (``_search_postgres``):
        a search reads it and nothing else, and is never behind the log.

        Raises :class:`ReadFailed` when the database cannot be read, :class:`WriteFailed` when it cannot
        write the index (busy excepted), :class:`StorageClosed`; ``TypeError`` when ``words`` is
        not a sequence of strings (a lone string included: it would be searched letter by letter)
        or ``limit`` not an int, ``ValueError`` when ``limit`` is below 1 or the words are more
        than :data:`~._search.SEARCH_WORDS_MOST` (1,000; ``e-mail`` counts as two) — before
        anything is read. A ``limit`` above :data:`SEARCH_LIMIT_MOST` (2**63 - 1, the largest integer either
        database takes) is clamped to it, not refused: no log holds as many messages.

        Cancellation: a checkpoint before each step; cancelled while the index is brought up to
        date, that write either never ran or was committed whole (and the search then raises
        ``Cancelled`` at its next checkpoint) — never half of it."""
        # NUL and lone surrogates separate words, as any character that is not a word
        # character does — on both engines (neither could take them as query text).
        words = tuple(NOT_STORABLE.sub(" ", word) for word in strings("words", words))
        if word_count(words) > SEARCH_WORDS_MOST:
            raise ValueError(
                f"a search takes at most {SEARCH_WORDS_MOST} words (e-mail counts as two), got more"
            )
        if type(limit) is not int:
            raise TypeError(f"limit must be an int, got {type(limit).__name__}")
        if limit < 1:
            raise ValueError(f"limit must be at least 1, got {limit}")
        limit = min(limit, SEARCH_LIMIT_MOST)  # beyond it: an OverflowError, a bigint error
        read = self.database.read
        if self.database.dialect == "postgresql":  # indexed by PostgreSQL as records are written
            from ._search_postgres import find_said_pg

            return await read(lambda conn: find_said_pg(conn, words, limit))
        found, waiting = await read(lambda conn: look_up(conn, words, limit, within=QUICK_TAIL))
        if waiting:  # appended since the last search: indexed now, for the next one
            # Busy: answered from the index as it is and what was appended since.
            with contextlib.suppress(DatabaseBusy):
                await self.database.write(catch_up)
        if found is None:  # too much was waiting to match in memory: searched once caught up
            found = await read(lambda conn: find_said(conn, words, limit))
        return found
