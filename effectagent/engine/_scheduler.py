"""Tool-batch bookkeeping — pure. Results settle in any order and commit in declaration order.

Invariants (property-tested in ``tests/engine/test_scheduling.py``):

* every declared call settles exactly once, with exactly one outcome (a second settle is a bug and
  raises);
* :meth:`BatchLedger.commit` is possible only when the batch is complete, and yields the outcomes in
  the model's declaration order whatever the completion order (CAP-005, RUN-005).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import final

from effectagent.core import ToolOutcome

__all__ = ["BatchLedger"]


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
