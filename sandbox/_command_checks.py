"""Pure questions about a command request: is it well-formed, what does it ask to be enforced, and
can an implementation honour it. No I/O; every runner asks them before anything runs.
"""

from __future__ import annotations

import os
import posixpath
import re
from collections.abc import Callable, Mapping

from ._command import (
    ArtifactRule,
    InvalidRequest,
    Mount,
    SandboxLimits,
    SandboxRequest,
    SecretHandle,
)
from ._posture import (
    LIMIT_CPU,
    LIMIT_FILE_SIZE,
    LIMIT_MEMORY,
    LIMIT_NETWORK,
    LIMIT_OUTPUT,
    LIMIT_PROCESSES,
    LIMIT_WALL_CLOCK,
    MAX_FILE_SIZE_BYTES,
    MAX_LIMIT_SECONDS,
    MAX_MEMORY_BYTES,
    MAX_PROCESSES,
    UNLIMITED,
    LimitNotEnforceable,
    SandboxImplementation,
    is_limited,
)

__all__ = ["check_enforceable", "required_limits", "validate_request"]

_MIB = 1 << 20
# Matched with ``fullmatch``: a pattern ending in ``$`` would also match before a final newline.
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_RESERVED = ("/", "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/proc")
# The system dirs are read-only binds of the host's or links into /usr: a mount below one needs a
# mount point bwrap cannot make (it fails after the request was accepted) or hides a system file.
_SYSTEM_TREES = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc")
_RESERVED_TREES = ("/proc", "/dev", *_SYSTEM_TREES)
# Host paths no mount may expose: the host's /proc (every process, its command line and — for
# a workload of the caller's own user — its environment) and /sys.
_HOST_KERNEL_TREES = ("/proc", "/sys")


_NAME_MAX = 255
_PATH_MAX = 4095


def _encodable(text: str) -> bool:
    """Whether ``text`` can be handed to the kernel (``os.fsencode``: a lone surrogate cannot,
    unless it stands for an undecodable byte)."""
    try:
        os.fsencode(text)
    except UnicodeEncodeError:
        return False
    return True


def _is_clean_abs(path: str) -> bool:
    # normpath keeps a leading "//" (POSIX leaves its meaning to the system): "//usr" is "/usr".
    return (
        path.startswith("/")
        and not path.startswith("//")
        and "\0" not in path
        and posixpath.normpath(path) == path
        and _encodable(path)
    )


def _path_problem(field: str, path: str) -> str | None:
    """Why the clean absolute ``path`` is not a usable path, or None: too long for the kernel."""
    encoded = os.fsencode(path)
    if len(encoded) > _PATH_MAX:
        return f"{field} is {len(encoded)} bytes long, over the system's {_PATH_MAX}"
    if any(len(part) > _NAME_MAX for part in encoded.split(b"/")):
        return f"{field} has a name over the system's {_NAME_MAX} bytes"
    return None


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def _type(value: object) -> str:
    return type(value).__name__


def _shown(value: object) -> str:
    """A bound as an error message shows it: a number itself, anything else by its type only."""
    return (
        repr(value) if value is None or type(value) in (bool, int, float) else f"a {_type(value)}"
    )


def _seconds(value: object) -> bool:
    return type(value) in (int, float) and 0 < value <= MAX_LIMIT_SECONDS  # type: ignore[operator]


def _int_at_least(minimum: int, maximum: int | None = None) -> Callable[[object], bool]:
    def fits(value: object) -> bool:
        return type(value) is int and value >= minimum and (maximum is None or value <= maximum)

    return fits


# (field, test, what it must be, whether UNLIMITED may replace it)
_LIMIT_RULES: tuple[tuple[str, Callable[[object], bool], str, bool], ...] = (
    ("wall_clock_seconds", _seconds, "a number of seconds in (0, 86400]", False),
    ("output_bytes", _int_at_least(0), "an int >= 0", False),
    ("cpu_seconds", _seconds, "a number of seconds in (0, 86400]", True),
    ("memory_bytes", _int_at_least(_MIB, MAX_MEMORY_BYTES), "an int in [1 MiB, 2**60]", True),
    ("max_processes", _int_at_least(1, MAX_PROCESSES), "an int in [1, 4194304]", True),
    ("file_size_bytes", _int_at_least(0, MAX_FILE_SIZE_BYTES), "an int in [0, 2**62]", True),
    ("artifact_entries", _int_at_least(1), "an int >= 1", False),
    ("artifact_depth", _int_at_least(1), "an int >= 1", False),
    ("artifact_bytes", _int_at_least(0), "an int >= 0", False),
    ("artifact_seconds", _seconds, "a number of seconds in (0, 86400]", False),
)


def _check_limits(limits: object, problems: list[str]) -> None:
    if not isinstance(limits, SandboxLimits):
        problems.append(f"limits must be a SandboxLimits, got {_type(limits)}")
        return
    for name, fits, rule, liftable in _LIMIT_RULES:
        value = getattr(limits, name)
        if liftable and value == UNLIMITED:
            continue
        if value is None:
            lift = "; write UNLIMITED for no limit" if liftable else ""
            problems.append(f"limits.{name} is None: it must be {rule}{lift}")
        elif not fits(value):
            problems.append(f"limits.{name} must be {rule}, got {value!r}")


# The checks below take every field as ``object``: a request is plain data, built by callers that
# may not be type-checked, and a field of the wrong type must become a problem naming it rather
# than a crash. Values (of ``env``, ``args``, ``stdin``) may be secrets: a problem names the field
# and the type, never the value.
def _check_env(request: SandboxRequest, problems: list[str]) -> None:
    allowed: set[str] = set()
    names: tuple[object, ...] = request.env_allowlist
    for i, name in enumerate(names):
        if not isinstance(name, str):
            problems.append(f"env_allowlist[{i}] must be a str, got {_type(name)}")
            continue
        allowed.add(name)
        if not _ENV_NAME.fullmatch(name):
            problems.append(f"env_allowlist: invalid variable name {name!r}")
    env: object = request.env
    if not isinstance(env, Mapping):
        problems.append(f"env must be a mapping of names to str values, got {_type(env)}")
    else:
        for key, value in env.items():
            if not isinstance(key, str):
                problems.append(f"env: a variable name must be a str, got {_type(key)}")
                continue
            if key not in allowed:
                problems.append(f"env: {key!r} is not in env_allowlist")
            if not isinstance(value, str):
                problems.append(f"env: the value of {key!r} must be a str, got {_type(value)}")
            elif "\0" in value:
                problems.append(f"env: value of {key!r} contains NUL")
            elif not _encodable(value):
                problems.append(f"env: value of {key!r} is not encodable text (a lone surrogate)")
    seen: set[str] = set()
    handles: tuple[object, ...] = request.secrets
    for i, handle in enumerate(handles):
        if not isinstance(handle, SecretHandle):
            problems.append(f"secrets[{i}] must be a SecretHandle, got {_type(handle)}")
            continue
        secret_id: object = handle.secret_id
        if not isinstance(secret_id, str):
            problems.append(f"secrets[{i}].secret_id must be a str, got {_type(secret_id)}")
        env_name: object = handle.env_name
        if not isinstance(env_name, str):
            problems.append(f"secrets[{i}].env_name must be a str, got {_type(env_name)}")
            continue
        if not _ENV_NAME.fullmatch(env_name):
            problems.append(f"secrets: invalid variable name {env_name!r}")
        if env_name in allowed or env_name in seen:
            problems.append(f"secrets: {env_name!r} is set twice")
        seen.add(env_name)


def _check_mounts(request: SandboxRequest, problems: list[str]) -> None:
    seen: set[str] = set()
    mounts: tuple[object, ...] = request.mounts
    for i, mount in enumerate(mounts):
        if not isinstance(mount, Mount):
            problems.append(f"mounts[{i}] must be a Mount, got {_type(mount)}")
            continue
        if mount.mode not in ("ro", "rw"):
            problems.append(f"mounts: mode must be 'ro' or 'rw', got {mount.mode!r}")
        host: object = mount.host_path
        if not isinstance(host, str):
            problems.append(f"mounts[{i}].host_path must be a str, got {_type(host)}")
        elif not _is_clean_abs(host):
            problems.append(f"mounts: host_path {host!r} is not a clean absolute path")
        elif (problem := _path_problem(f"mounts[{i}].host_path", host)) is not None:
            problems.append(f"mounts: {problem}")
        elif any(_under(host, tree) for tree in _HOST_KERNEL_TREES):
            problems.append(
                f"mounts: host_path {host!r} is the host kernel's view (its processes, their "
                "command lines and environments): no workload is shown it"
            )
        sp: object = mount.sandbox_path
        if not isinstance(sp, str):
            problems.append(f"mounts[{i}].sandbox_path must be a str, got {_type(sp)}")
            continue
        if not _is_clean_abs(sp):
            problems.append(f"mounts: sandbox_path {sp!r} is not a clean absolute path")
        elif (problem := _path_problem(f"mounts[{i}].sandbox_path", sp)) is not None:
            problems.append(f"mounts: {problem}")
        elif sp in _RESERVED or any(_under(sp, t) for t in _RESERVED_TREES):
            problems.append(f"mounts: sandbox_path {sp!r} is reserved for the system view")
        if sp in seen:
            problems.append(f"mounts: sandbox_path {sp!r} is mounted twice")
        seen.add(sp)


def _rw_roots(request: SandboxRequest) -> set[str]:
    roots: set[str] = set()
    mounts: tuple[object, ...] = request.mounts
    for mount in mounts:
        if isinstance(mount, Mount) and mount.mode == "rw":
            path: object = mount.sandbox_path
            if isinstance(path, str):
                roots.add(path)
    return roots


def _check_artifacts(request: SandboxRequest, problems: list[str]) -> None:
    rw_roots = _rw_roots(request)
    rules: tuple[object, ...] = request.artifacts
    for i, rule in enumerate(rules):
        if not isinstance(rule, ArtifactRule):
            problems.append(f"artifacts[{i}] must be an ArtifactRule, got {_type(rule)}")
            continue
        glob: object = rule.glob
        if not isinstance(glob, str):
            problems.append(f"artifacts[{i}].glob must be a str, got {_type(glob)}")
        elif not glob or glob.startswith("/") or ".." in glob.split("/") or "\0" in glob:
            problems.append(f"artifacts: glob {glob!r} must be relative without '..'")
        elif not _encodable(glob):
            problems.append(f"artifacts: glob {glob!r} is not encodable text")
        root: object = rule.root
        if root is not None and not isinstance(root, str):
            problems.append(f"artifacts[{i}].root must be a str or None, got {_type(root)}")
        elif root is not None and root not in rw_roots:
            problems.append(f"artifacts: root {root!r} is not a read-write mount")
        # Ints (not bools) only: nan compared false with everything and read no byte of any file,
        # 1.5 files let a second one through.
        if not _int_at_least(0)(rule.max_bytes):
            problems.append(
                f"artifacts[{i}].max_bytes must be an int >= 0, got {_shown(rule.max_bytes)}"
            )
        if not _int_at_least(1)(rule.max_count):
            problems.append(
                f"artifacts[{i}].max_count must be an int >= 1, got {_shown(rule.max_count)}"
            )


def validate_request(request: SandboxRequest) -> None:
    """Raise :class:`InvalidRequest` listing every structural problem of ``request``, each naming
    its field: a value of the wrong type, out of range or malformed. Pure; a problem never shows a
    value that could be a secret (of ``args``, ``env``, ``stdin``)."""
    given: object = request
    if not isinstance(given, SandboxRequest):  # a dict of its fields, say: never its values
        raise InvalidRequest((f"the request must be a SandboxRequest, got {_type(given)}",))
    problems: list[str] = []
    command: object = request.command
    if not isinstance(command, str):
        problems.append(f"command must be a non-empty str without NUL, got {_type(command)}")
    elif not command or "\0" in command:
        problems.append("command must be a non-empty string without NUL")
    elif not _encodable(command):
        problems.append(f"command {command!r} is not encodable text (a lone surrogate)")
    elif command.startswith("//"):  # "//bin/true": one runner resolved it, another did not
        problems.append(f"command {command!r} begins with a doubled slash")
    elif (problem := _path_problem("command", command)) is not None:
        problems.append(problem)
    args: tuple[object, ...] = request.args
    for i, arg in enumerate(args):
        if not isinstance(arg, str):
            problems.append(f"args[{i}] must be a str, got {_type(arg)}")
        elif "\0" not in arg and not _encodable(arg):
            problems.append(f"args[{i}] is not encodable text (a lone surrogate)")
    if any(isinstance(arg, str) and "\0" in arg for arg in args):
        problems.append("args must not contain NUL")
    if request.network not in ("none", "host"):
        problems.append(f"network must be 'none' or 'host', got {request.network!r}")
    cwd: object = request.cwd
    if cwd is not None and not isinstance(cwd, str):
        problems.append(f"cwd must be a clean absolute path or None, got {_type(cwd)}")
    elif isinstance(cwd, str) and not _is_clean_abs(cwd):
        problems.append(f"cwd {cwd!r} is not a clean absolute path")
    elif isinstance(cwd, str) and (problem := _path_problem("cwd", cwd)) is not None:
        problems.append(problem)
    stdin: object = request.stdin
    if stdin is not None and not isinstance(stdin, bytes):
        problems.append(f"stdin must be bytes or None, got {_type(stdin)}")
    _check_limits(request.limits, problems)
    _check_env(request, problems)
    _check_mounts(request, problems)
    _check_artifacts(request, problems)
    if problems:
        raise InvalidRequest(tuple(problems))


def required_limits(request: SandboxRequest) -> frozenset[str]:
    """The limit/policy names (``LIMIT_*``) an implementation must enforce to honour ``request``.

    Mounts are judged by each implementation (:data:`LIMIT_FILESYSTEM`): the local runner accepts
    an identity read-write mount of ``cwd``, which asks for no isolation.
    """
    names = {LIMIT_WALL_CLOCK, LIMIT_OUTPUT}
    limits = request.limits
    if is_limited(limits.cpu_seconds):
        names.add(LIMIT_CPU)
    if is_limited(limits.memory_bytes):
        names.add(LIMIT_MEMORY)
    if is_limited(limits.max_processes):
        names.add(LIMIT_PROCESSES)
    if is_limited(limits.file_size_bytes):
        names.add(LIMIT_FILE_SIZE)
    if request.network == "none":
        names.add(LIMIT_NETWORK)
    return frozenset(names)


def check_enforceable(implementation: SandboxImplementation, request: SandboxRequest) -> None:
    """Raise :class:`LimitNotEnforceable` for the first required limit not enforced. Pure.

    Limits are checked in sorted order so the error is deterministic.
    """
    for name in sorted(required_limits(request)):
        if name not in implementation.enforced_limits:
            raise LimitNotEnforceable(
                name, f"{implementation.name} cannot enforce {name!r} on this host"
            )
