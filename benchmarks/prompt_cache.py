"""Prompt caching on the wire: which bytes each request sends with which cache marks.

Run with ``.venv/bin/python benchmarks/prompt_cache.py`` (``make bench`` does). It prints what was
sent and never fails on it.

Method
------
A loopback HTTP/1.1 server in the same ``trio.run`` stands in for the Anthropic and OpenAI APIs
and keeps every request body it receives. One agent with a tool runs a tool loop of four requests
(three tool calls, then the answer) through the real adapters — the Anthropic one under
``PromptCaching()`` (the system prompt, the tools, the last two turns), under no caching, and the
OpenAI Responses one with a cache key.

For each Anthropic request the table gives the body's size and each ``cache_control`` mark: where
it is, and the **prefix** it closes — the prompt in Anthropic's cache order (tools, then system,
then the messages) up to and including the marked block, as compact JSON without the marks,
measured in bytes. A prefix is **readable** when an earlier request marked the very same bytes
(the cache keeps what a mark wrote; a later request that sends the same prefix reads it). Under
each request, the longest readable prefix: the longest prefix of its prompt, ending at any block,
that an earlier request marked — the part of the prompt the provider's cache could serve. The
server reports no usage of its own: the reads and writes a real API reports are what
``UsageTotals.cache_read_input_tokens`` and ``cache_write_input_tokens`` show.
"""

from __future__ import annotations

import json
from functools import partial
from typing import Any

import trio

from effectagent import Agent, AgentPolicy, Tool, ToolCallContext, Toolkit, open_runtime
from effectagent.ai import PromptCaching
from effectagent.providers import Anthropic, ModelSettings, OpenAIResponses

KEY = "sk-bench-not-a-real-key"
CALLS = 3  # tool calls before the answer
INSTRUCTIONS = (
    "You are the operations assistant of a small team. Look readings up with the tool, one city "
    "at a time, and answer with the warmest city. " * 8
)


def _event(data: dict[str, Any], name: str | None = None) -> bytes:
    head = f"event: {name}\n" if name else ""
    return f"{head}data: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


def _anthropic(turn: int) -> bytes:
    """The Messages stream of one turn: a tool call, or (after ``CALLS`` of them) the answer."""
    usage = {"input_tokens": 10, "output_tokens": 1}
    message = {"id": f"msg_{turn}", "type": "message", "role": "assistant", "content": []}
    events = [_event({"type": "message_start", "message": {**message, "usage": usage}})]
    if turn < CALLS:
        block = {"type": "tool_use", "id": f"toolu_{turn}", "name": "reading", "input": {}}
        delta = {"type": "input_json_delta", "partial_json": json.dumps({"city": f"city {turn}"})}
        reason = "tool_use"
    else:
        block = {"type": "text", "text": ""}
        delta = {"type": "text_delta", "text": "City 0 is the warmest."}
        reason = "end_turn"
    events += [
        _event({"type": "content_block_start", "index": 0, "content_block": block}),
        _event({"type": "content_block_delta", "index": 0, "delta": delta}),
        _event({"type": "content_block_stop", "index": 0}),
        _event({"type": "message_delta", "delta": {"stop_reason": reason}, "usage": usage}),
        _event({"type": "message_stop"}),
    ]
    return b"".join(events)


def _responses(turn: int) -> bytes:
    """The Responses stream of one turn."""
    item: dict[str, Any]
    if turn < CALLS:
        arguments = json.dumps({"city": f"city {turn}"})
        item = {
            "type": "function_call",
            "id": f"fc_{turn}",
            "call_id": f"call_{turn}",
            "name": "reading",
            "arguments": arguments,
            "status": "completed",
        }
    else:
        text = {"type": "output_text", "text": "City 0 is the warmest.", "annotations": []}
        item = {
            "type": "message",
            "id": "msg_1",
            "role": "assistant",
            "status": "completed",
            "content": [text],
        }
    usage = {"input_tokens": 10, "output_tokens": 1, "total_tokens": 11}
    response = {"id": f"resp_{turn}", "object": "response", "status": "completed"}
    return b"".join(
        [
            _event({"type": "response.created", "response": {**response, "output": []}}),
            _event({"type": "response.output_item.added", "output_index": 0, "item": item}),
            _event({"type": "response.output_item.done", "output_index": 0, "item": item}),
            _event(
                {
                    "type": "response.completed",
                    "response": {**response, "output": [item], "usage": usage},
                }
            ),
        ]
    )


class Server:
    """Answers each request with the next turn of its API's stream; keeps every body."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []

    async def serve(self, stream: trio.SocketStream) -> None:
        buffer = b""
        try:
            while True:
                while b"\r\n\r\n" not in buffer:
                    data = await stream.receive_some(1 << 16)
                    if not data:
                        return
                    buffer += data
                head, _, buffer = buffer.partition(b"\r\n\r\n")
                lines = head.split(b"\r\n")
                path = lines[0].split(b" ")[1].decode()
                length = next(
                    int(line.split(b":")[1])
                    for line in lines
                    if line.lower().startswith(b"content-length:")
                )
                while len(buffer) < length:
                    buffer += await stream.receive_some(1 << 16)
                body, buffer = buffer[:length], buffer[length:]
                turn = len(self.bodies)
                self.bodies.append(json.loads(body))
                events = _anthropic(turn) if path.endswith("/messages") else _responses(turn)
                reply = (
                    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                    + f"content-length: {len(events)}\r\n\r\n".encode()
                    + events
                )
                await stream.send_all(reply)
        except trio.BrokenResourceError:
            return


async def reading(params: dict[str, Any], call: ToolCallContext) -> dict[str, Any]:
    return {"city": params["city"], "celsius": 4.5, "note": "steady, light wind from the west"}


tool: Tool[Any, Any] = Tool(
    "reading",
    "Today's reading in a city.",
    parameters=dict[str, Any],
    success=dict[str, Any],
    readonly=True,
)


def _compact(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


def _strip(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _strip(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [_strip(v) for v in value]
    return value


def boundaries(body: dict[str, Any]) -> set[bytes]:
    """Every prefix of a Messages body's prompt that ends at a block (marks removed): where the
    cache looks for what an earlier mark wrote (Anthropic looks up to 20 blocks back from each
    mark; these requests are shorter than that)."""
    tools = body.get("tools", [])
    system = body.get("system")
    found = {_compact(_strip(tools[: i + 1])) for i in range(len(tools))}
    if system:
        found.add(_compact(_strip([tools, system])))
    messages = body["messages"]
    for m, message in enumerate(messages):
        for b in range(len(message["content"])):
            upto = [*messages[:m], {**message, "content": message["content"][: b + 1]}]
            found.add(_compact(_strip([tools, system, upto])))
    return found


def prefixes(body: dict[str, Any]) -> list[tuple[str, bytes]]:
    """Each mark of a Messages body: where it is, and the prompt up to and including the marked
    block in cache order (tools, system, messages), marks removed."""
    found: list[tuple[str, bytes]] = []
    tools = body.get("tools", [])
    for index, block in enumerate(tools):
        if "cache_control" in block:
            found.append((f"tools[{index}]", _compact(_strip(tools[: index + 1]))))
    system = body.get("system")
    if isinstance(system, list) and system and "cache_control" in system[-1]:
        found.append(("system", _compact(_strip([tools, system]))))
    messages = body["messages"]
    for m, message in enumerate(messages):
        for b, block in enumerate(message["content"]):
            if "cache_control" in block:
                upto = [*messages[:m], {**message, "content": message["content"][: b + 1]}]
                prefix = _compact(_strip([tools, system, upto]))
                found.append((f"messages[{m}].content[{b}]", prefix))
    return found


async def run_agent(settings: ModelSettings, server: Server, agent: Agent) -> None:
    layer = settings.layer() + Toolkit(tool).handlers({tool: reading})
    async with open_runtime(layer, agents=[agent]) as runtime:
        result = await runtime.run(agent, "Which of my cities is the warmest today?")
    assert result.status == "completed", result.error


def report(title: str, bodies: list[dict[str, Any]]) -> None:
    print(f"\n{title}")
    print(f"{'request':>7}  {'body bytes':>10}  {'mark':<26} {'prefix bytes':>12}  readable")
    written: set[bytes] = set()
    for number, body in enumerate(bodies, 1):
        marked = prefixes(body)
        size = len(_compact(body))
        readable = max((len(p) for p in boundaries(body) & written), default=0)
        if not marked:
            print(f"{number:>7}  {size:>10}  {'(no marks)':<26} {'':>12}  0 bytes")
        for index, (where, prefix) in enumerate(marked):
            first = f"{number:>7}  {size:>10}" if index == 0 else " " * 19
            seen = "yes" if prefix in written else "no"
            print(f"{first}  {where:<26} {len(prefix):>12}  {seen}")
        if marked:
            print(f"{'':>19}  longest readable prefix: {readable} of {size} bytes")
        # What a request marked is written to the cache for the requests after it.
        written.update(p for _, p in marked)


async def main() -> None:
    async with trio.open_nursery() as nursery:
        cached_server, plain_server, openai_server = Server(), Server(), Server()
        urls = []
        for server in (cached_server, plain_server, openai_server):
            listeners = await nursery.start(
                partial(trio.serve_tcp, server.serve, 0, host="127.0.0.1")
            )
            urls.append(f"http://127.0.0.1:{listeners[0].socket.getsockname()[1]}")
        toolkit = Toolkit(tool)
        cached = Agent("ops", INSTRUCTIONS, AgentPolicy(prompt_caching=PromptCaching()), toolkit)
        plain = Agent("ops", INSTRUCTIONS, AgentPolicy(), toolkit)
        keyed = Agent(
            "ops", INSTRUCTIONS, AgentPolicy(prompt_caching=PromptCaching(key="ops-v1")), toolkit
        )
        sonnet = "claude-sonnet-4-5"
        await run_agent(Anthropic(sonnet, api_key=KEY, base_url=urls[0]), cached_server, cached)
        await run_agent(Anthropic(sonnet, api_key=KEY, base_url=urls[1]), plain_server, plain)
        await run_agent(
            OpenAIResponses("gpt-4.1", api_key=KEY, base_url=f"{urls[2]}/v1"), openai_server, keyed
        )
        nursery.cancel_scope.cancel()
    report(
        "Anthropic Messages, PromptCaching(): system, tools, last two turns (5-minute marks)",
        cached_server.bodies,
    )
    report("Anthropic Messages, no caching policy", plain_server.bodies)
    keys = [body.get("prompt_cache_key") for body in openai_server.bodies]
    print("\nOpenAI Responses, PromptCaching(key='ops-v1'): prompt_cache_key of each request")
    print("  " + ", ".join(repr(key) for key in keys))
    print("  (OpenAI caches a long prompt's prefix on its own; the key routes requests to it)")


if __name__ == "__main__":
    trio.run(main)
