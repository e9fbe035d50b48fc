"""The Deno CodeExecutor: one fresh, permission-less Deno process per pass, in bubblewrap.

Design notes
------------
:meth:`DenoCodeExecutor.execute` first checks what it can without starting anything — the source
size, and whether every requested limit is enforceable here (memory needs a memory cgroup,
processes a pids cgroup) — then takes a warm workload from the pool or spawns one
(``_deno_workload``), runs the pass (``_deno_pass``) under the wall clock, and closes the workload
whatever happened: an outcome, an error, a timeout or cancellation from outside. The posture it
reports (CAP-010) is computed once from what this host offers, and says in words how each limit
is enforced. When this process is root, every workload runs as an unprivileged
:class:`~sandbox.WorkloadIdentity` (``nobody`` by default).

:func:`open_deno_executor` and :func:`deno_executor_layer` give the executor a warm pool and a
reaper that belong to a :class:`~effectagent.effect.Scope` (``_deno_pool``): the pool refills as a
fiber of that scope and its workloads are killed by the scope's finalizer. The reaper lets a pass
return as soon as its workload is SIGKILLed: waiting for the kernel to tear down the killed
processes (several milliseconds), reaping them and removing their cgroups happen in a task of the
scope, and closing the scope waits for all of them (see :meth:`DenoCodeExecutor.execute`).

What the executor holds is visible while it runs: :meth:`DenoCodeExecutor.owned` lists the
processes, cgroups and temp dirs of every workload in a pass, in the pool or being released, and
an ``on_acquire`` callback hears of each workload as soon as it is spawned.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any, final

import attrs
import trio

from effectagent.effect import Context, Exit, Layer, Scope, open_scope, trace_span

from ._code import (
    LIMIT_HOST_CALL_ARGUMENT,
    LIMIT_HOST_CALL_RESULT,
    LIMIT_HOST_CALLS,
    LIMIT_JSON_DEPTH,
    LIMIT_RESULT,
    LIMIT_SOURCE,
    CodeExecutionError,
    CodeExecutionHost,
    CodeExecutionLimits,
    CodeExecutionRequest,
    CodeExecutionResult,
    CodeExecutorService,
    CodeLimitNotEnforceable,
    CodeTimeout,
    ExecutorUnavailable,
    InvalidProgram,
    SourceTooLarge,
)
from ._command import LIMIT_FILESYSTEM
from ._deno_pass import PassState, failed, run_pass
from ._deno_pool import Reaper, WarmPool
from ._deno_runtime import (
    HARNESS_PATH,
    IsolationMode,
    SpawnConfig,
    deno_version,
    find_deno,
    runtime_libraries,
)
from ._deno_workload import Workload, spawn_workload
from ._identity import WorkloadIdentity, identity_note, resolve_identity, workload_user
from ._isolation import HostFacts, probe_host, userns_note
from ._ownership import OwnedResources
from ._posture import (
    LIMIT_CPU,
    LIMIT_MEMORY,
    LIMIT_NETWORK,
    LIMIT_OUTPUT,
    LIMIT_PROCESSES,
    LIMIT_WALL_CLOCK,
    Isolation,
    LimitNotEnforceable,
    SandboxImplementation,
)
from ._tracing import code_result, code_started

__all__ = [
    "DENO_MIN_PROCESSES",
    "DenoCodeExecutor",
    "deno_executor_layer",
    "open_deno_executor",
]

DENO_MIN_PROCESSES = 8
"""The fewest processes and threads (``max_processes``) a Deno workload needs to start."""

AcquireHook = Callable[[OwnedResources], None]


def _check_hook(on_acquire: object) -> None:
    if on_acquire is not None and not callable(on_acquire):
        raise TypeError(f"on_acquire must be a function or None, got {type(on_acquire).__name__}")


def _check_pool(warm: object, warm_limits: object, on_acquire: object) -> None:
    """Refuse pool arguments of the wrong type or value when they are given, not at a spawn."""
    if type(warm) is not int or warm < 0:
        raise ValueError(f"warm must be an int >= 0, got {warm!r}")
    if warm_limits is not None and not isinstance(warm_limits, CodeExecutionLimits):
        raise TypeError(
            f"warm_limits must be a CodeExecutionLimits or None, got {type(warm_limits).__name__}"
        )
    _check_hook(on_acquire)


@final
class DenoCodeExecutor:
    """The Deno :class:`~sandbox.CodeExecutor`: a fresh Deno process per pass.

    ``isolation="namespaces"`` (the default) runs each pass in bubblewrap and is a security
    boundary; construction raises :class:`~sandbox.ExecutorUnavailable` when bubblewrap or user
    namespaces are missing. ``isolation="none"`` is for development: the posture says unisolated
    and not a security boundary (CAP-010). A finite ``memory_bytes`` (the default) is rejected
    with :class:`CodeLimitNotEnforceable` when no cgroup memory controller is writable
    here, unless ``allow_unenforced_memory`` (then only the V8 heap is capped, and the posture
    lists memory as unenforced); a finite ``max_processes`` likewise needs a pids controller.
    ``identity`` is the host user workloads run as when this process is root (default
    :meth:`~sandbox.WorkloadIdentity.nobody`; a non-root process runs them as itself).
    ``on_acquire`` is called with what each workload holds (:class:`~sandbox.OwnedResources`)
    as soon as it is spawned, before it runs any program: for audit logs and leak checks; it must
    not block or raise (a workload whose hook raises is released before the exception
    propagates), and one that is not callable is refused with ``TypeError``. Construction is
    blocking (it probes the host once); use :func:`open_deno_executor` for a warm pool.
    """

    __slots__ = (
        "_active",
        "_allow_unenforced_memory",
        "_base",
        "_changed",
        "_implementation",
        "_on_acquire",
        "_pool",
        "_reaper",
    )

    def __init__(
        self,
        *,
        isolation: IsolationMode = "namespaces",
        deno: str | None = None,
        allow_unenforced_memory: bool = False,
        identity: WorkloadIdentity | None = None,
        on_acquire: AcquireHook | None = None,
    ) -> None:
        _check_hook(on_acquire)
        binary = find_deno(deno)
        version = deno_version(binary)
        facts = probe_host()
        if isolation == "namespaces":
            if facts.bwrap is None:
                raise ExecutorUnavailable("bubblewrap (bwrap) is not installed")
            if not facts.user_namespaces:
                raise ExecutorUnavailable("bubblewrap cannot create namespaces on this host")
        elif isolation != "none":
            raise ValueError(f"isolation must be 'namespaces' or 'none', not {isolation!r}")
        resolved = resolve_identity(identity)
        user = workload_user(resolved)
        for path in (binary, HARNESS_PATH):
            if (blocked := user.first_unreachable(path)) is not None:
                raise ExecutorUnavailable(
                    f"{path!r} is out of reach of the workload's user {user.uid}:{user.gid} "
                    f"(it cannot pass {blocked!r})"
                )
        libraries = runtime_libraries(binary) if isolation == "namespaces" else None
        self._base = SpawnConfig(
            deno=binary,
            isolation=isolation,
            bwrap=facts.bwrap if isolation == "namespaces" else None,
            libraries=libraries,
            cpu_seconds=None,
            memory_bytes=None,
            use_cgroup=False,
            max_processes=None,
            identity=resolved,
            disable_userns=facts.disable_userns and isolation == "namespaces",
        )
        self._implementation = _posture(
            isolation,
            version,
            facts,
            resolved,
            allow_unenforced_memory=allow_unenforced_memory,
            minimal_mounts=libraries is not None,
        )
        self._allow_unenforced_memory = allow_unenforced_memory
        self._on_acquire = on_acquire
        self._active: set[Workload] = set()
        self._changed = trio.lowlevel.ParkingLot()
        self._pool: WarmPool | None = None
        self._reaper: Reaper | None = None

    @property
    def implementation(self) -> SandboxImplementation:
        """The posture of this executor on this host (CAP-010)."""
        return self._implementation

    def spawn_config(self, limits: CodeExecutionLimits) -> SpawnConfig:
        """The spawn-time settings for ``limits``; raises when a limit cannot be enforced.

        Raises :class:`CodeLimitNotEnforceable` for a finite ``memory_bytes`` without a
        memory cgroup (unless constructed with ``allow_unenforced_memory``), for a finite
        ``max_processes`` without a pids cgroup, and for one below :data:`DENO_MIN_PROCESSES`.
        """
        memory = limits.memory_bytes if isinstance(limits.memory_bytes, int) else None
        use_cgroup = False
        if memory is not None:
            if LIMIT_MEMORY in self._implementation.enforced_limits:
                use_cgroup = True
            elif not self._allow_unenforced_memory:
                raise CodeLimitNotEnforceable(
                    LIMIT_MEMORY, "no writable cgroup memory controller on this host"
                )
        processes = limits.max_processes if isinstance(limits.max_processes, int) else None
        if processes is not None:
            if LIMIT_PROCESSES not in self._implementation.enforced_limits:
                raise CodeLimitNotEnforceable(
                    LIMIT_PROCESSES, "no writable cgroup pids controller on this host"
                )
            if processes < DENO_MIN_PROCESSES:
                raise CodeLimitNotEnforceable(
                    LIMIT_PROCESSES,
                    f"Deno needs at least {DENO_MIN_PROCESSES} processes and threads to start",
                )
        cpu = limits.cpu_seconds if isinstance(limits.cpu_seconds, int) else None
        return attrs.evolve(
            self._base,
            cpu_seconds=cpu,
            memory_bytes=memory,
            use_cgroup=use_cgroup,
            max_processes=processes,
        )

    def owned(self) -> OwnedResources:
        """What this executor's workloads hold on the host now: those of passes in progress, the
        warm pool's and those still being released. A snapshot; empty once it is closed."""
        parts = [workload.owned() for workload in list(self._active)]
        if self._pool is not None:
            parts.append(self._pool.owned())
        if self._reaper is not None:
            parts.append(self._reaper.owned())
        return OwnedResources.union(parts)

    async def settle(self) -> None:
        """Wait until the warm pool is as full as it gets (full, or paused after spawn failures)
        and no used workload is still being released. Returns at once for a bare executor.

        Cancellation: a checkpoint; cancelling it only stops the waiting.
        """
        await trio.lowlevel.checkpoint()
        while not self._settled():
            await self._changed.park()

    def _settled(self) -> bool:
        pool_settled = self._pool is None or self._pool.settled
        return pool_settled and (self._reaper is None or self._reaper.pending == 0)

    async def _spawn(self, config: SpawnConfig) -> Workload:
        """Spawn one workload and tell ``on_acquire`` of it. A hook that raises breaks its
        contract: the workload is released (shielded) before the exception propagates, so
        nothing is left behind. Cancellation: as :func:`spawn_workload`'s."""
        workload = await spawn_workload(config)
        if self._on_acquire is not None:
            try:
                self._on_acquire(workload.owned())
            except BaseException:
                await workload.aclose()
                raise
        return workload

    async def execute(
        self, request: CodeExecutionRequest, host: CodeExecutionHost
    ) -> CodeExecutionResult:
        """Run ``request`` in a fresh Deno process; host calls go to ``host`` (see
        :meth:`_execute`), in a span ``sandbox.code`` of the effect core's tracing hook — not made
        current, so what the host calls trace nests under the caller's span. A ``request`` or
        ``host`` of the wrong type is refused with ``TypeError`` before anything starts.

        Cancellation: the pass is abandoned at once — its workload killed and its host calls
        cancelled before ``trio.Cancelled`` propagates; the rest of its release (reaping, the
        cgroups, the temp dir) is done by then too, or, for an executor of a scope, by that
        scope, which closing the executor waits for."""
        given: object = request  # callers need not be type-checked
        if not isinstance(given, CodeExecutionRequest):
            raise TypeError(
                f"execute: request must be a CodeExecutionRequest, got {type(given).__name__}"
            )
        if not callable(getattr(host, "call", None)):
            raise TypeError(
                "execute: host must be a CodeExecutionHost (an object with an async call "
                f"method), got {type(host).__name__}"
            )
        with trace_span("sandbox.code", current=False) as span:
            code_started(span, request.limits, self._implementation)
            result = await self._execute(request, host)
            code_result(span, result)
            return result

    async def _execute(
        self, request: CodeExecutionRequest, host: CodeExecutionHost
    ) -> CodeExecutionResult:
        """Run ``request`` in a fresh Deno process; host calls go to ``host``.

        Raises a :class:`~sandbox.CodeExecutionError` subclass for every expected failure —
        once the program has started, carrying the console lines it printed before (``logs``),
        whatever stopped it: a limit, the wall clock, a malformed answer; an exception raised by
        ``host`` other than a :class:`~effectagent.effect.TaggedError` propagates unchanged after
        the pass is closed.

        When it returns or raises, every process that runs the program (bubblewrap's sandbox
        init and everything inside it) has been sent ``SIGKILL`` and can run no more code; bwrap
        itself, which runs none of it, exits once it has reaped its init. An executor that belongs to a scope (:func:`open_deno_executor`,
        :func:`deno_executor_layer`) returns without waiting for the killed processes to exit
        when a pids cgroup holds all of them: reaping them, waiting for the kernel to tear them
        down and removing their cgroups and temp dir then run as a task of that scope, and
        closing the executor waits for every one of them, so nothing of any pass is left once it
        is closed. Otherwise (a bare ``DenoCodeExecutor()``, or no pids cgroup on this host) all
        of that is done before ``execute`` returns. Cancellation: the same, before
        ``trio.Cancelled`` propagates (the closing part shielded).
        """
        started = trio.current_time()
        limits = request.limits
        try:
            size = len(request.source.encode("utf-8"))
        except UnicodeEncodeError:
            raise InvalidProgram("the source is not valid Unicode text") from None
        if size > limits.source_bytes:
            raise SourceTooLarge(size, limits.source_bytes)
        config = self.spawn_config(limits)
        workload = self._pool.take(config) if self._pool is not None else None
        state: PassState | None = None
        try:
            with trio.move_on_after(limits.wall_clock_seconds) as timer:
                if workload is None:
                    try:
                        workload = await self._spawn(config)
                    except LimitNotEnforceable as exc:
                        raise CodeLimitNotEnforceable(exc.limit, exc.reason) from None
                self._active.add(workload)
                state = PassState(request, host, workload)
                await run_pass(state)
            if state is None:
                raise CodeTimeout("wall_clock", limits.wall_clock_seconds)
            if timer.cancelled_caught and state.error is None and not state.done:
                raise failed(CodeTimeout("wall_clock", limits.wall_clock_seconds), state)
            if isinstance(state.error, CodeExecutionError):
                raise failed(state.error, state)
            if state.error is not None:
                raise state.error
            return CodeExecutionResult(
                value=state.value,
                logs=tuple(state.logs),
                logs_truncated=state.logs_truncated,
                host_calls=state.calls,
                duration=trio.current_time() - started,
                implementation=self._implementation,
            )
        finally:
            if state is not None:
                state.host = None  # the host's bindings are scoped to this pass
            if workload is not None:
                await self._release(workload)
            if self._pool is not None:
                self._pool.start()  # refill only now: a spawn never competes with a pass

    async def _release(self, workload: Workload) -> None:
        """Hand ``workload`` to the reaper, or close it here. Cancellation: shielded."""
        try:
            if self._reaper is None or not self._reaper.retire(workload):
                await workload.aclose()
        finally:
            self._active.discard(workload)
            self._changed.unpark_all()


def _posture(
    isolation: IsolationMode,
    version: str,
    facts: HostFacts,
    identity: WorkloadIdentity | None,
    *,
    allow_unenforced_memory: bool,
    minimal_mounts: bool,
) -> SandboxImplementation:
    enforced = {
        LIMIT_WALL_CLOCK,
        LIMIT_CPU,
        LIMIT_OUTPUT,
        LIMIT_SOURCE,
        LIMIT_RESULT,
        LIMIT_HOST_CALLS,
        LIMIT_HOST_CALL_ARGUMENT,
        LIMIT_HOST_CALL_RESULT,
        LIMIT_JSON_DEPTH,
    }
    unenforced: set[str] = set()
    notes = [
        "Deno runs with no --allow-* permission, --no-prompt --no-remote --no-npm --no-config",
        identity_note(identity),
        "cpu: RLIMIT_CPU in whole seconds per process; a warm workload has already spent its "
        "start-up CPU (tens of milliseconds)",
        "wall_clock: the host kills the process group",
        "json_depth: measured on the host for every argument, host result and result",
    ]
    if facts.cgroup_memory is not None:
        enforced.add(LIMIT_MEMORY)
        notes.append(
            "memory: a cgroup memory controller charges the whole workload (heap and "
            "ArrayBuffers); the V8 old space is also capped at half of it"
        )
    else:
        unenforced.add(LIMIT_MEMORY)
        notes.append(
            "memory: NOT enforced: no writable cgroup memory controller; only the V8 old space "
            "is capped, never ArrayBuffers"
            if allow_unenforced_memory
            else "memory: no writable cgroup memory controller: a finite memory_bytes is rejected"
        )
    if facts.cgroup_pids is not None:
        enforced.add(LIMIT_PROCESSES)
        notes.append(
            "processes: a cgroup pids controller caps the workload's threads and processes "
            "(Deno itself uses about 6; each Worker adds more)"
        )
    else:
        unenforced.add(LIMIT_PROCESSES)
        notes.append("processes: no writable cgroup pids controller: a finite cap is rejected")
    if isolation == "namespaces":
        enforced |= {LIMIT_NETWORK, LIMIT_FILESYSTEM}
        mounts = (
            "the Deno binary, its shared libraries and the harness"
            if minimal_mounts
            else "the Deno binary, the harness and the read-only system directories"
        )
        notes.append(
            "bubblewrap: new user, pid, net, ipc, uts and cgroup namespaces; no network; the "
            f"mount tree shows only {mounts}"
        )
        notes.append(userns_note(facts))
        return SandboxImplementation(
            name="deno-bwrap",
            version=f"deno {version}",
            isolation=Isolation.NAMESPACES,
            is_security_boundary=True,
            enforced_limits=frozenset(enforced),
            unenforced_limits=frozenset(unenforced),
            notes=tuple(notes),
        )
    unenforced |= {LIMIT_NETWORK, LIMIT_FILESYSTEM}
    notes.append(
        "unisolated: only Deno's own permission checks stand between the program and the host's "
        "files, network, environment and processes (and Deno reads statically imported files "
        "without them); not a security boundary"
    )
    return SandboxImplementation(
        name="deno-unisolated",
        version=f"deno {version}",
        isolation=Isolation.UNISOLATED,
        is_security_boundary=False,
        enforced_limits=frozenset(enforced),
        unenforced_limits=frozenset(unenforced),
        notes=tuple(notes),
    )


def _attach_scope(
    executor: DenoCodeExecutor, warm: int, warm_limits: CodeExecutionLimits | None, scope: Scope
) -> None:
    """Give ``executor`` a reaper and (``warm > 0``) a warm pool, both owned by ``scope``."""
    reaper = Reaper(scope, executor._changed)

    async def close_reaper(_: Exit[Any, Any]) -> None:
        await reaper.aclose()

    scope.add_finalizer(close_reaper)  # registered first: runs after the pool's finalizer
    executor._reaper = reaper
    if warm <= 0:
        return
    config = executor.spawn_config(warm_limits or CodeExecutionLimits())
    pool = WarmPool(config, warm, scope, executor._spawn, executor._changed)

    async def close_pool(_: Exit[Any, Any]) -> None:
        await pool.aclose()

    scope.add_finalizer(close_pool)
    executor._pool = pool
    pool.start()


async def _close_attached(executor: DenoCodeExecutor) -> None:
    if executor._pool is not None:
        await executor._pool.aclose()  # stop refilling before the scope waits for it
    if executor._reaper is not None:
        await executor._reaper.aclose()


@asynccontextmanager
async def open_deno_executor(
    *,
    warm: int = 0,
    warm_limits: CodeExecutionLimits | None = None,
    isolation: IsolationMode = "namespaces",
    deno: str | None = None,
    allow_unenforced_memory: bool = False,
    identity: WorkloadIdentity | None = None,
    on_acquire: AcquireHook | None = None,
) -> AsyncIterator[DenoCodeExecutor]:
    """A :class:`DenoCodeExecutor` with a warm pool of ``warm`` pre-started workloads.

    Workloads are spawned for ``warm_limits`` (default :class:`~sandbox.CodeExecutionLimits`); a
    pass whose CPU, memory and process limits match takes one, others spawn cold. Each workload
    serves at most one pass. Raises like the executor's constructor, and
    :class:`CodeLimitNotEnforceable` if ``warm_limits`` cannot be enforced.
    Passes return once their workload is SIGKILLed; its release finishes in the background (see
    :meth:`DenoCodeExecutor.execute`). Cancellation: leaving the block (normally, by error or by
    cancellation) stops refilling, kills every pooled workload and waits until every workload of
    the pool and of every pass is fully released (no process, cgroup or temp dir left), shielded.
    ``warm`` of the wrong type or value raises ``ValueError``, ``warm_limits`` or ``on_acquire``
    of the wrong type ``TypeError``.
    """
    _check_pool(warm, warm_limits, on_acquire)
    executor = DenoCodeExecutor(
        isolation=isolation,
        deno=deno,
        allow_unenforced_memory=allow_unenforced_memory,
        identity=identity,
        on_acquire=on_acquire,
    )
    async with open_scope() as scope:
        _attach_scope(executor, warm, warm_limits, scope)
        try:
            yield executor
        finally:
            await _close_attached(executor)


def deno_executor_layer(
    *,
    warm: int = 2,
    warm_limits: CodeExecutionLimits | None = None,
    isolation: IsolationMode = "namespaces",
    deno: str | None = None,
    allow_unenforced_memory: bool = False,
    identity: WorkloadIdentity | None = None,
    on_acquire: AcquireHook | None = None,
) -> Layer:
    """A Layer providing :data:`~sandbox.CodeExecutorService` backed by Deno.

    The executor, its warm pool of ``warm`` workloads and its reaper live in the Layer's build
    scope (the pool refills as a fiber of it, passes' workloads are released by tasks of it, and
    its finalizers close the pool and wait for every release); arguments as
    :func:`open_deno_executor`, refused as it refuses them, here. Building is blocking for a
    moment (it probes the host once).
    """
    _check_pool(warm, warm_limits, on_acquire)

    async def build(_: Context, scope: Scope) -> Context:
        executor = DenoCodeExecutor(
            isolation=isolation,
            deno=deno,
            allow_unenforced_memory=allow_unenforced_memory,
            identity=identity,
            on_acquire=on_acquire,
        )
        _attach_scope(executor, warm, warm_limits, scope)
        return Context.of(CodeExecutorService, executor)

    return Layer.from_build("deno code executor", provides=[CodeExecutorService], build=build)
