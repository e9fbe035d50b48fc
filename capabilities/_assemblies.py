"""Whole storage assemblies: everything a conversation that lasts needs, in one Layer.

``sqlite_storage(path)``: the Conversation Log, sessions, agent state and
the steering inbox share one SQLite database, so history, sessions, state and admitted steering
survive a restart (``path=":memory:"`` keeps the same behaviour in memory). ``in_memory_storage()``
gives the same services without a database — the engine's in-memory log, bounded by
its retention (``LogRetention``), stays the runtime's default when neither is used.

The agent state store must also hear about runs: wrap the assembly as
``observe_runs(AgentStateService).provide_merge(sqlite_storage(path))`` (with any observers of
your own in the same ``observe_runs``).
"""

from __future__ import annotations

import os
from typing import Any

from effectagent.effect import Context, Layer, Scope
from effectagent.engine import ConversationLogService, InMemoryConversationLog, LogRetention

from .sessions import SessionSchema
from .sessions._layers import sessions_over_log, sqlite_sessions
from .state._layers import in_memory_state, sqlite_state
from .steering import SteeringLimits
from .steering._layers import in_memory_steering, sqlite_steering
from .storage import Synchronous
from .storage._layers import postgres_database, sqlite_database, sqlite_log

__all__ = ["in_memory_storage", "postgres_storage", "sqlite_storage"]


def _check_options(session_schema: object, steering_limits: object) -> None:
    """The options every storage assembly takes, by the names it takes them under."""
    if session_schema is not None and not isinstance(session_schema, SessionSchema):
        raise TypeError(
            f"session_schema must be a SessionSchema or None, got {type(session_schema).__name__}"
        )
    if steering_limits is not None and not isinstance(steering_limits, SteeringLimits):
        raise TypeError(
            "steering_limits must be a SteeringLimits or None, "
            f"got {type(steering_limits).__name__}"
        )


def sqlite_storage(
    path: str | os.PathLike[str],
    *,
    synchronous: Synchronous = "full",
    session_schema: SessionSchema[Any] | None = None,
    steering_limits: SteeringLimits | None = None,
    compensation_timeout: float = 30.0,
) -> Layer:
    """One Layer over the SQLite database at ``path``: the engine's ``ConversationLogService``
    and ``SteeringInboxService``, ``SessionStoreService``, ``AgentStateService``,
    ``SteeringService`` and ``DatabaseService``.

    ``synchronous`` — ``"full"`` (default: a commit survives power loss), or ``"normal"`` (it
    survives the process being killed; the last commits before a power loss may be lost).
    """
    _check_options(session_schema, steering_limits)
    services = (
        sqlite_log()
        + sqlite_sessions(session_schema)
        + sqlite_state(compensation_timeout=compensation_timeout)
        + sqlite_steering(steering_limits)
    )
    return services.provide_merge(sqlite_database(path, synchronous=synchronous)).named(
        "sqlite_storage"
    )


def postgres_storage(
    url: str,
    *,
    schema: str = "effectagent",
    pool_size: int = 4,
    session_schema: SessionSchema[Any] | None = None,
    steering_limits: SteeringLimits | None = None,
    compensation_timeout: float = 30.0,
) -> Layer:
    """The services of :func:`sqlite_storage` on the PostgreSQL database at ``url``, in
    ``schema`` (default ``effectagent``; laid out on first use): every process that opens the same
    database and schema — on this machine or another — shares the Conversation Log, sessions,
    agent state and steering, and a conversation's lane keeps two runs of it from going at once
    wherever they run. ``pool_size`` bounds its connections. Needs the ``postgres`` extra."""
    _check_options(session_schema, steering_limits)
    services = (
        sqlite_log()
        + sqlite_sessions(session_schema)
        + sqlite_state(compensation_timeout=compensation_timeout)
        + sqlite_steering(steering_limits)
    )
    return services.provide_merge(postgres_database(url, schema=schema, pool_size=pool_size)).named(
        "postgres_storage"
    )


def in_memory_storage(
    *,
    session_schema: SessionSchema[Any] | None = None,
    steering_limits: SteeringLimits | None = None,
    compensation_timeout: float = 30.0,
    log_retention: LogRetention | None = None,
) -> Layer:
    """The services of :func:`sqlite_storage` in process memory (nothing survives the process):
    an in-memory ``ConversationLogService`` shared by the runtime, the state store and the
    inbox; sessions; agent state; steering.

    ``log_retention`` bounds the log (default: ``LogRetention()``, a cap on conversations and on
    bytes, idle conversations evicted least recently used first; ``LogRetention.keep_everything()``
    for none); steering statuses go with their conversation. Sessions and agent state are what
    the application stores: they stay until it deletes them."""
    _check_options(session_schema, steering_limits)
    if log_retention is not None and not isinstance(log_retention, LogRetention):
        raise TypeError(f"log_retention must be a LogRetention, got {type(log_retention).__name__}")

    async def build(_: Context, __: Scope) -> Context:
        return Context.of(ConversationLogService, InMemoryConversationLog(log_retention))

    log = Layer.from_build("in_memory_log", provides=[ConversationLogService], build=build)
    services = (
        sessions_over_log(session_schema)
        + in_memory_state(compensation_timeout=compensation_timeout)
        + in_memory_steering(steering_limits)
    )
    return services.provide_merge(log).named("in_memory_storage")
