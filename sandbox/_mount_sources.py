"""Opening the host side of a mount without following a link a workload could have planted.

A writable mount outlives the run that wrote it. If one run leaves ``data/inputs -> /host/secret``
and a later request mounts ``…/data/inputs``, binding the path as text would mount the secret. So
a mount source is resolved here one component at a time, each opened with ``O_NOFOLLOW``: a
symbolic link is followed only when the workload's user could neither have made it (it does not own
it) nor replaced it (it cannot write the directory holding it) — ``/bin -> usr/bin`` on a root-owned
``/`` is fine, a link in a directory a workload wrote is refused with an error naming the link.
The result is an ``O_PATH`` descriptor of what was checked. bubblewrap mounts it with
``--bind-fd``, which mounts the descriptor's path and refuses to go on if that path no longer
leads to the very same file: nothing can be swapped between the check and the mount. Since
bubblewrap runs as the workload's user, that user must be able to walk the path
(:func:`reachable_problem`).
"""

from __future__ import annotations

import contextlib
import os
import stat

import attrs

from ._identity import WorkloadUser

__all__ = ["MountSourceRefused", "open_mount_source", "reachable_problem"]

_MAX_LINKS = 40
_FLAGS = os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC


@attrs.frozen
class MountSourceRefused(Exception):
    """``path`` cannot be used as a mount source; ``reason`` says why (for the caller's error)."""

    path: str
    reason: str

    def __str__(self) -> str:
        return f"{self.path!r}: {self.reason}"


def open_mount_source(path: str, user: WorkloadUser) -> int:
    """An ``O_PATH`` descriptor of the host ``path`` (absolute), resolved without following any
    link ``user`` could have planted. The caller owns (and must close) the descriptor.

    Raises :class:`MountSourceRefused` for a missing path, a component that is not a directory or
    cannot be opened (permission denied), a planted link or a loop of links. Blocking (a few
    system calls per component).
    """
    walk = _Walk(path, user)
    try:
        return walk.run()
    except BaseException:
        with contextlib.suppress(OSError):
            os.close(walk.current)
        raise


class _Walk:
    """One resolution: ``current`` is the descriptor of the directory reached so far."""

    def __init__(self, path: str, user: WorkloadUser) -> None:
        self.path = path
        self.user = user
        self.current = os.open("/", _FLAGS | os.O_DIRECTORY)
        self.shown = ""
        self.pending = [part for part in reversed(path.split("/")) if part]
        self.links = 0

    def run(self) -> int:
        while self.pending:
            name = self.pending.pop()
            if name != ".":
                self._enter(name)
        return self.current

    def _enter(self, name: str) -> None:
        try:
            child = os.open(name, _FLAGS, dir_fd=self.current)
        except FileNotFoundError:
            raise MountSourceRefused(self.path, f"{self.shown}/{name} does not exist") from None
        except NotADirectoryError:
            raise MountSourceRefused(self.path, f"{self.shown or '/'} is not a directory") from None
        except OSError as error:  # EACCES, say: never a bare OSError out of a request check
            raise MountSourceRefused(
                self.path, f"{self.shown}/{name} cannot be opened: {error.strerror}"
            ) from None
        info = os.fstat(child)
        if not stat.S_ISLNK(info.st_mode):
            os.close(self.current)
            self.current = child
            self.shown = os.path.normpath(f"{self.shown}/{name}")
            return
        os.close(child)
        self._follow(name, info)

    def _follow(self, name: str, link: os.stat_result) -> None:
        if self.user.could_plant(link, os.fstat(self.current)):
            raise MountSourceRefused(
                self.path,
                f"{self.shown}/{name} is a symbolic link the workload's user (uid {self.user.uid}) "
                "could have planted; mount sources never follow such links (mount the target "
                "itself)",
            )
        self.links += 1
        if self.links > _MAX_LINKS:
            raise MountSourceRefused(self.path, "too many levels of symbolic links")
        try:
            target = os.readlink(name, dir_fd=self.current)
        except OSError as error:  # a /proc/<pid>/root of a process this one may not inspect
            raise MountSourceRefused(
                self.path, f"{self.shown}/{name} cannot be read: {error.strerror}"
            ) from None
        self.pending.extend(part for part in reversed(target.split("/")) if part)
        if target.startswith("/"):
            os.close(self.current)
            self.current = os.open("/", _FLAGS | os.O_DIRECTORY)
            self.shown = ""


def reachable_problem(fd: int, user: WorkloadUser) -> str | None:
    """Why ``user`` could not reach the file of ``fd`` (from :func:`open_mount_source`) by its
    path, or None when it can."""
    path = os.readlink(f"/proc/self/fd/{fd}")
    blocked = user.first_unreachable(path)
    if blocked is None:
        return None
    return f"{path!r} is out of reach of the workload's user {user.uid}:{user.gid}: it cannot pass {blocked!r}"
