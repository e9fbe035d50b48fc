"""One bubblewrap execution: prepared, confined before it runs, measured, and released.

:class:`BwrapExecution` fills in the hooks of :class:`~sandbox._execution.CommandExecution`:

* **Prepare.** Every mount source is opened here, on the host side, without following a link the
  workload could have planted (``_mount_sources``), and checked to be reachable and usable by the
  workload's user (``_identity``); bubblewrap binds those descriptors (``--bind-fd``: their path,
  refused if it no longer leads to the same file). The per-execution
  workdir is a fresh host temp dir given to the workload's user. When this process is root the
  argv starts with the privilege drop (``setpriv``), so bubblewrap itself, and everything after
  it, runs as that unprivileged user; a seccomp filter keeps the workload from making setuid or
  setgid files (``_seccomp``).
* **Confine before it runs.** bwrap runs with ``--json-status-fd`` and ``--block-fd``: it reports
  its sandbox child's host pid and waits, before that child forks the command, until the host has
  set its rlimits (``prlimit``) and moved it into the cgroups; everything the command ever forks
  inherits both. Setting the rlimits of another user's process takes ``CAP_SYS_RESOURCE``, which
  root in a default container lacks: then util-linux ``prlimit`` is exec'd in front of bwrap
  instead (about a millisecond more), before the privilege drop. The cgroups are created while bwrap sets up its namespaces and mounts. A
  pidfd is opened on that child while it is blocked (so it is certainly that process): it is
  bubblewrap's init inside the sandbox, which bwrap does not wait for once the command has ended,
  and this execution reaps it if it becomes ours (``_reaping``). If joining a cgroup fails, the
  workload is killed before it runs.
* **Kill.** When the host ends a workload (timeout, the consumer leaving early), the sandbox init
  is killed first, through its pidfd, with every process in the cgroups: with ``SIGKILL`` pending
  the init cannot tell bwrap the command ended, so bwrap sees it die, reaps it and exits by itself
  (status 137), and nothing is left an orphan. Only if bwrap does not exit then is its process
  group killed too. (A command that exits by itself still leaves bwrap's init to the nearest
  reaper; see ``_reaping``.)
* **Measure and release.** Cgroups give CPU time (bwrap does not reap its child, so its own rusage
  misses it), peak memory and processes, OOM kills and refused forks; closing kills whatever is
  left in them and removes them with the workdir.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import stat
import tempfile
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any, TypeVar

import trio

from ._bwrap_view import WORKDIR, mount_table, resolve_in_view, to_host
from ._command import (
    CommandNotFound,
    InvalidRequest,
    Mount,
    SandboxCrashed,
    SandboxRequest,
    SandboxUnavailable,
    SecretResolver,
)
from ._execution import CommandExecution, Measured, Spawn
from ._identity import WorkloadIdentity, WorkloadUser, drop_argv, drop_in_child
from ._isolation import (
    CpuCgroup,
    HostFacts,
    MemoryCgroup,
    PidsCgroup,
    ProcessLimits,
    apply_rlimits,
    bwrap_argv,
    ceil_seconds,
    kill_process_group,
    rlimit_preexec,
)
from ._mount_sources import MountSourceRefused, open_mount_source, reachable_problem
from ._ownership import OwnedResources
from ._posture import (
    LIMIT_MEMORY,
    LIMIT_PROCESSES,
    LimitNotEnforceable,
    SandboxError,
    SandboxImplementation,
    is_limited,
)
from ._process_control import can_limit_other_users, prlimit_argv
from ._reaping import adopted_init, reap_if_adopted, watch_child_of
from ._seccomp import setuid_filter_fd
from ._workload_files import remove_tree

__all__ = ["BwrapExecution", "BwrapSettings"]

_BWRAP_EXIT_WAIT = 2.0
# Sandbox paths bubblewrap makes as directories itself (the workdir and the private /tmp): only a
# directory can be mounted over one.
_MADE_DIRECTORIES = (WORKDIR, "/tmp")
"""Seconds bwrap gets to reap its killed sandbox init and exit before its group is SIGKILLed."""

G = TypeVar("G", MemoryCgroup, PidsCgroup)


class BwrapSettings:
    """What every execution of one :class:`~sandbox.BubblewrapSandbox` shares."""

    __slots__ = ("accounting", "facts", "identity", "user")

    def __init__(
        self,
        facts: HostFacts,
        accounting: bool,
        identity: WorkloadIdentity | None,
        user: WorkloadUser,
    ) -> None:
        self.facts = facts
        self.accounting = accounting
        self.identity = identity
        self.user = user


def _kind(mode: int) -> str | None:
    """ "directory" or "file" (a regular one), else None."""
    if stat.S_ISDIR(mode):
        return "directory"
    return "file" if stat.S_ISREG(mode) else None


def _depth(mount: Mount) -> int:
    return mount.sandbox_path.rstrip("/").count("/")


class BwrapExecution(CommandExecution):
    """One bubblewrap workload (see the module notes)."""

    def __init__(
        self,
        implementation: SandboxImplementation,
        request: SandboxRequest,
        resolver: SecretResolver | None,
        live: set[CommandExecution],
        settings: BwrapSettings,
    ) -> None:
        super().__init__(implementation, request, resolver, live)
        self._settings = settings
        self._workdir: str | None = None
        self._sources: list[tuple[Mount, int]] = []
        self._workdir_fd: int | None = None
        self._seccomp_fd: int | None = None
        self._memory: MemoryCgroup | None = None
        self._pids: PidsCgroup | None = None
        self._cpu_group: CpuCgroup | None = None
        self._status_read: int | None = None
        self._status_write: int | None = None
        self._block_read: int | None = None
        self._block_write: int | None = None
        self._init_pidfd: int | None = None
        self._init_pid: int | None = None
        self._status = b""
        self._rlimits = ProcessLimits()
        self._want_memory = self._want_pids = self._want_cpu = False

    # ---- prepare --------------------------------------------------------------------------

    async def prepare(self, env: dict[str, str]) -> Spawn:
        return self._prepare_sync(env)  # mkdtemp, a few opens and stats: sub-millisecond

    def _open_sources(self) -> None:
        """Open and check every mount source, or refuse the request listing every problem."""
        user = self._settings.user
        problems: list[str] = []
        for mount in sorted(self.request.mounts, key=_depth):  # parents before what they hold
            try:
                fd = open_mount_source(mount.host_path, user)
            except MountSourceRefused as refused:
                problems.append(f"mounts: host_path {refused}")
                continue
            self._sources.append((mount, fd))
            unreachable = reachable_problem(fd, user)
            if unreachable is not None:
                problems.append(f"mounts: {unreachable}")
            elif not user.can_use(os.fstat(fd), write=mount.mode == "rw"):
                access = "read and write" if mount.mode == "rw" else "read"
                problems.append(
                    f"mounts: the workload's user {user.uid}:{user.gid} cannot {access} "
                    f"{mount.host_path!r} (mounted at {mount.sandbox_path!r}); give it access, for "
                    f"example os.chown(path, {user.uid}, {user.gid})"
                )
        problems += self._mount_point_problems()
        if problems:
            raise InvalidRequest(tuple(problems))

    def _mount_point_problems(self) -> list[str]:
        """bubblewrap makes a missing mount point, which it cannot inside a read-only mount (it
        failed before the command ran): such a mount is refused naming what to create."""
        problems: list[str] = []
        for mount, source in self._sources:
            if mount.sandbox_path in _MADE_DIRECTORIES and not stat.S_ISDIR(
                os.fstat(source).st_mode
            ):
                problems.append(
                    f"mounts: {mount.host_path!r} is no directory, and {mount.sandbox_path!r} is "
                    "a directory in every sandbox: mount a directory there, or the file at a path "
                    "inside it"
                )
                continue
            holders = [
                (held, fd)
                for held, fd in self._sources
                if mount.sandbox_path.startswith(held.sandbox_path.rstrip("/") + "/")
            ]
            if not holders:
                continue
            holder, fd = max(holders, key=lambda pair: _depth(pair[0]))
            rest = mount.sandbox_path[len(holder.sandbox_path) :].lstrip("/")
            try:
                found = os.stat(rest, dir_fd=fd, follow_symlinks=False)
            except FileNotFoundError:
                if holder.mode == "ro":
                    problems.append(
                        f"mounts: {mount.sandbox_path!r} needs a mount point inside the read-only "
                        f"mount at {holder.sandbox_path!r}, where {rest!r} does not exist: create "
                        f"it in {holder.host_path!r} or mount that read-write"
                    )
                continue
            except NotADirectoryError:
                problems.append(
                    f"mounts: {mount.sandbox_path!r} is inside the mount at "
                    f"{holder.sandbox_path!r}, which holds no directory on its way"
                )
                continue
            except OSError:
                continue  # bubblewrap says what is wrong
            there, given = _kind(found.st_mode), _kind(os.fstat(source).st_mode)
            if there is not None and given is not None and there != given:
                problems.append(
                    f"mounts: {mount.host_path!r}, a {given}, would cover the {there} {rest!r} "
                    f"inside the mount at {holder.sandbox_path!r}: only a directory can be "
                    "mounted over a directory, and only a file over a file"
                )
        return problems

    def _make_workdir(self) -> str:
        workdir = tempfile.mkdtemp(prefix="effectagent-bwrap-")
        self._workdir = workdir
        identity = self._settings.identity
        if identity is not None:
            os.chown(workdir, identity.uid, identity.gid)
        self._workdir_fd = os.open(workdir, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        return workdir

    def _decide_confinement(self) -> None:
        limits = self.request.limits
        settings = self._settings
        facts = settings.facts
        self._want_memory = facts.cgroup_memory is not None and (
            settings.accounting or is_limited(limits.memory_bytes)
        )
        self._want_pids = facts.cgroup_pids is not None and (
            settings.accounting or is_limited(limits.max_processes)
        )
        self._want_cpu = facts.cgroup_cpu is not None and settings.accounting
        cpu, size = limits.cpu_seconds, limits.file_size_bytes
        self._rlimits = ProcessLimits(
            cpu_seconds=ceil_seconds(cpu) if not isinstance(cpu, str) else None,
            file_size_bytes=size if not isinstance(size, str) else None,
        )

    def _prepare_sync(self, env: dict[str, str]) -> Spawn:
        request = self.request
        self._open_sources()
        workdir = self._make_workdir()
        network = request.network == "host"
        cwd = request.cwd or WORKDIR
        table = mount_table(request, workdir, network)
        host_cwd = to_host(cwd, table)
        # The private /tmp starts empty: below it only a mount, or a directory bubblewrap makes
        # to hold one, exists when the command starts.
        made_for_a_mount = any(m.sandbox_path.startswith(cwd + "/") for m in request.mounts)
        if cwd != "/tmp" and not made_for_a_mount and not (host_cwd and os.path.isdir(host_cwd)):
            raise InvalidRequest((f"cwd {cwd!r} is not a directory inside the sandbox",))
        program = resolve_in_view(request.command, env["PATH"], cwd, table)
        if program is None:
            raise CommandNotFound(request.command)
        self._decide_confinement()

        self._status_read, self._status_write = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
        os.set_blocking(self._status_write, True)
        self._block_read, self._block_write = os.pipe2(os.O_CLOEXEC)
        self._seccomp_fd = setuid_filter_fd()
        assert self._workdir_fd is not None
        binds = [(self._workdir_fd, WORKDIR, True)]
        binds += [(fd, mount.sandbox_path, mount.mode == "rw") for mount, fd in self._sources]
        pass_fds = [self._status_write, self._block_read, *(fd for fd, _, _ in binds)]
        if self._seccomp_fd is not None:
            pass_fds.append(self._seccomp_fd)
        facts = self._settings.facts
        argv = bwrap_argv(
            bwrap=facts.bwrap or "bwrap",
            ro_binds=(),
            rw_binds=(),
            tmpfs=(),
            cwd=cwd,
            env={},
            network=network,
            extra=[
                "--json-status-fd",
                str(self._status_write),
                "--block-fd",
                str(self._block_read),
            ],
            clearenv=False,
            fd_binds=binds,
            seccomp_fd=self._seccomp_fd,
            disable_userns=facts.disable_userns,
        )
        prefix, preexec = self._spawn_prefix()
        return Spawn(
            argv=(*prefix, *argv, program, *request.args),
            env=env,
            cwd=workdir,
            pass_fds=tuple(pass_fds),
            preexec=preexec,
        )

    def _limits_from_outside(self) -> bool:
        """Whether the rlimits can be set on the blocked sandbox child from here (its user is ours,
        or this process may limit other users' processes) instead of by ``prlimit`` in front."""
        return self._settings.identity is None or can_limit_other_users()

    def _spawn_prefix(self) -> tuple[tuple[str, ...], Callable[[], None] | None]:
        """``prlimit`` (unless :meth:`_limits_from_outside`) and ``setpriv`` in front of bwrap;
        where either is missing, a ``preexec_fn`` doing both instead (which costs a ``fork``)."""
        identity = self._settings.identity
        outside = self._limits_from_outside()
        limits = () if outside else prlimit_argv(self._rlimits)
        drop = drop_argv(identity)
        if limits is not None and drop is not None:
            return (*limits, *drop), None
        confine = rlimit_preexec(ProcessLimits() if outside else self._rlimits)
        change = drop_in_child(identity) if identity is not None else None

        def preexec() -> None:
            confine()
            if change is not None:
                change()

        return (), preexec

    def spawn_error(self, exc: OSError) -> SandboxError:
        if isinstance(exc, FileNotFoundError):
            return SandboxUnavailable(f"cannot start bwrap: {exc.strerror}")
        return super().spawn_error(exc)

    # ---- confine ----------------------------------------------------------------------------

    async def __aenter__(self) -> AsyncIterator[Any]:
        """Spawn bwrap, confine its blocked child (rlimits, cgroups), then let the command run.

        Cancellation: as for :class:`CommandExecution` — everything started is killed and removed.
        """
        events = await super().__aenter__()
        try:
            self._close_spawn_fds()
            # bwrap is starting up (namespaces, mounts) and will wait on the block fd before it
            # runs the command: the cgroups are made meanwhile, off the critical path.
            self._create_groups()
            child = None
            with trio.move_on_after(self.request.limits.wall_clock_seconds) as waited:
                child = await self._child_pid()
            if waited.cancelled_caught:
                self._timed_out = True  # bwrap never reported its child: it never runs unconfined
                self.kill()
            elif child is not None:
                assert self._process is not None
                self._init_pid = child
                self._init_pidfd = watch_child_of(child, self._process.pid)
                self._confine(child)
                self._unblock()
            # child None: bwrap failed during setup and exits; the crash is reported at the end.
            # The block fd is closed only after the workload is dead (cleanup), never before.
        except BaseException:
            await self.aclose()
            raise
        return events

    def _close_spawn_fds(self) -> None:
        """Close the descriptors only bwrap needed (it has its own copies now)."""
        for fd in (self._status_write, self._block_read, self._seccomp_fd):
            if fd is not None:
                os.close(fd)
        self._status_write = self._block_read = self._seccomp_fd = None

    def _create_groups(self) -> None:
        """Make the cgroups decided by :meth:`prepare` (the workload is still blocked).

        Accounting-only groups are best effort; a group that carries a requested limit is not
        (:class:`LimitNotEnforceable`). Each group's counters are opened now for :meth:`measure`.
        """
        limits = self.request.limits
        if self._want_memory:
            self._memory = self._limited_group(MemoryCgroup.create, limits.memory_bytes)
        if self._want_pids:
            self._pids = self._limited_group(PidsCgroup.create, limits.max_processes)
        if self._want_cpu:
            self._cpu_group = CpuCgroup.create()
        for group in (self._memory, self._pids, self._cpu_group):
            if group is not None:
                group.prefetch()

    def _limited_group(self, create: Callable[[int | None], G], limit: int | str) -> G | None:
        """``create(limit)``; None when only accounting was wanted and the host cannot give it
        (a group carrying a limit that cannot be had raises)."""
        bound = limit if isinstance(limit, int) else None
        try:
            return create(bound)
        except LimitNotEnforceable:
            if bound is not None:
                raise
            return None

    async def _child_pid(self) -> int | None:
        """Wait for bwrap's ``child-pid`` status line; None if bwrap ended without one."""
        assert self._status_read is not None
        while True:
            for line in self._status.splitlines():
                with contextlib.suppress(ValueError, AttributeError):
                    pid = json.loads(line).get("child-pid")
                    if isinstance(pid, int):
                        return pid
            try:
                chunk = os.read(self._status_read, 65536)
            except BlockingIOError:
                await trio.lowlevel.wait_readable(self._status_read)
                continue
            if not chunk:
                return None
            self._status += chunk

    def _confine(self, child: int) -> None:
        """Set the rlimits on the blocked sandbox child (if that is done from here) and move it
        into the cgroups, or kill the workload."""
        try:
            if self._limits_from_outside():
                apply_rlimits(child, self._rlimits)
            for group in (self._memory, self._pids, self._cpu_group):
                if group is not None:
                    group.add_pid(child)
        except ProcessLookupError:
            return  # bwrap failed during setup: it never runs the command (reported at the end)
        except OSError as exc:
            self.kill()
            raise SandboxCrashed(f"cannot confine the workload: {exc.strerror}") from None

    def _unblock(self) -> None:
        if self._block_write is not None:
            with contextlib.suppress(OSError):
                os.write(self._block_write, b"x")
            os.close(self._block_write)
            self._block_write = None

    # ---- kill -----------------------------------------------------------------------------

    def kill(self) -> None:
        """SIGKILL the sandbox init and everything in the cgroups; bwrap then exits by itself.

        A second call, or a workload whose init is unknown, kills bwrap's process group.
        """
        if self._init_pidfd is None or self._killed:
            super().kill()
            return
        self._killed = True
        with contextlib.suppress(OSError):
            signal.pidfd_send_signal(self._init_pidfd, signal.SIGKILL)
        for group in (self._pids, self._memory, self._cpu_group):
            if group is not None:
                for pid in group.pids():
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.kill(pid, signal.SIGKILL)

    async def stop(self) -> None:
        """Kill the sandbox first and give bwrap a moment to reap its init and exit, then make
        sure of bwrap. Cancellation: shielded by the caller."""
        assert self._process is not None
        if self._init_pidfd is not None:
            if not self._killed:
                self.kill()
            with trio.move_on_after(_BWRAP_EXIT_WAIT):
                await self._process.wait()
        if self._process.returncode is None:  # bwrap is alone in its process group
            await kill_process_group(self._process)

    # ---- measure and release ----------------------------------------------------------------

    def _drain_status(self) -> None:
        if self._status_read is None:
            return
        with contextlib.suppress(BlockingIOError, OSError):
            while chunk := os.read(self._status_read, 65536):
                self._status += chunk

    def check_crash(self, stderr_head: bytes) -> None:
        self._drain_status()
        for line in self._status.splitlines():
            with contextlib.suppress(ValueError):
                if "exit-code" in json.loads(line):
                    return
        detail = stderr_head.decode("utf-8", "replace").strip() or "no exit status from bwrap"
        raise SandboxCrashed(f"bubblewrap failed before the command ran: {detail[:500]}")

    def wants_zombie_cpu(self) -> bool:
        return self._cpu_group is None  # the CPU group's figure replaces the zombie's

    def measure(self) -> Measured:
        oom = self._memory.oom_killed() if self._memory else False
        hit = set()
        if oom:
            hit.add(LIMIT_MEMORY)
        if self._pids is not None and self._pids.limit_hits():
            hit.add(LIMIT_PROCESSES)
        return Measured(
            cpu_seconds=self._cpu_group.usage_seconds() if self._cpu_group else None,
            peak_memory_bytes=self._memory.peak_bytes() if self._memory else None,
            peak_processes=self._pids.peak() if self._pids else None,
            oom_killed=oom,
            limits_hit=frozenset(hit),
        )

    def artifact_roots(self) -> Mapping[str | None, tuple[str, str | int]]:
        assert self._workdir_fd is not None
        roots: dict[str | None, tuple[str, str | int]] = {None: (WORKDIR, self._workdir_fd)}
        for mount, fd in self._sources:
            roots[mount.sandbox_path] = (mount.sandbox_path, fd)
            if mount.sandbox_path == WORKDIR and mount.mode == "rw":
                # A read-write mount over the workdir is where the workload's files go: the
                # host's own (hidden, empty) workdir would collect nothing.
                roots[None] = roots[mount.sandbox_path]
        return roots

    def held(self) -> OwnedResources:
        groups = [group for group in (self._memory, self._pids, self._cpu_group) if group]
        processes = {pid for group in groups for pid in group.pids()}
        if self._init_pidfd is not None and self._init_pid is not None:
            processes.add(self._init_pid)
        return OwnedResources(
            processes=processes,
            cgroups=(group.path for group in groups),
            paths=() if self._workdir is None else (self._workdir,),
        )

    async def reap_adopted(self) -> None:
        """Reap bubblewrap's sandbox init if it has become this process's child (``_reaping``),
        also when bwrap was stopped before its ``child-pid`` was read (bwrap is reaped by now)."""
        pidfd, self._init_pidfd = self._init_pidfd, None
        if pidfd is not None:
            await reap_if_adopted(pidfd)
            return
        # Stopped before its init was held: the init's pid, if bwrap reported it, and then its
        # session (an init forked but not reported yet is still in bwrap's).
        self._drain_status()
        pidfd = adopted_init(self._status)
        if pidfd is not None:
            await reap_if_adopted(pidfd)
        await super().reap_adopted()

    def cleanup(self) -> None:
        descriptors = [
            self._status_read,
            self._status_write,
            self._block_read,
            self._block_write,
            self._seccomp_fd,
            self._workdir_fd,
            self._init_pidfd,
            *(fd for _, fd in self._sources),
        ]
        for fd in descriptors:
            if fd is not None:
                os.close(fd)
        self._status_read = self._status_write = self._block_read = self._block_write = None
        self._seccomp_fd = self._workdir_fd = self._init_pidfd = None
        self._sources.clear()
        errors: list[OSError] = []
        for group in (self._memory, self._pids, self._cpu_group):
            if group is not None:
                try:
                    group.close()
                except OSError as exc:  # every resource gets its chance; report the first failure
                    errors.append(exc)
        self._memory = self._pids = self._cpu_group = None
        if self._workdir is not None:
            try:
                remove_tree(self._workdir)
                self._workdir = None
            except OSError as exc:
                errors.append(exc)
        if errors:
            raise SandboxCrashed(f"cleanup failed: {errors[0]}") from errors[0]
