"""The warm pool and the executor Layer: workloads spawned ahead, each used once, scope-owned."""

from __future__ import annotations

import pytest
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
from sandbox._deno_pool import Reaper, WarmPool, Workload

from .test_code_fixtures import (
    Host,
    WorkloadTracker,
    can_run_code,
    request,
    run_for_a_while,
    tracker,
)

__all__ = ["tracker"]  # fixtures used by name

LIMITS = {"wall_clock_seconds": 3.0, "cpu_seconds": 2}
WARM_LIMITS = CodeExecutionLimits(**LIMITS)  # type: ignore[arg-type]


async def wait_until_ready(pool: WarmPool, count: int) -> None:
    with trio.fail_after(10):
        while pool.ready < count:  # noqa: ASYNC110 - the pool has no event to wait on
            await trio.sleep(0.01)


def reaper_of(executor: object) -> Reaper:
    reaper = getattr(executor, "_reaper", None)
    assert isinstance(reaper, Reaper)
    return reaper


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
            closed = [w for w in ready if w.killed and w not in used]
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
        served = tracker.tracked[0]
        assert served.workload.killed
        assert served.members
        assert not any(can_run_code(pid) for pid in served.members)
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


# A Worker keeps a second thread busy after the program has returned its value.
_BUSY_WORKER = """async () => {
    new Worker("data:text/javascript," + encodeURIComponent("for (;;) {}"), {type: "module"});
    await new Promise((resolve) => setTimeout(resolve, 50));
    return "done";
}"""


async def test_a_pass_returns_with_its_workload_killed_and_closing_waits_for_its_release(
    tracker: WorkloadTracker,
) -> None:
    async with open_deno_executor(warm=1, warm_limits=WARM_LIMITS) as executor:
        await wait_until_ready(pool_of(executor), 1)
        result = await executor.execute(request(_BUSY_WORKER), Host())
        assert result.value == "done"
        served = tracker.tracked[0]
        assert served.members
        # (a) returned: every process of the pass is SIGKILLed, none can run code any more...
        assert not any(can_run_code(pid) for pid in served.members)
        # ... while its release (reap, cgroup removal) may still be under way in the scope.
        assert reaper_of(executor).pending in (0, 1)
    # (b) closed: nothing of the pass (or of the pool) is left, checked at once.
    assert tracker.leftovers() == []


async def test_closing_the_executor_waits_for_releases_under_cancellation(
    tracker: WorkloadTracker,
) -> None:
    with trio.CancelScope() as outer:
        async with open_deno_executor(warm=2, warm_limits=WARM_LIMITS) as executor:
            await wait_until_ready(pool_of(executor), 2)
            await executor.execute(request(_BUSY_WORKER), Host())
            served = tracker.tracked[0]
            assert not any(can_run_code(pid) for pid in served.members)
            outer.cancel()  # leaving the executor is now itself cancelled
            await trio.lowlevel.checkpoint()
    assert outer.cancelled_caught
    assert tracker.leftovers() == []


async def test_a_workload_the_reaper_refuses_is_released_before_execute_returns(
    tracker: WorkloadTracker,
) -> None:
    async with open_deno_executor() as executor:  # a reaper, no pool
        reaper = reaper_of(executor)
        with pytest.MonkeyPatch.context() as patch:
            # As on a host without a pids cgroup, where the kill would reach bwrap's group only.
            patch.setattr(Workload, "tracked", property(lambda _: False))
            result = await executor.execute(request("async () => 1"), Host())
        assert result.value == 1
        assert reaper.pending == 0
        assert tracker.leftovers() == []
        await executor.execute(request(_BUSY_WORKER), Host())
        assert tracker.tracked[1].workload.killed
    assert reaper.pending == 0
    assert tracker.leftovers() == []
