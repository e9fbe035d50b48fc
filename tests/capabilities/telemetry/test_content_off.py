"""Content off means no message leaves in a span: a tool's exception, a provider's error, a run's
failure, an approval's reason, a child run's failure, a Code Mode program's thrown text or an MCP
server's error text reach no status description, event or attribute of any span kind — run, turn,
model call, tool call, approval, compaction, subagent, sandbox, Code Mode, MCP — under the default
``Telemetry()``. The canary is registered as a secret nowhere: nothing redacts it, so only not
exporting messages at all keeps it out. With ``include_content=True`` the messages describe the
failed spans (the engine redacted them; here there is nothing to redact)."""

from __future__ import annotations

import sys

import attrs
import pytest
import trio
import trio.testing
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from capabilities import LogCompactor
from capabilities.code_mode import code_mode
from capabilities.mcp import McpLimits, StdioServer, connect
from capabilities.subagents import delegate
from capabilities.telemetry import Telemetry
from effectagent import Agent, AgentPolicy, TaggedError, Toolkit, open_runtime, tool
from effectagent.ai import (
    AuthenticationFailed,
    ModelRequest,
    ModelUnavailable,
    SystemMessage,
    ToolCallContext,
)
from effectagent.core import CompactionPolicy, SecretRedactor
from effectagent.effect import trace_span
from effectagent.testing import FunctionModel, Turn
from sandbox import UNLIMITED, LocalProcessSandbox, SandboxLimits, SandboxRequest, run
from tests.capabilities.mcp.conftest import DEMO
from tests.capabilities.telemetry.spans import attributes, by_name, texts
from tests.engine.helpers import Forecast, Lookup, ScriptedApproval, forecast_tool

#: Registered as a secret nowhere.
LEAK = "leak-canary-5e1b9d"


def _leaks(spans: tuple[ReadableSpan, ...]) -> list[tuple[str, str]]:
    return [(span.name, text) for span in spans for text in texts(span) if LEAK in text]


@attrs.frozen
class Topic:
    topic: str


async def _boom(params: Lookup, call: ToolCallContext) -> Forecast:
    raise ValueError(f"exploded with {LEAK}")


def _first(request: ModelRequest) -> str:
    system = request.messages[0]
    return system.content if isinstance(system, SystemMessage) else ""


@pytest.mark.parametrize("include_content", [False, True])
async def test_no_failure_message_reaches_a_span_of_a_run_with_content_off(
    autojump_clock: trio.testing.MockClock,
    exported: tuple[TracerProvider, InMemorySpanExporter],
    include_content: bool,
) -> None:
    provider, exporter = exported
    boom = forecast_tool("boom")
    gated = forecast_tool("gated", needs_approval=True)
    child = Agent("child", "You are the child.")
    ask = delegate(
        child,
        name="ask_child",
        description="Ask the child.",
        parameters=Topic,
        prompt=lambda params: params.topic,
    )
    lead = Agent(
        "lead",
        "You are the lead.",
        AgentPolicy(
            max_duration=600.0,
            context_token_limit=1_000,
            compaction=CompactionPolicy(keep_recent_tokens=100),
        ),
        Toolkit(boom, gated, ask.tool),
    )
    broken = Agent("broken", "You are broken.")
    calls: list[str] = []

    def model(request: ModelRequest) -> Turn:
        who = _first(request)
        calls.append(who)
        if who == "You are the child." or who == "You are broken.":
            return Turn.fail(AuthenticationFailed(f"the key was refused: {LEAK}"))
        if request.tool_choice == "none":  # the compaction's summary
            return Turn.text(f"Summary: {LEAK}.")
        if calls.count(who) == 1:  # a retryable error first
            return Turn.fail(ModelUnavailable(f"the provider said {LEAK}"))
        if calls.count(who) == 2:
            return Turn.tool_calls(
                ("boom", {"city": "Oslo"}),
                ("gated", {"city": "Rome"}),
                ("ask_child", {"topic": f"about {LEAK}"}),
                text=f"Calling. {LEAK}",
            )
        return Turn.text("Done.")

    telemetry = Telemetry(tracer_provider=provider, include_content=include_content)
    layer = (
        Toolkit(boom, gated).handlers({boom: _boom, gated: _boom})
        + ask.layer()
        + FunctionModel.layer(model)
        + ScriptedApproval.answering(False, f"denied because {LEAK}").layer()
        + LogCompactor().layer()
        + telemetry.layer()
    )
    async with open_runtime(layer, agents=[lead, broken]) as runtime:
        # A long question: its summary makes room before the second turn (a compaction span).
        completed = await runtime.run(lead, "Go. " + "some context " * 300)
        failed = await runtime.run(broken, "Go.")
    assert completed.status == "completed", completed
    assert failed.status == "failed"
    assert [o.kind for o in completed.outcomes] == ["defect", "rejected", "failure"]
    spans = exporter.get_finished_spans()
    names = {span.name.split(" ")[0] for span in spans}
    assert {"invoke_agent", "turn", "chat", "execute_tool", "approval", "compaction"} <= names
    assert len(by_name(spans, "invoke_agent child")) == 1  # the subagent's run
    failures = [span for span in spans if span.status.status_code is StatusCode.ERROR]
    failed_kinds = {span.name.split(" ")[0] for span in failures}
    assert {"invoke_agent", "turn", "chat", "execute_tool"} <= failed_kinds
    (tool_span,) = by_name(spans, "execute_tool boom")
    (run_span,) = by_name(spans, "invoke_agent broken")
    retried = by_name(spans, "chat")[0]  # the lead's first attempt
    if include_content:  # the messages describe the failures (nothing registered to redact)
        assert LEAK in (tool_span.status.description or "")
        assert LEAK in (run_span.status.description or "")
        assert LEAK in (retried.status.description or "")
        return
    assert _leaks(spans) == []
    # Each failed span still says what kind of failure it was.
    assert attributes(tool_span)["error.type"] == "defect"
    assert tool_span.status.description == "defect"
    assert attributes(run_span)["error.type"] == "ModelFailed"
    assert attributes(retried)["error.type"] == "ModelUnavailable"
    (gated_span,) = by_name(spans, "execute_tool gated")
    assert gated_span.status.description == "rejected"


async def test_a_failure_described_through_the_hook_keeps_its_description_only_with_content(
    exported: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    provider, exporter = exported
    for telemetry in (
        Telemetry(tracer_provider=provider),
        Telemetry(tracer_provider=provider, include_content=True, redactor=SecretRedactor([])),
    ):
        with telemetry.activate(), trace_span("work") as span:
            span.fail("limit:cpu", f"the work printed {LEAK}")
    off, on = exporter.get_finished_spans()
    assert off.status.description == "limit:cpu"
    assert attributes(off)["error.type"] == "limit:cpu"
    assert on.status.description == f"the work printed {LEAK}"


@attrs.frozen
class NoData(TaggedError):
    """No data for the city."""

    detail: str


@tool(readonly=True, errors=(NoData,))
async def population(city: str) -> int:
    """A city's population.

    Args:
        city: The city.
    """
    raise NoData(f"nothing known of {city} ({LEAK})")


LOCAL = SandboxLimits(memory_bytes=UNLIMITED, max_processes=UNLIMITED)


async def test_no_message_of_a_command_a_pass_or_an_mcp_request_reaches_a_span_with_content_off(
    exported: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    provider, exporter = exported
    code = code_mode({"atlas": [population]}, executor="deno-unisolated")
    server = StdioServer(
        sys.executable,
        [str(DEMO), "stdio"],
        name="demo",
        prefix="demo",
        limits=McpLimits(connect_timeout=30.0, call_timeout=20.0),
    )
    agent = Agent(
        "analyst",
        "Use a program and the demo server.",
        toolkit=Toolkit(code.tool),
        tool_sources=(server.key,),
    )
    thrown = f"""async () => {{
      console.log("{LEAK}");
      try {{ await atlas.population({{ city: "{LEAK}" }}); }} catch (error) {{}}
      throw new Error("gave up on {LEAK}");
    }}"""
    model = FunctionModel(
        lambda request: (
            Turn.text("Done.")
            if len(request.messages) > 2
            else Turn.tool_calls(
                (code.tool.name, {"program": thrown}),
                ("demo_fail", {"why": LEAK}),  # an error result whose text holds the canary
                ("demo_refuse", {}),  # a JSON-RPC error instead of a result
            )
        )
    )
    telemetry = Telemetry(tracer_provider=provider)
    async with connect(server) as connection:
        layer = (
            Toolkit(*code.tools).handlers()
            + code.layer
            + connection.layer()
            + ScriptedApproval.answering(True).layer()
            + model.as_layer()
            + telemetry.layer()
        )
        async with open_runtime(layer, agents=[agent]) as runtime:
            result = await runtime.run(agent, "How many?")
        with telemetry.activate():  # a command that fails after printing the canary
            request = SandboxRequest(
                "/bin/sh", ("-c", f"echo {LEAK}; exit 3"), network="host", limits=LOCAL
            )
            await run(LocalProcessSandbox(), request)
    assert result.status == "completed", result
    assert [o.kind for o in result.outcomes][:1] == ["failure"]
    spans = exporter.get_finished_spans()
    failed = {span.name for span in spans if span.status.status_code is StatusCode.ERROR}
    assert {
        "code_mode.pass run_program",
        "execute_tool population",  # the inner call
        "execute_tool run_program",
        "tools/call refuse",
        "sandbox.command sh",
    } <= failed, failed
    assert by_name(spans, "sandbox.code")
    assert _leaks(spans) == []
