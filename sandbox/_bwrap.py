"""The bubblewrap command sandbox: namespaces, a private read-only system view, cgroups, rlimits.

Each execution gets new user, pid, net (unless ``network="host"``), ipc, uts and cgroup namespaces,
all capabilities dropped, a new session, the host's ``/usr`` and loader configuration read-only,
a fresh ``/proc``, a minimal ``/dev``, a tmpfs ``/tmp``, a per-execution read-write workdir at
:data:`WORKDIR` (a host temp dir, always removed afterwards) and exactly the declared mounts.
Nothing of ``/etc/passwd``, ``/root``, ``/home`` or ``/work`` is visible unless mounted.

Limits: the wall clock by SIGKILL of bwrap's process group (``--die-with-parent`` plus the pid
namespace take everything inside down with it); CPU seconds (``RLIMIT_CPU``, per process) and file
size (``RLIMIT_FSIZE``) as rlimits; memory through a per-workload
:class:`~sandbox._isolation.MemoryCgroup` and process count through a
:class:`~sandbox._isolation.PidsCgroup`, each only when the host offers a writable controller —
otherwise a request for that limit is rejected with :class:`LimitNotEnforceable`. When controllers
exist and ``accounting`` is on (the default), measuring-only groups are used even without a limit
(CPU time — bwrap does not reap its sandbox child, so its own rusage misses it —, peak memory and
processes, and a kill-everything at close).

Limits are applied race-free without a ``preexec_fn`` (which would cost ~5 ms per spawn): bwrap
runs with ``--json-status-fd`` and ``--block-fd``; it reports the sandbox child's host pid and waits
on the block fd *before* forking the command, the host sets the rlimits on that pid (``prlimit``)
and moves it into the cgroups, then unblocks it. Everything the command ever forks inherits both.
The cgroups are created (and their counters opened) right after bwrap is spawned, while it sets up
its namespaces and mounts. (With no rlimit and no cgroup to apply, the handshake is skipped.)
If applying a limit fails, the workload is killed before it runs (:class:`SandboxCrashed`).

The environment (with resolved secrets) is given to ``bwrap`` as its process environment, never in
argv. Setup failures of bwrap itself (it never reports an ``exit-code`` on ``--json-status-fd``)
raise :class:`SandboxCrashed`. Not hardened with a seccomp filter; the kernel is shared.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import subprocess
import tempfile
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import trio

from effectagent.effect import Layer

from ._command import (
    LIMIT_FILESYSTEM,
    CommandNotFound,
    InvalidRequest,
    SandboxCrashed,
    SandboxRequest,
    SandboxService,
    SandboxUnavailable,
    SecretResolver,
    SecretResolverService,
    check_enforceable,
    validate_request,
)
from ._isolation import (
    CpuCgroup,
    HostFacts,
    MemoryCgroup,
    PidsCgroup,
    ProcessLimits,
    apply_rlimits,
    bwrap_argv,
    ceil_seconds,
    probe_host,
    system_mounts,
)
from ._local import CommandExecution, Measured, Spawn, remove_tree
from ._posture import (
    LIMIT_CPU,
    LIMIT_FILE_SIZE,
    LIMIT_MEMORY,
    LIMIT_NETWORK,
    LIMIT_OUTPUT,
    LIMIT_PROCESSES,
    LIMIT_WALL_CLOCK,
    Isolation,
    LimitNotEnforceable,
    SandboxError,
    SandboxImplementation,
)

G = TypeVar("G", MemoryCgroup, PidsCgroup)

__all__ = [
    "WORKDIR",
    "BubblewrapSandbox",
    "bubblewrap_implementation",
    "check_bwrap",
    "resolve_in_view",
]

WORKDIR = "/workspace"
"""Sandbox path of the per-execution read-write workdir (the default ``cwd``)."""


@functools.cache
def _bwrap_version(bwrap: str) -> str:
    try:
        out = subprocess.run(
            [bwrap, "--version"], capture_output=True, text=True, timeout=5, check=False
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    return out.strip().rpartition(" ")[2] or "unknown"


def bubblewrap_implementation(facts: HostFacts) -> SandboxImplementation:
    """The honest posture of bubblewrap on a host with ``facts`` (which must have bwrap)."""
    enforced = {
        LIMIT_WALL_CLOCK,
        LIMIT_OUTPUT,
        LIMIT_CPU,
        LIMIT_FILE_SIZE,
        LIMIT_NETWORK,
        LIMIT_FILESYSTEM,
    }
    unenforced: set[str] = set()
    notes = [
        "user, pid, net, ipc, uts and cgroup namespaces; all capabilities dropped; shared kernel, "
        "no seccomp filter",
        "cpu: RLIMIT_CPU per process; the wall clock bounds the whole workload",
    ]
    if facts.cgroup_memory is not None:
        enforced.add(LIMIT_MEMORY)
        notes.append(f"memory: cgroup v{facts.cgroup_memory.version} limit, swap included")
    else:
        unenforced.add(LIMIT_MEMORY)
        notes.append("memory: no writable cgroup memory controller here; requests are rejected")
    if facts.cgroup_pids is not None:
        enforced.add(LIMIT_PROCESSES)
        notes.append(f"processes: cgroup v{facts.cgroup_pids.version} pids.max")
    else:
        unenforced.add(LIMIT_PROCESSES)
        notes.append("processes: no writable cgroup pids controller here; requests are rejected")
    return SandboxImplementation(
        name="bubblewrap",
        version=_bwrap_version(facts.bwrap) if facts.bwrap else "unknown",
        isolation=Isolation.NAMESPACES,
        is_security_boundary=True,
        enforced_limits=frozenset(enforced),
        unenforced_limits=frozenset(unenforced),
        notes=tuple(notes),
    )


def _mount_table(request: SandboxRequest, workdir: str, network: bool) -> list[tuple[str, str]]:
    """``(sandbox_path, host_path)`` of everything visible, system view first."""
    table = [(path, path) for _, path in system_mounts(network)]
    table.append((WORKDIR, workdir))
    table += [(m.sandbox_path, m.host_path) for m in request.mounts]
    return table


def _to_host(path: str, table: Sequence[tuple[str, str]]) -> str | None:
    best: tuple[str, str] | None = None
    for inside, host in table:
        if (path == inside or path.startswith(inside.rstrip("/") + "/")) and (
            best is None or len(inside) > len(best[0])
        ):
            best = (inside, host)
    if best is None:
        return None
    return best[1] + path[len(best[0]) :]


def resolve_in_view(
    command: str, path_env: str, cwd: str, table: Sequence[tuple[str, str]]
) -> str | None:
    """The sandbox path ``command`` resolves to inside the view described by ``table``, or None.

    ``table`` maps sandbox paths to host paths (longest prefix wins); a program is found if the
    mapped host file is an executable regular file.
    """
    if "/" in command:
        candidates = [os.path.normpath(os.path.join(cwd, command))]
    else:
        candidates = [os.path.join(d or ".", command) for d in path_env.split(":")]
        candidates = [os.path.normpath(os.path.join(cwd, c)) for c in candidates]
    for candidate in candidates:
        host = _to_host(candidate, table)
        if host is not None and os.path.isfile(host) and os.access(host, os.X_OK):
            return candidate
    return None


def check_bwrap(request: SandboxRequest) -> None:
    """Bubblewrap rules beyond the shared checks (pure): image, cwd inside the view."""
    if request.image != "host":
        raise InvalidRequest((f"image {request.image!r} is not provided (only 'host')",))
    if request.cwd is not None:
        roots = [WORKDIR, "/tmp", *(m.sandbox_path for m in request.mounts)]
        if not any(request.cwd == r or request.cwd.startswith(r + "/") for r in roots):
            raise InvalidRequest(
                (f"cwd {request.cwd!r} is outside the workdir, /tmp and the mounts",)
            )


class _BwrapExecution(CommandExecution):
    def __init__(
        self,
        implementation: SandboxImplementation,
        request: SandboxRequest,
        resolver: SecretResolver | None,
        live: set[CommandExecution],
        facts: HostFacts,
        accounting: bool,
    ) -> None:
        super().__init__(implementation, request, resolver, live)
        self._facts = facts
        self._accounting = accounting
        self._workdir: str | None = None
        self._memory: MemoryCgroup | None = None
        self._pids: PidsCgroup | None = None
        self._cpu_group: CpuCgroup | None = None
        self._status_read: int | None = None
        self._status_write: int | None = None
        self._block_read: int | None = None
        self._block_write: int | None = None
        self._status = b""
        self._rlimits = ProcessLimits()
        self._want_memory = self._want_pids = self._want_cpu = False

    async def prepare(self, env: dict[str, str]) -> Spawn:
        return self._prepare_sync(env)  # mkdtemp and a few stats: sub-millisecond

    def _prepare_sync(self, env: dict[str, str]) -> Spawn:
        request = self.request
        problems = [
            f"mounts: host_path {m.host_path!r} does not exist"
            for m in request.mounts
            if not os.path.exists(m.host_path)
        ]
        if problems:
            raise InvalidRequest(tuple(problems))
        self._workdir = tempfile.mkdtemp(prefix="effectagent-bwrap-")
        self._owned.append(self._workdir)
        network = request.network == "host"
        cwd = request.cwd or WORKDIR
        table = _mount_table(request, self._workdir, network)
        host_cwd = _to_host(cwd, table)
        if (
            cwd != "/tmp"
            and not cwd.startswith("/tmp/")
            and not (host_cwd and os.path.isdir(host_cwd))
        ):
            raise InvalidRequest((f"cwd {cwd!r} is not a directory inside the sandbox",))
        program = resolve_in_view(request.command, env["PATH"], cwd, table)
        if program is None:
            raise CommandNotFound(request.command)

        limits = request.limits
        accounting = self._accounting
        facts = self._facts
        self._want_memory = facts.cgroup_memory is not None and bool(
            accounting or limits.memory_bytes
        )
        self._want_pids = facts.cgroup_pids is not None and bool(accounting or limits.max_processes)
        self._want_cpu = facts.cgroup_cpu is not None and accounting
        self._rlimits = ProcessLimits(
            cpu_seconds=ceil_seconds(limits.cpu_seconds) if limits.cpu_seconds else None,
            file_size_bytes=limits.file_size_bytes,
        )
        self._status_read, self._status_write = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
        os.set_blocking(self._status_write, True)
        extra = ["--json-status-fd", str(self._status_write)]
        pass_fds = [self._status_write]
        confined = self._rlimits != ProcessLimits() or (
            self._want_memory or self._want_pids or self._want_cpu
        )
        if confined:  # otherwise skip the handshake (one host round trip fewer)
            self._block_read, self._block_write = os.pipe2(os.O_CLOEXEC)
            extra += ["--block-fd", str(self._block_read)]
            pass_fds.append(self._block_read)
        argv = bwrap_argv(
            bwrap=self._facts.bwrap or "bwrap",
            ro_binds=[(m.host_path, m.sandbox_path) for m in request.mounts if m.mode == "ro"],
            rw_binds=[(self._workdir, WORKDIR)]
            + [(m.host_path, m.sandbox_path) for m in request.mounts if m.mode == "rw"],
            tmpfs=(),
            cwd=cwd,
            env={},
            network=network,
            extra=extra,
            clearenv=False,
        )
        return Spawn(
            argv=(*argv, program, *request.args),
            env=env,
            cwd=self._workdir,
            pass_fds=tuple(pass_fds),
        )

    def spawn_error(self, exc: OSError) -> SandboxError:
        if isinstance(exc, FileNotFoundError):
            return SandboxUnavailable(f"cannot start bwrap: {exc.strerror}")
        return super().spawn_error(exc)

    async def __aenter__(self) -> AsyncIterator[Any]:
        """Spawn bwrap, confine its blocked child (rlimits, cgroups), then let the command run.

        Cancellation: as for :class:`CommandExecution` — everything started is killed and removed.
        """
        events = await super().__aenter__()
        try:
            for name in ("_status_write", "_block_read"):
                fd = getattr(self, name)
                if fd is not None:
                    os.close(fd)
                    setattr(self, name, None)
            if self._block_write is None:
                return events  # nothing to confine: no handshake
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
                self._confine(child)
                self._unblock()
            # child None: bwrap failed during setup and exits; the crash is reported at the end.
            # The block fd is closed only after the workload is dead (cleanup), never before.
        except BaseException:
            await self.aclose()
            raise
        return events

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
            if self._cpu_group is not None:
                self._owned.append(self._cpu_group.path)
        for group in (self._memory, self._pids, self._cpu_group):
            if group is not None:
                group.prefetch()

    def _limited_group(self, create: Callable[[int | None], G], limit: int | None) -> G | None:
        """``create(limit)``, owned by this execution; None when only accounting was wanted and
        the host cannot give it (a requested limit that cannot be had raises)."""
        try:
            group = create(limit)
        except LimitNotEnforceable:
            if limit is not None:
                raise
            return None
        self._owned.append(group.path)
        return group

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
        """Apply rlimits and cgroups to the blocked sandbox child, or kill the workload."""
        try:
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

    def artifact_roots(self) -> Mapping[str | None, tuple[str, str]]:
        assert self._workdir is not None
        roots: dict[str | None, tuple[str, str]] = {None: (WORKDIR, self._workdir)}
        for mount in self.request.mounts:
            roots[mount.sandbox_path] = (mount.sandbox_path, mount.host_path)
        return roots

    def cleanup(self) -> None:
        for fd in (self._status_read, self._status_write, self._block_read, self._block_write):
            if fd is not None:
                os.close(fd)
        self._status_read = self._status_write = self._block_read = self._block_write = None
        errors: list[OSError] = []
        for group in (self._memory, self._pids, self._cpu_group):
            if group is not None:
                try:
                    group.close()
                except OSError as exc:  # every resource gets its chance; report the first failure
                    errors.append(exc)
        if self._workdir is not None:
            try:
                remove_tree(self._workdir)
                self._workdir = None
            except OSError as exc:
                errors.append(exc)
        if errors:
            raise SandboxCrashed(f"cleanup failed: {errors[0]}") from errors[0]


class BubblewrapSandbox:
    """Runs commands inside bubblewrap namespaces; a security boundary (see the module notes).

    Construction probes the host (cached) and raises :class:`SandboxUnavailable` when ``bwrap`` is
    missing or user namespaces do not work. With ``accounting`` (the default) every execution also
    gets cgroups that only measure (CPU time, peak memory, peak processes) when the host has them;
    each costs a cgroup migration (~0.1 ms idle, several ms on a loaded host), so latency-bound
    callers may turn it off: limits still get their cgroups, usage is then partly ``None``.
    """

    def __init__(
        self,
        *,
        secrets: SecretResolver | None = None,
        facts: HostFacts | None = None,
        accounting: bool = True,
    ) -> None:
        facts = facts or probe_host()
        if facts.bwrap is None:
            raise SandboxUnavailable("bwrap is not installed (Debian package 'bubblewrap')")
        if not facts.user_namespaces:
            raise SandboxUnavailable("bwrap cannot create namespaces on this host")
        self._facts = facts
        self._accounting = accounting
        self._implementation = bubblewrap_implementation(facts)
        self._secrets = secrets
        self._live: set[CommandExecution] = set()

    @property
    def implementation(self) -> SandboxImplementation:
        """``Isolation.NAMESPACES``; limits enforced according to this host's cgroups."""
        return self._implementation

    @property
    def facts(self) -> HostFacts:
        """The host facts this sandbox was built from."""
        return self._facts

    def check(self, request: SandboxRequest) -> None:
        """Raise the error :meth:`execute` would raise before running ``request``, if any. Pure."""
        validate_request(request)
        check_enforceable(self._implementation, request)
        check_bwrap(request)

    def execute(self, request: SandboxRequest) -> CommandExecution:
        """Run ``request``: ``async with sandbox.execute(req) as events: async for e in events``.

        Checks run at once (raising here); the process starts in ``__aenter__``. Cancellation:
        leaving the block kills the namespace, reaps, removes the workdir and cgroups.
        """
        self.check(request)
        return _BwrapExecution(
            self._implementation,
            request,
            self._secrets,
            self._live,
            self._facts,
            self._accounting,
        )

    async def aclose(self) -> None:
        """Kill every execution still running. Cancellation: shielded per execution."""
        for execution in list(self._live):
            await execution.aclose()

    @staticmethod
    def layer(*, with_secrets: bool = False) -> Layer:
        """A scoped Layer providing :data:`SandboxService`; teardown kills live executions.

        Building fails with :class:`SandboxUnavailable` on a host without working bubblewrap.
        ``with_secrets`` makes it require :data:`SecretResolverService`.
        """

        @asynccontextmanager
        async def factory(ctx: Any) -> AsyncIterator[BubblewrapSandbox]:
            resolver = ctx.require(SecretResolverService) if with_secrets else None
            sandbox = await trio.to_thread.run_sync(lambda: BubblewrapSandbox(secrets=resolver))
            try:
                yield sandbox
            finally:
                await sandbox.aclose()

        requires = (SecretResolverService,) if with_secrets else ()
        return Layer.scoped(SandboxService, factory, requires=requires, name="bubblewrap")
