"""Budget carve-out for child runs — pure bookkeeping, tested without Trio.

Invariants, for every interleaving of children starting and ending and the parent's own tool
calls: what the parent used, what its ended children used and what running children hold never
exceeds a limit; each grant is at most what was asked, what the child's policy allows and what
was left; when every child has ended nothing is held, and the parent is charged exactly what the
children used (turns, tool calls, tokens).
"""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from effectagent.core import AgentPolicy, ChildBudget, UsageDelta, UsageTotals
from effectagent.engine import BudgetState

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
)
# An operation: start a child, end the oldest running child having used a fraction of its grant,
# or admit some of the parent's own tool calls.
operations = st.lists(
    st.one_of(
        st.tuples(st.just("start"), wants, children, st.booleans()),
        st.tuples(st.just("end"), st.floats(0, 1), st.floats(0, 1), st.none()),
        st.tuples(st.just("calls"), st.integers(0, 4), st.none(), st.none()),
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
    budget = BudgetState(policy, 0.0)
    budget.start_turn()
    running: list[ChildBudget] = []
    used_turns = used_calls = used_tokens = 0
    for op in ops:
        if op[0] == "start":
            want, child, tools = op[1], op[2], op[3]
            assert isinstance(want, ChildBudget)
            assert isinstance(child, AgentPolicy)
            held_turns, held_calls, held_tokens = budget.reserved
            turns_left = max_turns - budget.turns - budget.delegated_turns - held_turns
            calls_left = max_calls - budget.tool_calls - budget.delegated_tool_calls - held_calls
            assert isinstance(tools, bool)
            granted = budget.carve(want, child, 1.0, tools=tools)
            if isinstance(granted, str):
                short_of_calls = tools and min(want.tool_calls, calls_left) < 1
                assert turns_left < 1 or short_of_calls or tokens is not None
                continue
            assert 1 <= granted.turns <= min(want.turns, child.max_turns, turns_left)
            if tools:  # a child with tools gets at least one call, never more than is left
                calls = min(want.tool_calls, child.max_tool_calls, calls_left)
                assert 1 <= granted.tool_calls <= calls
            else:  # a child without tools takes none of the parent's
                assert granted.tool_calls == 0
            if tokens is not None:
                assert granted.tokens is not None
                assert granted.tokens <= tokens - budget.usage.total_tokens - held_tokens
            running.append(granted)
        elif op[0] == "end" and running:
            granted = running.pop(0)
            turn_share, call_share = op[1], op[2]
            assert isinstance(turn_share, float)
            assert isinstance(call_share, float)
            turns = round(granted.turns * turn_share)
            calls = round(granted.tool_calls * call_share)
            spent = round((granted.tokens or 100) * turn_share)
            budget.give_back(granted, turns, calls, usage_of(spent))
            used_turns, used_calls, used_tokens = (
                used_turns + turns,
                used_calls + calls,
                used_tokens + spent,
            )
        elif op[0] == "calls":
            requested = op[1]
            assert isinstance(requested, int)
            budget.admit_tool_calls(requested)
        held_turns, held_calls, held_tokens = budget.reserved
        assert budget.turns + budget.delegated_turns + held_turns <= max_turns
        assert budget.tool_calls + budget.delegated_tool_calls + held_calls <= max_calls
        if tokens is not None:
            assert budget.usage.total_tokens + held_tokens <= tokens
    for granted in running:
        budget.give_back(granted, 0, 0, UsageTotals())
    assert budget.reserved == (0, 0, 0)
    assert (budget.delegated_turns, budget.delegated_tool_calls) == (used_turns, used_calls)
    assert budget.usage.total_tokens == used_tokens


def test_a_parent_with_nothing_left_refuses_and_holds_nothing() -> None:
    budget = BudgetState(AgentPolicy(max_turns=1, max_tool_calls=3), 0.0)
    budget.start_turn()
    assert budget.carve(ChildBudget(), AgentPolicy(), 0.0) == (
        "the run has no turns left to give a subagent"
    )
    assert budget.reserved == (0, 0, 0)
    budget = BudgetState(AgentPolicy(max_duration=10), 0.0)
    assert "no time left" in str(budget.carve(ChildBudget(), AgentPolicy(), 10.0))
    granted = budget.carve(ChildBudget(duration=30), AgentPolicy(), 4.0)
    assert isinstance(granted, ChildBudget)
    assert granted.duration == 6.0  # what the parent has left, not what was asked
