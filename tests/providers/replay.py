"""A loopback HTTP/1.1 server that replays scripted responses — what the provider tests talk to.

It runs in the test's own Trio nursery (``trio.serve_tcp`` on 127.0.0.1, an ephemeral port), so it
stops with the test. Each request is recorded (method, path, headers, body) and answered by the
next scripted :class:`Reply`: a status, headers, and body pieces sent one HTTP chunk each, ended
in one of four ways — a proper end of a chunked body (the connection stays open for the next
request), a dropped connection (no end of body: the client sees the connection lost), a plain
end of file (no chunked framing: a clean but early end), or a hang that waits until the client
disconnects and records that it did (:attr:`ReplayServer.disconnected`). A stalled reply sends
nothing at all and waits for that disconnect too.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from functools import partial
from typing import Any, Literal

import attrs
import trio

__all__ = ["Recorded", "Reply", "ReplayServer", "start_server"]

Ending = Literal["complete", "drop", "eof", "hang", "stall"]

_REASONS = {
    200: "OK",
    400: "Bad Request",
    401: "Unauthorized",
    404: "Not Found",
    413: "Content Too Large",
    429: "Too Many Requests",
    500: "Internal Server Error",
    502: "Bad Gateway",
    503: "Service Unavailable",
    529: "Overloaded",
}


@attrs.frozen
class Recorded:
    """One request the server received."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        """The body, decoded."""
        return json.loads(self.body)


@attrs.frozen
class Reply:
    """One scripted response."""

    status: int = 200
    headers: tuple[tuple[str, str], ...] = (("content-type", "text/event-stream"),)
    chunks: tuple[bytes, ...] = ()
    ending: Ending = "complete"

    @staticmethod
    def sse(events: Iterable[bytes], *, ending: Ending = "complete") -> Reply:
        """A 200 event stream; each item is sent as its own HTTP chunk."""
        return Reply(chunks=tuple(events), ending=ending)

    @staticmethod
    def stall() -> Reply:
        """No response at all: wait, sending nothing, until the client disconnects."""
        return Reply(ending="stall")

    @staticmethod
    def json(status: int, body: object, *, headers: Iterable[tuple[str, str]] = ()) -> Reply:
        """A JSON response (an error, typically)."""
        return Reply(
            status,
            (("content-type", "application/json"), *headers),
            (json.dumps(body).encode(),),
            "eof",
        )


Script = Reply | Callable[[Recorded], Reply]


class ReplayServer:
    """The server's state: what to answer, what it received, whether a client hung up on it."""

    def __init__(self) -> None:
        self.port = 0
        self.replies: list[Script] = []
        self.requests: list[Recorded] = []
        self.unscripted = 0
        self.disconnected = trio.Event()
        self.received = trio.Event()  # set once the first request is recorded
        self._arrived = trio.Event()  # set (and replaced) as each request is recorded
        self.hangups = 0  # connections the client closed between requests
        self.hung_up = trio.Event()

    @property
    def url(self) -> str:
        """The server's root URL."""
        return f"http://127.0.0.1:{self.port}"

    def script(self, *replies: Script) -> None:
        """Answer the next requests with ``replies``, in order (a callable gets the request)."""
        self.replies.extend(replies)

    async def wait_for_requests(self, count: int) -> None:
        """Return once ``count`` requests have been recorded. Cancellation: at once."""
        while len(self.requests) < count:
            await self._arrived.wait()

    async def handle(self, stream: trio.SocketStream) -> None:
        """Serve one connection (keep-alive) until the client closes it or a reply ends it."""
        buffer = b""
        try:
            while True:
                while b"\r\n\r\n" not in buffer:
                    data = await stream.receive_some(65536)
                    if not data:
                        self.hangups += 1
                        self.hung_up.set()
                        return
                    buffer += data
                head, _, buffer = buffer.partition(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                method, path, _ = lines[0].split(" ", 2)
                headers = {}
                for line in lines[1:]:
                    name, _, value = line.partition(":")
                    headers[name.strip().lower()] = value.strip()
                length = int(headers.get("content-length", "0"))
                while len(buffer) < length:
                    data = await stream.receive_some(65536)
                    if not data:
                        return
                    buffer += data
                body, buffer = buffer[:length], buffer[length:]
                request = Recorded(method, path, headers, body)
                self.requests.append(request)
                self.received.set()
                self._arrived.set()
                self._arrived = trio.Event()
                if not await self._answer(stream, request):
                    return
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            self.disconnected.set()
        finally:
            await stream.aclose()

    async def _answer(self, stream: trio.SocketStream, request: Recorded) -> bool:
        """Send the next reply; False when the connection must not serve another request."""
        if not self.replies:
            self.unscripted += 1
            reply = Reply.json(500, {"error": {"message": "nothing scripted", "type": "test"}})
        else:
            script = self.replies.pop(0)
            reply = script if isinstance(script, Reply) else script(request)
        if reply.ending == "stall":
            await self._wait_for_hangup(stream)
            return False
        reason = _REASONS.get(reply.status, "Status")
        head = [f"HTTP/1.1 {reply.status} {reason}", *(f"{k}: {v}" for k, v in reply.headers)]
        if reply.ending == "eof":
            head.append("connection: close")
        else:
            head.append("transfer-encoding: chunked")
        await stream.send_all(("\r\n".join(head) + "\r\n\r\n").encode("latin-1"))
        for chunk in reply.chunks:
            if reply.ending == "eof":
                await stream.send_all(chunk)
            elif chunk:
                await stream.send_all(b"%x\r\n%s\r\n" % (len(chunk), chunk))
        if reply.ending == "complete":
            await stream.send_all(b"0\r\n\r\n")
            return True
        if reply.ending == "hang":
            await self._wait_for_hangup(stream)
        return False

    async def _wait_for_hangup(self, stream: trio.SocketStream) -> None:
        while await stream.receive_some(65536):
            pass
        self.disconnected.set()


async def start_server(nursery: trio.Nursery) -> ReplayServer:
    """Start a :class:`ReplayServer` on 127.0.0.1 (an ephemeral port) in ``nursery``."""
    server = ReplayServer()
    listeners = await nursery.start(partial(trio.serve_tcp, server.handle, 0, host="127.0.0.1"))
    server.port = listeners[0].socket.getsockname()[1]
    return server
