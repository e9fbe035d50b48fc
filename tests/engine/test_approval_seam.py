"""The approval seam (spec §5): preflight refuses a runtime that could need approval and has no
Approval service; approve runs, deny / timeout / ApprovalError reject; requests and decisions are
canonical audit records with the tool-call ID (CAP-006); the request says what an approver needs."""

from __future__ import annotations

import contextlib
import logging
import time
from typing import Any

import attrs
import pytest
import trio
import trio.testing
from hypothesis import given
from hypothesis import strategies as st

from effectagent.ai import ToolCallContext
from effectagent.core import (
    REDACTED,
    ApprovalDecision,
    ApprovalDenied,
    ApprovalRequest,
    ApprovalRequested,
    RunCompleted,
    RunFailed,
    RunInterrupted,
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
    engine_logs,
    entries,
    events_of,
    forecast_tool,
    make_agent,
    make_policy,
    records_of,
    results_by_id,
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
    start = trio.current_time()
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
    assert before + 120 <= request.expires_at <= after + 120  # the wall clock, for people
    assert request.deadline == pytest.approx(start + 120)  # the Trio clock: what is judged
    assert request.tool is not None
    assert request.tool.name == "forecast"  # the tool itself, for an in-process approver


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


async def test_a_target_rule_giving_one_string_fails_closed(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """``targets=lambda p: f"city:{p.city}"`` (a str, not a list) would be its letters, which
    no rule about the real target matches: the call is rejected, never asked about or run."""
    approval, probe = ScriptedApproval.answering(True), HandlerProbe()
    tool = forecast_tool(needs_approval=True, targets=lambda params: f"city:{params.city}")
    ran = await run_script(
        make_agent(tool), {tool: probe.forecast()}, _gated_run_turns(), extra=approval.layer()
    )
    rejected = ran.outcome("call_gated")
    assert isinstance(rejected, ToolRejected)
    assert "targets(params) of tool 'forecast' returned one str" in rejected.reason
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
        ({"tool_name": "delete_forecast"}, "another tool"),
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
    assert rejected.reason == f"approval denied: refused: the decision was made for {why}"
    (decided,) = records_of(ran.log, ToolApprovalDecided)
    assert decided.decision.approved is False
    assert decided.decision.decided_by == "engine"


async def test_an_approval_that_arrives_after_the_request_expired_is_refused(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The engine stops waiting at the policy's timeout and judges a decision that still reaches
    it (here from a provider that shields itself from the engine's cancellation) on the same
    clock, Trio's: under the mock clock the wall clock has not moved, and the decision is still
    refused and recorded as refused."""

    async def stubborn(request: ApprovalRequest) -> ApprovalDecision:
        with trio.CancelScope(shield=True):
            await trio.sleep(45)  # past the 30 s timeout, deaf to the engine's cancellation
        return ApprovalDecision.for_request(request, True, "ok", "human")

    approval, probe = ScriptedApproval(stubborn), HandlerProbe()
    start = trio.current_time()
    ran, _, _ = await _run_gated(approval, probe, approval_timeout=30)
    assert trio.current_time() - start == pytest.approx(45)
    (request,) = approval.requests
    assert request.deadline == pytest.approx(start + 30)
    rejected = ran.outcome("call_gated")
    assert isinstance(rejected, ToolRejected)
    assert rejected.reason == (
        "approval denied: refused: the decision came after the request expired"
    )
    (decided,) = records_of(ran.log, ToolApprovalDecided)
    assert (decided.decision.approved, decided.decision.decided_by) == (False, "engine")
    assert decided.decision.mismatch(request) is None  # the refusal is bound to the call
    assert probe.calls == []


@pytest.mark.parametrize("how", ["swallows the cancellation", "shields itself until then"])
async def test_an_approval_that_reaches_the_engine_at_the_deadline_instant_is_refused(
    how: str, autojump_clock: trio.testing.MockClock
) -> None:
    """The engine stops waiting at the deadline (``move_on_at`` fires then), so a decision that
    reaches it at that very instant is as late as one after it. It was taken (the engine
    refused only a decision after the deadline): a provider that swallowed the engine's
    cancellation, or shielded itself up to the deadline, had its call run."""

    async def stubborn(request: ApprovalRequest) -> ApprovalDecision:
        assert request.deadline is not None
        if how == "swallows the cancellation":
            with contextlib.suppress(trio.Cancelled):  # deaf to the engine's timeout
                await trio.sleep_forever()
        else:
            with trio.CancelScope(shield=True):
                await trio.sleep_until(request.deadline)
        assert trio.current_time() == request.deadline
        return ApprovalDecision.for_request(request, True, "ok", "human")

    approval, probe = ScriptedApproval(stubborn), HandlerProbe()
    ran, _, _ = await _run_gated(approval, probe, approval_timeout=30)
    rejected = ran.outcome("call_gated")
    assert isinstance(rejected, ToolRejected)
    assert rejected.reason == (
        "approval denied: refused: the decision came after the request expired"
    )
    (decided,) = records_of(ran.log, ToolApprovalDecided)
    assert (decided.decision.approved, decided.decision.decided_by) == (False, "engine")
    assert probe.calls == []


def _bare_request(run: str, tool: str, call: str, digest: str) -> ApprovalRequest:
    return ApprovalRequest(
        run,
        "conv",
        "ops",
        tool,
        call,
        "",
        ("file:/srv/db",),
        "high",
        {"path": "/srv/db"},
        0.0,
        arguments_digest=digest,
    )


BOUND = st.tuples(
    st.sampled_from(["run_1", "run_2"]),
    st.sampled_from(["read_file", "delete_file"]),
    st.sampled_from(["call_x", "call_y"]),
    st.sampled_from(["a" * 64, "b" * 64]),
)


@given(made_for=BOUND, asked=BOUND, approved=st.booleans())
def test_a_bound_decision_answers_exactly_the_request_it_was_made_for(
    made_for: tuple[str, str, str, str], asked: tuple[str, str, str, str], approved: bool
) -> None:
    """For all pairs of requests: a decision made for one answers the other exactly when run,
    tool, call ID and argument digest are all the same — the tool is never left out, also under
    the same call ID with the same arguments (a kept ``read_file`` approval, a ``delete_file``
    call)."""
    decision = ApprovalDecision.for_request(_bare_request(*made_for), approved, "ok", "kept")
    why = decision.mismatch(_bare_request(*asked))
    assert (why is None) == (made_for == asked)
    if made_for[:2] != asked[:2] and made_for[0] == asked[0]:
        assert why == "the decision was made for another tool"


async def test_a_kept_decision_for_one_tool_never_lets_another_tool_run_under_its_call_id(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A model uses one call ID again in a later turn, for another tool with the same arguments
    (so the same digest); an approver that keeps its decisions (here by digest) hands the first
    tool's approval back. It is refused as made for another tool — whatever ID the engine gives
    the second call — recorded, and the second tool does not run."""
    kept: dict[str, ApprovalDecision] = {}

    async def keeping(request: ApprovalRequest) -> ApprovalDecision:
        await trio.lowlevel.checkpoint()
        return kept.setdefault(
            request.arguments_digest, ApprovalDecision.for_request(request, True, "ok", "cache")
        )

    approval, probe = ScriptedApproval(keeping), HandlerProbe()
    read, purge = forecast_tool(needs_approval=True), forecast_tool("purge", needs_approval=True)
    ran = await run_script(
        make_agent(read, purge),
        {read: probe.forecast(), purge: probe.forecast()},
        [
            Turn.tool_calls(("forecast", {"city": "Oslo"}, "call_x")),
            Turn.tool_calls(("purge", {"city": "Oslo"}, "call_x")),
            Turn.text("Done."),
        ],
        extra=approval.layer(),
    )
    first, second = approval.requests
    assert first.arguments_digest == second.arguments_digest
    assert [name for name, _ in probe.calls] == ["forecast"]
    first_outcome, second_outcome = (s.outcome for s in records_of(ran.log, ToolCallSettled))
    assert isinstance(first_outcome, ToolSuccess)
    assert isinstance(second_outcome, ToolRejected)
    assert second_outcome.reason == (
        "approval denied: refused: the decision was made for another tool"
    )
    decided = records_of(ran.log, ToolApprovalDecided)
    assert [(d.decision.approved, d.decision.decided_by) for d in decided] == [
        (True, "cache"),
        (False, "engine"),
    ]
    assert decided[1].decision.tool_name == "purge"


# ---- a failing approval service fails closed -------------------------------------------------------

CANARY = "s3cr3t-approval-canary"
NEUTRAL = "approval denied: the approval service failed; the call was not run"


async def _raises(request: ApprovalRequest) -> ApprovalDecision:
    await trio.lowlevel.checkpoint()
    raise RuntimeError(f"approval backend down {CANARY}")


async def _raises_in_a_group(request: ApprovalRequest) -> ApprovalDecision:
    async def broken() -> None:
        await trio.lowlevel.checkpoint()
        raise RuntimeError(f"approval backend down {CANARY}")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(broken)
        nursery.start_soon(broken)
    raise AssertionError("unreachable")  # pragma: no cover


async def _answers_nothing(request: ApprovalRequest) -> Any:
    await trio.lowlevel.checkpoint()
    return None  # not a decision: e.g. a provider that forgot to return one


@pytest.mark.parametrize(
    ("decide", "error"),
    [(_raises, "RuntimeError"), (_raises_in_a_group, "ExceptionGroup"), (_answers_nothing, None)],
)
async def test_a_failing_approval_service_is_a_recorded_denial_with_a_neutral_reason(
    autojump_clock: trio.testing.MockClock, decide: Any, error: str | None
) -> None:
    """CAP-006 holds when the provider crashes: request and decision are both recorded. The
    model reads a neutral sentence; what was raised goes to the run's log, redacted, and never
    to the model, an event or a record."""
    probe, tool = HandlerProbe(), forecast_tool(needs_approval=True)
    with engine_logs(logging.WARNING) as logs:
        ran = await run_script(
            make_agent(tool),
            {tool: probe.forecast()},
            _gated_run_turns(),
            extra=ScriptedApproval(decide).layer(),
            secrets=[CANARY],
        )
    rejected = ran.outcome("call_gated")
    assert isinstance(rejected, ToolRejected)
    assert rejected.reason == NEUTRAL
    kinds = [
        type(e.record).__name__
        for e in ran.log
        if isinstance(e.record, ToolApprovalRequested | ToolApprovalDecided | ToolCallSettled)
    ]
    assert kinds == ["ToolApprovalRequested", "ToolApprovalDecided", "ToolCallSettled"]
    (decided,) = records_of(ran.log, ToolApprovalDecided)
    assert decided.decision.approved is False
    assert decided.decision.decided_by == "approval-error"
    assert decided.decision.reason == "the approval service failed; the call was not run"
    assert NEUTRAL in repr(results_by_id(ran.model.requests[1])["call_gated"].result)
    for seen in (repr(ran.log), repr(ran.events), repr(ran.model.requests)):
        assert "backend down" not in seen
        assert "NoneType" not in seen
        assert CANARY not in seen
    assert probe.calls == []
    (line,) = [line for line in logs if line["event"] == "approval service failed"]
    assert line["tool_call_id"] == "call_gated"
    if error is None:
        assert line["error"] == "TypeError"
        assert "NoneType, not a decision" in line["detail"]
    else:
        assert line["error"] == error
        assert f"RuntimeError: approval backend down {REDACTED}" in line["detail"]
    assert CANARY not in repr(logs)


async def test_an_approval_error_keeps_its_own_words(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """An ``ApprovalError`` is the provider's own account, meant to be read: the model reads it
    (redacted), unlike a crash."""

    async def declared(request: ApprovalRequest) -> ApprovalDecision:
        await trio.lowlevel.checkpoint()
        raise ApprovalError(f"the approver is on leave {CANARY}")

    ran, _, _ = await _run_with(declared)
    rejected = ran.outcome("call_gated")
    assert isinstance(rejected, ToolRejected)
    assert rejected.reason == f"approval denied: the approver is on leave {REDACTED}"


async def _run_with(decide: Any, **policy: Any) -> tuple[Ran, float, float]:
    tool = forecast_tool(needs_approval=True)
    start = trio.current_time()
    ran = await run_script(
        make_agent(tool, policy=make_policy(**policy)),
        {tool: HandlerProbe().forecast()},
        _gated_run_turns(),
        extra=ScriptedApproval(decide).layer(),
        secrets=[CANARY],
    )
    return ran, start, trio.current_time()


async def test_a_provider_cancelled_inside_its_own_nursery_times_out_not_crashes(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """At the deadline a provider with tasks of its own raises a group of ``Cancelled``: that is
    the timeout (a denial by "timeout"), never taken for a crash."""

    async def fanned_out(request: ApprovalRequest) -> ApprovalDecision:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(trio.sleep_forever)
            nursery.start_soon(trio.sleep_forever)
        raise AssertionError("unreachable")  # pragma: no cover

    ran, start, end = await _run_with(fanned_out, approval_timeout=20)
    assert end - start == pytest.approx(20)
    (decided,) = records_of(ran.log, ToolApprovalDecided)
    assert (decided.decision.approved, decided.decision.decided_by) == (False, "timeout")


async def _interrupted_while_asking(decide: Any) -> tuple[list[Any], list[Any]]:
    """Stream a gated run and interrupt it once the provider is waiting; events and log."""
    asking = trio.Event()

    async def provider(request: ApprovalRequest) -> ApprovalDecision:
        asking.set()
        return await decide(request)  # type: ignore[no-any-return]

    tool = forecast_tool(needs_approval=True)
    agent = make_agent(tool)
    model = TrackingModel(_gated_run_turns())
    layer = (
        agent.toolkit.handlers({tool: HandlerProbe().forecast()})
        + model.layer()
        + ScriptedApproval(provider).layer()
    )
    async with open_runtime(layer, agents=[agent]) as runtime:
        async with runtime.stream(agent, "Weather?") as stream:
            events = []
            async for event in stream:
                events.append(event)
                if isinstance(event, ApprovalRequested):
                    await asking.wait()
                    stream.interrupt()
        log = await entries(runtime, stream.conversation_id)
    return events, log


async def test_an_interrupted_provider_with_its_own_nursery_is_an_interruption_not_a_denial(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async def fanned_out(request: ApprovalRequest) -> ApprovalDecision:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(trio.sleep_forever)
            nursery.start_soon(trio.sleep_forever)
        raise AssertionError("unreachable")  # pragma: no cover

    events, log = await _interrupted_while_asking(fanned_out)
    assert isinstance(events[-1], RunInterrupted)
    assert records_of(log, ToolApprovalDecided) == []  # no decision was made, none recorded


async def test_a_provider_crashing_as_it_is_interrupted_still_ends_the_run_interrupted(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The provider's clean-up fails while the run is interrupted: a group of a ``Cancelled``
    and an error. The cancellation goes on (the run ends interrupted, no decision recorded); the
    error is logged."""

    async def clean_up_fails() -> None:
        try:
            await trio.sleep_forever()
        finally:
            raise RuntimeError(f"could not close the ticket {CANARY}")

    async def crashing(request: ApprovalRequest) -> ApprovalDecision:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(clean_up_fails)
            await trio.sleep_forever()
        raise AssertionError("unreachable")  # pragma: no cover

    with engine_logs(logging.WARNING) as logs:
        events, log = await _interrupted_while_asking(crashing)
    assert isinstance(events[-1], RunInterrupted)
    assert records_of(log, ToolApprovalDecided) == []
    (line,) = [line for line in logs if line["event"] == "approval service failed"]
    assert "RuntimeError: could not close the ticket" in line["detail"]


async def _raising_as_cancelled(request: ApprovalRequest) -> ApprovalDecision:
    """A provider whose client reports its closed connection as it is cancelled."""
    try:
        await trio.sleep_forever()
    except trio.Cancelled:
        raise ConnectionError("connection closed while waiting for a person") from None
    raise AssertionError("unreachable")  # pragma: no cover


async def test_a_provider_raising_as_the_run_is_interrupted_records_no_decision(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """It was recorded as an "approval-error" denial before the interruption."""
    events, log = await _interrupted_while_asking(_raising_as_cancelled)
    assert isinstance(events[-1], RunInterrupted)
    assert records_of(log, ToolApprovalDecided) == []


async def test_a_provider_raising_as_its_wait_runs_out_is_a_timeout(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """It read as "approval-error", a failure of the service, though its wait ran out."""
    ran, start, end = await _run_with(_raising_as_cancelled, approval_timeout=20)
    assert end - start == pytest.approx(20)
    (decided,) = records_of(ran.log, ToolApprovalDecided)
    assert (decided.decision.approved, decided.decision.decided_by) == (False, "timeout")
