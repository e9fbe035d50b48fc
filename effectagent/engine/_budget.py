"""Budget arithmetic for a run — pure values, no Trio, no clock of its own (times are passed in).

:class:`Budget` is part of the run's state (``_machine.RunState``): a frozen value, replaced — never
changed — by the state machine as turns start, models report usage and batches settle.

Dimensions: ``turns``, ``tool_calls``, ``duration`` and, when set, ``tokens`` and ``cost`` (in
micro-dollars: what the run's priced model calls cost, its children's included); then
``repeated_failures``. A warning is due once per dimension when use reaches the policy's
``warning_ratio`` (80 %) of the limit; exhaustion is reported for the first dimension, in that fixed
order, whose use reached its limit.

While a batch runs, what its calls take beyond the batch's own calls — the inner calls a tool makes
(Code Mode) and the budgets of the child runs a tool starts (subagents) — goes through the batch's
:class:`Allowance`, made from the run's budget (as the batch started) when a call first needs it,
and owned by the batch. A child gets a :class:`BudgetLease`: its turns, tool calls and tokens are
carved out of what is left (so no other child or inner call can take them while it runs), and it is
settled exactly once when the child ends — what the child used is charged, the rest is freed. When
the batch settles, the allowance's totals (:class:`Delegated`) are folded into the run's budget by
the state machine: no code outside the run's owner changes its budget.

While every model call of a run is one model's, its budget keeps the usage without a breakdown by
model (``Budget.model`` names that model): :attr:`Budget.totals` adds it for events and results.

The tree of a run's children stays inside the run's limits: a child's grace turn is part of its
grant (a child granted ``n`` turns under "final-answer" runs ``n - 1`` turns and its grace turn;
granted one, it fails instead of taking a grace turn), so a whole tree makes at most the root's
``max_turns`` model calls plus the root's own grace turn.
"""

from __future__ import annotations

from collections.abc import Sequence
from decimal import Decimal
from typing import Final, final

import attrs

from effectagent.ai import NoPriceForModel, PriceTable, model_name_of
from effectagent.core import Agent, AgentPolicy, ChildBudget, ToolOutcome, UsageDelta, UsageTotals
from effectagent.effect import _fast_init

__all__ = [
    "NOTHING_DELEGATED",
    "BROKEN_DOWN",
    "Allowance",
    "Budget",
    "BudgetLease",
    "Delegated",
    "Exhaustion",
    "RepeatedFailure",
    "check_cost_budget",
    "unpriced",
]

_NO_USAGE = UsageTotals()  # immutable: every run starts from the same value


@final
class _BrokenDown:
    """``Budget.model`` when the budget's ``usage`` holds its own breakdown by model."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "BROKEN_DOWN"


BROKEN_DOWN: Final = _BrokenDown()
_FAILING_KINDS = frozenset({"invalid-input", "failure", "defect"})


@_fast_init
@attrs.frozen(slots=True)
class Exhaustion:
    """A dimension that ran out (or, for a warning, came near): how much was used of what.
    ``refused_batch``: the calls of a batch refused whole because it would have gone past
    ``max_tool_calls`` (``used`` then counts them: none of them ran)."""

    dimension: str
    used: float
    limit: float
    refused_batch: int = 0


@_fast_init
@attrs.frozen(slots=True)
class RepeatedFailure:
    """One tool failed ``count`` times in a row."""

    tool_name: str
    count: int


@_fast_init
@attrs.frozen(slots=True)
class Delegated:
    """What a batch's calls took beyond the batch's own calls: inner calls, and what its child
    runs used (their turns and tool calls, their own children's included, and their usage)."""

    inner_calls: int = 0
    turns: int = 0
    tool_calls: int = 0
    usage: UsageTotals = _NO_USAGE


_NOTHING_DELEGATED = NOTHING_DELEGATED = Delegated()


@_fast_init
@attrs.frozen(slots=True)
class Budget:
    """A run's use of its policy's limits (see the module notes). Every method returns a new
    value; the fields are the counters."""

    policy: AgentPolicy
    started_at: float
    turns: int = 0  # the run's own
    tool_calls: int = 0  # the run's own and its inner calls'
    usage: UsageTotals = _NO_USAGE  # the run's and its children's
    delegated_turns: int = 0  # what its children used (charged as each ended)
    delegated_tool_calls: int = 0
    warned: frozenset[str] = frozenset()
    streaks: tuple[tuple[str, int], ...] = ()  # failures in a row, by tool
    repeated_failure: RepeatedFailure | None = None
    refused_batch: Exhaustion | None = None  # a batch that would have gone past max_tool_calls
    #: Whose calls ``usage`` counts: while every call it counts was made by one model, that
    #: model's name (None: the runtime's own) — ``usage`` then has no breakdown of its own, and a
    #: run keeps no copy of its figures for it while it waits; :data:`BROKEN_DOWN` once
    #: ``usage.by_model`` holds the breakdown. :attr:`totals` has it either way.
    model: str | _BrokenDown | None = BROKEN_DOWN

    @property
    def totals(self) -> UsageTotals:
        """``usage`` with its breakdown by model: what events and results report."""
        model = self.model
        if isinstance(model, _BrokenDown):
            return self.usage
        return self.usage.attributed_to(model)

    @property
    def ends_at(self) -> float:
        """When the run must have ended, on Trio's clock: its start plus ``max_duration``."""
        return self.started_at + self.policy.max_duration

    def _with(
        self,
        *,
        tool_calls: int | None = None,
        usage: UsageTotals | None = None,
        delegated_turns: int | None = None,
        delegated_tool_calls: int | None = None,
        warned: frozenset[str] | None = None,
        streaks: tuple[tuple[str, int], ...] | None = None,
        repeated_failure: RepeatedFailure | None = None,
        refused_batch: Exhaustion | None = None,
    ) -> Budget:
        return Budget(
            self.policy,
            self.started_at,
            self.turns,
            self.tool_calls if tool_calls is None else tool_calls,
            self.usage if usage is None else usage,
            self.delegated_turns if delegated_turns is None else delegated_turns,
            self.delegated_tool_calls if delegated_tool_calls is None else delegated_tool_calls,
            self.warned if warned is None else warned,
            self.streaks if streaks is None else streaks,
            self.repeated_failure if repeated_failure is None else repeated_failure,
            self.refused_batch if refused_batch is None else refused_batch,
            self.model,
        )

    # ---- decisions --------------------------------------------------------------------------

    def exhausted(self, now: float) -> Exhaustion | None:
        """The first exhausted dimension, if any (repeated failures and a refused batch count)."""
        policy = self.policy
        turns = self.turns + self.delegated_turns
        if turns >= policy.max_turns:
            return Exhaustion("turns", turns, policy.max_turns)
        if self.refused_batch is not None:
            return self.refused_batch
        tool_calls = self.tool_calls + self.delegated_tool_calls
        if tool_calls >= policy.max_tool_calls:
            return Exhaustion("tool_calls", tool_calls, policy.max_tool_calls)
        elapsed = now - self.started_at
        if elapsed >= policy.max_duration:
            return Exhaustion("duration", elapsed, policy.max_duration)
        budget = policy.token_budget
        if budget is not None and self.usage.total_tokens >= budget:
            return Exhaustion("tokens", self.usage.total_tokens, budget)
        cost = policy.cost_budget_micros
        if cost is not None and self.usage.cost_micros >= cost:
            return Exhaustion("cost", self.usage.cost_micros, cost)
        failure = self.repeated_failure
        if failure is not None:
            return Exhaustion("repeated_failures", failure.count, policy.repeated_failure_limit)
        return None

    def limits(self, now: float) -> list[Exhaustion]:
        """Every active dimension's use, in the fixed order."""
        policy = self.policy
        dims = [
            Exhaustion("turns", self.turns + self.delegated_turns, policy.max_turns),
            Exhaustion(
                "tool_calls", self.tool_calls + self.delegated_tool_calls, policy.max_tool_calls
            ),
            Exhaustion("duration", now - self.started_at, policy.max_duration),
        ]
        if policy.token_budget is not None:
            dims.append(Exhaustion("tokens", self.usage.total_tokens, policy.token_budget))
        cost = policy.cost_budget_micros
        if cost is not None:
            dims.append(Exhaustion("cost", self.usage.cost_micros, cost))
        return dims

    def with_due_warnings(self, now: float) -> tuple[Budget, tuple[Exhaustion, ...]]:
        """The dimensions that just crossed the warning ratio (each once per run), and the
        budget that remembers them."""
        warned = self.warned
        policy = self.policy
        tokens = policy.token_budget
        cost = policy.cost_budget
        if len(warned) == 3 + (tokens is not None) + (cost is not None):
            return self, ()  # every dimension has warned (this runs once a turn)
        ratio = policy.warning_ratio
        # The order of ``limits``, checked without building its list until one is due.
        turns = self.turns + self.delegated_turns
        calls = self.tool_calls + self.delegated_tool_calls
        elapsed = now - self.started_at
        if (
            ("turns" in warned or turns < ratio * policy.max_turns)
            and ("tool_calls" in warned or calls < ratio * policy.max_tool_calls)
            and ("duration" in warned or elapsed < ratio * policy.max_duration)
            and (tokens is None or "tokens" in warned or self.usage.total_tokens < ratio * tokens)
            and (cost is None or "cost" in warned or not self._cost_due(ratio))
        ):
            return self, ()
        due = tuple(
            dim
            for dim in self.limits(now)
            if dim.dimension not in warned and dim.used >= ratio * dim.limit
        )
        return self._with(warned=warned | {d.dimension for d in due}), due

    def _cost_due(self, ratio: float) -> bool:
        limit = self.policy.cost_budget_micros
        return limit is not None and self.usage.cost_micros >= ratio * limit

    @property
    def calls_left(self) -> int:
        """Tool calls the run may still make."""
        return self.policy.max_tool_calls - self.tool_calls - self.delegated_tool_calls

    @property
    def turns_left(self) -> int:
        """Turns the run may still take (its children's count)."""
        return self.policy.max_turns - self.turns - self.delegated_turns

    # ---- changes ----------------------------------------------------------------------------

    # The changes a turn makes build the value directly, in field order (``_with``'s keyword
    # handling costs more than the construction; these run a few times a turn).

    def with_turn(self) -> Budget:
        """One more turn counted."""
        return Budget(
            self.policy,
            self.started_at,
            self.turns + 1,
            self.tool_calls,
            self.usage,
            self.delegated_turns,
            self.delegated_tool_calls,
            self.warned,
            self.streaks,
            self.repeated_failure,
            self.refused_batch,
            self.model,
        )

    def with_usage(
        self, delta: UsageDelta, model: str | None = None, *, live: bool = True
    ) -> Budget:
        """One model call's usage added (by ``model``, the name its record gives it);
        ``live=False`` for a call made beside the conversation (a check's, a summary's), which
        leaves the live-context figures as they were (:meth:`UsageTotals.add`)."""
        usage, sole = self.usage, self.model
        if isinstance(sole, _BrokenDown):
            if usage is _NO_USAGE:  # the first call: its model is, so far, every call's
                usage, sole = usage.add(delta, live=live), model
            else:
                usage = usage.add_from(model, delta, live=live)
        elif sole == model:
            usage = usage.add(delta, live=live)
        else:  # a second model: the breakdown is kept in the figures from now on
            usage, sole = self.totals.add_from(model, delta, live=live), BROKEN_DOWN
        return Budget(
            self.policy,
            self.started_at,
            self.turns,
            self.tool_calls,
            usage,
            self.delegated_turns,
            self.delegated_tool_calls,
            self.warned,
            self.streaks,
            self.repeated_failure,
            self.refused_batch,
            sole,
        )

    def with_calls(self, count: int) -> Budget:
        """A batch of ``count`` calls admitted."""
        return Budget(
            self.policy,
            self.started_at,
            self.turns,
            self.tool_calls + count,
            self.usage,
            self.delegated_turns,
            self.delegated_tool_calls,
            self.warned,
            self.streaks,
            self.repeated_failure,
            self.refused_batch,
            self.model,
        )

    def with_refused_batch(self, requested: int) -> Budget:
        """A batch of ``requested`` calls would have gone past ``max_tool_calls``: it ran none,
        and the tool-call budget counts as exhausted."""
        limit = self.policy.max_tool_calls
        used = self.tool_calls + self.delegated_tool_calls + requested
        return self._with(refused_batch=Exhaustion("tool_calls", used, limit, requested))

    def with_delegated(self, delegated: Delegated) -> Budget:
        """What a batch's inner calls and child runs used, charged."""
        if delegated is _NOTHING_DELEGATED:
            return self
        used = delegated.usage
        budget = self._with(
            tool_calls=self.tool_calls + delegated.inner_calls,
            delegated_turns=self.delegated_turns + delegated.turns,
            delegated_tool_calls=self.delegated_tool_calls + delegated.tool_calls,
        )
        if used == _NO_USAGE and not used.by_model:  # the children used no model
            return budget
        # Their usage joins the breakdown, which the figures hold from now on.
        return attrs.evolve(budget, usage=self.totals.including(used), model=BROKEN_DOWN)

    def with_outcomes(self, outcomes: Sequence[ToolOutcome]) -> Budget:
        """Per-tool failure streaks updated (invalid input, failure and defect count; success
        resets); the first streak to reach ``repeated_failure_limit`` is remembered."""
        if not self.streaks:
            for outcome in outcomes:
                if outcome.kind != "success":
                    break
            else:
                return self  # nothing failing, and nothing to reset
        streaks = dict(self.streaks)
        failure = self.repeated_failure
        limit = self.policy.repeated_failure_limit
        for outcome in outcomes:
            name = outcome.tool_name
            if outcome.kind == "success":
                streaks[name] = 0
            elif outcome.kind in _FAILING_KINDS:
                streak = streaks[name] = streaks.get(name, 0) + 1
                if streak >= limit and failure is None:
                    failure = RepeatedFailure(name, streak)
        return self._with(streaks=tuple(streaks.items()), repeated_failure=failure)


@_fast_init
@attrs.frozen(slots=True)
class BudgetLease:
    """What a child run was granted (``granted``), to be settled once with :meth:`Allowance.settle`.
    ``policy`` is the child's policy within that grant (its grace turn included); ``cost`` the
    micro-dollars it may spend, carved out of a parent's cost budget (None: the parent has none).
    """

    granted: ChildBudget
    policy: AgentPolicy
    cost: int | None = None


@final
class Allowance:
    """What one batch's calls may take beyond the batch's own calls (see the module notes).
    Owned by the batch; pure bookkeeping."""

    __slots__ = (
        "_budget",
        "_held",
        "_inner",
        "_reserved_calls",
        "_reserved_cost",
        "_reserved_tokens",
        "_reserved_turns",
        "_tool_calls",
        "_turns",
        "_usage",
    )

    def __init__(self, budget: Budget) -> None:
        self._budget = budget
        self._inner = 0
        self._turns = 0
        self._tool_calls = 0
        self._usage = _NO_USAGE
        self._reserved_turns = 0
        self._reserved_calls = 0
        self._reserved_tokens = 0
        self._reserved_cost = 0
        self._held: set[int] | None = None  # ids of the leases not settled yet (made lazily)

    def _calls_left(self) -> int:
        return self._budget.calls_left - self._inner - self._tool_calls - self._reserved_calls

    def admit_inner(self) -> bool:
        """Count one inner call if the run has a tool call left for it."""
        if self._calls_left() < 1:
            return False
        self._inner += 1
        return True

    def lease(
        self,
        want: ChildBudget,
        child: AgentPolicy,
        now: float,
        *,
        tools: bool = True,
        priced: bool = True,
    ) -> BudgetLease | str:
        """Reserve a child run's budget: for each dimension the least of ``want``, the child's
        own policy and what the run has left (minus what running children hold). Returns the
        lease — to be settled with :meth:`settle` — or, when the run has nothing left of a
        dimension the child needs, why not (nothing is reserved then). A child without ``tools``
        needs no tool calls: it is granted none. Under a cost budget a child is granted what is
        left of it (or its own, if less), and one whose models are not all ``priced`` is
        refused: its cost could not be counted."""
        budget = self._budget
        policy = budget.policy
        turns_left = budget.turns_left - self._turns - self._reserved_turns
        calls_left = self._calls_left()
        # Until the run's turns stop (its grace reserve before ``max_duration``): the call that
        # runs the child is cut off then, and a child granted longer would be interrupted
        # instead of ending on its own deadline (with its grace turn, under "final-answer").
        duration_left = policy.max_duration - policy.grace_reserve - (now - budget.started_at)
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
            used = budget.usage.total_tokens + self._usage.total_tokens + self._reserved_tokens
            tokens_left = policy.token_budget - used
            if tokens_left < 1:
                return "the run has no tokens left to give a subagent"
            tokens = tokens_left if tokens is None else min(tokens, tokens_left)
        cost = child.cost_budget_micros
        limit = policy.cost_budget_micros
        if limit is not None:
            if not priced:
                return "the run has a cost budget, and the subagent's model has no price"
            spent = budget.usage.cost_micros + self._usage.cost_micros + self._reserved_cost
            cost_left = limit - spent
            if cost_left < 1:
                return "the run has no cost budget left to give a subagent"
            cost = cost_left if cost is None else min(cost, cost_left)
        granted = ChildBudget(
            min(want.turns, child.max_turns, turns_left),
            calls,
            tokens,
            min(child.max_duration, duration_left, want.duration or duration_left),
        )
        lease = BudgetLease(granted, _child_policy(child, granted, cost), cost)
        if limit is not None and cost is not None:
            self._reserved_cost += cost
        self._reserved_turns += granted.turns
        self._reserved_calls += granted.tool_calls
        if policy.token_budget is not None and granted.tokens is not None:
            self._reserved_tokens += granted.tokens
        if self._held is None:
            self._held = set()
        self._held.add(id(lease))
        return lease

    def settle(self, lease: BudgetLease, turns: int, tool_calls: int, usage: UsageTotals) -> None:
        """The child that holds ``lease`` ended having used ``turns``, ``tool_calls`` and
        ``usage``: charge them and free the reservation. Exactly once per lease."""
        held = self._held
        if held is None or id(lease) not in held:
            raise RuntimeError("a budget lease was settled twice, or was not this batch's")
        held.discard(id(lease))
        granted = lease.granted
        self._reserved_turns -= granted.turns
        self._reserved_calls -= granted.tool_calls
        if self._budget.policy.token_budget is not None and granted.tokens is not None:
            self._reserved_tokens -= granted.tokens
        if self._budget.policy.cost_budget is not None and lease.cost is not None:
            self._reserved_cost -= lease.cost
        self._turns += turns
        self._tool_calls += tool_calls
        self._usage = self._usage.including(usage)

    @property
    def reserved(self) -> tuple[int, int, int]:
        """``(turns, tool_calls, tokens)`` held by child runs still going."""
        return (self._reserved_turns, self._reserved_calls, self._reserved_tokens)

    @property
    def reserved_cost(self) -> int:
        """Micro-dollars held by child runs still going (under a cost budget)."""
        return self._reserved_cost

    @property
    def open_leases(self) -> int:
        """Leases not settled yet."""
        return 0 if self._held is None else len(self._held)

    def totals(self) -> Delegated:
        """What the batch's inner calls and settled child runs used."""
        if not (self._inner or self._turns or self._tool_calls or self._usage.total_tokens):
            return _NOTHING_DELEGATED
        return Delegated(self._inner, self._turns, self._tool_calls, self._usage)


def _child_policy(child: AgentPolicy, granted: ChildBudget, cost: int | None = None) -> AgentPolicy:
    """The child's policy within its grant: its grace turn is one of the granted turns (with one
    turn granted it has no room for one, and fails instead); ``cost`` micro-dollars its cost
    budget (None: its own)."""
    grace = child.on_exhaustion == "final-answer" and granted.turns >= 2
    return attrs.evolve(
        child,
        max_turns=granted.turns - 1 if grace else granted.turns,
        on_exhaustion="final-answer" if grace else "fail",
        # A child without tools is granted none; its policy still needs a positive limit.
        max_tool_calls=max(1, granted.tool_calls),
        token_budget=granted.tokens,
        max_duration=child.max_duration if granted.duration is None else granted.duration,
        cost_budget=child.cost_budget if cost is None else Decimal(cost).scaleb(-6),
    )


def check_cost_budget(agent: Agent, prices: PriceTable, *models: object) -> None:
    """Raise :class:`~effectagent.ai.NoPriceForModel` when ``agent`` has a cost budget and one
    of the ``models`` its runs may ask (a routing model's members each) has no price in
    ``prices``: a limit that cannot be enforced is refused, not ignored."""
    budget = agent.policy.cost_budget_micros
    if budget is None:
        return
    missing = unpriced(prices, *models)
    if missing is not None:
        raise NoPriceForModel(agent.name, model_name_of(missing), budget)


def unpriced(prices: PriceTable, *models: object) -> object | None:
    """The first of ``models`` (a routing model's members each) without a price in ``prices``,
    or None when every one has a price."""
    for model in models:
        members = getattr(model, "models", None)
        if isinstance(members, tuple) and members:  # a FallbackModel: each member may answer
            missing = unpriced(prices, *members)
        else:
            missing = None if prices.price_of(model_name_of(model)) is not None else model
        if missing is not None:
            return missing
    return None


def _least(a: int | None, b: int | None) -> int | None:
    """The smaller of two optional limits (None: no limit)."""
    if a is None:
        return b
    if b is None:
        return a
    return min(a, b)
