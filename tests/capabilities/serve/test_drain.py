"""The drain with event streams connected: a client that stopped reading holds neither its
stream nor the service's shutdown."""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path

import httpx2

from capabilities.serve import ServeApi
from capabilities.storage import open_database
from effectagent.ai import ModelRequest

from .support import ANN, Served, auth, settings, settled_sync

#: A response of 1 MiB; ten of them are more than the socket buffers of both ends hold (Linux's
#: most is 4 MiB a side by default).
_BIG = "x" * (1024 * 1024)


def _big(request: ModelRequest) -> str:
    return _BIG


def test_a_client_that_stops_reading_its_stream_does_not_hold_the_shutdown(
    tmp_path: Path,
) -> None:
    """The server writes a connection shielded from cancellation: a stream blocked writing to a
    client that reads nothing held its request, and the server's graceful shutdown waited for
    it for as long as the client kept its connection open — SIGTERM never ended the command."""
    service = Served(tmp_path / "serve.db", settings(), model=_big)
    stuck = socket.socket()
    try:
        with httpx2.Client(base_url=service.url, timeout=60) as client:
            for turn in range(10):
                made = client.post(
                    "/v1/conversations/big/submissions",
                    json={"text": f"big {turn}"},
                    headers=auth(ANN),
                )
                assert made.status_code == 202
            done = settled_sync(client, made.json()["submission_id"], ANN)
            assert done["submission"]["status"] == "completed"
        host, port = service.url.removeprefix("http://").split(":")
        stuck.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        stuck.settimeout(30)
        stuck.connect((host, int(port)))
        stuck.sendall(
            f"GET /v1/conversations/big/events HTTP/1.1\r\nHost: {host}\r\n"
            f"Authorization: Bearer {ANN}\r\n\r\n".encode()
        )
        seen = b""
        while b"event: ModelResponseRecorded" not in seen:  # the big event is being written
            data = stuck.recv(4096)
            assert data, "the stream ended"
            seen = seen[-64:] + data
        # ... and from now on nothing is read.
        started = time.monotonic()
        closing = threading.Thread(target=service.close)
        closing.start()
        closing.join(30)
        service._thread.join(max(0.0, 30 - (time.monotonic() - started)))
        # the server's graceful shutdown is 5 s: then the stream's request is cancelled
        assert not service._thread.is_alive(), "the shutdown waits on a client that reads nothing"
    finally:
        stuck.close()
        service.close()


async def test_a_stream_asked_for_once_the_streams_ended_is_a_503_to_go_elsewhere(
    tmp_path: Path,
) -> None:
    """Once the drain ended the streams, a (re)connecting client was answered 200 with a stream
    that ended at once, empty — as if it had every entry; it is told to go elsewhere instead."""
    async with open_database(tmp_path / "serve.db") as database:
        api = ServeApi(database, settings(), agents=("assistant",))
        transport = httpx2.ASGITransport(app=api.app)
        async with httpx2.AsyncClient(transport=transport, base_url="http://host") as client:
            admitted = await client.post(
                "/v1/conversations/c1/submissions", json={"text": "hi"}, headers=auth(ANN)
            )
            assert admitted.status_code == 202
            api.drain()
            api.close_streams()
            answer = await client.get(
                "/v1/conversations/c1/events", headers={**auth(ANN), "Last-Event-ID": "0"}
            )
    assert answer.status_code == 503
    assert answer.headers["content-type"] == "application/problem+json"
    assert answer.headers["retry-after"].isdigit()
    problem = answer.json()
    assert problem["type"] == "urn:effectagent:problem:unavailable"
    assert problem["instance"] == "/v1/conversations/c1/events"
