"""Run allowances (#29 item 6): a run may tighten its agent's policy — fewer tools, lower limits,
approval for every call — and never widen it.

The meet of a policy and an allowance is pure and property-tested here without Trio: never wider
than the policy in any limit, idempotent, the policy itself for an empty allowance, and exactly
the allowance's value wherever it tightens. Widening is refused, not clamped. Through the engine:
the narrowed agent is what the run runs (its budgets, its tools, its approvals), a refused
allowance writes nothing, and the allowance is recorded with the run's input so ``resume`` keeps
it.
"""

from __future__ import annotations

import math
from decimal import Decimal
from typing import Any

import attrs
import pytest
import trio
import trio.testing
from hypothesis import given
from hypothesis import strategies as st

from effectagent import Agent, AgentPolicy, Layer, RunAllowance, Tool, ToolCallContext, Toolkit
from effectagent.core import ApprovalRequest, UserInputRecorded, approval_decided
from effectagent.effect import MissingServicesError, ServiceKey
from effectagent.engine import (
    AllowanceRefused,
    ApprovalService,
    ApprovalSuspended,
    InMemoryConversationLog,
    open_runtime,
    pending_approvals,
)
from effectagent.engine._allowance import narrow_agent
from effectagent.testing import ScriptedModel, Turn, canonical_records

from .crash import log_layer

LIMITS = (
    "max_turns",
    "max_tool_calls",
    "max_duration",
    "token_budget",
    "cost_budget",
    "tool_concurrency",
)

counts = st.integers(1, 50)
seconds = st.sampled_from([0.5, 1.0, 30.0, 600.0, 1234.5])
dollars = st.sampled_from([Decimal("0.000001"), Decimal("0.5"), Decimal("2"), Decimal("10.25")])

policies = st.builds(
    AgentPolicy,
    max_turns=counts,
    max_tool_calls=counts,
    max_duration=seconds,
    tool_concurrency=st.integers(1, 8),
    token_budget=st.none() | st.integers(1, 10_000),
    cost_budget=st.none() | dollars,
)
allowances = st.builds(
    RunAllowance,
    tools=st.none() | st.lists(st.sampled_from(["a", "b", "c"]), unique=True),
    max_turns=st.none() | counts,
    max_tool_calls=st.none() | counts,
    max_duration=st.none() | seconds,
    token_budget=st.none() | st.integers(1, 10_000),
    cost_budget=st.none() | dollars,
    tool_concurrency=st.none() | st.integers(1, 8),
    approval=st.sampled_from(["as-declared", "always"]),
)


def _at_most(value: Any, limit: Any) -> bool:
    """``value`` is no wider than ``limit`` (None: no limit, the widest)."""
    return limit is None or (value is not None and value <= limit)


# ---- the meet, pure ----------------------------------------------------------------------------


@given(policy=policies, allowance=allowances)
def test_the_meet_is_never_wider_than_the_policy_in_any_limit(
    policy: AgentPolicy, allowance: RunAllowance
) -> None:
    met = allowance.meet(policy)
    for name in LIMITS:
        assert _at_most(getattr(met, name), getattr(policy, name)), name
        assert _at_most(getattr(met, name), getattr(allowance, name)), name
    # Everything the allowance does not speak of is the policy's.
    assert attrs.evolve(met, **{n: getattr(policy, n) for n in LIMITS}) == policy


@given(policy=policies, allowance=allowances)
def test_the_meet_is_idempotent(policy: AgentPolicy, allowance: RunAllowance) -> None:
    met = allowance.meet(policy)
    assert allowance.meet(met) == met


@given(policy=policies)
def test_an_empty_allowance_is_the_policy_itself(policy: AgentPolicy) -> None:
    assert RunAllowance().empty
    assert RunAllowance().meet(policy) is policy
    assert RunAllowance().widens(policy) == []


@given(policy=policies, allowance=allowances)
def test_an_allowance_that_does_not_widen_is_honoured_exactly(
    policy: AgentPolicy, allowance: RunAllowance
) -> None:
    widened = allowance.widens(policy)
    above = [
        name
        for name in LIMITS
        if getattr(allowance, name) is not None
        and getattr(policy, name) is not None
        and getattr(allowance, name) > getattr(policy, name)
    ]
    assert len(widened) == len(above)  # one sentence per limit above the policy's
    assert all(any(s.startswith(name) for s in widened) for name in above)
    if not widened:
        met = allowance.meet(policy)
        for name in LIMITS:
            if getattr(allowance, name) is not None:
                assert getattr(met, name) == getattr(allowance, name), name


@given(allowance=allowances)
def test_an_allowance_survives_its_json_round_trip(allowance: RunAllowance) -> None:
    assert RunAllowance.from_json(allowance.as_json()) == allowance


def test_bad_values_are_refused_naming_the_field() -> None:
    with pytest.raises(ValueError, match=r"RunAllowance\.max_turns must be a positive integer"):
        RunAllowance(max_turns=0)
    with pytest.raises(TypeError, match=r"RunAllowance\.max_tool_calls"):
        RunAllowance(max_tool_calls=True)  # a bool is not a count
    with pytest.raises(ValueError, match=r"RunAllowance\.approval must be"):
        RunAllowance(approval="never")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"RunAllowance\.tools must hold tool names"):
        RunAllowance(tools=[1])  # type: ignore[list-item]
    assert RunAllowance(tools="search").tools == ("search",)  # one name, not its letters
    with pytest.raises(ValueError, match="has no field max_turnz"):
        RunAllowance.from_json({"max_turnz": 3})


@pytest.mark.parametrize("seconds", [math.inf, math.nan, -1.0, 0])
def test_an_allowances_time_is_a_finite_positive_number_of_seconds(seconds: float) -> None:
    """It is recorded with the run's input as JSON, which has no infinity: an infinite one used
    to be accepted (against an agent without a time limit) and the run failed when a storage
    wrote its input."""
    with pytest.raises(
        ValueError,
        match=r"RunAllowance\.max_duration must be a positive, finite number of seconds",
    ):
        RunAllowance(max_duration=seconds)
    assert RunAllowance(max_duration=1e9).as_json() == {"max_duration": 1e9}


# ---- the narrowed agent, pure ------------------------------------------------------------------


@attrs.frozen
class Query:
    text: str


SEARCH: Tool[Query, str] = Tool("search", "Search.", parameters=Query, success=str, readonly=True)
DELETE: Tool[Query, str] = Tool("delete", "Delete.", parameters=Query, success=str)
AGENT = Agent(
    "clerk", "Help.", AgentPolicy(max_turns=6, max_tool_calls=10), Toolkit(SEARCH, DELETE)
)


def test_an_allowance_that_widens_is_refused_with_a_sentence_per_field() -> None:
    with pytest.raises(AllowanceRefused) as caught:
        narrow_agent(AGENT, RunAllowance(max_turns=30, max_duration=601.5, tools=["search", "rm"]))
    message = str(caught.value)
    assert message.startswith(
        "the run's allowance may only tighten the policy of agent 'clerk', and it would not: "
    )
    assert "max_turns of 30 turns is above the agent's 6" in message
    assert "max_duration of 601.5 seconds is above the agent's 600" in message
    assert "tools names 'rm', which the agent does not have (it has: search, delete)" in message
    assert len(caught.value.reasons) == 3


def test_the_narrowed_agent_has_the_named_tools_and_the_met_policy() -> None:
    narrowed = narrow_agent(AGENT, RunAllowance(tools=["search"], max_turns=2, token_budget=500))
    assert narrowed.toolkit.names == ("search",) or list(narrowed.toolkit.names) == ["search"]
    assert narrowed.toolkit.get("search") is SEARCH
    assert narrowed.policy.max_turns == 2
    assert narrowed.policy.token_budget == 500  # a budget the agent had none of: a tightening
    assert narrowed.policy.max_tool_calls == 10
    assert narrow_agent(AGENT, RunAllowance()) is AGENT


def test_approval_always_asks_for_every_tool_through_the_same_handler() -> None:
    narrowed = narrow_agent(AGENT, RunAllowance(approval="always"))
    for tool in narrowed.toolkit:
        original = AGENT.toolkit.get(tool.name)
        assert original is not None
        assert tool.needs_approval is True
        assert tool.handler_key is original.handler_key  # the bound handler serves it
    assert SEARCH.needs_approval is False  # the agent's own tools are untouched


def test_approval_always_is_refused_for_tool_sources_unless_the_tools_are_named() -> None:
    key: ServiceKey[Any] = ServiceKey("a source", "test")
    sourced = Agent("s", "Help.", toolkit=Toolkit(SEARCH), tool_sources=[key])
    with pytest.raises(AllowanceRefused, match="tool sources offer turn by turn"):
        narrow_agent(sourced, RunAllowance(approval="always"))
    narrowed = narrow_agent(sourced, RunAllowance(approval="always", tools=["search"]))
    assert narrowed.tool_sources == ()


# ---- through the engine ------------------------------------------------------------------------


async def _search(params: Query, call: ToolCallContext) -> str:
    await trio.lowlevel.checkpoint()
    return f"found {params.text}"


async def _delete(params: Query, call: ToolCallContext) -> str:
    return f"deleted {params.text}"


def _layer(model: ScriptedModel, *more: Layer) -> Layer:
    layer = AGENT.toolkit.handlers({SEARCH: _search, DELETE: _delete}) + model.as_layer()
    for item in more:
        layer = layer + item
    return layer


def _searches(n: int) -> list[Turn]:
    return [Turn.tool_calls(("search", {"text": f"q{i}"})) for i in range(n)]


async def test_a_run_ends_at_its_allowance_not_at_its_agents_limit(
    autojump_clock: trio.testing.MockClock,
) -> None:
    model = ScriptedModel([*_searches(2), Turn.text("out of turns")])
    async with open_runtime(_layer(model), agents=[AGENT]) as runtime:
        result = await runtime.run(AGENT, "Look.", allowance=RunAllowance(max_turns=2))
    assert result.status == "completed"
    assert result.finish_reason == "budget-exhausted"
    assert len(model.requests) == 3  # two turns, then the grace turn — not the agent's six


async def test_a_run_offers_only_the_allowed_tools_and_refuses_the_others(
    autojump_clock: trio.testing.MockClock,
) -> None:
    model = ScriptedModel([Turn.tool_calls(("delete", {"text": "x"})), Turn.text("ok")])
    async with open_runtime(_layer(model), agents=[AGENT]) as runtime:
        result = await runtime.run(AGENT, "Clean.", allowance=RunAllowance(tools=["search"]))
    assert [t.name for t in model.requests[0].tools] == ["search"]
    (outcome,) = result.outcomes
    assert outcome.kind == "invalid-input"
    assert outcome.model_content()["message"] == "unknown tool 'delete' (available: search)"


async def test_a_refused_allowance_raises_at_the_call_and_writes_nothing(
    autojump_clock: trio.testing.MockClock,
) -> None:
    log = InMemoryConversationLog()
    model = ScriptedModel([Turn.text("never")])
    async with open_runtime(_layer(model, log_layer(log)), agents=[AGENT]) as runtime:
        with pytest.raises(AllowanceRefused, match="max_tool_calls of 11"):
            await runtime.run(
                AGENT,
                "x",
                conversation_id="c",
                create=True,
                allowance=RunAllowance(max_tool_calls=11),
            )
        with pytest.raises(MissingServicesError, match="asks approval for every call"):
            runtime.stream(AGENT, "x", allowance=RunAllowance(approval="always"))
        with pytest.raises(TypeError, match="allowance must be a RunAllowance"):
            await runtime.run(AGENT, "x", allowance={"max_turns": 1})  # type: ignore[call-overload]
        assert list(await log.entries("c")) == []
    assert model.requests == []


class Later:
    """An approver that answers: the decision comes later (and notes what it was asked)."""

    suspends = True

    def __init__(self) -> None:
        self.asked: list[str] = []

    async def request(self, request: ApprovalRequest) -> ApprovalSuspended:
        await trio.lowlevel.checkpoint()
        self.asked.append(request.tool_name)
        return ApprovalSuspended("waiting for a person")


async def test_approval_always_asks_even_for_a_readonly_tool(
    autojump_clock: trio.testing.MockClock,
) -> None:
    approver = Later()
    search = Turn.tool_calls(("search", {"text": "q"}))
    model = ScriptedModel([search, Turn.text("done"), search])
    approval = Layer.succeed(ApprovalService, approver)
    async with open_runtime(_layer(model, approval), agents=[AGENT]) as runtime:
        plain = await runtime.run(AGENT, "Look.", allowance=RunAllowance(max_turns=3))
        assert approver.asked == []  # search needs no approval of its own
        gated = await runtime.run(AGENT, "Look.", allowance=RunAllowance(approval="always"))
    assert plain.outcomes[0].kind == "success"
    assert gated.status == "suspended"
    assert approver.asked == ["search"]


async def test_a_resumed_run_keeps_the_allowance_its_input_recorded(
    autojump_clock: trio.testing.MockClock,
) -> None:
    log = InMemoryConversationLog()
    allowance = RunAllowance(tools=["search"], approval="always", max_turns=3)
    first = ScriptedModel([Turn.tool_calls(("search", {"text": "q"}))])
    approval = Layer.succeed(ApprovalService, Later())
    async with open_runtime(_layer(first, approval, log_layer(log)), agents=[AGENT]) as runtime:
        suspended = await runtime.run(
            AGENT, "Look.", conversation_id="c", create=True, run_id="r", allowance=allowance
        )
    assert suspended.status == "suspended"
    records = [e.record for e in await log.entries("c")]
    (given,) = [r for r in records if isinstance(r, UserInputRecorded)]
    assert given.allowance == allowance.as_json()
    assert canonical_records([given])[0]["allowance"] == allowance.as_json()
    (pending,) = pending_approvals(await log.entries("c"), "r")
    await log.append("c", [approval_decided(pending, approved=True, decided_by="ann", at=1.0)])

    # Resumed with the bare agent — tightened since below the allowance's max_turns, which is
    # met, not refused: the search runs (approved from the log), and the next turn still offers
    # search alone and still asks approval for it.
    tightened = attrs.evolve(AGENT, policy=AgentPolicy(max_turns=2, max_tool_calls=10))
    approver = Later()
    second = ScriptedModel([Turn.tool_calls(("search", {"text": "again"}))])
    layer = _layer(second, Layer.succeed(ApprovalService, approver), log_layer(log))
    async with open_runtime(layer, agents=[tightened]) as runtime:
        resumed = await runtime.resume(tightened, conversation_id="c", run_id="r")
    assert [t.name for t in second.requests[0].tools] == ["search"]
    assert approver.asked == ["search"]
    assert resumed.status == "suspended"


def test_a_resumed_runs_allowance_meets_an_agent_tightened_since_without_refusal() -> None:
    tightened = attrs.evolve(AGENT, policy=AgentPolicy(max_turns=2), toolkit=Toolkit(DELETE))
    allowance = RunAllowance(max_turns=3, tools=["search", "delete"])
    with pytest.raises(AllowanceRefused):
        narrow_agent(tightened, allowance)  # given to a new run: refused
    resumed = narrow_agent(tightened, allowance, strict=False)  # recorded with a run: met
    assert resumed.policy.max_turns == 2
    assert list(resumed.toolkit.names) == ["delete"]


async def test_a_resumed_run_with_an_unreadable_allowance_is_refused_before_it_starts(
    autojump_clock: trio.testing.MockClock,
) -> None:
    log = InMemoryConversationLog()
    record = UserInputRecorded(
        conversation_id="c",
        run_id="r",
        input_id="i",
        kind="user",
        text="Look.",
        author="ann",
        at=1.0,
        allowance={"max_turns": "many"},
    )
    await log.append("c", [record])
    model = ScriptedModel([])
    async with open_runtime(_layer(model, log_layer(log)), agents=[AGENT]) as runtime:
        with pytest.raises(ValueError, match="the run's recorded allowance cannot be read"):
            await runtime.resume(AGENT, conversation_id="c", run_id="r")
    assert model.requests == []
    assert len(list(await log.entries("c"))) == 1
