"""The in-memory Conversation Log (deployment class E): append-only, gap-free sequence numbers."""

from __future__ import annotations

from collections.abc import Sequence
from typing import final

import trio

from effectagent.core import LogEntry, Record

__all__ = ["InMemoryConversationLog"]


@final
class InMemoryConversationLog:
    """Holds every conversation's records in process memory. Nothing survives the process.

    A record's sequence number is its position in its conversation (1-based), so the log keeps
    the records alone and pairs them with their numbers when they are read.
    """

    __slots__ = ("_logs",)

    def __init__(self) -> None:
        self._logs: dict[str, list[Record]] = {}

    async def append(self, conversation_id: str, records: Sequence[Record]) -> int:
        """Append atomically; return the sequence number of the last record appended.

        Cancellation: a cancellation point *before* anything is appended (raises ``Cancelled`` if
        the caller's scope is cancelled); it does not yield to the scheduler — there is no I/O to
        wait for, and the engine yields once per turn itself."""
        # Half of Trio's checkpoint pair, on purpose: see the docstring.
        await trio.lowlevel.checkpoint_if_cancelled()
        return self.append_nowait(conversation_id, records)

    def append_nowait(self, conversation_id: str, records: Sequence[Record]) -> int:
        """Append without a checkpoint; return the last sequence number."""
        log = self._logs.get(conversation_id)
        if log is None:
            log = self._logs[conversation_id] = []
        log.extend(records)
        return len(log)

    async def entries(self, conversation_id: str, *, after: int = 0) -> Sequence[LogEntry]:
        """Entries with ``seq > after``. Cancellation: a cancellation point (no scheduler yield);
        nothing changes."""
        await trio.lowlevel.checkpoint_if_cancelled()  # half the pair: nothing to wait for
        start = max(after, 0)
        records = self._logs.get(conversation_id, ())
        return tuple(LogEntry(seq, record) for seq, record in enumerate(records[start:], start + 1))

    def conversations(self) -> tuple[str, ...]:
        """Known conversation IDs."""
        return tuple(self._logs)
