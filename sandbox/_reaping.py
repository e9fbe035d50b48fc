"""Reaping the processes of a workload that end up as this process's children without being spawned
by it.

Bubblewrap forks the sandbox's init (its pid 1) and, once the command has exited, exits without
waiting for it; the init, killed by ``--die-with-parent``, is then an orphan. So is anything a
workload of the local runner left behind when its parent exited. The kernel gives orphans to the
nearest ancestor that is a child subreaper, else to the init of the pid namespace. Normally that is
someone else, who reaps them. But when this very process is that reaper — an application running as
PID 1 in a container without an init, or a supervisor that set ``PR_SET_CHILD_SUBREAPER`` — the
orphans become its children, and nobody but the sandbox knows to reap them: each execution would
leave one zombie forever. The helpers here reap exactly those, never a child someone else spawned:

* bubblewrap's init is identified by the ``child-pid`` bubblewrap reports while its child is still
  blocked before the command runs, and held through a pidfd from then on (:func:`watch_child_of`),
  so a recycled pid can never be mistaken for it;
* orphans of the local runner are found by session: the workload leads its own session, and a
  child of ours in that session, after its leader is reaped, can only be one of its descendants.

Where the host ends a workload itself, the runners avoid the orphan altogether by killing
bubblewrap's init first (``_bwrap_execution``, ``_deno_workload``): bwrap then reaps it. What is
left for these helpers is a command that exits by itself, and whatever a workload orphaned — and a
bwrap stopped before this process held its init (a start cancelled, or a bwrap too slow to report
the init within the wall clock). Once bwrap is reaped, the init's pid is read from what bwrap
wrote (:func:`adopted_init`); a command runner's init that bwrap forked but did not report yet
is still in bwrap's session, and reaped by session (:func:`reap_adopted_in_session`).
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import json
import os
import signal

import trio

__all__ = [
    "adopted_init",
    "adopts_orphans",
    "reap_adopted_in_session",
    "reap_if_adopted",
    "watch_child_of",
]

_PR_GET_CHILD_SUBREAPER = 37
_REAP_WAIT = 2.0
"""Seconds to wait for an adopted, SIGKILLed process to exit before leaving it (never expected)."""


@functools.cache
def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def adopts_orphans() -> bool:
    """Whether orphaned descendants of this process become its children: it is PID 1 of its pid
    namespace, or a child subreaper. Cheap (one ``prctl``); asked again each time, since an
    application may become a subreaper at any moment."""
    if os.getpid() == 1:
        return True
    flag = ctypes.c_int(0)
    if _libc().prctl(_PR_GET_CHILD_SUBREAPER, ctypes.byref(flag), 0, 0, 0) != 0:
        return False
    return bool(flag.value)


def _stat_fields(pid: int) -> list[bytes] | None:
    """``/proc/<pid>/stat`` after the command name: state, ppid, pgrp, session, ..."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None


def watch_child_of(pid: int, parent: int) -> int | None:
    """A pidfd for ``pid`` if, once it is open, ``pid`` is a child of ``parent``; else ``None``.

    Call it while ``parent`` is alive and not yet reaped: its children cannot be reparented then,
    so a matching parent proves the pidfd refers to that child and not to a recycled pid.
    """
    try:
        pidfd = os.pidfd_open(pid)
    except OSError:
        return None
    fields = _stat_fields(pid)
    if fields is None or int(fields[1]) != parent:
        os.close(pidfd)
        return None
    return pidfd


def _is_namespace_init(pid: int) -> bool:
    """Whether ``pid`` is the init (pid 1) of a pid namespace below this one — or was: a dead
    init's namespace is gone, and its zombie shows only its pid here."""
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            for line in f:
                if line.startswith(b"State:"):
                    if line.split()[1:2] == [b"Z"]:
                        return True
                elif line.startswith(b"NSpid:"):
                    ids = line.split()[1:]
                    return len(ids) > 1 and ids[-1] == b"1"
    except OSError:
        return False
    return False


def adopted_init(status: bytes) -> int | None:
    """A pidfd for bubblewrap's sandbox init if this process adopted it; else ``None``.

    For a bwrap stopped before its ``child-pid`` was read (the start was cancelled, or bwrap was
    too slow to report it within the wall clock): ``status`` is all bwrap wrote on its status
    pipe, read after bwrap was reaped. Its init, if bwrap got as far as forking it, was then
    reparented — to this process when it :func:`adopts_orphans`, and then nobody else reaps it,
    so its pid cannot have been recycled unless this process reaped it. It is taken only if it is
    this process's child and the init of a pid namespace (or a zombie: a dead init's namespace is
    gone).
    """
    if not adopts_orphans():
        return None
    for line in status.splitlines():
        try:
            pid = json.loads(line).get("child-pid")
        except (ValueError, AttributeError):
            continue
        if isinstance(pid, int) and pid > 0:
            pidfd = watch_child_of(pid, os.getpid())
            if pidfd is not None and not _is_namespace_init(pid):
                os.close(pidfd)
                return None
            return pidfd
    return None


async def reap_if_adopted(pidfd: int) -> None:
    """Reap the process of ``pidfd`` if it has become this process's child, then close ``pidfd``.

    Call it after the process's parent has been reaped (the orphan has been reparented by then).
    When it is someone else's child, only the pidfd is closed. An adopted process still running is
    waited for up to two seconds (it was SIGKILLed with its parent; it exits at once).
    Cancellation: shielded, bounded by that wait.
    """
    with trio.CancelScope(shield=True):
        try:
            with trio.move_on_after(_REAP_WAIT):
                while True:
                    try:
                        flags = os.WEXITED | os.WNOHANG
                        if os.waitid(os.P_PIDFD, pidfd, flags) is not None:  # noqa: ASYNC222
                            return  # (WNOHANG: never blocks)
                    except ChildProcessError:
                        return  # not ours: its reaper reaps it
                    await trio.lowlevel.wait_readable(pidfd)
        finally:
            trio.lowlevel.notify_closing(pidfd)
            os.close(pidfd)


async def reap_adopted_in_session(session: int) -> None:
    """Reap every child of this process that belongs to ``session`` (a workload that was started as
    a session leader, its leader already reaped). Does nothing unless :func:`adopts_orphans`.

    Each one is a descendant of the workload that outlived its own parent; it is SIGKILLed (it may
    have left the workload's process group, never its session) and reaped. Cancellation: shielded,
    bounded (two seconds at most per process).
    """
    if not adopts_orphans():
        return
    me = os.getpid()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        fields = _stat_fields(int(entry))
        if fields is None or int(fields[1]) != me or int(fields[3]) != session:
            continue
        try:
            pidfd = os.pidfd_open(int(entry))  # our unreaped child: its pid cannot be recycled
        except OSError:
            continue
        with contextlib.suppress(OSError):
            signal.pidfd_send_signal(pidfd, signal.SIGKILL)
        await reap_if_adopted(pidfd)
