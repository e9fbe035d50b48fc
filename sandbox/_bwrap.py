"""The bubblewrap command sandbox: namespaces, a private read-only system view, cgroups, rlimits.

Each execution gets new user, pid, net (unless ``network="host"``), ipc, uts and cgroup namespaces,
all capabilities dropped, a new session, the host's ``/usr`` and loader configuration read-only,
a fresh ``/proc``, a minimal ``/dev``, a tmpfs ``/tmp``, a per-execution read-write workdir at
:data:`WORKDIR` (a host temp dir, always removed afterwards) and exactly the declared mounts.
Nothing of ``/etc/passwd``, ``/root``, ``/home`` or ``/work`` is visible unless mounted.

The workload never holds host root: when this process is root, bubblewrap and everything in the
sandbox run as an unprivileged :class:`~sandbox.WorkloadIdentity` (``nobody`` by default), and a
seccomp filter refuses to make setuid or setgid files, so nothing the workload writes through a
mount can raise anyone's privileges on the host. Mount sources are opened without following links
a workload could have planted, and checked to be usable by the workload's user.

Limits: the wall clock by SIGKILL of bwrap's process group (``--die-with-parent`` plus the pid
namespace take everything inside down with it); CPU seconds (``RLIMIT_CPU``, per process) and file
size (``RLIMIT_FSIZE``) as rlimits; memory through a per-workload
:class:`MemoryCgroup` and process count through a :class:`PidsCgroup`, each only
when the host offers a writable controller — otherwise a request for that limit is rejected with
:class:`LimitNotEnforceable` (every limit is finite by default: a host without those controllers
needs an explicit :data:`~sandbox.UNLIMITED`). When controllers exist and ``accounting`` is on
(the default), measuring-only groups are used for what is not limited. How one execution is
prepared, confined before it runs and released is in ``_bwrap_execution``.

The environment (with resolved secrets) is given to ``bwrap`` as its process environment, never in
argv. Setup failures of bwrap itself (it never reports an ``exit-code`` on ``--json-status-fd``)
raise :class:`SandboxCrashed`. The kernel is shared; the seccomp filter is that one rule, not a
general system-call allowlist.
"""

from __future__ import annotations

import functools
import os
import subprocess
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import trio

from effectagent.effect import Layer

from ._bwrap_execution import BwrapExecution, BwrapSettings
from ._bwrap_view import WORKDIR
from ._command import (
    LIMIT_FILESYSTEM,
    InvalidRequest,
    SandboxRequest,
    SandboxService,
    SandboxUnavailable,
    SecretResolver,
    SecretResolverService,
)
from ._command_checks import check_enforceable, validate_request
from ._execution import CommandExecution
from ._identity import WorkloadIdentity, identity_note, resolve_identity, workload_user
from ._isolation import HostFacts, probe_host, userns_note
from ._ownership import OwnedResources
from ._posture import (
    LIMIT_CPU,
    LIMIT_FILE_SIZE,
    LIMIT_MEMORY,
    LIMIT_NETWORK,
    LIMIT_OUTPUT,
    LIMIT_PROCESSES,
    LIMIT_WALL_CLOCK,
    Isolation,
    SandboxImplementation,
)
from ._seccomp import setuid_filter

__all__ = [
    "WORKDIR",
    "BubblewrapSandbox",
    "bubblewrap_implementation",
    "check_bwrap",
]


@functools.cache
def _bwrap_version(bwrap: str) -> str:
    try:
        out = subprocess.run(
            [bwrap, "--version"], capture_output=True, text=True, timeout=5, check=False
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    return out.strip().rpartition(" ")[2] or "unknown"


def setuid_note() -> str:
    """The posture note saying whether setuid and setgid bits are filtered on this machine."""
    if setuid_filter() is not None:
        return "files: a seccomp filter refuses setuid and setgid bits; no device nodes"
    return "files: setuid and setgid bits are NOT filtered on this architecture"


def bubblewrap_implementation(
    facts: HostFacts, identity: WorkloadIdentity | None = None
) -> SandboxImplementation:
    """The honest posture of bubblewrap on a host with ``facts`` (which must have bwrap), for
    workloads run as ``identity`` (see :func:`~sandbox.resolve_identity`)."""
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
        "user, pid, net, ipc, uts and cgroup namespaces; all capabilities dropped; shared kernel",
        userns_note(facts),
        identity_note(identity),
        setuid_note(),
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


#: The fewest processes (``max_processes``) a bubblewrap workload can run with: bubblewrap's
#: sandbox init (pid 1 inside) counts in the pids cgroup beside the command.
BWRAP_MIN_PROCESSES = 2


def check_bwrap(request: SandboxRequest) -> None:
    """Bubblewrap rules beyond the shared checks (pure): image, process minimum, cwd inside the
    view."""
    if request.image != "host":
        raise InvalidRequest((f"image {request.image!r} is not provided (only 'host')",))
    processes = request.limits.max_processes
    if isinstance(processes, int) and processes < BWRAP_MIN_PROCESSES:
        raise InvalidRequest(
            (
                f"limits.max_processes must be at least {BWRAP_MIN_PROCESSES} under bubblewrap, "
                f"got {processes}: its sandbox init counts as one process beside the command",
            )
        )
    if request.cwd is not None:
        roots = [WORKDIR, "/tmp", *(m.sandbox_path for m in request.mounts)]
        if not any(request.cwd == r or request.cwd.startswith(r + "/") for r in roots):
            raise InvalidRequest(
                (f"cwd {request.cwd!r} is outside the workdir, /tmp and the mounts",)
            )


class BubblewrapSandbox:
    """Runs commands inside bubblewrap namespaces; a security boundary (see the module notes).

    Construction probes the host (cached) and raises :class:`SandboxUnavailable` when ``bwrap`` is
    missing or user namespaces do not work for the workload's user. ``identity`` is the host user
    workloads run as when this process is root (default :meth:`WorkloadIdentity.nobody`; passing
    one when this process is not root raises ``ValueError``, as it could not be taken). With
    ``accounting`` (the default) every execution also gets cgroups that only measure (CPU time,
    peak memory, peak processes) when the host has them; each costs a cgroup migration (~0.1 ms
    idle, several ms on a loaded host), so latency-bound callers may turn it off: limits still get
    their cgroups, usage is then partly ``None``.
    """

    def __init__(
        self,
        *,
        secrets: SecretResolver | None = None,
        facts: HostFacts | None = None,
        accounting: bool = True,
        identity: WorkloadIdentity | None = None,
    ) -> None:
        facts = facts or probe_host()
        if facts.bwrap is None:
            raise SandboxUnavailable("bwrap is not installed (Debian package 'bubblewrap')")
        if not facts.user_namespaces:
            raise SandboxUnavailable(
                "bwrap cannot create namespaces on this host as the workload's user"
            )
        resolved = resolve_identity(identity)
        user = workload_user(resolved)
        temp = tempfile.gettempdir()
        if (blocked := user.first_unreachable(os.path.join(temp, "workdir"))) is not None:
            raise SandboxUnavailable(
                f"the temp dir {temp!r} is out of reach of the workload's user "
                f"{user.uid}:{user.gid} (it cannot pass {blocked!r}); set TMPDIR elsewhere"
            )
        self._settings = BwrapSettings(facts, accounting, resolved, user)
        self._implementation = bubblewrap_implementation(facts, resolved)
        self._secrets = secrets
        self._live: set[CommandExecution] = set()

    @property
    def implementation(self) -> SandboxImplementation:
        """``Isolation.NAMESPACES``; limits enforced according to this host's cgroups."""
        return self._implementation

    @property
    def facts(self) -> HostFacts:
        """The host facts this sandbox was built from."""
        return self._settings.facts

    @property
    def identity(self) -> WorkloadIdentity | None:
        """The host user workloads run as, or ``None`` when they run as this (non-root) process's
        own user."""
        return self._settings.identity

    def check(self, request: SandboxRequest) -> None:
        """Raise the error :meth:`execute` would raise before running ``request``, if any. Pure.

        Mount sources are checked when the execution starts (they are host state).
        """
        validate_request(request)
        check_enforceable(self._implementation, request)
        check_bwrap(request)

    def execute(self, request: SandboxRequest) -> CommandExecution:
        """Run ``request``: ``async with sandbox.execute(req) as events: async for e in events``.

        Checks run at once (raising here); the mounts are opened and checked and the process
        starts in ``__aenter__``. Cancellation: leaving the block kills the namespace, reaps,
        removes the workdir and cgroups.
        """
        self.check(request)
        return BwrapExecution(
            self._implementation, request, self._secrets, self._live, self._settings
        )

    def owned(self) -> OwnedResources:
        """What every execution still running holds on the host right now."""
        return OwnedResources.union(execution.owned() for execution in list(self._live))

    async def aclose(self) -> None:
        """Kill every execution still running. Cancellation: shielded per execution."""
        for execution in list(self._live):
            await execution.aclose()

    @staticmethod
    def layer(*, with_secrets: bool = False, identity: WorkloadIdentity | None = None) -> Layer:
        """A scoped Layer providing :data:`SandboxService`; teardown kills live executions.

        Building fails with :class:`SandboxUnavailable` on a host without working bubblewrap.
        ``with_secrets`` makes it require :data:`SecretResolverService`; ``identity`` as for the
        constructor.
        """

        @asynccontextmanager
        async def factory(ctx: Any) -> AsyncIterator[BubblewrapSandbox]:
            resolver = ctx.require(SecretResolverService) if with_secrets else None
            sandbox = await trio.to_thread.run_sync(
                lambda: BubblewrapSandbox(secrets=resolver, identity=identity)
            )
            try:
                yield sandbox
            finally:
                await sandbox.aclose()

        requires = (SecretResolverService,) if with_secrets else ()
        return Layer.scoped(SandboxService, factory, requires=requires, name="bubblewrap")
