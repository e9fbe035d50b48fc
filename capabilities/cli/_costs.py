"""What a chat's runs cost, by the core's arithmetic (``effectagent.ai.Price``): the shipped price
table (``effectagent.ai.DEFAULT_PRICES``) with the config's ``[prices."MODEL"]`` tables over it, in
US dollars per million tokens. Pure.

A model's input tokens include its cache reads and writes (``UsageTotals.input_tokens`` counts
them, and keeps them apart too): uncached input is priced at ``input``, cache reads at ``cached``
and cache writes at ``cache_write`` (each defaulting to ``input``), output — reasoning included
— at ``output``. The chat counts usage by model, so each model's cost is its totals' exact cost
rounded up to a whole micro-dollar once (a run's own figure, ``UsageTotals.cost``, rounds each
call up: they differ by less than a micro-dollar a call).
"""

from __future__ import annotations

from collections.abc import Mapping

from effectagent.ai import DEFAULT_PRICES, Price, PriceTable, dollars
from effectagent.core import UsageTotals

from . import _config

__all__ = ["cost", "cost_text", "price_table"]


def price_table(prices: Mapping[str, _config.Price]) -> PriceTable:
    """The shipped table with the config's ``[prices]`` over it (a float of the config read by
    its shortest repr: ``0.3`` is exactly 0.3)."""
    return DEFAULT_PRICES.with_prices(
        {
            model: Price(
                price.input, price.output, cached_input=price.cached, cache_write=price.cache_write
            )
            for model, price in prices.items()
        }
    )


def cost(usage: UsageTotals, price: Price) -> int:
    """What ``usage`` costs at ``price``, in micro-dollars (rounded up once)."""
    return price.cost_of_counts(
        usage.input_tokens,
        usage.output_tokens,
        usage.cache_read_input_tokens,
        usage.cache_write_input_tokens,
        usage.reasoning_tokens,
    )


def cost_text(by_model: Mapping[str, UsageTotals], prices: PriceTable) -> str | None:
    """What the runs of ``by_model`` (usage by model string) cost: ``cost $0.0042``, with the
    models without a price named (``cost $0.0042, not counting qwen3 (no price: add one under
    [prices])``); None when no model used has a price."""
    used = {model: usage for model, usage in by_model.items() if usage.model_calls}
    priced = {model: p for model in used if (p := prices.price_of(model)) is not None}
    if not priced:
        return None
    total = sum(cost(used[model], price) for model, price in priced.items())
    unpriced = sorted(model for model in used if model not in priced)
    text = f"cost {dollars(total)}"
    if unpriced:
        text += f", not counting {', '.join(unpriced)} (no price: add one under [prices])"
    return text
