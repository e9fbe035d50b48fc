"""The agent state store as a Layer, in memory or on the SQLite database.

Either way the store must also be told when runs start and settle: compose
``observe_runs(AgentStateService)`` (from ``effectagent.engine``) around it. Without that, a
run-local or compensatable write raises :class:`RunNotObserved` rather than silently keeping
state that nobody would ever discard or compensate.
"""

from __future__ import annotations

from effectagent.effect import Context, Layer, Scope
from effectagent.engine import ConversationLogService

from .._logging import log_warning
from ..storage import DatabaseService
from ._backends import InMemoryStateBackend, SqliteStateBackend
from ._model import AgentStateService
from ._store import AgentStateStore, check_compensation_timeout

__all__ = ["in_memory_state", "sqlite_state"]


def in_memory_state(*, compensation_timeout: float = 30.0) -> Layer:
    """A Layer providing :data:`AgentStateService` in process memory; writes committed with a
    record append it to the runtime's ``ConversationLogService`` (required)."""
    check_compensation_timeout(compensation_timeout)

    async def build(context: Context, _: Scope) -> Context:
        backend = InMemoryStateBackend(context[ConversationLogService])
        store = AgentStateStore(backend, compensation_timeout=compensation_timeout)
        return Context.of(AgentStateService, store)

    return Layer.from_build(
        "in_memory_state",
        provides=[AgentStateService],
        requires=[ConversationLogService],
        build=build,
    )


def sqlite_state(*, compensation_timeout: float = 30.0) -> Layer:
    """A Layer providing :data:`AgentStateService` on :data:`DatabaseService`: cells in
    the ``agent_state`` table, writes with a record in one transaction with their append. Cells
    left pending by processes that ended became uncertain when the database was opened by a
    process alone with the file (see ``capabilities.storage._recovery``)."""
    check_compensation_timeout(compensation_timeout)

    async def build(context: Context, _: Scope) -> Context:
        database = context[DatabaseService]
        backend = SqliteStateBackend(database)
        recovered = database.recovered.get("state", 0)
        if recovered:
            log_warning(
                "agent state left pending by an ended process is uncertain", cells=recovered
            )
        store = AgentStateStore(backend, compensation_timeout=compensation_timeout)
        return Context.of(AgentStateService, store)

    return Layer.from_build(
        "sqlite_state",
        provides=[AgentStateService],
        requires=[DatabaseService],
        build=build,
    )
