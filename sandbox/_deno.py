"""The Deno CodeExecutor: one fresh, permission-less Deno process per pass, in bubblewrap.

Design notes
------------
:meth:`DenoCodeExecutor.execute` first checks what it can without starting anything — the source
size, and whether every requested limit is enforceable here (memory needs a cgroup) — then takes a
warm workload from the pool or spawns one (``_deno_pool``), runs the pass (``_deno_pass``) under
the wall clock, and closes the workload whatever happened: an outcome, an error, a timeout or
cancellation from outside. The posture it reports (CAP-010) is computed once from what this host
offers, and says in words how each limit is enforced.

:func:`open_deno_executor` and :func:`deno_executor_layer` give the executor a warm pool and a
reaper that belong to a :class:`~effectagent.effect.Scope`: the pool refills as a fiber of that
scope and its workloads are killed by the scope's finalizer. The reaper lets a pass return as soon
as its workload is SIGKILLed: waiting for the kernel to tear down the killed processes (several
milliseconds), reaping them and removing their cgroups happen in a task of the scope, and
closing the scope waits for all of them (see :meth:`DenoCodeExecutor.execute`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, Final, final

import attrs
import trio

from effectagent.effect import Context, Exit, Layer, Scope, open_scope

from ._code import (
    LIMIT_HOST_CALL_ARGUMENT,
    LIMIT_HOST_CALL_RESULT,
    LIMIT_HOST_CALLS,
    LIMIT_RESULT,
    LIMIT_SOURCE,
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
from ._deno_pass import PassState, run_pass
from ._deno_pool import (
    IsolationMode,
    Reaper,
    SpawnConfig,
    WarmPool,
    deno_version,
    find_deno,
    runtime_libraries,
    spawn_workload,
)
from ._isolation import probe_host
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

__all__ = [
    "DEFAULT_DENO_MAX_TASKS",
    "DenoCodeExecutor",
    "deno_executor_layer",
    "open_deno_executor",
]

DEFAULT_DENO_MAX_TASKS: Final = 32
"""Threads and processes one Deno workload may have at once (when a pids cgroup is available)."""


@final
class DenoCodeExecutor:
    """The Deno :class:`~sandbox.CodeExecutor`: a fresh Deno process per pass.

    ``isolation="namespaces"`` (the default) runs each pass in bubblewrap and is a security
    boundary; construction raises :class:`~sandbox.ExecutorUnavailable` when bubblewrap or user
    namespaces are missing. ``isolation="none"`` is for development: the posture says unisolated
    and not a security boundary (CAP-010). A request with ``memory_bytes`` is rejected with
    :class:`~sandbox.CodeLimitNotEnforceable` when no cgroup memory controller is writable here,
    unless ``allow_unenforced_memory`` (then only the V8 heap is capped, and the posture lists
    memory as unenforced). Construction is blocking (it probes the host once); use
    :func:`open_deno_executor` for a warm pool.
    """

    __slots__ = ("_allow_unenforced_memory", "_base", "_implementation", "_pool", "_reaper")

    def __init__(
        self,
        *,
        isolation: IsolationMode = "namespaces",
        deno: str | None = None,
        allow_unenforced_memory: bool = False,
        max_tasks: int = DEFAULT_DENO_MAX_TASKS,
    ) -> None:
        if max_tasks < 8:
            raise ValueError("Deno needs at least 8 tasks (threads) to start")
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
        cgroup = facts.cgroup_memory is not None
        pids = facts.cgroup_pids is not None
        libraries = runtime_libraries(binary) if isolation == "namespaces" else None
        self._base = SpawnConfig(
            deno=binary,
            isolation=isolation,
            bwrap=facts.bwrap if isolation == "namespaces" else None,
            libraries=libraries,
            cpu_seconds=None,
            memory_bytes=None,
            use_cgroup=False,
            max_tasks=max_tasks if pids else None,
        )
        self._implementation = _posture(
            isolation,
            version,
            cgroup=cgroup,
            max_tasks=max_tasks if pids else None,
            allow_unenforced_memory=allow_unenforced_memory,
            minimal_mounts=libraries is not None,
        )
        self._allow_unenforced_memory = allow_unenforced_memory
        self._pool: WarmPool | None = None
        self._reaper: Reaper | None = None

    @property
    def implementation(self) -> SandboxImplementation:
        """The posture of this executor on this host (CAP-010)."""
        return self._implementation

    def spawn_config(self, limits: CodeExecutionLimits) -> SpawnConfig:
        """The spawn-time settings for ``limits``; raises when a limit cannot be enforced.

        Raises :class:`~sandbox.CodeLimitNotEnforceable` for ``memory_bytes`` without a cgroup
        (unless constructed with ``allow_unenforced_memory``).
        """
        memory = limits.memory_bytes
        use_cgroup = False
        if memory is not None:
            if LIMIT_MEMORY in self._implementation.enforced_limits:
                use_cgroup = True
            elif not self._allow_unenforced_memory:
                raise CodeLimitNotEnforceable(
                    LIMIT_MEMORY, "no writable cgroup memory controller on this host"
                )
        return attrs.evolve(
            self._base, cpu_seconds=limits.cpu_seconds, memory_bytes=memory, use_cgroup=use_cgroup
        )

    async def execute(
        self, request: CodeExecutionRequest, host: CodeExecutionHost
    ) -> CodeExecutionResult:
        """Run ``request`` in a fresh Deno process; host calls go to ``host``.

        Raises a :class:`~sandbox.CodeExecutionError` subclass for every expected failure; an
        exception raised by ``host`` other than a :class:`~effectagent.effect.TaggedError`
        propagates unchanged after the pass is closed.

        When it returns or raises, every process of the workload has been sent ``SIGKILL`` and
        can run no more code. An executor that belongs to a scope (:func:`open_deno_executor`,
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
                        workload = await spawn_workload(config)
                    except LimitNotEnforceable as exc:
                        raise CodeLimitNotEnforceable(exc.limit, exc.reason) from None
                state = PassState(request, host, workload)
                await run_pass(state)
            if state is None or (timer.cancelled_caught and state.error is None and not state.done):
                raise CodeTimeout("wall_clock", limits.wall_clock_seconds)
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
            if workload is not None and (self._reaper is None or not self._reaper.retire(workload)):
                await workload.aclose()
            if self._pool is not None:
                self._pool.start()  # refill only now: a spawn never competes with a pass


def _posture(
    isolation: IsolationMode,
    version: str,
    *,
    cgroup: bool,
    max_tasks: int | None,
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
    }
    unenforced: set[str] = set()
    notes = [
        "Deno runs with no --allow-* permission, --no-prompt --no-remote --no-npm --no-config",
        "cpu: RLIMIT_CPU in whole seconds per process; a warm workload has already spent its "
        "start-up CPU (tens of milliseconds)",
        "wall_clock: the host kills the process group",
    ]
    if cgroup:
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
            else "memory: no writable cgroup memory controller: requests with memory_bytes are "
            "rejected"
        )
    if max_tasks is not None:
        enforced.add(LIMIT_PROCESSES)
        notes.append(
            f"processes: a cgroup pids controller caps the workload at {max_tasks} threads and "
            "processes (Deno itself uses about 6; each Worker adds more)"
        )
    else:
        unenforced.add(LIMIT_PROCESSES)
        notes.append("processes: no writable cgroup pids controller; Workers are not capped")
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
    reaper = Reaper(scope)

    async def close_reaper(_: Exit[Any, Any]) -> None:
        await reaper.aclose()

    scope.add_finalizer(close_reaper)  # registered first: runs after the pool's finalizer
    executor._reaper = reaper
    if warm <= 0:
        return
    pool = WarmPool(executor.spawn_config(warm_limits or CodeExecutionLimits()), warm, scope)

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
    max_tasks: int = DEFAULT_DENO_MAX_TASKS,
) -> AsyncIterator[DenoCodeExecutor]:
    """A :class:`DenoCodeExecutor` with a warm pool of ``warm`` pre-started workloads.

    Workloads are spawned for ``warm_limits`` (default :class:`~sandbox.CodeExecutionLimits`); a
    pass whose CPU and memory limits match takes one, others spawn cold. Each workload serves at
    most one pass. Raises like the executor's constructor, and
    :class:`~sandbox.CodeLimitNotEnforceable` if ``warm_limits`` cannot be enforced.
    Passes return once their workload is SIGKILLed; its release finishes in the background (see
    :meth:`DenoCodeExecutor.execute`). Cancellation: leaving the block (normally, by error or by
    cancellation) stops refilling, kills every pooled workload and waits until every workload of
    the pool and of every pass is fully released (no process, cgroup or temp dir left), shielded.
    """
    executor = DenoCodeExecutor(
        isolation=isolation,
        deno=deno,
        allow_unenforced_memory=allow_unenforced_memory,
        max_tasks=max_tasks,
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
    max_tasks: int = DEFAULT_DENO_MAX_TASKS,
) -> Layer:
    """A Layer providing :data:`~sandbox.CodeExecutorService` backed by Deno.

    The executor, its warm pool of ``warm`` workloads and its reaper live in the Layer's build
    scope (the pool refills as a fiber of it, passes' workloads are released by tasks of it, and
    its finalizers close the pool and wait for every release); arguments as
    :func:`open_deno_executor`. Building is blocking for a moment (it probes the host once).
    """

    async def build(_: Context, scope: Scope) -> Context:
        executor = DenoCodeExecutor(
            isolation=isolation,
            deno=deno,
            allow_unenforced_memory=allow_unenforced_memory,
            max_tasks=max_tasks,
        )
        _attach_scope(executor, warm, warm_limits, scope)
        return Context.of(CodeExecutorService, executor)

    return Layer.from_build("deno code executor", provides=[CodeExecutorService], build=build)
