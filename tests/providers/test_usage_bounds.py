"""A provider's usage figures are untrusted: a part (cache reads and writes, reasoning) larger
than the total it belongs to is cut to that total, so no call is priced for tokens it never used
and every reported usage adds up."""

from __future__ import annotations

from effectagent.ai import Usage
from effectagent.providers import Anthropic, Gemini, OpenAIChat, OpenAIResponses

from .conftest import KEY
from .helpers import collect, reduce
from .replay import ReplayServer, Reply
from .wire import AnthropicWire, ChatWire, GeminiWire, ResponsesWire


def adds_up(usage: Usage) -> bool:
    given, made = usage.input, usage.output
    return (
        given.uncached + given.cache_read + given.cache_write == given.total
        and made.text + made.reasoning == made.total
    )


async def test_chat_completions_parts_past_their_totals(server: ReplayServer) -> None:
    wire = ChatWire()
    usage = wire.usage(10, 5, cached=50, written=7, reasoning=9)
    server.script(Reply.sse(wire.text("Hi", usage=usage)))
    settings = OpenAIChat("gpt-4.1", api_key=KEY, base_url=f"{server.url}/v1")
    used = reduce(await collect(settings)).usage
    assert (used.input.total, used.input.cache_read, used.input.cache_write) == (10, 10, 0)
    assert (used.output.total, used.output.reasoning) == (5, 5)
    assert adds_up(used)


async def test_chat_completions_cache_writes_fill_what_the_reads_leave(
    server: ReplayServer,
) -> None:
    wire = ChatWire()
    server.script(Reply.sse(wire.text("Hi", usage=wire.usage(10, 5, cached=4, written=20))))
    settings = OpenAIChat("gpt-4.1", api_key=KEY, base_url=f"{server.url}/v1")
    used = reduce(await collect(settings)).usage
    assert (used.input.uncached, used.input.cache_read, used.input.cache_write) == (0, 4, 6)
    assert adds_up(used)


async def test_responses_parts_past_their_totals(server: ReplayServer) -> None:
    wire = ResponsesWire()
    usage = wire.usage(10, 5, cached=50, reasoning=9)
    events = [wire.created(), *wire.message("msg_1", 0, "Hi"), wire.completed(usage)]
    server.script(Reply.sse(events))
    settings = OpenAIResponses("gpt-4.1", api_key=KEY, base_url=f"{server.url}/v1")
    used = reduce(await collect(settings)).usage
    assert (used.input.total, used.input.cache_read, used.output.reasoning) == (10, 10, 5)
    assert adds_up(used)


async def test_gemini_cache_reads_past_the_prompt(server: ReplayServer) -> None:
    wire = GeminiWire()
    usage = wire.usage(10, 5, cached=50)
    server.script(Reply.sse([wire.event({"text": "Hi"}, finish="STOP", usage=usage)]))
    settings = Gemini("gemini-3-flash-preview", api_key=KEY, base_url=server.url)
    used = reduce(await collect(settings)).usage
    assert (used.input.total, used.input.cache_read) == (10, 10)
    assert adds_up(used)


async def test_anthropic_thinking_past_the_output(server: ReplayServer) -> None:
    wire = AnthropicWire()
    details = {"output_tokens_details": {"thinking_tokens": 40}}
    events = [wire.start(), *wire.text_block(0, "Hi"), *wire.finish("end_turn", 5, **details)]
    server.script(Reply.sse(events))
    settings = Anthropic("claude-sonnet-4-5", api_key=KEY, base_url=server.url)
    used = reduce(await collect(settings)).usage
    assert (used.output.total, used.output.reasoning) == (5, 5)
    assert adds_up(used)
