"""Sandbox posture: what an implementation is, how it isolates, which limits it enforces (CAP-010).

Every sandbox implementation (command-shaped :class:`~sandbox.Sandbox` runners and the CodeExecutor
alike) describes itself with one :class:`SandboxImplementation` value. The value is honest by
construction: an :attr:`Isolation.UNISOLATED` implementation can never claim to be a security
boundary (the constructor refuses), and a limit is listed either as enforced or as unenforced on
this host, never both.

Limit names are plain strings so that other executors may add their own; the ones used by the
command sandbox are the ``LIMIT_*`` constants below.

Every limit has a finite default; :data:`UNLIMITED` is how a caller asks for none, so that "no
limit" is always written down by someone rather than inherited by omission. Errors live here too
(not in ``_command``) because :class:`LimitNotEnforceable` is shared by every executor:
:class:`SandboxError` is the base of all declared sandbox errors.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from typing import Final, Literal, TypeAlias

import attrs

from effectagent.effect import TaggedError

__all__ = [
    "LIMIT_CPU",
    "LIMIT_FILE_SIZE",
    "LIMIT_MEMORY",
    "LIMIT_NETWORK",
    "LIMIT_OUTPUT",
    "LIMIT_PROCESSES",
    "LIMIT_WALL_CLOCK",
    "MAX_FILE_SIZE_BYTES",
    "MAX_LIMIT_SECONDS",
    "MAX_MEMORY_BYTES",
    "MAX_PROCESSES",
    "Isolation",
    "LimitNotEnforceable",
    "SandboxError",
    "SandboxImplementation",
    "UNLIMITED",
    "Unlimited",
    "is_limited",
]

UNLIMITED: Final = "unlimited"
"""The value a caller writes for a limit it wants lifted (every limit has a finite default)."""
Unlimited: TypeAlias = Literal["unlimited"]
"""The type of :data:`UNLIMITED`."""


def is_limited(value: object) -> bool:
    """Whether ``value`` is an actual bound rather than :data:`UNLIMITED`."""
    return value != UNLIMITED


#: The largest bounds a request may set (beyond them the kernel cannot set the limit, and the
#: workload would fail to start instead of being refused): a day of wall clock or CPU, 2**60
#: bytes of memory, the kernel's most processes, 2**62 bytes a file.
MAX_LIMIT_SECONDS: Final = 86_400
MAX_MEMORY_BYTES: Final = 2**60
MAX_PROCESSES: Final = 4_194_304
MAX_FILE_SIZE_BYTES: Final = 2**62

LIMIT_WALL_CLOCK = "wall_clock"
"""Wall-clock time of the whole workload, enforced by the host killing it."""
LIMIT_CPU = "cpu"
"""CPU seconds (``RLIMIT_CPU``: per process of the workload; the wall clock bounds the total)."""
LIMIT_OUTPUT = "output"
"""Bytes of captured stdout+stderr kept; the rest is counted and dropped."""
LIMIT_MEMORY = "memory"
"""Memory charged to the workload (a cgroup memory controller; never ``RLIMIT_AS``)."""
LIMIT_PROCESSES = "processes"
"""Number of processes/threads alive at once in the workload (a cgroup ``pids`` controller)."""
LIMIT_FILE_SIZE = "file_size"
"""Largest file any process of the workload may write (``RLIMIT_FSIZE``)."""
LIMIT_NETWORK = "network_isolation"
"""Network policy ``"none"`` (a private network namespace with only loopback)."""


class Isolation(enum.Enum):
    """How a workload is separated from the host."""

    UNISOLATED = "unisolated"
    """A plain host process: same filesystem, network, users and kernel view as the caller."""
    NAMESPACES = "namespaces"
    """Bubblewrap: new user, pid, net, ipc, uts and cgroup namespaces and a private mount tree."""


def _check_isolation(
    instance: SandboxImplementation, attribute: attrs.Attribute[Isolation], value: Isolation
) -> None:
    # An Isolation member only: the string "unisolated" would slip past the CAP-010 check below.
    if type(value) is not Isolation:
        raise TypeError(
            f"SandboxImplementation.isolation must be an Isolation, got {type(value).__name__} "
            f"{value!r}"
        )


def _check_boundary(
    instance: SandboxImplementation, attribute: attrs.Attribute[bool], value: bool
) -> None:
    if type(value) is not bool:
        raise TypeError(
            "SandboxImplementation.is_security_boundary must be a bool, got "
            f"{type(value).__name__} {value!r}"
        )
    if value and instance.isolation is Isolation.UNISOLATED:
        raise ValueError("an unisolated implementation is never a security boundary (CAP-010)")


def _check_disjoint(
    instance: SandboxImplementation,
    attribute: attrs.Attribute[frozenset[str]],
    value: frozenset[str],
) -> None:
    both = instance.enforced_limits & value
    if both:
        raise ValueError(f"limits both enforced and unenforced: {sorted(both)}")


def _names(field: str, values: Iterable[str]) -> frozenset[str]:
    # A lone str is a collection of its characters: refused, never taken as {"c", "p", "u"}.
    if isinstance(values, str):
        raise TypeError(
            f"SandboxImplementation.{field} must be a collection of limit names, got the str "
            f"{values!r}"
        )
    return frozenset(values)


def _enforced(values: Iterable[str]) -> frozenset[str]:
    return _names("enforced_limits", values)


def _unenforced(values: Iterable[str]) -> frozenset[str]:
    return _names("unenforced_limits", values)


def _texts(values: Iterable[str]) -> tuple[str, ...]:
    if isinstance(values, str):
        raise TypeError(f"SandboxImplementation.notes must be a collection of str, got {values!r}")
    return tuple(values)


@attrs.frozen
class SandboxImplementation:
    """The identity and honest posture of one sandbox implementation on this host (CAP-010).

    ``is_security_boundary`` is ``False`` for :attr:`Isolation.UNISOLATED`, always (enforced at
    construction). ``enforced_limits`` are honoured; ``unenforced_limits`` would be rejected with
    :class:`LimitNotEnforceable` if a request asked for them. ``notes`` states the precise
    semantics of each enforcement in words, for people and audit logs.
    """

    name: str
    version: str
    isolation: Isolation = attrs.field(validator=_check_isolation)
    is_security_boundary: bool = attrs.field(validator=_check_boundary)
    enforced_limits: frozenset[str] = attrs.field(converter=_enforced)
    unenforced_limits: frozenset[str] = attrs.field(
        converter=_unenforced, validator=_check_disjoint
    )
    notes: tuple[str, ...] = attrs.field(default=(), converter=_texts)

    def enforces(self, limit: str) -> bool:
        """Whether ``limit`` (a ``LIMIT_*`` name) is enforced by this implementation here."""
        return limit in self.enforced_limits


@attrs.frozen
class SandboxError(TaggedError):
    """Base class of every declared sandbox error."""


@attrs.frozen
class LimitNotEnforceable(SandboxError):
    """The request asks for a limit or policy (``limit``) this implementation cannot enforce here.

    Raised before anything runs; ``reason`` says why (for example "no writable cgroup memory
    controller on this host").
    """

    limit: str
    reason: str
