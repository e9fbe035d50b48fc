"""The runtime's price table (``PricesService``) is a ``PriceTable``: anything else is refused
when the runtime opens, naming the service — not met at the first call a run costs."""

from __future__ import annotations

from typing import Any

import pytest

from effectagent import Agent, AgentPolicy, Layer, open_runtime
from effectagent.ai import DEFAULT_PRICES, Price, PricesService, PriceTable
from effectagent.testing import ScriptedModel, Turn


@pytest.mark.parametrize(
    "table", [{"openai:gpt-4o": Price("1", "2")}, DEFAULT_PRICES.prices], ids=["dict", "mapping"]
)
@pytest.mark.parametrize(
    "policy", [AgentPolicy(), AgentPolicy(cost_budget=1)], ids=["no-budget", "cost-budget"]
)
async def test_a_price_table_that_is_not_a_price_table_is_refused_as_the_runtime_opens(
    table: Any, policy: AgentPolicy
) -> None:
    """A dict of prices (the table's own ``prices``) failed every run as an engine defect
    ("'dict' object has no attribute 'price_for'"), or the runtime's opening with an
    AttributeError under a cost budget."""
    agent = Agent("a", "Answer.", policy)
    model = ScriptedModel([Turn.text("Hi.")])
    layer = model.as_layer() + Layer.succeed(PricesService, table)
    with pytest.raises(TypeError, match=r"PricesService must be a PriceTable .* got "):
        async with open_runtime(layer, agents=[agent]):
            pass
    assert model.requests == []


async def test_a_price_table_prices_the_runs_calls() -> None:
    agent = Agent("a", "Answer.")
    model = ScriptedModel([Turn.text("Hi.")])
    prices = Layer.succeed(PricesService, PriceTable({}))
    async with open_runtime(model.as_layer() + prices, agents=[agent]) as runtime:
        result = await runtime.run(agent, "Hello.")
    assert (result.status, result.usage.cost, result.usage.unpriced_calls) == ("completed", None, 1)
