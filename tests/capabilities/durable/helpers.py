"""Test helpers: the stores of a test (SQLite files or PostgreSQL schemas: the same suite runs on
both backends), a queue on one, and a *hand-driven worker* — the SQL a worker runs, with the
records a run would append written by hand — so ledger, lane and command rules are tested
without the engine."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any, Final, Literal

from capabilities import postgres_storage, sqlite_storage
from capabilities.durable._claims import claim_lanes
from capabilities.durable._queue import DurableQueue
from capabilities.durable._store import Claimed, finalize, read_submission
from capabilities.storage import Database
from capabilities.storage._database import open_database
from capabilities.storage._lanes import lane_fence
from capabilities.storage._log import SqliteConversationLog
from capabilities.storage._port import Connection
from capabilities.storage._postgres import open_postgres
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
from effectagent.effect import Layer
from tests.postgres import drop_schema, fresh_schema, postgres_url

#: The storage backends the durable suite runs on.
Backend = Literal["sqlite", "postgresql"]
BACKENDS: Final[tuple[Backend, ...]] = ("sqlite", "postgresql")


class Clock:
    """A wall clock a test moves by hand."""

    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class Stores:
    """The stores of one test on one backend, opened by name: the same name is the same store
    (SQLite: a file in ``directory``; PostgreSQL: a schema of the test cluster, made on first use
    and dropped by :meth:`drop`). A *spec* names a store for a worker process
    (``worker_process.open_store``)."""

    def __init__(self, backend: Backend, directory: Path) -> None:
        self.backend = backend
        self.directory = directory
        self._schemas: dict[str, str] = {}

    def spec(self, name: str = "d") -> str:
        """How a worker process opens the store ``name``: ``sqlite:<path>`` or
        ``postgresql:<schema>:<url>``."""
        if self.backend == "sqlite":
            return f"sqlite:{self.directory / f'{name}.db'}"
        schema = self._schemas.setdefault(name, fresh_schema())
        return f"postgresql:{schema}:{postgres_url()}"

    def storage(self, name: str = "d") -> Layer:
        """The persistent capabilities on the store ``name``: ``sqlite_storage`` or
        ``postgres_storage``."""
        if self.backend == "sqlite":
            return sqlite_storage(self.directory / f"{name}.db")
        schema = self._schemas.setdefault(name, fresh_schema())
        return postgres_storage(postgres_url(), schema=schema)

    def open(self, name: str = "d", **options: Any) -> Any:
        """``async with`` the store ``name`` open (``options`` go to the backend's opener)."""
        return open_store(self.spec(name), **options)

    def drop(self) -> None:
        """Drop the PostgreSQL schemas made (nothing for SQLite: the files are the test's)."""
        for schema in self._schemas.values():
            drop_schema(schema)
        self._schemas.clear()


@contextmanager
def stores(backend: Backend, directory: Path) -> Iterator[Stores]:
    """:class:`Stores` of ``backend`` in ``directory``, dropped after the block."""
    made = Stores(backend, directory)
    try:
        yield made
    finally:
        made.drop()


@asynccontextmanager
async def open_store(spec: str, **options: Any) -> AsyncIterator[Database]:
    """Open the store ``spec`` names (:meth:`Stores.spec`). SQLite files are opened with
    ``synchronous="normal"`` (a commit survives a killed process, which is what these tests
    kill)."""
    kind, _, rest = spec.partition(":")
    if kind == "sqlite":
        async with open_database(Path(rest), synchronous="normal", **options) as db:
            yield db
        return
    if kind != "postgresql":
        raise ValueError(f"not a store spec: {kind}")
    schema, _, url = rest.partition(":")
    async with open_postgres(url, schema=schema, **options) as pg:
        yield pg


@asynccontextmanager
async def database(path: Path) -> AsyncIterator[Database]:
    """A SQLite database file (``synchronous="normal"``), for tests about SQLite itself."""
    async with open_database(path, synchronous="normal") as db:
        yield db


def count(conn: Connection, sql: str, *params: Any) -> int:
    return int(conn.execute(sql, params).fetchone()[0])


async def rows(db: Database, sql: str, *params: Any) -> list[tuple[Any, ...]]:
    return await db.read(lambda conn: [tuple(r) for r in conn.execute(sql, params).fetchall()])


class HandWorker:
    """The SQL of a worker, driven by hand: claim, append records fenced by the claim, finalize."""

    def __init__(self, db: Database, clock: Clock, name: str = "hand") -> None:
        self.db = db
        self.clock = clock
        self.name = name
        self._ids = 0

    async def claim(
        self, limit: int = 10, lease: float = 30.0, exclude: tuple[str, ...] = ()
    ) -> list[Claimed]:
        """Claim as a worker does (``_claims.claim_lanes``)."""
        now = self.clock()

        def ids() -> Any:
            while True:
                self._ids += 1
                yield f"{self.name}-attempt-{self._ids}"

        return await claim_lanes(
            self.db,
            now=now,
            worker_id=self.name,
            lease=lease,
            limit=limit,
            attempt_ids=ids(),
            exclude=exclude,
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


async def status(db: Database, submission_id: str) -> Any:
    return await db.read(lambda conn: read_submission(conn, submission_id))


def queue(db: Database, clock: Clock, **kwargs: Any) -> DurableQueue:
    return DurableQueue(db, clock=clock, **kwargs)
