"""The six tool-call outcomes (spec §2), one test (or a few) per type, observed the way a user
sees them: events, canonical records, and what the model is shown in its next request. Plus
RUN-005: the next request sees a complete batch or none of it."""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.testing
from returns.result import Failure, Success

from effectagent.ai import (
    AssistantMessage,
    TextContent,
    Tool,
    ToolCallContent,
    ToolCallContext,
    ToolMessage,
    UserMessage,
)
from effectagent.core import (
    ConversationCreated,
    LogEntry,
    ModelResponseRecorded,
    Record,
    RunCompleted,
    RunFailed,
    RunFailedRecord,
    ToolCallFailed,
    ToolCallPrepared,
    ToolCallSettled,
    ToolCallSucceeded,
    ToolDefect,
    ToolFailedRun,
    ToolFailure,
    ToolInvalidInput,
    ToolRejected,
    ToolSuccess,
    ToolUnknownOutcome,
    UsageDelta,
    UserInputRecorded,
    project_messages,
)
from effectagent.effect import Layer
from effectagent.engine import AuthorizationDecision, ToolAuthorizationService, open_runtime
from effectagent.testing import Turn

from .helpers import (
    Forecast,
    HandlerProbe,
    Lookup,
    Ran,
    ScriptedApproval,
    TrackingModel,
    UnknownCity,
    assert_well_formed,
    entries,
    events_of,
    forecast_tool,
    make_agent,
    make_policy,
    records_of,
    results_by_id,
    run_script,
    shown,
    tool_messages,
)


async def test_success_is_committed_and_shown_to_the_model(
    autojump_clock: trio.testing.MockClock,
) -> None:
    probe, tool = HandlerProbe(), forecast_tool()
    ran = await run_script(
        make_agent(tool),
        {tool: probe.forecast()},
        [Turn.tool_calls(("forecast", {"city": "Oslo"})), Turn.text("It is 4 degrees.")],
    )
    expected = ToolSuccess("call_0", "forecast", {"city": "Oslo", "high_c": 4.0})
    assert isinstance(ran.terminal, RunCompleted)
    assert [e.outcome for e in events_of(ran.events, ToolCallSucceeded)] == [expected]
    assert ran.outcome("call_0") == expected
    assert probe.calls == [("forecast", Lookup("Oslo"))]
    result = results_by_id(ran.model.requests[1])["call_0"]
    assert result.result == {"city": "Oslo", "high_c": 4.0}
    assert result.is_failure is False


async def test_handler_returning_a_returns_result(autojump_clock: trio.testing.MockClock) -> None:
    tool = forecast_tool()

    async def handle(params: Lookup, call: ToolCallContext) -> Any:
        await trio.lowlevel.checkpoint()
        if params.city == "Oslo":
            return Success(Forecast("Oslo", 4.0))
        return Failure(UnknownCity(params.city))

    ran = await run_script(
        make_agent(tool),
        {tool: handle},
        [
            Turn.tool_calls(("forecast", {"city": "Oslo"}), ("forecast", {"city": "Atlantis"})),
            Turn.text("Done."),
        ],
    )
    assert ran.outcome("call_0") == ToolSuccess(
        "call_0", "forecast", {"city": "Oslo", "high_c": 4.0}
    )
    failure = ran.outcome("call_1")
    assert isinstance(failure, ToolFailure)
    assert failure.error["_tag"] == "UnknownCity"
    assert failure.error["city"] == "Atlantis"


# ---- ToolRejected ------------------------------------------------------------------------------


class _DenyCity:
    """Authorizes every call except those for one city."""

    def __init__(self, city: str) -> None:
        self.city = city
        self.seen: list[tuple[str, Any, str]] = []

    async def authorize(
        self, tool: Tool[Any, Any], params: Any, call: ToolCallContext
    ) -> AuthorizationDecision:
        await trio.lowlevel.checkpoint()
        self.seen.append((tool.name, params, call.tool_call_id))
        if params.city == self.city:
            return AuthorizationDecision(False, f"{self.city} is off limits")
        return AuthorizationDecision(True)


async def test_rejected_by_the_authorization_seam(autojump_clock: trio.testing.MockClock) -> None:
    probe, tool = HandlerProbe(), forecast_tool()
    authz = _DenyCity("Rome")
    ran = await run_script(
        make_agent(tool),
        {tool: probe.forecast()},
        [
            Turn.tool_calls(("forecast", {"city": "Oslo"}), ("forecast", {"city": "Rome"})),
            Turn.text("Only Oslo."),
        ],
        extra=Layer.succeed(ToolAuthorizationService, authz),
    )
    rejected = ran.outcome("call_1")
    assert isinstance(rejected, ToolRejected)
    assert "Rome is off limits" in rejected.reason
    assert isinstance(ran.outcome("call_0"), ToolSuccess)
    assert probe.calls == [("forecast", Lookup("Oslo"))]
    assert sorted(authz.seen, key=lambda seen: seen[2]) == [
        ("forecast", Lookup("Oslo"), "call_0"),
        ("forecast", Lookup("Rome"), "call_1"),
    ]
    seen = results_by_id(ran.model.requests[1])["call_1"]
    assert seen.is_failure
    assert seen.result["_tag"] == "ToolRejected"


async def test_rejected_when_approval_is_denied(autojump_clock: trio.testing.MockClock) -> None:
    probe, tool = HandlerProbe(), forecast_tool(needs_approval=True)
    ran = await run_script(
        make_agent(tool),
        {tool: probe.forecast()},
        [Turn.tool_calls(("forecast", {"city": "Oslo"})), Turn.text("Denied.")],
        extra=ScriptedApproval.answering(False, "not today").layer(),
    )
    rejected = ran.outcome("call_0")
    assert isinstance(rejected, ToolRejected)
    assert "not today" in rejected.reason
    assert probe.calls == []


async def test_rejected_when_the_tool_call_budget_is_exhausted(
    autojump_clock: trio.testing.MockClock,
) -> None:
    probe, tool = HandlerProbe(), forecast_tool()
    ran = await run_script(
        make_agent(tool, policy=make_policy(max_tool_calls=2)),
        {tool: probe.forecast()},
        [
            Turn.tool_calls(("forecast", {"city": "Oslo"}, "first")),
            Turn.tool_calls(("forecast", {"city": "Oslo"}), ("forecast", {"city": "Rome"})),
            Turn.text("One only."),
        ],
    )
    assert isinstance(ran.outcome("first"), ToolSuccess)
    # One call left, two asked for: the whole batch is rejected, none of it runs.
    for call_id in ("call_0", "call_1"):
        rejected = ran.outcome(call_id)
        assert isinstance(rejected, ToolRejected)
        assert "tool-call budget" in rejected.reason
    assert probe.calls == [("forecast", Lookup("Oslo"))]
    # A rejected call was never prepared for execution.
    assert [r.tool_call_id for r in records_of(ran.log, ToolCallPrepared)] == ["first"]


# ---- ToolInvalidInput --------------------------------------------------------------------------


async def test_invalid_arguments_never_reach_the_handler(
    autojump_clock: trio.testing.MockClock,
) -> None:
    probe, tool = HandlerProbe(), forecast_tool()
    ran = await run_script(
        make_agent(tool),
        {tool: probe.forecast()},
        [Turn.tool_calls(("forecast", {"town": 1})), Turn.text("Sorry.")],
    )
    invalid = ran.outcome("call_0")
    assert isinstance(invalid, ToolInvalidInput)
    assert "$.city" in invalid.message
    assert "$.town" in invalid.message
    assert probe.calls == []
    assert records_of(ran.log, ToolCallPrepared) == []
    seen = results_by_id(ran.model.requests[1])["call_0"]
    assert seen.result == {"_tag": "ToolInvalidInput", "message": invalid.message}


async def test_an_unknown_tool_is_invalid_input(autojump_clock: trio.testing.MockClock) -> None:
    probe, tool = HandlerProbe(), forecast_tool()
    ran = await run_script(
        make_agent(tool),
        {tool: probe.forecast()},
        [Turn.tool_calls(("teleport", {"to": "Mars"})), Turn.text("Cannot.")],
    )
    invalid = ran.outcome("call_0")
    assert isinstance(invalid, ToolInvalidInput)
    assert "unknown tool 'teleport'" in invalid.message
    assert "forecast" in invalid.message  # the model learns what exists
    assert invalid.tool_name == "teleport"
    assert probe.calls == []


async def test_truncated_arguments_never_execute(autojump_clock: trio.testing.MockClock) -> None:
    """RUN-004: a call cut off by the length limit is invalid input and its handler never runs."""
    probe, tool = HandlerProbe(), forecast_tool()
    ran = await run_script(
        make_agent(tool),
        {tool: probe.forecast()},
        [
            Turn.tool_calls(
                ("forecast", {"city": "Oslo"}), ("forecast", {"city": "Rome"}), truncate_last=True
            ),
            Turn.text("Partial."),
        ],
    )
    assert isinstance(ran.outcome("call_0"), ToolSuccess)
    truncated = ran.outcome("call_1")
    assert isinstance(truncated, ToolInvalidInput)
    assert "cut off" in truncated.message
    assert probe.calls == [("forecast", Lookup("Oslo"))]
    assert [r.tool_call_id for r in records_of(ran.log, ToolCallPrepared)] == ["call_0"]
    (response,) = [r for r in records_of(ran.log, ModelResponseRecorded) if r.turn == 1]
    assert response.finish_reason == "length"


# ---- ToolFailure -------------------------------------------------------------------------------


async def test_declared_failure_in_return_mode_is_shown_to_the_model(
    autojump_clock: trio.testing.MockClock,
) -> None:
    probe, tool = HandlerProbe(), forecast_tool()
    ran = await run_script(
        make_agent(tool),
        {tool: probe.forecast()},
        [Turn.tool_calls(("forecast", {"city": "Atlantis"})), Turn.text("No such city.")],
    )
    assert isinstance(ran.terminal, RunCompleted)
    failure = ran.outcome("call_0")
    assert isinstance(failure, ToolFailure)
    envelope = {
        "_tag": "UnknownCity",
        "message": "UnknownCity(city='Atlantis')",
        "city": "Atlantis",
    }
    assert failure.error == envelope
    (failed,) = events_of(ran.events, ToolCallFailed)
    assert failed.outcome == failure
    seen = results_by_id(ran.model.requests[1])["call_0"]
    assert seen.result == envelope
    assert seen.is_failure


async def test_declared_failure_in_error_mode_fails_the_run(
    autojump_clock: trio.testing.MockClock,
) -> None:
    probe, tool = HandlerProbe(), forecast_tool(failure_mode="error")
    ran = await run_script(
        make_agent(tool),
        {tool: probe.forecast()},
        [Turn.tool_calls(("forecast", {"city": "Atlantis"})), Turn.text("never played")],
    )
    terminal = ran.terminal
    assert isinstance(terminal, RunFailed)
    assert isinstance(terminal.error, ToolFailedRun)
    assert terminal.error.tool_call_id == "call_0"
    assert terminal.error.tool_name == "forecast"
    assert terminal.error.error["_tag"] == "UnknownCity"
    assert len(ran.model.requests) == 1
    (record,) = records_of(ran.log, RunFailedRecord)
    assert record.error == terminal.error
    # The batch itself was still committed before the run ended.
    assert isinstance(ran.outcome("call_0"), ToolFailure)


async def test_undeclared_error_is_a_defect_not_a_failure(
    autojump_clock: trio.testing.MockClock,
) -> None:
    tool = forecast_tool(failure=None)

    async def handle(params: Lookup, call: ToolCallContext) -> Forecast:
        raise UnknownCity(params.city)

    ran = await run_script(
        make_agent(tool),
        {tool: handle},
        [Turn.tool_calls(("forecast", {"city": "Atlantis"})), Turn.text("Hm.")],
    )
    assert isinstance(ran.outcome("call_0"), ToolDefect)


# ---- ToolDefect --------------------------------------------------------------------------------


async def test_a_crashing_handler_is_a_defect(autojump_clock: trio.testing.MockClock) -> None:
    tool = forecast_tool()

    async def handle(params: Lookup, call: ToolCallContext) -> Forecast:
        raise RuntimeError("kaput")

    ran = await run_script(
        make_agent(tool),
        {tool: handle},
        [Turn.tool_calls(("forecast", {"city": "Oslo"})), Turn.text("It broke.")],
    )
    defect = ran.outcome("call_0")
    assert isinstance(defect, ToolDefect)
    assert "crashed" in defect.message
    assert "RuntimeError" in defect.message
    assert "kaput" in defect.message
    assert isinstance(ran.terminal, RunCompleted)  # a defect of a tool is not a defect of the run
    assert results_by_id(ran.model.requests[1])["call_0"].result["_tag"] == "ToolDefect"


async def test_an_output_schema_violation_is_a_defect(
    autojump_clock: trio.testing.MockClock,
) -> None:
    tool = forecast_tool()

    async def handle(params: Lookup, call: ToolCallContext) -> Any:
        return {"city": params.city, "high_c": 4.0}  # the encoding, not a Forecast

    ran = await run_script(
        make_agent(tool),
        {tool: handle},
        [Turn.tool_calls(("forecast", {"city": "Oslo"})), Turn.text("Hm.")],
    )
    defect = ran.outcome("call_0")
    assert isinstance(defect, ToolDefect)
    assert defect.message.startswith("result violates its schema")


async def test_a_tool_timeout_is_a_defect(autojump_clock: trio.testing.MockClock) -> None:
    probe, tool = HandlerProbe(), forecast_tool(timeout=5.0)

    async def slow(params: Lookup, call: ToolCallContext) -> Forecast:
        await trio.sleep(60)
        return Forecast(params.city, 1.0)

    start = trio.current_time()
    ran = await run_script(
        make_agent(tool),
        {tool: probe.wrap(slow)},
        [Turn.tool_calls(("forecast", {"city": "Oslo"})), Turn.text("Too slow.")],
    )
    defect = ran.outcome("call_0")
    assert isinstance(defect, ToolDefect)
    assert "timed out after 5.0 s" in defect.message
    assert probe.cancelled == 1
    assert probe.active == 0
    assert trio.current_time() - start == pytest.approx(5.0)


async def test_an_interrupted_call_settles_as_an_interrupted_defect(
    autojump_clock: trio.testing.MockClock,
) -> None:
    probe, fast, slow = HandlerProbe(), forecast_tool(), forecast_tool("slow_forecast")
    agent = make_agent(fast, slow)
    model = TrackingModel(
        [
            Turn.tool_calls(
                ("forecast", {"city": "Oslo"}), ("slow_forecast", {"city": "Rome"}, "call_slow")
            ),
        ]
    )
    layer = agent.toolkit.handlers({fast: probe.forecast(), slow: probe.hanging()}) + model.layer()
    async with open_runtime(layer, agents=[agent]) as runtime:
        async with runtime.stream(agent, "Weather?") as stream:
            events = []
            async for event in stream:
                events.append(event)
                if isinstance(event, ToolCallSucceeded):
                    stream.interrupt()
        log = await entries(runtime, stream.conversation_id)
    assert_well_formed(events)
    outcomes = {r.tool_call_id: r.outcome for r in records_of(log, ToolCallSettled)}
    assert isinstance(outcomes["call_0"], ToolSuccess)
    interrupted = outcomes["call_slow"]
    assert isinstance(interrupted, ToolDefect)
    assert "interrupted" in interrupted.message
    assert probe.active == 0


# ---- ToolUnknownOutcome ------------------------------------------------------------------------


def test_unknown_outcome_is_a_failure_the_model_can_read() -> None:
    outcome = ToolUnknownOutcome("call_9", "charge_card", "the process died mid-call")
    assert outcome.kind == "unknown"
    assert outcome.is_failure
    assert outcome.model_content() == {
        "_tag": "ToolUnknownOutcome",
        "message": "the process died mid-call",
    }


async def test_an_ephemeral_batch_settles_every_kind_but_unknown_in_declaration_order(
    autojump_clock: trio.testing.MockClock,
) -> None:
    probe = HandlerProbe()
    good, gated = forecast_tool(), forecast_tool("gated", needs_approval=True)
    crashy = forecast_tool("crashy")

    async def crash(params: Lookup, call: ToolCallContext) -> Forecast:
        await trio.sleep(1)
        raise ZeroDivisionError("oops")

    ran = await run_script(
        make_agent(good, gated, crashy),
        {good: probe.forecast(), gated: probe.forecast(), crashy: crash},
        [
            Turn.tool_calls(
                ("crashy", {"city": "Oslo"}),
                ("forecast", {"city": "Oslo"}),
                ("gated", {"city": "Oslo"}),
                ("forecast", {"city": 7}),
                ("forecast", {"city": "Atlantis"}),
            ),
            Turn.text("Mixed bag."),
        ],
        extra=ScriptedApproval.answering(False).layer(),
    )
    kinds = [r.outcome.kind for r in records_of(ran.log, ToolCallSettled)]
    assert kinds == ["defect", "success", "rejected", "invalid-input", "failure"]
    assert [r.tool_call_id for r in records_of(ran.log, ToolCallSettled)] == [
        f"call_{i}" for i in range(5)
    ]


# ---- RUN-005 -----------------------------------------------------------------------------------


async def test_next_request_sees_the_complete_batch_in_declaration_order(
    autojump_clock: trio.testing.MockClock,
) -> None:
    tool = forecast_tool()
    delays = {"Oslo": 3.0, "Rome": 1.0, "Lima": 2.0}

    async def handle(params: Lookup, call: ToolCallContext) -> Forecast:
        await trio.sleep(delays[params.city])
        return Forecast(params.city, delays[params.city])

    ran = await run_script(
        make_agent(tool),
        {tool: handle},
        [
            Turn.tool_calls(
                ("forecast", {"city": "Oslo"}, "a"),
                ("forecast", {"city": "Rome"}, "b"),
                ("forecast", {"city": "Lima"}, "c"),
                text="Let me check.",
            ),
            Turn.text("Done."),
        ],
    )
    # Completion order was b, c, a; the commit is a, b, c.
    completed = [e.tool_call_id for e in events_of(ran.events, ToolCallSucceeded)]
    assert completed == ["b", "c", "a"]
    messages = ran.model.requests[1].messages
    assistant, results = messages[-2], messages[-1]
    assert isinstance(assistant, AssistantMessage)
    assert assistant.content[0] == TextContent("Let me check.")
    calls = [p for p in assistant.content if isinstance(p, ToolCallContent)]
    assert [(c.id, c.arguments) for c in calls] == [
        ("a", {"city": "Oslo"}),
        ("b", {"city": "Rome"}),
        ("c", {"city": "Lima"}),
    ]
    assert isinstance(results, ToolMessage)
    assert [(r.id, shown(r).result["city"]) for r in results.content] == [
        ("a", "Oslo"),
        ("b", "Rome"),
        ("c", "Lima"),
    ]
    assert len(tool_messages(ran.model.requests[1])) == 1


async def test_an_interrupted_batch_is_still_committed_whole(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """After an interruption mid-batch, continuing the conversation shows the whole batch."""
    probe, fast, slow = HandlerProbe(), forecast_tool(), forecast_tool("slow_forecast")
    agent = make_agent(fast, slow)
    model = TrackingModel(
        [
            Turn.tool_calls(("forecast", {"city": "Oslo"}), ("slow_forecast", {"city": "Rome"})),
            Turn.text("Picking up again."),
        ]
    )
    layer = agent.toolkit.handlers({fast: probe.forecast(), slow: probe.hanging()}) + model.layer()
    async with open_runtime(layer, agents=[agent]) as runtime:
        with trio.move_on_after(10):
            await runtime.run(agent, "Weather?")
        (conversation,) = runtime.log.conversations()  # type: ignore[attr-defined]
        result = await runtime.run(agent, "Go on.", conversation_id=conversation)
    assert result.status == "completed"
    request = model.requests[1]
    (results,) = tool_messages(request)
    assert [r.id for r in results.content] == ["call_0", "call_1"]
    assert results.content[0].result == {"city": "Oslo", "high_c": 4.0}
    assert shown(results.content[1]).result["_tag"] == "ToolDefect"
    assert request.messages[-1] == UserMessage.text("Go on.")


def test_a_batch_that_never_settled_is_left_out_whole() -> None:
    """The projection of a log whose batch lacks a settlement shows none of that batch."""
    conv, run = "conv", "run"
    success = ToolSuccess("a", "forecast", {"city": "Oslo", "high_c": 4.0})
    records: list[Record] = [
        ConversationCreated(conversation_id=conv, agent="weather", at=0.0),
        UserInputRecorded(
            conversation_id=conv,
            run_id=run,
            input_id="in_1",
            kind="user",
            text="Weather?",
            author="user",
            at=0.0,
        ),
        ModelResponseRecorded(
            conversation_id=conv,
            run_id=run,
            turn=1,
            content=(
                ("text", "Checking."),
                ("tool-call", {"id": "a", "name": "forecast", "arguments": '{"city": "Oslo"}'}),
                ("tool-call", {"id": "b", "name": "forecast", "arguments": '{"city": "Rome"}'}),
            ),
            finish_reason="tool-calls",
            usage=UsageDelta(),
            at=0.0,
        ),
        ToolCallSettled(
            conversation_id=conv,
            run_id=run,
            turn=1,
            tool_call_id="a",
            tool_name="forecast",
            outcome=success,
            at=0.0,
        ),
    ]
    log = [LogEntry(i + 1, r) for i, r in enumerate(records)]
    messages = project_messages(log)
    assert messages == [
        UserMessage.text("Weather?"),
        AssistantMessage((TextContent("Checking."),)),
    ]
    settled = ToolCallSettled(
        conversation_id=conv,
        run_id=run,
        turn=1,
        tool_call_id="b",
        tool_name="forecast",
        outcome=ToolDefect("b", "forecast", "x"),
        at=0.0,
    )
    complete = project_messages([*log, LogEntry(len(log) + 1, settled)])
    assert isinstance(complete[-1], ToolMessage)
    assert [r.id for r in complete[-1].content] == ["a", "b"]


async def test_hostile_argument_text_is_invalid_input_not_a_crash(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Arguments nested far deeper than any parser allows are rejected as invalid input with a
    message; the run goes on (the preview, the log and the next prompt keep them as text)."""
    tool = forecast_tool()
    probe = HandlerProbe()
    deep = "[" * 100_000 + "]" * 100_000
    ran = await run_script(
        make_agent(tool),
        {tool: probe.forecast()},
        [Turn.tool_calls(("forecast", deep, "deep")), Turn.text("sorry")],
    )
    assert isinstance(ran.events[-1], RunCompleted)
    (failed,) = events_of(ran.events, ToolCallFailed)
    assert isinstance(failed.outcome, ToolInvalidInput)
    assert "deeper" in failed.outcome.message
    assert probe.calls == []


async def test_a_lone_surrogate_in_arguments_or_results_is_not_a_crash(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """JSON can carry a lone surrogate (``"\\ud800"``), which has no UTF-8 form: previews, bounds
    and results must still work — the call runs or is invalid input, and the run goes on."""
    tool = forecast_tool()
    probe = HandlerProbe()

    async def echo(params: Lookup, call: ToolCallContext) -> Forecast:
        return Forecast(params.city * 400, 1.0)  # big enough to be measured, not just walked

    ran = await run_script(
        make_agent(tool),
        {tool: probe.wrap(echo)},
        [
            Turn.tool_calls(
                ("forecast", '{"city": "\\ud800"}', "lone"),
                ("forecast", '{"city": "Oslo", "x": "\\udfff"}', "extra"),
            ),
            Turn.text("done"),
        ],
    )
    assert isinstance(ran.events[-1], RunCompleted)
    success = ran.outcome("lone")
    assert isinstance(success, ToolSuccess)
    assert success.result["city"] == "\ud800" * 400
    assert isinstance(ran.outcome("extra"), ToolInvalidInput)


# ---- errors from a handler's own child tasks -----------------------------------------------------


async def _run_nursery_handler(*raised: BaseException) -> Ran:
    """A forecast call whose handler runs one child task per exception in ``raised``; each child
    raises at its first step, before the nursery could cancel it."""
    tool = forecast_tool()

    async def handle(params: Lookup, call: ToolCallContext) -> Forecast:
        async def child(error: BaseException) -> None:
            raise error

        async with trio.open_nursery() as nursery:
            for error in raised:
                nursery.start_soon(child, error)
        return Forecast(params.city, 1.0)

    return await run_script(
        make_agent(tool),
        {tool: handle},
        [Turn.tool_calls(("forecast", {"city": "Oslo"})), Turn.text("Hm.")],
    )


async def test_a_declared_error_from_a_handlers_child_task_is_a_failure(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A handler's nursery wraps its child's declared error in a group: still a ToolFailure with
    the error's own envelope, as if the handler had raised it."""
    ran = await _run_nursery_handler(UnknownCity("Atlantis"))
    failure = ran.outcome("call_0")
    assert isinstance(failure, ToolFailure)
    assert failure.error == {
        "_tag": "UnknownCity",
        "message": str(UnknownCity("Atlantis")),
        "city": "Atlantis",
    }
    assert results_by_id(ran.model.requests[1])["call_0"].result == failure.error


async def test_several_declared_errors_from_child_tasks_are_one_failure_naming_each(
    autojump_clock: trio.testing.MockClock,
) -> None:
    ran = await _run_nursery_handler(UnknownCity("Atlantis"), UnknownCity("Lemuria"))
    failure = ran.outcome("call_0")
    assert isinstance(failure, ToolFailure)
    assert failure.error["_tag"] == "MultipleFailures"
    # Trio runs the two children in either order: the group holds both, in that order.
    assert sorted(f["city"] for f in failure.error["failures"]) == ["Atlantis", "Lemuria"]


async def test_a_mix_of_declared_and_undeclared_errors_is_a_defect_naming_them(
    autojump_clock: trio.testing.MockClock,
) -> None:
    ran = await _run_nursery_handler(UnknownCity("Atlantis"), ValueError("broken pipe"))
    defect = ran.outcome("call_0")
    assert isinstance(defect, ToolDefect)
    assert "ValueError: broken pipe" in defect.message
    assert "UnknownCity" in defect.message
    assert "ExceptionGroup" not in defect.message


async def test_a_handler_and_an_authorizer_know_who_started_the_run(
    autojump_clock: trio.testing.MockClock,
) -> None:
    seen: list[str] = []
    tool = forecast_tool()

    class ByAuthor:
        async def authorize(self, tool: Tool[Any, Any], params: Any, call: ToolCallContext) -> Any:
            seen.append(f"authorizer: {call.author}")
            return AuthorizationDecision(call.author == "ada", "only ada")

    async def handle(params: Lookup, call: ToolCallContext) -> Forecast:
        seen.append(f"handler: {call.author}")
        return Forecast(params.city, 4.0)

    agent = make_agent(tool)
    model = TrackingModel([Turn.tool_calls(("forecast", {"city": "Oslo"})), Turn.text("ok")] * 2)
    layer = (
        agent.toolkit.handlers({tool: handle})
        + model.layer()
        + Layer.succeed(ToolAuthorizationService, ByAuthor())
    )
    async with open_runtime(layer, agents=[agent]) as runtime:
        allowed = await runtime.run(agent, "Weather?", author="ada")
        refused = await runtime.run(agent, "Weather?", author="eve")
    assert seen == ["authorizer: ada", "handler: ada", "authorizer: eve"]
    assert [o.kind for o in allowed.outcomes] == ["success"]
    assert [o.kind for o in refused.outcomes] == ["rejected"]


async def test_a_handler_that_cannot_know_whether_its_call_took_effect_settles_unknown(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """``OutcomeUnknown`` from a handler is ``ToolUnknownOutcome`` (redacted reason), shown to the
    model as such — raised beside another error too: the call may have taken effect however it
    ended (it was a defect, which the model reads as "the tool crashed")."""
    from effectagent.ai import OutcomeUnknown

    tool = forecast_tool()

    async def lost(params: Any, call: ToolCallContext) -> Any:
        await trio.lowlevel.checkpoint()
        if params.city == "Oslo":
            raise OutcomeUnknown("the server went away after the request hunter2 was sent")
        raise ExceptionGroup("both", [OutcomeUnknown("lost"), ValueError("and broken")])

    ran = await run_script(
        make_agent(tool),
        {tool: lost},
        [
            Turn.tool_calls(("forecast", {"city": "Oslo"}), ("forecast", {"city": "Rome"})),
            Turn.text("Unsure."),
        ],
        secrets=["hunter2"],
    )
    unknown = ran.outcome("call_0")
    assert isinstance(unknown, ToolUnknownOutcome)
    assert "went away" in unknown.reason
    assert "hunter2" not in unknown.reason
    mixed = ran.outcome("call_1")
    assert isinstance(mixed, ToolUnknownOutcome)
    assert mixed.reason == "lost (it also raised ValueError: and broken)"
    seen = results_by_id(ran.model.requests[1])["call_0"]
    assert seen.is_failure
    assert seen.result["_tag"] == "ToolUnknownOutcome"
    with pytest.raises(TypeError, match="reason must be a str"):
        OutcomeUnknown(3)  # type: ignore[arg-type]
