"""AgentPolicy, ToolResultBounds, CompactionPolicy, RetryPolicy and Agent refuse bad values at
construction with a message that names the field: a value of the wrong type is a ``TypeError``
saying the type it needs, a value of the right type that cannot work a ``ValueError``. Every limit
has a finite default, so an agent needs no policy to be safe."""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable
from typing import Any, TypedDict

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from effectagent.ai import Toolkit
from effectagent.core import (
    Agent,
    AgentPolicy,
    CompactionPolicy,
    Guardrail,
    RetryPolicy,
    ToolResultBounds,
)
from effectagent.effect import SchemaDerivationError

# ---- defaults -----------------------------------------------------------------------------------


def test_every_limit_has_a_finite_default() -> None:
    policy = AgentPolicy()
    assert (policy.max_turns, policy.max_tool_calls) == (20, 64)
    assert (policy.max_duration, policy.tool_concurrency) == (600.0, 4)
    # one approval wait fits in a run, and the grace turn fits in what is left of it
    assert policy.approval_timeout < policy.max_duration
    assert policy.repeated_failure_limit == 3
    assert policy.on_exhaustion == "final-answer"
    assert policy.tool_result_bounds == ToolResultBounds(max_bytes=50 * 1024)
    assert policy.compaction == CompactionPolicy(20_000, "prune-then-summarize")
    assert policy.token_budget is None
    assert policy.context_token_limit is None
    assert policy.output_retries == 2
    assert policy.model_retry == RetryPolicy(3, 1.0, 30.0, 2.0, 0.2)
    assert policy.warning_ratio == 0.8


def test_an_agent_needs_no_policy_and_no_tools() -> None:
    agent = Agent("a", "Be helpful.")
    assert agent.policy == AgentPolicy()
    assert len(agent.toolkit) == 0
    assert agent.output is None
    toolkit = Toolkit()
    assert Agent("a", "Be helpful.", toolkit=toolkit).toolkit is toolkit


def test_a_policy_is_immutable() -> None:
    policy = AgentPolicy()
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        policy.max_turns = 100  # type: ignore[misc]


# ---- every field, for all values: TypeError for a wrong type, ValueError for a bad value -------

_any_value = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**6), 10**6),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=5),
    st.lists(st.integers(), max_size=2),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)


def _ints(at_least: int, *, optional: bool = False) -> tuple[Any, Any, Any]:
    """(good, wrong type, bad value) strategies of an integer field."""
    good: st.SearchStrategy[int | None] = st.integers(at_least, 10**6)
    wrong = _any_value.filter(lambda v: isinstance(v, bool) or not isinstance(v, int))
    if optional:
        good, wrong = st.one_of(good, st.none()), wrong.filter(lambda v: v is not None)
    return good, wrong, st.integers(-(10**6), at_least - 1)


def _numbers(accepts: Callable[[float], bool]) -> tuple[Any, Any, Any]:
    """(good, wrong type, bad value) strategies of a number field."""
    numbers = st.one_of(st.integers(-(10**6), 10**6), st.floats(allow_nan=True))
    wrong = _any_value.filter(lambda v: isinstance(v, bool) or not isinstance(v, int | float))
    return numbers.filter(accepts), wrong, numbers.filter(lambda v: not accepts(v))


def _choices(*choices: str) -> tuple[Any, Any, Any]:
    wrong = _any_value.filter(lambda v: not isinstance(v, str))
    return st.sampled_from(choices), wrong, st.text(max_size=8).filter(lambda v: v not in choices)


def _positive(value: float) -> bool:
    return value > 0


FIELDS: dict[tuple[type, str], tuple[Any, Any, Any]] = {
    (AgentPolicy, "max_turns"): _ints(1),
    (AgentPolicy, "max_tool_calls"): _ints(1),
    (AgentPolicy, "max_duration"): _numbers(_positive),
    (AgentPolicy, "tool_concurrency"): _ints(1),
    (AgentPolicy, "repeated_failure_limit"): _ints(1),
    (AgentPolicy, "on_exhaustion"): _choices("final-answer", "fail"),
    (AgentPolicy, "token_budget"): _ints(1, optional=True),
    (AgentPolicy, "context_token_limit"): _ints(1, optional=True),
    (AgentPolicy, "approval_timeout"): _numbers(lambda v: 0 < v < math.inf),
    (AgentPolicy, "grace_turn_duration"): _numbers(_positive),
    (AgentPolicy, "output_retries"): _ints(0),
    (AgentPolicy, "warning_ratio"): _numbers(lambda v: 0 < v < 1),
    (ToolResultBounds, "max_bytes"): _ints(256),
    (ToolResultBounds, "head_bytes"): _ints(0, optional=True),
    (ToolResultBounds, "tail_bytes"): _ints(0, optional=True),
    (CompactionPolicy, "keep_recent_tokens"): _ints(0),
    (CompactionPolicy, "strategy"): _choices("prune-then-summarize", "prune-only"),
    (RetryPolicy, "attempts"): _ints(1),
    (RetryPolicy, "initial_delay"): _numbers(_positive),
    (RetryPolicy, "max_delay"): _numbers(_positive),
    (RetryPolicy, "multiplier"): _numbers(lambda v: v >= 1),
    (RetryPolicy, "jitter"): _numbers(lambda v: 0 <= v < 1),
}


@pytest.mark.parametrize(("cls", "field"), list(FIELDS), ids=lambda x: getattr(x, "__name__", x))
@settings(max_examples=60)
@given(data=st.data())
def test_each_field_refuses_a_wrong_type_and_a_bad_value_by_name(
    cls: type, field: str, data: st.DataObject
) -> None:
    good, wrong, bad = FIELDS[cls, field]
    value = data.draw(good, label="good")
    assert getattr(cls(**{field: value}), field) == value
    with pytest.raises(TypeError, match=rf"^{cls.__name__}\.{field} must be .*, got "):
        cls(**{field: data.draw(wrong, label="wrong type")})
    with pytest.raises(ValueError, match=rf"^{cls.__name__}\.{field} must be "):
        cls(**{field: data.draw(bad, label="bad value")})


def test_the_messages_say_what_is_needed() -> None:
    with pytest.raises(
        TypeError, match=r"max_turns must be a positive integer \(an int\), got str"
    ):
        AgentPolicy(max_turns="8")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"max_duration must be .* \(an int or float\), got bool"):
        AgentPolicy(max_duration=True)
    with pytest.raises(ValueError, match=r"max_duration must be a positive number of seconds"):
        AgentPolicy(max_duration=math.nan)
    with pytest.raises(ValueError, match="on_exhaustion must be 'final-answer' or 'fail', got 'x'"):
        AgentPolicy(on_exhaustion="x")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"max_bytes must be an integer >= 256, got 255"):
        ToolResultBounds(max_bytes=255)


def test_durations_accept_ints_floats_and_infinity() -> None:
    assert AgentPolicy(max_duration=5).max_duration == 5
    assert AgentPolicy(max_duration=0.25).max_duration == 0.25
    assert AgentPolicy(max_duration=math.inf).max_duration == math.inf


def test_an_approval_timeout_must_end_as_its_request_records_when_it_expires() -> None:
    """``expires_at`` is written to the log: an infinite one broke every approval on SQLite
    (the request could not be encoded, so the call settled as a defect)."""
    with pytest.raises(ValueError, match=r"approval_timeout must be a positive, finite number"):
        AgentPolicy(approval_timeout=math.inf)
    assert AgentPolicy(approval_timeout=1e9).approval_timeout == 1e9


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("tool_result_bounds", 1024),
        ("tool_result_bounds", {"max_bytes": 1024}),
        ("compaction", "prune-only"),
        ("compaction", None),
        ("model_retry", 3),
    ],
)
def test_nested_policies_must_have_their_types(field: str, value: Any) -> None:
    with pytest.raises(TypeError, match=rf"AgentPolicy\.{field} must be an? [A-Z]\w+, got "):
        AgentPolicy(**{field: value})


# ---- Agent -------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["", " ", "\t\n"])
def test_an_agent_needs_a_name(name: str) -> None:
    with pytest.raises(ValueError, match=r"Agent\.name must not be empty"):
        Agent(name, "Be helpful.")


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"name": 3}, r"Agent\.name must be a str, got int 3"),
        (
            {"instructions": None},
            r"Agent\.instructions must be a str or an async function .*, got NoneType",
        ),
        ({"policy": {"max_turns": 8}}, r"Agent\.policy must be an AgentPolicy, got dict"),
        ({"toolkit": []}, r"Agent\.toolkit must be a Toolkit, got list \[\]"),
    ],
)
def test_an_agent_refuses_arguments_of_the_wrong_type_by_name(
    arguments: dict[str, Any], message: str
) -> None:
    with pytest.raises(TypeError, match=message):
        Agent(**{"name": "a", "instructions": "Be helpful.", **arguments})


def test_a_missing_or_unknown_argument_names_agent_not_a_private_base() -> None:
    with pytest.raises(TypeError, match=r"^Agent\(\) missing 1 required positional argument"):
        Agent("a")  # type: ignore[call-arg]
    with pytest.raises(TypeError, match=r"^Agent\(\) got an unexpected keyword argument 'tols'"):
        Agent("a", "Be helpful.", tols=[])  # type: ignore[call-arg]


def _plain_instructions(context: Any) -> str:
    return "Be helpful."


def _plain_check(context: Any, value: Any) -> Any:
    return None


async def _async_check(context: Any, value: Any) -> Any:
    return None


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"instructions": _plain_instructions}, r"Agent\.instructions must be a str or an async"),
        ({"prepare_context": lambda context: None}, r"Agent\.prepare_context must be an async"),
        ({"input_guardrails": [_plain_check]}, r"Guardrail\.check must be an async function"),
        ({"output_guardrails": [_plain_check]}, r"Guardrail\.check must be an async function"),
    ],
)
def test_a_plain_function_where_an_async_one_goes_is_refused_when_given(
    arguments: dict[str, Any], message: str
) -> None:
    """It used to be taken, and every run then failed when its result was awaited."""
    with pytest.raises(TypeError, match=message + r".* is not async"):
        Agent(**{"name": "a", "instructions": "Be helpful.", **arguments})
    with pytest.raises(TypeError, match=r"Guardrail\.check must be an async function"):
        Guardrail(_plain_check)
    assert Guardrail(functools.partial(_async_check)).check is not None  # a partial of one is


def test_a_guardrail_needs_a_name_of_its_own_within_its_list() -> None:
    """A trip names its guardrail: an empty name, or two of one name, could not be told apart."""
    with pytest.raises(ValueError, match=r"Guardrail\.name must not be empty"):
        Guardrail(_async_check, name=" ")
    with pytest.raises(ValueError, match="holds two guardrails named '_async_check'"):
        Agent("a", "Be helpful.", input_guardrails=[_async_check, Guardrail(_async_check)])
    named = Guardrail(_async_check, name="second")
    agent = Agent("a", "Be helpful.", input_guardrails=[_async_check, named])
    assert [g.name for g in agent.input_guardrails] == ["_async_check", "second"]


@attrs.frozen
class Answer:
    text: str


@dataclasses.dataclass
class Verdict:
    ok: bool


class Summary(TypedDict):
    points: list[str]


@pytest.mark.parametrize("output", [Answer, Verdict, Summary, dict[str, int]])
def test_an_output_type_is_one_with_an_object_schema(output: Any) -> None:
    assert Agent("a", "Be helpful.", output=output).output is output


class NoSchema:
    pass


def test_an_output_type_without_a_schema_fails_at_construction_naming_output() -> None:
    with pytest.raises(SchemaDerivationError, match=r"^Agent\.output: cannot derive .* NoSchema"):
        Agent("a", "Be helpful.", output=NoSchema)
    with pytest.raises(TypeError, match=r"^Agent\.output: .* Callable"):
        Agent("a", "Be helpful.", output=Callable[[], int])  # type: ignore[arg-type]


@pytest.mark.parametrize("output", [int, str, list[Answer], Answer | Verdict, Any])
def test_an_output_type_the_model_cannot_be_asked_for_fails_at_construction(output: Any) -> None:
    """Providers' native structured output takes an object at the top of the schema."""
    with pytest.raises(TypeError, match=r"^Agent\.output must be a type whose JSON Schema is an"):
        Agent("a", "Be helpful.", output=output)
