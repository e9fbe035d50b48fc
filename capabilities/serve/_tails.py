"""Where each followed conversation's log ends, read once per poll interval for all its
followers: an event stream with nothing to send asks here (one ``max(seq)`` read a conversation
an interval, however many clients follow it) and reads entries only when there are new ones."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import final

import trio

from ..storage import SqliteConversationLog

__all__ = ["Tails"]


@final
class Tails:
    """The last sequence number of each followed conversation, at most ``interval`` seconds old
    (Trio's clock). What it keeps is forgotten once a conversation has no follower."""

    __slots__ = ("_followers", "_interval", "_known", "_locks", "_log")

    def __init__(self, log: SqliteConversationLog, interval: float) -> None:
        self._log = log
        self._interval = interval
        self._known: dict[str, tuple[float, int]] = {}
        self._locks: dict[str, trio.Lock] = {}
        self._followers: dict[str, int] = {}

    @asynccontextmanager
    async def following(self, conversation_id: str) -> AsyncIterator[None]:
        """Count a follower of ``conversation_id`` for the block.

        Cancellation: the follower is uncounted whatever ends the block."""
        self._followers[conversation_id] = self._followers.get(conversation_id, 0) + 1
        try:
            yield
        finally:
            left = self._followers[conversation_id] - 1
            if left:
                self._followers[conversation_id] = left
            else:
                del self._followers[conversation_id]
                self._known.pop(conversation_id, None)
                self._locks.pop(conversation_id, None)

    def _fresh(self, conversation_id: str) -> int | None:
        found = self._known.get(conversation_id)
        if found is not None and trio.current_time() - found[0] < self._interval:
            return found[1]
        return None

    async def last(self, conversation_id: str) -> int:
        """The conversation's last sequence number, read now unless another follower read it
        less than ``interval`` ago.

        Cancellation: a read in progress is abandoned; nothing changes."""
        known = self._fresh(conversation_id)
        if known is not None:
            await trio.lowlevel.checkpoint()
            return known
        lock = self._locks.setdefault(conversation_id, trio.Lock())
        async with lock:
            known = self._fresh(conversation_id)
            if known is not None:
                return known
            seq = await self._log.last_seq(conversation_id)
            if conversation_id in self._followers:
                self._known[conversation_id] = (trio.current_time(), seq)
            return seq
