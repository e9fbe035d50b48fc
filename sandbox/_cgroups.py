"""Per-workload cgroups: the kernel's own accounting and limits for a whole process tree.

Per-process rlimits cannot bound what a workload does as a group — each descendant gets its own
budget, ``RLIMIT_NPROC`` is ignored for root, and bwrap does not reap its sandbox child, so CPU
used inside never reaches our rusage.  A cgroup created for one workload sees every process of it,
reaped or not, and lets us kill everything in it reliably at the end.  Each class here owns one
such group inside a parent found by :func:`~sandbox._host.probe_host`, and reports
:class:`LimitNotEnforceable` instead of silently running unlimited when the host cannot provide it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
import uuid
from collections.abc import Mapping
from typing import ClassVar, Literal

from ._host import _CGROUP_PREFIX, CgroupSupport, probe_host
from ._posture import LIMIT_MEMORY, LIMIT_PROCESSES, LimitNotEnforceable

__all__ = ["CpuCgroup", "MemoryCgroup", "PidsCgroup"]


class _WorkloadCgroup:
    """One cgroup directory owned by one workload; see :class:`MemoryCgroup`."""

    _support: CgroupSupport

    #: Counter files read after the workload, per cgroup version (see :meth:`prefetch`).
    _COUNTERS: ClassVar[Mapping[int, tuple[str, ...]]] = {}

    def __init__(self, support: CgroupSupport) -> None:
        self._support = support
        self.path = os.path.join(support.parent, f"{_CGROUP_PREFIX}{uuid.uuid4().hex}")
        os.mkdir(self.path)
        self._closed = False
        self._fds: dict[str, int] = {}

    @property
    def version(self) -> Literal[1, 2]:
        """The cgroup version of this group."""
        return self._support.version

    def _write(self, name: str, value: str) -> None:
        with open(os.path.join(self.path, name), "w") as f:
            f.write(value)

    def _read(self, name: str) -> str | None:
        try:
            fd = self._fds.get(name)
            if fd is not None:  # a counter opened ahead: one pread, no path lookup
                return os.pread(fd, 65536, 0).decode()
            with open(os.path.join(self.path, name)) as f:
                return f.read()
        except OSError:
            return None

    def prefetch(self) -> None:
        """Open the counter files read after the workload now, so that reading them later costs
        one ``pread`` each (cgroup files regenerate their content on a read at offset 0).

        Optional and best effort; the files are closed by :meth:`close`. Never for
        ``cgroup.procs``, whose v1 listing an open file keeps cached for a second.
        """
        for name in self._COUNTERS.get(self.version, ()):
            if name not in self._fds:
                with contextlib.suppress(OSError):
                    self._fds[name] = os.open(
                        os.path.join(self.path, name), os.O_RDONLY | os.O_CLOEXEC
                    )

    def _close_fds(self) -> None:
        fds, self._fds = self._fds, {}
        for fd in fds.values():
            os.close(fd)

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
        self._close_fds()
        try:
            os.rmdir(self.path)  # succeeds only when no process is left in it: the usual case
        except FileNotFoundError:
            pass
        except OSError:
            self._kill_and_remove()
        self._closed = True

    def _kill_and_remove(self) -> None:
        deadline = time.monotonic() + 1.0
        pause = 0.0001
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
                time.sleep(pause)  # killed processes leave the group on their way out
                pause = min(pause * 2, 0.002)
            else:
                break


class MemoryCgroup(_WorkloadCgroup):
    """One memory cgroup per workload, with a hard limit and no swap beyond it.

    Create it before spawning, join it with ``rlimit_preexec(..., join_cgroups=[cg.path])``, read
    :meth:`peak_bytes` / :meth:`oom_killed` after the workload exits, then :meth:`close`.
    """

    _COUNTERS: ClassVar[Mapping[int, tuple[str, ...]]] = {
        1: ("memory.max_usage_in_bytes", "memory.oom_control"),
        2: ("memory.peak", "memory.events"),
    }

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

    _COUNTERS: ClassVar[Mapping[int, tuple[str, ...]]] = {1: ("cpuacct.usage",), 2: ("cpu.stat",)}

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

    _COUNTERS: ClassVar[Mapping[int, tuple[str, ...]]] = {
        1: ("pids.events", "pids.peak"),
        2: ("pids.events", "pids.peak"),
    }

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
