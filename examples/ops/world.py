"""The simulated production the operations assistant investigates — deterministic, no network.

The story: ``checkout-api`` 2.14.0 was rolled out at 09:12 UTC, one replica a minute. It added a
``refund-export`` job that runs every minute and, when its CSV upload fails, leaves its database
transaction open: each replica leaks three connections a minute until its pool (20) is exhausted,
after which checkout requests time out with 503s. On ``orders-db`` the leaked connections show
as sessions "idle in transaction" holding locks on ``refunds``. A rolling restart frees them.

Everything here is computed from that story: the log file the tools read (really written to a
workspace directory, so a sandboxed ``grep`` can read it), the metrics series and the database's
sessions.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

import attrs

__all__ = [
    "DATABASE",
    "NOW",
    "POOL_SIZE",
    "REPLICAS",
    "SERVICE",
    "World",
    "log_lines",
    "pool_in_use",
    "ratio_5xx",
    "write_workspace",
]

SERVICE: Final = "checkout-api"
DATABASE: Final = "orders-db"
REPLICAS: Final = tuple(f"{SERVICE}-{index}" for index in range(3))
POOL_SIZE: Final = 20
NOW: Final = 40  # minutes after 09:00 UTC: the investigation starts at 09:40
DEPLOYED_AT: Final = 12  # replica r runs 2.14.0 from 09:(12 + r)
LEAK_PER_MINUTE: Final = 3
IDLE_POOL: Final = 6
LOG_PATH: Final = "logs/checkout-api.log"


def clock(minute: int, second: int = 0) -> str:
    """``09:MM:SS`` for ``minute`` minutes after 09:00."""
    return f"{9 + minute // 60:02d}:{minute % 60:02d}:{second:02d}"


def deployed(replica: int) -> int:
    """The minute ``replica`` started running 2.14.0."""
    return DEPLOYED_AT + replica


def pool_in_use(replica: int, minute: int) -> int:
    """Connections of ``replica``'s pool in use at ``minute`` (the leak fills it)."""
    leaked = LEAK_PER_MINUTE * max(0, minute - deployed(replica))
    return min(POOL_SIZE, IDLE_POOL + (minute + replica) % 2 + leaked)


def saturated(replica: int) -> int:
    """The first minute ``replica``'s pool is full."""
    return next(m for m in range(NOW + 1) if pool_in_use(replica, m) >= POOL_SIZE)


def ratio_5xx(replica: int, minute: int) -> float:
    """Share of ``replica``'s checkout requests answered 5xx at ``minute``."""
    if minute < saturated(replica):
        return 0.002
    return round(min(0.92, 0.35 + 0.12 * (minute - saturated(replica))), 3)


def log_lines() -> list[str]:
    """The service's log from 09:00 to 09:40, all replicas interleaved by time."""
    lines: list[str] = []
    for minute in range(NOW):
        for replica, pod in enumerate(REPLICAS):
            second = 7 + 13 * replica

            def at(offset: int, pod: str = pod, second: int = second, minute: int = minute) -> str:
                return f"2026-12-03T{clock(minute, second + offset)}Z {pod}"

            if minute == deployed(replica):
                lines.append(f"{at(0)} INFO  starting {SERVICE} 2.14.0 (build 8c1f2e4)")
                lines.append(f"{at(1)} INFO  scheduler: refund-export every 60s")
                continue
            in_use = pool_in_use(replica, minute)
            if minute > deployed(replica):
                batch = minute - deployed(replica)
                lines.append(
                    f"{at(1)} WARN  refund-export: batch {batch} upload failed "
                    "(BrokenPipeError); transaction left open"
                )
            if minute >= saturated(replica):
                lines.append(
                    f"{at(2)} ERROR sqlalchemy.exc.TimeoutError: QueuePool limit of size "
                    f"{POOL_SIZE} overflow 0 reached, connection timed out, timeout 30.00"
                )
                lines.append(f"{at(3)} ERROR POST /v1/checkout 503 30004ms")
            else:
                if in_use >= POOL_SIZE - 6:
                    lines.append(f"{at(2)} WARN  db pool: {in_use}/{POOL_SIZE} in use")
                latency = 80 + (minute * 7 + replica * 13) % 40
                lines.append(f"{at(3)} INFO  POST /v1/checkout 200 {latency}ms")
    return lines


def write_workspace(root: Path) -> Path:
    """Write the log under ``root`` (readable by anyone: the sandbox reads it as ``nobody``)."""
    path = root / LOG_PATH
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(log_lines()) + "\n")
    for item in (root, path.parent):
        item.chmod(0o755)
    path.chmod(0o644)
    return path


@attrs.define
class World:
    """What changes while the assistant works: whether the service was restarted."""

    restarted: bool = False

    def idle_in_transaction(self) -> int:
        """Sessions of ``checkout-api`` idle in a transaction on ``orders-db``."""
        return 0 if self.restarted else len(REPLICAS) * POOL_SIZE - 2
