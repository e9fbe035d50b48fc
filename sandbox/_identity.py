"""Who a workload is on the host: an unprivileged user, never host root.

When this process runs as root (as in most containers), a workload that kept uid 0 would be host
root for everything it writes through a mount: ``chmod 6755`` on a copied interpreter in a
writable mount leaves a setuid-root binary on the host. So the bubblewrap-based runners drop to an
unprivileged :class:`WorkloadIdentity` in the child, before bubblewrap starts, the way ``setpriv``
does (supplementary groups cleared, then gid, then uid); bubblewrap then builds the user namespace
as that user, and every file the workload creates on the host belongs to it. When this process is
not root the workload runs as this process's own user: it cannot gain anything the caller lacks.

Dropping in the spawned child is done by exec'ing ``setpriv`` in front of ``bwrap`` when the host
has it (a ``vfork`` spawn stays possible: about 2 ms), otherwise with a ``preexec_fn`` (which
forces ``fork``: several milliseconds in a large process). Both leave the workload with no
capability, no supplementary group and no way back.

The access checks here judge what that identity may do with a host path from its mode bits, so
that a mount it could not use is refused before anything runs, with the reason and the fix.
"""

from __future__ import annotations

import errno
import functools
import os
import shutil
import stat
from collections.abc import Callable

import attrs

__all__ = [
    "NOBODY",
    "WorkloadIdentity",
    "WorkloadUser",
    "drop_argv",
    "drop_in_child",
    "identity_note",
    "resolve_identity",
    "workload_user",
]

NOBODY = 65534
"""The conventional unprivileged uid and gid (``nobody`` / ``nogroup``), the default identity."""


def _unprivileged(instance: object, attribute: attrs.Attribute[int], value: int) -> None:
    if type(value) is not int or not 0 < value < 2**32 - 1:
        raise ValueError(
            f"{attribute.name} must be an unprivileged id (1 to 2**32 - 2), got {value!r}"
        )


@attrs.frozen
class WorkloadIdentity:
    """The host uid and gid a workload runs as when this process is root (never 0)."""

    uid: int = attrs.field(validator=_unprivileged)
    gid: int = attrs.field(validator=_unprivileged)

    @classmethod
    def nobody(cls) -> WorkloadIdentity:
        """``65534:65534``: owns nothing on a conventional host. The default."""
        return cls(NOBODY, NOBODY)


def resolve_identity(requested: WorkloadIdentity | None) -> WorkloadIdentity | None:
    """The identity to drop to: ``requested`` (default :meth:`WorkloadIdentity.nobody`) when this
    process is root; ``None`` when it is not (the workload runs as this process's user).

    Raises ``ValueError`` when a non-root process asks for another identity: it cannot switch to it.
    """
    if os.geteuid() == 0:
        return requested or WorkloadIdentity.nobody()
    if requested is not None and (requested.uid, requested.gid) != (os.geteuid(), os.getegid()):
        raise ValueError(
            "only a root process can run workloads as another user; this process is "
            f"uid {os.geteuid()}, asked for {requested.uid}:{requested.gid}"
        )
    return None


@attrs.frozen
class WorkloadUser:
    """The user a workload's file accesses are checked against on the host."""

    uid: int
    gid: int
    groups: frozenset[int]

    def _bits(self, info: os.stat_result) -> int:
        """The permission bits (``rwx``) that apply to this user for the file of ``info``."""
        if info.st_uid == self.uid:
            return (info.st_mode >> 6) & 0o7
        if info.st_gid in self.groups:
            return (info.st_mode >> 3) & 0o7
        return info.st_mode & 0o7

    def can_use(self, info: os.stat_result, *, write: bool) -> bool:
        """Whether this user may read (and with ``write``, modify) the file of ``info``; for a
        directory also search it. Judged from the mode bits: ACLs are not consulted."""
        want = 0o6 if write else 0o4
        if stat.S_ISDIR(info.st_mode):
            want |= 0o1
        return self._bits(info) & want == want

    def first_unreachable(self, path: str) -> str | None:
        """The first directory on the way to ``path`` (absolute, without links) that this user
        cannot pass through, or None when it can reach ``path``."""
        parts = [part for part in path.split("/") if part]
        for depth in range(len(parts)):
            directory = "/" + "/".join(parts[:depth])
            if not self._bits(os.stat(directory)) & 0o1:
                return directory
        return None

    def could_plant(self, link: os.stat_result, directory: os.stat_result) -> bool:
        """Whether this user could have made (or replaced) ``link`` in ``directory``."""
        return link.st_uid == self.uid or self.can_use(directory, write=True)


def workload_user(identity: WorkloadIdentity | None) -> WorkloadUser:
    """The host user of workloads run with ``identity`` (``None``: this process's own user)."""
    if identity is not None:
        return WorkloadUser(identity.uid, identity.gid, frozenset({identity.gid}))
    groups = frozenset({os.getegid(), *os.getgroups()})
    return WorkloadUser(os.geteuid(), os.getegid(), groups)


def identity_note(identity: WorkloadIdentity | None) -> str:
    """The posture note saying whom a workload runs as on the host."""
    if identity is None:
        return "identity: the workload runs as this process's own (non-root) user"
    return (
        f"identity: the workload runs as host uid {identity.uid}, gid {identity.gid}, without "
        "supplementary groups or capabilities; what it writes through a mount is owned by it"
    )


@functools.cache
def _setpriv() -> str | None:
    return shutil.which("setpriv")


def drop_argv(identity: WorkloadIdentity | None) -> tuple[str, ...] | None:
    """The argv prefix that runs a command as ``identity``: ``()`` when no drop is needed, ``None``
    when this host has no ``setpriv`` (use :func:`drop_in_child` as a ``preexec_fn`` instead)."""
    if identity is None:
        return ()
    setpriv = _setpriv()
    if setpriv is None:
        return None
    return (
        setpriv,
        f"--reuid={identity.uid}",
        f"--regid={identity.gid}",
        "--clear-groups",
        "--",
    )


def drop_in_child(identity: WorkloadIdentity) -> Callable[[], None]:
    """A ``preexec_fn`` step that switches the child to ``identity`` for good.

    Groups first (only root may change them), then the gid, then the uid; with every uid no longer
    0 the kernel clears all capabilities. Raises ``OSError`` in the child, which aborts the spawn.
    """
    uid, gid = identity.uid, identity.gid

    def drop() -> None:
        os.setgroups([])
        os.setresgid(gid, gid, gid)
        os.setresuid(uid, uid, uid)
        if os.getresuid() != (uid, uid, uid):  # never run the workload as anyone else
            raise OSError(errno.EPERM, "the workload identity could not be taken")

    return drop
