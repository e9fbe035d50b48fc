"""The cost arithmetic (#28 item 6): prices as exact decimals, a call's cost in integer
micro-dollars rounded up, a run's the sum of its calls'; the price table's look-up; the shipped
table."""

from __future__ import annotations

from decimal import Decimal
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from effectagent.ai import (
    DEFAULT_PRICES,
    PRICES_TAKEN,
    NoPriceForModel,
    Price,
    PriceTable,
    Usage,
    dollars,
)
from effectagent.core import UsageDelta, UsageTotals

# Prices as providers publish them: dollars per million tokens, a few decimals.
prices = st.decimals(min_value=0, max_value=200, places=4, allow_nan=False, allow_infinity=False)
optional_prices = st.none() | prices
counts = st.integers(0, 5_000_000)


@st.composite
def any_price(draw: st.DrawFn) -> Price:
    return Price(
        draw(prices),
        draw(prices),
        cached_input=draw(optional_prices),
        cache_write=draw(optional_prices),
        reasoning=draw(optional_prices),
    )


@st.composite
def any_usage(draw: st.DrawFn) -> Usage:
    read, written, uncached = draw(counts), draw(counts), draw(counts)
    reasoning, text = draw(counts), draw(counts)
    return Usage.of(
        uncached + read + written,
        text + reasoning,
        cache_read=read,
        cache_write=written,
        reasoning=reasoning,
    )


def _exact(price: Price, usage: Usage) -> Fraction:
    """The exact cost in micro-dollars (a dollar per million tokens is a micro-dollar a token)."""
    inp, out = usage.input, usage.output

    def f(value: Decimal | None, default: Decimal) -> Fraction:
        return Fraction(default if value is None else value)

    return (
        inp.uncached * f(price.input, price.input)
        + inp.cache_read * f(price.cached_input, price.input)
        + inp.cache_write * f(price.cache_write, price.input)
        + out.text * f(price.output, price.output)
        + out.reasoning * f(price.reasoning, price.output)
    )


@given(price=any_price(), usage=any_usage())
def test_a_call_costs_its_exact_figure_rounded_up_to_a_micro_dollar(
    price: Price, usage: Usage
) -> None:
    exact = _exact(price, usage)
    cost = price.cost_of(usage)
    assert isinstance(cost, int)
    assert exact <= cost < exact + 1


@given(price=any_price(), calls=st.lists(any_usage(), max_size=8))
def test_the_run_cost_is_the_sum_of_its_calls_costs(price: Price, calls: list[Usage]) -> None:
    totals = UsageTotals()
    for usage in calls:
        totals = totals.add(UsageDelta.from_usage(usage, price))
    assert totals.cost == sum(price.cost_of(usage) for usage in calls)
    assert totals.unpriced_calls == 0
    # A child's totals folded in add up the same way.
    assert totals.including(totals).cost == 2 * (totals.cost or 0)


@given(
    price=any_price(),
    parts=st.lists(counts, min_size=5, max_size=5),
    which=st.integers(0, 4),
    more=st.integers(1, 1_000_000),
)
def test_the_cost_never_falls_when_a_token_count_grows(
    price: Price, parts: list[int], which: int, more: int
) -> None:
    names = ("uncached_input", "cache_read", "cache_write", "output", "reasoning")
    before = dict(zip(names, parts, strict=True))
    after = {**before, names[which]: before[names[which]] + more}
    assert price.cost(**after) >= price.cost(**before)


@given(usage=any_usage())
def test_a_zero_price_costs_zero(usage: Usage) -> None:
    assert Price(0, 0).cost_of(usage) == 0
    assert Price("0", "0.000", cached_input=0, cache_write=0, reasoning=0).cost_of(usage) == 0


def test_figures_the_provider_publishes() -> None:
    # $3 / $15 per million, reads $0.30, writes $3.75 (Claude Sonnet 4.5's list price).
    price = Price("3", "15", cached_input="0.30", cache_write="3.75")
    usage = Usage.of(12_000, 800, cache_read=8_000, cache_write=3_000, reasoning=300)
    # 1,000 uncached x 3 + 8,000 x 0.30 + 3,000 x 3.75 + 500 x 15 + 300 x 15 (reasoning: output).
    assert price.cost_of(usage) == 3_000 + 2_400 + 11_250 + 7_500 + 4_500
    # A fraction of a micro-dollar is rounded up: one token at $0.075 per million.
    assert Price("0.075", "0").cost(uncached_input=1) == 1
    assert Price("0.075", "0").cost(uncached_input=40) == 3  # 3.0 exactly
    assert Price("0.075", "0").cost(uncached_input=41) == 4  # 3.075


@pytest.mark.parametrize("figure", ["1e-999999999", "1E+999999999", "1e-31", "1e16"])
def test_a_price_past_any_meaning_is_refused_at_once(figure: str) -> None:
    """Its exact integer arithmetic would take unbounded time and memory (or overflow)."""
    with pytest.raises(ValueError, match=r"Price\.cached_input must be under 1E\+16 dollars"):
        Price(1, 1, cached_input=figure)


def test_a_price_of_many_digits_is_exact() -> None:
    """Trailing zeros do not count as places, and no digit is rounded away (``Decimal``
    arithmetic would keep only 28 significant digits)."""
    many = Decimal("1234567890123.45678901234567890123")  # 33 significant digits
    assert Price(many, 0).cost(uncached_input=10**20) == 123456789012345678901234567890123
    assert Price(Decimal("1." + "0" * 100_000), 0).cost(uncached_input=7) == 7
    assert Price(Decimal("0E-99999999"), Decimal("0E+99999999")).cost(output=5) == 0


def test_a_total_only_usage_is_all_uncached_input() -> None:
    price = Price("2", "8", cached_input="0.5")
    assert price.cost_of(Usage.of(1_000, 100)) == 2_000 + 800


def test_prices_are_exact_decimals_and_bad_ones_are_refused() -> None:
    assert Price(0.3, 1.1).input == Decimal("0.3")  # a float by its shortest repr
    assert Price(0.1, 0).cost(uncached_input=3) == 1  # 0.3 micro-dollars, rounded up
    with pytest.raises(ValueError, match=r"Price.output must be a finite number .* got -1"):
        Price(1, -1)
    with pytest.raises(ValueError, match=r"Price\.input must be a finite number"):
        Price("NaN", 1)
    with pytest.raises(TypeError, match="a price is a number of dollars"):
        Price(True, 1)
    with pytest.raises(ValueError, match="never negative"):
        Price(1, 1).cost(output=-1)


def test_the_table_finds_a_model_by_its_string_its_aliases_and_its_snapshots() -> None:
    sonnet = Price("3", "15")
    gpt = Price("2", "8")
    table = PriceTable({"anthropic:claude-sonnet-4-5": sonnet, "openai:gpt-4.1": gpt})
    assert table.price_of("anthropic:claude-sonnet-4-5") is sonnet
    assert table.price_of("anthropic:claude-sonnet-4-5-20250929") is sonnet
    assert table.price_of("openai-chat:gpt-4.1") is gpt
    assert table.price_of("openai-responses:gpt-4.1-2025-04-14") is gpt
    # A server of your own is never priced at OpenAI's figures; an unknown model has no price.
    assert table.price_of("openai-compatible:gpt-4.1") is None
    assert table.price_of("anthropic:claude-unknown") is None
    assert table.price_of(None) is None
    mine = Price("0", "0")
    more = table.with_prices({"openai-compatible:gpt-4.1": mine}, taken="2026-01-01")
    assert more.price_of("openai-compatible:gpt-4.1") is mine
    assert more.taken == "2026-01-01"
    with pytest.raises(TypeError, match="maps model strings to Prices"):
        PriceTable({"openai:gpt-4.1": 2.0})  # type: ignore[dict-item]


def test_the_table_finds_a_model_string_whatever_its_case() -> None:
    """``openai:GPT-4o`` had no price while ``OpenAI:gpt-4o`` had one: the prefix was read
    regardless of case and the model's name was not, so a cost budget on it was refused
    (``NoPriceForModel``) and its runs' cost was None."""
    gpt = DEFAULT_PRICES.price_of("openai:gpt-4o")
    assert gpt is not None
    assert DEFAULT_PRICES.price_of("openai:GPT-4o") is gpt
    assert DEFAULT_PRICES.price_of("openai-chat:GPT-4O-2024-08-06") is gpt
    first = DEFAULT_PRICES.price_of("openai:GPT-4o-2024-05-13")  # its own price, as written
    assert first is DEFAULT_PRICES.price_of("openai:gpt-4o-2024-05-13")
    assert first is not gpt
    assert DEFAULT_PRICES.price_of("anthropic:Claude-Sonnet-4-5") is not None
    assert DEFAULT_PRICES.price_of("OPENAI-COMPATIBLE:GPT-4o") is None
    # As written wins; two entries that differ only in case price only themselves.
    low, high = Price("1", "1"), Price("2", "2")
    table = PriceTable({"x:model": low, "x:MODEL": high})
    assert (table.price_of("x:model"), table.price_of("x:MODEL")) == (low, high)
    assert table.price_of("x:Model") is None


def test_a_snapshot_with_a_price_of_its_own_is_not_priced_as_the_model_it_snapshots() -> None:
    """gpt-4o's first snapshot kept its launch price ($5 / $15): the dated-name rule priced it
    at gpt-4o's $2.50 / $10, half of what it cost. A later snapshot still takes gpt-4o's."""
    first = DEFAULT_PRICES.price_of("openai:gpt-4o-2024-05-13")
    assert first is not None
    assert (first.input, first.output) == (Decimal(5), Decimal(15))
    assert DEFAULT_PRICES.price_of("openai:gpt-4o-2024-08-06") is DEFAULT_PRICES.price_of(
        "openai:gpt-4o"
    )


def test_the_shipped_table_says_when_it_was_taken_and_prices_the_current_models() -> None:
    assert DEFAULT_PRICES.taken == PRICES_TAKEN
    for model in (
        "anthropic:claude-sonnet-4-5",
        "anthropic:claude-haiku-4-5",
        "anthropic:claude-opus-4-5",
        "openai:gpt-5",
        "openai:gpt-4.1",
        "openai:o4-mini",
        "google:gemini-2.5-flash",
        "gemini:gemini-2.5-pro",
    ):
        price = DEFAULT_PRICES.price_of(model)
        assert price is not None, model
        assert price.output >= price.input > 0
        assert price.cached_input is not None
        assert price.cached_input < price.input


def test_dollars_reads_as_a_person_writes_them() -> None:
    assert dollars(0) == "$0.0000"
    assert dollars(42) == "<$0.0001"
    assert dollars(4_200) == "$0.0042"
    assert dollars(560_000) == "$0.5600"
    assert dollars(12_345_678) == "$12.35"
    assert dollars(1_234_567_890) == "$1,234.57"
    assert dollars(999_940) == "$0.9999"
    assert dollars(999_950) == "$1.00"  # rounds to a dollar: read as dollars, not "$1.0000"


def test_dollars_reads_a_negative_amount_with_its_sign_before_it() -> None:
    """``dollars(-5)`` read ``$-0.0000``: a made-up zero, and the sign after the dollar."""
    assert dollars(-5) == "-<$0.0001"
    assert dollars(-4_200) == "-$0.0042"
    assert dollars(-12_345_678) == "-$12.35"


def test_an_unpriced_model_is_said_in_a_sentence() -> None:
    error = NoPriceForModel("helper", "openai-compatible:llama3.1:8b", 500_000)
    assert str(error) == (
        "the agent 'helper' has a cost budget of $0.5000, but the model "
        "'openai-compatible:llama3.1:8b' has no price in the runtime's price table: give it one "
        "(PricesService) or drop the cost budget"
    )


def test_a_call_without_a_price_has_no_cost_never_a_made_up_zero() -> None:
    delta = UsageDelta.from_usage(Usage.of(10, 5))
    assert delta.cost_micros is None
    totals = UsageTotals().add(delta).add(UsageDelta.from_usage(Usage.of(10, 5), Price(1, 1)))
    assert totals.unpriced_calls == 1
    assert totals.cost_micros == 15
    assert totals.cost is None
