"""The tool output mode (#29 item 4) through each adapter's wire format, against the replay server:
every request offers the final_result tool(s) — no native output format — a bad call goes back as
that tool's failure in the provider's own tool-result form, and a good one is the answer; a union
offers one final_result tool per member."""

from __future__ import annotations

from typing import Any

import attrs

from effectagent import Agent, open_runtime
from effectagent.core import one_of

from .conftest import KEY
from .replay import ReplayServer, Reply
from .targets import Target
from .test_engine import tool_results


@attrs.frozen
class Refund:
    order: str
    amount: float


@attrs.frozen
class Escalation:
    reason: str


def offered(target: Target, body: dict[str, Any]) -> list[tuple[str, Any]]:
    """The tools a request offered: (name, parameters' JSON Schema)."""
    if target.name == "anthropic":
        return [(t["name"], t["input_schema"]) for t in body["tools"]]
    if target.name == "openai-responses":
        return [(t["name"], t["parameters"]) for t in body["tools"]]
    if target.name == "gemini":
        return [
            (d["name"], d["parameters_json_schema"])
            for tool in body["tools"]
            for d in tool["functionDeclarations"]
        ]
    return [(t["function"]["name"], t["function"]["parameters"]) for t in body["tools"]]


def has_native_output(target: Target, body: dict[str, Any]) -> bool:
    if target.name == "anthropic":
        return "output_config" in body
    if target.name == "openai-responses":
        return "format" in body.get("text", {})
    if target.name == "gemini":
        return "responseJsonSchema" in body.get("generationConfig", {})
    return "response_format" in body


async def test_a_bad_final_result_goes_back_as_its_failure_and_a_good_one_is_the_answer(
    target: Target, server: ReplayServer
) -> None:
    agent = Agent("refunds", "Refund the order.", output=Refund, output_mode="tool")
    server.script(
        Reply.sse(target.calls(("call_1", "final_result", '{"order": "A-1", "amount": "ten"}'))),
        Reply.sse(target.calls(("call_2", "final_result", '{"order": "A-1", "amount": 10}'))),
    )
    model = target.settings(server.url, KEY).layer()
    async with open_runtime(model, agents=[agent]) as runtime:
        result = await runtime.run(agent, "Order A-1 arrived broken.")
    assert result.status == "completed", result.error
    assert result.output == Refund("A-1", 10)
    first, second = (r.json() for r in server.requests)
    ((name, schema),) = offered(target, first)
    assert name == "final_result"
    assert set(schema["properties"]) == {"order", "amount"}
    assert not has_native_output(target, first)
    if target.name == "gemini":  # a failure is the response's "error"
        (refusal,) = [
            part["functionResponse"]["response"]["error"]
            for content in second["contents"]
            for part in content["parts"]
            if "functionResponse" in part
        ]
    else:
        (refusal,) = tool_results(target, second)
    assert refusal["_tag"] == "ToolInvalidInput"
    assert "$.amount" in refusal["message"]
    assert server.unscripted == 0


async def test_a_union_offers_one_final_result_tool_per_member(
    target: Target, server: ReplayServer
) -> None:
    agent = Agent(
        "triage", "Refund or escalate.", output=one_of(Refund, Escalation), output_mode="tool"
    )
    server.script(
        Reply.sse(target.calls(("call_1", "final_result_Escalation", '{"reason": "fraud"}')))
    )
    model = target.settings(server.url, KEY).layer()
    async with open_runtime(model, agents=[agent]) as runtime:
        result = await runtime.run(agent, "Order A-1 arrived broken.")
    assert result.status == "completed", result.error
    assert result.output == Escalation("fraud")
    (first,) = (r.json() for r in server.requests)
    names = [name for name, _ in offered(target, first)]
    assert names == ["final_result_Refund", "final_result_Escalation"]
