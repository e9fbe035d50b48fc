"""Micro-benchmark of the command sandbox: ``/bin/true`` through each runner, end to end.

Imported by ``benchmarks/sandbox.py``; the leading underscore keeps ``make bench`` from running it
on its own. Run directly with ``python -m benchmarks._sandbox_command_bench``.

One sample is one complete :func:`sandbox.run`: request checks, spawn, the event stream, reaping,
and removal of the temporary workdir and cgroups. Medians in milliseconds, after warm-up runs.
"""

from __future__ import annotations

import statistics
import time

import trio

from sandbox import (
    UNLIMITED,
    BubblewrapSandbox,
    LocalProcessSandbox,
    Sandbox,
    SandboxLimits,
    SandboxRequest,
    run,
)
from sandbox._posture import LIMIT_MEMORY, LIMIT_PROCESSES

__all__ = ["bench_commands"]

RUNS = 40
WARMUP = 3


async def _median_ms(sandbox: Sandbox, request: SandboxRequest, runs: int) -> float:
    for _ in range(WARMUP):
        await run(sandbox, request)
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        result = await run(sandbox, request)
        samples.append((time.perf_counter() - start) * 1000)
        if result.exit_code != 0:
            raise RuntimeError(f"/bin/true failed: {result}")
    return statistics.median(samples)


def bench_commands(runs: int = RUNS) -> dict[str, float]:
    """Median milliseconds of ``/bin/true`` via the local runner and via bubblewrap.

    Keys: ``local_true_p50_ms`` (memory and processes lifted: the local runner enforces neither),
    ``bwrap_true_p50_ms`` (the default request: network none, every default limit, as the
    unprivileged workload user when run as root), ``bwrap_true_no_accounting_p50_ms``
    (``BubblewrapSandbox(accounting=False)``, limits lifted where that removes a cgroup) and
    ``bwrap_true_limited_p50_ms`` (explicit cpu, file-size, memory and process limits when
    enforceable). ``runs`` is at least 30.
    """
    runs = max(runs, 30)

    async def main() -> dict[str, float]:
        local = LocalProcessSandbox()
        bwrap = BubblewrapSandbox()
        posture = bwrap.implementation
        limits = SandboxLimits(
            cpu_seconds=5,
            file_size_bytes=1 << 20,
            memory_bytes=256 << 20 if posture.enforces(LIMIT_MEMORY) else UNLIMITED,
            max_processes=64 if posture.enforces(LIMIT_PROCESSES) else UNLIMITED,
        )
        limited = SandboxRequest("/bin/true", limits=limits)
        lifted = SandboxLimits(memory_bytes=UNLIMITED, max_processes=UNLIMITED)
        return {
            "local_true_p50_ms": await _median_ms(
                local, SandboxRequest("/bin/true", network="host", limits=lifted), runs
            ),
            "bwrap_true_p50_ms": await _median_ms(bwrap, SandboxRequest("/bin/true"), runs),
            "bwrap_true_no_accounting_p50_ms": await _median_ms(
                BubblewrapSandbox(accounting=False),
                SandboxRequest("/bin/true", limits=lifted),
                runs,
            ),
            "bwrap_true_limited_p50_ms": await _median_ms(bwrap, limited, runs),
        }

    return trio.run(main)


if __name__ == "__main__":
    for name, value in bench_commands().items():
        print(f"{name:34} {value:8.2f}")
