"""The command-shaped Sandbox port: request, events, result, errors, and pure checks.

Design notes
------------
* **Schema-first values.** Every request, event and result is a frozen attrs class of plain data.
  Nothing here runs a process; validation and the question "can this implementation enforce this
  request?" are pure functions of ``_command_checks``.
* **Stream shape.** ``Sandbox.execute(request)`` is an *async context manager* yielding an async
  iterator of :data:`SandboxEvent`::

      async with sandbox.execute(request) as events:
          async for event in events:
              ...

  The iterator is pull-based: no background task exists outside the consumer's own ``__anext__``
  calls, so the workload can only make progress while someone consumes, and output is
  back-pressured through the pipe. Leaving the ``async with`` block — normally, by ``break``, by an
  exception or by cancellation — kills the whole workload, reaps it and removes its temporary
  directories and cgroups, shielded from cancellation. Declared errors (:class:`SandboxError`
  subclasses) are raised by ``execute`` itself (request checks), by ``__aenter__`` (secrets,
  spawn; nothing ran) or by ``__anext__`` (:class:`SandboxCrashed`).
  :func:`run` consumes the stream and returns the :class:`SandboxResult`.
* **Limits are reported, not raised.** A wall-clock timeout or an OOM kill ends the workload,
  output past its bound is dropped while the workload runs on (see below), and each is recorded
  in the result (``timed_out``, ``output_truncated``, ``limits_hit``); only requests that cannot
  be honoured are errors (:class:`LimitNotEnforceable`).
  Every limit of :class:`SandboxLimits` has a finite default; lifting one takes an explicit
  :data:`~sandbox.UNLIMITED`, and a runner that cannot enforce a finite one refuses the request.
  Artifact collection is bounded the same way: a tree that hits a bound ends the collection, and
  the result holds what was collected with the :class:`ArtifactLimitExceeded` that stopped it.
* **Output bounding** (:class:`OutputBuffer`): the first ``limits.output_bytes`` bytes across
  stdout and stderr, in arrival order, are kept and streamed as :class:`OutputChunk` events; bytes
  past the bound are counted (``dropped_bytes``) and discarded, and the pipes keep being drained so
  that the workload never blocks on a full pipe (the wall clock bounds how long it may flood).
* **Secrets** are :class:`SecretHandle` values (an env var name and a secret id). The value is
  resolved by the :data:`SecretResolverService` inside the runner, placed only in the child's
  environment (never in argv), and never appears in events, errors, reprs or results — except in
  whatever the workload itself chooses to print, which is the user's data.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterable, Mapping
from types import TracebackType
from typing import Any, Literal, Protocol, runtime_checkable

import attrs

from effectagent.effect import ServiceKey

from ._ownership import OwnedResources
from ._posture import (
    SandboxError,
    SandboxImplementation,
    Unlimited,
)

__all__ = [
    "LIMIT_ARTIFACTS",
    "LIMIT_FILESYSTEM",
    "Artifact",
    "ArtifactLimitExceeded",
    "ArtifactRule",
    "CommandNotFound",
    "InvalidRequest",
    "Mount",
    "MountMode",
    "NetworkPolicy",
    "OutputBuffer",
    "OutputChunk",
    "ResourceUsage",
    "Sandbox",
    "SandboxCrashed",
    "SandboxEvent",
    "SandboxExecution",
    "SandboxExited",
    "SandboxLimits",
    "SandboxRequest",
    "SandboxResult",
    "SandboxService",
    "SandboxStarted",
    "SandboxUnavailable",
    "SecretHandle",
    "SecretResolver",
    "SecretResolverService",
    "SecretUnavailable",
    "StreamName",
    "run",
]

NetworkPolicy = Literal["none", "host"]
"""``"none"``: no network at all (only a private loopback); ``"host"``: the host's network."""
MountMode = Literal["ro", "rw"]
"""Access mode of a :class:`Mount`."""
StreamName = Literal["stdout", "stderr"]
"""Which output stream a chunk came from."""

LIMIT_FILESYSTEM = "filesystem_isolation"
"""Only the declared mounts are visible, with their declared modes (a private mount tree)."""
LIMIT_ARTIFACTS = "artifacts"
"""Artifact collection, bounded by the ``artifact_*`` fields of :class:`SandboxLimits`."""

DEFAULT_IMAGE = "host"
"""The runtime identity every implementation here provides: the host's own ``/usr`` programs."""

_MIB = 1 << 20


# ---- request --------------------------------------------------------------------------------


@attrs.frozen
class Mount:
    """Expose ``host_path`` at ``sandbox_path`` (absolute paths) read-only or read-write.

    The workload reads and writes it as the runner's workload user (an unprivileged user when this
    process is root), so that user must be able to read ``host_path`` (and, for ``"rw"``, write
    it); a runner refuses a mount it could not use, or whose path goes through a symbolic link the
    workload could have planted, before anything runs. ``sandbox_path`` may lie inside another
    mount; inside a read-only one its mount point must already exist there (nothing can make it).
    """

    host_path: str
    sandbox_path: str
    mode: MountMode = "ro"


@attrs.frozen
class SandboxLimits:
    """The limits of one execution, each finite by default.

    ``wall_clock_seconds`` and ``output_bytes`` always apply. ``cpu_seconds`` is CPU time per
    process (``RLIMIT_CPU``, which counts whole seconds: a fraction is rounded up, so ``0.5``
    allows a second), ``memory_bytes`` memory charged to the whole workload,
    ``max_processes`` processes and threads alive at once (under bubblewrap its sandbox init
    counts as one, so it takes at least 2), ``file_size_bytes`` the largest file written; each of these four may be :data:`~sandbox.UNLIMITED`, and a runner that cannot
    enforce a finite one refuses the request (:class:`~sandbox.LimitNotEnforceable`). The
    ``artifact_*`` fields bound artifact collection (directory entries examined, directory depth,
    bytes read, seconds) and are always finite: they protect the host, not the workload.
    Seconds go up to a day (86,400); past what the kernel can set (2**60 bytes of memory,
    4,194,304 processes, 2**62 bytes a file) a runner refuses the request as
    :class:`~sandbox.InvalidRequest` instead of failing to start the command.
    """

    wall_clock_seconds: float = 30.0
    output_bytes: int = _MIB
    cpu_seconds: float | Unlimited = 30.0
    memory_bytes: int | Unlimited = 512 * _MIB
    max_processes: int | Unlimited = 64
    file_size_bytes: int | Unlimited = 64 * _MIB
    artifact_entries: int = 10_000
    artifact_depth: int = 32
    artifact_bytes: int = 64 * _MIB
    artifact_seconds: float = 5.0


@attrs.frozen
class SecretHandle:
    """A reference to a secret: its value goes into env var ``env_name``; never the value itself."""

    env_name: str
    secret_id: str


@attrs.frozen
class ArtifactRule:
    """Collect files matching ``glob`` (relative) under ``root`` after the workload exits.

    ``root`` is the sandbox path of a read-write mount, or ``None`` for the working directory the
    workload starts in by default (the per-execution workdir, or a read-write mount over it).
    At most ``max_count`` files (an int >= 1), each read up to ``max_bytes`` (an int >= 0; the
    sha256 covers the whole file).
    Symbolic links are never followed (a matching link is skipped) and only regular files are
    collected; the ``artifact_*`` limits of the request bound the whole collection.
    """

    glob: str
    root: str | None = None
    max_bytes: int = _MIB
    max_count: int = 16


def _sequence(field: str, kind: type, values: object) -> tuple[Any, ...]:
    """A sequence field as a tuple. What is not a sequence is refused naming the field: a lone
    ``str`` (or ``bytes``), which ``tuple`` would take letter by letter — ``args="hello"`` would
    run the command with ``h e l l o`` — and one item of the field's own kind (a lone
    :class:`Mount`). The items themselves are checked by validation (:class:`InvalidRequest`)."""
    if isinstance(values, str | bytes | kind) or not isinstance(values, Iterable):
        one = " (a one-item tuple for one)" if isinstance(values, str | bytes | kind) else ""
        got = type(values).__name__
        article = "an" if got[:1] in tuple("AEIOUaeiou") else "a"
        raise TypeError(
            f"SandboxRequest.{field} must be a sequence of {kind.__name__}, "
            f"not {article} {got}{one}"
        )
    return tuple(values)


def _args(values: Iterable[str]) -> tuple[str, ...]:
    return _sequence("args", str, values)


def _env_names(values: Iterable[str]) -> tuple[str, ...]:
    return _sequence("env_allowlist", str, values)


def _mounts(values: Iterable[Mount]) -> tuple[Mount, ...]:
    return _sequence("mounts", Mount, values)


def _handles(values: Iterable[SecretHandle]) -> tuple[SecretHandle, ...]:
    return _sequence("secrets", SecretHandle, values)


def _rules(values: Iterable[ArtifactRule]) -> tuple[ArtifactRule, ...]:
    return _sequence("artifacts", ArtifactRule, values)


def _stdin_repr(value: bytes | None) -> str:
    return "None" if value is None else f"<{len(value)} bytes>"


@attrs.frozen
class SandboxRequest:
    """One command to execute, with everything it may see and use declared explicitly.

    ``command`` is a program name (looked up on the sandbox's PATH) or path and ``args`` its
    arguments: never a shell string. ``cwd`` is a sandbox path (``None``: the per-execution
    workdir). Only names in ``env_allowlist`` reach the process; each takes its value from ``env``,
    else from the host environment if set there. ``PATH`` defaults to
    ``/usr/local/bin:/usr/bin:/bin`` unless allowlisted. ``secrets`` add env vars whose values are
    resolved inside the runner. ``image`` names the runtime (only ``"host"`` exists so far).

    A sequence field given something that is not a sequence (a lone ``str``, a lone
    :class:`Mount`) is a ``TypeError`` naming it when the request is made; every other problem —
    an item or a value of the wrong type, a bound out of range — is an :class:`InvalidRequest`
    naming the field, raised by the runner before anything runs.
    """

    command: str
    args: tuple[str, ...] = attrs.field(default=(), converter=_args)
    image: str = DEFAULT_IMAGE
    cwd: str | None = None
    env_allowlist: tuple[str, ...] = attrs.field(default=(), converter=_env_names)
    env: Mapping[str, str] = attrs.field(factory=dict, hash=False)
    mounts: tuple[Mount, ...] = attrs.field(default=(), converter=_mounts)
    network: NetworkPolicy = "none"
    limits: SandboxLimits = SandboxLimits()
    secrets: tuple[SecretHandle, ...] = attrs.field(default=(), converter=_handles)
    artifacts: tuple[ArtifactRule, ...] = attrs.field(default=(), converter=_rules)
    stdin: bytes | None = attrs.field(default=None, repr=_stdin_repr)


# ---- events and result ----------------------------------------------------------------------


@attrs.frozen
class ResourceUsage:
    """What the workload used. ``None`` where this implementation or host cannot measure it.

    ``cpu_seconds`` is user+system time of the whole process tree (each process counted once
    reaped); ``peak_memory_bytes`` the memory cgroup's peak charge (RSS plus page cache);
    ``peak_processes`` the pids cgroup's peak.
    """

    wall_seconds: float
    cpu_seconds: float | None = None
    peak_memory_bytes: int | None = None
    peak_processes: int | None = None


@attrs.frozen
class Artifact:
    """One collected file: sandbox ``path``, full ``size`` and ``sha256``, ``content`` (bounded).

    The workload names its files: ``path`` is decoded as ``os.fsdecode`` does, so a name that is
    not UTF-8 keeps each undecodable byte as a lone surrogate (``os.fsencode(path)`` gives the
    name's bytes back; escape it before handing it to anything that needs valid text).
    """

    path: str
    size: int
    sha256: str
    content: bytes = attrs.field(repr=lambda c: f"<{len(c)} bytes>")
    truncated: bool = False


@attrs.frozen
class SandboxResult:
    """The outcome of one execution (also of one that hit a limit: it is not an error).

    ``exit_code`` is set when the process exited, ``signal`` when it was killed by one (under
    bubblewrap a signal death *inside* the sandbox shows as ``exit_code`` 128+N, the shell
    convention). ``stdout``/``stderr`` hold the head of the output, at most ``output_bytes``
    together; ``dropped_bytes`` counts what was discarded. ``limits_hit`` names the limits that
    were reached and observed (``wall_clock``, ``output``, ``memory``, ``processes``,
    ``artifacts``). ``artifacts_stopped`` is the bound that ended artifact collection early, if
    one did; ``artifacts`` then holds what was collected before it.
    """

    exit_code: int | None
    signal: int | None
    timed_out: bool
    output_truncated: bool
    stdout: bytes = attrs.field(repr=lambda b: f"<{len(b)} bytes>")
    stderr: bytes = attrs.field(repr=lambda b: f"<{len(b)} bytes>")
    dropped_bytes: int
    usage: ResourceUsage
    implementation: SandboxImplementation
    artifacts: tuple[Artifact, ...] = ()
    artifacts_skipped: int = 0
    artifacts_stopped: ArtifactLimitExceeded | None = None
    oom_killed: bool = False
    limits_hit: frozenset[str] = frozenset()

    @property
    def ok(self) -> bool:
        """Exited with status 0 and hit no limit."""
        return self.exit_code == 0 and not self.limits_hit


@attrs.frozen
class SandboxStarted:
    """The workload is running under ``implementation``; ``execution_id`` names this run."""

    implementation: SandboxImplementation
    execution_id: str
    pid: int


@attrs.frozen
class OutputChunk:
    """Output of the workload, in arrival order; only bytes within the output bound are streamed."""

    stream: StreamName
    data: bytes


@attrs.frozen
class SandboxExited:
    """The last event: the workload is gone and this is its result."""

    result: SandboxResult


SandboxEvent = SandboxStarted | OutputChunk | ResourceUsage | SandboxExited
"""One event of the execution stream: started, output chunks, usage, exited (in that order)."""


# ---- errors ---------------------------------------------------------------------------------


@attrs.frozen
class InvalidRequest(SandboxError):
    """The request is malformed or not meaningful for this implementation; nothing ran."""

    problems: tuple[str, ...]


@attrs.frozen
class CommandNotFound(SandboxError):
    """``command`` does not resolve to an executable inside the sandbox's view; nothing ran."""

    command: str


@attrs.frozen
class SandboxUnavailable(SandboxError):
    """This implementation cannot run on this host (for example ``bwrap`` is missing)."""

    reason: str

    is_retryable = False


@attrs.frozen
class SandboxCrashed(SandboxError):
    """The sandbox machinery itself failed (not the workload): ``detail`` says how."""

    detail: str


@attrs.frozen
class ArtifactLimitExceeded(SandboxError):
    """Artifact collection stopped at a bound: ``limit`` names the :class:`SandboxLimits` field
    (``artifact_entries``, ``artifact_depth``, ``artifact_bytes`` or ``artifact_seconds``),
    ``bound`` its value and ``path`` the sandbox path being walked or read when it was reached.

    Reported in :attr:`SandboxResult.artifacts_stopped` (with what was collected before it), not
    raised: the workload's own outcome is never lost to a hostile tree.
    """

    limit: str
    bound: float
    path: str


@attrs.frozen
class SecretUnavailable(SandboxError):
    """A secret handle could not be resolved (no resolver, or the resolver refused)."""

    secret_id: str
    reason: str


# ---- ports and services ---------------------------------------------------------------------


@runtime_checkable
class SecretResolver(Protocol):
    """Resolves secret ids to values, inside the runner only."""

    async def resolve(self, secret_id: str) -> str:
        """The value of ``secret_id``. Raise :class:`SecretUnavailable` if there is none.

        Cancellation: may be cancelled; the execution then never starts.
        """
        ...


class SandboxExecution(Protocol):
    """One execution: an async context manager whose ``async with`` yields the event iterator.

    It runs once: entering it a second time, inside its block or after it, raises
    ``RuntimeError`` and starts nothing.
    """

    async def __aenter__(self) -> AsyncIterator[SandboxEvent]:
        """Start the workload and return its event iterator.

        Cancellation: whatever was started is killed and removed before the error propagates.
        """
        ...

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        """Kill and reap the workload and remove its temporary state. Cancellation: shielded."""
        ...

    def owned(self) -> OwnedResources:
        """What this execution holds on the host right now (empty before it starts and after the
        block is left): its processes, cgroups and temporary paths. Never blocks for long."""
        ...


class Sandbox(Protocol):
    """The command-shaped Sandbox port. See the module notes for the stream contract."""

    @property
    def implementation(self) -> SandboxImplementation:
        """Identity and posture of this implementation on this host (CAP-010)."""
        ...

    def execute(self, request: SandboxRequest) -> SandboxExecution:
        """Run ``request``; ``async with`` it and iterate the events.

        Cancellation: leaving the block for any reason kills and reaps the whole workload and
        removes its temporary state, shielded; a cancelled ``__anext__`` leaves the workload
        running until the block is left.
        """
        ...

    def owned(self) -> OwnedResources:
        """What every execution of this sandbox still running holds on the host right now."""
        ...


SandboxService: ServiceKey[Sandbox] = ServiceKey(
    "effectagent.sandbox.Sandbox", "runs commands with explicit limits"
)
"""Service key of the command sandbox."""

SecretResolverService: ServiceKey[SecretResolver] = ServiceKey(
    "effectagent.sandbox.SecretResolver", "resolves secret handles inside sandbox runners"
)
"""Service key of the secret resolver used by sandbox runners."""


async def run(sandbox: Sandbox, request: SandboxRequest) -> SandboxResult:
    """Execute ``request`` on ``sandbox`` and return its result, ignoring intermediate events.

    Cancellation: cancelling the caller kills and reaps the workload and removes its temporary
    state before ``trio.Cancelled`` propagates.
    """
    async with sandbox.execute(request) as events:
        async for event in events:
            if isinstance(event, SandboxExited):
                return event.result
    raise SandboxCrashed("the event stream ended without a SandboxExited event")


# ---- output bounding ------------------------------------------------------------------------


class OutputBuffer:
    """Keeps the head of stdout+stderr up to ``bound`` bytes in total; counts the rest. Pure."""

    __slots__ = ("_parts", "bound", "dropped", "kept")

    def __init__(self, bound: int) -> None:
        self.bound = bound
        self.kept = 0
        self.dropped = 0
        self._parts: dict[StreamName, list[bytes]] = {"stdout": [], "stderr": []}

    def accept(self, stream: StreamName, data: bytes) -> bytes:
        """Store what fits of ``data`` and return it (empty when nothing fits)."""
        room = self.bound - self.kept
        keep = data[: max(room, 0)]
        self.dropped += len(data) - len(keep)
        if keep:
            self._parts[stream].append(keep)
            self.kept += len(keep)
        return keep

    @property
    def truncated(self) -> bool:
        """Whether any byte was dropped."""
        return self.dropped > 0

    def value(self, stream: StreamName) -> bytes:
        """The kept bytes of ``stream``."""
        return b"".join(self._parts[stream])


def default_path() -> str:
    """The PATH given to a workload that does not allowlist its own."""
    return "/usr/local/bin:/usr/bin:/bin"


def build_env(request: SandboxRequest, secrets: Mapping[str, str]) -> dict[str, str]:
    """The exact environment of the workload: allowlisted names, default PATH, then secrets.

    ``secrets`` maps env names to resolved values; the returned dict holds them, so it must only be
    handed to the process spawner.
    """
    env: dict[str, str] = {"PATH": default_path()}
    for name in request.env_allowlist:
        if name in request.env:
            env[name] = request.env[name]
        elif name in os.environ:
            env[name] = os.environ[name]
    env.update(secrets)
    return env
