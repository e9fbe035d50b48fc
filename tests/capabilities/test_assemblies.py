"""The storage assemblies as Layers: what they provide, that the parts share one log and one
database, and that a missing piece is found at preflight."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from capabilities import (
    AgentStateService,
    SessionCreate,
    SessionStoreService,
    SteeringService,
    in_memory_storage,
    postgres_storage,
    sqlite_storage,
)
from capabilities.state._layers import in_memory_state, sqlite_state
from capabilities.storage import DatabaseService, SqliteConversationLog
from effectagent.core import Agent
from effectagent.effect import MissingServicesError
from effectagent.effect._layer import open_layer
from effectagent.engine import ConversationLogService, SteeringInboxService, open_runtime
from effectagent.testing import ScriptedModel, Turn


@pytest.mark.parametrize("where", ["memory", "sqlite-memory", "sqlite-file", "postgresql"])
async def test_an_assembly_provides_every_service_over_one_store(
    where: str, tmp_path: Path, postgres_schema: tuple[str, str]
) -> None:
    if where == "postgresql":
        url, schema = postgres_schema
        layer = postgres_storage(url, schema=schema)
    elif where == "memory":
        layer = in_memory_storage()
    else:
        layer = sqlite_storage(":memory:" if where == "sqlite-memory" else tmp_path / "a.db")
    expected = {
        ConversationLogService,
        SessionStoreService,
        AgentStateService,
        SteeringService,
        SteeringInboxService,
    }
    assert expected <= layer.provides
    assert (DatabaseService in layer.provides) is (where != "memory")
    async with open_layer(layer) as context:
        inbox: object = context[SteeringInboxService]
        assert context[SteeringService] is inbox
        sessions = context[SessionStoreService]
        session = await sessions.create(SessionCreate("work", {"owner": "ann"}, ("conv-1",)))
        # A session only points to its conversations: creating one writes no history.
        assert list(await context[ConversationLogService].entries("conv-1")) == []
        assert await sessions.get(session.id) == session


async def test_postgres_storage_keeps_conversations_for_the_next_process_and_finds_them(
    postgres_schema: tuple[str, str],
) -> None:
    """What one runtime on postgres_storage wrote, another (a new open of the same schema, as
    another process or machine would) reads and searches."""
    url, schema = postgres_schema
    agent = Agent("pg", instructions="Answer.")
    model = ScriptedModel([Turn.text("Kept in PostgreSQL.")])
    async with open_runtime(model.as_layer() + postgres_storage(url, schema=schema)) as runtime:
        result = await runtime.run(
            agent, "remember the walrus", conversation_id="conv-pg", create=True
        )
        assert result.text == "Kept in PostgreSQL."
    async with open_layer(postgres_storage(url, schema=schema)) as context:
        log = context[ConversationLogService]
        assert isinstance(log, SqliteConversationLog)  # the same log class on either backend
        kinds = [type(entry.record).__name__ for entry in await log.entries("conv-pg")]
        assert kinds[0] == "ConversationCreated"
        assert kinds[-1] == "RunCompletedRecord"
        found = await log.search(["walrus"], limit=5)
        assert [hit.conversation_id for hit in found.said] == ["conv-pg"]


def test_postgres_storage_refuses_a_bad_schema_name_before_connecting() -> None:
    with pytest.raises(ValueError, match="schema"):
        postgres_storage("postgresql://nobody@/nowhere", schema="Robert'); DROP TABLE x;--")


def test_a_missing_piece_is_named_at_preflight() -> None:
    from effectagent.effect import preflight

    with pytest.raises(MissingServicesError, match="ConversationLog"):
        preflight(in_memory_state())
    with pytest.raises(MissingServicesError, match=r"capabilities\.Database"):
        preflight(sqlite_state())
    with pytest.raises(ValueError, match="synchronous"):
        sqlite_storage("x.db", synchronous="off")  # type: ignore[arg-type]


def test_sqlite_users_never_import_psycopg() -> None:
    """The postgres extra is optional: importing the storage package, building and opening
    SQLite storage loads no psycopg (its names are imported on first use)."""
    program = (
        "import sys, trio\n"
        "import capabilities, capabilities.storage\n"
        "from effectagent.effect._layer import open_layer\n"
        "async def main():\n"
        "    async with open_layer(capabilities.sqlite_storage(':memory:')):\n"
        "        pass\n"
        "trio.run(main)\n"
        "print('psycopg' in sys.modules)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, check=True, timeout=60
    )
    assert done.stdout.strip() == "False"


_ASSEMBLIES: dict[str, Any] = {
    "memory": in_memory_storage,
    "sqlite": lambda **options: sqlite_storage(":memory:", **options),
    "postgresql": lambda **options: postgres_storage("postgresql://h/db", **options),
}


@pytest.mark.parametrize("assembly", sorted(_ASSEMBLIES))
@pytest.mark.parametrize(
    ("option", "value", "error", "message"),
    [
        ("session_schema", 5, TypeError, "session_schema must be a SessionSchema or None"),
        ("steering_limits", {"max": 1}, TypeError, "steering_limits must be a SteeringLimits"),
        ("compensation_timeout", float("nan"), ValueError, "positive and finite"),
        ("compensation_timeout", float("inf"), ValueError, "positive and finite"),
        ("compensation_timeout", "30", TypeError, "a number of seconds"),
    ],
)
def test_an_option_of_the_wrong_kind_is_refused_when_the_layer_is_made(
    assembly: str, option: str, value: object, error: type[Exception], message: str
) -> None:
    """They were accepted, and failed (or, for an endless compensation bound, held a run's end
    without bound) only when the runtime opened."""
    with pytest.raises(error, match=message):
        _ASSEMBLIES[assembly](**{option: value})


@pytest.mark.parametrize("layer", [in_memory_state, sqlite_state])
def test_the_state_layers_refuse_a_compensation_bound_that_is_not_one(layer: Any) -> None:
    with pytest.raises(ValueError, match="positive and finite"):
        layer(compensation_timeout=0)
