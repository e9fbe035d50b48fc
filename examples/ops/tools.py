"""The operations assistant's tools and their handlers.

Read-only diagnostics — ``service_status``, ``recent_logs``, ``metrics``, ``db_status``,
``db_sessions`` — answer from the simulated production of :mod:`.world` after a short, fixed
"network" latency, so a batch of them visibly runs concurrently. ``grep_logs`` runs the real
``grep`` inside the bubblewrap sandbox, over the workspace mounted read-only and without network.
``post_incident_update`` posts to the incident channel and returns once the on-call engineer has
read it (the demo's on-call engineer answers by steering the run). ``restart_service`` and
``terminate_db_sessions`` change production, so both need approval; the latter is destructive.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Final, Literal

import attrs
import trio

from effectagent import Tool, ToolCallContext, Toolkit
from effectagent.effect import Layer
from sandbox import Mount, NetworkPolicy, Sandbox, SandboxLimits, SandboxRequest, run

from . import world
from .world import POOL_SIZE, REPLICAS, SERVICE, World, clock

__all__ = [
    "ALL",
    "DbFinding",
    "DbQuestion",
    "DB_SESSIONS",
    "DB_STATUS",
    "GREP_LOGS",
    "METRICS",
    "POST_UPDATE",
    "READONLY",
    "RECENT_LOGS",
    "RESTART",
    "SERVICE_STATUS",
    "TERMINATE",
    "Ops",
]

WORKSPACE: Final = "/workspace"


# ---- parameters and results ---------------------------------------------------------------------


@attrs.frozen
class ServiceQuery:
    """Which service."""

    service: str


@attrs.frozen
class ServiceStatus:
    """A service's health as the orchestrator and its health checks see it."""

    service: str
    state: Literal["healthy", "degraded"]
    version: str
    deployed_at: str
    replicas_ready: str
    ratio_5xx: float
    health_check: str


@attrs.frozen
class LogQuery:
    """The last ``lines`` lines of a service's log."""

    service: str
    lines: int


@attrs.frozen
class LogTail:
    """Log lines, oldest first."""

    service: str
    lines: list[str]


@attrs.frozen
class MetricQuery:
    """One metric over the last ``minutes`` minutes, for the service or one replica."""

    service: str
    metric: Literal["db_pool_in_use", "http_5xx_ratio"]
    minutes: int
    replica: str | None = None


@attrs.frozen
class Point:
    """One minute's value."""

    at: str
    value: float


@attrs.frozen
class Series:
    """A metric's values, a point a minute (``limit``: the ceiling it cannot pass, if any)."""

    service: str
    metric: str
    replica: str | None
    limit: float | None
    points: list[Point]


@attrs.frozen
class GrepQuery:
    """An extended regular expression, searched in a file of the workspace."""

    pattern: str
    path: str


@attrs.frozen
class GrepResult:
    """How many lines matched, the first few with their numbers, and how the search ran."""

    matches: int
    first: list[str]
    sandbox: str


@attrs.frozen
class DatabaseQuery:
    """Which database."""

    database: str


@attrs.frozen
class DatabaseStatus:
    """Connections by state and the longest-open transaction."""

    database: str
    max_connections: int
    by_state: dict[str, int]
    by_client: dict[str, int]
    oldest_transaction: str


@attrs.frozen
class SessionQuery:
    """The sessions of a database in one state."""

    database: str
    state: str


@attrs.frozen
class DbSession:
    """One database session."""

    pid: int
    client: str
    state: str
    transaction_age: str
    last_query: str


@attrs.frozen
class DbSessions:
    """How many sessions are in the state, and the oldest few."""

    total: int
    oldest: list[DbSession]


@attrs.frozen
class DbQuestion:
    """What the database specialist is asked to look into."""

    database: str
    symptom: str


@attrs.frozen
class DbFinding:
    """The database specialist's answer."""

    database: str
    cause: str
    evidence: list[str]
    safe_fix: str


@attrs.frozen
class Update:
    """A status update for the incident channel."""

    text: str


@attrs.frozen
class Posted:
    """Where the update went and who has read it."""

    channel: str
    read_by: str


@attrs.frozen
class Restart:
    """A rolling restart and why."""

    service: str
    reason: str


@attrs.frozen
class Restarted:
    """What the rolling restart did."""

    service: str
    replicas_replaced: int
    pool_in_use_after: str
    ratio_5xx_after: float


@attrs.frozen
class Terminate:
    """Terminate a database's sessions in one state."""

    database: str
    state: str


@attrs.frozen
class Terminated:
    """How many sessions were terminated."""

    terminated: int


# ---- the tools ----------------------------------------------------------------------------------

SERVICE_STATUS: Final = Tool(
    "service_status",
    "A service's health: state, version, ready replicas, 5xx ratio, health check.",
    parameters=ServiceQuery,
    success=ServiceStatus,
    readonly=True,
)
RECENT_LOGS: Final = Tool(
    "recent_logs",
    "The last lines of a service's log.",
    parameters=LogQuery,
    success=LogTail,
    readonly=True,
)
METRICS: Final = Tool(
    "metrics",
    "A metric of a service (or one of its replicas), a point a minute: db_pool_in_use "
    "(connections taken from the pool) or http_5xx_ratio (share of requests answered 5xx).",
    parameters=MetricQuery,
    success=Series,
    readonly=True,
)
GREP_LOGS: Final = Tool(
    "grep_logs",
    "Search a file of the log workspace (e.g. logs/checkout-api.log) for an extended regular "
    "expression; runs grep in a sandbox.",
    parameters=GrepQuery,
    success=GrepResult,
    readonly=True,
)
DB_STATUS: Final = Tool(
    "db_status",
    "A database's connections by state and by client, and its oldest open transaction.",
    parameters=DatabaseQuery,
    success=DatabaseStatus,
    readonly=True,
)
DB_SESSIONS: Final = Tool(
    "db_sessions",
    "A database's sessions in one state (e.g. 'idle in transaction'), oldest first.",
    parameters=SessionQuery,
    success=DbSessions,
    readonly=True,
)
POST_UPDATE: Final = Tool(
    "post_incident_update",
    "Post a status update to the incident channel; returns once the on-call engineer read it.",
    parameters=Update,
    success=Posted,
    destructive=False,
    idempotent=False,
)
RESTART: Final = Tool(
    "restart_service",
    "Rolling restart of a service's replicas, one at a time.",
    parameters=Restart,
    success=Restarted,
    needs_approval=True,
    targets=lambda params: [f"service:{params.service}"],
    destructive=False,
    idempotent=True,
)
TERMINATE: Final = Tool(
    "terminate_db_sessions",
    "Terminate every session of a database in one state (their transactions are rolled back).",
    parameters=Terminate,
    success=Terminated,
    needs_approval=True,
    targets=lambda params: [f"db:{params.database}"],
    destructive=True,
)
READONLY: Final = (SERVICE_STATUS, RECENT_LOGS, METRICS, GREP_LOGS, DB_STATUS, DB_SESSIONS)
ALL: Final = (*READONLY, POST_UPDATE, RESTART, TERMINATE)

# Each diagnostic's fixed "network" latency (seconds), so that concurrency shows in the timeline.
LATENCY: Final = {"service_status": 0.04, "recent_logs": 0.09, "metrics": 0.06, "db": 0.05}


@attrs.define
class Ops:
    """The handlers, over one workspace directory, one sandbox and the incident channel.

    ``on_update`` is called with each posted update and returns who read it; it may wait (for a
    person to read), and the tool call waits with it.
    """

    workspace: Path
    sandbox: Sandbox
    on_update: Callable[[str, ToolCallContext], Awaitable[str]]
    world: World = attrs.field(factory=World)

    def layer(self) -> Layer:
        """The handlers of every tool here."""
        return Toolkit(*ALL).handlers(
            {
                SERVICE_STATUS: self.service_status,
                RECENT_LOGS: self.recent_logs,
                METRICS: self.metrics,
                GREP_LOGS: self.grep_logs,
                DB_STATUS: self.db_status,
                DB_SESSIONS: self.db_sessions,
                POST_UPDATE: self.post_update,
                RESTART: self.restart,
                TERMINATE: self.terminate,
            }
        )

    async def service_status(self, params: ServiceQuery, call: ToolCallContext) -> ServiceStatus:
        """The service's health now."""
        await trio.sleep(LATENCY["service_status"])
        last = world.NOW - 1
        ratio = sum(world.ratio_5xx(r, last) for r in range(len(REPLICAS))) / len(REPLICAS)
        return ServiceStatus(
            params.service,
            "degraded",
            "2.14.0",
            f"{clock(world.DEPLOYED_AT)} UTC (rolling, one replica a minute)",
            f"{len(REPLICAS)}/{len(REPLICAS)}",
            round(ratio, 3),
            "failing: /healthz database check timed out after 30 s",
        )

    async def recent_logs(self, params: LogQuery, call: ToolCallContext) -> LogTail:
        """The tail of the log file in the workspace."""
        await trio.sleep(LATENCY["recent_logs"])
        text = await trio.Path(self.workspace / world.LOG_PATH).read_text()
        return LogTail(params.service, text.splitlines()[-params.lines :])

    async def metrics(self, params: MetricQuery, call: ToolCallContext) -> Series:
        """A series computed from the story (the whole service: the worst replica)."""
        await trio.sleep(LATENCY["metrics"])
        replicas = (
            range(len(REPLICAS)) if params.replica is None else [REPLICAS.index(params.replica)]
        )
        minutes = range(world.NOW - params.minutes, world.NOW)
        if params.metric == "db_pool_in_use":
            values = [float(max(world.pool_in_use(r, m) for r in replicas)) for m in minutes]
            limit: float | None = POOL_SIZE
        else:
            values = [max(world.ratio_5xx(r, m) for r in replicas) for m in minutes]
            limit = None
        points = [Point(clock(m), v) for m, v in zip(minutes, values, strict=True)]
        return Series(params.service, params.metric, params.replica, limit, points)

    async def grep_logs(self, params: GrepQuery, call: ToolCallContext) -> GrepResult:
        """``grep -n -E`` in bubblewrap: the workspace read-only at /workspace, no network."""
        network: NetworkPolicy = "none"
        request = SandboxRequest(
            "grep",
            ("-n", "-E", "--", params.pattern, f"{WORKSPACE}/{params.path}"),
            mounts=[Mount(str(self.workspace), WORKSPACE, "ro")],
            network=network,
            limits=SandboxLimits(wall_clock_seconds=10, output_bytes=256 * 1024),
        )
        result = await run(self.sandbox, request)
        lines = result.stdout.decode().splitlines()
        posture = self.sandbox.implementation
        how = (
            f"grep in {posture.name} ({posture.isolation.value}), {WORKSPACE} read-only, "
            f"network {network}, exit {result.exit_code}"
        )
        return GrepResult(len(lines), lines[:3], how)

    async def db_status(self, params: DatabaseQuery, call: ToolCallContext) -> DatabaseStatus:
        """Connections on the database, by state and by client."""
        await trio.sleep(LATENCY["db"])
        idle = self.world.idle_in_transaction()
        return DatabaseStatus(
            params.database,
            100,
            {"active": 9, "idle": 14, "idle in transaction": idle},
            {SERVICE: 9 + idle, "billing-worker": 8, "analytics": 6},
            "27 min (pid 4117, checkout-api)" if idle else "2 s",
        )

    async def db_sessions(self, params: SessionQuery, call: ToolCallContext) -> DbSessions:
        """The oldest sessions in the state."""
        await trio.sleep(LATENCY["db"])
        if params.state != "idle in transaction" or self.world.restarted:
            return DbSessions(0, [])
        oldest = [
            DbSession(
                4117 + n,
                f"{REPLICAS[n % 3]} refund-export",
                params.state,
                f"{27 - n // 3} min",
                "SELECT * FROM refunds WHERE exported_at IS NULL FOR UPDATE",
            )
            for n in range(3)
        ]
        return DbSessions(self.world.idle_in_transaction(), oldest)

    async def post_update(self, params: Update, call: ToolCallContext) -> Posted:
        """Post, and wait until the on-call engineer has read it."""
        reader = await self.on_update(params.text, call)
        return Posted("#inc-4711-checkout", reader)

    async def restart(self, params: Restart, call: ToolCallContext) -> Restarted:
        """Replace the replicas one by one (their pools, and the leaked transactions, go)."""
        for index in range(len(REPLICAS)):
            await trio.sleep(0.03)
            await call.progress({"replaced": index + 1, "of": len(REPLICAS)})
        self.world.restarted = True
        return Restarted(params.service, len(REPLICAS), f"{world.IDLE_POOL}/{POOL_SIZE}", 0.0)

    async def terminate(self, params: Terminate, call: ToolCallContext) -> Terminated:
        """Never reached in the demo: the approval policy denies it."""
        terminated = self.world.idle_in_transaction()
        self.world.restarted = True
        return Terminated(terminated)
