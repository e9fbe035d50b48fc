"""Host facts and isolation building blocks shared by every sandbox implementation.

Nothing here decides policy; the runners (``_local``, ``_bwrap``, the Deno executor) do. This module
is the one import point for the building blocks, each of which lives with its concept: ``_host``
(what this host offers, probed), ``_bwrap_argv`` (the bubblewrap command line and the sandbox's
view of the host), ``_cgroups`` (per-workload cgroups) and ``_process_control`` (rlimits,
process-group kill, CPU of an exited child). Only :func:`kill_process_group` needs Trio.

What the pieces mean for a runner:

* Process counts are limited with a ``pids`` cgroup (:class:`PidsCgroup`), never
  ``RLIMIT_NPROC``: the kernel ignores that one for root, also inside bubblewrap's user namespace
  (measured), and for other users it counts every process of the user, not the workload.
* A workload joins its cgroups before it runs anything: in the child before exec
  (:func:`rlimit_preexec` with ``join_cgroups``), or, for bubblewrap, while bwrap waits on its
  ``--block-fd`` after reporting its child's pid (cgroups joined and :func:`apply_rlimits` applied
  from the host, which avoids a ``preexec_fn``: that forces ``fork`` instead of ``vfork``). Moving
  it in after spawning would let a fast workload fork unaccounted.
* :class:`CpuCgroup` measures the CPU time of a whole workload: bwrap does not reap its sandbox
  child before exiting, so the CPU time of what ran inside never reaches bwrap's own rusage.
  ``MemoryCgroup.create`` / ``PidsCgroup.create`` accept ``None`` for an accounting-only group
  (peak usage, and a reliable "kill everything in it" at close).
* :func:`bwrap_argv` puts secrets nowhere near argv (``clearenv=False`` passes the spawn
  environment through instead); the system mounts follow this host's layout (``/bin`` is a
  symlink to ``usr/bin`` on merged-/usr systems); global ``/proc`` knobs are re-bound read-only
  (:func:`proc_hardening`), and the root is remounted read-only after all binds.
* :func:`zombie_cpu_seconds` reads the CPU time of an exited, not yet reaped, child (including its
  reaped descendants) from ``/proc``; call it after the process exits and before ``wait()``.
"""

from __future__ import annotations

from ._bwrap_argv import bwrap_argv, proc_hardening, system_mounts
from ._cgroups import CpuCgroup, MemoryCgroup, PidsCgroup
from ._host import (
    CgroupCpuSupport,
    CgroupMemorySupport,
    CgroupPidsSupport,
    CgroupSupport,
    HostFacts,
    probe_host,
    userns_note,
)
from ._process_control import (
    ProcessLimits,
    apply_rlimits,
    ceil_seconds,
    kill_process_group,
    rlimit_preexec,
    zombie_cpu_seconds,
)

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
    "userns_note",
    "zombie_cpu_seconds",
]
