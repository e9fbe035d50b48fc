"""The in-loop child spawner used by the command runners (``spawn_child`` / ``ChildProcess``)."""

from __future__ import annotations

import os
import signal
import threading

import pytest
import trio
import trio.testing

from sandbox._process_control import (
    ChildProcess,
    kill_process_group,
    spawn_child,
    spawn_child_forked,
)


def _open_fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


def _status(child: ChildProcess) -> int | None:
    return child.returncode  # a call: each read polls the child anew


async def test_a_child_streams_its_output_and_reports_its_status() -> None:
    child = spawn_child(
        ["/bin/sh", "-c", "read line; echo out:$line; echo err >&2; exit 3"],
        stdin_pipe=True,
        env={"PATH": "/usr/bin:/bin"},
        cwd="/",
    )
    assert child.stdin is not None
    await child.stdin.send_all(b"hi\n")
    await child.stdin.aclose()
    out = b""
    while chunk := await child.stdout.receive_some(1024):
        out += chunk
    err = await child.stderr.receive_some(1024)
    assert (out, err) == (b"out:hi\n", b"err\n")
    assert await child.wait() == 3
    assert child.returncode == 3
    assert await child.wait() == 3  # reaped once, reported again
    await child.stdout.aclose()
    await child.stderr.aclose()


async def test_a_child_leads_its_own_process_group_and_is_killed_with_it() -> None:
    child = spawn_child(["/bin/sleep", "30"], stdin_pipe=False, env={}, cwd=None)
    assert child.stdin is None
    assert os.getpgid(child.pid) == child.pid
    assert _status(child) is None
    await kill_process_group(child)
    assert _status(child) == -signal.SIGKILL
    await child.stdout.aclose()
    await child.stderr.aclose()


async def test_a_cancelled_wait_leaves_the_child_running(
    autojump_clock: trio.testing.MockClock,
) -> None:
    child = spawn_child(["/bin/sleep", "30"], stdin_pipe=False, env={}, cwd=None)
    with trio.move_on_after(5) as scope:  # mock time: cancelled as soon as the wait blocks
        await child.wait()
    assert scope.cancelled_caught
    assert _status(child) is None
    await kill_process_group(child)
    assert _status(child) is not None
    await child.stdout.aclose()
    await child.stderr.aclose()


def test_a_failed_spawn_leaves_no_descriptor_open() -> None:
    before = _open_fds()
    with pytest.raises(FileNotFoundError):
        spawn_child(["/nonexistent/program"], stdin_pipe=True, env={}, cwd=None)
    assert _open_fds() == before


async def test_a_child_needing_a_preexec_is_forked_on_a_thread_that_never_retires() -> None:
    """bubblewrap's --die-with-parent follows the thread that forked it: a sandbox forked on a
    Trio worker thread was killed when that thread retired, 10 s idle (a Code Mode pass waiting
    on slow tools crashed after 10 s, and warm workloads died in the pool). A child that needs a
    preexec_fn is forked on one daemon thread of this process instead, the same every time."""
    forked_on: list[str] = []
    for _ in range(2):
        read, write = os.pipe()

        def preexec(fd: int = write) -> None:  # runs in the child: the forking thread's copy
            os.write(fd, threading.current_thread().name.encode())

        try:
            child = await spawn_child_forked(
                ["/bin/true"], stdin_pipe=False, env={}, cwd="/", preexec=preexec
            )
        finally:
            os.close(write)
        forked_on.append(os.read(read, 100).decode())
        os.close(read)
        assert await child.wait() == 0
        await child.stdout.aclose()
        await child.stderr.aclose()
    assert forked_on == ["effectagent-spawner", "effectagent-spawner"]
    (spawner,) = [t for t in threading.enumerate() if t.name == "effectagent-spawner"]
    assert spawner.daemon


async def test_a_failed_forked_spawn_raises_and_leaves_no_descriptor_open() -> None:
    before = _open_fds()
    with pytest.raises(FileNotFoundError):
        await spawn_child_forked(
            ["/no/such/program"], stdin_pipe=True, env={}, cwd="/", preexec=lambda: None
        )
    assert _open_fds() == before
