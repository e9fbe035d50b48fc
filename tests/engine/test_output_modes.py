"""Output modes (#29 item 4): the tool-call output mode (the answer is a call of a synthetic
final_result tool), union outputs (``one_of``) in both modes, against the scripted model."""

from __future__ import annotations

import json
from typing import Any

import attrs
import pytest
import trio
import trio.testing

from effectagent.core import (
    OutputInvalid,
    RunCompleted,
    RunCompletedRecord,
    RunFailed,
    ToolCallSettled,
    one_of,
    project_messages,
)
from effectagent.engine import open_runtime
from effectagent.testing import Turn

from .crash import DyingLog, log_layer
from .helpers import (
    HandlerProbe,
    TrackingModel,
    assert_well_formed,
    entries,
    forecast_tool,
    make_agent,
    make_policy,
    records_of,
    run_events,
)


@attrs.frozen
class Refund:
    order: str
    amount: float


@attrs.frozen
class Escalation:
    reason: str


GOOD = {"order": "A-1", "amount": 12.5}


async def _run(turns: list[Turn], *tools: Any, retries: int = 2, **agent: Any) -> Any:
    model = TrackingModel(turns)
    agent.setdefault("output", Refund)
    made = make_agent(*tools, policy=make_policy(output_retries=retries), **agent)
    layer = model.layer()
    if tools:
        probe = HandlerProbe()
        layer = made.toolkit.handlers({tool: probe.forecast() for tool in tools}) + layer
    async with open_runtime(layer, agents=[made]) as runtime:
        events = await run_events(runtime, made, "Refund order A-1, please.")
        log = await entries(runtime, events[0].conversation_id)
    return events, log, model


async def test_tool_mode_offers_final_result_and_takes_its_call_as_the_answer(
    autojump_clock: trio.testing.MockClock,
) -> None:
    events, log, model = await _run([Turn.tool_calls(("final_result", GOOD))], output_mode="tool")
    end = assert_well_formed(events)
    assert isinstance(end, RunCompleted)
    assert end.output == Refund("A-1", 12.5)
    (request,) = model.requests
    assert request.output is None  # no native schema: the tool carries it
    (tool,) = request.tools
    assert tool.name == "final_result"
    assert tool.parameters["required"] == ["order", "amount"]
    assert request.tool_choice == "auto"
    # Recorded canonically: the call settles with the completion, so the conversation's
    # projection is a well-formed tool exchange.
    (settled,) = records_of(log, ToolCallSettled)
    assert settled.tool_name == "final_result"
    assert settled.outcome.kind == "success"
    assert records_of(log, RunCompletedRecord)[0].output == GOOD
    projected = project_messages(log)
    assert [type(m).__name__ for m in projected] == [
        "UserMessage",
        "AssistantMessage",
        "ToolMessage",
    ]


async def test_a_bad_final_result_goes_back_as_the_tools_failure_counted_in_output_retries(
    autojump_clock: trio.testing.MockClock,
) -> None:
    bad = {"order": "A-1", "amount": "twelve"}
    events, log, model = await _run(
        [Turn.tool_calls(("final_result", bad)), Turn.tool_calls(("final_result", GOOD))],
        output_mode="tool",
    )
    end = assert_well_formed(events)
    assert isinstance(end, RunCompleted)
    assert end.output == Refund("A-1", 12.5)
    first, _ = records_of(log, ToolCallSettled)
    assert first.outcome.kind == "invalid-input"
    assert "$.amount" in first.outcome.message
    # The second request holds the refusal as the call's result.
    results = [m for m in model.requests[1].messages if type(m).__name__ == "ToolMessage"]
    assert results
    assert results[-1].content[0].is_failure


async def test_final_result_answers_past_output_retries_fail_the_run(
    autojump_clock: trio.testing.MockClock,
) -> None:
    bad = {"order": 1}
    events, _, model = await _run(
        [Turn.tool_calls(("final_result", bad))] * 3, output_mode="tool", retries=1
    )
    end = assert_well_formed(events)
    assert isinstance(end, RunFailed)
    assert isinstance(end.error, OutputInvalid)
    assert "after 1 retry" in str(end.error)
    assert len(model.requests) == 2  # output_retries + 1 answers


async def test_text_instead_of_a_final_result_call_is_sent_back(
    autojump_clock: trio.testing.MockClock,
) -> None:
    events, _, model = await _run(
        [Turn.text(json.dumps(GOOD)), Turn.tool_calls(("final_result", GOOD))],
        output_mode="tool",
    )
    assert isinstance(assert_well_formed(events), RunCompleted)
    assert "final_result" in str(model.requests[1].messages[-1])


async def test_final_result_beside_other_calls_is_not_taken_and_the_others_run(
    autojump_clock: trio.testing.MockClock,
) -> None:
    turns = [
        Turn.tool_calls(("forecast", {"city": "Oslo"}), ("final_result", GOOD)),
        Turn.tool_calls(("final_result", GOOD)),
    ]
    events, log, model = await _run(turns, forecast_tool(), output_mode="tool")
    end = assert_well_formed(events)
    assert isinstance(end, RunCompleted)
    assert end.output == Refund("A-1", 12.5)
    settled = records_of(log, ToolCallSettled)
    assert [s.tool_name for s in settled] == ["forecast", "final_result", "final_result"]
    assert settled[1].outcome.kind == "invalid-input"
    assert "alone" in settled[1].outcome.message
    assert len(model.requests) == 2


async def test_union_output_in_the_native_mode_picks_the_member_by_its_kind(
    autojump_clock: trio.testing.MockClock,
) -> None:
    answer = json.dumps({"kind": "Escalation", "value": {"reason": "fraud"}})
    events, _log, model = await _run([Turn.text(answer)], output=one_of(Refund, Escalation))
    end = assert_well_formed(events)
    assert isinstance(end, RunCompleted)
    assert end.output == Escalation("fraud")
    output = model.requests[0].output
    assert output is not None
    schema = output.schema
    assert schema["type"] == "object"
    assert schema["properties"]["kind"]["enum"] == ["Refund", "Escalation"]


async def test_union_output_in_the_tool_mode_offers_a_tool_per_member(
    autojump_clock: trio.testing.MockClock,
) -> None:
    events, _, model = await _run(
        [Turn.tool_calls(("final_result_Escalation", {"reason": "fraud"}))],
        output=one_of(Refund, Escalation),
        output_mode="tool",
    )
    end = assert_well_formed(events)
    assert isinstance(end, RunCompleted)
    assert end.output == Escalation("fraud")
    names = [tool.name for tool in model.requests[0].tools]
    assert names == ["final_result_Refund", "final_result_Escalation"]


def test_union_decoding_is_unambiguous() -> None:
    @attrs.frozen
    class A:
        x: int

    @attrs.frozen
    class B:
        x: int

    union = one_of(A, B)
    assert union.decode({"kind": "B", "value": {"x": 1}}) == B(1)
    assert union.decode({"kind": "A", "value": {"x": 1}}) == A(1)


def test_a_tool_named_final_result_is_refused_at_construction() -> None:
    with pytest.raises(ValueError, match="'final_result'"):
        make_agent(forecast_tool("final_result"), output=Refund, output_mode="tool")
    with pytest.raises(ValueError, match="'final_result_Escalation'"):
        make_agent(
            forecast_tool("final_result_Escalation"),
            output=one_of(Refund, Escalation),
            output_mode="tool",
        )
    make_agent(forecast_tool("final_result"), output=Refund)  # the native mode has no such tool


def test_the_tool_mode_needs_an_output_type() -> None:
    with pytest.raises(ValueError, match="needs an output type"):
        make_agent(output=None, output_mode="tool")


async def test_the_grace_turn_offers_final_result_alone_and_requires_it(
    autojump_clock: trio.testing.MockClock,
) -> None:
    model = TrackingModel(
        [
            Turn.tool_calls(("forecast", {"city": "Oslo"})),
            Turn.tool_calls(("final_result", GOOD)),
        ]
    )
    agent = make_agent(
        forecast_tool(), output=Refund, output_mode="tool", policy=make_policy(max_turns=1)
    )
    layer = agent.toolkit.handlers({tool: HandlerProbe().forecast() for tool in agent.toolkit})
    async with open_runtime(layer + model.layer(), agents=[agent]) as runtime:
        events = await run_events(runtime, agent, "Refund A-1")
    end = assert_well_formed(events)
    assert isinstance(end, RunCompleted)
    assert end.finish_reason == "budget-exhausted"
    assert end.output == Refund("A-1", 12.5)
    grace = model.requests[1]
    assert [tool.name for tool in grace.tools] == ["final_result"]
    assert grace.tool_choice == "required"
    first = model.requests[0]
    assert [tool.name for tool in first.tools] == ["forecast", "final_result"]


async def test_a_resumed_run_counts_the_refused_final_result_answers_before_it(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The process died after one refused answer (output_retries=1): the resumed run has one
    retry used, so its next bad answer fails the run — it is not refused a second time."""
    agent = make_agent(output=Refund, output_mode="tool", policy=make_policy(output_retries=1))
    bad = Turn.tool_calls(("final_result", {"order": 1}))
    dying = DyingLog(appends=2)  # the input; the refused answer — then nothing more
    first_model = TrackingModel([bad, bad])
    async with open_runtime(first_model.layer() + dying.layer(), agents=[agent]) as runtime:
        first = await runtime.run(agent, "Refund A-1", conversation_id="c", create=True, run_id="r")
    assert first.status == "failed"
    assert [
        s.outcome.kind for s in records_of(list(await dying.log.entries("c")), ToolCallSettled)
    ] == ["invalid-input"]
    model = TrackingModel([bad, Turn.tool_calls(("final_result", GOOD))])
    async with open_runtime(model.layer() + log_layer(dying.log), agents=[agent]) as runtime:
        resumed = await runtime.resume(agent, conversation_id="c", run_id="r")
    assert resumed.status == "failed"
    assert isinstance(resumed.error, OutputInvalid)
    assert "after 1 retry" in str(resumed.error)
    assert len(model.requests) == 1


async def test_a_tool_source_tool_named_final_result_is_left_out(
    autojump_clock: trio.testing.MockClock,
) -> None:
    from effectagent.ai import ToolSnapshot
    from effectagent.effect import Layer, ServiceKey

    class Source:
        def snapshot(self) -> ToolSnapshot:
            return ToolSnapshot(
                (forecast_tool("final_result"),), {"final_result": probe.forecast()}
            )

    probe = HandlerProbe()
    key: ServiceKey[Any] = ServiceKey("tests.FinalSource")
    agent = make_agent(output=Refund, output_mode="tool", tool_sources=[key])
    model = TrackingModel([Turn.tool_calls(("final_result", GOOD))])
    async with open_runtime(model.layer() + Layer.succeed(key, Source()), agents=[agent]) as rt:
        events = await run_events(rt, agent, "Refund A-1")
    end = assert_well_formed(events)
    assert isinstance(end, RunCompleted)
    assert end.output == Refund("A-1", 12.5)
    assert [tool.name for tool in model.requests[0].tools] == ["final_result"]
    assert probe.calls == []
