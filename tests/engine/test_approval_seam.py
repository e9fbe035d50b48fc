"""The approval seam (spec §5): preflight refuses a runtime that could need approval and has no
Approval service; approve runs, deny / timeout / ApprovalError reject; requests and decisions are
canonical audit records with the tool-call ID (CAP-006); the request says what an approver needs."""

from __future__ import annotations

import time
from typing import Any

import attrs
import pytest
import trio
import trio.testing

from effectagent.ai import ToolCallContext
from effectagent.core import (
    REDACTED,
    ApprovalDecision,
    ApprovalDenied,
    ApprovalRequest,
    ApprovalRequested,
    RunCompleted,
    RunFailed,
    ToolApprovalDecided,
    ToolApprovalRequested,
    ToolCallSettled,
    ToolRejected,
    ToolSuccess,
)
from effectagent.effect import MissingServicesError
from effectagent.engine import ApprovalError, ApprovalService, open_runtime
from effectagent.testing import Turn

from .helpers import (
    Forecast,
    HandlerProbe,
    Lookup,
    Ran,
    ScriptedApproval,
    TrackingModel,
    events_of,
    forecast_tool,
    make_agent,
    make_policy,
    records_of,
    run_script,
    same_error,
)


def _gated_run_turns(city: str = "Oslo") -> list[Turn]:
    return [Turn.tool_calls(("forecast", {"city": city}, "call_gated")), Turn.text("Done.")]


async def _run_gated(
    approval: ScriptedApproval, probe: HandlerProbe, **policy: Any
) -> tuple[Ran, float, float]:
    tool = forecast_tool(needs_approval=True, title="Weather lookup")
    before = time.time()
    ran = await run_script(
        make_agent(tool, policy=make_policy(**policy)),
        {tool: probe.forecast()},
        _gated_run_turns(),
        extra=approval.layer(),
    )
    return ran, before, time.time()


# ---- preflight ---------------------------------------------------------------------------------


@pytest.mark.parametrize("needs_approval", [True, lambda params, call: params.city == "Pyongyang"])
async def test_no_approval_service_fails_at_open_runtime(needs_approval: Any) -> None:
    tool = forecast_tool("gated", needs_approval=needs_approval)
    agent = make_agent(tool)
    model = TrackingModel([Turn.text("never")])
    layer = agent.toolkit.handlers({tool: HandlerProbe().forecast()}) + model.layer()
    with pytest.raises(MissingServicesError) as caught:
        async with open_runtime(layer, agents=[agent]):
            pass  # pragma: no cover
    assert caught.value.keys == frozenset({ApprovalService})
    assert "effectagent.Approval" in str(caught.value)
    assert "'gated'" in str(caught.value)
    assert model.requests == []


async def test_no_approval_service_fails_at_stream() -> None:
    tool = forecast_tool("gated", needs_approval=True)
    agent = make_agent(tool)
    model = TrackingModel([Turn.text("never")])
    layer = agent.toolkit.handlers({tool: HandlerProbe().forecast()}) + model.layer()
    async with open_runtime(layer) as runtime:
        with pytest.raises(MissingServicesError) as caught:
            runtime.stream(agent, "Weather?")
        assert caught.value.keys == frozenset({ApprovalService})
        assert "'gated'" in str(caught.value)
        assert runtime.active_runs == 0
    assert model.requests == []


# ---- decisions ---------------------------------------------------------------------------------


async def test_approved_calls_run(autojump_clock: trio.testing.MockClock) -> None:
    probe, approval = HandlerProbe(), ScriptedApproval.answering(True, "fine")
    ran, _, _ = await _run_gated(approval, probe)
    assert isinstance(ran.outcome("call_gated"), ToolSuccess)
    assert probe.calls == [("forecast", Lookup("Oslo"))]
    assert len(approval.requests) == 1
    (decided,) = records_of(ran.log, ToolApprovalDecided)
    decision = decided.decision
    assert (decision.approved, decision.reason, decision.decided_by) == (True, "fine", "test")
    # The recorded decision is bound to the call it answered.
    (request,) = approval.requests
    assert decision == ApprovalDecision.for_request(request, True, "fine", "test")


async def test_denied_calls_are_rejected(autojump_clock: trio.testing.MockClock) -> None:
    probe, approval = HandlerProbe(), ScriptedApproval.answering(False, "too risky")
    ran, _, _ = await _run_gated(approval, probe)
    rejected = ran.outcome("call_gated")
    assert isinstance(rejected, ToolRejected)
    assert "too risky" in rejected.reason
    assert probe.calls == []
    assert isinstance(ran.terminal, RunCompleted)  # a denial is not terminal for the run


async def test_an_approval_timeout_is_a_denial(autojump_clock: trio.testing.MockClock) -> None:
    async def never(request: ApprovalRequest) -> ApprovalDecision:
        await trio.sleep_forever()
        raise AssertionError("unreachable")  # pragma: no cover

    probe = HandlerProbe()
    start = trio.current_time()
    ran, _, _ = await _run_gated(ScriptedApproval(never), probe, approval_timeout=45)
    assert trio.current_time() - start == pytest.approx(45)
    rejected = ran.outcome("call_gated")
    assert isinstance(rejected, ToolRejected)
    assert "timed out" in rejected.reason
    (decided,) = records_of(ran.log, ToolApprovalDecided)
    assert decided.decision.approved is False
    assert decided.decision.decided_by == "timeout"
    assert probe.calls == []


async def test_an_approval_error_is_a_denial(autojump_clock: trio.testing.MockClock) -> None:
    async def broken(request: ApprovalRequest) -> ApprovalDecision:
        await trio.lowlevel.checkpoint()
        raise ApprovalError("approver unreachable")

    probe = HandlerProbe()
    ran, _, _ = await _run_gated(ScriptedApproval(broken), probe)
    rejected = ran.outcome("call_gated")
    assert isinstance(rejected, ToolRejected)
    assert "approver unreachable" in rejected.reason
    (decided,) = records_of(ran.log, ToolApprovalDecided)
    assert decided.decision.approved is False
    assert decided.decision.decided_by == "approval-error"
    assert probe.calls == []


async def test_approval_as_a_function_asks_only_when_it_says_so(
    autojump_clock: trio.testing.MockClock,
) -> None:
    def sensitive(params: Lookup, call: ToolCallContext) -> bool:
        return params.city == "Rome"

    probe, tool = HandlerProbe(), forecast_tool(needs_approval=sensitive)
    approval = ScriptedApproval.answering(False)
    ran = await run_script(
        make_agent(tool),
        {tool: probe.forecast()},
        [
            Turn.tool_calls(("forecast", {"city": "Oslo"}), ("forecast", {"city": "Rome"})),
            Turn.text("Half."),
        ],
        extra=approval.layer(),
    )
    assert [r.tool_call_id for r in approval.requests] == ["call_1"]
    assert isinstance(ran.outcome("call_0"), ToolSuccess)
    assert isinstance(ran.outcome("call_1"), ToolRejected)


# ---- audit and request contents ----------------------------------------------------------------


async def test_request_and_decision_are_canonical_records_with_the_call_id(
    autojump_clock: trio.testing.MockClock,
) -> None:
    ran, _, _ = await _run_gated(ScriptedApproval.answering(True), HandlerProbe())
    kinds = [
        type(e.record).__name__
        for e in ran.log
        if isinstance(e.record, ToolApprovalRequested | ToolApprovalDecided | ToolCallSettled)
    ]
    assert kinds == ["ToolApprovalRequested", "ToolApprovalDecided", "ToolCallSettled"]
    (requested,) = records_of(ran.log, ToolApprovalRequested)
    (decided,) = records_of(ran.log, ToolApprovalDecided)
    assert requested.request.tool_call_id == decided.tool_call_id == "call_gated"
    terminal = ran.terminal
    assert requested.run_id == decided.run_id == terminal.run_id
    (event,) = events_of(ran.events, ApprovalRequested)
    assert event.tool_call_id == "call_gated"
    assert event.request == requested.request


async def test_the_request_tells_the_approver_what_it_needs(
    autojump_clock: trio.testing.MockClock,
) -> None:
    approval = ScriptedApproval.answering(True)
    ran, before, after = await _run_gated(approval, HandlerProbe(), approval_timeout=120)
    (request,) = approval.requests
    terminal = ran.terminal
    assert request.run_id == terminal.run_id
    assert request.conversation_id == terminal.conversation_id
    assert request.agent == "weather"
    assert request.tool_name == "forecast"
    assert request.tool_call_id == "call_gated"
    assert "Weather lookup" in request.summary
    assert "forecast for a city" in request.summary
    assert request.risk == "high"  # not readonly, destructive by default
    assert request.input_preview == {"city": "Oslo"}
    assert before + 120 <= request.expires_at <= after + 120


@pytest.mark.parametrize(
    ("annotations", "risk"),
    [({"readonly": True}, "low"), ({"destructive": False}, "medium"), ({}, "high")],
)
async def test_risk_follows_the_tool_annotations(
    autojump_clock: trio.testing.MockClock, annotations: dict[str, Any], risk: str
) -> None:
    approval = ScriptedApproval.answering(True)
    tool = forecast_tool(needs_approval=True, **annotations)
    await run_script(
        make_agent(tool),
        {tool: HandlerProbe().forecast()},
        _gated_run_turns(),
        extra=approval.layer(),
    )
    assert approval.requests[0].risk == risk


async def test_the_input_preview_is_redacted_but_the_handler_sees_the_real_value(
    autojump_clock: trio.testing.MockClock,
) -> None:
    secret = "sk-live-0123456789abcdef"
    approval = ScriptedApproval.answering(True)
    probe, tool = HandlerProbe(), forecast_tool(needs_approval=True, failure=None)
    ran = await run_script(
        make_agent(tool),
        {tool: probe.wrap(_echo_city)},
        [Turn.tool_calls(("forecast", {"city": f"Oslo {secret}"})), Turn.text("ok")],
        extra=approval.layer(),
        secrets=[secret],
    )
    assert approval.requests[0].input_preview == {"city": f"Oslo {REDACTED}"}
    assert probe.calls == [("forecast", Lookup(f"Oslo {secret}"))]
    assert secret not in repr(ran.log)


async def _echo_city(params: Lookup, call: ToolCallContext) -> Any:
    await trio.lowlevel.checkpoint()
    return Forecast(params.city, 1.0)


# ---- targets, summaries, terminal denials ---------------------------------------------------------


async def test_a_tool_derives_the_targets_and_summary_of_its_request_from_its_parameters(
    autojump_clock: trio.testing.MockClock,
) -> None:
    secret = "sk-live-0123456789abcdef"
    approval = ScriptedApproval.answering(True)
    tool = forecast_tool(
        needs_approval=True,
        targets=lambda params: [f"city:{params.city}", "service:weather-api"],
        summarize=lambda params: f"Look up the weather in {params.city}",
    )
    await run_script(
        make_agent(tool),
        {tool: HandlerProbe().forecast()},
        [Turn.tool_calls(("forecast", {"city": f"Oslo {secret}"}, "call_gated")), Turn.text("ok")],
        extra=approval.layer(),
        secrets=[secret],
    )
    (request,) = approval.requests
    assert request.targets == (f"city:Oslo {REDACTED}", "service:weather-api")
    assert request.summary == f"Look up the weather in Oslo {REDACTED}"


async def test_a_crashing_target_rule_fails_closed(autojump_clock: trio.testing.MockClock) -> None:
    def broken(params: Lookup) -> list[str]:
        raise KeyError("no such field")

    approval, probe = ScriptedApproval.answering(True), HandlerProbe()
    tool = forecast_tool(needs_approval=True, targets=broken)
    ran = await run_script(
        make_agent(tool), {tool: probe.forecast()}, _gated_run_turns(), extra=approval.layer()
    )
    rejected = ran.outcome("call_gated")
    assert isinstance(rejected, ToolRejected)
    assert "approval policy failed: KeyError" in rejected.reason
    assert approval.requests == []
    assert probe.calls == []


async def test_a_terminal_denial_commits_the_batch_then_fails_the_run(
    autojump_clock: trio.testing.MockClock,
) -> None:
    approval = ScriptedApproval.answering(False, "not today")
    probe = HandlerProbe()
    gated = forecast_tool(needs_approval=True, denial_is_terminal=True)
    free = forecast_tool("free_forecast")
    ran = await run_script(
        make_agent(gated, free),
        {gated: probe.forecast(), free: probe.forecast()},
        [
            Turn.tool_calls(
                ("forecast", {"city": "Oslo"}, "call_gated"),
                ("free_forecast", {"city": "Rome"}, "call_free"),
            ),
            Turn.text("never asked"),
        ],
        extra=approval.layer(),
    )
    assert approval.requests[0].denial_is_terminal is True
    rejected = ran.outcome("call_gated")
    assert isinstance(rejected, ToolRejected)
    assert rejected.terminal
    assert isinstance(ran.outcome("call_free"), ToolSuccess)  # the rest of the batch ran
    terminal = ran.terminal
    assert isinstance(terminal, RunFailed)
    assert same_error(terminal.error, ApprovalDenied("call_gated", "forecast", rejected.reason))
    assert len(ran.model.requests) == 1  # the model was not asked again


async def test_a_recoverable_denial_lets_the_model_continue(
    autojump_clock: trio.testing.MockClock,
) -> None:
    approval = ScriptedApproval.answering(False, "not today")
    ran, _, _ = await _run_gated(approval, HandlerProbe())
    assert approval.requests[0].denial_is_terminal is False
    rejected = ran.outcome("call_gated")
    assert isinstance(rejected, ToolRejected)
    assert not rejected.terminal
    assert isinstance(ran.terminal, RunCompleted)
    assert len(ran.model.requests) == 2


# ---- decisions bound to their call ----------------------------------------------------------------


async def _gated_with(decide: Any, *calls: tuple[str, dict[str, str], str]) -> tuple[Ran, Any]:
    approval = ScriptedApproval(decide)
    probe, tool = HandlerProbe(), forecast_tool(needs_approval=True)
    ran = await run_script(
        make_agent(tool),
        {tool: probe.forecast()},
        [Turn.tool_calls(*calls), Turn.text("Done.")],
        extra=approval.layer(),
    )
    return ran, approval


async def test_equal_arguments_have_equal_digests_and_other_arguments_other_ones(
    autojump_clock: trio.testing.MockClock,
) -> None:
    _, approval = await _gated_with(
        _approve_bound,
        ("forecast", {"city": "Oslo"}, "a"),
        ("forecast", {"city": "Oslo"}, "b"),
        ("forecast", {"city": "Rome"}, "c"),
    )
    digests = [r.arguments_digest for r in approval.requests]
    assert len(digests[0]) == 64
    assert digests[0] == digests[1] != digests[2]
    assert "Oslo" not in digests[0]


async def _approve_bound(request: ApprovalRequest) -> ApprovalDecision:
    await trio.lowlevel.checkpoint()
    return ApprovalDecision.for_request(request, True, "ok", "test")


@pytest.mark.parametrize(
    ("change", "why"),
    [
        ({"run_id": "run_other"}, "another run"),
        ({"tool_call_id": "call_other"}, "another tool call"),
        ({"arguments_digest": "0" * 64}, "other arguments"),
    ],
)
async def test_a_decision_replayed_for_another_call_is_refused_and_recorded(
    autojump_clock: trio.testing.MockClock, change: dict[str, Any], why: str
) -> None:
    async def replay(request: ApprovalRequest) -> ApprovalDecision:
        await trio.lowlevel.checkpoint()
        return attrs.evolve(ApprovalDecision.for_request(request, True, "ok", "cache"), **change)

    ran, _ = await _gated_with(replay, ("forecast", {"city": "Oslo"}, "call_gated"))
    rejected = ran.outcome("call_gated")
    assert isinstance(rejected, ToolRejected)
    assert f"refused: the decision was made for {why}" in rejected.reason
    (decided,) = records_of(ran.log, ToolApprovalDecided)
    assert decided.decision.approved is False
    assert decided.decision.decided_by == "engine"


async def test_an_approval_that_arrives_after_the_request_expired_is_refused(
    autojump_clock: trio.testing.MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The engine stops waiting at the policy's timeout on the Trio clock; a decision that
    reaches it after the request's wall-clock expiry (a stale answer, a clock that moved on) is
    refused too. The engine's wall clock is replaced so the approver can move it."""
    import types

    from effectagent.engine import _call

    wall = [1_000.0]
    monkeypatch.setattr(_call, "time", types.SimpleNamespace(time=lambda: wall[0]))

    async def slow_human(request: ApprovalRequest) -> ApprovalDecision:
        await trio.lowlevel.checkpoint()
        wall[0] = request.expires_at + 1  # the answer comes a second too late
        return ApprovalDecision.for_request(request, True, "ok", "human")

    ran, _ = await _gated_with(slow_human, ("forecast", {"city": "Oslo"}, "call_gated"))
    rejected = ran.outcome("call_gated")
    assert isinstance(rejected, ToolRejected)
    assert "after the request expired" in rejected.reason
