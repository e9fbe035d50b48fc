"""Host files of a workload: the artifacts collected after it and the temporary trees it leaves.

Both jobs read or delete paths a workload could have shaped to its liking — symlinks pointing
out of its directory, special files that block on open, permissions taken away — so they run
only after the workload is dead and treat every path as hostile: no symlink is followed, only
regular files are read, reads are bounded, and removal restores the permissions it needs.
Every runner shares these helpers, so the rules are written once.
"""

from __future__ import annotations

import contextlib
import glob
import hashlib
import os
import shutil
import stat
from collections.abc import Callable, Mapping
from typing import Any

from ._command import Artifact, ArtifactRule

__all__ = ["collect_artifacts", "remove_tree"]


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


def _read_artifact(host: str, sandbox: str, max_bytes: int) -> Artifact | None:
    try:
        fd = os.open(host, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            return None
        digest = hashlib.sha256()
        head = bytearray()
        size = 0
        while chunk := f.read(1 << 20):
            digest.update(chunk)
            if len(head) < max_bytes:
                head += chunk[: max_bytes - len(head)]
            size += len(chunk)
    return Artifact(sandbox, size, digest.hexdigest(), bytes(head), size > len(head))


def collect_artifacts(
    rules: tuple[ArtifactRule, ...], roots: Mapping[str | None, tuple[str, str]]
) -> tuple[tuple[Artifact, ...], int]:
    """Collect files by rule; ``roots`` maps a rule root to ``(sandbox_path, host_path)``.

    Returns the artifacts and how many matches were skipped (over ``max_count``, a symlink anywhere
    below the root, resolving outside it, or not a regular file). Blocking file IO; run it after
    the workload is dead so nothing can swap files underneath.
    """
    artifacts: list[Artifact] = []
    skipped = 0
    seen: set[str] = set()
    for rule in rules:
        sandbox_root, host_root = roots[rule.root]
        real_root = os.path.realpath(host_root)
        count = 0
        matches = glob.glob(rule.glob, root_dir=real_root, recursive=True, include_hidden=True)
        for match in sorted(matches):
            host = os.path.normpath(os.path.join(real_root, match))
            if os.path.isdir(host) and not os.path.islink(host):
                continue
            if host in seen:
                continue
            seen.add(host)
            inside = host.startswith(real_root.rstrip("/") + "/")
            artifact = None
            if inside and os.path.realpath(host) == host and count < rule.max_count:
                rel = os.path.relpath(host, real_root)
                artifact = _read_artifact(host, os.path.join(sandbox_root, rel), rule.max_bytes)
            if artifact is None:
                skipped += 1
                continue
            artifacts.append(artifact)
            count += 1
    return tuple(artifacts), skipped
