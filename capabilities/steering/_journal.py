"""Where admitted inputs are written down: in memory, or in the SQLite database.

The SQLite journal persists each admission before its receipt is returned, and the SQLite log
marks an input delivered in the very transaction that records it as canonical (see
``capabilities.storage``), so an input is never both waiting and recorded. Its text stays in the
table only until then: delivered or expired, it is cleared (the log keeps the canonical, redacted
copy). Input with media admitted for a run another process is running keeps its parts beside it
(references by digest, in ``_parts``' form) and its bytes in the ``media`` table, put in the
transaction that admits it; the bytes stay as the log's media do.

Processes share the SQLite journal. Each input is stored under the epoch of its conversation's
lane (the run's hold, ``capabilities.storage._lanes``) and a position the database gives it — one
more than the last of that epoch, in the order admissions commit — so inputs admitted by several
processes for one run have one FIFO order. :meth:`SqliteJournal.admit_elsewhere` admits input for
a run another process is running (its lane is held), :meth:`SqliteJournal.waiting` is how the
process running it finds such input; a lane that is released or taken over expires what is still
queued under it. The in-memory journal reads the log to tell which inputs a run recorded, and keeps the
statuses of a conversation only as long as the log keeps it: over the engine's in-memory log,
whose retention evicts idle conversations, a conversation's statuses go with it (``status`` then
answers None, as for an input never accepted here).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Container, Mapping, Sequence
from typing import Final, Literal, Protocol, final

import attrs
import trio

from effectagent.core import UserInputRecorded
from effectagent.engine import ConversationLog, InMemoryConversationLog, SteeringInput

from .._logging import log_warning
from .._rules import stored_text
from ..storage import Database
from ..storage._lanes import process_prefix
from ..storage._port import Connection
from ..storage._sweep import put_media_rows
from ._admission import Entry
from ._model import InputState, InputStatus, Rejection, SteeringLimits
from ._parts import content_of, digests_of, read_media, stored

__all__ = ["AdmissionJournal", "InMemoryJournal", "SqliteJournal"]

_DELIVERY_KINDS: Final = ("steering", "follow-up")


def _unchanged(text: str) -> str:
    return text


class AdmissionJournal(Protocol):
    """Persists admissions and what became of them."""

    @property
    def durable(self) -> bool:
        """Whether an admission survives the process once :meth:`admitted` returned."""
        ...

    async def admitted(
        self, entry: Entry, *, room: int | None = None, known: Container[str] = ()
    ) -> int | Literal["queue-full"] | None:
        """Write down an accepted input; return the position it was stored at when the journal
        gives positions (None: the entry's own stands). A journal other processes share also
        counts the input they admitted for the conversation's run that is not among ``known``
        (not yet adopted here): more of it than ``room`` and nothing is written —
        ``"queue-full"``. Cancellation: all or nothing."""
        ...

    async def settle(
        self, conversation_id: str, taken: Sequence[Entry], queued: Sequence[Entry], reason: str
    ) -> None:
        """The conversation's last run ended: ``queued`` expire with ``reason``; ``taken`` are
        delivered if the log recorded them, else expire. Cancellation: all or nothing."""
        ...

    async def status(self, input_id: str) -> InputStatus | None:
        """What became of an accepted input. Cancellation: nothing changes."""
        ...

    async def withdraw(self, entry: Entry) -> None:
        """Take back an admission :meth:`admitted` wrote that no run will take (its run ended, or
        began ending, while it was written): its receipt is a rejection, and no status is kept.
        Cancellation: all or nothing."""
        ...


def _status(entry: Entry, state: InputState, seq: int | None, reason: str) -> InputStatus:
    item = entry.input
    return InputStatus(
        item.input_id,
        entry.conversation_id,
        item.kind,
        item.author,
        item.at,
        state,
        seq,
        reason,
    )


@final
class InMemoryJournal:
    """Statuses in a dict; deliveries are read from the Conversation Log when asked about. Over
    an :class:`~effectagent.engine.InMemoryConversationLog` a conversation's statuses are
    forgotten when the log evicts the conversation."""

    __slots__ = ("_by_conversation", "_log", "_statuses")

    durable = False

    def __init__(self, log: ConversationLog) -> None:
        self._log = log
        self._statuses: dict[str, InputStatus] = {}
        # The inputs of each conversation, to forget them with it.
        self._by_conversation: dict[str, list[str]] = {}
        if isinstance(log, InMemoryConversationLog):
            log.on_evicted(self._forget)

    def _forget(self, conversation_id: str) -> None:
        for input_id in self._by_conversation.pop(conversation_id, ()):
            self._statuses.pop(input_id, None)

    async def admitted(
        self, entry: Entry, *, room: int | None = None, known: Container[str] = ()
    ) -> int | Literal["queue-full"] | None:
        """See :meth:`AdmissionJournal.admitted` (no checkpoint: nothing to wait for; no other
        process admits here, so ``room`` is never short)."""
        input_id = entry.input.input_id
        self._statuses[input_id] = _status(entry, "queued", None, "")
        self._by_conversation.setdefault(entry.conversation_id, []).append(input_id)
        return None

    async def settle(
        self, conversation_id: str, taken: Sequence[Entry], queued: Sequence[Entry], reason: str
    ) -> None:
        """See :meth:`AdmissionJournal.settle`."""
        delivered = await self._delivered(conversation_id) if taken else {}
        for entry in taken:
            seq = delivered.get(entry.input.input_id)
            if seq is None:
                self._statuses[entry.input.input_id] = _status(entry, "expired", None, reason)
            else:
                self._statuses[entry.input.input_id] = _status(entry, "delivered", seq, "")
        for entry in queued:
            self._statuses[entry.input.input_id] = _status(entry, "expired", None, reason)
        log = self._log
        if isinstance(log, InMemoryConversationLog) and not log.has(conversation_id):
            self._forget(conversation_id)  # evicted as its run ended: nothing to keep it for

    async def withdraw(self, entry: Entry) -> None:
        """See :meth:`AdmissionJournal.withdraw` (no checkpoint: nothing to wait for)."""
        input_id = entry.input.input_id
        self._statuses.pop(input_id, None)
        ids = self._by_conversation.get(entry.conversation_id, [])
        if input_id in ids:
            ids.remove(input_id)

    async def status(self, input_id: str) -> InputStatus | None:
        """See :meth:`AdmissionJournal.status`."""
        found = self._statuses.get(input_id)
        if found is None or found.state != "queued":
            await trio.lowlevel.checkpoint()
            return found
        seq = (await self._delivered(found.conversation_id)).get(input_id)
        if seq is None:
            return found
        delivered = attrs.evolve(found, state="delivered", seq=seq)
        self._statuses[input_id] = delivered
        return delivered

    async def _delivered(self, conversation_id: str) -> dict[str, int]:
        return {
            entry.record.input_id: entry.seq
            for entry in await self._log.entries(conversation_id)
            if type(entry.record) is UserInputRecorded and entry.record.kind in _DELIVERY_KINDS
        }


_COLUMNS: Final = "input_id, conversation_id, kind, author, at, status, seq, reason"


def _held_epoch(conn: Connection, conversation_id: str) -> int | None:
    """The epoch of the conversation's lane while someone holds it (None: nobody does)."""
    found = conn.execute(
        "SELECT epoch FROM lanes WHERE conversation_id = ? AND worker_id IS NOT NULL",
        (conversation_id,),
    ).fetchone()
    return None if found is None else int(found[0])


def _next_position(conn: Connection, conversation_id: str, epoch: int | None) -> int:
    """One more than the last position stored under ``epoch`` in the conversation."""
    # (``epoch IS ?`` is SQLite's null-safe comparison; PostgreSQL has no such form.)
    found = (
        conn.execute(
            "SELECT max(position) FROM steering_inputs WHERE conversation_id = ? AND epoch IS NULL",
            (conversation_id,),
        )
        if epoch is None
        else conn.execute(
            "SELECT max(position) FROM steering_inputs WHERE conversation_id = ? AND epoch = ?",
            (conversation_id, epoch),
        )
    ).fetchone()
    return int(found[0] or 0) + 1


def _with_media(conn: Connection, item: SteeringInput, parts: str) -> SteeringInput | None:
    """``item`` with the content its row's ``parts`` stand for, the bytes read from the
    ``media`` table — None (logged) when they cannot be: bytes gone, or parts that do not fit."""
    try:
        content = content_of(item.text, parts, read_media(conn, digests_of(parts)))
    except (ValueError, TypeError, KeyError) as exc:
        log_warning("steering input left undelivered", input_id=item.input_id, error=str(exc))
        return None
    return attrs.evolve(item, content=content)


@final
class SqliteJournal:
    """Admissions in the ``steering_inputs`` table of an :class:`Database`."""

    __slots__ = ("database",)

    durable = True

    def __init__(self, database: Database) -> None:
        self.database = database

    async def admitted(
        self, entry: Entry, *, room: int | None = None, known: Container[str] = ()
    ) -> int | Literal["queue-full"] | None:
        """See :meth:`AdmissionJournal.admitted`: committed before it returns, under the epoch of
        the conversation's lane, at the next position of that epoch (see the module notes) —
        unless other processes admitted more than ``room`` inputs under it that wait and are
        not ``known`` here (the queue is the conversation's, whoever admits)."""
        item = entry.input
        row = (
            item.input_id,
            entry.conversation_id,
            item.kind,
            stored_text(item.text),  # the run here takes it whole, from memory
            item.author,
            item.at,
        )
        own = entry.position

        def work(conn: Connection) -> int | Literal["queue-full"]:
            epoch = _held_epoch(conn, entry.conversation_id)
            if room is not None and epoch is not None:
                waiting = conn.execute(
                    "SELECT input_id FROM steering_inputs WHERE conversation_id = ? "
                    "AND status = 'queued' AND epoch = ?",
                    (entry.conversation_id, epoch),
                ).fetchall()
                if sum(1 for (input_id,) in waiting if input_id not in known) > room:
                    return "queue-full"
            position = max(own, _next_position(conn, entry.conversation_id, epoch))
            conn.execute(
                "INSERT INTO steering_inputs (input_id, conversation_id, position, kind, text, "
                "author, at, status, seq, reason, epoch) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, 'queued', NULL, '', ?)",
                (*row[:2], position, *row[2:], epoch),
            )
            return position

        return await self.database.write(work)

    async def admit_elsewhere(
        self,
        conversation_id: str,
        item: SteeringInput,
        limits: SteeringLimits,
        *,
        redact: Callable[[str], str] = _unchanged,
    ) -> int | Rejection:
        """Admit ``item`` for the run another process (or another runtime on this database) is
        running in the conversation: accepted — its position returned — only while the
        conversation's lane is held, and its queue under that lane has room. Input with media
        is kept with its parts (names and URLs redacted with ``redact``) and, in the same
        transaction, the bytes of its media parts in the ``media`` table (see ``_parts``).

        Cancellation: all or nothing (one write)."""
        now = time.time()
        text, parts, media = item.text, None, []
        if item.content is not None:
            text, parts, blobs = stored(item.content, redact)
            media = [(digest, len(data), data) for digest, data in blobs.items()]
        # NUL and lone surrogates, which no text column keeps, reach the run as U+FFFD.
        text = stored_text(text)

        def work(conn: Connection) -> int | Rejection:
            lane = conn.execute(
                "SELECT epoch FROM lanes WHERE conversation_id = ? AND worker_id IS NOT NULL "
                "AND lease_until > ?",
                (conversation_id, now),
            ).fetchone()
            if lane is None:
                return "no-active-run"
            epoch = int(lane[0])
            waiting = conn.execute(
                "SELECT count(*) FROM steering_inputs WHERE conversation_id = ? "
                "AND status = 'queued' AND epoch = ?",
                (conversation_id, epoch),
            ).fetchone()[0]
            if waiting >= limits.max_pending:
                return "queue-full"
            position = _next_position(conn, conversation_id, epoch)
            if media:  # the bytes first, by digest (kept once), as the log's ``put_media``
                put_media_rows(conn, media, now=now)
            conn.execute(
                "INSERT INTO steering_inputs (input_id, conversation_id, position, kind, text, "
                "author, at, status, seq, reason, epoch, parts) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, 'queued', NULL, '', ?, ?)",
                (
                    item.input_id,
                    conversation_id,
                    position,
                    item.kind,
                    text,
                    item.author,
                    item.at,
                    epoch,
                    parts,
                ),
            )
            return position

        return await self.database.write(work, weight=1 + len(media))

    async def waiting(
        self, conversation_ids: Sequence[str], *, skip: Container[str] = ()
    ) -> Mapping[str, Sequence[tuple[SteeringInput, int]]]:
        """Input queued for the runs going in this process in ``conversation_ids`` (under the
        epoch of the lane a holder of this process — ``pid-<pid>-<token>-…``: its plain runs' database,
        or a durable worker — holds for each), with their positions, in FIFO order; those in
        ``skip`` (known here already) left out. Input with media comes with its content, the
        bytes read from the ``media`` table; one whose bytes are gone is left out (and logged),
        to expire with its run's lane.

        Cancellation: a checkpoint before reading; nothing changes."""
        holders = f"{process_prefix()}%"  # (its token tells it from a same-pid process elsewhere)
        ids = tuple(conversation_ids)

        def read(conn: Connection) -> dict[str, list[tuple[SteeringInput, int]]]:
            found: dict[str, list[tuple[SteeringInput, int]]] = {}
            marks = ", ".join("?" * len(ids))
            rows = conn.execute(
                "SELECT s.conversation_id, s.input_id, s.kind, s.text, s.author, s.at, "
                "s.position, s.parts "
                "FROM steering_inputs s JOIN lanes l ON l.conversation_id = s.conversation_id "
                f"WHERE s.conversation_id IN ({marks}) AND s.status = 'queued' "
                "AND l.worker_id LIKE ? AND s.epoch = l.epoch ORDER BY s.position",
                (*ids, holders),
            ).fetchall()
            for conversation_id, input_id, kind, text, author, at, position, parts in rows:
                if input_id in skip:
                    continue
                item = SteeringInput(input_id, kind, text or "", author, at)
                if parts is not None:
                    with_media = _with_media(conn, item, parts)
                    if with_media is None:
                        continue  # left queued: it expires with its run's lane
                    item = with_media
                found.setdefault(conversation_id, []).append((item, int(position)))
            return found

        if not ids:
            return {}
        return await self.database.read(read)

    async def settle(
        self, conversation_id: str, taken: Sequence[Entry], queued: Sequence[Entry], reason: str
    ) -> None:
        """See :meth:`AdmissionJournal.settle`: taken inputs the log recorded are already marked
        delivered (by the append that recorded them); the rest expire."""
        ids = [(reason, entry.input.input_id) for entry in (*taken, *queued)]

        def work(conn: Connection) -> None:
            conn.executemany(
                "UPDATE steering_inputs SET status = 'expired', text = NULL, reason = ? "
                "WHERE input_id = ? AND status = 'queued'",
                ids,
            )

        await self.database.write(work, weight=len(ids))

    async def withdraw(self, entry: Entry) -> None:
        """See :meth:`AdmissionJournal.withdraw`: the row goes (never one a run recorded)."""
        input_id = entry.input.input_id

        def work(conn: Connection) -> None:
            conn.execute(
                "DELETE FROM steering_inputs WHERE input_id = ? AND status <> 'delivered'",
                (input_id,),
            )

        await self.database.write(work)

    async def status(self, input_id: str) -> InputStatus | None:
        """See :meth:`AdmissionJournal.status`."""

        def read(conn: Connection) -> InputStatus | None:
            found = conn.execute(
                f"SELECT {_COLUMNS} FROM steering_inputs WHERE input_id = ?", (input_id,)
            ).fetchone()
            return None if found is None else InputStatus(*found)

        return await self.database.read(read)
