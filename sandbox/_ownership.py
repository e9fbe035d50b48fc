"""What running workloads hold on the host, as one value every implementation reports.

A workload is more than its process: bubblewrap's own sandbox init, the processes inside the
sandbox, the cgroups that account for them and the temporary directories they write. Each of them
is released when the workload is closed, and each is a leak if it is not. :class:`OwnedResources`
names them so that a caller — an operator's dashboard, an audit log, a leak check in a test — can
see what is held right now (``owned()`` on every sandbox and executor, and on one command
execution) and, through an ``on_acquire`` hook, what each workload took as it started, without
reaching into private state.
"""

from __future__ import annotations

from collections.abc import Iterable

import attrs

__all__ = ["OwnedResources"]


def _pids(values: Iterable[int]) -> frozenset[int]:
    return frozenset(values)


def _paths(values: Iterable[str]) -> frozenset[str]:
    return frozenset(values)


@attrs.frozen
class OwnedResources:
    """Host resources held by workloads: process ids, cgroup directories and temporary paths.

    ``processes`` are host pids (the spawned process, bubblewrap's sandbox init, and every member
    of the workload's cgroups when it has them); ``cgroups`` are cgroup directories; ``paths`` are
    temporary files and directories. A snapshot: processes may exit the moment after it is taken.
    """

    processes: frozenset[int] = attrs.field(default=frozenset(), converter=_pids)
    cgroups: frozenset[str] = attrs.field(default=frozenset(), converter=_paths)
    paths: frozenset[str] = attrs.field(default=frozenset(), converter=_paths)

    @property
    def empty(self) -> bool:
        """Whether nothing at all is held."""
        return not (self.processes or self.cgroups or self.paths)

    def __or__(self, other: OwnedResources) -> OwnedResources:
        return OwnedResources(
            self.processes | other.processes, self.cgroups | other.cgroups, self.paths | other.paths
        )

    @classmethod
    def union(cls, parts: Iterable[OwnedResources]) -> OwnedResources:
        """Everything held by any of ``parts``."""
        total = cls()
        for part in parts:
            total = total | part
        return total
