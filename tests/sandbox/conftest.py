"""Sandbox test fixtures. The security suite must run, never skip: bubblewrap is installed here when
it is missing (as root, through apt-get, like ``make sysdeps``), and otherwise collection fails
loudly.

Leftover checks are precise rather than global (other test runs may share the machine): a workload
is tagged with a unique marker in its argv and :func:`assert_gone` scans ``/proc`` for it; the
paths an execution created (workdir, cgroups) are listed by ``execution.owned_paths``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid

import pytest
import trio

from sandbox import BubblewrapSandbox, LocalProcessSandbox, probe_host


def _ensure_bwrap() -> None:
    if shutil.which("bwrap"):
        return
    if os.geteuid() != 0:
        raise RuntimeError(
            "bubblewrap (bwrap) is required by the sandbox security suite: run `make sysdeps`"
        )
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run(["apt-get", "update", "-qq"], check=True, env=env)
    subprocess.run(["apt-get", "install", "-y", "-qq", "bubblewrap"], check=True, env=env)
    probe_host.cache_clear()
    if not shutil.which("bwrap"):
        raise RuntimeError("installing bubblewrap did not put bwrap on PATH")


_ensure_bwrap()

PYTHON = "/usr/bin/python3"
"""The system interpreter: visible inside bubblewrap's read-only /usr (the venv is not)."""


def new_marker() -> str:
    """A unique token to put in a workload's argv."""
    return f"eamark-{uuid.uuid4().hex}"


def processes_with(marker: str) -> list[int]:
    """Pids whose command line contains ``marker`` (zombies have none and are not listed)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                if marker.encode() in f.read():
                    found.append(int(entry))
        except OSError:
            continue
    return found


async def wait_for_processes(marker: str, count: int, timeout: float = 3.0) -> None:
    """Wait until at least ``count`` processes carry ``marker`` (fails after ``timeout``)."""
    with trio.fail_after(timeout):
        while len(processes_with(marker)) < count:  # noqa: ASYNC110 (polling /proc: no event)
            await trio.sleep(0.01)


def is_unreaped_child(pid: int) -> bool:
    """Whether ``pid`` still exists as a process of ours (running or zombie)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return False
    return int(fields[1]) == os.getpid()  # ppid


def assert_gone(marker: str, *, pid: int | None = None, paths: tuple[str, ...] = ()) -> None:
    """Nothing of one execution remains: no process, no unreaped child, no temp path."""
    assert processes_with(marker) == []
    if pid is not None:
        assert not is_unreaped_child(pid)
    for path in paths:
        assert not os.path.exists(path), path


@pytest.fixture(scope="session")
def bwrap_sandbox() -> BubblewrapSandbox:
    """A bubblewrap sandbox for this host (fails, never skips, when unusable)."""
    return BubblewrapSandbox()


@pytest.fixture
def local_sandbox() -> LocalProcessSandbox:
    """The unisolated local runner."""
    return LocalProcessSandbox()
