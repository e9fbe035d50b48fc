"""The warm pool and the executor Layer: workloads spawned ahead, each used once, scope-owned.

What a pool holds is read through the executor's public ``owned()`` and ``on_acquire`` hook;
waiting for a pool to fill or a release to finish waits on ``settle()``, never on a timer.
"""

from __future__ import annotations

import re

import pytest
import trio

from effectagent.effect._layer import open_layer
from sandbox import (
    UNLIMITED,
    CodeExecutorService,
    DenoCodeExecutor,
    OwnedResources,
    deno_executor_layer,
    open_deno_executor,
)
from sandbox._code import execute_in, host_layer

from .test_code_fixtures import (
    WARM_LIMITS,
    Host,
    Started,
    WorkloadTracker,
    can_run_code,
    cancel_once_running,
    request,
    tracker,
)

__all__ = ["tracker"]  # fixtures used by name


async def test_passes_take_warm_workloads_and_never_reuse_one(tracker: WorkloadTracker) -> None:
    async with open_deno_executor(
        warm=2, warm_limits=WARM_LIMITS, on_acquire=tracker.record
    ) as executor:
        await executor.settle()
        assert tracker.spawned == 2
        for i in range(3):
            before = executor.owned().cgroups
            result = await executor.execute(request(f"async () => {i}"), Host())
            assert result.value == i
            await executor.settle()
            after = executor.owned().cgroups
            assert len(before - after) == 2, "one warm workload (memory, pids) served and is gone"
            assert len(after - before) == 2, "one refill took its place"
        assert tracker.spawned == 5  # 2 up front + 1 refill per pass; no cold spawn


async def test_a_pass_with_other_spawn_limits_spawns_cold(tracker: WorkloadTracker) -> None:
    async with open_deno_executor(
        warm=1, warm_limits=WARM_LIMITS, on_acquire=tracker.record
    ) as executor:
        await executor.settle()
        warm = executor.owned()
        result = await executor.execute(request("async () => 'cold'", cpu_seconds=1), Host())
        assert result.value == "cold"
        await executor.settle()
        assert executor.owned().cgroups == warm.cgroups  # the warm workload was left alone
        assert tracker.spawned == 2


async def test_leaving_the_executor_scope_kills_the_pool(tracker: WorkloadTracker) -> None:
    async with open_deno_executor(
        warm=3, warm_limits=WARM_LIMITS, on_acquire=tracker.record
    ) as executor:
        await executor.settle()
        held = tracker.sample(executor)
        assert len(held.cgroups) == 6  # memory and pids, per workload
        assert all(can_run_code(pid) for pid in held.processes)
    assert executor.owned().empty
    tracker.assert_clean()


async def test_cancelling_a_warm_pass_leaves_nothing_behind(tracker: WorkloadTracker) -> None:
    async with open_deno_executor(
        warm=1, warm_limits=WARM_LIMITS, on_acquire=tracker.record
    ) as executor:
        await executor.settle()
        host = Started(tracker, executor)
        await cancel_once_running(host, "async (t) => { await t.started(); for (;;) {} }")
        assert tracker.spawned >= 1
        assert host.seen.processes
        assert not any(can_run_code(pid) for pid in host.seen.processes)
    tracker.assert_clean()


async def test_the_layer_provides_a_pooled_executor_for_per_pass_hosts(
    tracker: WorkloadTracker,
) -> None:
    layer = deno_executor_layer(warm=1, warm_limits=WARM_LIMITS, on_acquire=tracker.record)
    async with open_layer(layer) as base:
        executor = base.require(CodeExecutorService)
        assert isinstance(executor, DenoCodeExecutor)
        await executor.settle()
        for word in ("first", "second"):
            host = Host()
            async with open_layer(host_layer(host), base) as context:
                source = f"async (t) => (await t.echo({word!r})).toUpperCase()"
                result = await execute_in(context, request(source, "echo"))
            assert result.value == word.upper()
            assert host.calls == [("echo", word)]
    tracker.assert_clean()


# A Worker keeps a second thread busy after the program has returned its value.
_BUSY_WORKER = """async (t) => {
    new Worker("data:text/javascript," + encodeURIComponent("for (;;) {}"), {type: "module"});
    await new Promise((resolve) => setTimeout(resolve, 50));
    await t.started();
    return "done";
}"""


async def test_a_pass_returns_with_its_workload_killed_and_closing_waits_for_its_release(
    tracker: WorkloadTracker,
) -> None:
    async with open_deno_executor(
        warm=1, warm_limits=WARM_LIMITS, on_acquire=tracker.record
    ) as executor:
        await executor.settle()
        host = Started(tracker, executor)
        result = await executor.execute(request(_BUSY_WORKER, "started"), host)
        assert result.value == "done"
        served = host.seen.processes
        assert served
        # (a) returned: every process of the pass is SIGKILLed, none can run code any more...
        assert not any(can_run_code(pid) for pid in served)
    # (b) closed: nothing of the pass (or of the pool) is left, checked at once.
    assert executor.owned().empty
    assert tracker.leftovers() == []


async def test_closing_the_executor_waits_for_releases_under_cancellation(
    tracker: WorkloadTracker,
) -> None:
    with trio.CancelScope() as outer:
        async with open_deno_executor(
            warm=1, warm_limits=WARM_LIMITS, on_acquire=tracker.record
        ) as executor:
            await executor.settle()
            host = Started(tracker, executor)
            await executor.execute(request(_BUSY_WORKER, "started"), host)
            assert not any(can_run_code(pid) for pid in host.seen.processes)
            outer.cancel()  # leaving the executor is now itself cancelled
            await trio.lowlevel.checkpoint()
    assert outer.cancelled_caught
    assert tracker.leftovers() == []


async def test_settle_waits_for_the_release_of_a_used_workload(tracker: WorkloadTracker) -> None:
    async with open_deno_executor(
        warm=1, warm_limits=WARM_LIMITS, on_acquire=tracker.record
    ) as executor:
        await executor.settle()
        host = Started(tracker, executor)
        await executor.execute(request(_BUSY_WORKER, "started"), host)
        served = host.seen
        await executor.settle()
        held = executor.owned()
        assert not (held.cgroups & served.cgroups), "the used workload is fully released"
        assert len(held.cgroups) == 2, "the pool is full again"
        assert tracker.spawned == 2


async def test_settle_is_cancellable_and_returns_at_once_without_a_pool(
    tracker: WorkloadTracker,
) -> None:
    await DenoCodeExecutor(on_acquire=tracker.record).settle()
    async with open_deno_executor(warm=1, on_acquire=tracker.record) as executor:
        with trio.CancelScope() as scope:
            scope.cancel()
            await executor.settle()
        assert scope.cancelled_caught


async def test_a_workload_the_reaper_refuses_is_released_before_execute_returns(
    tracker: WorkloadTracker,
) -> None:
    async with open_deno_executor(on_acquire=tracker.record) as executor:  # a reaper, no pool
        host = Started(tracker, executor)
        # Without a pids cgroup (no process cap) the kill cannot reach every process of the
        # sandbox directly, so the reaper refuses it and the pass releases its workload itself.
        unlimited = request(_BUSY_WORKER, "started", max_processes=UNLIMITED)
        result = await executor.execute(unlimited, host)
        assert result.value == "done"
        assert len(tracker.acquired[0].cgroups) == 1  # memory only
        assert executor.owned().empty
        assert tracker.leftovers() == []
        await executor.execute(request(_BUSY_WORKER, "started"), host)
    assert executor.owned().empty
    assert tracker.leftovers() == []


async def test_an_on_acquire_hook_that_raises_leaves_no_workload_behind(
    tracker: WorkloadTracker,
) -> None:
    # The hook must not raise; one that does still gets no workload leaked: the pass fails with
    # its exception, and the workload it was told of is released first.
    def failing_hook(owned: OwnedResources) -> None:
        tracker.record(owned)
        raise RuntimeError("the audit log is down")

    executor = DenoCodeExecutor(on_acquire=failing_hook)
    with pytest.raises(RuntimeError, match="the audit log is down"):
        await executor.execute(request("async () => 1"), Host())
    assert tracker.spawned == 1
    assert executor.owned().empty
    assert tracker.leftovers() == []
    # A pool counts such a workload as a failed spawn: it keeps none of them.
    async with open_deno_executor(warm=1, on_acquire=failing_hook) as pooled:
        await pooled.settle()  # paused after its failed spawns
        assert tracker.spawned > 1
        assert pooled.owned().empty
        assert tracker.leftovers() == []


@pytest.mark.parametrize(
    ("arguments", "error", "message"),
    [
        ({"warm": -1}, ValueError, "warm must be an int >= 0, got -1"),
        ({"warm": 1.5}, ValueError, "warm must be an int >= 0, got 1.5"),
        ({"warm": "2"}, ValueError, "warm must be an int >= 0, got '2'"),
        ({"warm": True}, ValueError, "warm must be an int >= 0, got True"),
        (
            {"warm_limits": {"cpu_seconds": 1}},
            TypeError,
            "warm_limits must be a CodeExecutionLimits",
        ),
        ({"on_acquire": 5}, TypeError, "on_acquire must be a function or None, got int"),
    ],
)
async def test_pool_arguments_of_the_wrong_type_or_value_are_refused_when_given(
    arguments: dict[str, object], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=re.escape(message)):
        deno_executor_layer(**arguments)  # type: ignore[arg-type]
    with pytest.raises(error, match=re.escape(message)):
        async with open_deno_executor(**arguments):  # type: ignore[arg-type]
            pass
    if "on_acquire" in arguments:
        with pytest.raises(error, match=re.escape(message)):
            DenoCodeExecutor(**arguments)  # type: ignore[arg-type]
