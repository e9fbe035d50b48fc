"""Shared fixtures of the CodeExecutor suites, and the tests that prove the leak tracker works.

:class:`WorkloadTracker` learns what the executors of one test hold only through their public
API — the ``on_acquire`` hook (every workload as it is spawned) and ``owned()`` snapshots (the
processes inside a sandbox while it runs) — and afterwards proves that nothing of it is left:
every process it saw gone (matched by pid *and* start time, so a recycled pid is never blamed),
every cgroup and temp dir removed, no process left in one of those cgroups, and no process
descended from this test process, alive or zombie. It judges only what this test started: Deno
processes of anything else on the machine are none of its business. It checks at once, with no
grace period where a pids cgroup tracks every workload: an executor closes (or a bare executor's
``execute`` returns) only once everything is released, and the fixture is torn down after every
executor a test opened is closed.

:func:`can_run_code` tells whether a pass's processes were really killed when it returned. The
suites import the fixtures from here.
"""

from __future__ import annotations

import os
import select
import signal
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import attrs
import pytest
import trio

from effectagent.effect import JSONValue
from sandbox import (
    CodeExecutionLimits,
    CodeExecutionRequest,
    DenoCodeExecutor,
    HostCallOutcome,
    HostCallSucceeded,
    OwnedResources,
    open_deno_executor,
)

from .conftest import Held, descendants, proc_stat

Handler = Callable[[JSONValue], Awaitable[HostCallOutcome]]


def _sigkill_pending(status: str) -> bool:
    kill_bit = 1 << (signal.SIGKILL - 1)
    return any(
        int(line.split()[1], 16) & kill_bit
        for line in status.splitlines()
        if line.startswith(("SigPnd:", "ShdPnd:"))
    )


def _thread_looks_runnable(pid: int, tid: int) -> bool:
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
    exiting. So when a thread looks runnable, the process's exit is waited for (on its pidfd,
    for up to 200 ms): a process that exits then was already dying.
    """
    try:
        threads = [int(tid) for tid in os.listdir(f"/proc/{pid}/task")]
    except OSError:
        return False
    if not any(_thread_looks_runnable(pid, tid) for tid in threads):
        return False
    try:
        pidfd = os.pidfd_open(pid)
    except OSError:
        return False
    try:
        poller = select.poll()
        poller.register(pidfd, select.POLLIN)
        return not poller.poll(200)
    finally:
        os.close(pidfd)


def _in_cgroups(paths: set[str]) -> list[int]:
    """Processes whose cgroup (any hierarchy) is one of the cgroup directories ``paths``."""
    suffixes = {path.split("/effectagent-", 1)[-1] for path in paths}
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cgroup") as f:
                text = f.read()
        except OSError:
            continue
        if any(f"effectagent-{suffix}" in text for suffix in suffixes):
            found.append(int(entry))
    return found


@attrs.define
class WorkloadTracker:
    """Records what the executors of one test held; see the module notes."""

    acquired: list[OwnedResources] = attrs.field(factory=list)
    held: Held = attrs.field(factory=Held)

    def record(self, owned: OwnedResources) -> None:
        """The ``on_acquire`` hook: one workload was spawned, holding ``owned``."""
        self.acquired.append(owned)
        self.held.note(owned)

    def sample(self, executor: DenoCodeExecutor) -> OwnedResources:
        """``executor.owned()``, remembered."""
        owned = executor.owned()
        self.held.note(owned)
        return owned

    @property
    def spawned(self) -> int:
        """How many workloads were spawned."""
        return len(self.acquired)

    def leftovers(self) -> list[str]:
        """Everything recorded that is still present, and every descendant of this process."""
        problems = self.held.leftovers()
        problems += [f"pid {pid} is in a cgroup of ours" for pid in _in_cgroups(self.held.cgroups)]
        problems += [f"pid {pid} descends from the test" for pid in descendants(os.getpid())]
        return problems

    def assert_clean(self) -> None:
        """Nothing recorded remains, now (no grace period)."""
        assert self.leftovers() == []


@pytest.fixture
def tracker() -> Iterator[WorkloadTracker]:
    """Track every workload of this test's executors and assert afterwards that none is left."""
    tracker = WorkloadTracker()
    yield tracker
    tracker.assert_clean()


@pytest.fixture
def executor(tracker: WorkloadTracker) -> DenoCodeExecutor:
    """The default, bubblewrap-isolated executor (cold spawn per pass), tracked."""
    return DenoCodeExecutor(on_acquire=tracker.record)


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
    """A request whose time limits are far beyond what a pass that finishes needs, however busy
    the machine: a pass that finishes never waits for them, and no test fails because a loaded
    machine started or ran its program slowly. A test about a time limit sets that limit (and
    leaves the other one far away, so that only the one under test can end the pass)."""
    limits.setdefault("wall_clock_seconds", 120.0)
    limits.setdefault("cpu_seconds", 60)
    return CodeExecutionRequest(source, CodeExecutionLimits(**limits), names)


WARM_LIMITS = CodeExecutionLimits(wall_clock_seconds=120.0, cpu_seconds=60)
"""What :func:`request` asks for by default: a pass with these limits takes a warm workload."""


@attrs.define
class Started:
    """A host whose ``started`` call says the program is running, records what the executor holds
    at that moment, and echoes; every other call echoes too."""

    tracker: WorkloadTracker
    executor: DenoCodeExecutor
    running: trio.Event = attrs.field(factory=trio.Event)
    seen: OwnedResources = attrs.field(factory=OwnedResources)

    async def call(self, name: str, argument: JSONValue) -> HostCallOutcome:
        if name == "started":
            self.seen = self.tracker.sample(self.executor)
            self.running.set()
        return HostCallSucceeded(argument)


async def cancel_once_running(host: Started, source: str, **limits: Any) -> None:
    """Run ``source`` (which calls ``tools.started()`` and then keeps going) on ``host.executor``
    and cancel the pass as soon as it has called; it must not have finished by then."""
    finished = False
    with trio.CancelScope() as scope:
        async with trio.open_nursery() as nursery:

            async def cancel_when_running() -> None:
                await host.running.wait()
                scope.cancel()

            nursery.start_soon(cancel_when_running)
            await host.executor.execute(request(source, "started", **limits), host)
            finished = True
            nursery.cancel_scope.cancel()
    assert not finished, "expected the pass to still be running"
    assert scope.cancelled_caught


# ---- the tracker itself must be able to fail ----------------------------------------------------


async def test_the_tracker_reports_a_workload_still_held() -> None:
    tracker = WorkloadTracker()
    async with open_deno_executor(warm=1, on_acquire=tracker.record) as executor:
        await executor.settle()
        held = tracker.sample(executor)
        assert tracker.spawned == 1
        assert len(held.processes) >= 3  # bwrap, its sandbox init, Deno
        problems = tracker.leftovers()
        assert any(problem.endswith("still exists") and "pid" in problem for problem in problems)
        assert any(problem.startswith("cgroup ") for problem in problems)
        assert any("descends from the test" in problem for problem in problems)
        assert any("in a cgroup of ours" in problem for problem in problems)
    tracker.assert_clean()
    assert executor.owned().empty


async def test_the_tracker_reports_a_zombie_child(tracker: WorkloadTracker) -> None:
    child = await trio.lowlevel.open_process(["/bin/true"])
    pidfd = os.pidfd_open(child.pid)
    try:
        with trio.fail_after(5):
            await trio.lowlevel.wait_readable(pidfd)  # readable once it has exited
    finally:
        trio.lowlevel.notify_closing(pidfd)
        os.close(pidfd)
    assert proc_stat(child.pid) is not None  # a zombie: exited, not reaped
    assert tracker.leftovers() == [f"pid {child.pid} descends from the test"]
    await child.wait()
    assert tracker.leftovers() == []


async def test_the_tracker_ignores_a_deno_it_did_not_start(
    tracker: WorkloadTracker, executor: DenoCodeExecutor
) -> None:
    # Another Deno on the machine (here orphaned at once, so it is nobody's child of ours).
    deno = executor.spawn_config(CodeExecutionLimits()).deno
    script = f"{deno} eval 'setTimeout(() => {{}}, 60000)' >/dev/null 2>&1 & echo $!"
    shell = await trio.run_process(["/bin/sh", "-c", script], capture_stdout=True)
    stranger = os.pidfd_open(int(shell.stdout))
    try:
        assert tracker.leftovers() == []
    finally:
        signal.pidfd_send_signal(stranger, signal.SIGKILL)
        os.close(stranger)


async def test_can_run_code_tells_a_live_workload_from_a_released_one(
    tracker: WorkloadTracker,
) -> None:
    async with open_deno_executor(warm=1, on_acquire=tracker.record) as executor:
        await executor.settle()
        members = tracker.sample(executor).processes
        assert len(members) >= 3
        assert all(can_run_code(pid) for pid in members)
    assert not any(can_run_code(pid) for pid in members)
