"""Budget arithmetic at its boundaries (pure, no Trio; ``make mutate`` runs these against
``effectagent/engine/_budget.py``).

* What children and inner calls used counts toward the run's warnings and exhaustion, like the
  run's own use: a run whose subagent used its tool calls is warned at the same line.
* A child's token grant is the least of what it asked, its own policy and what the run has left
  (no limit on a side: the other side's).
* What a lease is refused for, in words; the child's policy inside its grant; failure streaks.
"""

from __future__ import annotations

import attrs
import pytest

from effectagent.core import (
    AgentPolicy,
    ChildBudget,
    ToolDefect,
    ToolFailure,
    ToolInvalidInput,
    ToolRejected,
    ToolSuccess,
    UsageDelta,
    UsageTotals,
)
from effectagent.engine._budget import (
    NOTHING_DELEGATED,
    Allowance,
    Budget,
    BudgetLease,
    Delegated,
    Exhaustion,
    RepeatedFailure,
)

POLICY = AgentPolicy(max_turns=10, max_tool_calls=10, max_duration=100.0)


# ---- warnings and exhaustion count what children used ---------------------------------------


def test_a_warning_is_due_when_a_subagent_used_the_tool_calls() -> None:
    budget = Budget(POLICY, 0.0, tool_calls=1, delegated_tool_calls=7)
    assert budget.with_due_warnings(0.0)[1] == (Exhaustion("tool_calls", 8, 10),)
    below = Budget(POLICY, 0.0, tool_calls=1, delegated_tool_calls=6)
    assert below.with_due_warnings(0.0) == (below, ())


def test_a_warning_is_due_when_a_subagent_used_the_turns() -> None:
    budget = Budget(POLICY, 0.0, turns=1, delegated_turns=7)
    after, due = budget.with_due_warnings(0.0)
    assert due == (Exhaustion("turns", 8, 10),)
    assert after.warned == {"turns"}
    assert after.with_due_warnings(0.0) == (after, ())  # once


def test_warnings_come_at_the_line_of_each_dimension() -> None:
    policy = attrs.evolve(POLICY, token_budget=100)
    budget = Budget(policy, 0.0, usage=UsageTotals(input_tokens=80))
    assert budget.with_due_warnings(80.0)[1] == (
        Exhaustion("duration", 80.0, 100.0),
        Exhaustion("tokens", 80, 100),
    )
    assert Budget(policy, 0.0, usage=UsageTotals(input_tokens=79)).with_due_warnings(79.9)[1] == ()
    assert Budget(POLICY, 0.0, turns=8).with_due_warnings(0.0)[1] == (Exhaustion("turns", 8, 10),)


def test_when_every_dimension_has_warned_nothing_more_is_due() -> None:
    warned = frozenset({"turns", "tool_calls", "duration"})
    done = Budget(POLICY, 0.0, turns=9, warned=warned)
    assert done.with_due_warnings(99.0) == (done, ())
    policy = attrs.evolve(POLICY, token_budget=100)
    # Three warned of four: the tokens can still warn.
    three = Budget(policy, 0.0, usage=UsageTotals(input_tokens=90), warned=warned)
    after, due = three.with_due_warnings(0.0)
    assert due == (Exhaustion("tokens", 90, 100),)
    assert after.warned == {*warned, "tokens"}


def test_a_run_is_exhausted_by_what_its_children_used() -> None:
    assert Budget(POLICY, 0.0, turns=3, delegated_turns=7).exhausted(0.0) == Exhaustion(
        "turns", 10, 10
    )
    assert Budget(POLICY, 0.0, tool_calls=3, delegated_tool_calls=7).exhausted(0.0) == (
        Exhaustion("tool_calls", 10, 10)
    )
    assert Budget(POLICY, 0.0, turns=3, delegated_turns=6).exhausted(0.0) is None
    budget = Budget(POLICY, 0.0, turns=4, tool_calls=5, delegated_turns=2, delegated_tool_calls=3)
    assert (budget.turns_left, budget.calls_left) == (4, 2)


def test_a_refused_batch_exhausts_the_tool_calls_after_the_turns() -> None:
    budget = Budget(POLICY, 0.0, tool_calls=6, delegated_tool_calls=1).with_refused_batch(5)
    assert budget.refused_batch == Exhaustion("tool_calls", 12, 10, 5)
    assert budget.exhausted(0.0) == Exhaustion("tool_calls", 12, 10, 5)
    assert budget.with_turn().tool_calls == 6
    ran_out = attrs.evolve(budget, turns=10)
    assert ran_out.exhausted(0.0) == Exhaustion("turns", 10, 10)


def test_the_changes_of_a_turn_each_change_one_counter() -> None:
    budget = Budget(
        POLICY,
        5.0,
        turns=1,
        tool_calls=2,
        delegated_turns=3,
        delegated_tool_calls=4,
        warned=frozenset({"turns"}),
        streaks=(("t", 2),),
        repeated_failure=RepeatedFailure("t", 2),
        refused_batch=Exhaustion("tool_calls", 11, 10),
    )
    assert budget.with_turn() == attrs.evolve(budget, turns=2)
    assert budget.with_calls(3) == attrs.evolve(budget, tool_calls=5)
    used = budget.with_usage(UsageDelta(3, 4))
    # The first call's model (None: the runtime's own) is, so far, every call's.
    assert used == attrs.evolve(budget, usage=UsageTotals().add(UsageDelta(3, 4)), model=None)


def test_what_a_batch_delegated_is_charged_to_the_run() -> None:
    budget = Budget(POLICY, 0.0, turns=1, tool_calls=2, delegated_turns=3, delegated_tool_calls=4)
    assert budget.with_delegated(NOTHING_DELEGATED) is budget
    usage = UsageTotals(input_tokens=5)
    charged = budget.with_delegated(Delegated(1, 2, 3, usage))
    assert charged == attrs.evolve(
        budget, tool_calls=3, delegated_turns=5, delegated_tool_calls=7, usage=usage
    )
    assert Allowance(budget).totals() is NOTHING_DELEGATED


# ---- the child's grant ----------------------------------------------------------------------


def _lease(want: ChildBudget, child: AgentPolicy, parent: AgentPolicy = POLICY) -> BudgetLease:
    lease = Allowance(Budget(parent, 0.0)).lease(want, child, 0.0)
    assert isinstance(lease, BudgetLease), lease
    return lease


@pytest.mark.parametrize(
    ("asked", "own", "granted"),
    [(50, 30, 30), (30, 50, 30), (None, 40, 40), (40, None, 40), (None, None, None)],
)
def test_a_child_is_granted_the_least_of_the_tokens_asked_and_its_own(
    asked: int | None, own: int | None, granted: int | None
) -> None:
    lease = _lease(ChildBudget(tokens=asked), AgentPolicy(token_budget=own))
    assert lease.granted.tokens == granted
    assert lease.policy.token_budget == granted


@pytest.mark.parametrize(
    ("asked", "own", "granted"),
    [(50, 30, 20), (10, 30, 10), (None, 15, 15), (None, None, 20), (30, None, 20)],
)
def test_a_child_is_granted_no_more_tokens_than_the_run_has_left(
    asked: int | None, own: int | None, granted: int
) -> None:
    parent = attrs.evolve(POLICY, token_budget=100)
    allowance = Allowance(Budget(parent, 0.0, usage=UsageTotals(input_tokens=70)))
    first = allowance.lease(ChildBudget(tool_calls=2, tokens=10), AgentPolicy(), 0.0)
    assert isinstance(first, BudgetLease)
    assert allowance.reserved == (first.granted.turns, first.granted.tool_calls, 10)
    want = ChildBudget(tool_calls=2, tokens=asked)
    lease = allowance.lease(want, AgentPolicy(token_budget=own), 0.0)
    assert isinstance(lease, BudgetLease)
    assert lease.granted.tokens == granted
    allowance.settle(first, 1, 1, UsageTotals(input_tokens=4))
    assert allowance.reserved[2] == granted
    allowance.settle(lease, 1, 0, UsageTotals())
    assert allowance.reserved == (0, 0, 0)
    assert allowance.totals() == Delegated(0, 2, 1, UsageTotals(input_tokens=4))


def test_a_child_is_refused_when_the_run_has_no_tokens_left() -> None:
    parent = attrs.evolve(POLICY, token_budget=100)
    allowance = Allowance(Budget(parent, 0.0, usage=UsageTotals(input_tokens=99)))
    want = ChildBudget(tool_calls=1)
    assert isinstance(allowance.lease(want, AgentPolicy(), 0.0), BudgetLease)
    assert allowance.lease(want, AgentPolicy(), 0.0) == (
        "the run has no tokens left to give a subagent"
    )


def test_a_child_is_granted_the_least_of_each_dimension() -> None:
    want = ChildBudget(turns=4, tool_calls=6, duration=30.0)
    lease = _lease(want, AgentPolicy(max_turns=3, max_tool_calls=5, max_duration=20.0))
    assert lease.granted == ChildBudget(3, 5, None, 20.0)
    assert lease.policy.max_duration == 20.0
    lease = _lease(want, AgentPolicy(max_turns=8, max_tool_calls=8, max_duration=60.0))
    assert lease.granted == ChildBudget(4, 6, None, 30.0)
    lease = _lease(ChildBudget(turns=4), AgentPolicy(max_duration=600.0))
    assert lease.granted.duration == 90.0  # the run's time left until its turns stop
    assert lease.policy.max_duration == 90.0


def test_a_child_starting_later_gets_the_time_the_run_has_left() -> None:
    allowance = Allowance(Budget(POLICY, 10.0))
    lease = allowance.lease(ChildBudget(tool_calls=1), AgentPolicy(), 50.0)
    assert isinstance(lease, BudgetLease)
    assert lease.granted.duration == 50.0  # its turns stop at 90 s of its 100 (a grace reserve)
    assert allowance.lease(ChildBudget(tool_calls=1), AgentPolicy(), 100.0) == (
        "the run has no time left to give a subagent"
    )
    late = Allowance(Budget(POLICY, 10.0)).lease(ChildBudget(), AgentPolicy(), 99.5)
    assert isinstance(late, BudgetLease)


def test_the_childs_grace_turn_is_inside_its_grant() -> None:
    lease = _lease(ChildBudget(turns=2), AgentPolicy(on_exhaustion="final-answer"))
    assert (lease.policy.max_turns, lease.policy.on_exhaustion) == (1, "final-answer")
    lease = _lease(ChildBudget(turns=3), AgentPolicy(on_exhaustion="fail"))
    assert (lease.policy.max_turns, lease.policy.on_exhaustion) == (3, "fail")
    lease = _lease(ChildBudget(turns=1), AgentPolicy(on_exhaustion="final-answer"))
    assert (lease.policy.max_turns, lease.policy.on_exhaustion) == (1, "fail")


def test_a_child_without_tools_is_granted_no_calls_and_keeps_a_valid_policy() -> None:
    allowance = Allowance(Budget(POLICY, 0.0, tool_calls=10))
    lease = allowance.lease(ChildBudget(tool_calls=3), AgentPolicy(), 0.0, tools=False)
    assert isinstance(lease, BudgetLease)
    assert lease.granted.tool_calls == 0
    assert lease.policy.max_tool_calls == 1
    assert allowance.reserved[1] == 0
    assert _lease(ChildBudget(tool_calls=3), AgentPolicy()).policy.max_tool_calls == 3


def test_what_a_lease_is_refused_for_is_said() -> None:
    no_turns = Allowance(Budget(POLICY, 0.0, turns=10))
    assert no_turns.lease(ChildBudget(), AgentPolicy(), 0.0) == (
        "the run has no turns left to give a subagent"
    )
    no_calls = Allowance(Budget(POLICY, 0.0, tool_calls=10))
    assert no_calls.lease(ChildBudget(), AgentPolicy(), 0.0) == (
        "the run has no tool calls left to give a subagent"
    )
    none_asked = Allowance(Budget(POLICY, 0.0))
    assert none_asked.lease(ChildBudget(tool_calls=0), AgentPolicy(), 0.0) == (
        "the subagent has tools but its budget gives it no tool calls"
    )
    assert none_asked.reserved == (0, 0, 0)


def test_reserved_turns_and_calls_are_not_given_twice() -> None:
    allowance = Allowance(Budget(POLICY, 0.0, turns=4, tool_calls=4))
    first = allowance.lease(ChildBudget(turns=5, tool_calls=5), AgentPolicy(), 0.0)
    assert isinstance(first, BudgetLease)
    assert (first.granted.turns, first.granted.tool_calls) == (5, 5)
    second = allowance.lease(ChildBudget(turns=5, tool_calls=5), AgentPolicy(), 0.0)
    assert isinstance(second, BudgetLease)
    assert (second.granted.turns, second.granted.tool_calls) == (1, 1)
    assert allowance.open_leases == 2
    assert not allowance.admit_inner()
    allowance.settle(first, 2, 1, UsageTotals())
    assert allowance.open_leases == 1
    assert allowance.reserved == (1, 1, 0)
    assert allowance.admit_inner()
    assert allowance.totals() == Delegated(1, 2, 1, UsageTotals())


def test_a_lease_of_another_batch_is_refused() -> None:
    allowance = Allowance(Budget(POLICY, 0.0))
    other = Allowance(Budget(POLICY, 0.0)).lease(ChildBudget(), AgentPolicy(), 0.0)
    assert isinstance(other, BudgetLease)
    assert allowance.open_leases == 0
    with pytest.raises(RuntimeError, match=r"^a budget lease was settled twice, or was not this"):
        allowance.settle(other, 0, 0, UsageTotals())


# ---- failure streaks ------------------------------------------------------------------------


def test_failure_streaks_count_failures_of_one_tool_and_a_success_resets() -> None:
    policy = attrs.evolve(POLICY, repeated_failure_limit=2)
    budget = Budget(policy, 0.0)
    assert budget.with_outcomes([ToolSuccess("c1", "t", 1)]) is budget
    budget = budget.with_outcomes([ToolFailure("c1", "t", None), ToolRejected("c2", "u", "no")])
    assert budget.streaks == (("t", 1),)
    assert budget.repeated_failure is None
    budget = budget.with_outcomes([ToolSuccess("c3", "t", 1), ToolDefect("c4", "u", "boom")])
    assert budget.streaks == (("t", 0), ("u", 1))
    budget = budget.with_outcomes([ToolInvalidInput("c5", "u", "bad"), ToolDefect("c6", "t", "x")])
    assert budget.repeated_failure == RepeatedFailure("u", 2)
    assert budget.exhausted(0.0) == Exhaustion("repeated_failures", 2, 2)
    budget = budget.with_outcomes([ToolDefect("c7", "t", "x")])
    assert budget.repeated_failure == RepeatedFailure("u", 2)  # the first one is kept
    assert dict(budget.streaks) == {"t": 2, "u": 2}


def test_the_last_tool_call_can_still_be_given() -> None:
    allowance = Allowance(Budget(POLICY, 0.0, tool_calls=9))
    assert allowance.admit_inner()  # exactly one left
    assert not allowance.admit_inner()
    one_left = Allowance(Budget(POLICY, 0.0, tool_calls=9))
    assert one_left.lease(ChildBudget(tool_calls=0), AgentPolicy(), 0.0) == (
        "the subagent has tools but its budget gives it no tool calls"
    )
    lease = one_left.lease(ChildBudget(tool_calls=5), AgentPolicy(), 0.0)
    assert isinstance(lease, BudgetLease)
    assert lease.granted.tool_calls == 1


def test_a_child_that_only_took_turns_is_still_charged() -> None:
    allowance = Allowance(Budget(POLICY, 0.0))
    lease = allowance.lease(ChildBudget(tool_calls=1), AgentPolicy(), 0.0)
    assert isinstance(lease, BudgetLease)
    allowance.settle(lease, 2, 0, UsageTotals())
    assert allowance.totals() == Delegated(0, 2, 0, UsageTotals())
    tokens_only = Allowance(Budget(POLICY, 0.0))
    lease = tokens_only.lease(ChildBudget(tool_calls=1), AgentPolicy(), 0.0)
    assert isinstance(lease, BudgetLease)
    tokens_only.settle(lease, 0, 0, UsageTotals(output_tokens=3))
    assert tokens_only.totals() == Delegated(0, 0, 0, UsageTotals(output_tokens=3))


def test_a_limit_is_exhausted_exactly_when_it_is_reached() -> None:
    policy = attrs.evolve(POLICY, token_budget=100)
    assert Budget(policy, 10.0).exhausted(110.0) == Exhaustion("duration", 100.0, 100.0)
    assert Budget(policy, 10.0).exhausted(109.9) is None
    used = Budget(policy, 0.0, usage=UsageTotals(input_tokens=100))
    assert used.exhausted(0.0) == Exhaustion("tokens", 100, 100)
    assert attrs.evolve(used, usage=UsageTotals(input_tokens=99)).exhausted(0.0) is None


def test_a_warning_is_due_exactly_at_the_line_of_a_dimension_alone() -> None:
    assert Budget(POLICY, 10.0).with_due_warnings(90.0)[1] == (Exhaustion("duration", 80.0, 100.0),)
    policy = attrs.evolve(POLICY, token_budget=100)
    tokens = Budget(policy, 0.0, usage=UsageTotals(input_tokens=80))
    assert tokens.with_due_warnings(0.0)[1] == (Exhaustion("tokens", 80, 100),)


def test_limits_count_what_children_used() -> None:
    budget = Budget(POLICY, 10.0, turns=1, tool_calls=2, delegated_turns=3, delegated_tool_calls=4)
    assert budget.limits(30.0) == [
        Exhaustion("turns", 4, 10),
        Exhaustion("tool_calls", 6, 10),
        Exhaustion("duration", 20.0, 100.0),
    ]


def test_charging_a_batch_keeps_the_failure_and_the_refusal_on_record() -> None:
    failure = RepeatedFailure("t", 3)
    budget = Budget(POLICY, 0.0, repeated_failure=failure, streaks=(("t", 3),))
    charged = budget.with_delegated(Delegated(1, 0, 0))
    assert (charged.repeated_failure, charged.streaks, charged.tool_calls) == (
        failure,
        (("t", 3),),
        1,
    )
    refused = budget.with_refused_batch(20)
    assert refused.repeated_failure == failure
    assert refused.with_delegated(Delegated(1, 0, 0)).refused_batch == refused.refused_batch
