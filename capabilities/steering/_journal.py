"""Where admitted inputs are written down: in memory, or in the SQLite database.

The SQLite journal persists each admission before its receipt is returned, and the SQLite log
marks an input delivered in the very transaction that records it as canonical (see
``capabilities.storage``), so an input is never both waiting and recorded. Its text stays in the
table only until then: delivered or expired, it is cleared (the log keeps the canonical, redacted
copy). The in-memory journal reads the log to tell which inputs a run recorded, and keeps the
statuses of a conversation only as long as the log keeps it: over the engine's in-memory log,
whose retention evicts idle conversations, a conversation's statuses go with it (``status`` then
answers None, as for an input never accepted here).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Final, Protocol, final

import attrs
import trio

from effectagent.core import UserInputRecorded
from effectagent.engine import ConversationLog, InMemoryConversationLog

from ..storage import SqliteDatabase
from ._admission import Entry
from ._model import InputState, InputStatus

__all__ = ["AdmissionJournal", "InMemoryJournal", "SqliteJournal"]

_DELIVERY_KINDS: Final = ("steering", "follow-up")


class AdmissionJournal(Protocol):
    """Persists admissions and what became of them."""

    @property
    def durable(self) -> bool:
        """Whether an admission survives the process once :meth:`admitted` returned."""
        ...

    async def admitted(self, entry: Entry) -> None:
        """Write down an accepted input. Cancellation: all or nothing."""
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

    async def admitted(self, entry: Entry) -> None:
        """See :meth:`AdmissionJournal.admitted` (no checkpoint: nothing to wait for)."""
        input_id = entry.input.input_id
        self._statuses[input_id] = _status(entry, "queued", None, "")
        self._by_conversation.setdefault(entry.conversation_id, []).append(input_id)

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


@final
class SqliteJournal:
    """Admissions in the ``steering_inputs`` table of an :class:`SqliteDatabase`."""

    __slots__ = ("database",)

    durable = True

    def __init__(self, database: SqliteDatabase) -> None:
        self.database = database

    async def admitted(self, entry: Entry) -> None:
        """See :meth:`AdmissionJournal.admitted`: committed before it returns."""
        item = entry.input
        row = (
            item.input_id,
            entry.conversation_id,
            entry.position,
            item.kind,
            item.text,
            item.author,
            item.at,
        )

        def work(conn: sqlite3.Connection) -> None:
            conn.execute(
                "INSERT INTO steering_inputs (input_id, conversation_id, position, kind, text, "
                "author, at, status, seq, reason) VALUES (?, ?, ?, ?, ?, ?, ?, 'queued', NULL, '')",
                row,
            )

        await self.database.write(work)

    async def settle(
        self, conversation_id: str, taken: Sequence[Entry], queued: Sequence[Entry], reason: str
    ) -> None:
        """See :meth:`AdmissionJournal.settle`: taken inputs the log recorded are already marked
        delivered (by the append that recorded them); the rest expire."""
        ids = [(reason, entry.input.input_id) for entry in (*taken, *queued)]

        def work(conn: sqlite3.Connection) -> None:
            conn.executemany(
                "UPDATE steering_inputs SET status = 'expired', text = NULL, reason = ? "
                "WHERE input_id = ? AND status = 'queued'",
                ids,
            )

        await self.database.write(work, weight=len(ids))

    async def status(self, input_id: str) -> InputStatus | None:
        """See :meth:`AdmissionJournal.status`."""

        def read(conn: sqlite3.Connection) -> InputStatus | None:
            found = conn.execute(
                f"SELECT {_COLUMNS} FROM steering_inputs WHERE input_id = ?", (input_id,)
            ).fetchone()
            return None if found is None else InputStatus(*found)

        return await self.database.read(read)

    async def recover(self) -> int:
        """Inputs left waiting by a process that ended expire (their runs are gone). Returns how
        many. Cancellation: all or nothing."""

        def work(conn: sqlite3.Connection) -> int:
            return conn.execute(
                "UPDATE steering_inputs SET status = 'expired', text = NULL, "
                "reason = 'the process ended before a run took it' WHERE status = 'queued'"
            ).rowcount

        return await self.database.write(work)
