"""The sandbox's file view as the host sees it: which host path serves each sandbox path.

Bubblewrap resolves paths inside the sandbox; the host has to answer two questions about that view
before it starts anything — is ``cwd`` a directory there, and which program does ``command`` name —
so that a request that cannot work is refused with :class:`~sandbox.CommandNotFound` or
:class:`InvalidRequest` instead of a bubblewrap failure. The answers come from a table of
``(sandbox_path, host_path)`` pairs, longest prefix first. Pure apart from ``stat`` calls.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from ._bwrap_argv import system_mounts
from ._command import SandboxRequest

__all__ = ["WORKDIR", "mount_table", "resolve_in_view", "to_host"]

WORKDIR = "/workspace"
"""Sandbox path of the per-execution read-write workdir (the default ``cwd``)."""


def mount_table(request: SandboxRequest, workdir: str, network: bool) -> list[tuple[str, str]]:
    """``(sandbox_path, host_path)`` of everything visible, system view first."""
    table = [(path, path) for _, path in system_mounts(network)]
    table.append((WORKDIR, workdir))
    table += [(m.sandbox_path, m.host_path) for m in request.mounts]
    return table


def to_host(path: str, table: Sequence[tuple[str, str]]) -> str | None:
    """The host path serving sandbox ``path`` (longest matching prefix), or None."""
    best: tuple[str, str] | None = None
    for inside, host in table:
        if (path == inside or path.startswith(inside.rstrip("/") + "/")) and (
            best is None or len(inside) > len(best[0])
        ):
            best = (inside, host)
    if best is None:
        return None
    return best[1] + path[len(best[0]) :]


def resolve_in_view(
    command: str, path_env: str, cwd: str, table: Sequence[tuple[str, str]]
) -> str | None:
    """The sandbox path ``command`` resolves to inside the view described by ``table``, or None.

    ``table`` maps sandbox paths to host paths (longest prefix wins); a program is found if the
    mapped host file is an executable regular file.
    """
    if "/" in command:
        candidates = [os.path.normpath(os.path.join(cwd, command))]
    else:
        candidates = [os.path.join(d or ".", command) for d in path_env.split(":")]
        candidates = [os.path.normpath(os.path.join(cwd, c)) for c in candidates]
    for candidate in candidates:
        host = to_host(candidate, table)
        if host is not None and os.path.isfile(host) and os.access(host, os.X_OK):
            return candidate
    return None
