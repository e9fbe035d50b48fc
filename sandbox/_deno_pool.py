"""Deno workloads: spawning one isolated Deno process per pass, and a warm pool of them.

Design notes
------------
A :class:`Workload` is one ``deno run`` process running the fixed harness, with everything it owns:
its process group, pipes, cgroups (a pids group that caps threads and tells when every process is
gone; a memory group when memory is limited) and, unisolated only, a temporary directory. It is
used for exactly one pass and then closed; :meth:`Workload.kill` SIGKILLs every process at once
(none can run code after it returns) and :meth:`Workload.aclose` kills, reaps, waits until the
kernel is done with them (for a killed Deno and its namespaces, several milliseconds), and
removes the rest. It is shielded. A :class:`Reaper` lets that slow part of closing run in a task
of a scope after the pass has returned, and lets closing the scope wait for it.

Under ``isolation="namespaces"`` the process runs in bubblewrap (``_isolation.bwrap_argv``): new
user, pid, net, ipc, uts and cgroup namespaces, no network, and a mount tree in which ``/usr`` and
``/proc`` are empty tmpfs, so that besides the loader's configuration the program can reach only
the Deno binary, the shared libraries it links (found with ``ldd``) and the harness. Deno's
permission checks are not enough on their own: Deno reads files that are imported statically
(``import x from "file:///..." with {type: "text"}``) without them. Deno itself runs with no
``--allow-*`` flag and ``--no-prompt --no-remote --no-npm --no-config``. ``RLIMIT_CPU`` and the
cgroups are applied in the child before exec, so nothing of the workload runs unaccounted.

A :class:`WarmPool` spawns workloads ahead of need for one :class:`SpawnConfig` (the limits that
must be fixed at spawn time: CPU seconds and memory), waits until each reports ready, and hands each
out at most once; it never reuses one. The pool belongs to a :class:`~effectagent.effect.Scope`:
its refilling runs as a fiber of that scope and closing it kills every workload it still holds.
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
import resource
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Callable
from typing import Final, Literal, Never, final

import attrs
import trio

from effectagent.effect import Fiber, Scope, ScopeClosedError

from ._code import ExecutorCrashed, ExecutorUnavailable
from ._deno_protocol import READY_MARKER
from ._isolation import (
    MemoryCgroup,
    PidsCgroup,
    ProcessLimits,
    bwrap_argv,
    kill_process_group,
    rlimit_preexec,
)

__all__ = [
    "HARNESS_PATH",
    "IsolationMode",
    "Reaper",
    "SpawnConfig",
    "WarmPool",
    "Workload",
    "deno_version",
    "find_deno",
    "runtime_libraries",
    "spawn_workload",
]

IsolationMode = Literal["namespaces", "none"]

HARNESS_PATH: Final = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_harness.js")
_INSIDE_DIR: Final = "/effectagent"
_INSIDE_DENO: Final = f"{_INSIDE_DIR}/deno"
_INSIDE_HARNESS: Final = f"{_INSIDE_DIR}/harness.js"
_DENO_FLAGS: Final = ("run", "--no-prompt", "--no-remote", "--no-npm", "--no-config")
_FILE_SIZE_LIMIT: Final = 64 * 1024 * 1024
_MIB: Final = 1024 * 1024
_READY_TIMEOUT: Final = 10.0
_STDOUT_CHUNK: Final = 65536
_KILL_ROUNDS: Final = 8


def find_deno(explicit: str | None = None) -> str:
    """The Deno binary: ``explicit``, else the one shipped by the ``deno`` PyPI package, else PATH.

    Raises :class:`ExecutorUnavailable` when there is none.
    """
    if explicit is not None:
        if not os.access(explicit, os.X_OK):
            raise ExecutorUnavailable(f"{explicit!r} is not an executable Deno binary")
        return os.path.abspath(explicit)
    try:
        import deno  # type: ignore[import-untyped]  # the PyPI package that ships the binary

        return str(deno.find_deno_bin())
    except (ImportError, FileNotFoundError):
        pass
    found = shutil.which("deno")
    if found is None:
        raise ExecutorUnavailable("no Deno binary: install the 'deno' package (extra 'sandbox')")
    return found


@functools.cache
def deno_version(deno: str) -> str:
    """``"2.9.8"`` for the binary at ``deno`` (runs it once; cached). Blocking."""
    try:
        done = subprocess.run(
            [deno, "--version"], capture_output=True, text=True, timeout=30, check=True
        )
    except (OSError, subprocess.SubprocessError) as exc:
        raise ExecutorUnavailable(f"cannot run {deno!r}: {exc}") from None
    first = done.stdout.split("\n", 1)[0].split()
    return first[1] if len(first) > 1 else "unknown"


@functools.cache
def runtime_libraries(deno: str) -> tuple[tuple[str, str], ...] | None:
    """``(host file, path inside the sandbox)`` for each shared library ``deno`` links.

    Found with ``ldd``; ``None`` when they cannot all be found (the caller then keeps ``/usr``).
    Blocking (one ``ldd`` run; cached).
    """
    ldd = shutil.which("ldd")
    if ldd is None:
        return None
    try:
        done = subprocess.run([ldd, deno], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    binds: list[tuple[str, str]] = []
    for raw in done.stdout.splitlines():
        line = raw.strip()
        if "not found" in line:
            return None
        target = line.partition("=>")[2] if "=>" in line else line
        path = target.strip().split(" (", 1)[0].strip()
        if not path.startswith("/"):
            continue  # the vDSO
        inside = os.path.join(os.path.realpath(os.path.dirname(path)), os.path.basename(path))
        binds.append((os.path.realpath(path), inside))
    return tuple(binds) if done.returncode == 0 and binds else None


@attrs.frozen
class SpawnConfig:
    """Everything fixed when a workload is spawned; equal configs give interchangeable workloads.

    ``memory_bytes`` is the cgroup limit when ``use_cgroup``; in any case the V8 old space is capped
    at half of it. ``max_tasks`` (processes and threads at once) needs a pids cgroup, which also
    lets :meth:`Workload.aclose` wait until every process of the workload is gone.
    """

    deno: str
    isolation: IsolationMode
    bwrap: str | None
    libraries: tuple[tuple[str, str], ...] | None
    cpu_seconds: int | None
    memory_bytes: int | None
    use_cgroup: bool
    max_tasks: int | None
    harness: str = HARNESS_PATH

    def command(self, workdir: str | None) -> tuple[list[str], dict[str, str], str]:
        """``(argv, env, cwd)`` for one workload; ``workdir`` is its temp dir when unisolated."""
        flags = list(_DENO_FLAGS)
        if self.memory_bytes is not None:
            heap_mib = max(16, self.memory_bytes // _MIB // 2)
            flags.append(f"--v8-flags=--max-old-space-size={heap_mib}")
        if self.isolation == "none":
            assert workdir is not None
            env = {
                "HOME": workdir,
                "DENO_DIR": os.path.join(workdir, "deno"),
                "NO_COLOR": "1",
                "DENO_NO_UPDATE_CHECK": "1",
            }
            return [self.deno, *flags, self.harness], env, workdir
        assert self.bwrap is not None
        env = {
            "HOME": "/tmp",
            "DENO_DIR": "/tmp/deno",
            "NO_COLOR": "1",
            "DENO_NO_UPDATE_CHECK": "1",
        }
        hide = ("/usr", "/proc") if self.libraries is not None else ("/proc",)
        prefix = bwrap_argv(
            bwrap=self.bwrap,
            ro_binds=[
                (self.deno, _INSIDE_DENO),
                (self.harness, _INSIDE_HARNESS),
                *(self.libraries or ()),
            ],
            rw_binds=(),
            tmpfs=hide,
            cwd="/tmp",
            env=env,
            network=False,
        )
        return [*prefix, _INSIDE_DENO, *flags, _INSIDE_HARNESS], {}, "/"


def _preexec(config: SpawnConfig, cgroups: tuple[_Cgroup, ...]) -> Callable[[], None]:
    limits = ProcessLimits(cpu_seconds=config.cpu_seconds, file_size_bytes=_FILE_SIZE_LIMIT)
    inner = rlimit_preexec(limits, join_cgroups=[group.path for group in cgroups])

    def preexec() -> None:
        inner()
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))

    return preexec


@final
class Workload:
    """One Deno process running the harness, for one pass. Create with :func:`spawn_workload`.

    Owns the process group, its pipes, its memory cgroup and its temp dir; :meth:`aclose` releases
    them all. ``nonce`` is this workload's frame nonce (sent to the harness in the start message).
    """

    __slots__ = (
        "_closed",
        "_killed",
        "_ready",
        "_released",
        "config",
        "leftover",
        "memory",
        "nonce",
        "pids",
        "process",
        "workdir",
    )

    def __init__(
        self,
        process: trio.Process,
        config: SpawnConfig,
        memory: MemoryCgroup | None,
        pids: PidsCgroup | None,
        workdir: str | None,
    ) -> None:
        self.process = process
        self.config = config
        self.memory = memory
        self.pids = pids
        self.workdir = workdir
        self.nonce = os.urandom(16)
        self.leftover = b""
        self._ready = False
        self._closed = False
        self._killed = False
        self._released: trio.Event | None = None

    @property
    def alive(self) -> bool:
        """True while the process has not exited (as far as a non-blocking poll can tell)."""
        return self.process.poll() is None

    async def wait_ready(self, timeout: float = _READY_TIMEOUT) -> None:
        """Wait for the harness's ready marker (idempotent).

        Raises :class:`ExecutorCrashed` if the process ends or writes anything else first, or
        stays silent for ``timeout`` seconds. Cancellation: a checkpoint; the workload stays
        owned by the caller, who must still :meth:`aclose` it.
        """
        if self._ready:
            return
        stdout = self.process.stdout
        assert stdout is not None
        received = bytearray()
        with trio.move_on_after(timeout):
            while len(received) < len(READY_MARKER):
                chunk = await stdout.receive_some(_STDOUT_CHUNK)
                if not chunk:
                    break
                received += chunk
            else:
                if received[: len(READY_MARKER)] != READY_MARKER:
                    raise ExecutorCrashed("the Deno harness did not start")
                self.leftover = bytes(received[len(READY_MARKER) :])
                self._ready = True
                return
        stderr = await self._stderr_excerpt()
        raise ExecutorCrashed(f"the Deno harness did not start: {stderr or 'no output'}")

    async def _stderr_excerpt(self) -> str:
        stderr = self.process.stderr
        if stderr is None:
            return ""
        data = b""
        with trio.move_on_after(0.2):
            while len(data) < 2048:
                chunk = await stderr.receive_some(2048)
                if not chunk:
                    break
                data += chunk
        return data[:2048].decode("utf-8", "replace").strip()

    def kill(self) -> None:
        """SIGKILL every process of the workload now, without waiting for any of them to exit.

        Every member of its cgroups (listed again until a listing shows no process not yet
        signalled) and its process group get ``SIGKILL``; from then on none of them can run any
        more code (the kernel acts on a pending ``SIGKILL`` before a process returns to user
        space). Exiting, reaping and removing what it owns is :meth:`aclose`'s job. Idempotent,
        never blocks, and without a pids cgroup reaches only the process group (see
        :attr:`tracked`).
        """
        self._killed = True
        signalled: set[int] = set()
        for _ in range(_KILL_ROUNDS):
            members = {pid for group in (self.pids, self.memory) if group for pid in group.pids()}
            fresh = members - signalled
            if not fresh:
                break
            for pid in fresh:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            signalled |= fresh
        if self.process.returncode is None:  # once reaped, its pid may belong to someone else
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.process.pid, signal.SIGKILL)

    @property
    def killed(self) -> bool:
        """True once :meth:`kill` or :meth:`aclose` has been called."""
        return self._killed

    @property
    def tracked(self) -> bool:
        """Whether a pids cgroup holds every process of the workload, so that :meth:`kill` reaches
        each of them directly (otherwise processes in the sandbox die only after bwrap does)."""
        return self.pids is not None

    async def aclose(self) -> None:
        """Kill the process group, reap it, close the pipes, remove the cgroup and the temp dir.

        Idempotent; a call made while another is in progress waits until that one has released
        everything. Cancellation: shielded — it always finishes releasing everything.
        """
        if self._closed:
            if self._released is not None:
                with trio.CancelScope(shield=True):
                    await self._released.wait()
            return
        self._closed = True
        self._released = trio.Event()
        groups = tuple(group for group in (self.pids, self.memory) if group is not None)
        with trio.CancelScope(shield=True):
            try:
                self.kill()  # the sandboxed processes die with bwrap's, not after
                await kill_process_group(self.process)
                for stream in (self.process.stdin, self.process.stdout, self.process.stderr):
                    if stream is not None:
                        await stream.aclose()
                for group in groups:
                    await _remove_cgroup(group)
                if self.workdir is not None:
                    shutil.rmtree(self.workdir, ignore_errors=True)
            finally:
                self._released.set()


_Cgroup = MemoryCgroup | PidsCgroup


def _kill_members(group: _Cgroup) -> None:
    for pid in group.pids():
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


async def _remove_cgroup(group: _Cgroup) -> None:
    """Wait until ``group`` is empty, then remove it.

    A killed Deno takes a few milliseconds to exit. A process leaves its cgroup only on its way
    out of the kernel (it can run no code by then) and no process of a workload can move itself
    elsewhere (the sandbox has no cgroup filesystem), so an empty group means every process of the
    workload is done. Polls from the event loop (no thread) every 0.1 ms at first, backing off to
    2 ms, killing again each time, for up to a second; then leaves the rest to ``close`` in a
    worker thread, which kills again and waits up to another second.
    """
    deadline = trio.current_time() + 1.0
    interval = 0.0001
    while group.pids():
        if trio.current_time() > deadline:
            await trio.to_thread.run_sync(group.close)
            return
        _kill_members(group)
        await trio.sleep(interval)
        interval = min(interval * 2, 0.002)
    group.close()


async def spawn_workload(config: SpawnConfig) -> Workload:
    """Start one workload for ``config`` (it has not necessarily reported ready yet).

    Raises :class:`ExecutorCrashed` if the process cannot be started, and the shared
    ``LimitNotEnforceable`` if its memory cgroup cannot be made. Cancellation: a checkpoint; a
    workload interrupted while starting is released before ``trio.Cancelled`` propagates.
    """
    memory = pids = None
    workdir = None
    try:
        if config.use_cgroup and config.memory_bytes is not None:
            memory = MemoryCgroup.create(config.memory_bytes)
        if config.max_tasks is not None:
            pids = PidsCgroup.create(config.max_tasks)
        if config.isolation == "none":
            workdir = tempfile.mkdtemp(prefix="effectagent-deno-")
        argv, env, cwd = config.command(workdir)
        process = await trio.lowlevel.open_process(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            cwd=cwd,
            start_new_session=True,
            preexec_fn=_preexec(config, tuple(g for g in (memory, pids) if g is not None)),
        )
    except BaseException as exc:
        for group in (memory, pids):
            if group is not None:
                group.close()
        if workdir is not None:
            shutil.rmtree(workdir, ignore_errors=True)
        if isinstance(exc, OSError | subprocess.SubprocessError):
            raise ExecutorCrashed(f"cannot start Deno: {exc}") from None
        raise
    return Workload(process, config, memory, pids, workdir)


@final
class WarmPool:
    """Keeps up to ``size`` started, ready workloads for one :class:`SpawnConfig`.

    Refilling runs as a fiber of ``scope`` (the scope that owns the pool, for example a Layer's
    build scope), forked by :meth:`start`; it ends as soon as the pool is full, so a scope that
    closes while it runs waits at most for the pool to fill (a few tens of milliseconds per
    workload) before its finalizer, :meth:`aclose`, kills them.
    After three consecutive spawn failures refilling pauses (exponential back-off, up to 5 s) so
    a broken host does not spin. :meth:`aclose` (a finalizer of ``scope``) kills what is left.
    """

    __slots__ = (
        "_closed",
        "_dead",
        "_failures",
        "_ready",
        "_refill",
        "_resume_at",
        "_scope",
        "config",
        "size",
    )

    def __init__(self, config: SpawnConfig, size: int, scope: Scope) -> None:
        if size < 1:
            raise ValueError("a warm pool holds at least one workload")
        self.config = config
        self.size = size
        self._scope = scope
        self._ready: list[Workload] = []
        self._dead: list[Workload] = []
        self._refill: Fiber[None, Never] | None = None
        self._closed = False
        self._failures = 0
        self._resume_at = -math.inf

    @property
    def ready(self) -> int:
        """How many workloads are waiting to be handed out."""
        return len(self._ready)

    @property
    def closed(self) -> bool:
        """True once :meth:`aclose` was called (or the scope stopped taking fibers)."""
        return self._closed

    def _is_closed(self) -> bool:  # a call, so that type narrowing never assumes it unchanged
        return self._closed

    def start(self) -> None:
        """Begin filling the pool (in the background of its scope). Idempotent."""
        if self._closed or (self._refill is not None and not self._refill.done):
            return
        if trio.current_time() < self._resume_at:
            return
        try:
            self._refill = self._scope.fork(self._fill, name="deno warm pool")
        except ScopeClosedError:
            self._closed = True

    def take(self, config: SpawnConfig) -> Workload | None:
        """A ready workload spawned for ``config``, removed from the pool; ``None`` if none is.

        Never waits. Refilling is left to :meth:`start`, which the executor calls once the pass
        is over, so that spawning a replacement never competes with the pass for the CPU; when
        the pool is found empty, refilling starts at once.
        """
        if self._closed or config != self.config:
            return None
        while self._ready:
            workload = self._ready.pop(0)
            if workload.alive:
                return workload
            self._dead.append(workload)  # died while waiting; closed by the next fill
        self.start()
        return None

    async def _fill(self) -> None:
        while self._dead:
            await self._dead.pop().aclose()
        while not self._is_closed() and len(self._ready) < self.size:
            workload: Workload | None = None
            try:
                workload = await spawn_workload(self.config)
                await workload.wait_ready()
            except BaseException as exc:
                if workload is not None:
                    await workload.aclose()
                if not isinstance(exc, Exception):
                    raise
                self._failures += 1
                if self._failures >= 3:
                    pause = min(5.0, 0.05 * math.pow(2, min(self._failures, 10)))
                    self._resume_at = trio.current_time() + pause
                    return
                continue
            self._failures = 0
            if self._is_closed():  # closed while this one was starting
                await workload.aclose()
                return
            self._ready.append(workload)

    async def aclose(self) -> None:
        """Stop refilling and close every workload still in the pool. Idempotent.

        Cancellation: shielded — it always finishes closing.
        """
        self._closed = True
        with trio.CancelScope(shield=True):
            if self._refill is not None:
                await self._refill.interrupt_and_join()
            for workload in (*self._ready, *self._dead):
                await workload.aclose()
            self._ready.clear()
            self._dead.clear()


@final
class Reaper:
    """Finishes closing used workloads in the background of ``scope``, after killing them.

    :meth:`retire` SIGKILLs a workload at once (:meth:`Workload.kill`) and leaves the slow rest of
    :meth:`Workload.aclose` — waiting for the kernel to tear down the killed processes (several
    milliseconds for Deno), reaping, removing cgroups and temp dirs — to a task of
    ``scope``. :meth:`aclose` (a finalizer of ``scope``; the scope also waits for those tasks
    before it closes) returns only once every retired workload is fully released.
    """

    __slots__ = ("_closed", "_pending", "_scope")

    def __init__(self, scope: Scope) -> None:
        self._scope = scope
        self._pending: set[Workload] = set()
        self._closed = False

    @property
    def pending(self) -> int:
        """How many retired workloads are not fully released yet."""
        return len(self._pending)

    def retire(self, workload: Workload) -> bool:
        """Kill ``workload`` now and close it in the background; False if the caller must close it.

        Never waits. The workload is SIGKILLed in every case. It is handed to the scope only when
        its pids cgroup lets :meth:`Workload.kill` reach every process directly, and the reaper and
        its scope are still open; otherwise this returns False and the caller must ``await
        workload.aclose()`` itself.
        """
        workload.kill()
        if self._closed or not workload.tracked:
            return False
        try:
            self._scope.spawn(self._release, workload)
        except ScopeClosedError:
            self._closed = True
            return False
        self._pending.add(workload)
        return True

    async def _release(self, workload: Workload) -> None:
        try:
            await workload.aclose()  # shielded: a cancelled scope still waits for the end of it
        finally:
            self._pending.discard(workload)

    async def aclose(self) -> None:
        """Take no more workloads and wait until every retired one is fully released. Idempotent.

        Cancellation: shielded — it always waits for every release to finish.
        """
        self._closed = True
        with trio.CancelScope(shield=True):
            while self._pending:
                await self._pending.pop().aclose()  # or waits for the release in progress
