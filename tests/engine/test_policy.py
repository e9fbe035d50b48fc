"""AgentPolicy, ToolResultBounds, CompactionPolicy and Agent refuse bad values at construction,
with a message that names the field."""

from __future__ import annotations

from typing import Any

import attrs
import pytest

from effectagent.ai import Toolkit
from effectagent.core import Agent, AgentPolicy, CompactionPolicy, ToolResultBounds

REQUIRED: dict[str, Any] = {
    "max_turns": 8,
    "max_tool_calls": 16,
    "max_duration": 60.0,
    "tool_concurrency": 4,
}

_NOT_POSITIVE_INTS: list[Any] = [0, -1, True, False, 1.5, "3", None]
_NOT_POSITIVE_SECONDS: list[Any] = [0, -1, -0.5, True, "60", None, float("nan")]


def _policy(**overrides: Any) -> AgentPolicy:
    return AgentPolicy(**{**REQUIRED, **overrides})


def test_defaults_follow_the_reference_runtime() -> None:
    policy = _policy()
    assert policy.repeated_failure_limit == 3
    assert policy.on_exhaustion == "final-answer"
    assert policy.tool_result_bounds == ToolResultBounds(max_bytes=50 * 1024)
    assert policy.compaction == CompactionPolicy(20_000, "prune-then-summarize")
    assert policy.token_budget is None
    assert policy.context_token_limit is None
    assert policy.warning_ratio == 0.8


@pytest.mark.parametrize("missing", list(REQUIRED))
def test_the_four_limits_are_required(missing: str) -> None:
    fields = {k: v for k, v in REQUIRED.items() if k != missing}
    with pytest.raises(TypeError, match=missing):
        AgentPolicy(**fields)


@pytest.mark.parametrize(
    "field", ["max_turns", "max_tool_calls", "tool_concurrency", "repeated_failure_limit"]
)
@pytest.mark.parametrize("value", _NOT_POSITIVE_INTS, ids=repr)
def test_counts_must_be_positive_integers(field: str, value: Any) -> None:
    with pytest.raises(ValueError, match=rf"AgentPolicy\.{field} must be a positive integer"):
        _policy(**{field: value})


@pytest.mark.parametrize("field", ["max_duration", "approval_timeout", "grace_turn_duration"])
@pytest.mark.parametrize("value", _NOT_POSITIVE_SECONDS, ids=repr)
def test_durations_must_be_positive_seconds(field: str, value: Any) -> None:
    with pytest.raises(ValueError, match=rf"AgentPolicy\.{field} must be a positive number"):
        _policy(**{field: value})


@pytest.mark.parametrize("field", ["token_budget", "context_token_limit"])
@pytest.mark.parametrize("value", [0, -5, True, 1.5, "100"], ids=repr)
def test_optional_limits_are_positive_integers_or_none(field: str, value: Any) -> None:
    with pytest.raises(ValueError, match=rf"AgentPolicy\.{field} must be a positive integer"):
        _policy(**{field: value})
    assert getattr(_policy(**{field: 1000}), field) == 1000


def test_durations_accept_ints_and_floats() -> None:
    assert _policy(max_duration=5).max_duration == 5
    assert _policy(max_duration=0.25).max_duration == 0.25


@pytest.mark.parametrize("value", ["retry", "", "FAIL", None, 3])
def test_unknown_exhaustion_behaviour_is_rejected(value: Any) -> None:
    with pytest.raises(ValueError, match="on_exhaustion must be 'final-answer' or 'fail'"):
        _policy(on_exhaustion=value)


@pytest.mark.parametrize("value", [0, 1, 1.5, -0.2, "0.8", None, True], ids=repr)
def test_warning_ratio_is_a_fraction(value: Any) -> None:
    with pytest.raises(ValueError, match="warning_ratio"):
        _policy(warning_ratio=value)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("tool_result_bounds", 1024),
        ("tool_result_bounds", {"max_bytes": 1024}),
        ("compaction", "prune-only"),
        ("compaction", None),
    ],
)
def test_nested_policies_must_have_their_types(field: str, value: Any) -> None:
    with pytest.raises(TypeError, match=rf"AgentPolicy\.{field}"):
        _policy(**{field: value})


def test_a_policy_is_immutable() -> None:
    policy = _policy()
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        policy.max_turns = 100  # type: ignore[misc]


# ---- ToolResultBounds and CompactionPolicy -----------------------------------------------------


@pytest.mark.parametrize("value", [255, 0, -1, True, "1024", 1024.0, None], ids=repr)
def test_result_bounds_have_a_256_byte_floor_and_must_be_integers(value: Any) -> None:
    with pytest.raises(ValueError, match=r"ToolResultBounds\.max_bytes"):
        ToolResultBounds(max_bytes=value)


def test_the_floor_itself_is_allowed() -> None:
    assert ToolResultBounds(max_bytes=256).max_bytes == 256


@pytest.mark.parametrize("field", ["head_bytes", "tail_bytes"])
@pytest.mark.parametrize("value", [-1, True, 1.5, "10"], ids=repr)
def test_head_and_tail_are_non_negative_integers(field: str, value: Any) -> None:
    with pytest.raises(ValueError, match=rf"ToolResultBounds\.{field}"):
        ToolResultBounds(**{field: value})
    assert getattr(ToolResultBounds(**{field: 0}), field) == 0


@pytest.mark.parametrize("value", [-1, True, "20000", 1.5], ids=repr)
def test_compaction_keep_recent_tokens_is_a_non_negative_integer(value: Any) -> None:
    with pytest.raises(ValueError, match="keep_recent_tokens"):
        CompactionPolicy(keep_recent_tokens=value)


def test_unknown_compaction_strategy_is_rejected() -> None:
    with pytest.raises(ValueError, match="strategy"):
        CompactionPolicy(strategy="summarize-only")  # type: ignore[arg-type]


# ---- Agent -------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["", " ", "\t\n"])
def test_an_agent_needs_a_name(name: str) -> None:
    with pytest.raises(ValueError, match=r"Agent\.name"):
        Agent(name, "Be helpful.", _policy())


def test_an_agent_needs_a_policy_and_a_toolkit() -> None:
    with pytest.raises(TypeError, match="AgentPolicy"):
        Agent("a", "Be helpful.", REQUIRED)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="Toolkit"):
        Agent("a", "Be helpful.", _policy(), toolkit=[])  # type: ignore[arg-type]


def test_an_agent_defaults_to_no_tools_and_no_output_type() -> None:
    agent = Agent("a", "Be helpful.", _policy())
    assert len(agent.toolkit) == 0
    assert isinstance(agent.toolkit, Toolkit)
    assert agent.output is None
