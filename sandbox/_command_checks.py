"""Pure questions about a command request: is it well-formed, what does it ask to be enforced, and
can an implementation honour it. No I/O; every runner asks them before anything runs.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Callable

from ._command import InvalidRequest, SandboxLimits, SandboxRequest
from ._posture import (
    LIMIT_CPU,
    LIMIT_FILE_SIZE,
    LIMIT_MEMORY,
    LIMIT_NETWORK,
    LIMIT_OUTPUT,
    LIMIT_PROCESSES,
    LIMIT_WALL_CLOCK,
    UNLIMITED,
    LimitNotEnforceable,
    SandboxImplementation,
    is_limited,
)

__all__ = ["check_enforceable", "required_limits", "validate_request"]

_MIB = 1 << 20
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_RESERVED = ("/", "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/proc")
_RESERVED_TREES = ("/proc", "/dev", "/usr", "/etc")


def _is_clean_abs(path: str) -> bool:
    return path.startswith("/") and "\0" not in path and posixpath.normpath(path) == path


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def _seconds(value: object) -> bool:
    return type(value) in (int, float) and 0 < value <= 86400  # type: ignore[operator]


def _int_at_least(minimum: int) -> Callable[[object], bool]:
    def fits(value: object) -> bool:
        return type(value) is int and value >= minimum

    return fits


# (field, test, what it must be, whether UNLIMITED may replace it)
_LIMIT_RULES: tuple[tuple[str, Callable[[object], bool], str, bool], ...] = (
    ("wall_clock_seconds", _seconds, "a number of seconds in (0, 86400]", False),
    ("output_bytes", _int_at_least(0), "an int >= 0", False),
    ("cpu_seconds", _seconds, "a number of seconds in (0, 86400]", True),
    ("memory_bytes", _int_at_least(_MIB), "an int >= 1 MiB", True),
    ("max_processes", _int_at_least(1), "an int >= 1", True),
    ("file_size_bytes", _int_at_least(0), "an int >= 0", True),
    ("artifact_entries", _int_at_least(1), "an int >= 1", False),
    ("artifact_depth", _int_at_least(1), "an int >= 1", False),
    ("artifact_bytes", _int_at_least(0), "an int >= 0", False),
    ("artifact_seconds", _seconds, "a number of seconds in (0, 86400]", False),
)


def _check_limits(limits: SandboxLimits, problems: list[str]) -> None:
    for name, fits, rule, liftable in _LIMIT_RULES:
        value = getattr(limits, name)
        if liftable and value == UNLIMITED:
            continue
        if value is None:
            lift = "; write UNLIMITED for no limit" if liftable else ""
            problems.append(f"limits.{name} is None: it must be {rule}{lift}")
        elif not fits(value):
            problems.append(f"limits.{name} must be {rule}, got {value!r}")


def _check_env(request: SandboxRequest, problems: list[str]) -> None:
    allowed = set(request.env_allowlist)
    for name in request.env_allowlist:
        if not _ENV_NAME.match(name):
            problems.append(f"env_allowlist: invalid variable name {name!r}")
    for name, value in request.env.items():
        if name not in allowed:
            problems.append(f"env: {name!r} is not in env_allowlist")
        if "\0" in value:
            problems.append(f"env: value of {name!r} contains NUL")
    seen: set[str] = set()
    for handle in request.secrets:
        name = handle.env_name
        if not _ENV_NAME.match(name):
            problems.append(f"secrets: invalid variable name {name!r}")
        if name in allowed or name in seen:
            problems.append(f"secrets: {name!r} is set twice")
        seen.add(name)


def _check_mounts(request: SandboxRequest, problems: list[str]) -> None:
    seen: set[str] = set()
    for mount in request.mounts:
        if mount.mode not in ("ro", "rw"):
            problems.append(f"mounts: mode must be 'ro' or 'rw', got {mount.mode!r}")
        if not _is_clean_abs(mount.host_path):
            problems.append(f"mounts: host_path {mount.host_path!r} is not a clean absolute path")
        sp = mount.sandbox_path
        if not _is_clean_abs(sp):
            problems.append(f"mounts: sandbox_path {sp!r} is not a clean absolute path")
        elif sp in _RESERVED or any(_under(sp, t) for t in _RESERVED_TREES):
            problems.append(f"mounts: sandbox_path {sp!r} is reserved for the system view")
        if sp in seen:
            problems.append(f"mounts: sandbox_path {sp!r} is mounted twice")
        seen.add(sp)


def _check_artifacts(request: SandboxRequest, problems: list[str]) -> None:
    rw_roots = {m.sandbox_path for m in request.mounts if m.mode == "rw"}
    for rule in request.artifacts:
        parts = rule.glob.split("/")
        if not rule.glob or rule.glob.startswith("/") or ".." in parts or "\0" in rule.glob:
            problems.append(f"artifacts: glob {rule.glob!r} must be relative without '..'")
        if rule.root is not None and rule.root not in rw_roots:
            problems.append(f"artifacts: root {rule.root!r} is not a read-write mount")
        if rule.max_bytes < 0 or rule.max_count < 1:
            problems.append("artifacts: max_bytes must be >= 0 and max_count >= 1")


def validate_request(request: SandboxRequest) -> None:
    """Raise :class:`InvalidRequest` listing every structural problem of ``request``. Pure."""
    problems: list[str] = []
    if not request.command or "\0" in request.command:
        problems.append("command must be a non-empty string without NUL")
    if any("\0" in arg for arg in request.args):
        problems.append("args must not contain NUL")
    if request.network not in ("none", "host"):
        problems.append(f"network must be 'none' or 'host', got {request.network!r}")
    if request.cwd is not None and not _is_clean_abs(request.cwd):
        problems.append(f"cwd {request.cwd!r} is not a clean absolute path")
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
