"""Prompt caching on the wire (#28 item 5): Anthropic's ``cache_control`` breakpoints and
OpenAI's ``prompt_cache_key``, set from ``AgentPolicy.prompt_caching``, over the loopback
stand-in servers; the cache reads and writes the server reports show in the run's usage and
cost. A property over generated conversations: never more than four marks, never on thinking,
and the marks change nothing else in the body."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from effectagent import Agent, AgentPolicy, Tool, ToolCallContext, Toolkit, open_runtime
from effectagent.ai import (
    MAX_CACHE_MARKS,
    AssistantMessage,
    Message,
    ModelRequest,
    NativeReasoningContent,
    Price,
    PromptCaching,
    SystemMessage,
    TextContent,
    ToolCallContent,
    ToolDescriptor,
    ToolMessage,
    ToolResultContent,
    Usage,
    UserMessage,
)
from effectagent.providers import Anthropic, OpenAIChat, OpenAICompatible, OpenAIResponses
from effectagent.providers._anthropic_messages import anthropic_request_body

from .conftest import KEY
from .helpers import WEATHER, collect, request
from .replay import ReplayServer, Reply
from .test_engine import Lookup, Reading
from .wire import AnthropicWire, ChatWire, ResponsesWire

EPHEMERAL = {"type": "ephemeral"}

lookup = Tool(
    "lookup", "The temperature in a city.", parameters=Lookup, success=Reading, readonly=True
)


async def handle(params: Lookup, call: ToolCallContext) -> Reading:
    return Reading(1.0)


def marks(value: Any) -> list[str]:
    """Where a body carries ``cache_control``: the JSON path of each marked object."""
    found: list[str] = []

    def walk(node: Any, path: str) -> None:
        if isinstance(node, dict):
            if "cache_control" in node:
                found.append(path)
            for key, child in node.items():
                walk(child, f"{path}.{key}")
        elif isinstance(node, list):
            for index, child in enumerate(node):
                walk(child, f"{path}[{index}]")

    walk(value, "$")
    return sorted(found)


def unmarked(body: dict[str, Any]) -> dict[str, Any]:
    """``body`` without its marks (a marked system prompt back to the string it was)."""
    copy: dict[str, Any] = json.loads(json.dumps(body))

    def strip(node: Any) -> None:
        if isinstance(node, dict):
            node.pop("cache_control", None)
            for child in node.values():
                strip(child)
        elif isinstance(node, list):
            for child in node:
                strip(child)

    strip(copy)
    system = copy.get("system")
    if isinstance(system, list):
        copy["system"] = system[0]["text"]
    return copy


async def test_an_agents_policy_marks_system_tools_and_the_last_messages_on_the_wire(
    server: ReplayServer,
) -> None:
    """A tool loop of two requests under ``PromptCaching()``: each request carries four marks —
    the system prompt, the last tool, the last two turns — and the second request's cache read
    (what the first one wrote) shows in the run's usage and its cost."""
    wire = AnthropicWire()
    first = [
        wire.start(20, written=1_500),
        *wire.calls(("toolu_1", "lookup", '{"city": "Oslo"}')),
        *wire.finish("tool_use"),
    ]
    second = [
        wire.start(30, read=1_500),
        wire.ping(),
        *wire.text_block(0, "1 °C in Oslo."),
        *wire.finish("end_turn"),
    ]
    server.script(Reply.sse(first), Reply.sse(second))
    agent = Agent(
        "cached",
        "Answer with the temperature.",
        AgentPolicy(prompt_caching=PromptCaching()),
        Toolkit(lookup),
    )
    settings = Anthropic("claude-sonnet-4-5", api_key=KEY, base_url=server.url)
    layer = settings.layer() + Toolkit(lookup).handlers({lookup: handle})
    async with open_runtime(layer, agents=[agent]) as runtime:
        result = await runtime.run(agent, "How cold is Oslo?")
    assert result.status == "completed", result.error
    one, two = (r.json() for r in server.requests)
    assert marks(one) == [
        "$.messages[0].content[0]",  # the only turn: the user's question
        "$.system[0]",
        "$.tools[0]",
    ]
    assert marks(two) == [
        "$.messages[1].content[0]",  # the assistant's tool call
        "$.messages[2].content[0]",  # the tool's result
        "$.system[0]",
        "$.tools[0]",
    ]
    assert two["system"][0] == {
        "type": "text",
        "text": "Answer with the temperature.",
        "cache_control": EPHEMERAL,
    }
    assert two["messages"][2]["content"][0]["cache_control"] == EPHEMERAL
    usage = result.usage
    assert (usage.cache_write_input_tokens, usage.cache_read_input_tokens) == (1_500, 1_500)
    # Priced by the shipped table: $3 input, $15 output, $3.75 cache write, $0.30 cache read.
    assert usage.cost == (20 + 30) * 3 + 1_500 * 375 // 100 + 1_500 * 3 // 10 + (5 + 5) * 15


async def test_without_a_caching_policy_nothing_is_marked(server: ReplayServer) -> None:
    server.script(Reply.sse(AnthropicWire().text("Hi.")))
    settings = Anthropic("claude-sonnet-4-5", api_key=KEY, base_url=server.url)
    req = ModelRequest((SystemMessage("Be brief."), UserMessage.text("Hi")), (WEATHER,))
    await collect(settings, req)
    body = server.requests[0].json()
    assert b"cache_control" not in server.requests[0].body
    assert body["system"] == "Be brief."


async def test_an_hour_long_cache_and_fewer_marks_are_sent_as_asked(server: ReplayServer) -> None:
    server.script(Reply.sse(AnthropicWire().text("Hi.")))
    settings = Anthropic("claude-sonnet-4-5", api_key=KEY, base_url=server.url)
    cache = PromptCaching(system=False, tools=True, recent_messages=1, ttl="1h")
    req = ModelRequest(
        (SystemMessage("Be brief."), UserMessage.text("Hi")), (WEATHER,), cache=cache
    )
    await collect(settings, req)
    body = server.requests[0].json()
    assert marks(body) == ["$.messages[0].content[0]", "$.tools[0]"]
    assert body["tools"][0]["cache_control"] == {"type": "ephemeral", "ttl": "1h"}
    assert body["system"] == "Be brief."  # not marked: left a string


async def test_hour_long_cache_writes_are_priced_at_their_own_rate(server: ReplayServer) -> None:
    """Anthropic charges twice the input for a one-hour entry (a quarter more for a five-minute
    one): a run whose request wrote both kinds costs each at its rate, so a cost budget counts
    what the provider bills."""
    wire = AnthropicWire()
    server.script(
        Reply.sse(
            [
                wire.start(20, written=1_500, long_written=1_000),
                wire.ping(),
                *wire.text_block(0, "1 °C in Oslo."),
                *wire.finish("end_turn"),
            ]
        )
    )
    agent = Agent(
        "cached", "Answer.", AgentPolicy(prompt_caching=PromptCaching(ttl="1h")), Toolkit()
    )
    settings = Anthropic("claude-sonnet-4-5", api_key=KEY, base_url=server.url)
    async with open_runtime(settings.layer(), agents=[agent]) as runtime:
        result = await runtime.run(agent, "How cold is Oslo?")
    assert result.status == "completed", result.error
    usage = result.usage
    assert usage.cache_write_input_tokens == 1_500
    # $3 input, $15 output, $3.75 a five-minute write, $6 (twice the input) a one-hour write.
    assert usage.cost == 20 * 3 + 500 * 375 // 100 + 1_000 * 6 + 5 * 15


def test_a_price_counts_long_writes_as_part_of_the_writes() -> None:
    price = Price("3", "15", cache_write="3.75")
    assert price.cache_write_long is None  # twice the input: $6 a million
    assert (
        price.cost(cache_write=1_000_000, cache_write_long=400_000)
        == 3_750_000 * 6 // 10 + 2_400_000
    )
    assert Price("3", "15", cache_write_long="7").cost(cache_write=10, cache_write_long=10) == 70
    with pytest.raises(ValueError, match="cache_write_long is part of cache_write"):
        price.cost(cache_write=1, cache_write_long=2)
    with pytest.raises(ValueError, match="cache_write_long"):
        Usage.of(100, 1, cache_write=10, cache_write_long=11)


async def test_openai_gets_the_cache_key_on_both_apis_and_another_server_never(
    server: ReplayServer,
) -> None:
    keyed = request(cache=PromptCaching(key="support-agent-v3"))
    server.script(
        Reply.sse(ResponsesWire("gpt-4.1").text("Hi.")),
        Reply.sse(ResponsesWire("gpt-4.1").text("Hi.")),
        Reply.sse(ChatWire("gpt-4.1").text("Hi.")),
        Reply.sse(ChatWire("qwen3").text("Hi.")),
    )
    url = f"{server.url}/v1"
    await collect(OpenAIResponses("gpt-4.1", api_key=KEY, base_url=url), keyed)
    await collect(OpenAIResponses("gpt-4.1", api_key=KEY, base_url=url), request())
    await collect(OpenAIChat("gpt-4.1", api_key=KEY, base_url=url), keyed)
    await collect(OpenAICompatible("qwen3", base_url=url), keyed)
    bodies = [r.json() for r in server.requests]
    assert bodies[0]["prompt_cache_key"] == "support-agent-v3"
    assert "prompt_cache_key" not in bodies[1]  # no caching asked: no key
    assert bodies[2]["prompt_cache_key"] == "support-agent-v3"
    assert "prompt_cache_key" not in bodies[3]  # a server of your own may refuse the field
    assert all(b"cache_control" not in r.body for r in server.requests)


def test_more_marks_than_anthropic_takes_are_refused_in_a_sentence() -> None:
    with pytest.raises(ValueError) as caught:
        PromptCaching(recent_messages=3)
    assert str(caught.value) == (
        "PromptCaching asks for 5 cache marks (system 1, tools 1, recent messages 3), but "
        "Anthropic takes at most 4 a request"
    )
    assert PromptCaching(system=False, tools=False, recent_messages=4).recent_messages == 4
    with pytest.raises(ValueError, match="ttl must be '5m' or '1h'"):
        PromptCaching(ttl="1d")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="key must be a non-empty str"):
        PromptCaching(key=" ")
    with pytest.raises(TypeError, match=r"AgentPolicy\.prompt_caching must be"):
        AgentPolicy(prompt_caching=True)  # type: ignore[arg-type]


# ---- the marks over any conversation -------------------------------------------------------------


@st.composite
def conversations(draw: st.DrawFn) -> tuple[Message, ...]:
    messages: list[Message] = []
    if draw(st.booleans()):
        messages.append(SystemMessage(draw(st.sampled_from(["Be brief.", "You help."]))))
    for turn in range(draw(st.integers(0, 6))):
        kind = draw(st.sampled_from(["user", "assistant", "call"]))
        if kind == "user":
            messages.append(UserMessage.text(draw(st.sampled_from(["Hi", "Oslo?", "More."]))))
        elif kind == "assistant":
            messages.append(AssistantMessage((TextContent("Fine."),)))
        else:
            call = f"toolu_{turn}"
            messages.append(AssistantMessage((ToolCallContent(call, "weather", {"city": "Oslo"}),)))
            messages.append(ToolMessage((ToolResultContent(call, "weather", {"c": 1}),)))
    if not messages or isinstance(messages[-1], SystemMessage):
        messages.append(UserMessage.text("Go on."))
    return tuple(messages)


@st.composite
def cachings(draw: st.DrawFn) -> PromptCaching:
    system, tools = draw(st.booleans()), draw(st.booleans())
    recent = draw(st.integers(0, MAX_CACHE_MARKS - system - tools))
    return PromptCaching(system=system, tools=tools, recent_messages=recent)


@given(
    messages=conversations(),
    tools=st.lists(st.just(WEATHER), max_size=2).map(tuple),
    cache=cachings(),
    thinking=st.booleans(),
)
def test_the_marks_are_at_most_four_never_on_thinking_and_change_nothing_else(
    messages: tuple[Message, ...],
    tools: tuple[ToolDescriptor, ...],
    cache: PromptCaching,
    thinking: bool,
) -> None:
    if thinking:  # every tool-call turn replays a signed thinking block first
        block = {"type": "thinking", "thinking": "t", "signature": "s"}
        messages = tuple(
            AssistantMessage((*m.content, NativeReasoningContent("anthropic", "m", block)))
            if isinstance(m, AssistantMessage)
            else m
            for m in messages
        )
    plain = ModelRequest(messages, tools)
    cached = ModelRequest(messages, tools, cache=cache)
    before = anthropic_request_body(plain, "claude-sonnet-4-5", max_tokens=64)
    after = anthropic_request_body(cached, "claude-sonnet-4-5", max_tokens=64)
    found = marks(after)
    assert len(found) <= MAX_CACHE_MARKS
    assert unmarked(after) == before  # the marks are all that changed
    for path in found:  # never on a thinking block
        node: Any = after
        for step in path[2:].replace("[", ".[").split("."):
            node = node[int(step[1:-1])] if step.startswith("[") else node[step]
        assert node.get("type") != "thinking"
    expected = (
        (cache.system and "system" in before)
        + (cache.tools and bool(tools))
        + min(cache.recent_messages, len(before["messages"]))
    )
    assert len(found) == expected
    # The recent marks are on the last turns, one each, on each turn's last markable block.
    recent = [p for p in found if p.startswith("$.messages")]
    turns = [int(p.split("[")[1].split("]")[0]) for p in recent]
    count = len(before["messages"])
    assert turns == list(range(count - len(turns), count))
