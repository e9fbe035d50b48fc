"""The price table effectagent ships: the providers' published list prices for their current
models, in US dollars per million tokens. Data only.

Taken in November 2025 from the providers' pricing pages: the standard tier (no batch or
priority discounts), prompts under 200,000 tokens (Anthropic and Google charge more above), and
Anthropic's cache writes (five-minute entries at a quarter more than input; one-hour entries at
twice the input, ``Price.cache_write_long``'s default). OpenAI and Google charge nothing extra to write their
caches (a write is priced as input). These figures change, and a contract may differ: they are
a starting point for the user to check, and to replace with :meth:`PriceTable.with_prices` and
``PricesService`` (or the CLI's ``[prices]`` table).
"""

from __future__ import annotations

from typing import Final

from ._cost import Price, PriceTable

__all__ = ["DEFAULT_PRICES", "PRICES_TAKEN"]

#: When the shipped figures were taken.
PRICES_TAKEN: Final = "2025-11"


def _anthropic(inp: str, out: str, write: str, read: str) -> Price:
    return Price(inp, out, cached_input=read, cache_write=write)


def _cached(inp: str, out: str, read: str) -> Price:
    return Price(inp, out, cached_input=read)


#: The shipped table (see the module notes): check it before relying on it.
DEFAULT_PRICES: Final = PriceTable(
    {
        # Anthropic: input, output, five-minute cache write, cache read.
        "anthropic:claude-opus-4-5": _anthropic("5", "25", "6.25", "0.50"),
        "anthropic:claude-opus-4-1": _anthropic("15", "75", "18.75", "1.50"),
        "anthropic:claude-opus-4-0": _anthropic("15", "75", "18.75", "1.50"),
        "anthropic:claude-opus-4": _anthropic("15", "75", "18.75", "1.50"),
        "anthropic:claude-sonnet-4-5": _anthropic("3", "15", "3.75", "0.30"),
        "anthropic:claude-sonnet-4-0": _anthropic("3", "15", "3.75", "0.30"),
        "anthropic:claude-sonnet-4": _anthropic("3", "15", "3.75", "0.30"),
        "anthropic:claude-haiku-4-5": _anthropic("1", "5", "1.25", "0.10"),
        "anthropic:claude-3-5-haiku-latest": _anthropic("0.80", "4", "1", "0.08"),
        "anthropic:claude-3-5-haiku": _anthropic("0.80", "4", "1", "0.08"),
        # OpenAI: input, output, cached input.
        "openai:gpt-5.1": _cached("1.25", "10", "0.125"),
        "openai:gpt-5": _cached("1.25", "10", "0.125"),
        "openai:gpt-5-mini": _cached("0.25", "2", "0.025"),
        "openai:gpt-5-nano": _cached("0.05", "0.40", "0.005"),
        "openai:gpt-4.1": _cached("2", "8", "0.50"),
        "openai:gpt-4.1-mini": _cached("0.40", "1.60", "0.10"),
        "openai:gpt-4.1-nano": _cached("0.10", "0.40", "0.025"),
        "openai:gpt-4o": _cached("2.50", "10", "1.25"),
        # The first snapshot kept its own, higher price (a dated name is otherwise priced as the
        # model it snapshots), and no cached-input discount.
        "openai:gpt-4o-2024-05-13": Price("5", "15"),
        "openai:gpt-4o-mini": _cached("0.15", "0.60", "0.075"),
        "openai:o3": _cached("2", "8", "0.50"),
        "openai:o4-mini": _cached("1.10", "4.40", "0.275"),
        # Google (Gemini API, paid tier): input, output, cached input.
        "google:gemini-2.5-pro": _cached("1.25", "10", "0.125"),
        "google:gemini-2.5-flash": _cached("0.30", "2.50", "0.03"),
        "google:gemini-2.5-flash-lite": _cached("0.10", "0.40", "0.01"),
    },
    taken=PRICES_TAKEN,
)
