"""The same client over streamable HTTP, against the demo server listening on 127.0.0.1."""

from __future__ import annotations

import gc
import json
import logging
import os
import signal
import socket
import subprocess
import sys
from collections.abc import AsyncGenerator, Iterator
from contextlib import aclosing
from functools import partial
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio

from capabilities.mcp import (
    HttpServer,
    McpConnectError,
    McpLimits,
    McpToolError,
    McpUnavailable,
    connect,
)
from effectagent import Agent, AgentPolicy, open_runtime
from effectagent.ai import ToolCallContext
from effectagent.core import ToolSuccess, ToolUnknownOutcome
from effectagent.testing import ScriptedModel, Turn

from .conftest import DEMO, LIMITS, alive, calls

CALL = ToolCallContext("call-1", "tool")

# The SDK's streamable HTTP client (mcp 2.3.0) returns from inside ``async for sse in
# EventSource(...)`` once a response arrived, after closing the response but not the generators
# of the SSE parser and httpx2's byte streams; Trio reports each as a ResourceWarning when it is
# garbage collected. Only those generators' warnings are let through here, and every test of this
# module collects garbage before it ends, so none of them can surface in a later test.
pytestmark = pytest.mark.filterwarnings(
    r"ignore:Async generator '(httpx2\._sse\.EventSource\.__aiter__|httpx2\._models\.Response\."
    r"aiter_(text|bytes|raw)|httpcore2\._async\.connection_pool\.PoolByteStream\.__aiter__)' "
    r"was garbage collected:ResourceWarning"
)


@pytest.fixture(autouse=True)
def _collect_garbage() -> Iterator[None]:
    yield
    gc.collect()


async def invoke(connection: Any, name: str, arguments: dict[str, Any]) -> Any:
    tool = {tool.name: tool for tool in connection.tools}[name]
    return await tool.handler(arguments, CALL)


async def test_tools_resources_and_list_changed_over_http(demo_http: HttpServer) -> None:
    async with connect(demo_http) as connection:
        assert connection.identity.name == "demo"
        added = await invoke(connection, "demo_add", {"a": 1, "b": 2})
        assert added["structured"] == {"sum": 3}
        with pytest.raises(McpToolError, match="it failed"):
            await invoke(connection, "demo_fail", {})
        (greeting, _) = await connection.list_resources()
        assert greeting.uri == "demo://greeting"
        # The call returns once the list it changed is adopted: no waiting for it after.
        for name in ["late", "later", "latest"]:
            await invoke(connection, "demo_add_tool", {"name": name})
            assert f"demo_{name}" in connection.remote_names
        assert connection.version == 4


async def test_a_server_killed_mid_call_over_http_is_an_unknown_outcome(
    demo_http: HttpServer, call_log: Path
) -> None:
    agent = Agent(
        "mcp",
        "Use the tools.",
        AgentPolicy(max_turns=4, max_tool_calls=4, max_duration=120, tool_concurrency=1),
        tool_sources=(demo_http.key,),
    )
    async with connect(demo_http) as connection:
        pid = int((await invoke(connection, "demo_pid", {}))["content"][0]["text"])
        model = ScriptedModel.layer([Turn.tool_calls(("demo_die", {})), Turn.text("gone")])
        async with open_runtime(connection.layer() + model, agents=[agent]) as runtime:
            with trio.fail_after(60):
                result = await runtime.run(agent, "Go.")
    (died,) = result.outcomes
    assert isinstance(died, ToolUnknownOutcome)
    assert [c["name"] for c in calls(call_log)] == ["pid", "die"]
    # The server process is gone. The client can see the connection close a moment before the
    # exiting process is a zombie (the kernel closes its sockets first), so wait for its exit
    # itself — a pidfd turns readable then — rather than look at it once.
    pidfd = os.pidfd_open(pid)
    try:
        with trio.fail_after(30):
            await trio.lowlevel.wait_readable(pidfd)
    finally:
        os.close(pidfd)
    assert not alive(pid)


async def test_a_call_through_the_engine_over_http(demo_http: HttpServer) -> None:
    agent = Agent("mcp", "Use the tools.", tool_sources=(demo_http.key,))
    async with connect(demo_http) as connection:
        model = ScriptedModel.layer(
            [Turn.tool_calls(("demo_echo", {"text": "hi"})), Turn.text("ok")]
        )
        async with open_runtime(connection.layer() + model, agents=[agent]) as runtime:
            result = await runtime.run(agent, "Go.")
    (echo,) = result.outcomes
    assert isinstance(echo, ToolSuccess)
    assert echo.result["content"] == [{"type": "text", "text": "hi"}]


async def test_nothing_listening_is_a_connect_error(demo_http: HttpServer) -> None:
    closed = trio.socket.socket()
    await closed.bind(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()  # bound then closed: nothing listens there
    nowhere = HttpServer(
        f"http://127.0.0.1:{port}/mcp", name="nowhere", limits=McpLimits(connect_timeout=10)
    )
    with trio.fail_after(30), pytest.raises(McpConnectError, match="'nowhere'"):
        async with connect(nowhere):
            pass
    assert attrs.evolve(nowhere, prefix="x").key is not nowhere.key


def test_a_url_with_credentials_is_refused_without_echoing_them() -> None:
    """The URL names the server in messages, logs and spans (its host is the default name):
    credentials go in headers, never in it."""
    canary = "s3cret-canary"
    for url in (f"https://ann:{canary}@mcp.example/mcp", f"http://{canary}@127.0.0.1:9/mcp"):
        with pytest.raises(ValueError, match="must not hold credentials") as caught:
            HttpServer(url)
        assert canary not in str(caught.value)
    with pytest.raises(ValueError, match="http:// or https://") as caught:
        HttpServer(f"ftp://ann:{canary}@mcp.example")
    assert canary not in str(caught.value)
    assert HttpServer("https://mcp.example:8443/mcp?x=@").name == "mcp.example:8443"


async def test_headers_are_sent_with_every_request(demo_http: HttpServer, call_log: Path) -> None:
    with_headers = attrs.evolve(demo_http, headers={"Authorization": "Bearer not-a-secret"})
    assert "not-a-secret" not in repr(with_headers)
    async with connect(with_headers) as connection:
        echoed = await invoke(connection, "demo_echo", {"text": "with headers"})
    assert echoed["content"][0]["text"] == "with headers"
    assert calls(call_log)[-1]["authorization"] == "Bearer not-a-secret"


CANARY = "canary-5e1d0c9b7a"


async def _json_rpc_requests(
    stream: trio.SocketStream,
) -> AsyncGenerator[tuple[str, dict[str, str], dict[str, Any]], None]:
    """Each JSON-RPC request a client sends on ``stream`` over HTTP/1.1: its target, headers
    (lower-case names) and body. A notification (no id) is answered 202 here."""
    buffer = b""
    while True:
        while b"\r\n\r\n" not in buffer:
            data = await stream.receive_some(65536)
            if not data:
                return
            buffer += data
        head, buffer = buffer.split(b"\r\n\r\n", 1)
        request_line, *lines = head.decode("latin-1").split("\r\n")
        fields = dict(line.split(":", 1) for line in lines)
        headers = {name.lower(): value.strip() for name, value in fields.items()}
        length = int(headers.get("content-length", "0"))
        while len(buffer) < length:
            buffer += await stream.receive_some(65536)
        body, buffer = buffer[:length], buffer[length:]
        request = json.loads(body) if body else {}
        if "id" not in request:
            await stream.send_all(b"HTTP/1.1 202 Accepted\r\nContent-Length: 0\r\n\r\n")
            continue
        yield request_line.split(" ")[1], headers, request


async def _send_json(stream: trio.SocketStream, answer: dict[str, Any]) -> None:
    data = json.dumps(answer).encode()
    await stream.send_all(
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
        + f"Content-Length: {len(data)}\r\n\r\n".encode()
        + data
    )


async def _echoing_server(stream: trio.SocketStream) -> None:
    """Answers every JSON-RPC request with an error that quotes the request's Authorization
    header and target: a server (or a proxy) that says back what it was sent."""
    async with aclosing(_json_rpc_requests(stream)) as requests:
        async for target, headers, request in requests:
            said = f"refused {headers.get('authorization')} at {target}"
            error = {"code": -32600, "message": said}
            await _send_json(stream, {"jsonrpc": "2.0", "id": request["id"], "error": error})


async def test_an_error_that_echoes_a_header_or_the_query_does_not_carry_them() -> None:
    """The connection wraps what the transport and the server said into McpConnectError: a
    header value or a query parameter in it reached messages, logs and the model."""
    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(
            partial(trio.serve_tcp, _echoing_server, 0, host="127.0.0.1")
        )
        port = listeners[0].socket.getsockname()[1]
        server = HttpServer(
            f"http://127.0.0.1:{port}/mcp?api_key={CANARY}q",
            headers={"Authorization": f"Bearer {CANARY}h"},
            name="echoing",
            limits=McpLimits(connect_timeout=20),
        )
        with trio.fail_after(30), pytest.raises(McpConnectError, match="refused") as caught:
            async with connect(server):
                pass  # pragma: no cover - refused before
        nursery.cancel_scope.cancel()
    assert CANARY not in str(caught.value)
    assert CANARY not in caught.value.reason
    assert caught.value.__cause__ is None  # the SDK's error, quoting both, is not chained
    assert "api_key=***" in str(caught.value)


async def test_the_sdks_own_spans_do_not_carry_a_header_or_the_query(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The SDK makes a span of its own for each request, under the global tracer provider (the
    one ``Telemetry()`` uses by default), and gives it a protocol error's message as its status:
    a server that echoed the Authorization header or the query put the token in that span."""
    import mcp.shared._otel
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    # What a global tracer provider gives the SDK, without setting one for the whole process.
    monkeypatch.setattr(mcp.shared._otel, "_tracer", provider.get_tracer("mcp-python-sdk"))
    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(
            partial(trio.serve_tcp, _echoing_server, 0, host="127.0.0.1")
        )
        port = listeners[0].socket.getsockname()[1]
        server = HttpServer(
            f"http://127.0.0.1:{port}/mcp?api_key={CANARY}q",
            headers={"Authorization": f"Bearer {CANARY}h"},
            name="echoing",
            limits=McpLimits(connect_timeout=20),
        )
        with trio.fail_after(30), pytest.raises(McpConnectError, match="refused"):
            async with connect(server):
                pass  # pragma: no cover - refused before
        nursery.cancel_scope.cancel()
    spans = exporter.get_finished_spans()
    refused = [span for span in spans if span.status.description]
    assert refused, "the SDK made no span with the server's error"
    assert [span.status.description for span in refused] == ["refused *** at /mcp?api_key=***"]
    assert not [span.name for span in spans if CANARY in span.to_json()]


async def _error_result_server(stream: trio.SocketStream) -> None:
    """Lists one tool, ``echo``, whose every call is an error result (``isError``) quoting the
    request's Authorization header and target: a tool that says back what it was sent."""
    async with aclosing(_json_rpc_requests(stream)) as requests:
        async for target, headers, request in requests:
            method, params = request["method"], request.get("params") or {}
            result: dict[str, Any]
            if method == "initialize":
                result = {
                    "protocolVersion": params["protocolVersion"],
                    "capabilities": {"tools": {}},
                    "serverInfo": {"name": "erring", "version": "1"},
                }
            elif method == "tools/list":
                result = {"tools": [{"name": "echo", "inputSchema": {"type": "object"}}]}
            else:
                said = f"refused {headers.get('authorization')} at {target}"
                result = {"isError": True, "content": [{"type": "text", "text": said}]}
            await _send_json(stream, {"jsonrpc": "2.0", "id": request["id"], "result": result})


async def test_an_error_result_that_echoes_a_header_or_the_query_does_not_carry_them() -> None:
    """An error result's text became the McpToolError the model reads as it was: a tool that
    quoted the request's Authorization header or query handed the model the token."""
    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(
            partial(trio.serve_tcp, _error_result_server, 0, host="127.0.0.1")
        )
        port = listeners[0].socket.getsockname()[1]
        server = HttpServer(
            f"http://127.0.0.1:{port}/mcp?api_key={CANARY}q",
            headers={"Authorization": f"Bearer {CANARY}h"},
            name="erring",
            limits=McpLimits(connect_timeout=20, call_timeout=20),
        )
        async with connect(server) as connection:
            with pytest.raises(McpToolError) as caught:
                await invoke(connection, "echo", {})
        nursery.cancel_scope.cancel()
    assert caught.value.message.startswith("refused *** at /mcp?api_key=***")
    assert CANARY not in caught.value.message


async def test_the_sdk_and_http_logs_do_not_show_the_query(
    demo_http: HttpServer, caplog: pytest.LogCaptureFixture
) -> None:
    """The SDK logs the URL it connects to (DEBUG) and httpx2 each request's URL (INFO)."""
    keyed = attrs.evolve(demo_http, url=f"{demo_http.url}?api_key={CANARY}")
    with caplog.at_level(logging.DEBUG):
        async with connect(keyed) as connection:
            echoed = await invoke(connection, "demo_echo", {"text": "keyed"})
    assert echoed["content"][0]["text"] == "keyed"
    logged = [record.getMessage() for record in caplog.records]
    assert any("api_key=***" in message for message in logged)
    assert not [message for message in logged if CANARY in message]


async def _json_server(stream: trio.SocketStream) -> None:
    """A streamable HTTP server that answers every request with plain JSON (no events): the
    handshake, a listing of ``echo`` and ``big``, and their calls (``big`` answers with ``n``
    bytes of text)."""
    async with aclosing(_json_rpc_requests(stream)) as requests:
        async for _, _, request in requests:
            method, params = request["method"], request.get("params") or {}
            result: dict[str, Any]
            if method == "initialize":
                result = {
                    "protocolVersion": params["protocolVersion"],
                    "capabilities": {"tools": {}},
                    "serverInfo": {"name": "json", "version": "1"},
                }
            elif method == "tools/list":
                schema = {"type": "object"}
                result = {"tools": [{"name": n, "inputSchema": schema} for n in ("echo", "big")]}
            else:
                arguments = params.get("arguments") or {}
                text = "B" * arguments["n"] if params["name"] == "big" else str(arguments.get("q"))
                result = {"content": [{"type": "text", "text": text}]}
            try:
                await _send_json(stream, {"jsonrpc": "2.0", "id": request["id"], "result": result})
            except trio.BrokenResourceError:  # the client stopped reading (the answer too large)
                return


async def test_a_json_answer_over_max_message_bytes_fails_its_request_not_the_connection() -> None:
    """A plain JSON answer was read whole, whatever its size (max_message_bytes bounded only
    server-sent events): a server could make the client hold gigabytes. It is now read up to
    the bound; the request it answers fails saying why, and the connection stays usable."""
    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(partial(trio.serve_tcp, _json_server, 0, host="127.0.0.1"))
        port = listeners[0].socket.getsockname()[1]
        limits = McpLimits(connect_timeout=20, call_timeout=20, max_message_bytes=64 * 1024)
        server = HttpServer(f"http://127.0.0.1:{port}/mcp", name="json", limits=limits)
        async with connect(server) as connection:
            fits = await invoke(connection, "big", {"n": 60_000})
            assert len(fits["content"][0]["text"]) == 60_000
            with pytest.raises(McpToolError) as caught:
                await invoke(connection, "big", {"n": 2_000_000})
            assert "more than 65536 bytes (max_message_bytes)" in caught.value.message
            echoed = await invoke(connection, "echo", {"q": "still here"})
            assert echoed["content"][0]["text"] == "still here"
        nursery.cancel_scope.cancel()


async def test_a_server_gone_while_idle_over_http_is_unavailable_not_unknown(
    demo_http: HttpServer, call_log: Path
) -> None:
    """An HTTP server that exited between calls made the next call an unknown outcome, though
    its request could not even be connected: nothing reached the server."""
    async with connect(demo_http) as connection:
        pid = int((await invoke(connection, "demo_pid", {}))["content"][0]["text"])
        os.kill(pid, signal.SIGKILL)
        pidfd = os.pidfd_open(pid)
        try:
            with trio.fail_after(30):
                await trio.lowlevel.wait_readable(pidfd)
        finally:
            os.close(pidfd)
        with trio.fail_after(60), pytest.raises(McpUnavailable, match="the call was not sent"):
            await invoke(connection, "demo_echo", {"text": "after"})
        assert connection.lost is not None
        assert "could not be reached" in connection.lost
        with pytest.raises(McpUnavailable, match="the call was not sent"):
            await invoke(connection, "demo_echo", {"text": "again"})
    assert [c["name"] for c in calls(call_log)] == ["pid"]


def _serve_demo(port: int, call_log: Path) -> tuple[subprocess.Popen[bytes], int]:
    """The demo server over streamable HTTP on ``port`` of 127.0.0.1 (0: a free one)."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", port))
    listener.listen(64)
    process = subprocess.Popen(
        [sys.executable, str(DEMO), "http", str(listener.fileno())],
        pass_fds=[listener.fileno()],
        env={**os.environ, "DEMO_CALL_LOG": str(call_log)},
        stdin=subprocess.DEVNULL,
    )
    bound = listener.getsockname()[1]
    listener.close()
    return process, bound


async def test_a_restarted_server_that_forgot_the_session_loses_the_connection(
    call_log: Path,
) -> None:
    """An HTTP server restarted between calls answers the old session's requests with 404: the
    connection read as usable (``lost`` None) and every call failed as the tool's own error."""
    first, port = _serve_demo(0, call_log)
    processes = [first]
    try:
        server = HttpServer(f"http://127.0.0.1:{port}/mcp", name="h", prefix="demo", limits=LIMITS)
        async with connect(server) as connection:
            await invoke(connection, "demo_echo", {"text": "before"})
            first.kill()
            first.wait()
            processes.append(_serve_demo(port, call_log)[0])
            with trio.fail_after(60), pytest.raises(McpUnavailable) as caught:
                await invoke(connection, "demo_echo", {"text": "after"})
            assert "no longer knows this connection's session" in caught.value.message
            assert connection.lost is not None
            assert "no longer knows this connection's session" in connection.lost
    finally:
        for process in processes:
            process.kill()
            process.wait()
    assert [c["arguments"]["text"] for c in calls(call_log)] == ["before"]
