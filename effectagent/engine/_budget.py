"""Budget arithmetic for a run — pure (no Trio, no clock of its own: times are passed in).

Dimensions: ``turns``, ``tool_calls``, ``duration`` and, when set, ``tokens`` and
``repeated_failures``. A warning is due once per dimension when use reaches the policy's
``warning_ratio`` (80 %) of the limit; exhaustion is reported for the first dimension, in that fixed
order, whose use reached its limit.
"""

from __future__ import annotations

from typing import final

from effectagent.core import AgentPolicy, ToolOutcome, UsageDelta, UsageTotals

__all__ = ["BudgetState", "Dimension"]

Dimension = str

_NO_USAGE = UsageTotals()  # immutable: every run starts from the same value


@final
class BudgetState:
    """Counters of one run and the decisions that follow from them."""

    __slots__ = (
        "_failure_streaks",
        "_warned",
        "policy",
        "repeated_failure",
        "started_at",
        "tool_calls",
        "turns",
        "usage",
    )

    def __init__(self, policy: AgentPolicy, started_at: float) -> None:
        self.policy = policy
        self.started_at = started_at
        self.turns = 0
        self.tool_calls = 0
        self.usage = _NO_USAGE
        self._warned: set[str] = set()
        self._failure_streaks: dict[str, int] = {}
        self.repeated_failure: tuple[str, int] | None = None

    def limits(self, now: float) -> list[tuple[Dimension, float, float]]:
        """``(dimension, used, limit)`` for every active dimension, in the fixed order."""
        policy = self.policy
        dims: list[tuple[Dimension, float, float]] = [
            ("turns", self.turns, policy.max_turns),
            ("tool_calls", self.tool_calls, policy.max_tool_calls),
            ("duration", now - self.started_at, policy.max_duration),
        ]
        if policy.token_budget is not None:
            dims.append(("tokens", self.usage.total_tokens, policy.token_budget))
        return dims

    def exhausted(self, now: float) -> tuple[Dimension, float, float] | None:
        """The first exhausted dimension, if any (repeated failures count as one)."""
        # The order of ``limits``, checked without building its list (this runs every turn).
        policy = self.policy
        if self.turns >= policy.max_turns:
            return ("turns", self.turns, policy.max_turns)
        if self.tool_calls >= policy.max_tool_calls:
            return ("tool_calls", self.tool_calls, policy.max_tool_calls)
        elapsed = now - self.started_at
        if elapsed >= policy.max_duration:
            return ("duration", elapsed, policy.max_duration)
        budget = policy.token_budget
        if budget is not None and self.usage.total_tokens >= budget:
            return ("tokens", self.usage.total_tokens, budget)
        if self.repeated_failure is not None:
            _, count = self.repeated_failure
            return ("repeated_failures", count, self.policy.repeated_failure_limit)
        return None

    def due_warnings(self, now: float) -> list[tuple[Dimension, float, float]]:
        """Dimensions that just crossed the warning ratio; each is returned once per run."""
        due = []
        ratio = self.policy.warning_ratio
        for dim, used, limit in self.limits(now):
            if dim not in self._warned and used >= ratio * limit:
                self._warned.add(dim)
                due.append((dim, used, limit))
        return due

    def start_turn(self) -> None:
        """Count a turn."""
        self.turns += 1

    def record_usage(self, delta: UsageDelta) -> None:
        """Add one model call's usage."""
        self.usage = self.usage.add(delta)

    def admit_tool_calls(self, requested: int) -> int:
        """How many of a batch of ``requested`` calls may run (the rest are rejected); counts them."""
        admitted = max(0, min(requested, self.policy.max_tool_calls - self.tool_calls))
        self.tool_calls += admitted
        return admitted

    def record_outcomes(self, outcomes: list[ToolOutcome]) -> None:
        """Update per-tool failure streaks (invalid input, failure and defect count; success resets)."""
        limit = self.policy.repeated_failure_limit
        for outcome in outcomes:
            name = outcome.tool_name
            if outcome.kind == "success":
                self._failure_streaks[name] = 0
            elif outcome.kind in ("invalid-input", "failure", "defect"):
                streak = self._failure_streaks.get(name, 0) + 1
                self._failure_streaks[name] = streak
                if streak >= limit and self.repeated_failure is None:
                    self.repeated_failure = (name, streak)
