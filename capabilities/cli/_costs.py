"""What a chat's runs cost, from the prices the config gives per model (``[prices."MODEL"]``, in
US dollars per million tokens). Pure.

A model's input tokens include its cache reads and writes (``UsageTotals.input_tokens`` counts
them, and keeps them apart too): uncached input is priced at ``input``, cache reads at ``cached``
and cache writes at ``cache_write`` (each defaulting to ``input``), output — reasoning included
— at ``output``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from effectagent.core import UsageTotals

from ._config import Price

__all__ = ["Price", "cost", "cost_text", "dollars"]

_MILLION: Final = 1_000_000


def cost(usage: UsageTotals, price: Price) -> float:
    """What ``usage`` costs at ``price``, in dollars."""
    read = usage.cache_read_input_tokens
    written = usage.cache_write_input_tokens
    uncached = max(0, usage.input_tokens - read - written)
    cached = price.input if price.cached is None else price.cached
    writing = price.input if price.cache_write is None else price.cache_write
    total = (
        uncached * price.input
        + read * cached
        + written * writing
        + usage.output_tokens * price.output
    )
    return total / _MILLION


def dollars(amount: float) -> str:
    """``amount`` as a person reads it: cents to four decimals under a dollar (``$0.0042``),
    two above (``$12.35``)."""
    return f"${amount:.4f}" if amount < 1 else f"${amount:,.2f}"


def cost_text(by_model: Mapping[str, UsageTotals], prices: Mapping[str, Price]) -> str | None:
    """What the runs of ``by_model`` (usage by model string) cost: ``cost $0.0042``, with the
    models without a price named (``cost $0.0042, not counting qwen3 (no price in the config)``);
    None when no model used has a price."""
    used = {model: usage for model, usage in by_model.items() if usage.model_calls}
    priced = {model: usage for model, usage in used.items() if model in prices}
    if not priced:
        return None
    total = sum(cost(usage, prices[model]) for model, usage in priced.items())
    unpriced = sorted(model for model in used if model not in prices)
    text = f"cost {dollars(total)}"
    if unpriced:
        text += f", not counting {', '.join(unpriced)} (no price in the config)"
    return text
