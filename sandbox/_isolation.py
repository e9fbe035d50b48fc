"""Host facts and isolation building blocks shared by every sandbox implementation.

Nothing here decides policy; the runners (``_local``, ``_bwrap``, the CodeExecutor) do. Only
:func:`kill_process_group` needs Trio.

Contract notes for other executors (deviations from the first draft, names unchanged):

* :class:`HostFacts` has two extra fields (with defaults): ``cgroup_pids`` (a ``pids`` controller
  for process-count limits) and ``cgroup_cpu`` (CPU accounting, see :class:`CpuCgroup`).
  ``RLIMIT_NPROC`` is *not* a usable process limit here: the kernel ignores it for the root user,
  also inside bubblewrap's user namespace (measured), and for other users it counts every process
  of the user, not the workload.
* :func:`rlimit_preexec` takes an optional ``join_cgroups``: cgroup directories the child moves
  itself into *before* exec, which is race-free (``MemoryCgroup.add_pid`` after spawn lets a fast
  workload fork before it is accounted). Prefer it; ``add_pid`` exists for completeness.
* :class:`PidsCgroup` mirrors :class:`MemoryCgroup` for the ``pids`` controller, and
  :class:`CpuCgroup` measures the CPU time of a whole workload (``HostFacts.cgroup_cpu``): bwrap
  does not reap its sandbox child before exiting, so the CPU time of what ran inside never reaches
  bwrap's own rusage.
* :func:`bwrap_argv` also takes ``symlinks`` (created inside the sandbox) and ``clearenv`` (see its
  docstring: secrets belong in the spawn environment, never in argv); the system mounts are
  computed from this host's layout (``/bin`` is a symlink to ``usr/bin`` on merged-/usr systems).
  It also re-binds ``/proc/sys`` (and a few other global ``/proc`` knobs) read-only
  (:func:`proc_hardening`): when bwrap runs as root, the workload's uid maps to host root and
  bwrap itself leaves ``/proc/sys`` writable — ``kernel.core_pattern`` would be a host escape.
* The root of the sandbox is remounted read-only (``--remount-ro /``) after all binds; only
  ``/tmp``, the requested tmpfs dirs and the rw binds are writable.
* ``MemoryCgroup.create`` / ``PidsCgroup.create`` accept ``None``: an accounting-only group (peak
  usage, and a reliable "kill everything in it" at close) without a limit.
* :func:`apply_rlimits` sets the same limits on another, already running process (``prlimit``).
  The bubblewrap runner uses it with bwrap's ``--block-fd``: bwrap reports the sandbox child's pid
  on ``--json-status-fd`` and waits before forking the command; the host then applies rlimits and
  joins cgroups, and unblocks it. That is race-free *and* avoids ``preexec_fn``, which forces
  ``fork`` instead of ``vfork`` and costs ~4-5 ms per spawn here.
* :func:`zombie_cpu_seconds` reads the CPU time of an exited, not yet reaped, child (including its
  reaped descendants) from ``/proc``; call it after the process exits and before ``wait()``.
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
import resource
import shutil
import signal
import subprocess
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Literal

import attrs
import trio

from ._posture import LIMIT_MEMORY, LIMIT_PROCESSES, LimitNotEnforceable

__all__ = [
    "CgroupCpuSupport",
    "CgroupMemorySupport",
    "CgroupPidsSupport",
    "CgroupSupport",
    "HostFacts",
    "apply_rlimits",
    "CpuCgroup",
    "MemoryCgroup",
    "PidsCgroup",
    "ProcessLimits",
    "bwrap_argv",
    "ceil_seconds",
    "kill_process_group",
    "probe_host",
    "proc_hardening",
    "rlimit_preexec",
    "system_mounts",
    "zombie_cpu_seconds",
]

_CGROUP_PREFIX = "effectagent-"


# ---- host facts ----------


@attrs.frozen
class CgroupSupport:
    """A cgroup controller we may use: per-workload groups are created inside ``parent``."""

    version: Literal[1, 2]
    parent: str


@attrs.frozen
class CgroupMemorySupport(CgroupSupport):
    """A writable memory controller (v1 ``memory.limit_in_bytes`` or v2 ``memory.max``)."""


@attrs.frozen
class CgroupPidsSupport(CgroupSupport):
    """A writable pids controller (``pids.max``, v1 or v2)."""


@attrs.frozen
class CgroupCpuSupport(CgroupSupport):
    """CPU accounting for a group of processes (v1 ``cpuacct.usage``, v2 ``cpu.stat``)."""


@attrs.frozen
class HostFacts:
    """What this host offers for isolation. Detected by :func:`probe_host`, never assumed."""

    bwrap: str | None
    """Absolute path of ``bwrap`` on PATH, or None."""
    user_namespaces: bool
    """True when ``bwrap --unshare-all ... true`` actually works here."""
    cgroup_memory: CgroupMemorySupport | None
    """None when no writable memory controller is available to this process."""
    cgroup_pids: CgroupPidsSupport | None = None
    """None when no writable pids controller is available to this process."""
    cgroup_cpu: CgroupCpuSupport | None = None
    """None when per-workload CPU accounting groups cannot be made."""


def _own_cgroup_paths() -> tuple[dict[str, str], str | None]:
    """Our cgroup path per v1 controller, and our v2 path (``0::``)."""
    v1: dict[str, str] = {}
    v2: str | None = None
    try:
        with open("/proc/self/cgroup") as f:
            lines = f.read().splitlines()
    except OSError:
        return v1, v2
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        if controllers == "":
            v2 = path
        for name in controllers.split(","):
            v1[name] = path
    return v1, v2


def _cgroup_mounts() -> tuple[dict[str, str], str | None]:
    """Mount point of each v1 controller, and of the v2 hierarchy."""
    v1: dict[str, str] = {}
    v2: str | None = None
    try:
        with open("/proc/mounts") as f:
            lines = f.read().splitlines()
    except OSError:
        return v1, v2
    for line in lines:
        fields = line.split()
        if len(fields) < 4:
            continue
        fstype, mnt, options = fields[2], fields[1], fields[3].split(",")
        if fstype == "cgroup2" and v2 is None:
            v2 = mnt
        elif fstype == "cgroup":
            for opt in options:
                v1.setdefault(opt, mnt)
    return v1, v2


def _try_child(parent: str, limit_file: str, value: str | None) -> bool:
    """Can we create a child cgroup in ``parent`` and write ``limit_file`` (read it if ``value`` is
    None)? Cleans up."""
    probe = os.path.join(parent, f"{_CGROUP_PREFIX}probe-{uuid.uuid4().hex[:12]}")
    try:
        os.mkdir(probe)
    except OSError:
        return False
    try:
        if value is None:
            with open(os.path.join(probe, limit_file)) as f:
                f.read()
        else:
            with open(os.path.join(probe, limit_file), "w") as f:
                f.write(value)
        return True
    except OSError:
        return False
    finally:
        with contextlib.suppress(OSError):
            os.rmdir(probe)


def _find_controller(
    controller: str,
    v1: tuple[str, str | None],
    v2: tuple[str, str | None],
    *,
    v2_needs_delegation: bool = True,
) -> tuple[Literal[1, 2], str] | None:
    """Where per-workload groups for ``controller`` can be made: v1 first, then v2 (if delegated).

    ``v1``/``v2`` name a file to write (with a value) or read (value None) in a probe group.
    """
    own_v1, own_v2 = _own_cgroup_paths()
    mounts_v1, mount_v2 = _cgroup_mounts()
    if controller in mounts_v1 and controller in own_v1:
        parent = os.path.join(mounts_v1[controller], own_v1[controller].lstrip("/"))
        if _try_child(parent, *v1):
            return 1, parent
    if mount_v2 is not None and own_v2 is not None:
        parent = os.path.join(mount_v2, own_v2.lstrip("/"))
        try:
            with open(os.path.join(parent, "cgroup.subtree_control")) as f:
                delegated = f.read().split()
        except OSError:
            delegated = []
        usable = controller in delegated or not v2_needs_delegation
        if usable and _try_child(parent, *v2):
            return 2, parent
    return None


def _probe_bwrap(bwrap: str) -> bool:
    argv = bwrap_argv(
        bwrap=bwrap, ro_binds=(), rw_binds=(), tmpfs=(), cwd="/", env={}, network=False
    )
    try:
        done = subprocess.run(
            [*argv, "true"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


@functools.cache
def probe_host() -> HostFacts:
    """Detect what this host offers (cached for the life of the process; ``cache_clear`` resets).

    Runs ``bwrap --unshare-all ... true`` once and creates then removes one probe cgroup per
    controller. Blocking (a few milliseconds); call it at construction time, not per request.
    """
    bwrap = shutil.which("bwrap")
    user_namespaces = bwrap is not None and _probe_bwrap(bwrap)
    memory = _find_controller(
        "memory", ("memory.limit_in_bytes", str(1 << 30)), ("memory.max", "max")
    )
    pids = _find_controller("pids", ("pids.max", "max"), ("pids.max", "max"))
    cpu = _find_controller(
        "cpuacct", ("cpuacct.usage", "0"), ("cpu.stat", None), v2_needs_delegation=False
    )
    return HostFacts(
        bwrap=bwrap,
        user_namespaces=user_namespaces,
        cgroup_memory=CgroupMemorySupport(*memory) if memory else None,
        cgroup_pids=CgroupPidsSupport(*pids) if pids else None,
        cgroup_cpu=CgroupCpuSupport(*cpu) if cpu else None,
    )


# ---- bubblewrap ----------

_SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
_SYSTEM_ETC = (
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/alternatives",
)
_NETWORK_ETC = (
    "/etc/resolv.conf",
    "/etc/hosts",
    "/etc/nsswitch.conf",
    "/etc/ssl",
    "/etc/ca-certificates",
    "/etc/gai.conf",
)


# Global kernel knobs under /proc. bwrap covers some of them read-only (irq, bus, sysrq-trigger),
# but decides by an access() check that fails for /proc/sys when bwrap runs as host root (the
# directory is 0555 and sysctl permissions ignore CAP_DAC_OVERRIDE) — while the files inside stay
# writable by host uid 0, which is what the workload's uid maps to then (kernel.core_pattern would
# be a host escape). So /proc/sys and friends are bound read-only explicitly. Files that list
# host-wide state readable without any capability (other processes' timers and key quotas) are
# masked with /dev/null; those guarded by a capability the workload lacks (kcore, kmsg, kpage*)
# need nothing. Each extra mount costs ~0.2 ms per execution, hence the short lists.
_PROC_READ_ONLY = ("/proc/sys", "/proc/sysrq-trigger", "/proc/fs")
_PROC_MASKED_FILES = ("/proc/timer_list", "/proc/sched_debug", "/proc/keys", "/proc/key-users")


@functools.cache
def proc_hardening() -> tuple[str, ...]:
    """bwrap arguments, after ``--proc /proc``, that make global ``/proc`` knobs read-only or empty.

    Computed from what exists on this host (bwrap cannot create mount points inside procfs).
    """
    args: list[str] = []
    for path in _PROC_READ_ONLY:
        if os.path.exists(path):
            args += ["--ro-bind", path, path]
    for path in _PROC_MASKED_FILES:
        if os.path.exists(path):
            args += ["--ro-bind", "/dev/null", path]
    return tuple(args)


@functools.cache
def system_mounts(network: bool = False) -> tuple[tuple[str, str], ...]:
    """The read-only system view of this host: ``("bind", path)`` or ``("symlink:<target>", path)``.

    Only what running programs needs: ``/usr``, the ``/bin``/``/lib*`` dirs or their merged-/usr
    symlinks, the dynamic loader's configuration and ``/etc/alternatives``; with ``network`` also
    name-resolution and TLS trust files. Never ``/etc/passwd``, ``/root``, ``/home`` or ``/work``.
    """
    out: list[tuple[str, str]] = []
    for path in _SYSTEM_DIRS + _SYSTEM_ETC + (_NETWORK_ETC if network else ()):
        if os.path.islink(path):
            out.append((f"symlink:{os.readlink(path)}", path))
        elif os.path.exists(path):
            out.append(("bind", path))
    return tuple(out)


def bwrap_argv(
    *,
    bwrap: str,
    ro_binds: Sequence[tuple[str, str]],
    rw_binds: Sequence[tuple[str, str]],
    tmpfs: Sequence[str],
    cwd: str,
    env: Mapping[str, str],
    network: bool,
    extra: Sequence[str] = (),
    symlinks: Sequence[tuple[str, str]] = (),
    clearenv: bool = True,
) -> list[str]:
    """The ``bwrap`` argv prefix for one workload; append the command and its arguments.

    New user, pid, net, ipc, uts and cgroup namespaces (``--unshare-all``; ``--share-net`` only
    when ``network``), ``--die-with-parent``, ``--new-session``, ``--cap-drop ALL``, a cleared
    environment holding exactly ``env``, the read-only :func:`system_mounts`, a fresh ``/proc``
    (global knobs read-only or masked: :func:`proc_hardening`), a minimal ``/dev``, a tmpfs
    ``/tmp``, then ``tmpfs`` dirs, ``ro_binds`` and ``rw_binds`` as ``(host, sandbox)`` pairs in
    that order, ``symlinks`` as ``(target, link)`` pairs, a
    read-only root (only ``/tmp``, the tmpfs dirs and the rw binds are writable), and
    ``--chdir cwd``. ``extra`` goes right before the command.

    With ``clearenv=False`` (and an empty ``env``) the workload inherits bwrap's own environment
    instead: pass the exact environment to the spawn call, which keeps values (secrets) out of argv,
    where any host process could read them in ``/proc/<pid>/cmdline``.
    """
    argv = [bwrap, "--unshare-all"]
    if network:
        argv.append("--share-net")
    argv += ["--die-with-parent", "--new-session", "--cap-drop", "ALL"]
    if clearenv:
        argv.append("--clearenv")
    for name, value in env.items():
        argv += ["--setenv", name, value]
    for kind, path in system_mounts(network):
        if kind == "bind":
            argv += ["--ro-bind", path, path]
        else:
            argv += ["--symlink", kind.removeprefix("symlink:"), path]
    argv += ["--proc", "/proc", *proc_hardening(), "--dev", "/dev", "--tmpfs", "/tmp"]
    for path in tmpfs:
        argv += ["--tmpfs", path]
    for host, inside in ro_binds:
        argv += ["--ro-bind", host, inside]
    for host, inside in rw_binds:
        argv += ["--bind", host, inside]
    for target, link in symlinks:
        argv += ["--symlink", target, link]
    argv += ["--remount-ro", "/", "--chdir", cwd, *extra]
    return argv


# ---- rlimits ----------


@attrs.frozen
class ProcessLimits:
    """Per-process resource limits applied with ``setrlimit`` in the child before exec.

    They are inherited by every descendant, each of which gets its own budget (``RLIMIT_CPU`` is per
    process). ``max_processes`` is ``RLIMIT_NPROC``: ignored by the kernel for root, and for other
    users counted across all their processes; prefer :class:`PidsCgroup`.
    """

    cpu_seconds: int | None = None
    file_size_bytes: int | None = None
    max_processes: int | None = None
    address_space_bytes: int | None = None
    open_files: int | None = None


def _rlimit_pairs(limits: ProcessLimits) -> list[tuple[int, tuple[int, int]]]:
    pairs: list[tuple[int, tuple[int, int]]] = []
    if limits.cpu_seconds is not None:
        # soft: SIGXCPU; hard one second later: SIGKILL (SIGXCPU can be caught).
        pairs.append((resource.RLIMIT_CPU, (limits.cpu_seconds, limits.cpu_seconds + 1)))
    if limits.file_size_bytes is not None:
        pairs.append((resource.RLIMIT_FSIZE, (limits.file_size_bytes, limits.file_size_bytes)))
    if limits.max_processes is not None:
        pairs.append((resource.RLIMIT_NPROC, (limits.max_processes, limits.max_processes)))
    if limits.address_space_bytes is not None:
        n = limits.address_space_bytes
        pairs.append((resource.RLIMIT_AS, (n, n)))
    if limits.open_files is not None:
        pairs.append((resource.RLIMIT_NOFILE, (limits.open_files, limits.open_files)))
    return pairs


def rlimit_preexec(
    limits: ProcessLimits, *, join_cgroups: Sequence[str] = ()
) -> Callable[[], None]:
    """A ``preexec_fn``: join each cgroup dir of ``join_cgroups``, then apply ``limits``.

    Process-group/session creation is left to ``start_new_session=True``. Everything the child
    does is computed up front; a failure in the child aborts the spawn with an ``OSError``.
    """
    pairs = _rlimit_pairs(limits)
    procs_files = [os.path.join(d, "cgroup.procs") for d in join_cgroups]

    def preexec() -> None:
        for path in procs_files:
            fd = os.open(path, os.O_WRONLY)
            try:
                os.write(fd, b"0")
            finally:
                os.close(fd)
        for which, pair in pairs:
            resource.setrlimit(which, pair)

    return preexec


def apply_rlimits(pid: int, limits: ProcessLimits) -> None:
    """Apply ``limits`` to the running process ``pid`` (``prlimit``); its future children inherit.

    Raises ``ProcessLookupError`` if it is gone and ``PermissionError`` if not ours.
    """
    for which, pair in _rlimit_pairs(limits):
        resource.prlimit(pid, which, pair)


# ---- cgroups ----------


class _WorkloadCgroup:
    """One cgroup directory owned by one workload; see :class:`MemoryCgroup`."""

    _support: CgroupSupport

    def __init__(self, support: CgroupSupport) -> None:
        self._support = support
        self.path = os.path.join(support.parent, f"{_CGROUP_PREFIX}{uuid.uuid4().hex}")
        os.mkdir(self.path)
        self._closed = False

    @property
    def version(self) -> Literal[1, 2]:
        """The cgroup version of this group."""
        return self._support.version

    def _write(self, name: str, value: str) -> None:
        with open(os.path.join(self.path, name), "w") as f:
            f.write(value)

    def _read(self, name: str) -> str | None:
        try:
            with open(os.path.join(self.path, name)) as f:
                return f.read()
        except OSError:
            return None

    def _counter(self, name: str, key: str) -> int | None:
        text = self._read(name)
        if text is None:
            return None
        for line in text.splitlines():
            parts = line.split()
            if len(parts) == 2 and parts[0] == key:
                return int(parts[1])
        return None

    def _int(self, name: str) -> int | None:
        text = self._read(name)
        if text is None or not text.strip().isdigit():
            return None
        return int(text)

    def add_pid(self, pid: int) -> None:
        """Move ``pid`` into this group (its future children follow; existing ones do not)."""
        self._write("cgroup.procs", str(pid))

    def pids(self) -> list[int]:
        """The processes currently in this group."""
        text = self._read("cgroup.procs") or ""
        return [int(p) for p in text.split()]

    def close(self) -> None:
        """SIGKILL every process left in the group and remove it. Idempotent.

        Blocking but bounded: waits at most ~1 s for killed processes to leave the group. Reap the
        workload first (:func:`kill_process_group`) so that this normally returns at once.
        """
        if self._closed:
            return
        deadline = time.monotonic() + 1.0
        while True:
            if self.version == 2 and os.path.exists(os.path.join(self.path, "cgroup.kill")):
                with contextlib.suppress(OSError):
                    self._write("cgroup.kill", "1")
            for pid in self.pids():
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            try:
                os.rmdir(self.path)
            except FileNotFoundError:
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.002)
            else:
                break
        self._closed = True


class MemoryCgroup(_WorkloadCgroup):
    """One memory cgroup per workload, with a hard limit and no swap beyond it.

    Create it before spawning, join it with ``rlimit_preexec(..., join_cgroups=[cg.path])``, read
    :meth:`peak_bytes` / :meth:`oom_killed` after the workload exits, then :meth:`close`.
    """

    @classmethod
    def create(cls, limit_bytes: int | None) -> MemoryCgroup:
        """A new group limited to ``limit_bytes``; :class:`LimitNotEnforceable` when impossible.

        ``None`` creates an accounting-only group (no limit).
        """
        support = probe_host().cgroup_memory
        if support is None:
            raise LimitNotEnforceable(LIMIT_MEMORY, "no writable cgroup memory controller")
        try:
            group = cls(support)
        except OSError as exc:
            raise LimitNotEnforceable(LIMIT_MEMORY, f"cannot create a cgroup: {exc}") from None
        if limit_bytes is None:
            return group
        try:
            if support.version == 1:
                group._write("memory.limit_in_bytes", str(limit_bytes))
                if os.path.exists(os.path.join(group.path, "memory.memsw.limit_in_bytes")):
                    group._write("memory.memsw.limit_in_bytes", str(limit_bytes))
            else:
                group._write("memory.max", str(limit_bytes))
                if os.path.exists(os.path.join(group.path, "memory.swap.max")):
                    group._write("memory.swap.max", "0")
        except OSError as exc:
            group.close()
            raise LimitNotEnforceable(LIMIT_MEMORY, f"cannot set the limit: {exc}") from None
        return group

    def peak_bytes(self) -> int | None:
        """The largest memory charge seen, when the kernel reports it."""
        name = "memory.max_usage_in_bytes" if self.version == 1 else "memory.peak"
        return self._int(name)

    def oom_killed(self) -> bool:
        """Whether the kernel OOM-killed a process of this group."""
        if self.version == 1:
            count = self._counter("memory.oom_control", "oom_kill")
        else:
            count = self._counter("memory.events", "oom_kill")
        return bool(count)


class CpuCgroup(_WorkloadCgroup):
    """One CPU-accounting cgroup per workload (measures the whole tree, reaped or not)."""

    @classmethod
    def create(cls) -> CpuCgroup | None:
        """A new accounting group, or None when the host has no usable CPU accounting."""
        support = probe_host().cgroup_cpu
        if support is None:
            return None
        try:
            return cls(support)
        except OSError:
            return None

    def usage_seconds(self) -> float | None:
        """CPU time (user+system) of every process that ran in the group."""
        if self.version == 1:
            nanos = self._int("cpuacct.usage")
            return None if nanos is None else nanos / 1e9
        micros = self._counter("cpu.stat", "usage_usec")
        return None if micros is None else micros / 1e6


class PidsCgroup(_WorkloadCgroup):
    """One pids cgroup per workload: at most ``max_pids`` tasks (processes and threads) at once."""

    @classmethod
    def create(cls, max_pids: int | None) -> PidsCgroup:
        """A new group limited to ``max_pids``; :class:`LimitNotEnforceable` when impossible.

        ``None`` creates an accounting-only group (no limit).
        """
        support = probe_host().cgroup_pids
        if support is None:
            raise LimitNotEnforceable(LIMIT_PROCESSES, "no writable cgroup pids controller")
        try:
            group = cls(support)
        except OSError as exc:
            raise LimitNotEnforceable(LIMIT_PROCESSES, f"cannot create a cgroup: {exc}") from None
        if max_pids is None:
            return group
        try:
            group._write("pids.max", str(max_pids))
        except OSError as exc:
            group.close()
            raise LimitNotEnforceable(LIMIT_PROCESSES, f"cannot set the limit: {exc}") from None
        return group

    def limit_hits(self) -> int:
        """How many forks were refused because of the limit."""
        return self._counter("pids.events", "max") or 0

    def peak(self) -> int | None:
        """The most tasks seen at once, when the kernel reports it."""
        return self._int("pids.peak")


# ---- processes ----------

_CLK_TCK = os.sysconf("SC_CLK_TCK")


def zombie_cpu_seconds(pid: int) -> float | None:
    """User+system CPU of ``pid`` and its reaped descendants, read from ``/proc/<pid>/stat``.

    Meaningful once the process has exited and before it is reaped (a zombie's counters are final);
    None if it cannot be read.
    """
    try:
        with open(f"/proc/{pid}/stat") as f:
            text = f.read()
    except OSError:
        return None
    fields = text[text.rfind(")") + 2 :].split()
    try:
        ticks = sum(int(fields[i]) for i in (11, 12, 13, 14))  # utime stime cutime cstime
    except (IndexError, ValueError):
        return None
    return ticks / _CLK_TCK


def _killpg(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


async def kill_process_group(process: trio.Process, *, grace: float = 0.0) -> None:
    """SIGKILL the process group led by ``process`` (spawned with ``start_new_session=True``), reap.

    With ``grace > 0`` the group first gets SIGTERM and up to ``grace`` seconds to exit. Safe when
    the process is already dead or reaped (remaining members of its group are still killed).
    Cancellation: shielded — it always finishes killing and reaping, then honours a pending cancel
    at the caller's next checkpoint.
    """
    with trio.CancelScope(shield=True):
        if grace > 0 and process.returncode is None:
            _killpg(process.pid, signal.SIGTERM)
            with trio.move_on_after(grace):
                await process.wait()
        _killpg(process.pid, signal.SIGKILL)
        await process.wait()


def ceil_seconds(value: float) -> int:
    """Whole seconds for ``RLIMIT_CPU`` (at least one)."""
    return max(1, math.ceil(value))
