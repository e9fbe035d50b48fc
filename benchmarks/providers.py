"""Provider adapters: what reading a streamed response through effectagent costs, against
iterating the official SDK's own stream of the same bytes.

Run with ``.venv/bin/python benchmarks/providers.py`` (``make bench`` does); ``--rounds N`` sets
the number of measured rounds (default 40). It prints figures and never fails on them.

Method
------
A loopback HTTP/1.1 server in the same ``trio.run`` answers every request with one pre-rendered
response of **500 text deltas** in the provider's wire format — Chat Completions chunks, Responses
events, Messages events — each event its own HTTP chunk, the whole body written at once (so the
server's own cost is one write per response, the same for both readers). For each API, two
readers take turns, round after round, on connections that stay open:

* **adapter** — ``model.stream(request)`` of the effectagent adapter, every part consumed: the
  SDK sends the request, the adapter decodes the events and maps them to response parts;
* **bare SDK** — ``client.<api>.create(..., stream=True)`` and ``async for`` over the SDK's own
  stream of typed event objects (what an application using the SDK directly would do).

Both use a client with retries off and the same settings. One sample is one whole response (request
to last event); the table gives the median per response, the median per delta, and the adapter's
overhead over the bare SDK (target ≤ 10 %). Negative means the adapter is faster: it decodes the
events itself and never builds the SDK's pydantic event objects. (Run with ``-W error`` and the
bare SDK's Chat Completions stream is seen leaving its byte and event generators to the garbage
collector at ``[DONE]``; the adapter closes or runs out every generator it opens.)
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import time
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

import trio

from effectagent.ai import ModelRequest, UserMessage, close_stream
from effectagent.providers import (
    Anthropic,
    ModelSettings,
    OpenAIChat,
    OpenAIResponses,
)

DELTAS = 500
PIECE = "tok "
KEY = "sk-bench-not-a-real-key"


def _event(data: object, name: str | None = None) -> bytes:
    head = f"event: {name}\n" if name else ""
    text = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"))
    return f"{head}data: {text}\n\n".encode()


def chat_events() -> list[bytes]:
    """A Chat Completions stream of ``DELTAS`` content deltas, usage and [DONE]."""

    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        return _event(
            {
                "id": "chatcmpl-bench",
                "object": "chat.completion.chunk",
                "created": 1_700_000_000,
                "model": "gpt-4.1",
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
            }
        )

    usage = {
        "id": "chatcmpl-bench",
        "object": "chat.completion.chunk",
        "created": 1_700_000_000,
        "model": "gpt-4.1",
        "choices": [],
        "usage": {
            "prompt_tokens": 20,
            "completion_tokens": DELTAS,
            "total_tokens": 20 + DELTAS,
            "prompt_tokens_details": {"cached_tokens": 0},
        },
    }
    return [
        chunk({"role": "assistant", "content": ""}),
        *(chunk({"content": PIECE}) for _ in range(DELTAS)),
        chunk({}, "stop"),
        _event(usage),
        _event("[DONE]"),
    ]


def responses_events() -> list[bytes]:
    """A Responses stream: created, one message of ``DELTAS`` text deltas, completed."""
    sequence = iter(range(10_000))

    def event(kind: str, **fields: Any) -> bytes:
        return _event({"type": kind, "sequence_number": next(sequence), **fields}, kind)

    response = {
        "id": "resp_bench",
        "object": "response",
        "created_at": 1_700_000_000,
        "model": "gpt-4.1",
        "output": [],
    }
    item = {"id": "msg_1", "type": "message", "role": "assistant", "content": []}
    text = {"type": "output_text", "text": PIECE * DELTAS, "annotations": []}
    usage = {
        "input_tokens": 20,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": DELTAS,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": 20 + DELTAS,
    }
    where = {"item_id": "msg_1", "output_index": 0, "content_index": 0}
    return [
        event("response.created", response={**response, "status": "in_progress"}),
        event("response.output_item.added", output_index=0, item={**item, "status": "in_progress"}),
        event("response.content_part.added", **where, part={**text, "text": ""}),
        *(
            event("response.output_text.delta", **where, delta=PIECE, logprobs=[])
            for _ in range(DELTAS)
        ),
        event("response.output_text.done", **where, text=text["text"], logprobs=[]),
        event("response.content_part.done", **where, part=text),
        event(
            "response.output_item.done",
            output_index=0,
            item={**item, "status": "completed", "content": [text]},
        ),
        event("response.completed", response={**response, "status": "completed", "usage": usage}),
    ]


def anthropic_events() -> list[bytes]:
    """A Messages stream: message_start, one text block of ``DELTAS`` deltas, message_stop."""
    message: dict[str, Any] = {
        "id": "msg_bench",
        "type": "message",
        "role": "assistant",
        "content": [],
        "model": "claude-sonnet-4-5",
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": 20, "output_tokens": 1},
    }
    start = {
        "type": "content_block_start",
        "index": 0,
        "content_block": {"type": "text", "text": ""},
    }
    delta = {
        "type": "content_block_delta",
        "index": 0,
        "delta": {"type": "text_delta", "text": PIECE},
    }
    end = {
        "type": "message_delta",
        "delta": {"stop_reason": "end_turn", "stop_sequence": None},
        "usage": {"output_tokens": DELTAS},
    }
    return [
        _event({"type": "message_start", "message": message}, "message_start"),
        _event(start, "content_block_start"),
        _event({"type": "ping"}, "ping"),
        *(_event(delta, "content_block_delta") for _ in range(DELTAS)),
        _event({"type": "content_block_stop", "index": 0}, "content_block_stop"),
        _event(end, "message_delta"),
        _event({"type": "message_stop"}, "message_stop"),
    ]


def _chunked(events: list[bytes]) -> bytes:
    head = (
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
    )
    body = b"".join(b"%x\r\n%s\r\n" % (len(e), e) for e in events)
    return head + body + b"0\r\n\r\n"


RESPONSES = {
    "/v1/chat/completions": _chunked(chat_events()),
    "/v1/responses": _chunked(responses_events()),
    "/v1/messages": _chunked(anthropic_events()),
}


async def serve(stream: trio.SocketStream) -> None:
    """Answer each request on the connection with the pre-rendered response for its path."""
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
                (
                    int(line.split(b":")[1])
                    for line in lines
                    if line.lower().startswith(b"content-length:")
                ),
                0,
            )
            while len(buffer) < length:
                buffer += await stream.receive_some(1 << 16)
            buffer = buffer[length:]
            await stream.send_all(RESPONSES[path])
    except trio.BrokenResourceError:
        return


async def median_seconds(
    readers: dict[str, Callable[[], Awaitable[None]]], rounds: int
) -> dict[str, float]:
    """Median wall time of each reader over ``rounds`` interleaved rounds (after a warm-up)."""
    for _ in range(5):
        for read in readers.values():
            await read()
    gc.collect()
    samples: dict[str, list[float]] = {name: [] for name in readers}
    for _ in range(rounds):
        for name, read in readers.items():
            started = time.perf_counter()
            await read()
            samples[name].append(time.perf_counter() - started)
    return {name: statistics.median(times) for name, times in samples.items()}


async def bench_api(
    name: str, settings: ModelSettings, bare: Callable[[], Awaitable[None]], rounds: int
) -> None:
    request = ModelRequest((UserMessage.text("Count."),), max_output_tokens=1000)
    async with settings.open() as model:

        async def adapter() -> None:
            stream = model.stream(request)
            try:
                async for _ in stream:
                    pass
            finally:
                await close_stream(stream)

        medians = await median_seconds({"adapter": adapter, "bare SDK": bare}, rounds)
    ours, theirs = medians["adapter"], medians["bare SDK"]
    overhead = (ours / theirs - 1.0) * 100.0
    print(
        f"{name:<18} {ours * 1e3:>9.2f} ms {ours / DELTAS * 1e6:>8.1f} µs"
        f" {theirs * 1e3:>11.2f} ms {theirs / DELTAS * 1e6:>8.1f} µs {overhead:>+9.1f} %"
    )


async def main(rounds: int) -> None:
    import anthropic
    import openai

    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(partial(trio.serve_tcp, serve, 0, host="127.0.0.1"))
        url = f"http://127.0.0.1:{listeners[0].socket.getsockname()[1]}"
        oai = openai.AsyncOpenAI(api_key=KEY, base_url=f"{url}/v1", max_retries=0)
        claude = anthropic.AsyncAnthropic(api_key=KEY, base_url=url, max_retries=0)
        messages: Any = [{"role": "user", "content": "Count."}]

        async def bare_chat() -> None:
            stream = await oai.chat.completions.create(
                model="gpt-4.1",
                messages=messages,
                stream=True,
                stream_options={"include_usage": True},
                max_completion_tokens=1000,
            )
            async for _ in stream:
                pass

        async def bare_responses() -> None:
            stream = await oai.responses.create(
                model="gpt-4.1", input=messages, stream=True, store=False, max_output_tokens=1000
            )
            async for _ in stream:
                pass

        async def bare_anthropic() -> None:
            stream = await claude.messages.create(
                model="claude-sonnet-4-5", messages=messages, max_tokens=1000, stream=True
            )
            async for _ in stream:
                pass

        print(f"one streamed response of {DELTAS} text deltas, median of {rounds} rounds")
        print(
            f"{'API':<18} {'adapter':>12} {'/delta':>11} {'bare SDK':>14} {'/delta':>11}"
            f" {'overhead':>11}"
        )
        try:
            await bench_api(
                "chat completions",
                OpenAIChat("gpt-4.1", api_key=KEY, base_url=f"{url}/v1"),
                bare_chat,
                rounds,
            )
            await bench_api(
                "responses",
                OpenAIResponses("gpt-4.1", api_key=KEY, base_url=f"{url}/v1"),
                bare_responses,
                rounds,
            )
            await bench_api(
                "anthropic messages",
                Anthropic("claude-sonnet-4-5", api_key=KEY, base_url=url),
                bare_anthropic,
                rounds,
            )
        finally:
            with trio.CancelScope(shield=True):
                await oai.close()
                await claude.close()
        nursery.cancel_scope.cancel()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--rounds", type=int, default=40, help="measured rounds (default 40)")
    trio.run(main, parser.parse_args().rounds)
