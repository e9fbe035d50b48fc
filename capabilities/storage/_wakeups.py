"""Wake-ups: "work may have arrived", counted, for whoever waits for work (a durable worker).

A write that may give a worker something to do — an admission, a decision, a retry or a wake,
a lane let go — is made with ``write(..., wake=True)`` (``_port``). Once it commits, the
database's :class:`WakeUps` count one more: on SQLite when the write returns, for the waiters on
the same opened database (other processes keep polling); on PostgreSQL when the notification
the write sent in its own transaction (``NOTIFY``, see ``_postgres_listen``) reaches this
process's listener — from any process on the same schema.

A wake-up is a hint, never a promise: one may be lost (a listener reconnecting, another process
on SQLite), so a waiter also polls; one may come with nothing to do. Waiting past a count, not
on an event, means a wake-up that arrives between a waiter's look at the work and its wait is
not missed.
"""

from __future__ import annotations

from typing import final

import trio

__all__ = ["WakeUps"]


@final
class WakeUps:
    """A count of wake-ups and a way to wait for the next one (Trio's thread only)."""

    __slots__ = ("_changed", "count")

    def __init__(self) -> None:
        #: How many wake-ups arrived so far.
        self.count = 0
        self._changed = trio.Event()

    def bump(self) -> None:
        """Count a wake-up and wake every waiter."""
        self.count += 1
        self._changed.set()
        self._changed = trio.Event()

    async def wait(self, after: int) -> None:
        """Return once :attr:`count` is past ``after`` (at once if it already is).

        Cancellation: a plain wait; nothing to undo."""
        while self.count <= after:
            await self._changed.wait()
