"""One Deno workload: a started ``deno run`` of the harness and everything it holds on the host.

A :class:`Workload` owns its process group, its pipes, its cgroups (a pids group that caps
processes and threads and tells when every process is gone; a memory group when memory is
limited), under bubblewrap the pidfd of bubblewrap's sandbox init, and, unisolated only, a
temporary directory. It serves exactly one pass and is then closed: :meth:`Workload.kill` SIGKILLs
every process of the workload at once (none can run code after it returns) and
:meth:`Workload.aclose` kills, reaps, waits until the kernel is done with them (for a killed Deno
and its namespaces, several milliseconds), and removes the rest. It is shielded.

The order of the kill matters to who reaps what. bwrap exits as soon as its sandbox init reports
the command's end, without waiting for that init, which is then an orphan for the nearest child
subreaper (``_reaping``) — possibly this very process, possibly an init that is slow to reap. So
the harness never exits by itself (it waits to be killed after its last frame), and the kill
reaches the sandbox init first: with ``SIGKILL`` pending it can report nothing, bwrap sees it die,
reaps it and exits, and nobody is left an orphan. bwrap itself runs no workload code; it is
SIGKILLed only if it does not exit on its own.

``RLIMIT_CPU``, the cgroups and the drop to the workload's user (``_identity``) are applied in the
child before exec, so nothing of the workload runs unaccounted or as root. Under bubblewrap, bwrap
reports its sandbox child and holds it on ``--block-fd`` until the host has opened a pidfd on it
(certainly that process while it waits), then lets it go at once.
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Callable
from typing import Final, final

import trio

from ._code import ExecutorCrashed
from ._deno_protocol import READY_MARKER
from ._deno_runtime import SpawnConfig, SpawnDescriptors
from ._identity import drop_in_child
from ._isolation import MemoryCgroup, PidsCgroup, ProcessLimits, kill_process_group, rlimit_preexec
from ._ownership import OwnedResources
from ._process_control import ChildProcess, spawn_child_forked
from ._reaping import adopted_init, reap_if_adopted, watch_child_of

__all__ = ["Workload", "spawn_workload"]

_FILE_SIZE_LIMIT: Final = 64 * 1024 * 1024
_READY_TIMEOUT: Final = 10.0
_STDOUT_CHUNK: Final = 65536
_KILL_ROUNDS: Final = 8
_BWRAP_EXIT_WAIT: Final = 2.0
"""Seconds bwrap gets to reap its killed sandbox init and exit before it is SIGKILLed too."""

_Cgroup = MemoryCgroup | PidsCgroup


def _preexec(config: SpawnConfig, cgroups: tuple[_Cgroup, ...]) -> Callable[[], None]:
    limits = ProcessLimits(cpu_seconds=config.cpu_seconds, file_size_bytes=_FILE_SIZE_LIMIT)
    confine = rlimit_preexec(limits, join_cgroups=[group.path for group in cgroups])
    drop = drop_in_child(config.identity) if config.identity is not None else None

    def preexec() -> None:
        confine()  # joining a cgroup needs root: before the drop
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        if drop is not None:
            drop()

    return preexec


@final
class Workload:
    """One Deno process running the harness, for one pass. Create with :func:`spawn_workload`.

    Owns the process group, its pipes, its cgroups, the sandbox init's pidfd and its temp dir;
    :meth:`aclose` releases them all. ``nonce`` is this workload's frame nonce (sent to the
    harness in the start message).
    """

    __slots__ = (
        "_closed",
        "_init_pid",
        "_init_pidfd",
        "_killed",
        "_ready",
        "_released",
        "_status",
        "config",
        "leftover",
        "memory",
        "nonce",
        "pids",
        "process",
        "workdir",
    )

    def __init__(
        self,
        process: ChildProcess,
        config: SpawnConfig,
        memory: MemoryCgroup | None,
        pids: PidsCgroup | None,
        workdir: str | None,
    ) -> None:
        self.process = process
        self.config = config
        self.memory = memory
        self.pids = pids
        self.workdir = workdir
        self.nonce = os.urandom(16)
        self.leftover = b""
        self._init_pid: int | None = None
        self._init_pidfd: int | None = None
        self._status: int | None = None
        self._ready = False
        self._closed = False
        self._killed = False
        self._released: trio.Event | None = None

    @property
    def alive(self) -> bool:
        """True while the process has not exited (as far as a non-blocking poll can tell)."""
        return self.process.returncode is None

    def owned(self) -> OwnedResources:
        """What this workload holds on the host now (empty once :meth:`aclose` has finished)."""
        if self._released is not None and self._released.is_set():
            return OwnedResources()
        groups = [group for group in (self.pids, self.memory) if group is not None]
        processes = {pid for group in groups for pid in group.pids()}
        if self.process.returncode is None:
            processes.add(self.process.pid)
        if self._init_pidfd is not None and self._init_pid is not None:
            processes.add(self._init_pid)
        return OwnedResources(
            processes=processes,
            cgroups=(group.path for group in groups),
            paths=() if self.workdir is None else (self.workdir,),
        )

    async def wait_ready(self, timeout: float = _READY_TIMEOUT) -> None:
        """Wait for the harness's ready marker (idempotent).

        Raises :class:`ExecutorCrashed` if the process ends or writes anything else first, or
        stays silent for ``timeout`` seconds. Cancellation: a checkpoint; the workload stays
        owned by the caller, who must still :meth:`aclose` it.
        """
        if self._ready:
            return
        stdout = self.process.stdout
        assert stdout is not None
        received = bytearray()
        with trio.move_on_after(timeout):
            while len(received) < len(READY_MARKER):
                chunk = await stdout.receive_some(_STDOUT_CHUNK)
                if not chunk:
                    break
                received += chunk
            else:
                if received[: len(READY_MARKER)] != READY_MARKER:
                    raise ExecutorCrashed("the Deno harness did not start")
                self.leftover = bytes(received[len(READY_MARKER) :])
                self._ready = True
                return
        stderr = await self._stderr_excerpt()
        raise ExecutorCrashed(f"the Deno harness did not start: {stderr or 'no output'}")

    async def _stderr_excerpt(self) -> str:
        stderr = self.process.stderr
        data = b""
        with trio.move_on_after(0.2):
            while len(data) < 2048:
                chunk = await stderr.receive_some(2048)
                if not chunk:
                    break
                data += chunk
        return data[:2048].decode("utf-8", "replace").strip()

    def kill(self) -> None:
        """SIGKILL every process of the workload now, without waiting for any of them to exit.

        Bubblewrap's sandbox init first (see the module notes), then every member of its cgroups
        (listed again until a listing shows no process not yet signalled); from then on none of
        them can run any more code (the kernel acts on a pending ``SIGKILL`` before a process
        returns to user space). Without a sandbox init (unisolated) the process group is killed
        too. Exiting, reaping and removing what it owns is :meth:`aclose`'s job. Idempotent,
        never blocks, and without a pids cgroup reaches directly only the sandbox init or the
        process group (see :attr:`tracked`); the rest of the sandbox dies with its init.
        """
        self._killed = True
        signalled: set[int] = set()
        if self._init_pidfd is not None:
            with contextlib.suppress(OSError):
                signal.pidfd_send_signal(self._init_pidfd, signal.SIGKILL)
            signalled.add(self.process.pid)  # bwrap exits by itself once it has reaped the init
        for _ in range(_KILL_ROUNDS):
            members = {pid for group in (self.pids, self.memory) if group for pid in group.pids()}
            fresh = members - signalled
            if not fresh:
                break
            for pid in fresh:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            signalled |= fresh
        if self._init_pidfd is None and self.process.returncode is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):  # once reaped, its pid
                os.killpg(self.process.pid, signal.SIGKILL)  # may belong to someone else

    @property
    def killed(self) -> bool:
        """True once :meth:`kill` or :meth:`aclose` has been called."""
        return self._killed

    @property
    def tracked(self) -> bool:
        """Whether a pids cgroup holds every process of the workload, so that :meth:`kill` reaches
        each of them directly (otherwise processes in the sandbox die only after bwrap does)."""
        return self.pids is not None

    @property
    def released(self) -> bool:
        """True once :meth:`aclose` has released everything."""
        return self._released is not None and self._released.is_set()

    async def aclose(self) -> None:
        """Kill the process group, reap it, close the pipes, remove the cgroups and the temp dir,
        and reap bubblewrap's sandbox init if this process has adopted it.

        Idempotent; a call made while another is in progress waits until that one has released
        everything. Cancellation: shielded — it always finishes releasing everything.
        """
        if self._closed:
            if self._released is not None:
                with trio.CancelScope(shield=True):
                    await self._released.wait()
            return
        self._closed = True
        self._released = trio.Event()
        groups = tuple(group for group in (self.pids, self.memory) if group is not None)
        with trio.CancelScope(shield=True):
            try:
                self.kill()
                if self._init_pidfd is not None:
                    with trio.move_on_after(_BWRAP_EXIT_WAIT):
                        await self.process.wait()  # bwrap reaps its init, then exits
                if self.process.returncode is None:
                    await kill_process_group(self.process)
                for stream in (self.process.stdin, self.process.stdout, self.process.stderr):
                    if stream is not None:
                        await stream.aclose()
                for group in groups:
                    await _remove_cgroup(group)
                pidfd, self._init_pidfd = self._init_pidfd, None
                if pidfd is None and self._init_pid is None and self._status is not None:
                    # Stopped before bwrap's ``child-pid`` was read: what it wrote says.
                    pidfd = adopted_init(_drained(self._status))
                if pidfd is not None:
                    await reap_if_adopted(pidfd)
                status, self._status = self._status, None
                if status is not None:
                    trio.lowlevel.notify_closing(status)
                    os.close(status)
                if self.workdir is not None:
                    shutil.rmtree(self.workdir, ignore_errors=True)
            finally:
                self._released.set()

    def watch_init(self, pidfd: int | None, pid: int) -> None:
        """Hold ``pidfd`` on bubblewrap's sandbox init (``pid``) until it is reaped."""
        self._init_pidfd = pidfd
        self._init_pid = pid

    def hold_status(self, fd: int) -> None:
        """Keep bubblewrap's status pipe open until the workload is released."""
        self._status = fd


def _kill_members(group: _Cgroup) -> None:
    for pid in group.pids():
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


async def _remove_cgroup(group: _Cgroup) -> None:
    """Wait until ``group`` is empty, then remove it.

    A killed Deno takes a few milliseconds to exit. A process leaves its cgroup only on its way
    out of the kernel (it can run no code by then) and no process of a workload can move itself
    elsewhere (the sandbox has no cgroup filesystem), so an empty group means every process of the
    workload is done. Polls from the event loop (no thread) every 0.1 ms at first, backing off to
    2 ms, killing again each time, for up to a second; then leaves the rest to ``close`` in a
    worker thread, which kills again and waits up to another second.
    """
    deadline = trio.current_time() + 1.0
    interval = 0.0001
    while group.pids():
        if trio.current_time() > deadline:
            await trio.to_thread.run_sync(group.close)
            return
        _kill_members(group)
        await trio.sleep(interval)
        interval = min(interval * 2, 0.002)
    group.close()


#: Seconds a cancelled start still waits for bwrap's report of its init (it comes in milliseconds).
_REPORT_WAIT = 5.0


def _drained(fd: int) -> bytes:
    """What can be read from ``fd`` now (non-blocking), up to its end."""
    data = b""
    with contextlib.suppress(BlockingIOError, OSError):
        while chunk := os.read(fd, 65536):
            data += chunk
    return data


async def _sandbox_child(status: int) -> int | None:
    """The ``child-pid`` bubblewrap reports on ``status`` (non-blocking), or None if it ended first.

    Cancellation: a checkpoint; nothing is left half-read that matters (the pipe is closed after).
    """
    data = b""
    while True:
        for line in data.splitlines():
            with contextlib.suppress(ValueError, AttributeError):
                pid = json.loads(line).get("child-pid")
                if isinstance(pid, int):
                    return pid
        try:
            chunk = os.read(status, 4096)
        except BlockingIOError:
            await trio.lowlevel.wait_readable(status)
            continue
        if not chunk:
            return None
        data += chunk


def _open_descriptors() -> tuple[SpawnDescriptors, tuple[int, int]]:
    """The pipe ends an isolated workload's bwrap inherits, and the host's ends (status to read,
    block to release it)."""
    status_read, status_write = os.pipe2(os.O_CLOEXEC)
    try:
        block_read, block_write = os.pipe2(os.O_CLOEXEC)
    except BaseException:
        os.close(status_read)
        os.close(status_write)
        raise
    os.set_blocking(status_read, False)
    return SpawnDescriptors(status_write, block_read), (status_read, block_write)


async def _release_blocked(workload: Workload, status: int, block: int) -> None:
    """Read bubblewrap's sandbox child, hold a pidfd on it while it waits, then let it run.

    The status pipe stays open (the workload closes it): bubblewrap writes its exit status there
    at the end, and a closed pipe would kill it with ``SIGPIPE`` instead.
    """
    workload.hold_status(status)
    try:
        # Shielded, bounded: bwrap reports its init as soon as it has forked it, and a start
        # cancelled meanwhile must still hold the init — its own session names it to nobody else,
        # so unheld it would be left as a zombie to a process that adopts orphans.
        child = None
        with trio.CancelScope(shield=True), trio.move_on_after(_REPORT_WAIT):
            child = await _sandbox_child(status)
        if child is not None:
            workload.watch_init(watch_child_of(child, workload.process.pid), child)
        with contextlib.suppress(OSError):
            os.write(block, b"x")
    finally:
        os.close(block)


async def spawn_workload(config: SpawnConfig) -> Workload:
    """Start one workload for ``config`` (it has not necessarily reported ready yet).

    Raises :class:`ExecutorCrashed` if the process cannot be started, and the shared
    ``LimitNotEnforceable`` if one of its cgroups cannot be made. Cancellation: a checkpoint; a
    workload interrupted while starting is released before ``trio.Cancelled`` propagates.
    """
    memory = pids = None
    workdir = None
    fds: SpawnDescriptors | None = None
    host_ends: tuple[int, int] | None = None
    try:
        if config.use_cgroup and config.memory_bytes is not None:
            memory = MemoryCgroup.create(config.memory_bytes)
        if config.max_processes is not None:
            pids = PidsCgroup.create(config.max_processes)
        if config.isolation == "none":
            workdir = tempfile.mkdtemp(prefix="effectagent-deno-")
            if config.identity is not None:
                os.chown(workdir, config.identity.uid, config.identity.gid)
            argv, env, cwd = config.unisolated_command(workdir)
        else:
            fds, host_ends = _open_descriptors()
            argv, env, cwd = config.isolated_command(fds)
        # Forked on the spawning thread, which lives as long as this process: bwrap's
        # --die-with-parent follows the forking thread, and a Trio worker thread retires.
        process = await spawn_child_forked(
            argv,
            stdin_pipe=True,
            env=env,
            cwd=cwd,
            preexec=_preexec(config, tuple(g for g in (memory, pids) if g is not None)),
            pass_fds=fds.all() if fds is not None else (),
        )
    except BaseException as exc:
        for group in (memory, pids):
            if group is not None:
                group.close()
        if workdir is not None:
            shutil.rmtree(workdir, ignore_errors=True)
        for fd in (*(fds.all() if fds else ()), *(host_ends or ())):
            os.close(fd)
        if isinstance(exc, OSError | subprocess.SubprocessError):
            raise ExecutorCrashed(f"cannot start Deno: {exc}") from None
        raise
    workload = Workload(process, config, memory, pids, workdir)
    if fds is None or host_ends is None:
        return workload
    for fd in fds.all():
        os.close(fd)
    try:
        await _release_blocked(workload, *host_ends)
    except BaseException:
        await workload.aclose()
        raise
    return workload
