"""Tool-batch bookkeeping — pure. Results settle in any order and commit in declaration order;
calls are handed to the tasks that run them.

Invariants of :class:`BatchLedger` (property-tested in ``tests/engine/test_batch_ledger.py`` and,
through the engine, ``tests/engine/test_scheduling.py``):

* every declared call settles exactly once, with exactly one outcome (a second settle is a bug and
  raises);
* :meth:`BatchLedger.commit` is possible only when the batch is complete, and yields the outcomes in
  the model's declaration order whatever the completion order (CAP-005, RUN-005).

Invariants of :class:`WorkerPool` (property-tested in ``tests/engine/test_worker_pool.py``):

* every call is taken exactly once, in declaration order;
* a waiting call never holds up a queued one: whenever every worker's call is waiting, either no
  call is queued or a new worker is on its way;
* there are never more workers than calls.

Invariants of :func:`run_groups` (property-tested in ``tests/engine/test_sequential.py``): the
groups cover every call once, in declaration order; a sequential call is a group of its own; no
group holds a sequential call beside another.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import final

from effectagent.core import ToolOutcome

__all__ = ["BatchLedger", "WorkerPool", "run_groups"]


@final
class BatchLedger:
    """Outcomes of one batch by declaration index."""

    __slots__ = ("_ids", "_outcomes", "_pending")

    def __init__(self, tool_call_ids: Sequence[str]) -> None:
        if len(set(tool_call_ids)) != len(tool_call_ids):
            raise ValueError("tool call IDs in a batch must be unique")
        self._ids = tuple(tool_call_ids)
        self._outcomes: list[ToolOutcome | None] = [None] * len(tool_call_ids)
        self._pending = len(tool_call_ids)

    def __len__(self) -> int:
        return len(self._ids)

    def settle(self, index: int, outcome: ToolOutcome) -> None:
        """Record the one outcome of call ``index``."""
        if outcome.tool_call_id != self._ids[index]:
            raise ValueError(
                f"outcome for {outcome.tool_call_id!r} settled at the slot of {self._ids[index]!r}"
            )
        if self._outcomes[index] is not None:
            raise RuntimeError(f"tool call {self._ids[index]!r} settled twice")
        self._outcomes[index] = outcome
        self._pending -= 1

    def is_settled(self, index: int) -> bool:
        """Whether call ``index`` has its outcome."""
        return self._outcomes[index] is not None

    @property
    def complete(self) -> bool:
        """True when every call has settled."""
        return self._pending == 0

    def settle_rest(self, make: Callable[[int], ToolOutcome]) -> list[int]:
        """Settle every unsettled call with ``make(index)``; return their indices."""
        rest = [i for i, o in enumerate(self._outcomes) if o is None]
        for i in rest:
            self.settle(i, make(i))
        return rest

    def commit(self) -> list[ToolOutcome]:
        """All outcomes in declaration order. Raises if the batch is incomplete."""
        if self._pending:
            raise RuntimeError(f"{self._pending} tool call(s) of the batch have not settled")
        return [o for o in self._outcomes if o is not None]


@final
class WorkerPool:
    """Which task runs which call of a batch, when calls run eagerly (see ``_batch``).

    The batch's own task is the first worker. A worker takes the next call in declaration order
    and runs it to its end, then takes the next. When a call is about to wait (it yields to the
    scheduler) while calls are still queued, :meth:`call_waits` says to start one more worker —
    unless one is already starting — so the queued calls go on while it waits. A batch whose calls
    never wait therefore runs in the batch's task alone, with no task per call; a batch whose calls
    all wait gets one worker per call, as if each had its own task.
    """

    __slots__ = ("_calls", "_next", "starting", "workers")

    def __init__(self, calls: int) -> None:
        if calls < 1:
            raise ValueError(f"a worker pool needs at least one call, got {calls}")
        self._calls = calls
        self._next = 0
        self.workers = 1  # the batch's own task
        self.starting = 0  # workers asked for that have not taken a call yet

    @property
    def queued(self) -> int:
        """Calls no worker has taken yet."""
        return self._calls - self._next

    def take(self) -> int | None:
        """The index of the next call for the asking worker, or None: it is done and leaves."""
        index = self._next
        if index < self._calls:
            self._next = index + 1
            return index
        self.workers -= 1
        return None

    def call_waits(self) -> bool:
        """A worker's call is about to wait. True: start one more worker now (which must call
        :meth:`worker_started` when it runs)."""
        if self._next < self._calls and not self.starting:
            self.starting = 1
            self.workers += 1
            return True
        return False

    def worker_started(self) -> None:
        """A worker asked for by :meth:`call_waits` has begun (it takes calls next)."""
        self.starting = 0


def run_groups(sequential: Sequence[bool]) -> list[range]:
    """The groups a batch's runnable calls run in, one group after another: ``sequential[i]`` is
    whether call ``i`` (in declaration order) is of a ``sequential`` tool.

    A sequential call is a group alone — it runs after every call before it has settled and
    before any after it starts; the calls between two sequential ones are one group and run
    concurrently. Without a sequential call there is one group: the whole batch. Pure.
    """
    groups: list[range] = []
    start = 0
    for index, alone in enumerate(sequential):
        if alone:
            if start < index:
                groups.append(range(start, index))
            groups.append(range(index, index + 1))
            start = index + 1
    if start < len(sequential):
        groups.append(range(start, len(sequential)))
    return groups
