"""The reducer's bounds on provider-native reasoning: a block over the per-block bound, or one that
would take the response's native reasoning past the per-response bound, is dropped whole and
leaves a marker in its place; every block kept is kept as it came. Pure, no Trio."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from effectagent.ai import (
    FinishPart,
    NativeReasoningContent,
    NativeReasoningPart,
    ResponseReducer,
)


def _block(filler: int) -> dict[str, str]:
    return {"type": "thinking", "thinking": "é" * filler, "signature": "s"}


def _size(data: object) -> int:
    return len(json.dumps(data, ensure_ascii=False, separators=(",", ":")).encode())


@given(
    fillers=st.lists(st.integers(0, 200), max_size=12),
    per_block=st.integers(1, 300),
    per_response=st.integers(1, 1500),
)
def test_native_blocks_are_kept_whole_or_dropped_whole_within_both_bounds(
    fillers: list[int], per_block: int, per_response: int
) -> None:
    reducer = ResponseReducer(max_native_block_bytes=per_block, max_native_bytes=per_response)
    blocks = [_block(n) for n in fillers]
    for data in blocks:
        reducer.feed(NativeReasoningPart("anthropic", "m", data))
    reducer.feed(FinishPart("stop"))
    content = reducer.finish().content
    assert len(content) == len(blocks)  # one entry per block, in order: kept, or a marker
    kept_total = 0
    for data, item in zip(blocks, content, strict=True):
        assert isinstance(item, NativeReasoningContent)
        assert item.size == _size(data)
        fits = item.size <= per_block and kept_total + item.size <= per_response
        if fits:
            assert item.data == data  # whole, never cut
            assert item.dropped == ""
            kept_total += item.size
        else:
            assert item.data is None
            assert item.dropped == "too-large"
    assert kept_total <= per_response


def test_native_reasoning_does_not_count_toward_the_response_bound() -> None:
    """It repeats the reasoning text the response already counted: a response at its limit
    still takes its native blocks (bounded apart)."""
    reducer = ResponseReducer(max_bytes=10)
    reducer.feed(NativeReasoningPart("google", "g", {"kind": "text", "signature": "x" * 100}))
    reducer.feed(FinishPart("stop"))
    (item,) = reducer.finish().content
    assert isinstance(item, NativeReasoningContent)
    assert item.data is not None


@pytest.mark.parametrize(("block", "response"), [(0, 1), (1, 0)])
def test_the_native_bounds_are_positive(block: int, response: int) -> None:
    with pytest.raises(ValueError, match="positive"):
        ResponseReducer(max_native_block_bytes=block, max_native_bytes=response)
