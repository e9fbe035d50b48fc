"""Host facts and isolation building blocks shared by every sandbox implementation.

Nothing here decides policy; the runners (``_local``, ``_bwrap``, the CodeExecutor) do. This module
is the one import point for the building blocks, each of which lives with its concept:
``_host`` (what this host offers, probed), ``_bwrap_argv`` (the bubblewrap command line and the
sandbox's view of the host), ``_cgroups`` (per-workload cgroups) and ``_process_control``
(rlimits, process-group kill, CPU of an exited child). Only :func:`kill_process_group` needs Trio.

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

from ._bwrap_argv import bwrap_argv, proc_hardening, system_mounts
from ._cgroups import CpuCgroup, MemoryCgroup, PidsCgroup
from ._host import (
    CgroupCpuSupport,
    CgroupMemorySupport,
    CgroupPidsSupport,
    CgroupSupport,
    HostFacts,
    probe_host,
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
    "zombie_cpu_seconds",
]
