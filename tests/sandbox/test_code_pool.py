"""The warm pool and the executor Layer: workloads spawned ahead, each used once, scope-owned."""

from __future__ import annotations

import trio

from effectagent.effect import open_layer
from sandbox import (
    CodeExecutionLimits,
    CodeExecutorService,
    deno_executor_layer,
    execute_in,
    host_layer,
    open_deno_executor,
)
from sandbox._deno_pool import WarmPool

from .test_code_fixtures import Host, WorkloadTracker, request, run_for_a_while, tracker

__all__ = ["tracker"]  # fixtures used by name

LIMITS = {"wall_clock_seconds": 3.0, "cpu_seconds": 2}
WARM_LIMITS = CodeExecutionLimits(**LIMITS)  # type: ignore[arg-type]


async def wait_until_ready(pool: WarmPool, count: int) -> None:
    with trio.fail_after(10):
        while pool.ready < count:  # noqa: ASYNC110 - the pool has no event to wait on
            await trio.sleep(0.01)


def pool_of(executor: object) -> WarmPool:
    pool = getattr(executor, "_pool", None)
    assert isinstance(pool, WarmPool)
    return pool


async def test_passes_take_warm_workloads_and_never_reuse_one(tracker: WorkloadTracker) -> None:
    async with open_deno_executor(warm=2, warm_limits=WARM_LIMITS) as executor:
        pool = pool_of(executor)
        await wait_until_ready(pool, 2)
        assert tracker.spawned == 2
        used = []
        for i in range(3):
            ready = [item.workload for item in tracker.tracked[: tracker.spawned]]
            result = await executor.execute(request(f"async () => {i}"), Host())
            assert result.value == i
            closed = [w for w in ready if w.process.returncode is not None and w not in used]
            assert len(closed) == 1, "exactly one warm workload served the pass"
            used.extend(closed)
            await wait_until_ready(pool, 2)
        assert len(set(map(id, used))) == 3
        assert tracker.spawned == 5  # 2 up front + 1 refill per pass; no cold spawn


async def test_a_pass_with_other_spawn_limits_spawns_cold(tracker: WorkloadTracker) -> None:
    async with open_deno_executor(warm=1, warm_limits=WARM_LIMITS) as executor:
        pool = pool_of(executor)
        await wait_until_ready(pool, 1)
        result = await executor.execute(request("async () => 'cold'", cpu_seconds=1), Host())
        assert result.value == "cold"
        assert pool.ready == 1  # the warm workload was left alone
        assert tracker.spawned == 2


async def test_leaving_the_executor_scope_kills_the_pool(tracker: WorkloadTracker) -> None:
    async with open_deno_executor(warm=3, warm_limits=WARM_LIMITS) as executor:
        await wait_until_ready(pool_of(executor), 3)
        assert all(item.workload.alive for item in tracker.tracked)
    tracker.assert_clean()


async def test_cancelling_a_warm_pass_leaves_nothing_behind(tracker: WorkloadTracker) -> None:
    async with open_deno_executor(warm=1, warm_limits=WARM_LIMITS) as executor:
        await wait_until_ready(pool_of(executor), 1)

        async def loop() -> None:
            await executor.execute(request("async () => { for (;;) {} }"), Host())

        await run_for_a_while(loop, 0.3)
        served = tracker.tracked[0].workload
        assert served.process.returncode is not None
    tracker.assert_clean()


async def test_the_layer_provides_a_pooled_executor_for_per_pass_hosts(
    tracker: WorkloadTracker,
) -> None:
    layer = deno_executor_layer(warm=1, warm_limits=WARM_LIMITS)
    async with open_layer(layer) as base:
        executor = base.require(CodeExecutorService)
        await wait_until_ready(pool_of(executor), 1)
        for word in ("first", "second"):
            host = Host()
            async with open_layer(host_layer(host), base) as context:
                source = f"async (t) => (await t.echo({word!r})).toUpperCase()"
                result = await execute_in(context, request(source, "echo"))
            assert result.value == word.upper()
            assert host.calls == [("echo", word)]
    tracker.assert_clean()
