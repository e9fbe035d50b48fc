"""Usage counts are counts: a negative one would give a run's token budget back, and a part
larger than its total would be priced as tokens never used."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from effectagent.ai import InputTokens, Usage


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"input_tokens": -1, "output_tokens": 2}, "input_tokens must be a count"),
        ({"input_tokens": 1, "output_tokens": 2.5}, "output_tokens must be a count"),
        ({"input_tokens": True, "output_tokens": 2}, "input_tokens must be a count"),
        ({"input_tokens": 5, "output_tokens": 2, "cache_read": -1}, "cache_read must be a count"),
        (
            {"input_tokens": 5, "output_tokens": 2, "cache_read": 4, "cache_write": 2},
            r"\(6\) exceed",
        ),
        ({"input_tokens": 5, "output_tokens": 2, "reasoning": 3}, r"reasoning \(3\) exceeds"),
    ],
)
def test_usage_of_refuses_what_is_no_count(arguments: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Usage.of(**arguments)


def test_the_parts_are_counts_too() -> None:
    with pytest.raises(ValueError, match=r"InputTokens.cache_read must be a count"):
        InputTokens(total=3, cache_read=-2)
    with pytest.raises(TypeError, match=r"Usage\.input must be InputTokens, got dict"):
        Usage({"total": 3})  # type: ignore[arg-type]


@given(
    st.integers(0, 10**9),
    st.integers(0, 10**9),
    st.integers(0, 10**9),
    st.integers(0, 10**9),
    st.integers(0, 10**9),
)
def test_consistent_figures_are_taken_and_add_up(
    total_in: int, total_out: int, read: int, write: int, reasoning: int
) -> None:
    read, write, reasoning = (
        min(read, total_in),
        min(write, total_in - min(read, total_in)),
        min(reasoning, total_out),
    )
    usage = Usage.of(total_in, total_out, cache_read=read, cache_write=write, reasoning=reasoning)
    assert usage.input.uncached + read + write == total_in
    assert usage.output.text + reasoning == total_out
    assert usage.total_tokens == total_in + total_out
