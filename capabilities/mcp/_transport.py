"""The transport under a connection: a stdio server's process or a streamable HTTP endpoint, as the
SDK's pair of message streams (what its ``JSONRPCDispatcher`` reads and writes).

**stdio is ours, not the SDK's ``stdio_client``** (on POSIX), for two bounds the SDK's has not:

* a line (one message) the server writes to stdout is read in linear time and may be at most
  ``max_message_bytes`` long: past that the connection is dropped, saying why (the SDK's reader
  joins the pieces of a line again for each piece it reads — quadratic in the line's length —
  and keeps all of it);
* the server's stderr is a pipe read into a ring of its last :data:`STDERR_TAIL` bytes, which a
  failure quotes (the SDK writes it to a file, which a chatty server grows without bound).

The process runs in a session of its own (its own process group). Leaving the transport closes
its stdin, waits a moment for it to exit, then sends SIGTERM and at last SIGKILL to the whole
group; every wait is bounded and shielded from cancellation, so no process outlives the block.

The SDK is imported inside :func:`open_transport`, never when this module is imported.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import AsyncExitStack, asynccontextmanager, suppress
from typing import Any

import trio

from ._servers import HttpServer, McpServer, StdioServer

__all__ = ["STDERR_TAIL", "StderrTail", "open_transport"]

#: How much of the end of a stdio server's stderr is kept, in bytes.
STDERR_TAIL = 4096

_CHUNK = 64 * 1024
# Bounded waits of the shutdown: for the writer to hand over what the session sent, for the
# process to exit after its stdin closed, after SIGTERM, after SIGKILL, and for stderr's end.
_FLUSH = 0.5
_EXIT = 2.0
_STDERR_END = 0.5


class StderrTail:
    """The last :data:`STDERR_TAIL` bytes a stdio server wrote to its stderr."""

    __slots__ = ("_tail",)

    def __init__(self) -> None:
        self._tail = b""

    def add(self, chunk: bytes) -> None:
        """Keep ``chunk``, and as much of what came before as the ring holds."""
        self._tail = (self._tail + chunk)[-STDERR_TAIL:]

    def clause(self) -> str:
        """The end of what the server wrote, as a clause to add to an error message ("" when it
        wrote nothing)."""
        text = self._tail.decode("utf-8", errors="replace").strip()
        return f"; it wrote to stderr: ...{text}" if text else ""


async def open_transport(
    server: McpServer,
    stack: AsyncExitStack,
    stderr: StderrTail,
    dropped: Callable[[str], None],
    unsent: Callable[[str | None, str, bool], None],
) -> tuple[Any, Any]:
    """The (read, write) message streams to ``server``, entered into ``stack``: a stdio server's
    process is started (the end of its stderr kept in ``stderr``), an HTTP endpoint reached with
    the server's headers. ``dropped`` is told why, when the transport drops the connection itself
    (a message over ``max_message_bytes``); ``unsent`` is told, over streamable HTTP, that the
    server is gone for this connection — with the id of the request that found out (a string
    id: the connection's own; None for another), why, and whether it was sent at all (see
    ``_http_client``). Leaving ``stack`` closes them (and stops the process).

    Cancellation: what was entered is left by ``stack``.
    """
    limit = server.limits.max_message_bytes
    if isinstance(server, StdioServer):
        if sys.platform == "win32":  # pragma: no cover - no process groups: the SDK's transport
            from mcp import StdioServerParameters, stdio_client

            params = StdioServerParameters(
                command=server.command,
                args=list(server.args),
                env=dict(server.env) if server.env is not None else None,
                cwd=server.cwd,
            )
            streams = await stack.enter_async_context(stdio_client(params))
            return streams[0], streams[1]
        return await stack.enter_async_context(_stdio(server, limit, stderr, dropped))
    assert isinstance(server, HttpServer)
    from mcp.client.streamable_http import streamable_http_client

    client = await stack.enter_async_context(_http_client(server.headers, limit, unsent))
    streams = await stack.enter_async_context(
        streamable_http_client(server.url, http_client=client, max_sse_event_size=limit)
    )
    return streams[0], streams[1]


def _http_client(
    headers: Mapping[str, str] | None, limit: int, unsent: Callable[[str | None, str, bool], None]
) -> Any:
    """The HTTP client of a streamable HTTP connection: the SDK's timeouts (30 s, a read 300 s),
    the server's headers, and a transport that ends a plain (not event-stream) response at more
    than ``limit`` bytes — the SDK reads a JSON answer whole, without a bound of its own, and
    then fails the request it answers with the reason.

    Two answers say that the server is gone for good, and tell ``unsent`` (before the SDK sees
    them): a POST that fails to connect (nothing listens any more: the server exited while
    idle) was not sent at all — the SDK then closes the connection, and a call would read as
    one in flight; and a 404 to a request that carries the session's id means, by the
    protocol, that the server no longer knows the session (it restarted, or ended it) — the
    request was not run, and no later one will be: the SDK would pass each on as an error of
    its own, with the connection still open."""
    import httpx2

    class _Bounded(httpx2.AsyncByteStream):
        def __init__(self, body: httpx2.AsyncByteStream) -> None:
            self._body = body

        async def __aiter__(self) -> AsyncIterator[bytes]:
            seen = 0
            chunks = aiter(self._body)
            try:
                async for chunk in chunks:
                    seen += len(chunk)
                    if seen > limit:
                        raise httpx2.StreamError(
                            f"the server sent a message of more than {limit} bytes "
                            "(max_message_bytes): it was not read further"
                        )
                    yield chunk
            finally:  # the body's own generator, left early, is closed now, not collected
                close = getattr(chunks, "aclose", None)
                if close is not None:
                    await close()

        async def aclose(self) -> None:
            await self._body.aclose()

    class _Transport(httpx2.AsyncBaseTransport):
        def __init__(self) -> None:
            self._inner = httpx2.AsyncHTTPTransport()

        async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
            try:
                response = await self._inner.handle_async_request(request)
            except (httpx2.ConnectError, httpx2.ConnectTimeout) as exc:
                if request.method == "POST":
                    why = f"the server could not be reached: {type(exc).__name__}: {exc}"
                    unsent(_request_id(request), why, False)
                raise
            if (
                response.status_code == 404
                and request.method in ("POST", "GET")
                and request.headers.get("mcp-session-id")
            ):
                why = (
                    "the server no longer knows this connection's session: it restarted or ended it"
                )
                unsent(_request_id(request) if request.method == "POST" else None, why, True)
            kind = response.headers.get("content-type", "").lower()
            if not kind.startswith("text/event-stream"):  # events are bounded one by one
                assert isinstance(response.stream, httpx2.AsyncByteStream)
                response.stream = _Bounded(response.stream)
            return response

        async def aclose(self) -> None:
            await self._inner.aclose()

    return httpx2.AsyncClient(
        headers=dict(headers) if headers else None,
        timeout=httpx2.Timeout(30.0, read=300.0),
        transport=_Transport(),
    )


def _request_id(request: Any) -> str | None:
    """The string id of the JSON-RPC request an HTTP request carries (None for anything else)."""
    try:
        body = json.loads(request.content)
    except (ValueError, TypeError, RuntimeError):  # RuntimeError: a body not read yet
        return None
    found = body.get("id") if isinstance(body, dict) else None
    return found if isinstance(found, str) else None


@asynccontextmanager
async def _stdio(
    server: StdioServer, limit: int, stderr: StderrTail, dropped: Callable[[str], None]
) -> AsyncIterator[tuple[Any, Any]]:
    """The server's process, its stdout read line by line into messages and the session's
    messages written to its stdin, for the duration of the block (module notes)."""
    import anyio
    from mcp.client.stdio import get_default_environment

    env = get_default_environment() | dict(server.env or {})
    process = await trio.lowlevel.open_process(
        [server.command, *server.args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        cwd=server.cwd,
        start_new_session=True,
    )
    # No checkpoint until the nursery is entered: a cancellation here would leak the process.
    read_in, read_out = anyio.create_memory_object_stream[Any](0)
    write_in, write_out = anyio.create_memory_object_stream[Any](0)
    writer_done, stderr_done, closing = trio.Event(), trio.Event(), trio.Event()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_read_messages, process.stdout, read_in, limit, dropped, closing)
        nursery.start_soon(_write_messages, process.stdin, write_out, read_in, writer_done)
        nursery.start_soon(_read_stderr, process.stderr, stderr, stderr_done)
        try:
            yield read_out, write_in
        finally:
            closing.set()  # from now on the end of its stdout is ours, not the server's doing
            with trio.CancelScope(shield=True):
                read_out.close()
                write_in.close()
                with trio.move_on_after(_FLUSH):
                    await writer_done.wait()
                await _stop(process)
                with trio.move_on_after(_STDERR_END):
                    await stderr_done.wait()
                nursery.cancel_scope.cancel()
                for stream in (process.stdin, process.stdout, process.stderr):
                    if stream is not None:
                        with suppress(trio.ClosedResourceError, trio.BrokenResourceError, OSError):
                            await stream.aclose()


async def _read_messages(
    stdout: Any, messages: Any, limit: int, dropped: Callable[[str], None], closing: trio.Event
) -> None:
    """Each line of the server's stdout parsed into a message (or the parser's error, which
    the session is handed as the SDK's transport hands it), in linear time. A line longer than
    ``limit`` drops the connection (``dropped`` is told); from then on, and once the session is
    gone, what the server writes is read and thrown away, so it never blocks on a full pipe.
    The end of its stdout before we are ``closing`` (the server exited, or closed it) tells
    ``dropped`` too, at once: a call made afterwards is then known not to have been sent."""
    import anyio
    import mcp_types as types
    from mcp.shared.message import SessionMessage

    parse = types.jsonrpc_message_adapter.validate_json
    gone = (anyio.ClosedResourceError, anyio.BrokenResourceError)
    pending = bytearray()
    reading = True
    try:
        while chunk := await stdout.receive_some(_CHUNK):
            start = 0
            while reading:
                end = chunk.find(b"\n", start)
                piece = chunk[start:] if end < 0 else chunk[start:end]
                if len(pending) + len(piece) > limit:
                    dropped(
                        f"the server sent a message of more than {limit} bytes "
                        "(max_message_bytes): the connection was dropped"
                    )
                    reading = False
                    pending = bytearray()
                    await messages.aclose()  # the session sees the connection end
                    break
                pending += piece
                if end < 0:
                    break
                line, start = bytes(pending), end + 1
                pending.clear()
                if not line.strip():
                    continue
                try:
                    item: Any = SessionMessage(parse(line, by_name=False))
                except ValueError as exc:
                    item = exc
                try:
                    await messages.send(item)
                except gone:  # the session is gone: only the draining is left
                    reading = False
        if reading and not closing.is_set():
            dropped("the server's stdout ended — it exited, or closed it")
    except (trio.ClosedResourceError, trio.BrokenResourceError, OSError):
        pass  # our own shutdown closed the pipe under the read
    finally:
        with suppress(*gone):
            await messages.aclose()


async def _write_messages(stdin: Any, messages: Any, read_in: Any, done: trio.Event) -> None:
    """Each message the session sends, as one line on the server's stdin. When the pipe breaks,
    the read side is closed too, so a request in flight is not left waiting."""
    import anyio

    try:
        async with messages:
            async for message in messages:
                text = message.message.model_dump_json(by_alias=True, exclude_unset=True)
                await stdin.send_all(text.encode() + b"\n")
    except (trio.ClosedResourceError, trio.BrokenResourceError, OSError):
        with suppress(anyio.ClosedResourceError, anyio.BrokenResourceError):
            await read_in.aclose()
    finally:
        done.set()


async def _read_stderr(stderr: Any, tail: StderrTail, done: trio.Event) -> None:
    """Everything the server writes to stderr, read as it comes (so it never blocks on a full
    pipe) into ``tail``."""
    try:
        while chunk := await stderr.receive_some(_CHUNK):
            tail.add(chunk)
    except (trio.ClosedResourceError, trio.BrokenResourceError, OSError):
        pass
    finally:
        done.set()


async def _stop(process: trio.Process) -> None:
    """Stop the server: close its stdin and give it a moment to exit, then SIGTERM its process
    group, then SIGKILL it; what of the group outlives its leader is killed too. Every wait is
    bounded (about ``3 * _EXIT`` s at most)."""
    if process.stdin is not None:
        with suppress(trio.ClosedResourceError, trio.BrokenResourceError, OSError):
            await process.stdin.aclose()
    if not await _exited(process):
        _signal_group(process.pid, signal.SIGTERM)
        if not await _exited(process):
            _signal_group(process.pid, signal.SIGKILL)
            await _exited(process)
    _signal_group(process.pid, signal.SIGKILL)  # a child the server left behind


async def _exited(process: trio.Process) -> bool:
    with trio.move_on_after(_EXIT):
        await process.wait()
        return True
    return False


def _signal_group(group: int, signum: int) -> None:
    # The process leads a session of its own: its pid is its group's id.
    with suppress(ProcessLookupError, PermissionError):
        os.killpg(group, signum)
