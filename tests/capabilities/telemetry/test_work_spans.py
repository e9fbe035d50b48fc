"""Spans of the work inside a tool call (CAP-013): a sandboxed command, a Code Mode pass with its
inner calls, an MCP request — each under the tool call's span, saying what ran and how it ended,
and never the command's arguments, the program's values or the request's content unless content
was asked for (and then redacted).

These run real processes (a shell, Deno, an MCP server over stdio) on the system clock."""

from __future__ import annotations

import sys
from typing import Any

import attrs
import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from capabilities.code_mode import code_mode
from capabilities.mcp import StdioServer, connect
from capabilities.telemetry import Telemetry
from effectagent import Agent, Tool, ToolCallContext, Toolkit, open_runtime, tool
from effectagent.core import SecretRedactor
from effectagent.testing import ScriptedModel, Turn
from sandbox import UNLIMITED, LocalProcessSandbox, SandboxLimits, SandboxRequest, run
from tests.capabilities.telemetry.spans import (
    CANARY,
    attributes,
    by_name,
    parent_id,
    span_id,
    texts,
)
from tests.engine.helpers import make_agent

#: What the local runner can enforce (with network="host": it cannot isolate the network).
LOCAL = SandboxLimits(memory_bytes=UNLIMITED, max_processes=UNLIMITED)


@attrs.frozen
class Shell:
    script: str


@attrs.frozen
class Ran:
    exit_code: int | None


def _no_canary(spans: tuple[ReadableSpan, ...]) -> None:
    assert not [text for span in spans for text in texts(span) if CANARY in text]


@pytest.mark.parametrize("include_content", [False, True])
async def test_a_sandboxed_command_is_a_span_under_its_tool_call(
    exported: tuple[TracerProvider, InMemorySpanExporter], include_content: bool
) -> None:
    provider, exporter = exported
    sandbox = LocalProcessSandbox()
    shell = Tool("shell", "Run a script.", parameters=Shell, success=Ran)

    async def handle(params: Shell, call: ToolCallContext) -> Ran:
        ran = await run(
            sandbox, SandboxRequest("/bin/sh", ("-c", params.script), network="host", limits=LOCAL)
        )
        await run(  # a second one, cut by its wall clock
            sandbox,
            SandboxRequest(
                "sleep", ("5",), network="host", limits=attrs.evolve(LOCAL, wall_clock_seconds=0.2)
            ),
        )
        return Ran(ran.exit_code)

    agent = make_agent(shell)
    script = f"echo {CANARY}; exit 3"
    model = ScriptedModel([Turn.tool_calls(("shell", {"script": script})), Turn.text("done")])
    telemetry = Telemetry(
        tracer_provider=provider,
        include_content=include_content,
        redactor=SecretRedactor([CANARY]),
    )
    layer = agent.toolkit.handlers({shell: handle}) + model.as_layer() + telemetry.layer()
    async with open_runtime(layer, agents=[agent], secrets=[CANARY]) as runtime:
        result = await runtime.run(agent, "Run it.")
    assert result.status == "completed"
    spans = exporter.get_finished_spans()
    _no_canary(spans)
    (call,) = by_name(spans, "execute_tool shell")
    (command,) = by_name(spans, "sandbox.command sh")
    (sleep,) = by_name(spans, "sandbox.command sleep")
    assert parent_id(command) == parent_id(sleep) == span_id(call)
    carried = attributes(command)
    assert carried["effectagent.run.id"] == result.run_id
    assert carried["process.executable.name"] == "sh"
    assert carried["process.exit.code"] == 3
    assert carried["error.type"] == "exit_code"
    assert command.status.status_code is StatusCode.ERROR
    assert carried["effectagent.sandbox.runner"] == sandbox.implementation.name
    assert carried["effectagent.sandbox.isolation"] == "unisolated"
    assert carried["effectagent.sandbox.security_boundary"] is False
    assert carried["effectagent.sandbox.limit.wall_clock_s"] == 30.0
    assert carried["effectagent.sandbox.limit.memory_bytes.lifted"] is True
    assert carried["effectagent.sandbox.limit.cpu_s"] == 30.0
    assert carried["effectagent.sandbox.timed_out"] is False
    assert isinstance(carried["effectagent.sandbox.wall_s"], float)
    assert attributes(sleep)["effectagent.sandbox.limits_hit"] == "wall_clock"
    assert attributes(sleep)["error.type"] == "limit:wall_clock"
    if include_content:  # redacted: the secret was in the script
        assert carried["process.command_args"] == '["-c", "echo [REDACTED]; exit 3"]'
    else:
        assert "process.command_args" not in carried
        assert not [text for text in texts(command) if "echo" in text]


async def test_a_command_that_cannot_start_fails_its_span_with_the_error_type(
    exported: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    provider, exporter = exported
    telemetry = Telemetry(tracer_provider=provider)
    with telemetry.activate(), pytest.raises(Exception) as raised:
        await run(
            LocalProcessSandbox(),
            SandboxRequest("no-such-program-here", network="host", limits=LOCAL),
        )
    (command,) = exporter.get_finished_spans()
    assert command.name == "sandbox.command no-such-program-here"
    assert attributes(command)["error.type"] == type(raised.value).__name__ == "CommandNotFound"


HIGHS = {"Oslo": 4.0, "Rome": 17.5}


@tool(readonly=True)
async def high(city: str) -> float:
    """Today's high in °C.

    Args:
        city: The city.
    """
    return HIGHS[city]


async def test_a_code_mode_pass_is_a_span_with_its_inner_calls_under_it(
    exported: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    provider, exporter = exported
    tracer = provider.get_tracer("test")

    async def handle_high(params: Any, call: ToolCallContext) -> float:
        with tracer.start_as_current_span("weather-service GET"):
            return HIGHS[params.city]

    code = code_mode({"weather": [high]}, executor="deno-unisolated")
    agent = Agent("planner", "Use a program.", toolkit=Toolkit(code.tool))
    program = (
        "async () => { const a = await weather.high({ city: 'Oslo' });"
        f" const b = await weather.high({{ city: 'Rome' }}); console.log('{CANARY}');"
        " try { await weather.high({ city: 42 }); } catch (e) {} return a + b; }"
    )
    thrown = "async () => { throw new Error('no') }"
    model = ScriptedModel(
        [
            Turn.tool_calls((code.tool.name, {"program": program})),
            Turn.tool_calls((code.tool.name, {"program": thrown})),
            Turn.text("21.5"),
        ]
    )
    telemetry = Telemetry(tracer_provider=provider)
    handlers = Toolkit(high).handlers({high: handle_high})
    layer = handlers + code.layer + model.as_layer() + telemetry.layer()
    async with open_runtime(layer, agents=[agent], secrets=[CANARY]) as runtime:
        result = await runtime.run(agent, "How warm?")
    assert result.status == "completed"
    spans = exporter.get_finished_spans()
    _no_canary(spans)
    calls = by_name(spans, "execute_tool run_program")
    passes = by_name(spans, "code_mode.pass run_program")
    assert len(calls) == len(passes) == 2
    assert sorted(parent_id(p) or 0 for p in passes) == sorted(span_id(c) for c in calls)
    for pass_span in passes:
        carried = attributes(pass_span)
        assert carried["effectagent.code_mode.pass.id"] == carried["gen_ai.tool.call.id"]
        assert carried["effectagent.code_mode.executor"] == "deno-unisolated"
        assert carried["effectagent.code_mode.isolation"] == "unisolated"
        assert carried["effectagent.code_mode.limit.calls"] == 64
    ok, threw = sorted(passes, key=lambda s: s.start_time or 0)
    assert attributes(ok)["effectagent.code_mode.outcome"] == "ok"
    assert attributes(ok)["effectagent.code_mode.inner_calls"] == 3
    assert ok.status.status_code is StatusCode.UNSET
    assert attributes(threw)["effectagent.code_mode.outcome"] == "threw"
    assert attributes(threw)["error.type"] == "threw"
    assert attributes(threw)["effectagent.code_mode.inner_calls"] == 0
    inner = by_name(spans, "execute_tool high")
    assert [parent_id(s) for s in inner] == [span_id(ok)] * 3
    kinds = [attributes(s)["effectagent.outcome.kind"] for s in inner]
    assert sorted(kinds) == ["invalid-input", "success", "success"]
    assert all(attributes(s)["effectagent.code_mode.inner"] is True for s in inner)
    assert not [s for s in inner if "gen_ai.tool.call.arguments" in attributes(s)]
    handler_spans = by_name(spans, "weather-service GET")  # the inner handlers' own spans
    assert sorted(parent_id(s) or 0 for s in handler_spans) == sorted(
        span_id(s) for s in inner if attributes(s)["effectagent.outcome.kind"] == "success"
    )
    executions = by_name(spans, "sandbox.code")
    assert sorted(parent_id(s) or 0 for s in executions) == sorted(span_id(p) for p in passes)
    assert {attributes(s)["effectagent.sandbox.operation"] for s in executions} == {"code"}
    (succeeded,) = [s for s in executions if parent_id(s) == span_id(ok)]
    assert attributes(succeeded)["effectagent.sandbox.host_calls"] == 3


async def test_mcp_requests_are_client_spans_named_after_the_method(
    exported: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    provider, exporter = exported
    server = StdioServer(sys.executable, ["-m", "examples.mcp_server"], name="notes", prefix="n")
    agent = Agent("travel", "Use the notes server.", tool_sources=(server.key,))
    telemetry = Telemetry(tracer_provider=provider)
    model = ScriptedModel(
        [
            Turn.tool_calls(("n_lookup", {"city": CANARY}), ("n_add", {"a": 1, "b": "2"})),
            Turn.text("Pack a coat."),
        ]
    )
    async with connect(server) as connection:
        layer = connection.layer() + model.as_layer() + telemetry.layer()
        async with open_runtime(layer, agents=[agent], secrets=[CANARY]) as runtime:
            result = await runtime.run(agent, "Oslo?")
        with telemetry.activate():
            contents = await connection.read_resource("notes://cities")
            with pytest.raises(Exception, match="prompts/get"):
                await connection.get_prompt("packing", {"city": CANARY})
    assert result.status == "completed"
    assert contents
    spans = exporter.get_finished_spans()
    _no_canary(spans)
    (lookup_call,) = by_name(spans, "execute_tool n_lookup")
    (lookup,) = by_name(spans, "tools/call")  # n_add was refused before it was sent
    assert lookup.name == "tools/call lookup"
    assert parent_id(lookup) == span_id(lookup_call)
    carried = attributes(lookup)
    expected: dict[str, Any] = {
        "mcp.method.name": "tools/call",
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "lookup",
        "effectagent.mcp.tool.local_name": "n_lookup",
        "effectagent.mcp.server.name": "notes",
        "effectagent.mcp.server.identity.name": "notes",
        "mcp.protocol.version": connection.identity.protocol_version,
        "network.transport": "pipe",
        "effectagent.run.id": result.run_id,
    }
    assert {key: carried.get(key) for key in expected} == expected
    assert "gen_ai.tool.call.arguments" not in carried
    (read,) = by_name(spans, "resources/read")
    assert parent_id(read) is None  # host code outside a run: under whatever was current
    assert attributes(read)["mcp.method.name"] == "resources/read"
    assert "mcp.resource.uri" not in attributes(read)
    (prompt,) = by_name(spans, "prompts/get")
    assert prompt.name == "prompts/get packing"
    assert attributes(prompt)["gen_ai.prompt.name"] == "packing"
    assert attributes(prompt)["error.type"] == "McpRequestError"
    assert prompt.status.status_code is StatusCode.ERROR
    assert trace.get_current_span() is trace.INVALID_SPAN  # nothing left attached
