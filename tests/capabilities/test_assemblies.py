"""The storage assemblies as Layers: what they provide, that the parts share one log and one
database, and that a missing piece is found at preflight."""

from __future__ import annotations

from pathlib import Path

import pytest

from capabilities import (
    AgentStateService,
    SessionCreate,
    SessionStoreService,
    SteeringService,
    in_memory_storage,
    sqlite_storage,
)
from capabilities.state._layers import in_memory_state, sqlite_state
from capabilities.storage import DatabaseService
from effectagent.effect import MissingServicesError
from effectagent.effect._layer import open_layer
from effectagent.engine import ConversationLogService, SteeringInboxService


@pytest.mark.parametrize("where", ["memory", "sqlite-memory", "sqlite-file"])
async def test_an_assembly_provides_every_service_over_one_store(
    where: str, tmp_path: Path
) -> None:
    layer = (
        in_memory_storage()
        if where == "memory"
        else sqlite_storage(":memory:" if where == "sqlite-memory" else tmp_path / "a.db")
    )
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


def test_a_missing_piece_is_named_at_preflight() -> None:
    from effectagent.effect import preflight

    with pytest.raises(MissingServicesError, match="ConversationLog"):
        preflight(in_memory_state())
    with pytest.raises(MissingServicesError, match=r"capabilities\.Database"):
        preflight(sqlite_state())
    with pytest.raises(ValueError, match="synchronous"):
        sqlite_storage("x.db", synchronous="off")  # type: ignore[arg-type]
