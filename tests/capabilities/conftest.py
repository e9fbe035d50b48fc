"""Shared fixtures of the capability tests: the implementations every contract suite runs on."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from hypothesis import settings

from capabilities.storage import Database
from capabilities.storage._database import open_database
from capabilities.storage._log import SqliteConversationLog
from effectagent.engine import ConversationLog, InMemoryConversationLog
from tests.postgres import postgres_database

#: The stores every contract runs against: in memory, SQLite in memory, SQLite in a file, and
#: PostgreSQL (a fresh schema of the throwaway cluster ``tests.postgres`` starts).
KINDS = ["memory", "sqlite-memory", "sqlite-file", "postgresql"]

#: The active hypothesis profile's number of examples (properties over real SQLite files take a
#: fraction of it, so ``make test`` stays fast and ``make test-thorough`` still scales them up).
EXAMPLES: int = settings().max_examples


@asynccontextmanager
async def database(kind: str, directory: Path) -> AsyncIterator[Database]:
    """A database of ``kind``: "sqlite-memory", "sqlite-file" (the file in ``directory``) or
    "postgresql"."""
    if kind == "postgresql":
        async with postgres_database() as opened:
            yield opened
        return
    path = ":memory:" if kind == "sqlite-memory" else directory / "store.db"
    async with open_database(path) as opened_file:
        yield opened_file


@asynccontextmanager
async def open_log(kind: str, directory: Path) -> AsyncIterator[ConversationLog]:
    """A Conversation Log of ``kind``."""
    if kind == "memory":
        yield InMemoryConversationLog()
        return
    async with database(kind, directory) as opened:
        yield SqliteConversationLog(opened)


@pytest.fixture(params=KINDS)
def kind(request: pytest.FixtureRequest) -> str:
    """Each store kind in turn."""
    return str(request.param)
