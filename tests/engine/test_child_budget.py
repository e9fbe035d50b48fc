"""Budget leases for child runs — pure bookkeeping, tested without Trio.

Invariants, for every interleaving of children starting and ending and inner calls of the batch:
what the run used, what its ended children used and what running children hold never exceeds a
limit; each grant is at most what was asked, what the child's policy allows and what was left;
a lease is settled exactly once; when every child has ended nothing is held, and the batch's
totals are exactly what the children and inner calls used — which the run's budget then charges.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from effectagent.core import AgentPolicy, ChildBudget, UsageDelta, UsageTotals
from effectagent.engine._budget import Allowance, Budget, BudgetLease

wants = st.builds(
    ChildBudget,
    turns=st.integers(1, 8),
    tool_calls=st.integers(0, 8),
    tokens=st.none() | st.integers(1, 500),
)
children = st.builds(
    AgentPolicy,
    max_turns=st.integers(1, 8),
    max_tool_calls=st.integers(1, 8),
    token_budget=st.none() | st.integers(1, 500),
    on_exhaustion=st.sampled_from(["final-answer", "fail"]),
)
# An operation: start a child, end the oldest running child having used a fraction of its grant,
# or one inner call of the batch.
operations = st.lists(
    st.one_of(
        st.tuples(st.just("start"), wants, children, st.booleans()),
        st.tuples(st.just("end"), st.floats(0, 1), st.floats(0, 1), st.none()),
        st.tuples(st.just("inner"), st.none(), st.none(), st.none()),
    ),
    max_size=30,
)


def usage_of(tokens: int) -> UsageTotals:
    return UsageTotals().add(UsageDelta(tokens - tokens // 2, tokens // 2))


@given(
    operations,
    st.integers(1, 12),
    st.integers(1, 12),
    st.none() | st.integers(1, 1000),
)
def test_children_never_take_more_than_is_left_and_everything_is_given_back(
    ops: list[tuple[object, ...]], max_turns: int, max_calls: int, tokens: int | None
) -> None:
    policy = AgentPolicy(max_turns=max_turns, max_tool_calls=max_calls, token_budget=tokens)
    budget = Budget(policy, 0.0).with_turn()
    allowance = Allowance(budget)
    running: list[BudgetLease] = []
    used_turns = used_calls = used_tokens = inner = 0
    for op in ops:
        if op[0] == "start":
            want, child, tools = op[1], op[2], op[3]
            assert isinstance(want, ChildBudget)
            assert isinstance(child, AgentPolicy)
            assert isinstance(tools, bool)
            held_turns, held_calls, held_tokens = allowance.reserved
            turns_left = max_turns - budget.turns - used_turns - held_turns
            calls_left = max_calls - inner - used_calls - held_calls
            lease = allowance.lease(want, child, 1.0, tools=tools)
            if isinstance(lease, str):
                short_of_calls = tools and min(want.tool_calls, calls_left) < 1
                assert turns_left < 1 or short_of_calls or tokens is not None
                continue
            granted = lease.granted
            assert 1 <= granted.turns <= min(want.turns, child.max_turns, turns_left)
            if tools:  # a child with tools gets at least one call, never more than is left
                calls = min(want.tool_calls, child.max_tool_calls, calls_left)
                assert 1 <= granted.tool_calls <= calls
            else:  # a child without tools takes none of the parent's
                assert granted.tool_calls == 0
            if tokens is not None:
                assert granted.tokens is not None
                assert granted.tokens <= tokens - used_tokens - held_tokens
            # The child's grace turn is inside its grant.
            grace = 1 if lease.policy.on_exhaustion == "final-answer" else 0
            assert lease.policy.max_turns + grace <= granted.turns
            running.append(lease)
        elif op[0] == "end" and running:
            lease = running.pop(0)
            turn_share, call_share = op[1], op[2]
            assert isinstance(turn_share, float)
            assert isinstance(call_share, float)
            turns = round(lease.granted.turns * turn_share)
            calls = round(lease.granted.tool_calls * call_share)
            spent = round((lease.granted.tokens or 100) * turn_share)
            allowance.settle(lease, turns, calls, usage_of(spent))
            used_turns, used_calls, used_tokens = (
                used_turns + turns,
                used_calls + calls,
                used_tokens + spent,
            )
        elif op[0] == "inner" and allowance.admit_inner():
            inner += 1
        held_turns, held_calls, held_tokens = allowance.reserved
        assert budget.turns + used_turns + held_turns <= max_turns
        assert inner + used_calls + held_calls <= max_calls
        if tokens is not None:
            assert used_tokens + held_tokens <= tokens
    for lease in running:
        allowance.settle(lease, 0, 0, UsageTotals())
    assert allowance.reserved == (0, 0, 0)
    assert allowance.open_leases == 0
    charged = budget.with_delegated(allowance.totals())
    assert (charged.delegated_turns, charged.delegated_tool_calls) == (used_turns, used_calls)
    assert charged.tool_calls == inner
    assert charged.usage.total_tokens == used_tokens


def test_a_lease_is_settled_once() -> None:
    allowance = Allowance(Budget(AgentPolicy(), 0.0))
    lease = allowance.lease(ChildBudget(), AgentPolicy(), 0.0)
    assert isinstance(lease, BudgetLease)
    allowance.settle(lease, 1, 0, UsageTotals())
    with pytest.raises(RuntimeError, match="settled twice"):
        allowance.settle(lease, 1, 0, UsageTotals())


def test_a_child_granted_one_turn_fails_rather_than_take_a_grace_turn() -> None:
    allowance = Allowance(Budget(AgentPolicy(max_turns=2), 0.0).with_turn())
    lease = allowance.lease(ChildBudget(turns=5), AgentPolicy(), 0.0)
    assert isinstance(lease, BudgetLease)
    assert lease.granted.turns == 1
    assert (lease.policy.max_turns, lease.policy.on_exhaustion) == (1, "fail")


def test_a_parent_with_nothing_left_refuses_and_holds_nothing() -> None:
    allowance = Allowance(Budget(AgentPolicy(max_turns=1, max_tool_calls=3), 0.0).with_turn())
    assert allowance.lease(ChildBudget(), AgentPolicy(), 0.0) == (
        "the run has no turns left to give a subagent"
    )
    assert allowance.reserved == (0, 0, 0)
    allowance = Allowance(Budget(AgentPolicy(max_duration=10), 0.0))
    assert "no time left" in str(allowance.lease(ChildBudget(), AgentPolicy(), 10.0))
    lease = allowance.lease(ChildBudget(duration=30), AgentPolicy(), 4.0)
    assert isinstance(lease, BudgetLease)
    # what the parent has left until its turns stop (its 1 s grace reserve before its 10 s),
    # not what was asked: the call running the child is cut off then
    assert lease.granted.duration == 5.0
