"""The unisolated local process runner.

:class:`LocalProcessSandbox` runs the command as a plain host process (CAP-010: it says so, and is
never a security boundary). It enforces the wall clock (host kill), the output bound, CPU time
(``RLIMIT_CPU`` per process) and file size (``RLIMIT_FSIZE``), and *rejects* what it cannot
honour: ``network="none"``, any mount other than an identity read-write mount of ``cwd``, memory
limits (``RLIMIT_AS`` bounds address space, not memory: a program may map far more than it uses,
and page cache or children are not counted, so it is not offered as one) and process limits
(``RLIMIT_NPROC`` counts every process of the user and is ignored for root). A child that calls
``setsid`` leaves the process group and escapes the kill: another reason this is for trusted
development only. The workload runs as this process's own user: a runner that is no boundary
does not pretend to change identity either. Every limit is finite by default, so a request for this
runner must say ``UNLIMITED`` for memory and processes (and ``network="host"``): it cannot enforce
them, and says so instead of running without them.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any

from effectagent.effect import Layer

from ._command import (
    LIMIT_FILESYSTEM,
    CommandNotFound,
    InvalidRequest,
    SandboxLimits,
    SandboxRequest,
    SandboxService,
    SecretResolver,
    SecretResolverService,
)
from ._command_checks import check_enforceable, validate_request
from ._execution import CommandExecution, Spawn
from ._isolation import ProcessLimits, ceil_seconds, rlimit_preexec
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
    LimitNotEnforceable,
    SandboxImplementation,
)
from ._process_control import prlimit_argv
from ._workload_files import remove_tree

__all__ = ["LocalProcessSandbox", "check_local", "local_implementation"]


SANDBOX_VERSION = "0.1"


# ---- the local runner ---------------------------------------------------------------------


def local_implementation() -> SandboxImplementation:
    """The posture of :class:`LocalProcessSandbox` (the same on every host)."""
    return SandboxImplementation(
        name="local-process",
        version=SANDBOX_VERSION,
        isolation=Isolation.UNISOLATED,
        is_security_boundary=False,
        enforced_limits=frozenset({LIMIT_WALL_CLOCK, LIMIT_OUTPUT, LIMIT_CPU, LIMIT_FILE_SIZE}),
        unenforced_limits=frozenset(
            {LIMIT_MEMORY, LIMIT_PROCESSES, LIMIT_NETWORK, LIMIT_FILESYSTEM}
        ),
        notes=(
            "unisolated host process: NOT a security sandbox (CAP-010); trusted development only",
            "cpu: RLIMIT_CPU per process; the wall clock bounds the whole workload",
            "memory: rejected; RLIMIT_AS bounds address space, not memory use",
            "processes: rejected; RLIMIT_NPROC counts all processes of the user, ignored for root",
            "a process that leaves the process group (setsid) escapes the host kill",
        ),
    )


def _resolve_local(command: str, path: str, cwd: str) -> str | None:
    if "/" in command:
        candidate = os.path.join(cwd, command)
        ok = os.path.isfile(candidate) and os.access(candidate, os.X_OK)
        return candidate if ok else None
    return shutil.which(command, path=path)


def check_local(request: SandboxRequest) -> None:
    """Local-runner rules beyond the shared checks (pure): image, mounts, cwd."""
    if request.image != "host":
        raise InvalidRequest((f"image {request.image!r} is not provided (only 'host')",))
    for mount in request.mounts:
        identity = mount.host_path == mount.sandbox_path == request.cwd and mount.mode == "rw"
        if not identity:
            raise LimitNotEnforceable(
                LIMIT_FILESYSTEM,
                "the local runner sees the whole host filesystem; only an identity read-write "
                "mount of cwd is accepted",
            )


def _limits_to_rlimits(limits: SandboxLimits) -> ProcessLimits:
    cpu, size = limits.cpu_seconds, limits.file_size_bytes
    return ProcessLimits(
        cpu_seconds=ceil_seconds(cpu) if not isinstance(cpu, str) else None,
        file_size_bytes=size if not isinstance(size, str) else None,
    )


class _LocalExecution(CommandExecution):
    _workdir: str | None = None
    _cwd: str = ""

    async def prepare(self, env: dict[str, str]) -> Spawn:
        return self._prepare_sync(env)  # a mkdtemp and a few stat calls: not worth a thread

    def _prepare_sync(self, env: dict[str, str]) -> Spawn:
        if self.request.cwd is None:
            self._workdir = tempfile.mkdtemp(prefix="effectagent-local-")
            self._cwd = self._workdir
        elif os.path.isdir(self.request.cwd):
            self._cwd = self.request.cwd
        else:
            raise InvalidRequest((f"cwd {self.request.cwd!r} is not a directory",))
        program = _resolve_local(self.request.command, env["PATH"], self._cwd)
        if program is None:
            raise CommandNotFound(self.request.command)
        # A preexec_fn forces fork() instead of vfork() (several ms in a large process): the
        # limits are set by exec'ing util-linux's prlimit in front of the program when it exists.
        rlimits = _limits_to_rlimits(self.request.limits)
        argv = (program, *self.request.args)
        prefix = prlimit_argv(rlimits)
        if prefix is None:
            return Spawn(argv, env, self._cwd, rlimit_preexec(rlimits))
        return Spawn((*prefix, *argv), env, self._cwd)

    def artifact_roots(self) -> Mapping[str | None, tuple[str, str | int]]:
        roots: dict[str | None, tuple[str, str | int]] = {None: (self._cwd, self._cwd)}
        for mount in self.request.mounts:
            roots[mount.sandbox_path] = (mount.sandbox_path, mount.host_path)
        return roots

    def held(self) -> OwnedResources:
        return OwnedResources(paths=() if self._workdir is None else (self._workdir,))

    def cleanup(self) -> None:
        if self._workdir is not None:
            remove_tree(self._workdir)
            self._workdir = None


class LocalProcessSandbox:
    """Runs commands as plain host processes. Unisolated: never a security boundary (CAP-010).

    See the module notes for what it enforces and rejects.
    """

    def __init__(self, *, secrets: SecretResolver | None = None) -> None:
        self._implementation = local_implementation()
        self._secrets = secrets
        self._live: set[CommandExecution] = set()

    @property
    def implementation(self) -> SandboxImplementation:
        """Always ``Isolation.UNISOLATED`` and ``is_security_boundary=False``."""
        return self._implementation

    def check(self, request: SandboxRequest) -> None:
        """Raise the error :meth:`execute` would raise before running ``request``, if any. Pure."""
        validate_request(request)
        check_enforceable(self._implementation, request)
        check_local(request)

    def execute(self, request: SandboxRequest) -> CommandExecution:
        """Run ``request``: ``async with sandbox.execute(req) as events: async for e in events``.

        Checks run at once (raising here); the process starts in ``__aenter__``. Cancellation:
        leaving the block kills and reaps the process group and removes the temp workdir.
        """
        self.check(request)
        return _LocalExecution(self._implementation, request, self._secrets, self._live)

    def owned(self) -> OwnedResources:
        """What every execution still running holds on the host right now."""
        return OwnedResources.union(execution.owned() for execution in list(self._live))

    async def aclose(self) -> None:
        """Kill every execution still running. Cancellation: shielded per execution."""
        for execution in list(self._live):
            await execution.aclose()

    @staticmethod
    def layer(*, with_secrets: bool = False) -> Layer:
        """A scoped Layer providing :data:`SandboxService`; teardown kills live executions.

        ``with_secrets`` makes it require :data:`SecretResolverService`.
        """

        @asynccontextmanager
        async def factory(ctx: Any) -> AsyncIterator[LocalProcessSandbox]:
            resolver = ctx.require(SecretResolverService) if with_secrets else None
            sandbox = LocalProcessSandbox(secrets=resolver)
            try:
                yield sandbox
            finally:
                await sandbox.aclose()

        requires = (SecretResolverService,) if with_secrets else ()
        return Layer.scoped(SandboxService, factory, requires=requires, name="local-process")
