"""A cost budget is a figure of US dollars a run can be held to: at least a micro-dollar, and
under 1E+16 dollars — past it a figure means nothing, and ``1E+999999`` could not even be counted
in micro-dollars (``decimal.Overflow`` as the runtime opened)."""

from __future__ import annotations

from decimal import Decimal

import pytest

from effectagent import AgentPolicy, RunAllowance


@pytest.mark.parametrize("figure", ["1E+999999", "1e400", "1E+16", 10**20])
@pytest.mark.parametrize("owner", [AgentPolicy, RunAllowance])
def test_a_cost_budget_past_any_meaning_is_refused_naming_the_field(
    owner: type[AgentPolicy] | type[RunAllowance], figure: str | int
) -> None:
    with pytest.raises(ValueError, match=r"\.cost_budget must be under 1E\+16 US dollars, got"):
        owner(cost_budget=figure)


def test_the_largest_cost_budget_is_counted_in_micro_dollars() -> None:
    policy = AgentPolicy(cost_budget="9999999999999999.999999")
    assert policy.cost_budget == Decimal("9999999999999999.999999")
    assert policy.cost_budget_micros == 9_999_999_999_999_999_999_999
