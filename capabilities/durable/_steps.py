"""Durable steps' results in the database (table ``durable_steps``), fenced by the lane.

A worker's runtime records steps (``ToolCallContext.step``) here. A result is written only by
the holder of its conversation's lane, in a transaction that checks the lane first (the worker's
fence), and only if none is recorded for the step's identity yet; whichever result is recorded
first is the canonical one, returned to every later ``put``. So of two workers racing on one step
— one whose lane was taken over without it knowing yet — only the fenced winner's result is ever
recorded: the stale one's ``put`` raises, and its call fails as a defect its run cannot settle
(the lane is gone).

A result is kept as the step returned it, secrets included: it is what a replay gives back, so it
cannot be redacted (the durable guide says not to return a secret from a step).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import final

from effectagent.ai import StepKey, StepResult
from effectagent.effect import JSONValue

from .._rules import ID_BYTES_MOST, storable, too_long_id
from ..storage import Database
from ..storage._port import Connection
from ._checks import check_callable, check_database

__all__ = ["SqliteStepStore"]

#: Called in the task that records a step, with its conversation's ID: the check to run inside
#: the write's transaction, which returns the lane's epoch or raises to refuse.
Fence = Callable[[str], Callable[[Connection], int]]


def _checked(key: StepKey) -> StepKey:
    """``key`` if every database keeps its name and tool call ID: ``ValueError`` naming which
    otherwise — one holding NUL or a lone surrogate, or longer than :data:`ID_BYTES_MOST` bytes
    (PostgreSQL refused them as a database error, SQLite kept them: now alike on both)."""
    for what, value in (("name", key.name), ("tool call ID", key.tool_call_id)):
        if not storable(value):
            raise ValueError(f"a step's {what} must not hold NUL or a lone surrogate")
        if too_long_id(value):
            raise ValueError(f"a step's {what} must be at most {ID_BYTES_MOST} bytes in UTF-8")
    return key


@final
class SqliteStepStore:
    """A ``StepStore`` on the ``durable_steps`` table (see the module notes). Results are kept
    as long as the database (they are few and small; a settled run's are never read again).
    What is not an opened database, or a ``fence`` or ``clock`` that cannot be called, is a
    ``TypeError`` here."""

    __slots__ = ("_clock", "_fence", "database")

    def __init__(
        self,
        database: Database,
        fence: Fence,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        check_database(database)
        check_callable("fence", fence)
        check_callable("clock", clock)
        self.database = database
        self._fence = fence
        self._clock = clock

    async def get(self, key: StepKey) -> StepResult | None:
        """The recorded result of ``key``, or None. Raises ``ValueError`` for a key no database
        keeps (see :func:`_checked`), before reading.

        Cancellation: a checkpoint before reading; nothing changes."""
        _checked(key)

        def read(conn: Connection) -> StepResult | None:
            found = conn.execute(
                "SELECT result FROM durable_steps WHERE run_id = ? AND tool_call_id = ? "
                "AND name = ? AND version = ?",
                (key.run_id, key.tool_call_id, key.name, key.version),
            ).fetchone()
            return None if found is None else StepResult(json.loads(found[0]))

        return await self.database.read(read)

    async def put(self, key: StepKey, value: JSONValue) -> StepResult:
        """Record ``value`` for ``key`` unless a result is recorded already — if this worker
        still holds the conversation's lane — and return the recorded result. Raises what the
        fence raises when the lane is lost (nothing is recorded then); ``ValueError`` for a key
        no database keeps (see :func:`_checked`), before writing.

        Cancellation: all or nothing (a write already running is waited for)."""
        _checked(key)
        body = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
        now = self._clock()
        fence = self._fence(key.conversation_id)

        def write(conn: Connection) -> StepResult:
            epoch = fence(conn)
            conn.execute(
                "INSERT INTO durable_steps (conversation_id, run_id, tool_call_id, name, "
                "version, epoch, result, at) VALUES (?, ?, ?, ?, ?, ?, ?, ?) "
                "ON CONFLICT DO NOTHING",
                (
                    key.conversation_id,
                    key.run_id,
                    key.tool_call_id,
                    key.name,
                    key.version,
                    epoch,
                    body,
                    now,
                ),
            )
            found = conn.execute(
                "SELECT result FROM durable_steps WHERE run_id = ? AND tool_call_id = ? "
                "AND name = ? AND version = ?",
                (key.run_id, key.tool_call_id, key.name, key.version),
            ).fetchone()
            return StepResult(json.loads(found[0]))

        return await self.database.write(write)
