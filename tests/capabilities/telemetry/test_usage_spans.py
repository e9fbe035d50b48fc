"""Usage on ``chat`` spans is each call's own: a subagent's usage, which the parent's totals take
in when the child ends, stays on the child's spans; a run resumed from its records does not put
what its earlier execution used on its first call. The run span carries ``RunResult.usage``
(cache reads and writes included) and the chat spans of a run add up to it. A model call is a
``client`` span, as the GenAI conventions have it; an approval the run suspended for says so."""

from __future__ import annotations

from typing import Any

import attrs
import trio
import trio.testing
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from capabilities.approval import SuspendingApproval
from capabilities.subagents import delegate
from capabilities.telemetry import Telemetry
from effectagent import Agent, AgentPolicy, Toolkit, open_runtime, tool
from effectagent.ai import Usage
from effectagent.core import UsageTotals, approval_decided
from effectagent.engine import pending_approvals
from effectagent.testing import ScriptedModel, Turn
from tests.capabilities.telemetry.spans import attributes, by_name, span_id

_USAGE = (
    ("gen_ai.usage.input_tokens", "input_tokens"),
    ("gen_ai.usage.output_tokens", "output_tokens"),
    ("gen_ai.usage.cache_read.input_tokens", "cache_read_input_tokens"),
    ("gen_ai.usage.cache_creation.input_tokens", "cache_write_input_tokens"),
)


def _usage(span: ReadableSpan) -> dict[str, int]:
    found = attributes(span)
    return {name: found[name] for name, _ in _USAGE}


def _totals(usage: UsageTotals) -> dict[str, int]:
    return {name: getattr(usage, field) for name, field in _USAGE}


@tool(readonly=True)
async def forecast(city: str) -> float:
    """Today's high in °C.

    Args:
        city: The city.
    """
    return 4.0


@tool(needs_approval=True)
async def refund(number: int) -> str:
    """Refund an invoice.

    Args:
        number: The invoice's number.
    """
    return f"refunded {number}"


@attrs.frozen
class Question:
    city: str


async def test_a_subagents_usage_is_on_its_own_chat_spans_not_its_parents(
    autojump_clock: trio.testing.MockClock,
    exported: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    provider, exporter = exported
    researcher = Agent("researcher", "Look the city up.", toolkit=Toolkit(forecast))
    ask = delegate(
        researcher,
        name="ask",
        description="Ask the researcher.",
        parameters=Question,
        prompt=lambda question: f"How warm is {question.city}?",
    )
    lead = Agent("lead", "Answer.", toolkit=Toolkit(forecast, ask.tool))
    model = ScriptedModel.layer(
        [
            Turn.tool_calls(("ask", {"city": "Lima"}), usage=Usage.of(100, 10, cache_read=40)),
            Turn.text("4 °C.", usage=Usage.of(5_000, 500, cache_read=4_000, cache_write=600)),
            Turn.text("Lima: 4 °C.", usage=Usage.of(200, 20, cache_write=70)),
        ]
    )
    layer = (
        Toolkit(forecast).handlers()
        + ask.layer()
        + model
        + Telemetry(tracer_provider=provider).layer()
    )
    async with open_runtime(layer, agents=[lead]) as runtime:
        result = await runtime.run(lead, "How warm is Lima?")
    assert result.status == "completed", result.error
    spans = exporter.get_finished_spans()
    (run,) = by_name(spans, "invoke_agent lead")
    lead_id = attributes(run)["effectagent.run.id"]
    chats = [
        _usage(c) for c in by_name(spans, "chat") if attributes(c)["effectagent.run.id"] == lead_id
    ]
    assert chats == [
        {
            "gen_ai.usage.input_tokens": 100,
            "gen_ai.usage.output_tokens": 10,
            "gen_ai.usage.cache_read.input_tokens": 40,
            "gen_ai.usage.cache_creation.input_tokens": 0,
        },
        {
            "gen_ai.usage.input_tokens": 200,
            "gen_ai.usage.output_tokens": 20,
            "gen_ai.usage.cache_read.input_tokens": 0,
            "gen_ai.usage.cache_creation.input_tokens": 70,
        },
    ]
    assert _usage(run) == _totals(result.usage)  # the child's included, as RunResult's
    every_chat = [_usage(c) for c in by_name(spans, "chat")]
    assert {name: sum(c[name] for c in every_chat) for name, _ in _USAGE} == _totals(result.usage)


async def test_a_resumed_runs_chat_span_carries_only_its_own_call(
    autojump_clock: trio.testing.MockClock,
    exported: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    provider, exporter = exported
    agent = Agent("clerk", "Refund what you are asked.", toolkit=Toolkit(refund))
    model = ScriptedModel.layer(
        [
            Turn.tool_calls(("refund", {"number": 7}), usage=Usage.of(1_000, 100, cache_read=500)),
            Turn.text("Refunded.", usage=Usage.of(2_000, 20, cache_write=300)),
        ]
    )
    telemetry = Telemetry(tracer_provider=provider)
    layer = Toolkit(refund).handlers() + model + SuspendingApproval().layer() + telemetry.layer()
    async with open_runtime(layer, agents=[agent]) as runtime:
        first = await runtime.run(agent, "Refund invoice 7.")
        assert first.status == "suspended"
        entries = await runtime.log.entries(first.conversation_id)
        (pending,) = pending_approvals(entries, first.run_id)
        decided = approval_decided(pending, approved=True, decided_by="ann", at=1.0)
        await runtime.log.append(first.conversation_id, [decided])
        result = await runtime.resume(
            agent, conversation_id=first.conversation_id, run_id=first.run_id
        )
    assert result.status == "completed", result.error
    assert telemetry.open_runs == 0
    spans = exporter.get_finished_spans()
    chats: list[dict[str, Any]] = [_usage(c) for c in by_name(spans, "chat")]
    assert chats == [
        {
            "gen_ai.usage.input_tokens": 1_000,
            "gen_ai.usage.output_tokens": 100,
            "gen_ai.usage.cache_read.input_tokens": 500,
            "gen_ai.usage.cache_creation.input_tokens": 0,
        },
        {
            "gen_ai.usage.input_tokens": 2_000,
            "gen_ai.usage.output_tokens": 20,
            "gen_ai.usage.cache_read.input_tokens": 0,
            "gen_ai.usage.cache_creation.input_tokens": 300,
        },
    ]
    (approval,) = by_name(spans, "approval")  # the resumed run used the recorded decision
    assert attributes(approval)["effectagent.approval.decision"] == "suspended"
    suspended, resumed = by_name(spans, "invoke_agent")
    assert _usage(suspended) == _totals(first.usage)
    assert _usage(resumed) == _totals(result.usage)


async def test_a_model_call_is_a_client_span_and_the_rest_of_a_run_internal(
    autojump_clock: trio.testing.MockClock,
    exported: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    provider, exporter = exported
    agent = Agent("forecaster", "Answer.", toolkit=Toolkit(forecast))
    model = ScriptedModel.layer(
        [Turn.tool_calls(("forecast", {"city": "Oslo"})), Turn.text("4 °C.")]
    )
    layer = Toolkit(forecast).handlers() + model + Telemetry(tracer_provider=provider).layer()
    async with open_runtime(layer, agents=[agent]) as runtime:
        await runtime.run(agent, "How warm is Oslo?")
    kinds = {(span.name, span.kind) for span in exporter.get_finished_spans()}
    assert kinds == {
        ("invoke_agent forecaster", SpanKind.INTERNAL),
        ("turn", SpanKind.INTERNAL),
        ("chat", SpanKind.CLIENT),
        ("execute_tool forecast", SpanKind.INTERNAL),
    }


@tool(readonly=True)
async def slow_forecast(city: str) -> float:
    """Today's high in °C, after a long wait.

    Args:
        city: The city.
    """
    await trio.sleep(100)
    return 4.0


async def test_a_turn_the_runs_time_cut_ends_its_call_and_the_grace_call_is_no_retry(
    autojump_clock: trio.testing.MockClock,
    exported: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    # The run's time runs out while the first turn's batch runs: that turn never completes, the
    # grace turn answers. Its model call is the grace turn's first, not a retry of the first's.
    provider, exporter = exported
    policy = AgentPolicy(max_duration=5.0)
    agent = Agent("forecaster", "Answer.", policy, Toolkit(slow_forecast))
    model = ScriptedModel.layer(
        [Turn.tool_calls(("slow_forecast", {"city": "Oslo"})), Turn.text("I do not know.")]
    )
    layer = Toolkit(slow_forecast).handlers() + model + Telemetry(tracer_provider=provider).layer()
    async with open_runtime(layer, agents=[agent]) as runtime:
        result = await runtime.run(agent, "How warm is Oslo?")
    assert (result.status, result.exhausted) == ("completed", "duration")
    spans = exporter.get_finished_spans()
    turns = {attributes(span)["effectagent.turn"]: span for span in by_name(spans, "turn")}
    chats = {attributes(span)["effectagent.turn"]: span for span in by_name(spans, "chat")}
    assert [attributes(chats[n])["effectagent.model.retries"] for n in (1, 2)] == [0, 0]
    assert attributes(turns[2])["effectagent.turn.grace"] is True
    first_turn, first_call = turns[1], chats[1]
    assert first_call.parent is not None
    assert first_call.parent.span_id == span_id(first_turn)
    call_end, turn_end = first_call.end_time, first_turn.end_time
    assert call_end is not None
    assert turn_end is not None
    assert call_end <= turn_end  # the call ended with its turn at the latest
