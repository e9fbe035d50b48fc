"""Host files of a workload: the artifacts collected after it and the temporary trees it leaves.

Both jobs read or delete trees a workload shaped to its liking, so every path is hostile:

* **No link is ever followed.** Directories are walked through descriptors (``openat`` with
  ``O_NOFOLLOW``, ``scandir`` on the descriptor), so ``ln -s . a`` or ``ln -s / r`` is one skipped
  entry, not an endless or escaping walk, and nothing can be swapped under a path between a check
  and a read. Only regular files are read (opened ``O_NONBLOCK``: a FIFO never blocks).
* **Everything is bounded.** Collection stops at the first of four bounds of
  :class:`~sandbox.SandboxLimits` — directory entries examined, directory depth, bytes read (every
  byte of a collected file is hashed) and seconds — and reports it as an
  :class:`ArtifactLimitExceeded` next to what was collected until then. Directories no
  rule can match below are not entered at all.
* **It never blocks the event loop and is cancellable.** :class:`ArtifactCollector` does the work in
  steps of a few milliseconds; :func:`collect_artifacts` runs each step in a worker thread and
  checkpoints between steps, so a cancellation waits for one step at most, and a cancelled
  collection resumes where it stopped.

Rules are applied in order; each walks its root depth-first with names in sorted order, collects
up to ``max_count`` regular files, and counts as skipped every other match (a link, a special file,
or a file over ``max_count``); a file an earlier rule collected is not collected twice.
"""

from __future__ import annotations

import contextlib
import fnmatch
import hashlib
import os
import shutil
import stat
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Final

import attrs
import trio

from ._command import Artifact, ArtifactLimitExceeded, ArtifactRule, SandboxLimits

__all__ = ["ArtifactCollection", "ArtifactCollector", "collect_artifacts", "remove_tree"]

_STEP_SECONDS: Final = 0.005
_CHUNK: Final = 1 << 20
_DIR_FLAGS: Final = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS: Final = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def remove_tree(path: str) -> None:
    """Remove ``path`` recursively, fixing permissions the workload may have taken away."""

    def fix(func: Callable[..., Any], failed: str, _: Any) -> None:
        parent = os.path.dirname(failed)
        with contextlib.suppress(OSError):
            os.chmod(parent, 0o700)
            if not os.path.islink(failed):
                os.chmod(failed, 0o700)
        func(failed)

    if os.path.lexists(path):
        shutil.rmtree(path, onerror=fix)


# ---- glob matching over path segments -----------------------------------------------------------

_States = frozenset[int]


def _closure(pattern: tuple[str, ...], states: set[int]) -> _States:
    """``states`` plus every state reachable by letting a ``**`` match no segment."""
    todo = list(states)
    while todo:
        state = todo.pop()
        if state < len(pattern) and pattern[state] == "**" and state + 1 not in states:
            states.add(state + 1)
            todo.append(state + 1)
    return frozenset(states)


def _advance(pattern: tuple[str, ...], states: _States, name: str) -> _States:
    """The pattern positions reachable after matching one more path segment ``name``."""
    following: set[int] = set()
    for state in states:
        if state == len(pattern):
            continue
        part = pattern[state]
        if part == "**":
            following.add(state)
        elif fnmatch.fnmatchcase(name, part):
            following.add(state + 1)
    return _closure(pattern, following)


# ---- the collector ------------------------------------------------------------------------------


@attrs.frozen
class ArtifactCollection:
    """What a collection produced: the artifacts, the skipped matches and the bound that stopped it
    (``None`` when it finished)."""

    artifacts: tuple[Artifact, ...]
    skipped: int
    stopped: ArtifactLimitExceeded | None


class _Stop(Exception):
    def __init__(self, error: ArtifactLimitExceeded) -> None:
        self.error = error


@attrs.define
class _Directory:
    """A directory being walked: its descriptor, its sandbox path and the names left to visit."""

    fd: int
    path: str
    depth: int
    states: _States
    names: Iterator[tuple[str, bool, bool, bool]]


@attrs.define
class _Reading:
    """A regular file being read: where it goes and what is read so far."""

    fd: int
    path: str
    max_bytes: int
    digest: Any = attrs.field(factory=hashlib.sha256)
    head: bytearray = attrs.field(factory=bytearray)
    size: int = 0


class ArtifactCollector:
    """Collects the artifacts of ``rules`` in bounded, resumable steps (see the module notes).

    ``roots`` maps a rule's root to ``(sandbox_path, host)``, ``host`` being a path or a
    descriptor of the directory (``O_PATH`` will do); it is trusted (the runner made it or checked
    it), everything below it is not. ``clock`` measures the
    ``artifact_seconds`` bound (monotonic seconds). Blocking I/O: run :meth:`step` off the event
    loop, and :meth:`close` the collector when done with it.
    """

    def __init__(
        self,
        rules: tuple[ArtifactRule, ...],
        roots: Mapping[str | None, tuple[str, str | int]],
        limits: SandboxLimits,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._rules = list(rules)
        self._roots = dict(roots)
        self._limits = limits
        self._clock = clock
        self._deadline: float | None = None
        self._artifacts: list[Artifact] = []
        self._skipped = 0
        self._seen: set[str] = set()
        self._entries = 0
        self._bytes = 0
        self._rule: ArtifactRule | None = None
        self._pattern: tuple[str, ...] = ()
        self._count = 0
        self._stack: list[_Directory] = []
        self._reading: _Reading | None = None
        self._stopped: ArtifactLimitExceeded | None = None
        self._done = not rules

    @property
    def done(self) -> bool:
        """Whether the collection finished or stopped at a bound."""
        return self._done

    def result(self) -> ArtifactCollection:
        """What was collected so far (all of it once :attr:`done`)."""
        return ArtifactCollection(tuple(self._artifacts), self._skipped, self._stopped)

    def step(self, seconds: float = _STEP_SECONDS) -> bool:
        """Work for about ``seconds`` (at least one unit of work); True once :attr:`done`."""
        if self._deadline is None:
            self._deadline = self._clock() + self._limits.artifact_seconds
        until = time.monotonic() + seconds
        try:
            while not self._done:
                self._work()
                if time.monotonic() >= until:
                    break
        except _Stop as stop:
            self._stopped = stop.error
            self.close()
        return self._done

    def close(self) -> None:
        """Close every descriptor still open and end the collection. Idempotent."""
        self._done = True
        if self._reading is not None:
            os.close(self._reading.fd)
            self._reading = None
        while self._stack:
            os.close(self._stack.pop().fd)

    # ---- one unit of work ---------------------------------------------------------------------

    def _work(self) -> None:
        self._check_time()
        if self._reading is not None:
            self._read_chunk(self._reading)
        elif self._stack:
            self._visit_next(self._stack[-1])
        elif self._rules:
            self._start_rule(self._rules.pop(0))
        else:
            self._done = True

    def _stop(self, limit: str, bound: float, path: str) -> _Stop:
        return _Stop(ArtifactLimitExceeded(limit, bound, path))

    def _check_time(self) -> None:
        assert self._deadline is not None
        if self._clock() > self._deadline:
            top = self._stack[-1].path if self._stack else ""
            raise self._stop("artifact_seconds", self._limits.artifact_seconds, top)

    def _start_rule(self, rule: ArtifactRule) -> None:
        sandbox_root, host_root = self._roots[rule.root]
        self._rule = rule
        self._pattern = tuple(part for part in rule.glob.split("/") if part not in ("", "."))
        self._count = 0
        try:
            if isinstance(host_root, int):
                fd = os.open(".", _DIR_FLAGS, dir_fd=host_root)
            else:
                fd = os.open(host_root, _DIR_FLAGS)
        except OSError:
            return  # the root is gone or not a directory: nothing to collect under it
        self._push(fd, sandbox_root, 0, _closure(self._pattern, {0}))

    def _push(self, fd: int, path: str, depth: int, states: _States) -> None:
        budget = self._limits.artifact_entries - self._entries
        listed: list[tuple[str, bool, bool, bool]] = []
        try:
            with os.scandir(fd) as entries:
                for entry in entries:
                    if len(listed) >= budget:
                        raise self._stop("artifact_entries", self._limits.artifact_entries, path)
                    listed.append(
                        (
                            entry.name,
                            entry.is_dir(follow_symlinks=False),
                            entry.is_file(follow_symlinks=False),
                            entry.is_symlink(),
                        )
                    )
        except OSError:
            listed = []  # unreadable (permissions taken away): nothing under it is collected
        except _Stop:
            os.close(fd)
            raise
        listed.sort()
        self._entries += len(listed)
        self._stack.append(_Directory(fd, path, depth, states, iter(listed)))

    def _visit_next(self, directory: _Directory) -> None:
        entry = next(directory.names, None)
        if entry is None:
            os.close(self._stack.pop().fd)
            return
        name, is_dir, is_file, is_link = entry
        states = _advance(self._pattern, directory.states, name)
        if not states:
            return
        path = f"{directory.path.rstrip('/')}/{name}"
        if len(self._pattern) in states and not is_dir:
            self._match(directory.fd, name, path, is_file and not is_link)
        if is_dir and any(state < len(self._pattern) for state in states):
            if directory.depth + 1 > self._limits.artifact_depth:
                raise self._stop("artifact_depth", self._limits.artifact_depth, path)
            try:
                fd = os.open(name, _DIR_FLAGS, dir_fd=directory.fd)
            except OSError:
                return  # replaced by a link or removed: never followed
            self._push(fd, path, directory.depth + 1, states)

    def _match(self, parent: int, name: str, path: str, regular: bool) -> None:
        rule = self._rule
        assert rule is not None
        if path in self._seen:
            return  # an earlier rule has it
        if not regular or self._count >= rule.max_count:
            self._skipped += 1
            return
        try:
            fd = os.open(name, _FILE_FLAGS, dir_fd=parent)
        except OSError:
            self._skipped += 1
            return
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            os.close(fd)
            self._skipped += 1
            return
        if self._bytes + info.st_size > self._limits.artifact_bytes:
            os.close(fd)
            raise self._stop("artifact_bytes", self._limits.artifact_bytes, path)
        self._seen.add(path)
        self._count += 1
        self._reading = _Reading(fd, path, rule.max_bytes)

    def _read_chunk(self, reading: _Reading) -> None:
        room = self._limits.artifact_bytes - self._bytes
        try:
            chunk = os.read(reading.fd, min(_CHUNK, room + 1))
        except OSError:
            chunk = b""
        if len(chunk) > room:  # the file grew past the byte bound while being read
            raise self._stop("artifact_bytes", self._limits.artifact_bytes, reading.path)
        if chunk:
            self._bytes += len(chunk)
            reading.size += len(chunk)
            reading.digest.update(chunk)
            if len(reading.head) < reading.max_bytes:
                reading.head += chunk[: reading.max_bytes - len(reading.head)]
            return
        os.close(reading.fd)
        self._reading = None
        head = bytes(reading.head)
        self._artifacts.append(
            Artifact(
                reading.path,
                reading.size,
                reading.digest.hexdigest(),
                head,
                reading.size > len(head),
            )
        )


async def collect_artifacts(collector: ArtifactCollector) -> ArtifactCollection:
    """Run ``collector`` to its end, one step at a time in a worker thread, and return its result.

    Cancellation: a checkpoint between steps; a cancellation waits for the current step (a few
    milliseconds) and leaves the collector where it stopped, so calling this again resumes it.
    """
    while not collector.done:
        await trio.to_thread.run_sync(collector.step)
    return collector.result()
