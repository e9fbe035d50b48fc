"""Sandbox test fixtures. The security suite must run, never skip: bubblewrap is installed here when
it is missing (as root, through apt-get, like ``make sysdeps``), and otherwise collection fails
loudly.

Leftover checks judge only what a test started itself (other test runs and other programs may
share the machine): a workload is tagged with a unique marker in its argv and :func:`assert_gone`
scans ``/proc`` for it; what an execution held is read through its public ``owned()`` while it runs
(:func:`remember` keeps each pid with its start time, so a recycled pid is never blamed), and
afterwards each of those must be gone, as must any process descended from the test process.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import attrs
import pytest

from sandbox import BubblewrapSandbox, LocalProcessSandbox, OwnedResources
from sandbox._isolation import probe_host
from sandbox._workload_files import remove_tree


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


def proc_stat(pid: int) -> list[str] | None:
    """``/proc/<pid>/stat`` after the command name (state, ppid, ...), or None if gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def start_time(pid: int) -> str | None:
    """When ``pid`` started (clock ticks since boot): with the pid, it names one process."""
    fields = proc_stat(pid)
    return None if fields is None else fields[19]


def descendants(root: int) -> set[int]:
    """Every process (alive or zombie) descended from ``root``."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (fields := proc_stat(int(entry))) is not None:
            parents[int(entry)] = int(fields[1])
    found: set[int] = set()
    frontier = {root}
    while frontier:
        frontier = {pid for pid, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


@attrs.define
class Held:
    """What workloads held while a test watched: each pid with its start time, cgroups, paths."""

    processes: dict[int, str] = attrs.field(factory=dict)
    cgroups: set[str] = attrs.field(factory=set)
    paths: set[str] = attrs.field(factory=set)

    def note(self, owned: OwnedResources) -> None:
        """Remember everything in ``owned`` (a snapshot taken while it was held)."""
        for pid in owned.processes:
            started = start_time(pid)
            if started is not None:
                self.processes.setdefault(pid, started)
        self.cgroups |= owned.cgroups
        self.paths |= owned.paths

    def leftovers(self) -> list[str]:
        """Everything remembered that still exists (a pid counts only with its start time).

        A process that is a zombie of someone else's (bubblewrap's sandbox init, orphaned when
        bwrap exits, waiting for the host's init to reap it), or one that has begun to exit (a
        killed fork-bomb child past its cgroup, still "running" its exit on a loaded machine), is
        dead and holds nothing: not a leftover. Zombies of this test process are (see
        :func:`assert_gone`).
        """
        problems = [
            f"pid {pid} still exists ({' '.join((proc_stat(pid) or [])[:2])})"
            for pid, t in self.processes.items()
            if _held(pid, t)
        ]
        problems += [
            f"cgroup {path} still exists" for path in self.cgroups if os.path.lexists(path)
        ]
        problems += [f"{path} still exists" for path in self.paths if os.path.lexists(path)]
        return problems


#: The kernel's flag of a task that has begun to exit (``PF_EXITING``, in /proc/<pid>/stat's
#: ``flags``): it was killed (or returned), has left its cgroups and holds nothing any more; on a
#: loaded machine it may still show as running for a moment on its way to being a zombie.
_PF_EXITING = 0x4


def _held(pid: int, started: str) -> bool:
    fields = proc_stat(pid)
    if fields is None or fields[19] != started:
        return False
    if int(fields[6]) & _PF_EXITING:
        return False
    return fields[0] != "Z" or int(fields[1]) == os.getpid()


def remember(owned: OwnedResources) -> Held:
    """A :class:`Held` holding ``owned``."""
    held = Held()
    held.note(owned)
    return held


def assert_gone(marker: str, held: Held | None = None) -> None:
    """Nothing of one execution remains: no process carrying ``marker``, nothing of what it held,
    and no process descended from this test process (alive or unreaped)."""
    assert processes_with(marker) == []
    if held is not None:
        assert held.leftovers() == []
    assert descendants(os.getpid()) == set()


def give_to_workload(sandbox: BubblewrapSandbox, path: Path) -> Path:
    """Create the directory ``path`` if needed and make it usable by ``sandbox``'s workload user,
    as a caller must for a read-write mount."""
    path.mkdir(exist_ok=True)
    identity = sandbox.identity
    if identity is not None:
        os.chown(path, identity.uid, identity.gid)
    return path


@pytest.fixture
def shared_tmp() -> Iterator[Path]:
    """A fresh directory in ``/tmp`` any user can reach (pytest's ``tmp_path`` sits under a
    ``0700`` directory that a sandbox's unprivileged workload user could not pass), removed
    afterwards whatever the workload left in it."""
    path = Path(tempfile.mkdtemp(prefix="effectagent-test-", dir="/tmp"))
    path.chmod(0o755)
    yield path
    remove_tree(str(path))


@pytest.fixture(scope="session")
def bwrap_sandbox() -> BubblewrapSandbox:
    """A bubblewrap sandbox for this host (fails, never skips, when unusable)."""
    return BubblewrapSandbox()


@pytest.fixture
def local_sandbox() -> LocalProcessSandbox:
    """The unisolated local runner."""
    return LocalProcessSandbox()
