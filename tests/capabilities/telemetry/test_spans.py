"""Telemetry (CAP-013): the span tree a run makes — under the caller's span, turns under the run,
model calls, tools and approvals under their turn, what a handler traces under its tool — every
span ended on every exit, nothing secret or unbounded in any of it."""

from __future__ import annotations

import logging
from collections.abc import Iterator, MutableMapping
from contextlib import contextmanager
from typing import Any

import pytest
import structlog
import trio
import trio.testing
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode
from structlog.testing import capture_logs

from capabilities.approval import Answer, ScriptedApproval
from capabilities.telemetry import Telemetry, add_trace_ids
from capabilities.telemetry._listener import TELEMETRY_VERSION
from effectagent.ai import ModelUnavailable, ToolCallContext
from effectagent.core import (
    ApprovalRequest,
    ApprovalRequested,
    BudgetWarning,
    CompactionPerformed,
    ModelStarted,
    RunInterrupted,
    RunStarted,
    RunSuspended,
    ToolCallDeclared,
    ToolCallFailed,
    ToolRejected,
    TurnCompleted,
    TurnStarted,
    UsageDelta,
    UsageTotals,
)
from effectagent.engine import LOGGER_NAME, open_runtime
from effectagent.testing import ScriptedModel, Turn
from tests.capabilities.telemetry.spans import CANARY, by_name, parent_id, span_id, texts
from tests.engine.helpers import Forecast, Lookup, forecast_tool, make_agent, make_policy


async def test_the_span_tree_of_a_run_with_parallel_tools_and_an_approval(
    autojump_clock: trio.testing.MockClock,
    exported: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    provider, exporter = exported
    tracer = provider.get_tracer("test")
    inside: dict[str, int] = {}

    async def handle(params: Lookup, call: ToolCallContext) -> Forecast:
        await trio.sleep(1 if params.city == "Oslo" else 0.5)  # the calls interleave
        with tracer.start_as_current_span("http GET") as span:
            inside[call.tool_call_id] = span.get_span_context().span_id
        return Forecast(params.city, 4.0)

    forecast = forecast_tool()
    gated = forecast_tool("gated", needs_approval=True)
    agent = make_agent(forecast, gated)
    model = ScriptedModel(
        [
            Turn.tool_calls(
                ("forecast", {"city": "Oslo"}),
                ("forecast", {"city": "Rome"}),
                ("gated", {"city": "Oslo"}),
            ),
            Turn.text("done"),
        ]
    )
    approval = ScriptedApproval([Answer.approve(delay=2)])
    telemetry = Telemetry(tracer_provider=provider, request_model="scripted-1")
    layer = (
        agent.toolkit.handlers({forecast: handle, gated: handle})
        + model.as_layer()
        + approval.layer()
        + telemetry.layer()
    )
    async with open_runtime(layer, agents=[agent]) as runtime:
        with tracer.start_as_current_span("caller") as caller:
            result = await runtime.run(agent, "Weather?")
    assert result.status == "completed"
    assert telemetry.open_runs == 0
    spans = exporter.get_finished_spans()
    (run,) = by_name(spans, "invoke_agent")
    assert parent_id(run) == caller.get_span_context().span_id  # under the caller's span
    assert run.name == "invoke_agent weather"
    attributes = dict(run.attributes or {})
    assert attributes["gen_ai.operation.name"] == "invoke_agent"
    assert attributes["gen_ai.agent.name"] == "weather"
    assert attributes["gen_ai.conversation.id"] == result.conversation_id
    assert attributes["effectagent.run.id"] == result.run_id
    assert attributes["effectagent.operation.version"] == TELEMETRY_VERSION
    assert attributes["effectagent.outcome.kind"] == "completed"
    assert attributes["gen_ai.usage.output_tokens"] == result.usage.output_tokens
    turns = by_name(spans, "turn")
    assert [dict(t.attributes or {})["effectagent.turn"] for t in turns] == [1, 2]
    assert all(parent_id(turn) == span_id(run) for turn in turns)
    chats = by_name(spans, "chat")
    assert [parent_id(chat) for chat in chats] == [span_id(turn) for turn in turns]
    assert all(dict(c.attributes or {})["gen_ai.request.model"] == "scripted-1" for c in chats)
    outputs = [dict(c.attributes or {})["gen_ai.usage.output_tokens"] for c in chats]
    assert outputs == [30, result.usage.output_tokens - 30]  # each call's own usage
    tools = by_name(spans, "execute_tool")
    assert sorted(t.name for t in tools) == [
        "execute_tool forecast",
        "execute_tool forecast",
        "execute_tool gated",
    ]
    assert all(parent_id(tool) == span_id(turns[0]) for tool in tools)
    for tool in tools:
        tool_attributes = dict(tool.attributes or {})
        assert tool_attributes["gen_ai.operation.name"] == "execute_tool"
        assert tool_attributes["effectagent.outcome.kind"] == "success"
        assert tool.status.status_code is StatusCode.UNSET
    (approval_span,) = by_name(spans, "approval")
    assert parent_id(approval_span) == span_id(turns[0])
    assert dict(approval_span.attributes or {})["effectagent.approval.decision"] == "approved"
    # What each handler traced nests under its own tool span.
    by_call = {dict(t.attributes or {})["gen_ai.tool.call.id"]: t for t in tools}
    handler_spans = {span_id(s): s for s in by_name(spans, "http GET")}
    assert len(handler_spans) == 3
    for call_id, inner_id in inside.items():
        assert parent_id(handler_spans[inner_id]) == span_id(by_call[call_id])
    assert trace.get_current_span() is trace.INVALID_SPAN  # nothing left attached


async def test_a_streamed_run_nests_under_the_callers_span_too(
    autojump_clock: trio.testing.MockClock,
    exported: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    provider, exporter = exported
    agent = make_agent()
    telemetry = Telemetry(tracer_provider=provider)
    layer = ScriptedModel([Turn.text("hi")]).as_layer() + telemetry.layer()
    async with open_runtime(layer, agents=[agent]) as runtime:
        with provider.get_tracer("test").start_as_current_span("caller") as caller:
            async with runtime.stream(agent, "Hello") as stream:
                async for _ in stream:
                    pass
    (run,) = by_name(exporter.get_finished_spans(), "invoke_agent")
    assert parent_id(run) == caller.get_span_context().span_id


async def test_an_interrupted_run_ends_every_span_with_an_error(
    autojump_clock: trio.testing.MockClock,
    exported: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    provider, exporter = exported

    async def hang(params: Lookup, call: ToolCallContext) -> Forecast:
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    forecast = forecast_tool()
    gated = forecast_tool("gated", needs_approval=True)
    agent = make_agent(forecast, gated)
    model = ScriptedModel(
        [Turn.tool_calls(("forecast", {"city": "Oslo"}), ("gated", {"city": "Rome"}))]
    )
    telemetry = Telemetry(tracer_provider=provider)
    layer = (
        agent.toolkit.handlers({forecast: hang, gated: hang})
        + model.as_layer()
        + ScriptedApproval([Answer.hang()]).layer()
        + telemetry.layer()
    )
    async with open_runtime(layer, agents=[agent]) as runtime:
        with trio.move_on_after(5):
            await runtime.run(agent, "Weather?")
    assert telemetry.open_runs == 0
    spans = exporter.get_finished_spans()
    names = sorted(span.name for span in spans)
    assert names == [
        "approval gated",
        "chat",
        "execute_tool forecast",
        "execute_tool gated",  # it never ran: its span covers its wait from the declaration
        "invoke_agent weather",
        "turn",
    ]
    assert all(span.end_time is not None for span in spans)
    categories = {
        span.name: dict(span.attributes or {}).get("effectagent.failure.category")
        for span in spans
        if span.name != "chat"  # the model had answered: its call succeeded
    }
    assert all(span.status.status_code is StatusCode.ERROR for span in spans if span.name != "chat")
    assert categories == {
        "approval gated": "defect",  # the engine settled both calls as interrupted defects
        "execute_tool forecast": "defect",
        "execute_tool gated": "defect",
        "invoke_agent weather": "interrupted",
        "turn": "interrupted",
    }
    (run,) = by_name(spans, "invoke_agent")
    assert dict(run.attributes or {})["effectagent.outcome.kind"] == "interrupted"


async def test_an_interrupted_model_call_ends_with_the_run(
    autojump_clock: trio.testing.MockClock,
    exported: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    provider, exporter = exported
    agent = make_agent()
    telemetry = Telemetry(tracer_provider=provider)
    layer = ScriptedModel([Turn.hanging()]).as_layer() + telemetry.layer()
    async with open_runtime(layer, agents=[agent]) as runtime:
        with trio.move_on_after(5):
            await runtime.run(agent, "Hello")
    assert telemetry.open_runs == 0
    spans = exporter.get_finished_spans()
    assert sorted(span.name for span in spans) == ["chat", "invoke_agent weather", "turn"]
    for span in spans:
        assert span.end_time is not None
        assert span.status.status_code is StatusCode.ERROR
        assert dict(span.attributes or {})["effectagent.failure.category"] == "interrupted"


async def test_a_failed_model_call_fails_its_span_and_the_run(
    autojump_clock: trio.testing.MockClock,
    exported: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    provider, exporter = exported
    agent = make_agent()
    down = ModelUnavailable("the provider is down")
    model = ScriptedModel([Turn.fail(down), Turn.fail(down), Turn.fail(down), Turn.fail(down)])
    telemetry = Telemetry(tracer_provider=provider)
    async with open_runtime(model.as_layer() + telemetry.layer(), agents=[agent]) as runtime:
        result = await runtime.run(agent, "Hello")
    assert result.status == "failed"
    spans = exporter.get_finished_spans()
    chats = by_name(spans, "chat")
    assert len(chats) >= 2  # one span per attempt
    assert [dict(c.attributes or {})["effectagent.model.retries"] for c in chats] == list(
        range(len(chats))
    )
    assert all(c.status.status_code is StatusCode.ERROR for c in chats)
    (run,) = by_name(spans, "invoke_agent")
    assert run.status.status_code is StatusCode.ERROR
    assert dict(run.attributes or {})["effectagent.failure.category"] == "ModelFailed"
    (turn,) = by_name(spans, "turn")
    assert turn.end_time is not None
    assert turn.status.status_code is StatusCode.ERROR


@contextmanager
def _logs(processor: Any) -> Iterator[list[MutableMapping[str, Any]]]:
    logger = logging.getLogger(LOGGER_NAME)
    before = logger.level
    logger.setLevel(logging.DEBUG)
    try:
        with capture_logs(processors=[processor]) as logs:
            yield logs
    finally:
        logger.setLevel(before)
        structlog.reset_defaults()


@pytest.mark.parametrize("include_content", [False, True])
async def test_a_secret_reaches_no_span_event_or_log_line(
    autojump_clock: trio.testing.MockClock,
    exported: tuple[TracerProvider, InMemorySpanExporter],
    include_content: bool,
) -> None:
    provider, exporter = exported

    async def handle(params: Lookup, call: ToolCallContext) -> Forecast:
        await call.progress({"looking up": params.city})
        structlog.get_logger(LOGGER_NAME).info("handler", run_id=call.run_id)
        return Forecast(f"{params.city} {CANARY}", 4.0)

    forecast = forecast_tool()
    agent = make_agent(forecast)
    model = ScriptedModel(
        [
            Turn.tool_calls(("forecast", {"city": f"Oslo {CANARY}"})),
            Turn.text(f"It is 4 °C, {CANARY}"),
        ]
    )
    telemetry = Telemetry(tracer_provider=provider, include_content=include_content)
    layer = agent.toolkit.handlers({forecast: handle}) + model.as_layer() + telemetry.layer()
    with _logs(telemetry.log_processor) as logs:
        async with open_runtime(layer, agents=[agent], secrets=[CANARY]) as runtime:
            result = await runtime.run(agent, f"Weather in Oslo? my password is {CANARY}")
    assert result.status == "completed"
    spans = exporter.get_finished_spans()
    carried = [text for span in spans for text in texts(span)]
    assert not [text for text in carried if CANARY in text]
    assert logs
    assert not [line for line in logs if CANARY in repr(line)]
    assert all("trace_id" in line and "span_id" in line for line in logs)
    (tool,) = by_name(spans, "execute_tool")
    (handler_line,) = [line for line in logs if line["event"] == "handler"]
    assert handler_line["span_id"] == format(span_id(tool), "016x")  # a handler's line: its call
    (run,) = by_name(spans, "invoke_agent")
    run_trace = run.get_span_context().trace_id  # type: ignore[union-attr]
    assert all(line["trace_id"] == format(run_trace, "032x") for line in logs)
    attributes = dict(tool.attributes or {})
    run_attributes = dict(run.attributes or {})
    if include_content:
        assert "[REDACTED]" in str(attributes["gen_ai.tool.call.arguments"])
        assert "[REDACTED]" in str(attributes["gen_ai.tool.call.result"])
        assert "[REDACTED]" in str(run_attributes["gen_ai.input.messages"])
        assert "It is 4 °C" in str(run_attributes["gen_ai.output.messages"])
        (_, final_chat) = by_name(spans, "chat")
        assert "It is 4 °C" in str(dict(final_chat.attributes or {})["gen_ai.output.messages"])
    else:
        content = ("gen_ai.tool.call.arguments", "gen_ai.tool.call.result")
        assert not [name for name in content if name in attributes]
        assert "gen_ai.input.messages" not in run_attributes
        assert "gen_ai.output.messages" not in run_attributes
        assert not [t for t in carried if "Oslo" in t or "4 °C" in t]  # no model or tool text


async def test_attributes_and_events_are_bounded(
    autojump_clock: trio.testing.MockClock,
    exported: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    provider, exporter = exported

    async def handle(params: Lookup, call: ToolCallContext) -> Forecast:
        for step in range(50):
            await call.progress({"step": step, "note": "x" * 500})
        return Forecast(params.city * 100, 4.0)

    forecast = forecast_tool()
    agent = make_agent(forecast, name="a" * 60)
    model = ScriptedModel(
        [Turn.tool_calls(("forecast", {"city": "Oslo" * 300})), Turn.text("y" * 5000)]
    )
    telemetry = Telemetry(
        tracer_provider=provider,
        include_content=True,
        max_attribute_length=24,
        max_content_length=100,
        max_span_events=5,
    )
    layer = agent.toolkit.handlers({forecast: handle}) + model.as_layer() + telemetry.layer()
    async with open_runtime(layer, agents=[agent]) as runtime:
        result = await runtime.run(agent, "z" * 5000)
    assert result.status == "completed"
    spans = exporter.get_finished_spans()
    content_names = {
        "gen_ai.input.messages",
        "gen_ai.output.messages",
        "gen_ai.tool.call.arguments",
        "gen_ai.tool.call.result",
        "effectagent.tool.progress",
    }
    for span in spans:
        assert len(span.name) <= 24
        assert len(span.events) <= 5
        assert len(span.attributes or {}) <= 32
        items = list((span.attributes or {}).items())
        items += [i for event in span.events for i in (event.attributes or {}).items()]
        for name, value in items:
            if isinstance(value, str) and value != TELEMETRY_VERSION:
                assert len(value) <= (100 if name in content_names else 24), name
    (tool,) = by_name(spans, "execute_tool")
    assert len(tool.events) == 5  # fifty progress reports, five events


async def _forecast(params: Lookup, call: ToolCallContext) -> Forecast:
    return Forecast(params.city, 4.0)


@pytest.mark.parametrize("exhausted", [False, True])
async def test_every_turn_of_a_completed_run_has_its_finish_reasons(
    autojump_clock: trio.testing.MockClock,
    exported: tuple[TracerProvider, InMemorySpanExporter],
    exhausted: bool,
) -> None:
    # Every turn ends at its TurnCompleted with its response's finish reason, the final one too.
    provider, exporter = exported
    forecast = forecast_tool()
    agent = make_agent(forecast, policy=make_policy(max_turns=2 if exhausted else 8))
    model = ScriptedModel(
        [
            Turn.tool_calls(("forecast", {"city": "Oslo"})),
            Turn.tool_calls(("forecast", {"city": "Rome"})),
            Turn.text("done"),
        ]
        if exhausted
        else [Turn.tool_calls(("forecast", {"city": "Oslo"})), Turn.text("done")]
    )
    layer = agent.toolkit.handlers({forecast: _forecast}) + model.as_layer()
    telemetry = Telemetry(tracer_provider=provider)
    async with open_runtime(layer + telemetry.layer(), agents=[agent]) as runtime:
        result = await runtime.run(agent, "Weather?")
    assert result.status == "completed"
    turns: dict[int, Any] = {
        int(str((span.attributes or {})["effectagent.turn"])): span.attributes or {}
        for span in by_name(exporter.get_finished_spans(), "turn")
    }
    reasons = [turns[n].get("gen_ai.response.finish_reasons") for n in sorted(turns)]
    assert len(reasons) == (3 if exhausted else 2)
    # The answer's turn stopped (the grace turn too, whose own TurnCompleted says so).
    assert reasons == [("tool-calls",)] * (len(reasons) - 1) + [("stop",)]


def test_bad_options_are_refused_with_a_clear_message() -> None:
    with pytest.raises(ValueError, match="max_attribute_length must be a positive int"):
        Telemetry(max_attribute_length=0)
    with pytest.raises(TypeError, match="include_content must be a bool"):
        Telemetry(include_content="yes")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="tracer_provider must be an OpenTelemetry TracerProvider"):
        Telemetry(tracer_provider=object())  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("request_model", "error"), [("", ValueError), ("  ", ValueError), (5, TypeError)]
)
def test_a_request_model_that_names_no_model_is_refused(
    request_model: object, error: type[Exception]
) -> None:
    # Else every chat span would be named "chat " and carry gen_ai.request.model = "" (or fail
    # at the first chat span, inside the run, with a TypeError).
    with pytest.raises(error, match="request_model must be a model's name"):
        Telemetry(request_model=request_model)  # type: ignore[arg-type]
    assert Telemetry(request_model="gpt-4.1").request_model == "gpt-4.1"


def test_add_trace_ids_takes_the_current_span(
    exported: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    provider, _ = exported
    assert add_trace_ids(None, "info", {"event": "x"}) == {"event": "x"}  # no span: nothing
    with provider.get_tracer("test").start_as_current_span("work") as span:
        line = add_trace_ids(None, "info", {"event": "x"})
        kept = add_trace_ids(None, "info", {"event": "x", "trace_id": "mine"})
    context = span.get_span_context()
    assert line["trace_id"] == format(context.trace_id, "032x")
    assert line["span_id"] == format(context.span_id, "016x")
    assert kept["trace_id"] == "mine"
    assert "span_id" not in kept


class _Events:
    """Events of one run, numbered as the engine numbers them (for the listener on its own)."""

    def __init__(self) -> None:
        self.seq = 0

    def __call__(self, cls: Any, **fields: Any) -> Any:
        self.seq += 1
        return cls(
            run_id="run_1",
            conversation_id="conv_1",
            agent="weather",
            seq=self.seq,
            at=1_000.0 + self.seq,
            **fields,
        )


def _summarized(event: _Events, **fields: Any) -> Any:
    """A summarizing compaction before turn 1 (``fields``: its model and usage, say)."""
    return event(
        CompactionPerformed,
        turn=1,
        kind="summarize",
        covers_through=40,
        tokens_before=9_000,
        tokens_after=1_200,
        started_at=1_001.5,
        **fields,
    )


def test_a_summary_call_has_a_chat_span_and_the_next_turns_chat_only_its_own_usage(
    exported: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    provider, exporter = exported
    telemetry = Telemetry(tracer_provider=provider)
    event = _Events()
    summaries = (UsageDelta(1_500, 40), UsageDelta(900, 25))
    turn_call = UsageDelta(700, 30)
    total = UsageTotals()
    for delta in (*summaries, turn_call):
        total = total.add(delta)
    for emitted in [
        event(RunStarted, input="Weather?"),
        _summarized(event, model="anthropic:claude-haiku-4-5", usage=summaries),
        event(TurnStarted, turn=1, grace=False),
        event(ModelStarted, turn=1),
        event(TurnCompleted, turn=1, finish_reason="stop", usage=total),
        event(RunInterrupted, reason="done here", usage=total),
    ]:
        telemetry.on_event(emitted)
    finished = exporter.get_finished_spans()
    (compaction,) = [s for s in finished if s.name == "compaction summarize"]
    inside = [
        s
        for s in finished
        if s.parent is not None
        and s.parent.span_id == (compaction.context.span_id if compaction.context else None)
    ]
    assert [s.name for s in inside] == ["chat anthropic:claude-haiku-4-5"] * 2
    assert [dict(s.attributes or {})["gen_ai.usage.input_tokens"] for s in inside] == [1_500, 900]
    assert [dict(s.attributes or {})["gen_ai.usage.output_tokens"] for s in inside] == [40, 25]
    (turn_chat,) = [s for s in finished if s.name == "chat"]
    attributes = dict(turn_chat.attributes or {})
    assert (attributes["gen_ai.usage.input_tokens"], attributes["gen_ai.usage.output_tokens"]) == (
        700,
        30,
    )


def test_compactions_budget_warnings_denials_and_suspension(
    exported: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    provider, exporter = exported
    telemetry = Telemetry(tracer_provider=provider)
    event = _Events()
    usage = UsageTotals()
    request = ApprovalRequest(
        "run_1", "conv_1", "weather", "gated", "call_0", "Look up", ("Oslo",), "high", {}, 2e9
    )
    denied = ToolRejected("call_0", "gated", "denied by the operator")
    for emitted in [
        event(RunStarted, input="Weather?"),
        _summarized(event),  # before its turn
        event(TurnStarted, turn=1, grace=False),
        event(
            CompactionPerformed,
            turn=1,
            kind="clear-tool-results",
            covers_through=44,
            tokens_before=3_000,
            tokens_after=900,
        ),  # forced, in it
        event(ModelStarted, turn=1),
        event(
            ToolCallDeclared,
            turn=1,
            tool_call_id="call_0",
            tool_name="gated",
            arguments={"city": "Oslo"},
        ),
        event(ApprovalRequested, turn=1, tool_call_id="call_0", tool_name="gated", request=request),
        event(ToolCallFailed, turn=1, tool_call_id="call_0", tool_name="gated", outcome=denied),
        event(TurnCompleted, turn=1, finish_reason="tool-calls", usage=usage),
        event(BudgetWarning, dimension="turns", used=8.0, limit=10.0),
        event(TurnStarted, turn=2, grace=False),
        event(RunSuspended, reason="waits for approval"),
    ]:
        telemetry.on_event(emitted)
    assert telemetry.open_runs == 0
    spans = {span.name: span for span in exporter.get_finished_spans()}
    assert sorted(spans) == [
        "approval gated",
        "chat",
        "compaction clear-tool-results",
        "compaction summarize",
        "execute_tool gated",
        "invoke_agent weather",
        "turn",
    ]
    run = spans["invoke_agent weather"]
    assert [e.name for e in run.events] == ["effectagent.budget.warning"]
    assert dict(run.attributes or {})["effectagent.outcome.kind"] == "suspended"
    assert run.status.status_code is StatusCode.UNSET  # suspended is not a failure
    turns = [s for s in exporter.get_finished_spans() if s.name == "turn"]
    summary = spans["compaction summarize"]  # before its turn began: under the run
    assert parent_id(summary) == span_id(run)
    assert (summary.start_time, summary.end_time) == (int(1_001.5e9), int(1_002e9))
    assert dict(summary.attributes or {})["gen_ai.operation.name"] == "compaction"
    assert dict(summary.attributes or {})["effectagent.compaction.tokens_after"] == 1_200
    forced = spans["compaction clear-tool-results"]  # in its turn, no start given: an instant
    assert parent_id(forced) == span_id(turns[0])
    assert forced.start_time == forced.end_time == int(1_004e9)
    approval = spans["approval gated"]
    assert dict(approval.attributes or {})["effectagent.approval.decision"] == "rejected"
    assert approval.status.status_code is StatusCode.UNSET  # a denial is an answer
    tool = spans["execute_tool gated"]
    assert tool.start_time == int((1_000.0 + 6) * 1e9)  # it never ran: from its declaration
    assert tool.status.status_code is StatusCode.ERROR
    assert tool.status.description == "rejected"  # the reason is content: off by default
    assert dict(tool.attributes or {})["effectagent.outcome.kind"] == "rejected"
    assert spans["chat"].end_time == int((1_000.0 + 6) * 1e9)  # its response was complete there


def test_events_of_a_run_it_never_saw_start_are_ignored(
    exported: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    provider, exporter = exported
    telemetry = Telemetry(tracer_provider=provider)
    event = _Events()
    telemetry.on_event(event(TurnStarted, turn=1, grace=False))
    telemetry.on_event(event(RunInterrupted, reason="interrupted", usage=UsageTotals()))
    with telemetry.call_context("run_1", "call_0") as entered:
        assert entered is None
    assert exporter.get_finished_spans() == ()


async def test_a_provider_that_records_nothing_adds_no_ids_to_log_lines(
    autojump_clock: trio.testing.MockClock,
) -> None:
    telemetry = Telemetry(tracer_provider=trace.NoOpTracerProvider())
    agent = make_agent()
    layer = ScriptedModel([Turn.text("hi")]).as_layer() + telemetry.layer()
    with _logs(telemetry.log_processor) as logs:
        async with open_runtime(layer, agents=[agent]) as runtime:
            result = await runtime.run(agent, "Hello")
    assert result.status == "completed"
    assert logs
    assert not [line for line in logs if "trace_id" in line or "span_id" in line]
    assert telemetry.open_runs == 0


class _FailingTracer(trace.Tracer):
    """The SDK's tracer, except that a tool span cannot be started (an exporter bug, say)."""

    def __init__(self, inner: trace.Tracer) -> None:
        self.inner = inner

    def start_span(self, name: str, *args: Any, **kwargs: Any) -> trace.Span:
        if name.startswith("execute_tool"):
            raise RuntimeError("the tracer is broken")
        return self.inner.start_span(name, *args, **kwargs)

    def start_as_current_span(self, *args: Any, **kwargs: Any) -> Any:
        return self.inner.start_as_current_span(*args, **kwargs)


class _FailingProvider(trace.TracerProvider):
    def __init__(self, inner: TracerProvider) -> None:
        self.inner = inner

    def get_tracer(self, *args: Any, **kwargs: Any) -> trace.Tracer:
        return _FailingTracer(self.inner.get_tracer(*args, **kwargs))


async def test_a_failing_tracer_ends_the_runs_spans_and_changes_nothing_else(
    autojump_clock: trio.testing.MockClock,
    exported: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    provider, exporter = exported

    async def handle(params: Lookup, call: ToolCallContext) -> Forecast:
        return Forecast(params.city, 4.0)

    forecast = forecast_tool()
    agent = make_agent(forecast)
    model = ScriptedModel([Turn.tool_calls(("forecast", {"city": "Oslo"})), Turn.text("4 °C")])
    telemetry = Telemetry(tracer_provider=_FailingProvider(provider))
    layer = agent.toolkit.handlers({forecast: handle}) + model.as_layer() + telemetry.layer()
    with _logs(add_trace_ids) as logs:
        async with open_runtime(layer, agents=[agent]) as runtime:
            result = await runtime.run(agent, "Weather?")
    assert (result.status, result.text) == ("completed", "4 °C")
    assert telemetry.open_runs == 0  # nothing of the run is kept
    assert [line["error"] for line in logs if line["event"] == "run listener failed"] == [
        "RuntimeError"
    ]
    spans = exporter.get_finished_spans()
    assert sorted(span.name for span in spans) == ["chat", "invoke_agent weather", "turn"]
    assert all(span.status.status_code is StatusCode.ERROR for span in spans)
