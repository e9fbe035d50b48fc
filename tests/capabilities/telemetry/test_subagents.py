"""Telemetry of subagents (CAP-013 with CAP-011): a child run is its own ``invoke_agent`` span under
the tool call that started it — put there explicitly, whatever span is current in the handler —
marked as a subagent with its parent's run and call; the ``SubagentEvent`` wrappers add no span
of their own. The whole tree of a run with parallel tools, an approval and a subagent has the
right parents, carries no secret in any span, event or log line, and stays within its bounds."""

from __future__ import annotations

import logging
from collections.abc import Iterator, MutableMapping
from contextlib import contextmanager
from typing import Any

import attrs
import pytest
import structlog
import trio
import trio.testing
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from structlog.testing import capture_logs

from capabilities.approval import Answer, ScriptedApproval
from capabilities.subagents import delegate
from capabilities.telemetry import Telemetry
from capabilities.telemetry._listener import TELEMETRY_VERSION
from effectagent.ai import Tool, ToolCallContext, Toolkit
from effectagent.core import (
    Agent,
    ChildBudget,
    RunCompleted,
    RunStarted,
    SecretRedactor,
    SubagentCompleted,
    SubagentStarted,
    ToolCallDeclared,
    ToolCallStarted,
    ToolCallSucceeded,
    ToolSuccess,
    TurnStarted,
    UsageTotals,
)
from effectagent.engine import LOGGER_NAME, open_runtime, run_child
from effectagent.testing import ScriptedModel, Turn
from tests.capabilities.telemetry.spans import (
    CANARY,
    attributes,
    by_name,
    parent_id,
    span_id,
    texts,
)
from tests.engine.helpers import Forecast, Lookup, forecast_tool, make_agent


@attrs.frozen
class Question:
    topic: str


@attrs.frozen
class Query:
    q: str


SEARCH = Tool("search", "Search the notes.", parameters=Query, success=str, readonly=True)
RESEARCHER = Agent("researcher", "Research the topic you are given.", toolkit=Toolkit(SEARCH))


async def _unused(params: Query, call: ToolCallContext) -> str:
    raise AssertionError("not called")


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


def _one(spans: tuple[ReadableSpan, ...], name: str) -> ReadableSpan:
    (span,) = [span for span in spans if span.name == name]
    return span


@pytest.mark.parametrize("include_content", [False, True])
async def test_the_span_tree_of_a_run_with_parallel_tools_an_approval_and_a_subagent(
    autojump_clock: trio.testing.MockClock,
    exported: tuple[TracerProvider, InMemorySpanExporter],
    include_content: bool,
) -> None:
    provider, exporter = exported
    tracer = provider.get_tracer("test")

    async def forecast_handler(params: Lookup, call: ToolCallContext) -> Forecast:
        await trio.sleep(1 if params.city == "Oslo" else 0.5)  # the calls interleave
        structlog.get_logger(LOGGER_NAME).info("forecast", run_id=call.run_id)
        with tracer.start_as_current_span("http GET"):
            return Forecast(f"{params.city} {CANARY}", 4.0)

    async def search_handler(params: Query, call: ToolCallContext) -> str:
        structlog.get_logger(LOGGER_NAME).info("search", run_id=call.run_id)
        return f"notes about {params.q}"

    forecast = forecast_tool()
    gated = forecast_tool("gated", needs_approval=True)
    research = delegate(
        RESEARCHER,
        name="research",
        description="Research a topic.",
        parameters=Question,
        prompt=lambda p: f"Find out about {p.topic}.",
        budget=ChildBudget(turns=3, tool_calls=2),
    )
    agent = make_agent(forecast, gated, research.tool, SEARCH, name="lead")
    model = ScriptedModel(
        [
            Turn.tool_calls(
                ("forecast", {"city": "Oslo"}),
                ("forecast", {"city": "Rome"}),
                ("gated", {"city": "Lima"}),
                ("research", {"topic": f"cache {CANARY}"}),
            ),
            Turn.tool_calls(("search", {"q": f"cache {CANARY}"})),  # the child's turns
            Turn.text(f"The cache is cold, {CANARY}."),
            Turn.text(f"Cold cache; 4 °C. {CANARY}"),
        ]
    )
    telemetry = Telemetry(
        tracer_provider=provider,
        include_content=include_content,
        redactor=SecretRedactor([CANARY]),
        max_attribute_length=64,
        max_content_length=200,
    )
    layer = (
        Toolkit(forecast, gated, SEARCH).handlers(
            {forecast: forecast_handler, gated: forecast_handler, SEARCH: search_handler}
        )
        + research.layer()
        + model.as_layer()
        + ScriptedApproval([Answer.approve(delay=2)]).layer()
        + telemetry.layer()
    )
    with _logs(telemetry.log_processor) as logs:
        async with open_runtime(layer, agents=[agent], secrets=[CANARY]) as runtime:
            with tracer.start_as_current_span("request") as request:
                result = await runtime.run(agent, f"Why is it slow? {CANARY}")
    assert result.status == "completed"
    assert telemetry.open_runs == 0
    spans = exporter.get_finished_spans()

    # The tree: the parent run under the caller, its turns under it, the calls and the approval
    # under the first turn, the child run under its call, the child's own turns and calls.
    lead = _one(spans, "invoke_agent lead")
    assert parent_id(lead) == request.get_span_context().span_id
    lead_turns = [t for t in by_name(spans, "turn") if parent_id(t) == span_id(lead)]
    assert [attributes(t)["effectagent.turn"] for t in lead_turns] == [1, 2]
    first = lead_turns[0]
    calls = [s for s in by_name(spans, "execute_tool") if parent_id(s) == span_id(first)]
    assert sorted(s.name for s in calls) == [
        "execute_tool forecast",
        "execute_tool forecast",
        "execute_tool gated",
        "execute_tool research",
    ]
    assert parent_id(_one(spans, "approval gated")) == span_id(first)
    for call in calls:
        if call.name != "execute_tool research":
            (http,) = [s for s in by_name(spans, "http GET") if parent_id(s) == span_id(call)]
            assert http is not None
    delegation = _one(spans, "execute_tool research")
    child = _one(spans, "invoke_agent researcher")
    assert parent_id(child) == span_id(delegation)
    child_attributes = attributes(child)
    assert child_attributes["effectagent.subagent"] is True
    assert child_attributes["effectagent.parent.run.id"] == result.run_id
    assert child_attributes["effectagent.parent.tool_call.id"] == "call_3"
    assert child_attributes["effectagent.outcome.kind"] == "completed"
    call_attributes = attributes(delegation)
    assert call_attributes["effectagent.subagent.agent"] == "researcher"
    assert call_attributes["effectagent.subagent.run.id"] == child_attributes["effectagent.run.id"]
    assert call_attributes["effectagent.subagent.status"] == "completed"
    assert call_attributes["effectagent.subagent.turns"] == 2
    child_turns = [t for t in by_name(spans, "turn") if parent_id(t) == span_id(child)]
    assert len(child_turns) == 2
    search = _one(spans, "execute_tool search")  # once: no span from the SubagentEvent wrappers
    assert parent_id(search) == span_id(child_turns[0])
    assert attributes(search)["effectagent.run.id"] == child_attributes["effectagent.run.id"]
    chats = by_name(spans, "chat")
    assert sorted(parent_id(c) or 0 for c in chats) == sorted(
        span_id(t) for t in lead_turns + child_turns
    )
    assert (
        len(spans) == 1 + 2 + 4 + 4 + 5 + 1 + 3
    )  # request, runs, turns, chats, calls, approval, http
    (trace_id,) = {s.get_span_context().trace_id for s in spans}  # type: ignore[union-attr]

    # No secret anywhere: spans, their events, log lines.
    assert not [text for span in spans for text in texts(span) if CANARY in text]
    assert {line["event"] for line in logs} >= {"forecast", "search"}
    assert not [line for line in logs if CANARY in repr(line)]
    (search_line,) = [line for line in logs if line["event"] == "search"]
    assert search_line["span_id"] == format(span_id(search), "016x")  # the child's call's span
    assert all(line["trace_id"] == format(trace_id, "032x") for line in logs)

    # Bounded: names and attributes within the limits; content only when asked for.
    content = {
        "gen_ai.input.messages",
        "gen_ai.output.messages",
        "gen_ai.tool.call.arguments",
        "gen_ai.tool.call.result",
    }
    for span in spans:
        assert len(span.name) <= 64
        for name, value in attributes(span).items():
            if isinstance(value, str) and value != TELEMETRY_VERSION:
                assert len(value) <= (200 if name in content else 64), name
        assert include_content or not content & set(attributes(span))
    if include_content:
        assert "[REDACTED]" in attributes(delegation)["gen_ai.tool.call.arguments"]
        assert "[REDACTED]" in child_attributes["gen_ai.input.messages"]
    assert trace.get_current_span() is trace.INVALID_SPAN


async def test_a_child_run_is_under_its_call_even_when_the_handler_made_another_span_current(
    autojump_clock: trio.testing.MockClock,
    exported: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    provider, exporter = exported
    tracer = provider.get_tracer("test")
    ask = Tool("ask", "Ask the researcher.", parameters=Question, success=str)

    async def handle(params: Question, call: ToolCallContext) -> str:
        with tracer.start_as_current_span("prepare"):
            child = await run_child(call, RESEARCHER, params.topic, budget=ChildBudget())
        return child.text

    agent = make_agent(ask, SEARCH, name="lead")
    model = ScriptedModel(
        [Turn.tool_calls(("ask", {"topic": "cache"})), Turn.text("cold"), Turn.text("Cold.")]
    )
    layer = (
        agent.toolkit.handlers({ask: handle, SEARCH: _unused})
        + model.as_layer()
        + Telemetry(tracer_provider=provider).layer()
    )
    async with open_runtime(layer, agents=[agent]) as runtime:
        result = await runtime.run(agent, "Why?")
    assert result.status == "completed"
    spans = exporter.get_finished_spans()
    call = _one(spans, "execute_tool ask")
    prepare = _one(spans, "prepare")
    assert parent_id(prepare) == span_id(call)
    child = _one(spans, "invoke_agent researcher")
    assert parent_id(child) == span_id(call)  # not the handler's own span
    assert attributes(child)["effectagent.parent.tool_call.id"] == "call_0"


class _Events:
    """Numbered events of several runs, for the listener on its own."""

    def __init__(self) -> None:
        self.seq: dict[str, int] = {}

    def __call__(self, run: str, cls: Any, **fields: Any) -> Any:
        seq = self.seq[run] = self.seq.get(run, 0) + 1
        return cls(
            run_id=run,
            conversation_id=f"conv_{run}",
            agent=run,
            seq=seq,
            at=1_000.0 + seq,
            **fields,
        )


def test_a_child_announced_but_never_started_is_forgotten(
    exported: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    provider, exporter = exported
    telemetry = Telemetry(tracer_provider=provider)
    event = _Events()
    usage = UsageTotals()
    budget = ChildBudget()
    success = ToolSuccess("call_0", "ask", "x")
    for emitted in [
        event("lead", RunStarted, input="Why?"),
        event("lead", TurnStarted, turn=1, grace=False),
        event(
            "lead", ToolCallDeclared, turn=1, tool_call_id="call_0", tool_name="ask", arguments={}
        ),
        event("lead", ToolCallStarted, turn=1, tool_call_id="call_0", tool_name="ask"),
        event(
            "lead",
            SubagentStarted,
            turn=1,
            tool_call_id="call_0",
            tool_name="ask",
            child_run_id="kid",
            child_conversation_id="conv_kid",
            child_agent="kid",
            budget=budget,
        ),
        event(
            "lead",
            SubagentCompleted,
            turn=1,
            tool_call_id="call_0",
            child_run_id="kid",
            status="failed",
            usage=usage,
            turns=0,
            tool_calls=0,
        ),
        event(
            "lead",
            ToolCallSucceeded,
            turn=1,
            tool_call_id="call_0",
            tool_name="ask",
            outcome=success,
        ),
        event(
            "kid", RunStarted, input="late"
        ),  # a run of that ID now is not a subagent of the call
        event(
            "kid",
            RunCompleted,
            text="",
            output=None,
            finish_reason="stop",
            exhausted=None,
            usage=usage,
            turns=0,
            tool_calls=0,
        ),
        event(
            "lead",
            RunCompleted,
            text="",
            output=None,
            finish_reason="stop",
            exhausted=None,
            usage=usage,
            turns=1,
            tool_calls=1,
        ),
    ]:
        telemetry.on_event(emitted)
    assert telemetry.open_runs == 0
    spans = exporter.get_finished_spans()
    kid = _one(spans, "invoke_agent kid")
    assert parent_id(kid) is None
    assert "effectagent.subagent" not in attributes(kid)
    call = _one(spans, "execute_tool ask")
    assert attributes(call)["effectagent.subagent.status"] == "failed"
