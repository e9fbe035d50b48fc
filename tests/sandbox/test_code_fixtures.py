"""Shared fixtures of the CodeExecutor suites, and the tests that prove the leak tracker works.

:class:`WorkloadTracker` records every Deno workload an executor spawns during a test (by
wrapping ``spawn_workload``) together with the pids inside its sandbox, and
:meth:`WorkloadTracker.assert_clean` proves that nothing of any of them is left: the direct child
reaped, every process of the workload gone (by pid and by scanning ``/proc`` for live processes
running the Deno binary), every cgroup and temp dir removed. It checks at once, with no grace
period (where a pids cgroup tracks every workload): an executor closes (or a bare executor's
``execute`` returns) only once everything is released, and the fixture is torn down after every
executor a test opened is closed.
:func:`can_run_code` tells whether a pass's processes were really killed when it returned. The
suites import the fixtures from here.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import attrs
import pytest
import trio

import sandbox._deno as deno_module
import sandbox._deno_pool as pool_module
from effectagent.effect import JSONValue
from sandbox import (
    CodeExecutionLimits,
    CodeExecutionRequest,
    DenoCodeExecutor,
    HostCallOutcome,
    HostCallSucceeded,
)
from sandbox._deno_pool import SpawnConfig, Workload, find_deno

Handler = Callable[[JSONValue], Awaitable[HostCallOutcome]]


def _deno_identity() -> tuple[int, int]:
    info = os.stat(find_deno())
    return info.st_dev, info.st_ino


def live_deno_processes() -> set[int]:
    """Pids of live processes (not zombies) whose executable is the Deno binary we run."""
    identity = _deno_identity()
    found: set[int] = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            info = os.stat(f"/proc/{entry}/exe")
        except OSError:
            continue
        if (info.st_dev, info.st_ino) == identity:
            found.add(int(entry))
    return found


def _alive(pid: int) -> bool:
    """Whether ``pid`` can still run code: it exists, is no zombie and is not exiting."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return False
    return fields[0] not in ("Z", "X") and not int(fields[6]) & 0x4  # PF_EXITING


def _sigkill_pending(status: str) -> bool:
    kill_bit = 1 << (signal.SIGKILL - 1)
    return any(
        int(line.split()[1], 16) & kill_bit
        for line in status.splitlines()
        if line.startswith(("SigPnd:", "ShdPnd:"))
    )


def _thread_can_run(pid: int, tid: int) -> bool:
    try:
        with open(f"/proc/{pid}/task/{tid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        with open(f"/proc/{pid}/task/{tid}/status") as f:
            status = f.read()
    except OSError:
        return False  # gone
    if fields[0] in ("Z", "X") or int(fields[6]) & 0x4:  # zombie, dead or PF_EXITING
        return False
    return not _sigkill_pending(status)


def can_run_code(pid: int) -> bool:
    """Whether any thread of ``pid`` may still execute code: it exists, is no zombie, is not
    exiting and has no ``SIGKILL`` pending (the kernel acts on one before returning to user space).

    A killed thread is seen, for an instant, between taking its ``SIGKILL`` and being marked as
    exiting; so a thread counts as able to run only if it looks so in three reads 1 ms apart.
    """
    try:
        threads = [int(tid) for tid in os.listdir(f"/proc/{pid}/task")]
    except OSError:
        return False
    return any(_stays_runnable(pid, tid) for tid in threads)


def _stays_runnable(pid: int, tid: int) -> bool:
    for attempt in range(3):
        if not _thread_can_run(pid, tid):
            return False
        if attempt < 2:
            time.sleep(0.001)
    return True


@attrs.define
class Tracked:
    """One workload seen by the tracker, and the pids of its sandbox while it was ready."""

    workload: Workload
    members: list[int] = attrs.field(factory=list)

    @property
    def paths(self) -> list[str]:
        groups = (self.workload.memory, self.workload.pids)
        paths = [g.path for g in groups if g is not None]
        if self.workload.workdir is not None:
            paths.append(self.workload.workdir)
        return paths


@attrs.define
class WorkloadTracker:
    """Records workloads spawned during one test; see the module notes."""

    tracked: list[Tracked] = attrs.field(factory=list)
    baseline: set[int] = attrs.field(factory=set)

    @property
    def spawned(self) -> int:
        """How many workloads were spawned."""
        return len(self.tracked)

    def leftovers(self) -> list[str]:
        """Everything of the tracked workloads still present, described."""
        problems = []
        for item in self.tracked:
            process = item.workload.process
            if process.returncode is None:
                problems.append(f"workload {process.pid} was not reaped")
            problems += [f"pid {pid} still alive" for pid in item.members if _alive(pid)]
            problems += [f"{path} still exists" for path in item.paths if os.path.exists(path)]
        problems += [f"deno pid {pid} still alive" for pid in live_deno_processes() - self.baseline]
        return problems

    def assert_clean(self) -> None:
        """Nothing of any tracked workload remains, now (no grace period).

        Except on a host without a pids cgroup: there closing a workload waits for bwrap only, and
        the processes inside its namespaces die right after it, so the kernel gets 2 s for them.
        """
        if any(not item.workload.tracked for item in self.tracked):
            deadline = time.monotonic() + 2.0
            while self.leftovers() and time.monotonic() < deadline:
                time.sleep(0.01)
        assert self.leftovers() == []


@pytest.fixture
def tracker(monkeypatch: pytest.MonkeyPatch) -> Iterator[WorkloadTracker]:
    """Track every workload spawned by this test and assert afterwards that none is left."""
    tracker = WorkloadTracker(baseline=live_deno_processes())
    real_spawn = pool_module.spawn_workload
    real_wait_ready = Workload.wait_ready

    async def spawn(config: SpawnConfig) -> Workload:
        workload = await real_spawn(config)
        tracker.tracked.append(Tracked(workload))
        return workload

    async def wait_ready(self: Workload, timeout: float = 10.0) -> None:
        await real_wait_ready(self, timeout)
        for item in tracker.tracked:
            if item.workload is self and self.pids is not None:
                item.members = self.pids.pids()

    monkeypatch.setattr(pool_module, "spawn_workload", spawn)
    monkeypatch.setattr(deno_module, "spawn_workload", spawn)
    monkeypatch.setattr(Workload, "wait_ready", wait_ready)
    yield tracker
    tracker.assert_clean()


@pytest.fixture(scope="session")
def executor() -> DenoCodeExecutor:
    """The default, bubblewrap-isolated executor (cold spawn per pass)."""
    return DenoCodeExecutor()


@attrs.define
class Host:
    """A CodeExecutionHost for tests: per-name handlers (default: echo), and a call log."""

    handlers: dict[str, Handler] = attrs.field(factory=dict)
    calls: list[tuple[str, JSONValue]] = attrs.field(factory=list)

    async def call(self, name: str, argument: JSONValue) -> HostCallOutcome:
        self.calls.append((name, argument))
        handler = self.handlers.get(name)
        if handler is None:
            return HostCallSucceeded(argument)
        return await handler(argument)


def request(source: str, *names: str, **limits: Any) -> CodeExecutionRequest:
    """A request with short default time limits (tests never wait long)."""
    limits.setdefault("wall_clock_seconds", 3.0)
    limits.setdefault("cpu_seconds", 2)
    return CodeExecutionRequest(source, CodeExecutionLimits(**limits), names)


async def run_for_a_while(fn: Callable[[], Awaitable[object]], seconds: float) -> None:
    """Run ``fn`` and cancel it after ``seconds`` (it must still be running then)."""
    with trio.move_on_after(seconds) as scope:
        await fn()
    assert scope.cancelled_caught, "expected the operation to still be running"


# ---- the tracker itself must be able to fail ----------------------------------------------------


async def test_tracker_reports_a_workload_that_was_never_closed(
    executor: DenoCodeExecutor, monkeypatch: pytest.MonkeyPatch
) -> None:
    tracker = WorkloadTracker(baseline=live_deno_processes())
    real_spawn = pool_module.spawn_workload

    async def spawn(config: SpawnConfig) -> Workload:
        workload = await real_spawn(config)
        tracker.tracked.append(Tracked(workload))
        return workload

    monkeypatch.setattr(pool_module, "spawn_workload", spawn)
    workload = await pool_module.spawn_workload(executor.spawn_config(CodeExecutionLimits()))
    await workload.wait_ready()
    assert any("not reaped" in problem for problem in tracker.leftovers())
    assert any(problem.startswith("deno pid") for problem in tracker.leftovers())
    await workload.aclose()
    tracker.assert_clean()


async def test_closing_a_workload_removes_its_cgroups_and_sandbox_processes(
    executor: DenoCodeExecutor, tracker: WorkloadTracker
) -> None:
    workload = await pool_module.spawn_workload(executor.spawn_config(CodeExecutionLimits()))
    await workload.wait_ready()
    members = tracker.tracked[0].members
    assert members, "the pids cgroup holds the sandbox's processes"
    assert all(_alive(pid) for pid in members)
    await workload.aclose()
    assert not any(_alive(pid) for pid in members)
    assert not [path for path in tracker.tracked[0].paths if await trio.Path(path).exists()]


async def test_can_run_code_tells_a_killed_workload_from_a_live_one(
    executor: DenoCodeExecutor, tracker: WorkloadTracker
) -> None:
    workload = await pool_module.spawn_workload(executor.spawn_config(CodeExecutionLimits()))
    await workload.wait_ready()
    members = tracker.tracked[0].members
    assert members
    assert all(can_run_code(pid) for pid in members)
    workload.kill()
    assert workload.killed
    assert not any(can_run_code(pid) for pid in members)
    assert tracker.leftovers(), "killed is not released: its cgroups are still there"
    await workload.aclose()
