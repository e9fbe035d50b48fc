"""One run through the real engine per adapter: a model Layer built from settings, a toolkit's
handlers, an Agent with one tool and an output type. The replay server answers the first request
with a tool call and the second with the final answer; the second request must carry the tool's
result, and each request the output schema in the provider's native form."""

from __future__ import annotations

import json
from typing import Any

import attrs

from effectagent import Agent, Tool, ToolCallContext, Toolkit, open_runtime
from effectagent.core import RunCompleted

from .conftest import KEY
from .replay import ReplayServer, Reply
from .targets import Target


@attrs.frozen
class Lookup:
    city: str


@attrs.frozen
class Reading:
    high_c: float


@attrs.frozen
class Forecast:
    city: str
    high_c: float


forecast = Tool(
    "forecast", "Today's high in a city.", parameters=Lookup, success=Reading, readonly=True
)
toolkit = Toolkit(forecast)
agent = Agent("weather", "Answer with today's high.", toolkit=toolkit, output=Forecast)


async def handle(params: Lookup, call: ToolCallContext) -> Reading:
    return Reading(4.5 if params.city == "Oslo" else 20.0)


def native_schema(target: Target, body: dict[str, Any]) -> Any:
    """The output schema as the request carried it."""
    if target.name == "anthropic":
        return body["output_config"]["format"]["schema"]
    if target.name == "openai-responses":
        return body["text"]["format"]["schema"]
    if target.name == "gemini":
        assert body["generationConfig"]["responseMimeType"] == "application/json"
        return body["generationConfig"]["responseJsonSchema"]
    return body["response_format"]["json_schema"]["schema"]


def tool_results(target: Target, body: dict[str, Any]) -> list[Any]:
    """The tool results the request sent back."""
    if target.name == "anthropic":
        return [
            json.loads(block["content"])
            for message in body["messages"]
            for block in message["content"]
            if block["type"] == "tool_result"
        ]
    if target.name == "openai-responses":
        return [
            json.loads(item["output"])
            for item in body["input"]
            if item.get("type") == "function_call_output"
        ]
    if target.name == "gemini":  # the result itself, a JSON value under "output"
        return [
            part["functionResponse"]["response"]["output"]
            for content in body["contents"]
            for part in content["parts"]
            if "functionResponse" in part
        ]
    return [json.loads(m["content"]) for m in body["messages"] if m["role"] == "tool"]


async def test_an_agent_runs_a_tool_then_answers(target: Target, server: ReplayServer) -> None:
    answer = json.dumps({"city": "Oslo", "high_c": 4.5})
    server.script(
        Reply.sse(target.calls(("call_1", "forecast", '{"city": "Oslo"}'))),
        Reply.sse(target.text(answer[:9], answer[9:])),
    )
    model = target.settings(server.url, KEY).layer()
    async with open_runtime(model + toolkit.handlers({forecast: handle}), agents=[agent]) as rt:
        events = []
        async with rt.stream(agent, "How warm is Oslo today?") as stream:
            async for event in stream:
                events.append(event)
    (done,) = [e for e in events if isinstance(e, RunCompleted)]
    assert done.output == Forecast("Oslo", 4.5)
    first, second = (r.json() for r in server.requests)
    assert native_schema(target, first)["properties"]["high_c"] == {"type": "number"}
    assert tool_results(target, first) == []
    assert tool_results(target, second) == [{"high_c": 4.5}]
    assert server.unscripted == 0


async def test_runtime_run_reduces_to_the_decoded_output(
    target: Target, server: ReplayServer
) -> None:
    server.script(
        Reply.sse(target.calls(("call_1", "forecast", '{"city": "Lima"}'))),
        Reply.sse(target.text('{"city": "Lima", "high_c": 20.0}')),
    )
    model = target.settings(server.url, KEY).layer()
    async with open_runtime(model + toolkit.handlers({forecast: handle}), agents=[agent]) as rt:
        result = await rt.run(agent, "And Lima?")
    assert result.status == "completed", result.error
    assert result.output == Forecast("Lima", 20.0)
    assert [o.kind for o in result.outcomes] == ["success"]
    assert result.usage.input_tokens > 0


async def test_two_function_tools_and_an_output_type_run_on_each_provider(
    target: Target, server: ReplayServer
) -> None:
    """What issue 11 asks to see: an agent of two ``@tool`` functions and ``output=T`` runs
    against each provider's replayed stream — both calls in one batch, then the structured answer
    — with each tool's own handler, the results sent back, and the output decoded."""
    from effectagent import tool

    @tool(readonly=True)
    async def high(city: str) -> float:
        """Today's high in a city, in °C.

        Args:
            city: The city's name.
        """
        return 4.5 if city == "Oslo" else 20.0

    @tool(readonly=True)
    async def to_fahrenheit(celsius: float) -> float:
        """Convert °C to °F.

        Args:
            celsius: A temperature in °C.
        """
        return celsius * 9 / 5 + 32

    @attrs.frozen
    class Report:
        city: str
        high_f: float

    kit = Toolkit(high, to_fahrenheit)
    reporter = Agent("reporter", "Report today's high in °F.", toolkit=kit, output=Report)
    server.script(
        Reply.sse(
            target.calls(
                ("call_1", "high", '{"city": "Oslo"}'),
                ("call_2", "to_fahrenheit", '{"celsius": 4.5}'),
            )
        ),
        Reply.sse(target.text('{"city": "Oslo", ', '"high_f": 40.1}')),
    )
    model = target.settings(server.url, KEY).layer()
    async with open_runtime(model + kit.handlers(), agents=[reporter]) as runtime:
        result = await runtime.run(reporter, "How warm is Oslo today, in °F?")
    assert result.status == "completed", result.error
    assert result.output == Report("Oslo", 40.1)
    assert [(o.tool_name, o.kind) for o in result.outcomes] == [
        ("high", "success"),
        ("to_fahrenheit", "success"),
    ]
    first, second = (r.json() for r in server.requests)
    assert set(native_schema(target, first)["properties"]) == {"city", "high_f"}
    assert tool_results(target, second) == [4.5, 40.1]
