"""Micro-benchmark of the Deno CodeExecutor: one Code Mode pass, cold versus from a warm pool.

Imported by ``benchmarks/sandbox.py``; the leading underscore keeps ``make bench`` from running it
on its own. Run directly with ``python -m benchmarks._code_bench``.

One sample is one complete ``execute``: request checks, taking a warm workload or spawning a fresh
bubblewrap-isolated Deno, the start message, the program with 0 or 10 sequential host calls, the
result, and the kill of the workload: cold (a bare executor) also its reaping and cgroup removal;
warm (an executor with a scope) leaves those to the scope's reaper, as ``execute`` documents.
Warm samples are taken once the pool is full again and the previous workload is fully released,
so a sample never shares the CPU with the refill or the teardown of the previous one.
Medians in milliseconds, after warm-up runs.
"""

from __future__ import annotations

import statistics
import time

import trio

from effectagent.effect import JSONValue
from sandbox import (
    CodeExecutionLimits,
    CodeExecutionRequest,
    DenoCodeExecutor,
    HostCallOutcome,
    HostCallSucceeded,
    open_deno_executor,
)

__all__ = ["bench_code"]

RUNS = 30
WARMUP = 3
LIMITS = CodeExecutionLimits(wall_clock_seconds=10.0, cpu_seconds=5)
PROGRAMS = {
    0: "async () => 42",
    10: """async (tools) => {
        let total = 0;
        for (let i = 0; i < 10; i++) total += await tools.add({a: total, b: i});
        return total;
    }""",
}


class _AddHost:
    async def call(self, name: str, argument: JSONValue) -> HostCallOutcome:
        assert isinstance(argument, dict)
        a, b = argument["a"], argument["b"]
        assert isinstance(a, int)
        assert isinstance(b, int)
        return HostCallSucceeded(b)


async def _quiet(executor: DenoCodeExecutor) -> None:
    """Wait until the pool is full again and every used workload is released (reaped)."""
    with trio.fail_after(30):
        await executor.settle()


async def _median_ms(executor: DenoCodeExecutor, calls: int, runs: int, *, warm: bool) -> float:
    request = CodeExecutionRequest(PROGRAMS[calls], LIMITS, ("add",))
    host = _AddHost()
    samples = []
    for i in range(WARMUP + runs):
        if warm:
            await _quiet(executor)
        start = time.perf_counter()
        result = await executor.execute(request, host)
        elapsed = (time.perf_counter() - start) * 1000
        if result.value != (42 if calls == 0 else 45) or result.host_calls != calls:
            raise RuntimeError(f"unexpected pass result: {result}")
        if i >= WARMUP:
            samples.append(elapsed)
    return statistics.median(samples)


def bench_code(runs: int = RUNS) -> dict[str, float]:
    """Median milliseconds of one pass, cold and warm, with 0 and with 10 host calls.

    Keys: ``cold_0_calls_p50_ms``, ``cold_10_calls_p50_ms`` (a fresh bubblewrap + Deno spawn per
    pass), ``warm_0_calls_p50_ms`` and ``warm_10_calls_p50_ms`` (a pool of two pre-started
    workloads, each used once). ``runs`` is at least 30.
    """
    runs = max(runs, 30)

    async def main() -> dict[str, float]:
        figures: dict[str, float] = {}
        cold = DenoCodeExecutor()
        for calls in (0, 10):
            figures[f"cold_{calls}_calls_p50_ms"] = await _median_ms(cold, calls, runs, warm=False)
        async with open_deno_executor(warm=2, warm_limits=LIMITS) as warm:
            for calls in (0, 10):
                key = f"warm_{calls}_calls_p50_ms"
                figures[key] = await _median_ms(warm, calls, runs, warm=True)
        return figures

    return trio.run(main)


if __name__ == "__main__":
    for name, value in bench_code().items():
        print(f"{name}: {value:.2f}")
