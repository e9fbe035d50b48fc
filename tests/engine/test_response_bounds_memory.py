"""Bounded memory, measured: a model that streams without end, and a tool call with 100 MB of
arguments, are stopped at their caps while the process's resident memory stays within a few
times the cap — measured in a process each test starts for itself (this module, run as a script),
so the figure is of that process alone.

Two of the scenarios go through the real stack — the OpenAI-compatible adapter on the ``openai``
SDK, over HTTP, from a server in the same process that streams server-sent events until the client
hangs up (or, as a safety net for a broken engine, until it sent 256 MiB). The third gives the
engine parts directly, with the response cap raised far above 100 MB, to show that a too-large
argument is not kept even when the response may go on.

Each scenario first runs a small response through the same path (so imports, pools and caches are
warm), then reads the process's peak resident set size, runs the scenario, and reports how much
the peak grew: memory the scenario needed beyond the warm-up's. The assertion is on that growth
and on how much the server sent — what the caps guarantee — never on time.
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
from collections.abc import AsyncIterator
from functools import partial
from pathlib import Path
from typing import Any

import attrs
import trio

from effectagent import Agent, AgentPolicy, Toolkit, open_runtime
from effectagent.ai import (
    FinishPart,
    LanguageModelService,
    ModelRequest,
    ModelResponse,
    ResponsePart,
    Tool,
    ToolCallContext,
    ToolMessage,
    ToolParamsDeltaPart,
    ToolParamsStartPart,
    generate,
)
from effectagent.core import ModelFailed, ResponseLimits, ToolCallSettled, ToolInvalidInput
from effectagent.effect import Layer
from effectagent.providers import model_layer
from effectagent.testing import Turn

ROOT = Path(__file__).resolve().parents[2]
MiB = 1024 * 1024
#: What the server sends at most, whatever the client does (a broken engine would read it all).
SAFETY_NET = 256 * MiB


@attrs.frozen
class Note:
    text: str


WRITE = Tool("write", "Write a note.", parameters=Note, success=str)


async def _write(params: Note, call: ToolCallContext) -> str:
    await trio.lowlevel.checkpoint()
    return "written"


def _chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
    choice = {"index": 0, "delta": delta, "finish_reason": finish}
    body = {"id": "c1", "object": "chat.completion.chunk", "created": 0, "model": "m"}
    return f"data: {json.dumps(body | {'choices': [choice]})}\n\n".encode()


class Server:
    """Streams one endless response per request: text, or one tool call's arguments."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.sent = 0

    def events(self, warm: bool) -> list[bytes]:
        if warm:
            return [_chunk({"content": "Hi."}), _chunk({}, "stop"), b"data: [DONE]\n\n"]
        if self.kind == "text":
            return [_chunk({"content": "x" * 8192})]
        start = {"index": 0, "id": "call_1", "function": {"name": "write", "arguments": ""}}
        return [_chunk({"tool_calls": [start | {"type": "function"}]})]

    def piece(self) -> bytes:
        if self.kind == "text":
            return _chunk({"content": "x" * 8192}) * 8
        return _chunk({"tool_calls": [{"index": 0, "function": {"arguments": "x" * 8192}}]}) * 8

    async def serve(self, stream: trio.SocketStream) -> None:
        data = b""
        while b"\r\n\r\n" not in data:
            data += await stream.receive_some()
        head, body = data.split(b"\r\n\r\n", 1)
        length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
        while len(body) < length:
            body += await stream.receive_some()
        warm = json.loads(body)["messages"][-1]["content"] == "warm up"
        head = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n"
        try:
            await stream.send_all(head + b"".join(self.events(warm)))
            if not warm:
                piece = self.piece()
                while self.sent < SAFETY_NET:
                    await stream.send_all(piece)
                    self.sent += len(piece)
                await stream.send_all(_chunk({}, "stop") + b"data: [DONE]\n\n")
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass  # the client hung up: what the caps are for
        finally:
            await stream.aclose()


def _peak_rss() -> int:
    """The process's peak resident set size so far, in bytes (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


async def _over_http(kind: str) -> dict[str, Any]:
    server = Server(kind)
    agent = Agent("writer", "Write.", AgentPolicy(), Toolkit(WRITE))
    async with trio.open_nursery() as nursery:
        (listener,) = await nursery.start(
            partial(trio.serve_tcp, server.serve, 0, host="127.0.0.1")
        )
        port = listener.socket.getsockname()[1]
        model = model_layer("openai-compatible:m", base_url=f"http://127.0.0.1:{port}/v1")
        async with open_runtime(
            agent.toolkit.handlers({WRITE: _write}) + model, agents=[agent]
        ) as rt:
            await rt.run(agent, "warm up")
            before = _peak_rss()
            result = await rt.run(agent, "go")
            after = _peak_rss()
        nursery.cancel_scope.cancel()
    error = result.error
    return {
        "growth": after - before,
        "sent": server.sent,
        "status": result.status,
        "error": [error.error_tag, error.message] if isinstance(error, ModelFailed) else None,
    }


class HugeArgumentModel:
    """Answers a prompt with one tool call whose arguments are ``size`` bytes — one 64 KiB piece
    streamed again and again, so the model itself holds 64 KiB — cut off by the length limit (the
    engine never gets them whole); and a tool result with text."""

    def __init__(self, size: int) -> None:
        self.size = size

    def stream(self, request: ModelRequest) -> AsyncIterator[ResponsePart]:
        if isinstance(request.messages[-1], ToolMessage):
            return _parts(Turn.text("Too big.").parts)
        return self._call()

    async def _call(self) -> AsyncIterator[ResponsePart]:
        piece = "x" * (64 * 1024)
        yield ToolParamsStartPart("call_1", "write")
        for _ in range(self.size // len(piece)):
            await trio.lowlevel.checkpoint()
            yield ToolParamsDeltaPart("call_1", piece)
        yield FinishPart("length")

    async def generate(self, request: ModelRequest) -> ModelResponse:
        return await generate(self, request)


async def _parts(parts: tuple[ResponsePart, ...]) -> AsyncIterator[ResponsePart]:
    for part in parts:
        yield part


async def _kept_out() -> dict[str, Any]:
    model = HugeArgumentModel(320 * 1024)  # past the argument cap: the warm-up takes that path
    limits = ResponseLimits(max_response_bytes=1024 * MiB)
    agent = Agent("writer", "Write.", AgentPolicy(response_limits=limits), Toolkit(WRITE))
    layer = agent.toolkit.handlers({WRITE: _write}) + Layer.succeed(LanguageModelService, model)
    async with open_runtime(layer, agents=[agent]) as runtime:
        await runtime.run(agent, "warm up")
        model.size = 100 * MiB
        before = _peak_rss()
        result = await runtime.run(agent, "go")
        after = _peak_rss()
        log = list(await runtime.log.entries(result.conversation_id))
    (settled,) = [
        e.record
        for e in log
        if isinstance(e.record, ToolCallSettled) and e.record.run_id == result.run_id
    ]
    outcome = settled.outcome
    return {
        "growth": after - before,
        "status": result.status,
        "outcome": outcome.message if isinstance(outcome, ToolInvalidInput) else repr(outcome),
        "log_bytes": len(repr(log)),
    }


def _probe(scenario: str) -> dict[str, Any]:
    """Run ``scenario`` in a fresh process (this module as a script) and read its report."""
    done = subprocess.run(
        [sys.executable, "-m", "tests.engine.test_response_bounds_memory", scenario],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    report: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return report


def test_an_endless_stream_is_stopped_at_the_response_cap_with_bounded_memory() -> None:
    report = _probe("text")
    assert report["status"] == "failed"
    assert report["error"] == [
        "ResponseTooLarge",
        "the response grew past 4 MiB, the most a response may be, and was stopped there",
    ]
    # The server got no further than the cap plus what the sockets buffer, far from its end.
    assert report["sent"] < 48 * MiB
    assert report["growth"] < 32 * MiB, report


def test_a_100_mb_argument_is_stopped_at_the_response_cap_with_bounded_memory() -> None:
    report = _probe("argument")
    assert report["status"] == "failed"
    assert report["error"][0] == "ResponseTooLarge"
    assert report["sent"] < 48 * MiB
    assert report["growth"] < 32 * MiB, report


def test_a_100_mb_argument_under_a_raised_response_cap_is_not_kept() -> None:
    """The response may go on (1 GiB cap), so all 100 MB stream through the engine: the call's
    arguments are kept only up to their own cap, and the call settles as too large."""
    report = _probe("kept-out")
    assert report["status"] == "completed"
    assert report["outcome"] == "arguments of 100 MiB exceed the limit of 256 KiB; not executed"
    assert report["log_bytes"] < 20_000
    assert report["growth"] < 16 * MiB, report


def _main(scenario: str) -> None:
    if scenario in ("text", "argument"):
        report = trio.run(_over_http, scenario)
    elif scenario == "kept-out":
        report = trio.run(_kept_out)
    else:
        raise SystemExit(f"unknown scenario {scenario!r}")
    print(json.dumps(report))


if __name__ == "__main__":
    _main(sys.argv[1])
