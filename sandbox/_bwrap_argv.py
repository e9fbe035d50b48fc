"""The bubblewrap command line: which namespaces a workload gets and which host files it can see.

Both bubblewrap-based runners (commands and the Deno code executor) and the host probe build their
``bwrap`` invocation here, so the sandbox's view of the host is defined in exactly one place and
reviewed as one list.  The view is computed from this host's layout (merged-/usr symlinks, which
``/proc`` knobs exist) rather than hard-coded, because bwrap cannot bind or mask what is missing.
Pure argv construction: nothing here spawns a process.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping, Sequence
from typing import Final

__all__ = ["WORKLOAD_HOSTNAME", "bwrap_argv", "proc_hardening", "system_mounts"]

#: The host name a workload sees (its uts namespace is its own): never the host's.
WORKLOAD_HOSTNAME: Final = "sandbox"

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
    fd_binds: Sequence[tuple[int, str, bool]] = (),
    seccomp_fd: int | None = None,
    disable_userns: bool = False,
) -> list[str]:
    """The ``bwrap`` argv prefix for one workload; append the command and its arguments.

    New user, pid, net, ipc, uts and cgroup namespaces (``--unshare-all``; ``--share-net`` only
    when ``network``; the host name :data:`WORKLOAD_HOSTNAME`), with ``disable_userns`` no user namespace of the workload's own
    (``--disable-userns``, where ``HostFacts.disable_userns``), ``--die-with-parent``,
    ``--new-session``, ``--cap-drop ALL``, a cleared environment holding exactly ``env``, the read-only :func:`system_mounts`, a fresh ``/proc``
    (global knobs read-only or masked: :func:`proc_hardening`), a minimal ``/dev``, a tmpfs
    ``/tmp``, then ``tmpfs`` dirs, ``ro_binds`` and ``rw_binds`` as ``(host, sandbox)`` pairs in
    that order, ``fd_binds`` as ``(descriptor, sandbox, writable)`` (bwrap inherits the
    descriptor, mounts its path and checks that this is still the same file: see
    ``_mount_sources``), ``symlinks`` as ``(target, link)``
    pairs, a read-only root (only ``/tmp``, the tmpfs dirs and the writable binds are writable),
    and ``--chdir cwd``. ``seccomp_fd`` is a compiled filter bwrap loads for the command
    (``--seccomp``). ``extra`` goes right before the command.

    With ``clearenv=False`` (and an empty ``env``) the workload inherits bwrap's own environment
    instead: pass the exact environment to the spawn call, which keeps values (secrets) out of argv,
    where any host process could read them in ``/proc/<pid>/cmdline``.
    """
    # The uts namespace is the workload's own: without a name of its own it would show the
    # host's, which says which machine it runs on.
    argv = [bwrap, "--unshare-all", "--hostname", WORKLOAD_HOSTNAME]
    if disable_userns:
        # A user namespace of its own would give the workload every capability inside it: a
        # root user that may mount, configure a network stack and reach kernel code that
        # unprivileged users cannot. bwrap needs an explicit --unshare-user for the option.
        argv += ["--unshare-user", "--disable-userns"]
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
    for fd, inside, writable in fd_binds:
        argv += ["--bind-fd" if writable else "--ro-bind-fd", str(fd), inside]
    if seccomp_fd is not None:
        argv += ["--seccomp", str(seccomp_fd)]
    for target, link in symlinks:
        argv += ["--symlink", target, link]
    argv += ["--remount-ro", "/", "--chdir", cwd, *extra]
    return argv
