"""The in-memory Conversation Log (deployment class E): append-only, gap-free sequence numbers."""

from __future__ import annotations

from collections.abc import Sequence
from typing import final

import trio

from effectagent.core import LogEntry, Record

__all__ = ["InMemoryConversationLog"]


@final
class InMemoryConversationLog:
    """Holds every conversation's entries in process memory. Nothing survives the process."""

    __slots__ = ("_logs",)

    def __init__(self) -> None:
        self._logs: dict[str, list[LogEntry]] = {}

    async def append(self, conversation_id: str, records: Sequence[Record]) -> Sequence[LogEntry]:
        """Append atomically. Cancellation: a cancellation point *before* anything is appended
        (raises ``Cancelled`` if the caller's scope is cancelled); it does not yield to the
        scheduler — there is no I/O to wait for, and the engine yields once per turn itself."""
        await trio.lowlevel.checkpoint_if_cancelled()
        return self.append_nowait(conversation_id, records)

    def append_nowait(self, conversation_id: str, records: Sequence[Record]) -> Sequence[LogEntry]:
        """Append without a checkpoint (used in shielded cleanup)."""
        log = self._logs.setdefault(conversation_id, [])
        start = len(log) + 1
        added = [LogEntry(start + i, record) for i, record in enumerate(records)]
        log.extend(added)
        return added

    async def entries(self, conversation_id: str, *, after: int = 0) -> Sequence[LogEntry]:
        """Entries with ``seq > after``. Cancellation: a cancellation point (no scheduler yield);
        nothing changes."""
        await trio.lowlevel.checkpoint_if_cancelled()
        return tuple(self._logs.get(conversation_id, ())[after:])

    def conversations(self) -> tuple[str, ...]:
        """Known conversation IDs."""
        return tuple(self._logs)
