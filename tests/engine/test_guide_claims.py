"""Claims of the engine and tools guides (docs/guides/engine.md, docs/guides/tools.md) and of
the policy docstrings, checked through the public API only: what a new user reads there is what
a run does."""

from __future__ import annotations

import json
from typing import Any, cast

import pytest
import trio
import trio.testing

from effectagent import Agent, AgentPolicy, Layer, Tool, Toolkit, open_runtime, run_sync, tool
from effectagent.ai import ToolMessage, UserMessage
from effectagent.core import (
    ApprovalDecision,
    ApprovalRequest,
    CheckContext,
    FinalAnswer,
    Guardrail,
    GuardrailResult,
    PreparedContext,
    ToolCallSettled,
    ToolCallSucceeded,
    ToolResultBounds,
    bounded_json,
)
from effectagent.engine import ApprovalService, RedactorService
from effectagent.testing import ScriptedModel, Turn


@tool(readonly=True)
async def wait(seconds: int) -> int:
    """Wait, then say how long.

    Args:
        seconds: How long to wait.
    """
    await trio.sleep(seconds)
    return seconds


def _explodes(params: object, call: object) -> bool:
    raise ValueError("the rule broke")


@tool(needs_approval=_explodes)
async def guarded(n: int) -> int:
    """A tool whose approval rule raises.

    Args:
        n: A number.
    """
    return n


class _Approves:
    async def request(self, request: ApprovalRequest) -> ApprovalDecision:
        await trio.lowlevel.checkpoint()
        return ApprovalDecision(True, "", "test")


# ---- Runtime.preflight --------------------------------------------------------------------------


async def test_preflight_refuses_what_is_not_an_agent_with_a_type_error() -> None:
    agent = Agent("a", "Answer.")
    async with open_runtime(ScriptedModel([]).as_layer(), agents=[agent]) as runtime:
        runtime.preflight(agent)
        with pytest.raises(TypeError, match="preflight needs an Agent, got str"):
            runtime.preflight("a")  # type: ignore[arg-type]


# ---- secrets ------------------------------------------------------------------------------------


class _RedactorWithoutActive:
    def redact_text(self, text: str) -> str:
        return text

    def redact(self, value: object) -> object:
        return value

    def partial_secret_suffix(self, text: str) -> int:
        return 0


async def test_a_redactor_lacking_a_member_is_refused_naming_only_what_it_lacks() -> None:
    layer = ScriptedModel([]).as_layer() + Layer.succeed(
        RedactorService, cast(Any, _RedactorWithoutActive())
    )
    with pytest.raises(TypeError, match="lacks active ") as refused:
        async with open_runtime(layer, agents=[Agent("a", "Answer.")]):
            pytest.fail("the runtime must not open")
    assert "partial_secret_suffix" not in str(refused.value)


# ---- run_sync ------------------------------------------------------------------------------------


def test_run_sync_runs_a_typed_agent_to_its_end() -> None:
    result = run_sync(
        Agent("a", "Answer."), "Hi", layer=ScriptedModel([Turn.text("Hello.")]).as_layer()
    )
    assert (result.status, result.text) == ("completed", "Hello.")


async def test_run_sync_inside_a_trio_program_says_what_to_use_instead() -> None:
    model = ScriptedModel([Turn.text("never")])
    with pytest.raises(RuntimeError, match=r"cannot be called inside one: use .*open_runtime"):
        run_sync(Agent("a", "Answer."), "Hi", layer=model.as_layer())
    assert model.requests == []


# ---- prepare_context ----------------------------------------------------------------------------


def test_a_prepared_prompt_that_holds_no_message_is_refused_where_it_is_made() -> None:
    with pytest.raises(TypeError, match=r"PreparedContext\.prompt must hold messages.*got int"):
        PreparedContext(prompt=[UserMessage.text("Hi"), 5])  # type: ignore[list-item]
    assert PreparedContext(prompt=[UserMessage.text("Hi")]).prompt == (UserMessage.text("Hi"),)


# ---- guardrails and validators ------------------------------------------------------------------


async def test_of_input_guardrails_that_all_trip_the_first_declared_is_reported(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async def slow_trip(ctx: CheckContext, text: str) -> GuardrailResult:
        await trio.sleep(5)  # its verdict comes last, but it is declared first
        return GuardrailResult.trip("first reason")

    async def quick_trip(ctx: CheckContext, text: str) -> GuardrailResult:
        return GuardrailResult.trip("second reason")

    agent = Agent(
        "a",
        "Answer.",
        input_guardrails=[Guardrail(slow_trip, name="first"), Guardrail(quick_trip, name="second")],
    )
    model = ScriptedModel([Turn.text("never")])
    async with open_runtime(model.as_layer(), agents=[agent]) as runtime:
        result = await runtime.run(agent, "Hi")
    assert result.status == "failed"
    assert "first" in str(result.error)
    assert "first reason" in str(result.error)
    assert model.requests == []  # before the first model call


async def test_of_output_guardrails_that_all_trip_the_first_declared_is_reported(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async def one(ctx: CheckContext, answer: FinalAnswer[None]) -> GuardrailResult:
        await trio.sleep(5)
        return GuardrailResult.trip("one says no")

    async def two(ctx: CheckContext, answer: FinalAnswer[None]) -> GuardrailResult:
        return GuardrailResult.trip("two says no")

    agent = Agent("a", "Answer.", output_guardrails=[one, two])
    async with open_runtime(ScriptedModel([Turn.text("Hello.")]).as_layer(), agents=[agent]) as rt:
        result = await rt.run(agent, "Hi")
    assert result.status == "failed"
    assert "one says no" in str(result.error)
    assert result.text == ""  # no answer delivered


async def test_validators_judge_the_final_answer_only_not_text_before_tool_calls() -> None:
    seen: list[str] = []
    agent = Agent("a", "Answer.", toolkit=Toolkit(wait))

    @agent.output_validator
    async def record(answer: str, ctx: CheckContext) -> None:
        seen.append(answer)

    model = ScriptedModel(
        [Turn.tool_calls(("wait", {"seconds": 0}), text="Let me wait."), Turn.text("Done.")]
    )
    async with open_runtime(agent.toolkit.handlers() + model.as_layer(), agents=[agent]) as rt:
        result = await rt.run(agent, "Wait.")
    assert result.status == "completed"
    assert seen == ["Done."]


# ---- tool outcomes ------------------------------------------------------------------------------


async def test_results_commit_in_declaration_order_and_settle_events_come_as_calls_finish(
    autojump_clock: trio.testing.MockClock,
) -> None:
    agent = Agent("a", "Answer.", toolkit=Toolkit(wait))
    model = ScriptedModel(
        [
            Turn.tool_calls(("wait", {"seconds": 3}), ("wait", {"seconds": 1})),
            Turn.text("Done."),
        ]
    )
    async with open_runtime(agent.toolkit.handlers() + model.as_layer(), agents=[agent]) as rt:
        async with rt.stream(agent, "Wait twice.") as events:
            seen = [event async for event in events]
        log = await rt.log.entries(seen[0].conversation_id)
    settled = [e.tool_call_id for e in seen if isinstance(e, ToolCallSucceeded)]
    assert settled == ["call_1", "call_0"]  # the one-second call settled first
    committed = [e.record.tool_call_id for e in log if isinstance(e.record, ToolCallSettled)]
    assert committed == ["call_0", "call_1"]
    sent = model.requests[1].messages[-1]
    assert isinstance(sent, ToolMessage)
    assert [part.id for part in sent.content] == ["call_0", "call_1"]


async def test_rejected_covers_a_raising_approval_rule_and_a_batch_over_the_call_budget() -> None:
    agent = Agent("a", "Answer.", AgentPolicy(max_tool_calls=2), Toolkit(guarded, wait))
    model = ScriptedModel(
        [
            Turn.tool_calls(("guarded", {"n": 1})),
            Turn.tool_calls(("wait", {"seconds": 0}), ("wait", {"seconds": 0})),
            Turn.text("Out of calls."),
        ]
    )
    layer = (
        agent.toolkit.handlers() + model.as_layer() + Layer.succeed(ApprovalService, _Approves())
    )
    async with open_runtime(layer, agents=[agent]) as rt:
        result = await rt.run(agent, "Go.")
    assert [outcome.kind for outcome in result.outcomes] == ["rejected", "rejected", "rejected"]
    assert result.finish_reason == "budget-exhausted"
    assert model.requests[-1].tool_choice == "none"  # the grace turn


async def test_a_call_cut_short_by_the_runs_deadline_settles_as_a_defect(
    autojump_clock: trio.testing.MockClock,
) -> None:
    agent = Agent("a", "Answer.", AgentPolicy(max_duration=100), Toolkit(wait))
    model = ScriptedModel([Turn.tool_calls(("wait", {"seconds": 1000})), Turn.text("Late.")])
    async with open_runtime(agent.toolkit.handlers() + model.as_layer(), agents=[agent]) as rt:
        result = await rt.run(agent, "Wait long.")
    (outcome,) = result.outcomes
    assert outcome.kind == "defect"
    assert result.finish_reason == "budget-exhausted"
    assert result.exhausted == "duration"


@pytest.mark.parametrize("argument", ["parameters_schema", "success_schema"])
def test_a_dynamic_tool_with_an_invalid_schema_is_a_value_error_naming_it(argument: str) -> None:
    broken = {"type": "object", "properties": {"a": {"type": "nope"}}}
    schemas = {"parameters_schema": {"type": "object"}, "success_schema": None} | {argument: broken}
    with pytest.raises(ValueError, match=rf"tool 'x': {argument} is not a valid JSON Schema.*'a'"):
        Tool.dynamic(
            "x",
            "A tool.",
            schemas["parameters_schema"],  # type: ignore[arg-type]
            success_schema=schemas["success_schema"],
        )


# ---- tool result bounds -------------------------------------------------------------------------


def test_a_head_larger_than_the_bound_is_cut_so_the_marker_fits() -> None:
    bounds = ToolResultBounds(max_bytes=256, head_bytes=1000, tail_bytes=1000)
    marker = bounded_json("A" * 5000 + "Z" * 5000, bounds)
    assert marker["_tag"] == "Truncated"
    assert len(json.dumps(marker, separators=(",", ":")).encode()) <= 256
    assert marker["head"].startswith('"AAAA')
    assert marker["tail"] == ""  # the head took all the room


# ---- stream_output ------------------------------------------------------------------------------


async def test_stream_output_refuses_an_agent_without_an_output_type_before_the_run() -> None:
    agent = Agent("a", "Answer.")
    model = ScriptedModel([Turn.text("Hello.")])
    async with open_runtime(model.as_layer(), agents=[agent]) as rt:
        with pytest.raises(TypeError, match="has no output type"):
            rt.stream_output(agent, "Hi")
        assert model.requests == []
        assert rt.active_runs == 0


# ---- stream_text --------------------------------------------------------------------------------


async def test_stream_text_clears_what_it_showed_when_a_new_turn_starts() -> None:
    agent = Agent("a", "Answer.", toolkit=Toolkit(wait))
    texts: list[list[str]] = []
    for first in (
        Turn.tool_calls(("wait", {"seconds": 0}), text="Let me see."),
        Turn.tool_calls(("wait", {"seconds": 0})),  # shows no text: nothing to clear
    ):
        model = ScriptedModel([first, Turn.text("Done now.", chunk=5)])
        layer = agent.toolkit.handlers() + model.as_layer()
        async with (
            open_runtime(layer, agents=[agent]) as rt,
            rt.stream(agent, "Go.") as events,
        ):
            texts.append([text async for text in events.stream_text()])
    assert texts == [["Let me see.", "", "Done ", "Done now."], ["Done ", "Done now."]]
