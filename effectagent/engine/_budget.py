"""Budget arithmetic for a run — pure (no Trio, no clock of its own: times are passed in).

Dimensions: ``turns``, ``tool_calls``, ``duration`` and, when set, ``tokens`` and
``repeated_failures``. A warning is due once per dimension when use reaches the policy's
``warning_ratio`` (80 %) of the limit; exhaustion is reported for the first dimension, in that fixed
order, whose use reached its limit.

Child runs (subagents) are carved out of what is left: :meth:`BudgetState.carve` reserves a
child's turns, tool calls and tokens — nothing else (another child, an inner tool call) can take
them while it runs — and :meth:`BudgetState.give_back` charges what the child used and frees the
rest. The child's turns and tool calls count against this run's limits from then on; its usage is
added to this run's.
"""

from __future__ import annotations

from typing import final

from effectagent.core import AgentPolicy, ChildBudget, ToolOutcome, UsageDelta, UsageTotals

__all__ = ["BudgetState", "Dimension"]

Dimension = str

_NO_USAGE = UsageTotals()  # immutable: every run starts from the same value


@final
class BudgetState:
    """Counters of one run and the decisions that follow from them."""

    __slots__ = (
        "_failure_streaks",
        "_reserved_calls",
        "_reserved_tokens",
        "_reserved_turns",
        "_warned",
        "delegated_tool_calls",
        "delegated_turns",
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
        # What child runs used (charged when each ended), and what running ones hold.
        self.delegated_turns = 0
        self.delegated_tool_calls = 0
        self._reserved_turns = 0
        self._reserved_calls = 0
        self._reserved_tokens = 0

    def limits(self, now: float) -> list[tuple[Dimension, float, float]]:
        """``(dimension, used, limit)`` for every active dimension, in the fixed order."""
        policy = self.policy
        dims: list[tuple[Dimension, float, float]] = [
            ("turns", self.turns + self.delegated_turns, policy.max_turns),
            ("tool_calls", self.tool_calls + self.delegated_tool_calls, policy.max_tool_calls),
            ("duration", now - self.started_at, policy.max_duration),
        ]
        if policy.token_budget is not None:
            dims.append(("tokens", self.usage.total_tokens, policy.token_budget))
        return dims

    def exhausted(self, now: float) -> tuple[Dimension, float, float] | None:
        """The first exhausted dimension, if any (repeated failures count as one)."""
        # The order of ``limits``, checked without building its list (this runs every turn).
        policy = self.policy
        turns = self.turns + self.delegated_turns
        if turns >= policy.max_turns:
            return ("turns", turns, policy.max_turns)
        tool_calls = self.tool_calls + self.delegated_tool_calls
        if tool_calls >= policy.max_tool_calls:
            return ("tool_calls", tool_calls, policy.max_tool_calls)
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
        left = self._calls_left()
        admitted = max(0, min(requested, left))
        self.tool_calls += admitted
        return admitted

    def _calls_left(self) -> int:
        return (
            self.policy.max_tool_calls
            - self.tool_calls
            - self.delegated_tool_calls
            - self._reserved_calls
        )

    def carve(
        self, want: ChildBudget, child: AgentPolicy, now: float, *, tools: bool = True
    ) -> ChildBudget | str:
        """Reserve a child run's budget: for each dimension the least of ``want``, the child's
        own ``policy`` and what this run has left (minus what running children hold). Returns
        what was granted — to be given back with :meth:`give_back` — or, when this run has
        nothing left of a dimension the child needs, why not (nothing is reserved then). A child
        without ``tools`` needs no tool calls: it is granted none."""
        policy = self.policy
        turns_left = policy.max_turns - self.turns - self.delegated_turns - self._reserved_turns
        calls_left = self._calls_left()
        duration_left = policy.max_duration - (now - self.started_at)
        if turns_left < 1:
            return "the run has no turns left to give a subagent"
        calls = min(want.tool_calls, child.max_tool_calls, calls_left) if tools else 0
        if tools and calls < 1:
            if calls_left < 1:
                return "the run has no tool calls left to give a subagent"
            return "the subagent has tools but its budget gives it no tool calls"
        if duration_left <= 0:
            return "the run has no time left to give a subagent"
        tokens = _least(want.tokens, child.token_budget)
        if policy.token_budget is not None:
            tokens_left = policy.token_budget - self.usage.total_tokens - self._reserved_tokens
            if tokens_left < 1:
                return "the run has no tokens left to give a subagent"
            tokens = tokens_left if tokens is None else min(tokens, tokens_left)
        granted = ChildBudget(
            min(want.turns, child.max_turns, turns_left),
            calls,
            tokens,
            min(child.max_duration, duration_left, want.duration or duration_left),
        )
        self._reserved_turns += granted.turns
        self._reserved_calls += granted.tool_calls
        if policy.token_budget is not None and granted.tokens is not None:
            self._reserved_tokens += granted.tokens
        return granted

    def give_back(
        self, granted: ChildBudget, turns: int, tool_calls: int, usage: UsageTotals
    ) -> None:
        """A child run that was granted ``granted`` ended having used ``turns``, ``tool_calls``
        and ``usage``: charge those to this run and free the reservation."""
        self._reserved_turns -= granted.turns
        self._reserved_calls -= granted.tool_calls
        if self.policy.token_budget is not None and granted.tokens is not None:
            self._reserved_tokens -= granted.tokens
        self.delegated_turns += turns
        self.delegated_tool_calls += tool_calls
        self.usage = self.usage.including(usage)

    @property
    def reserved(self) -> tuple[int, int, int]:
        """``(turns, tool_calls, tokens)`` held by child runs still going."""
        return (self._reserved_turns, self._reserved_calls, self._reserved_tokens)

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


def _least(a: int | None, b: int | None) -> int | None:
    """The smaller of two optional limits (None: no limit)."""
    if a is None:
        return b
    if b is None:
        return a
    return min(a, b)
