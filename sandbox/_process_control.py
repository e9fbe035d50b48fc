"""Process-level controls: rlimits set on a workload, and killing and measuring its process group.

These are the mechanisms every runner has even without namespaces or cgroups, so the unisolated
local runner relies on them alone and the isolated runners use them alongside cgroups.  They act
on one process and what it forks: rlimits are inherited per process, the kill reaches the process
group (a ``setsid`` escapes it — one reason the local runner is no security boundary), and CPU is
read from the zombie before it is reaped, the last moment its counters are both final and
readable.  :func:`spawn_child` starts a child on the event loop's own thread (``vfork``: cheaper
than the worker-thread hop of ``trio.lowlevel.open_process``), and :func:`spawn_child_forked` one
that needs a ``preexec_fn`` on a spawning thread that lives as long as the process (a sandbox
that dies with its parent dies with the *thread* that forked it); they, :class:`ChildProcess`
and :func:`kill_process_group` are the parts that need Trio.
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
import queue
import resource
import shutil
import signal
import subprocess
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Final, Protocol, TypeVar, final

import attrs
import outcome
import trio

T = TypeVar("T")

__all__ = [
    "ChildProcess",
    "ProcessLimits",
    "Reapable",
    "apply_rlimits",
    "can_limit_other_users",
    "ceil_seconds",
    "kill_process_group",
    "prlimit_argv",
    "rlimit_preexec",
    "spawn_child",
    "spawn_child_forked",
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


@functools.cache
def _prlimit() -> str | None:
    return shutil.which("prlimit")


def prlimit_argv(limits: ProcessLimits) -> tuple[str, ...] | None:
    """An argv prefix that runs a command with ``limits`` (util-linux ``prlimit``, which sets them
    on itself and execs the command), or None when the host has no ``prlimit``.

    The same pairs as :func:`rlimit_preexec`, without its cost: a ``preexec_fn`` forces ``fork``
    instead of ``vfork``, several milliseconds in a large process; one more exec is about one.
    ``()`` when there is nothing to set.
    """
    pairs = {
        resource.RLIMIT_CPU: "cpu",
        resource.RLIMIT_FSIZE: "fsize",
        resource.RLIMIT_NPROC: "nproc",
        resource.RLIMIT_AS: "as",
        resource.RLIMIT_NOFILE: "nofile",
    }
    options = [f"--{pairs[which]}={soft}:{hard}" for which, (soft, hard) in _rlimit_pairs(limits)]
    if not options:
        return ()
    prlimit = _prlimit()
    return None if prlimit is None else (prlimit, *options, "--")


_CAP_SYS_RESOURCE = 24


@functools.cache
def can_limit_other_users() -> bool:
    """Whether this process may set the rlimits of a process of another user (it holds
    ``CAP_SYS_RESOURCE``: root usually does, root in a default container does not). Read once."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("CapEff:"):
                    return bool(int(line.split()[1], 16) >> _CAP_SYS_RESOURCE & 1)
    except OSError:
        pass
    return False


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


class Reapable(Protocol):
    """What :func:`kill_process_group` needs of a child: a ``trio.Process`` or a
    :class:`ChildProcess`."""

    @property
    def pid(self) -> int: ...

    @property
    def returncode(self) -> int | None: ...

    async def wait(self) -> int: ...


class ChildProcess:
    """A child started by :func:`spawn_child`, with the parts of ``trio.Process`` the runners use.

    ``returncode`` polls (and so reaps an exited child, like ``trio.Process``); :meth:`wait`
    waits through a pidfd (or polls every millisecond without one).
    """

    __slots__ = ("_pidfd", "_popen", "pid", "stderr", "stdin", "stdout")

    def __init__(
        self,
        popen: subprocess.Popen[bytes],
        stdin: trio.lowlevel.FdStream | None,
        stdout: trio.lowlevel.FdStream,
        stderr: trio.lowlevel.FdStream,
    ) -> None:
        self._popen = popen
        self.pid = popen.pid
        self.stdin = stdin
        self.stdout = stdout
        self.stderr = stderr
        self._pidfd: int | None = None
        with contextlib.suppress(OSError, AttributeError):
            self._pidfd = os.pidfd_open(popen.pid)

    @property
    def returncode(self) -> int | None:
        """The exit status once the child has exited (and is reaped by this very call), else None."""
        code = self._popen.poll()
        if code is not None:
            self._close_pidfd()
        return code

    @property
    def reaped(self) -> bool:
        """Whether the child was reaped already (by :attr:`returncode` or :meth:`wait`): its pid
        — and the process group id it pinned — may then be someone else's. Does not poll."""
        return self._popen.returncode is not None

    async def wait(self) -> int:
        """Wait for the child to exit, reap it and return its status. Always a checkpoint.

        Cancellation: a cancelled wait leaves a running child running and unreaped; a child
        that had exited already is reaped all the same (its status stays in ``returncode``).
        """
        waited = False
        while (code := self._popen.poll()) is None:
            waited = True
            if self._pidfd is not None:
                await trio.lowlevel.wait_readable(self._pidfd)
            else:
                await trio.sleep(0.001)
        self._close_pidfd()
        if not waited:
            await trio.lowlevel.checkpoint()
        return code

    def _close_pidfd(self) -> None:
        if self._pidfd is not None:
            trio.lowlevel.notify_closing(self._pidfd)
            os.close(self._pidfd)
            self._pidfd = None


def spawn_child(
    argv: Sequence[str],
    *,
    stdin_pipe: bool,
    env: Mapping[str, str],
    cwd: str | None,
    pass_fds: Sequence[int] = (),
) -> ChildProcess:
    """Start ``argv`` in a new session with piped stdout/stderr (and stdin if ``stdin_pipe``).

    Runs ``subprocess.Popen`` on the calling thread, blocking it for the spawn itself: without a
    ``preexec_fn`` CPython uses ``vfork``, which takes a fraction of a millisecond — less than
    handing the call to a worker thread as ``trio.lowlevel.open_process`` does. Raises what
    ``Popen`` raises (``OSError``, ``SubprocessError``); nothing is left open then.
    """
    return _child(_popen(argv, stdin_pipe, env, cwd, pass_fds, None))


async def spawn_child_forked(
    argv: Sequence[str],
    *,
    stdin_pipe: bool,
    env: Mapping[str, str],
    cwd: str | None,
    preexec: Callable[[], None],
    pass_fds: Sequence[int] = (),
) -> ChildProcess:
    """:func:`spawn_child` with a ``preexec_fn`` — which means a ``fork``, too slow to block the
    event loop for — on the one long-lived spawning thread of this process (never a Trio worker
    thread: see :class:`_Spawner`).

    Cancellation: not a cancellation point — once asked for, the child is started and returned,
    for the caller to own (its next checkpoint raises the cancellation). Raises what ``Popen``
    raises; nothing is left open then.
    """
    job = functools.partial(_popen, argv, stdin_pipe, env, cwd, pass_fds, preexec)
    return _child(await _SPAWNER.run(job))


def _popen(
    argv: Sequence[str],
    stdin_pipe: bool,
    env: Mapping[str, str],
    cwd: str | None,
    pass_fds: Sequence[int],
    preexec: Callable[[], None] | None,
) -> tuple[subprocess.Popen[bytes], int | None, int, int]:
    """The child, and the parent's ends of its pipes (stdin's, when piped; stdout's; stderr's)."""
    parent_fds: list[int] = []
    child_fds: list[int] = []
    try:
        stdin_r = stdin_w = None
        if stdin_pipe:
            stdin_r, stdin_w = os.pipe2(os.O_CLOEXEC)
            child_fds.append(stdin_r)
            parent_fds.append(stdin_w)
        out_r, out_w = os.pipe2(os.O_CLOEXEC)
        parent_fds.append(out_r)
        child_fds.append(out_w)
        err_r, err_w = os.pipe2(os.O_CLOEXEC)
        parent_fds.append(err_r)
        child_fds.append(err_w)
        popen = subprocess.Popen(
            list(argv),
            stdin=stdin_r if stdin_r is not None else subprocess.DEVNULL,
            stdout=out_w,
            stderr=err_w,
            env=dict(env),
            cwd=cwd,
            start_new_session=True,
            pass_fds=tuple(pass_fds),
            preexec_fn=preexec,
        )
    except BaseException:
        for fd in parent_fds:
            os.close(fd)
        raise
    finally:
        for fd in child_fds:
            os.close(fd)
    return popen, stdin_w, out_r, err_r


def _child(made: tuple[subprocess.Popen[bytes], int | None, int, int]) -> ChildProcess:
    popen, stdin_w, out_r, err_r = made
    return ChildProcess(
        popen,
        trio.lowlevel.FdStream(stdin_w) if stdin_w is not None else None,
        trio.lowlevel.FdStream(out_r),
        trio.lowlevel.FdStream(err_r),
    )


@final
class _Spawner:
    """The thread that forks children which need a ``preexec_fn``, for the life of the process.

    bubblewrap's ``--die-with-parent`` (``PR_SET_PDEATHSIG``) kills the sandbox when the *thread*
    that forked it exits, not the process: a child forked on a Trio worker thread — as
    ``trio.lowlevel.open_process`` forks — was killed when that thread retired after 10 s idle, in
    the middle of its work. This thread never retires (a daemon: it dies with the process, which
    is when the sandboxes should die too)."""

    __slots__ = ("_jobs", "_lock", "_thread")

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    async def run(self, job: Callable[[], T]) -> T:
        """``job()`` on the spawning thread; its result or what it raised. Not a cancellation
        point: it waits for ``job`` however it is cancelled (a fork is quick)."""
        token = trio.lowlevel.current_trio_token()
        done = trio.Event()
        result: list[outcome.Outcome[T]] = []

        def run_job() -> None:
            result.append(outcome.capture(job))
            token.run_sync_soon(done.set)

        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._serve, name="effectagent-spawner", daemon=True
                )
                self._thread.start()
        self._jobs.put(run_job)
        with trio.CancelScope(shield=True):
            await done.wait()
        return result[0].unwrap()

    def _serve(self) -> None:
        while True:
            self._jobs.get()()


_SPAWNER: Final = _Spawner()


async def kill_process_group(process: Reapable, *, grace: float = 0.0) -> None:
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
