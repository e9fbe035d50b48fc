"""Test helpers: a database file, a queue on it, and a *hand-driven worker* — the SQL a worker
runs, with the records a run would append written by hand — so ledger, lane and command rules
are tested without the engine."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from capabilities.durable._queue import DurableQueue
from capabilities.durable._store import Claimed, claim, finalize, read_submission
from capabilities.storage import SqliteDatabase
from capabilities.storage._database import open_database
from capabilities.storage._lanes import lane_fence
from capabilities.storage._log import SqliteConversationLog
from effectagent.core import (
    ConversationCreated,
    ModelResponseRecorded,
    Record,
    RunCompletedRecord,
    RunFailedRecord,
    ToolCallPrepared,
    UsageDelta,
    UserInputRecorded,
)


class Clock:
    """A wall clock a test moves by hand."""

    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@asynccontextmanager
async def database(path: Path) -> AsyncIterator[SqliteDatabase]:
    """The test's database file (``synchronous="normal"``: a commit survives a killed process,
    which is what these tests kill)."""
    async with open_database(path, synchronous="normal") as db:
        yield db


def count(conn: sqlite3.Connection, sql: str, *params: Any) -> int:
    return int(conn.execute(sql, params).fetchone()[0])


async def rows(db: SqliteDatabase, sql: str, *params: Any) -> list[tuple[Any, ...]]:
    return await db.read(lambda conn: [tuple(r) for r in conn.execute(sql, params).fetchall()])


class HandWorker:
    """The SQL of a worker, driven by hand: claim, append records fenced by the claim, finalize."""

    def __init__(self, db: SqliteDatabase, clock: Clock, name: str = "hand") -> None:
        self.db = db
        self.clock = clock
        self.name = name
        self._ids = 0

    async def claim(
        self, limit: int = 10, lease: float = 30.0, exclude: tuple[str, ...] = ()
    ) -> list[Claimed]:
        now = self.clock()

        def ids() -> Any:
            while True:
                self._ids += 1
                yield f"{self.name}-attempt-{self._ids}"

        return await self.db.write(
            lambda conn: claim(
                conn,
                now=now,
                worker_id=self.name,
                lease=lease,
                limit=limit,
                attempt_ids=ids(),
                exclude=exclude,
            )
        )

    def log(self, claimed: Claimed) -> SqliteConversationLog:
        return SqliteConversationLog(self.db, fence=lane_fence(claimed.lane))

    async def append(self, claimed: Claimed, records: Sequence[Record]) -> int:
        return await self.log(claimed).append(claimed.lane.conversation_id, records)

    async def start(self, claimed: Claimed, text: str = "hello") -> int:
        """The records a run's start appends."""
        sub = claimed.submission
        first: list[Record] = []
        if claimed.base_seq == 0:
            first.append(
                ConversationCreated(conversation_id=sub.conversation_id, agent=sub.agent, at=1.0)
            )
        first.append(
            UserInputRecorded(
                conversation_id=sub.conversation_id,
                run_id=sub.run_id,
                input_id=f"in-{sub.submission_id}",
                kind="user",
                text=text,
                author=sub.principal,
                at=1.0,
            )
        )
        return await self.append(claimed, first)

    async def respond(self, claimed: Claimed, *calls: tuple[str, str]) -> int:
        sub = claimed.submission
        content: tuple[tuple[str, Any], ...] = tuple(
            ("tool-call", {"id": call_id, "name": name, "arguments": "{}"})
            for call_id, name in calls
        ) or (("text", "done"),)
        return await self.append(
            claimed,
            [
                ModelResponseRecorded(
                    conversation_id=sub.conversation_id,
                    run_id=sub.run_id,
                    turn=1,
                    content=content,
                    finish_reason="tool_calls" if calls else "stop",
                    usage=UsageDelta(),
                    at=1.0,
                )
            ],
        )

    async def prepare(self, claimed: Claimed, call_id: str, name: str) -> int:
        sub = claimed.submission
        return await self.append(
            claimed,
            [
                ToolCallPrepared(
                    conversation_id=sub.conversation_id,
                    run_id=sub.run_id,
                    turn=1,
                    tool_call_id=call_id,
                    tool_name=name,
                    arguments={},
                    at=1.0,
                )
            ],
        )

    async def complete(self, claimed: Claimed) -> int:
        sub = claimed.submission
        return await self.append(
            claimed,
            [
                RunCompletedRecord(
                    conversation_id=sub.conversation_id,
                    run_id=sub.run_id,
                    output="done",
                    finish_reason="stop",
                    at=1.0,
                )
            ],
        )

    async def fail(self, claimed: Claimed, reason: str = "interrupted") -> int:
        sub = claimed.submission
        return await self.append(
            claimed,
            [
                RunFailedRecord(
                    conversation_id=sub.conversation_id,
                    run_id=sub.run_id,
                    error=None,
                    reason=reason,
                    at=1.0,
                )
            ],
        )

    async def settle(self, claimed: Claimed, status: str, seq: int) -> bool:
        now = self.clock()
        return await self.db.write(
            lambda conn: finalize(
                conn,
                claimed.lane,
                claimed.submission.submission_id,
                status,  # type: ignore[arg-type]
                seq=seq,
                diagnostic=None,
                now=now,
            )
        )

    async def run_to_completion(self, claimed: Claimed) -> int:
        await self.start(claimed)
        await self.respond(claimed)
        seq = await self.complete(claimed)
        await self.settle(claimed, "completed", seq)
        return seq


async def status(db: SqliteDatabase, submission_id: str) -> Any:
    return await db.read(lambda conn: read_submission(conn, submission_id))


def queue(db: SqliteDatabase, clock: Clock, **kwargs: Any) -> DurableQueue:
    return DurableQueue(db, clock=clock, **kwargs)
