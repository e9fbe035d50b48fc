"""The process driver every command runner shares: one spawned workload as a stream of events.

Runners differ only in how a workload is prepared (temp state, argv, cgroups) and measured; the
hard part — reading both pipes and feeding stdin without deadlock, bounding output, enforcing the
wall clock, killing the whole process group, and never leaking a process or a pipe whatever the
consumer does — is the same for all of them and is written once here.

:class:`CommandExecution` drives one spawned process as the pull-based event stream described in
``_command``: each step of ``__anext__`` waits, under the wall-clock deadline, on one epoll set
holding stdout/stderr, stdin (while there is input left) and a pidfd (so the exited process can be
measured before it is reaped), then reads, writes and notes the exit without blocking — no task
per pipe to start and cancel. Without pidfds (old kernels) a step is a short-lived nursery with a
task per pipe and one waiting for the exit. When the deadline passes the whole process group is
SIGKILLed and the result says ``timed_out``. Once the main process exits, what is left of its
process group is killed and the pipes are drained for at most :data:`DRAIN_GRACE` seconds; any of
the workload's processes this process has adopted (``_reaping``) are reaped. Artifacts are then
collected in bounded, cancellable steps (``_workload_files``). Leaving the ``async with`` block
kills and reaps the group and removes temporary state, shielded. Runners subclass it and fill in
the hooks.
"""

from __future__ import annotations

import collections
import contextlib
import errno
import os
import select
import signal
import subprocess
import uuid
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import AbstractContextManager
from types import TracebackType

import attrs
import trio

from effectagent.effect import SpanHandle, trace_span

from ._command import (
    LIMIT_ARTIFACTS,
    CommandNotFound,
    InvalidRequest,
    OutputBuffer,
    OutputChunk,
    ResourceUsage,
    SandboxCrashed,
    SandboxEvent,
    SandboxExited,
    SandboxRequest,
    SandboxResult,
    SandboxStarted,
    SecretResolver,
    SecretUnavailable,
    StreamName,
    build_env,
)
from ._ownership import OwnedResources
from ._posture import LIMIT_OUTPUT, LIMIT_WALL_CLOCK, SandboxError, SandboxImplementation
from ._process_control import ChildProcess, kill_process_group, spawn_child, spawn_child_forked
from ._process_control import zombie_cpu_seconds as _zombie_cpu_seconds
from ._reaping import reap_adopted_in_session
from ._tracing import command_result, command_span_name, command_started
from ._workload_files import ArtifactCollector, collect_artifacts

__all__ = ["DRAIN_GRACE", "CommandExecution", "Measured", "Spawn", "resolve_secrets"]

DRAIN_GRACE = 0.5
"""Seconds the pipes are still read after the main process is gone (late output, stuck holders)."""
_READ_SIZE = 65536


def _fileno(stream: trio.abc.AsyncResource) -> int:
    """The fd of a pipe end of a spawned process (a ``trio.lowlevel.FdStream``)."""
    return int(stream.fileno())  # type: ignore[attr-defined]


@attrs.frozen
class Measured:
    """What a runner measured beyond the process itself (cgroups), after the workload exited."""

    cpu_seconds: float | None = None
    peak_memory_bytes: int | None = None
    peak_processes: int | None = None
    oom_killed: bool = False
    limits_hit: frozenset[str] = frozenset()


@attrs.frozen
class Spawn:
    """How to start one workload: decided by a runner, carried out by :class:`CommandExecution`."""

    argv: tuple[str, ...]
    env: Mapping[str, str] = attrs.field(repr=False)  # may hold resolved secret values
    cwd: str | None
    preexec: Callable[[], None] | None = attrs.field(default=None, repr=False)
    pass_fds: tuple[int, ...] = ()


async def resolve_secrets(
    request: SandboxRequest, resolver: SecretResolver | None
) -> dict[str, str]:
    """Env name -> value for each secret handle. Cancellation: nothing has started yet."""
    if request.secrets and resolver is None:
        raise SecretUnavailable(request.secrets[0].secret_id, "no SecretResolver is configured")
    values: dict[str, str] = {}
    for handle in request.secrets:
        assert resolver is not None
        try:
            value = await resolver.resolve(handle.secret_id)
        except SandboxError:
            raise
        except Exception as exc:
            raise SecretUnavailable(handle.secret_id, type(exc).__name__) from None
        if not isinstance(value, str):  # resolvers are not always type-checked
            raise SecretUnavailable(handle.secret_id, f"the value is a {type(value).__name__}")
        if "\0" in value:
            raise SecretUnavailable(handle.secret_id, "the value contains NUL")
        try:
            os.fsencode(value)
        except UnicodeEncodeError:
            raise SecretUnavailable(handle.secret_id, "the value is not encodable text") from None
        values[handle.env_name] = value
    return values


class CommandExecution:
    """One running workload as an async context manager and event iterator (see module notes).

    Subclasses provide :meth:`prepare` (temp state, argv), :meth:`cleanup` (remove it) and may
    refine :meth:`spawn_error`, :meth:`measure`, :meth:`check_crash`, :meth:`held` and
    :meth:`reap_adopted`.
    """

    def __init__(
        self,
        implementation: SandboxImplementation,
        request: SandboxRequest,
        resolver: SecretResolver | None,
        live: set[CommandExecution],
    ) -> None:
        self.implementation = implementation
        self.request = request
        self.execution_id = uuid.uuid4().hex
        self._resolver = resolver
        self._live = live
        self._process: ChildProcess | None = None
        self._pidfd: int | None = None
        self._epoll: select.epoll | None = None
        self._streams: dict[StreamName, trio.abc.ReceiveStream] = {}
        self._stdin: bytes = request.stdin or b""
        self._stdin_open = request.stdin is not None
        self._stdin_offset = 0
        self._pending: collections.deque[SandboxEvent] = collections.deque()
        self._output = OutputBuffer(request.limits.output_bytes)
        self._started_at = 0.0
        self._deadline = 0.0
        self._exited = False
        self._reaped = False
        self._killed = False
        self._timed_out = False
        self._finished = False
        self._entered = False
        self._closed = False
        self._returncode: int | None = None
        self._cpu: float | None = None
        self._wall = 0.0
        self._adopted_reaped = False
        self._collector: ArtifactCollector | None = None
        # The span of this execution (the effect core's tracing hook): entered in __aenter__, left
        # in aclose, so never the current span (it would not nest properly across the two).
        self._trace: AbstractContextManager[SpanHandle] | None = None
        self._trace_error: type[BaseException] | None = None
        self._span: SpanHandle | None = None

    def owned(self) -> OwnedResources:
        """What this execution holds on the host now: its process while unreaped, and what the
        runner adds (:meth:`held`). Empty once the ``async with`` block is left."""
        if self._closed:
            return OwnedResources()
        mine = OwnedResources()
        if self._process is not None and not self._reaped:
            mine = OwnedResources(processes=(self._process.pid,))
        return mine | self.held()

    # ---- hooks ----------------------------------------------------------------------------

    async def prepare(self, env: dict[str, str]) -> Spawn:
        """Create temporary state and decide how to spawn. Raise declared errors to refuse."""
        raise NotImplementedError

    def cleanup(self) -> None:
        """Remove every temporary resource (idempotent; called once the workload is reaped, in a
        worker thread: it must not touch trio objects)."""

    def held(self) -> OwnedResources:
        """What the runner holds for this execution besides its process (cgroups, temp dirs)."""
        return OwnedResources()

    async def stop(self) -> None:
        """Kill and reap the workload's process (and its process group), shielded; called when
        the block is left before it exited by itself."""
        assert self._process is not None
        await kill_process_group(self._process)

    async def reap_adopted(self) -> None:
        """Reap the workload's processes this process adopted; called once its process is reaped.

        By default, children of ours in the workload's session (see ``_reaping``). Cancellation:
        shielded and bounded.
        """
        assert self._process is not None
        await reap_adopted_in_session(self._process.pid)

    def artifact_roots(self) -> Mapping[str | None, tuple[str, str | int]]:
        """Rule root -> ``(sandbox_path, host path or directory descriptor)`` for artifacts."""
        return {}

    def spawn_error(self, exc: OSError) -> SandboxError:
        """Map a failure to spawn to a declared error."""
        if isinstance(exc, FileNotFoundError):
            return CommandNotFound(self.request.command)
        if exc.errno == errno.E2BIG:  # the request's own size: nothing of the machinery failed
            return InvalidRequest(
                (
                    "the command's arguments and environment are larger than the kernel takes "
                    "for a new program (E2BIG): pass large data as stdin or a mounted file",
                )
            )
        return SandboxCrashed(f"spawn failed: {type(exc).__name__}: {exc.strerror}")

    def measure(self) -> Measured:
        """Measurements beyond the process's own (cgroups), taken after exit."""
        return Measured()

    def check_crash(self, stderr_head: bytes) -> None:
        """Raise :class:`SandboxCrashed` if the machinery (not the workload) failed."""

    def wants_zombie_cpu(self) -> bool:
        """Whether to read the exited process's CPU time (False when :meth:`measure` has it)."""
        return True

    # ---- context manager --------------------------------------------------------------------

    async def __aenter__(self) -> AsyncIterator[SandboxEvent]:
        """Resolve secrets, prepare, spawn; return the event iterator (this object).

        Cancellation: if cancelled or failing here, whatever was started is killed and removed
        before the exception propagates. One consumer task at a time may iterate. An execution
        runs once: entering it again (inside its block or after it) raises ``RuntimeError``
        and starts nothing — a second workload would be one nobody kills or cleans up.
        """
        if self._entered:
            raise RuntimeError(
                "this SandboxExecution was already entered: it runs once; call "
                "sandbox.execute(request) again for another run"
            )
        self._entered = True
        self._trace = trace_span(command_span_name(self.request), current=False)
        self._span = self._trace.__enter__()
        command_started(self._span, self.request, self.implementation, self.execution_id)
        try:
            env = build_env(self.request, await resolve_secrets(self.request, self._resolver))
        except BaseException as exc:
            trace, self._trace = self._trace, None  # ended here: aclose must not end it again
            trace.__exit__(type(exc), None, None)
            raise
        self._live.add(self)
        try:
            spawn = await self.prepare(env)
            try:
                if spawn.preexec is None:  # vfork + exec on this thread: faster than a thread hop
                    self._process = spawn_child(
                        spawn.argv,
                        stdin_pipe=self.request.stdin is not None,
                        env=spawn.env,
                        cwd=spawn.cwd,
                        pass_fds=spawn.pass_fds,
                    )
                else:  # a preexec_fn means fork: on the spawning thread, off the event loop
                    self._process = await spawn_child_forked(
                        spawn.argv,
                        stdin_pipe=self.request.stdin is not None,
                        env=spawn.env,
                        cwd=spawn.cwd,
                        preexec=spawn.preexec,
                        pass_fds=spawn.pass_fds,
                    )
            except OSError as exc:
                raise self.spawn_error(exc) from None
            except subprocess.SubprocessError as exc:
                raise SandboxCrashed(f"spawn failed: {exc}") from None
            finally:
                del env, spawn
        except BaseException as exc:
            self._trace_error = type(exc)
            await self.aclose()
            raise
        process = self._process
        assert process.stdout is not None
        assert process.stderr is not None
        self._streams = {"stdout": process.stdout, "stderr": process.stderr}
        with contextlib.suppress(OSError, AttributeError):
            self._pidfd = os.pidfd_open(process.pid)
        self._started_at = trio.current_time()
        self._deadline = self._started_at + self.request.limits.wall_clock_seconds
        self._pending.append(SandboxStarted(self.implementation, self.execution_id, process.pid))
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._trace_error = exc_type
        await self.aclose()

    async def aclose(self) -> None:
        """Kill and reap the workload, close pipes, remove temporary state. Idempotent.

        Cancellation: shielded; always completes.
        """
        if self._closed:
            return
        self._closed = True
        if self._epoll is not None:
            self._epoll.close()
        with trio.CancelScope(shield=True):
            try:
                if self._collector is not None:
                    self._collector.close()
                if self._process is not None:
                    if not self._reaped:  # once reaped, its pid may belong to someone else
                        await self.stop()
                        self._reaped = True
                    await self._reap_adopted_once()
                    for stream in (self._process.stdin, *self._streams.values()):
                        if stream is not None:
                            await stream.aclose()
                    self._streams.clear()
                self._close_pidfd()
            finally:
                try:
                    # In a worker thread: a workload may leave a tree of any size to remove (a
                    # million files take seconds), which must not stop every other task.
                    await trio.to_thread.run_sync(self.cleanup)
                finally:
                    self._live.discard(self)
                    trace, self._trace = self._trace, None
                    if trace is not None:
                        trace.__exit__(self._trace_error, None, None)

    # ---- iteration --------------------------------------------------------------------------

    def __aiter__(self) -> AsyncIterator[SandboxEvent]:
        return self

    async def __anext__(self) -> SandboxEvent:
        """The next event. Cancellation: safe; no output is lost, the workload keeps running."""
        while not self._pending:
            if self._finished or self._closed:
                raise StopAsyncIteration
            if self._reaped and not self._streams:
                await self._finish()
                continue
            await self._step()
        return self._pending.popleft()

    async def _step(self) -> None:
        if self._exited and not self._reaped:
            # A cancelled step saw the exit but did not reap it: reap it now. (Waiting first would
            # wait on pipes that may all be closed already — until the wall-clock deadline.)
            await self._reap()
            return
        if self._pidfd is not None or self._exited:
            await self._step_polled()
        else:
            await self._step_with_tasks()

    async def _step_polled(self) -> None:
        # One wait on an epoll set of the pipes, stdin and the pidfd, then non-blocking I/O: no
        # nursery, no task to cancel. At most one chunk per stream per step, as with tasks.
        watch = self._watch()
        with trio.move_on_at(self._deadline) as deadline_scope:
            await trio.lowlevel.wait_readable(watch.fileno())
        await self._pump(dict(watch.poll(0)))
        if self._exited and not self._reaped:
            await self._reap()
        elif deadline_scope.cancelled_caught:
            await self._on_deadline()

    def _watch(self) -> select.epoll:
        """The epoll set of this execution's open pipes and unexited pidfd (made on first use)."""
        if self._epoll is None:
            self._epoll = watch = select.epoll()
            for stream in self._streams.values():
                watch.register(_fileno(stream), select.EPOLLIN)
            stdin = self._process.stdin if self._process is not None else None
            if self._stdin_open and stdin is not None:
                watch.register(_fileno(stdin), select.EPOLLOUT)
            if self._pidfd is not None and not self._exited:
                watch.register(self._pidfd, select.EPOLLIN)
        return self._epoll

    def _unwatch(self, fd: int) -> None:
        if self._epoll is not None:
            with contextlib.suppress(OSError, ValueError):
                self._epoll.unregister(fd)

    async def _pump(self, events: dict[int, int]) -> None:
        for name, stream in list(self._streams.items()):
            fd = _fileno(stream)
            if fd not in events:
                continue
            try:
                data = os.read(fd, _READ_SIZE)
            except BlockingIOError:
                continue
            except OSError:
                data = b""
            if data:
                kept = self._output.accept(name, data)
                if kept:
                    self._pending.append(OutputChunk(name, kept))
            else:
                self._streams.pop(name, None)
                self._unwatch(fd)
                await stream.aclose()
        if self._pidfd is not None and self._pidfd in events and not self._exited:
            self._exited = True
            self._unwatch(self._pidfd)
        stdin = self._process.stdin if self._process is not None else None
        if self._stdin_open and stdin is not None and _fileno(stdin) in events:
            await self._feed_stdin(stdin)

    def _write_stdin_chunk(self, fd: int) -> bool:
        """Write the next chunk of stdin without blocking; False if the pipe is full right now.

        Raw non-blocking writes: a cancelled wait loses nothing and the offset stays exact. If the
        workload closed its stdin, the rest is dropped.
        """
        try:
            data = memoryview(self._stdin)
            self._stdin_offset += os.write(
                fd, data[self._stdin_offset : self._stdin_offset + _READ_SIZE]
            )
        except BlockingIOError:
            return False
        except OSError:
            self._stdin_offset = len(self._stdin)
        return True

    async def _feed_stdin(self, stream: trio.abc.SendStream) -> None:
        fd = _fileno(stream)
        if self._stdin_offset < len(self._stdin) and not self._write_stdin_chunk(fd):
            return
        if self._stdin_offset >= len(self._stdin):
            self._stdin_open = False
            self._unwatch(fd)
            await stream.aclose()

    async def _step_with_tasks(self) -> None:
        with trio.move_on_at(self._deadline) as deadline_scope:
            async with trio.open_nursery() as nursery:
                for name, stream in list(self._streams.items()):
                    nursery.start_soon(self._read, name, stream, nursery.cancel_scope)
                if self._stdin_open and self._process is not None and self._process.stdin:
                    nursery.start_soon(self._write_stdin, self._process.stdin)
                if not self._exited:
                    nursery.start_soon(self._wait_exit, nursery.cancel_scope)
        if self._exited and not self._reaped:
            await self._reap()
        elif deadline_scope.cancelled_caught:
            await self._on_deadline()

    async def _read(
        self, name: StreamName, stream: trio.abc.ReceiveStream, scope: trio.CancelScope
    ) -> None:
        try:
            data = bytes(await stream.receive_some(_READ_SIZE))
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            data = b""
        if not data:
            self._streams.pop(name, None)
            await stream.aclose()
        else:
            kept = self._output.accept(name, data)
            if kept:
                self._pending.append(OutputChunk(name, kept))
        scope.cancel()

    async def _write_stdin(self, stream: trio.abc.SendStream) -> None:
        fd = _fileno(stream)
        while self._stdin_offset < len(self._stdin):
            await trio.lowlevel.wait_writable(fd)
            self._write_stdin_chunk(fd)
        self._stdin_open = False
        await stream.aclose()

    async def _wait_exit(self, scope: trio.CancelScope) -> None:
        assert self._process is not None
        if self._pidfd is not None:
            await trio.lowlevel.wait_readable(self._pidfd)
        else:
            await self._process.wait()
        self._exited = True
        scope.cancel()

    async def _reap(self) -> None:
        assert self._process is not None
        if self._pidfd is not None and self.wants_zombie_cpu():
            self._cpu = _zombie_cpu_seconds(self._process.pid)
        # Leftovers of the group die while the zombie leader still pins the group id. (Not once
        # it was reaped — a wait cancelled after reaping it: the group id may be reused.)
        if not self._process.reaped:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self._process.pid, signal.SIGKILL)
        # Shielded: the child has exited, so this does not wait; a cancellation here would reap
        # it without saying so, and a later reap would signal a pid that may be someone else's.
        with trio.CancelScope(shield=True):
            self._returncode = await self._process.wait()
        self._close_pidfd()
        self._wall = trio.current_time() - self._started_at
        self._reaped = True
        await self._reap_adopted_once()
        self._deadline = trio.current_time() + DRAIN_GRACE

    async def _reap_adopted_once(self) -> None:
        if not self._adopted_reaped:
            self._adopted_reaped = True
            await self.reap_adopted()

    async def _on_deadline(self) -> None:
        if not self._exited:
            if not self._killed:
                self._timed_out = True
            self.kill()  # again if the first kill has not ended it: a runner may escalate
            self._deadline = trio.current_time() + DRAIN_GRACE
            return
        for stream in self._streams.values():  # drain grace is over: abandon held pipes
            self._unwatch(_fileno(stream))
            await stream.aclose()
        self._streams.clear()

    def kill(self) -> None:
        """SIGKILL the workload's process group now (the stream then reports the exit).

        Idempotent; a runner may make a repeated call escalate."""
        self._killed = True
        if self._process is not None and self._process.returncode is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self._process.pid, signal.SIGKILL)

    def _close_pidfd(self) -> None:
        if self._pidfd is not None:
            trio.lowlevel.notify_closing(self._pidfd)
            os.close(self._pidfd)
            self._pidfd = None

    @property
    def killed_by_host(self) -> bool:
        """Whether the host killed the workload (timeout or :meth:`kill`)."""
        return self._killed

    async def _finish(self) -> None:
        if self._collector is None:
            if not self._killed:
                try:
                    self.check_crash(self._output.value("stderr")[:1024])
                except BaseException:
                    self._finished = True  # the stream ends with the crash
                    raise
            self._collector = ArtifactCollector(
                self.request.artifacts, self.artifact_roots(), self.request.limits
            )
        # A cancelled collection resumes here at the next __anext__.
        collection = await collect_artifacts(self._collector)
        self._finished = True
        measured = self.measure()
        cpu = measured.cpu_seconds if measured.cpu_seconds is not None else self._cpu
        usage = ResourceUsage(self._wall, cpu, measured.peak_memory_bytes, measured.peak_processes)
        limits_hit = set(measured.limits_hit)
        if collection.stopped is not None:
            limits_hit.add(LIMIT_ARTIFACTS)
        if self._timed_out:
            limits_hit.add(LIMIT_WALL_CLOCK)
        if self._output.truncated:
            limits_hit.add(LIMIT_OUTPUT)
        code = self._returncode
        result = SandboxResult(
            exit_code=code if code is not None and code >= 0 else None,
            signal=-code if code is not None and code < 0 else None,
            timed_out=self._timed_out,
            output_truncated=self._output.truncated,
            stdout=self._output.value("stdout"),
            stderr=self._output.value("stderr"),
            dropped_bytes=self._output.dropped,
            usage=usage,
            implementation=self.implementation,
            artifacts=collection.artifacts,
            artifacts_skipped=collection.skipped,
            artifacts_stopped=collection.stopped,
            oom_killed=measured.oom_killed,
            limits_hit=frozenset(limits_hit),
        )
        command_result(self._span, result)
        self._pending.extend((usage, SandboxExited(result)))
