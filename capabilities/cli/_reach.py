"""Whether the sandbox's user can reach the shell's workspace, decided before any tool is offered.

When the command runs as root (usual in containers), the sandbox runs commands as ``nobody``
(65534:65534), and a workspace under ``/root`` (mode 0700) is out of its reach: ``shell`` and
``shell_write`` would fail at every call, after the approval was asked. The command checks at
start-up instead, from the mode bits of the workspace and the directories above it (ACLs are not
consulted, as the sandbox does not consult them either), and leaves out a tool that cannot work,
saying what to do. Pure, apart from the ``stat`` calls it is given.
"""

from __future__ import annotations

import os
import stat as stat_module
from collections.abc import Callable
from pathlib import PurePosixPath

import attrs

from sandbox import WorkloadIdentity

__all__ = ["Reach", "SandboxUser", "workspace_reach"]

_EXECUTE, _WRITE, _READ = 0o1, 0o2, 0o4


@attrs.frozen
class SandboxUser:
    """The host user a sandboxed command runs as, and what the command calls it."""

    uid: int
    gid: int
    groups: frozenset[int]
    name: str

    @staticmethod
    def of_this_process() -> SandboxUser:
        """``nobody`` (the sandbox's default identity) when this process is root; else this
        process's own user, as the sandbox runs commands then."""
        if os.geteuid() == 0:
            nobody = WorkloadIdentity.nobody()
            return SandboxUser(
                nobody.uid, nobody.gid, frozenset({nobody.gid}), f"nobody ({nobody.uid})"
            )
        groups = frozenset({os.getegid(), *os.getgroups()})
        return SandboxUser(os.geteuid(), os.getegid(), groups, f"uid {os.geteuid()}")

    def bits(self, info: os.stat_result) -> int:
        """The ``rwx`` bits that apply to this user for the file of ``info``."""
        if info.st_uid == self.uid:
            return (info.st_mode >> 6) & 0o7
        if info.st_gid in self.groups:
            return (info.st_mode >> 3) & 0o7
        return info.st_mode & 0o7


@attrs.frozen
class Reach:
    """What the sandbox's user may do in the workspace; ``problem`` says why not (a sentence)
    and ``fix`` what to do, when it may not read it — or, with ``write`` asked, write it."""

    read: bool
    write: bool
    problem: str | None = None
    fix: str | None = None

    def note(self, *, write: bool) -> str | None:
        """What a person should know when a shell tool is left out (None: none is): which
        tools, why, and what to do. ``write``: whether shell_write was asked for."""
        if self.problem is None:
            return None
        if self.read:
            left_out = "shell_write is"
        else:
            left_out = "shell and shell_write are" if write else "shell is"
        fix = f"; to offer {'them' if write and not self.read else 'it'}, {self.fix}"
        return f"{left_out} not offered: {self.problem}{fix if self.fix else ''}"


def workspace_reach(
    workspace: str,
    user: SandboxUser,
    *,
    write: bool,
    stat: Callable[[str], os.stat_result] = os.stat,
) -> Reach:
    """Whether ``user`` can pass every directory above ``workspace`` (an absolute path), read
    and search it, and (with ``write``) write it."""
    path = PurePosixPath(workspace)
    for parent in reversed(path.parents):  # "/" first
        if not user.bits(stat(str(parent))) & _EXECUTE:
            return Reach(
                False,
                False,
                f"the sandbox runs commands as {user.name}, which cannot pass {parent} on the "
                f"way to the workspace {workspace}",
                f"give it the way (`chmod o+x {parent}`), set [shell] workspace to a directory "
                f"it can reach (outside {parent}), or run effectagent as a user other than root",
            )
    info = stat(workspace)
    if not stat_module.S_ISDIR(info.st_mode):
        return Reach(False, False, f"the workspace {workspace} is not a directory", None)
    bits = user.bits(info)
    if bits & (_READ | _EXECUTE) != _READ | _EXECUTE:
        return Reach(
            False,
            False,
            f"the sandbox runs commands as {user.name}, which cannot read the workspace "
            f"{workspace}",
            f"give it access (`chmod o+rx {workspace}`), set [shell] workspace to a directory "
            "it can read, or run effectagent as a user other than root",
        )
    if write and not bits & _WRITE:
        return Reach(
            True,
            False,
            f"the sandbox runs commands as {user.name}, which cannot write the workspace "
            f"{workspace}",
            f"give it access (`chmod o+w {workspace}`, or chown it to {user.uid}:{user.gid}), "
            "or set [shell] write = false",
        )
    return Reach(True, write)
