"""What a Deno workload is launched with: the binary, its libraries, and the exact command line.

Under ``isolation="namespaces"`` a workload runs in bubblewrap (``_bwrap_argv``): new user, pid,
net, ipc, uts and cgroup namespaces, no network, and a mount tree in which ``/usr`` and ``/proc``
are empty tmpfs, so that besides the loader's configuration the program can reach only the Deno
binary, the shared libraries it links (found with ``ldd``) and the harness. Deno's permission
checks are not enough on their own: Deno reads files that are imported statically
(``import x from "file:///..." with {type: "text"}``) without them. Deno itself runs with no
``--allow-*`` flag and ``--no-prompt --no-remote --no-npm --no-config``.

With ``/proc`` empty, Deno cannot find its own executable, and its Node compatibility layer (the
``process`` global, ``node:os``) and ``Deno.execPath()`` would end the process with a panic; the
sandbox therefore holds one symbolic link, ``/proc/self/exe``, to the binary's sandbox path, and
such code gets Deno's ordinary permission errors instead. bubblewrap runs as the workload's user,
so the binary and the harness must be reachable by that user through their host paths (the
executor checks it once, at construction).

A :class:`SpawnConfig` holds everything fixed when a workload is spawned; equal configs give
interchangeable workloads (the warm pool's key).
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
from typing import Final, Literal

import attrs

from ._code import ExecutorUnavailable
from ._identity import WorkloadIdentity
from ._isolation import bwrap_argv

__all__ = [
    "HARNESS_PATH",
    "INSIDE_DENO",
    "IsolationMode",
    "SpawnConfig",
    "SpawnDescriptors",
    "deno_version",
    "find_deno",
    "runtime_libraries",
]

IsolationMode = Literal["namespaces", "none"]

HARNESS_PATH: Final = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_harness.js")
_INSIDE_DIR: Final = "/effectagent"
INSIDE_DENO: Final = f"{_INSIDE_DIR}/deno"
_INSIDE_HARNESS: Final = f"{_INSIDE_DIR}/harness.js"
_DENO_FLAGS: Final = ("run", "--no-prompt", "--no-remote", "--no-npm", "--no-config")
_MIB: Final = 1024 * 1024


def find_deno(explicit: str | None = None) -> str:
    """The Deno binary: ``explicit``, else the one shipped by the ``deno`` PyPI package, else PATH.

    Raises :class:`ExecutorUnavailable` when there is none.
    """
    if explicit is not None:
        if not os.access(explicit, os.X_OK):
            raise ExecutorUnavailable(f"{explicit!r} is not an executable Deno binary")
        return os.path.abspath(explicit)
    try:
        import deno  # type: ignore[import-untyped]  # the PyPI package that ships the binary

        return str(deno.find_deno_bin())
    except (ImportError, FileNotFoundError):
        pass
    found = shutil.which("deno")
    if found is None:
        raise ExecutorUnavailable("no Deno binary: install the 'deno' package (extra 'sandbox')")
    return found


@functools.cache
def deno_version(deno: str) -> str:
    """``"2.9.8"`` for the binary at ``deno`` (runs it once; cached). Blocking."""
    try:
        done = subprocess.run(
            [deno, "--version"], capture_output=True, text=True, timeout=30, check=True
        )
    except (OSError, subprocess.SubprocessError) as exc:
        raise ExecutorUnavailable(f"cannot run {deno!r}: {exc}") from None
    first = done.stdout.split("\n", 1)[0].split()
    return first[1] if len(first) > 1 else "unknown"


@functools.cache
def runtime_libraries(deno: str) -> tuple[tuple[str, str], ...] | None:
    """``(host file, path inside the sandbox)`` for each shared library ``deno`` links.

    Found with ``ldd``; ``None`` when they cannot all be found (the caller then keeps ``/usr``).
    Blocking (one ``ldd`` run; cached).
    """
    ldd = shutil.which("ldd")
    if ldd is None:
        return None
    try:
        done = subprocess.run([ldd, deno], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    binds: list[tuple[str, str]] = []
    for raw in done.stdout.splitlines():
        line = raw.strip()
        if "not found" in line:
            return None
        target = line.partition("=>")[2] if "=>" in line else line
        path = target.strip().split(" (", 1)[0].strip()
        if not path.startswith("/"):
            continue  # the vDSO
        inside = os.path.join(os.path.realpath(os.path.dirname(path)), os.path.basename(path))
        binds.append((os.path.realpath(path), inside))
    return tuple(binds) if done.returncode == 0 and binds else None


@attrs.frozen
class SpawnDescriptors:
    """The pipe ends one isolated workload's bwrap inherits for the start-up handshake: where it
    writes its status, and where it waits to be released."""

    status: int
    block: int

    def all(self) -> tuple[int, ...]:
        """Every descriptor, for ``pass_fds``."""
        return (self.status, self.block)


@attrs.frozen
class SpawnConfig:
    """Everything fixed when a workload is spawned; equal configs give interchangeable workloads.

    ``memory_bytes`` is the cgroup limit when ``use_cgroup``; in any case the V8 old space is capped
    at half of it. ``max_processes`` (processes and threads at once) needs a pids cgroup, which
    also lets a workload's release wait until every process of it is gone. ``identity`` is the
    host user the workload runs as (``None``: this process's own, non-root, user).
    ``disable_userns``: bubblewrap keeps the workload from making user namespaces of its own.
    """

    deno: str
    isolation: IsolationMode
    bwrap: str | None
    libraries: tuple[tuple[str, str], ...] | None
    cpu_seconds: int | None
    memory_bytes: int | None
    use_cgroup: bool
    max_processes: int | None
    identity: WorkloadIdentity | None = None
    harness: str = HARNESS_PATH
    disable_userns: bool = False

    def _flags(self) -> list[str]:
        flags = list(_DENO_FLAGS)
        if self.memory_bytes is not None:
            heap_mib = max(16, self.memory_bytes // _MIB // 2)
            flags.append(f"--v8-flags=--max-old-space-size={heap_mib}")
        return flags

    def unisolated_command(self, workdir: str) -> tuple[list[str], dict[str, str], str]:
        """``(argv, env, cwd)`` of an unisolated workload whose temp dir is ``workdir``."""
        env = {
            "HOME": workdir,
            "DENO_DIR": os.path.join(workdir, "deno"),
            "NO_COLOR": "1",
            "DENO_NO_UPDATE_CHECK": "1",
        }
        return [self.deno, *self._flags(), self.harness], env, workdir

    def isolated_command(self, fds: SpawnDescriptors) -> tuple[list[str], dict[str, str], str]:
        """``(argv, env, cwd)`` of a bubblewrap-isolated workload inheriting ``fds``."""
        assert self.bwrap is not None
        env = {
            "HOME": "/tmp",
            "DENO_DIR": "/tmp/deno",
            "NO_COLOR": "1",
            "DENO_NO_UPDATE_CHECK": "1",
        }
        hide = ("/usr", "/proc") if self.libraries is not None else ("/proc",)
        prefix = bwrap_argv(
            bwrap=self.bwrap,
            ro_binds=[
                (self.deno, INSIDE_DENO),
                (self.harness, _INSIDE_HARNESS),
                *(self.libraries or ()),
            ],
            rw_binds=(),
            tmpfs=hide,
            cwd="/tmp",
            env=env,
            network=False,
            symlinks=((INSIDE_DENO, "/proc/self/exe"),),
            extra=("--json-status-fd", str(fds.status), "--block-fd", str(fds.block)),
            disable_userns=self.disable_userns,
        )
        return [*prefix, INSIDE_DENO, *self._flags(), _INSIDE_HARNESS], {}, "/"
