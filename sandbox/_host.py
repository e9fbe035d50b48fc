"""Host facts: what this machine offers for isolation, detected by trying it, never assumed.

Whether bubblewrap works and which cgroup controllers we may write to depend on the kernel, the
container we run in and its delegation, none of which can be read reliably from a config file; a
controller that is mounted may still refuse us a child group.  So each capability is probed by
doing the real thing once (a ``bwrap ... true``, a probe cgroup created and removed) and the
answer is cached for the process.  Runners consult these facts to decide which limits they can
honestly enforce; the per-workload cgroups in ``_cgroups`` are created inside the parents found
here.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import subprocess
import uuid
from typing import Literal

import attrs

from ._bwrap_argv import bwrap_argv
from ._identity import WorkloadIdentity, drop_argv, drop_in_child, resolve_identity

__all__ = [
    "CgroupCpuSupport",
    "CgroupMemorySupport",
    "CgroupPidsSupport",
    "CgroupSupport",
    "HostFacts",
    "probe_host",
    "userns_note",
]

_CGROUP_PREFIX = "effectagent-"


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
    """True when ``bwrap --unshare-all ... true`` actually works here, run as the default workload
    user (an unprivileged one when this process is root, see ``_identity``)."""
    cgroup_memory: CgroupMemorySupport | None
    """None when no writable memory controller is available to this process."""
    cgroup_pids: CgroupPidsSupport | None = None
    """None when no writable pids controller is available to this process."""
    cgroup_cpu: CgroupCpuSupport | None = None
    """None when per-workload CPU accounting groups cannot be made."""
    disable_userns: bool = False
    """True when bwrap can keep a workload from making user namespaces of its own
    (``--disable-userns``, bubblewrap 0.8 and later) and doing so works here."""


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


def _offers_disable_userns(bwrap: str) -> bool:
    """Whether ``bwrap --help`` lists ``--disable-userns``. Blocking (one short run)."""
    try:
        done = subprocess.run(
            [bwrap, "--help"], capture_output=True, text=True, timeout=10, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return False
    return "--disable-userns" in done.stdout + done.stderr


def userns_note(facts: HostFacts) -> str:
    """The posture note saying whether a workload may make user namespaces of its own."""
    if facts.disable_userns:
        return "user namespaces: the workload cannot make one of its own (no root inside it)"
    return (
        "user namespaces: NOT disabled: the workload may make one of its own and hold every "
        "capability inside it (bubblewrap 0.8 or later, where it works, prevents it)"
    )


def _probe_bwrap(bwrap: str, disable_userns: bool) -> bool:
    identity = resolve_identity(None)
    prefix = drop_argv(identity)
    argv = bwrap_argv(
        bwrap=bwrap,
        ro_binds=(),
        rw_binds=(),
        tmpfs=(),
        cwd="/",
        env={},
        network=False,
        disable_userns=disable_userns,
    )
    drop = None
    if prefix is None:  # no setpriv: drop in the child instead
        assert isinstance(identity, WorkloadIdentity)
        drop = drop_in_child(identity)
    # --as-pid-1: no sandbox init, so nothing is left an orphan (see _reaping).
    try:
        done = subprocess.run(
            [*(prefix or ()), *argv, "--as-pid-1", "true"],
            preexec_fn=drop,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return False
    return done.returncode == 0


@functools.cache
def probe_host() -> HostFacts:
    """Detect what this host offers (cached for the life of the process; ``cache_clear`` resets).

    Runs ``bwrap --unshare-all ... true`` once (twice where ``--disable-userns`` fails) and creates then removes one probe cgroup per
    controller. Blocking (a few milliseconds); call it at construction time, not per request.
    """
    bwrap = shutil.which("bwrap")
    # With --disable-userns where this bwrap has it and it works here; else without it, and the
    # posture says so (userns_note).
    disable_userns = (
        bwrap is not None and _offers_disable_userns(bwrap) and _probe_bwrap(bwrap, True)
    )
    user_namespaces = disable_userns or (bwrap is not None and _probe_bwrap(bwrap, False))
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
        disable_userns=disable_userns,
    )
