"""Process-level controls: rlimits set on a workload, and killing and measuring its process group.

These are the mechanisms every runner has even without namespaces or cgroups, so the unisolated
local runner relies on them alone and the isolated runners use them alongside cgroups.  They act
on one process and what it forks: rlimits are inherited per process, the kill reaches the process
group (a ``setsid`` escapes it — one reason the local runner is no security boundary), and CPU is
read from the zombie before it is reaped, the last moment its counters are both final and
readable.  Only :func:`kill_process_group` needs Trio.
"""

from __future__ import annotations

import contextlib
import math
import os
import resource
import signal
from collections.abc import Callable, Sequence

import attrs
import trio

__all__ = [
    "ProcessLimits",
    "apply_rlimits",
    "ceil_seconds",
    "kill_process_group",
    "rlimit_preexec",
    "zombie_cpu_seconds",
]


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
        # SIGKILL is delivered asynchronously: the leader is reaped, but forked members of the
        # group may still be on their way out. Wait (bounded) until none is alive, so "killed"
        # means gone when this returns. Zombies reparented elsewhere are dead and not waited for.
        with trio.move_on_after(_GROUP_EXIT_WAIT):
            while _group_has_live_members(process.pid):  # noqa: ASYNC110 - polling /proc, no event exists
                await trio.sleep(0.002)


#: How long :func:`kill_process_group` waits for SIGKILLed group members to disappear.
_GROUP_EXIT_WAIT = 2.0


def _group_has_live_members(pgid: int) -> bool:
    """Whether any process of group ``pgid`` is still alive (not a zombie). Reads ``/proc``."""
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    with os.scandir("/proc") as entries:
        for entry in entries:
            if not entry.name.isdigit():
                continue
            try:
                with open(f"/proc/{entry.name}/stat", "rb") as f:
                    fields = f.read().rsplit(b")", 1)[1].split()
            except OSError:
                continue
            # fields[0] is the state, fields[2] the process group.
            if int(fields[2]) == pgid and fields[0] not in (b"Z", b"X"):
                return True
    return False


def ceil_seconds(value: float) -> int:
    """Whole seconds for ``RLIMIT_CPU`` (at least one)."""
    return max(1, math.ceil(value))
