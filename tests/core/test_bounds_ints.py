"""Integers in tool results: bounded by the size of their JSON text like any value, and one too
long for Python to write is the tool's output-schema violation, never the run's defect."""

from __future__ import annotations

import sys
from typing import Any

import pytest
import trio
from hypothesis import given
from hypothesis import strategies as st

from effectagent import Agent, AgentPolicy, Toolkit, open_runtime, tool
from effectagent.ai import ToolMessage
from effectagent.core import ToolResultBounds, bounded_json, compact_json
from effectagent.core._bounds import _long_int_json, bounded_json_and_size
from effectagent.testing import ScriptedModel, Turn

BOUNDS = ToolResultBounds(max_bytes=256)
LIMIT = sys.get_int_max_str_digits()  # 4300 by default


def _digits(n: int) -> str:
    """``str(n)`` without Python's limit on the digits it writes (for checking only)."""
    sign, n = ("-", -n) if n < 0 else ("", n)
    chunks: list[str] = []
    while n >= 10**100:
        n, low = divmod(n, 10**100)
        chunks.append(str(low).zfill(100))
    return sign + str(n) + "".join(reversed(chunks))


@given(n=st.integers(min_value=-(10**400), max_value=10**400))
def test_an_int_is_kept_when_its_digits_fit_and_marked_when_they_do_not(n: int) -> None:
    text = str(n)
    out, truncated, size = bounded_json_and_size(n, BOUNDS)
    assert bounded_json(n, BOUNDS) == out
    if len(text) <= BOUNDS.max_bytes:
        assert (out, truncated) == (n, False)
    else:
        assert truncated
        assert out["_tag"] == "Truncated"
        assert size == out["original_bytes"] == len(text)
        assert text.startswith(out["head"])
        assert text.endswith(out["tail"])
        assert len(compact_json(out).encode()) <= BOUNDS.max_bytes


@pytest.mark.parametrize(
    "value",
    [10**1000, -(10**1000), 10**LIMIT, -(7**9000), [10**LIMIT], {"n": [1, -(10**LIMIT), "x"]}],
    ids=["1001 digits", "negative", "over the limit", "negative over", "in a list", "in an object"],
)
def test_a_long_int_anywhere_becomes_a_marker_and_bounding_never_raises(value: Any) -> None:
    out, truncated, size = bounded_json_and_size(value, BOUNDS)
    assert bounded_json(value, BOUNDS) == out
    assert truncated
    assert out["_tag"] == "Truncated"
    assert len(compact_json(out).encode()) <= BOUNDS.max_bytes
    if isinstance(value, int):
        text = _digits(value)
        assert size == len(text)
        assert text.startswith(out["head"])
        assert text.endswith(out["tail"])
        assert out["head"]
        assert out["tail"]


_json = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3)
    ),
    max_leaves=10,
)


@given(value=_json)
def test_writing_long_ints_in_pieces_writes_what_compact_json_does(value: Any) -> None:
    assert "".join(_long_int_json(value, set())) == compact_json(value)


def test_nan_beside_a_long_int_still_raises_as_compact_json_does() -> None:
    with pytest.raises(ValueError):
        bounded_json([10**LIMIT, float("nan")], BOUNDS)


def test_a_result_of_moderate_ints_is_left_alone() -> None:
    value = [10**100, -(10**100), {"n": 7}]
    assert bounded_json(value, BOUNDS) is value


@tool
async def power_of_ten(n: int) -> int:
    """Ten to the power n.

    Args:
        n: the exponent.
    """
    power: int = 10**n
    return power


@pytest.mark.parametrize("n", [1000, LIMIT], ids=["long", "too long to write"])
async def test_a_tool_returning_a_huge_int_never_ends_the_run(n: int) -> None:
    toolkit = Toolkit(power_of_ten)
    agent = Agent("a", "i", toolkit=toolkit, policy=AgentPolicy(tool_result_bounds=BOUNDS))
    model = ScriptedModel([Turn.tool_calls(("power_of_ten", {"n": n})), Turn.text("done")])
    async with open_runtime(model.as_layer() + toolkit.handlers(), agents=[agent]) as runtime:
        result = await runtime.run(agent, "go")
    assert result.status == "completed", result.error
    (outcome,) = result.outcomes
    (message,) = [m for m in model.requests[1].messages if isinstance(m, ToolMessage)]
    shown = message.content[0].result
    assert isinstance(shown, dict)
    if n < LIMIT:  # the model gets a marker in the bound
        assert outcome.kind == "success"
        assert shown["_tag"] == "Truncated"
        assert shown["original_bytes"] == n + 1
        assert len(compact_json(shown).encode()) <= BOUNDS.max_bytes
    else:  # the result cannot be written: the tool broke its own schema
        assert outcome.kind == "defect"
        assert "result violates its schema" in outcome.message
        assert f"more than {LIMIT} digits" in outcome.message
    await trio.lowlevel.checkpoint()
