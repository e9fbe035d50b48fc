"""What a second look at the service's boundaries found: CORS for a page resuming an event
stream and reading a refusal's headers, a body that does not arrive, refusals in the metrics."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
import trio
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from capabilities.serve import ServeApi, ServeMetrics, serve
from capabilities.storage import StorageError, open_database

from .support import ANN, QUOTA, Served, auth, served, settings

ORIGIN = "https://app.example"


@pytest.fixture(scope="module")
def cors_service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    config = settings(cors_origins=(ORIGIN,))
    with served(tmp_path_factory.mktemp("cors") / "serve.db", config) as found:
        yield found


async def test_a_page_of_an_allowed_origin_may_resume_a_stream_with_last_event_id(
    cors_service: Served,
) -> None:
    """The preflight of a request sending Last-Event-ID — a page's script resuming an event
    stream as the guide says — was refused (400: the header was not allowed)."""
    async with httpx2.AsyncClient(base_url=cors_service.url) as client:
        answer = await client.options(
            "/v1/conversations/c1/events",
            headers={
                "Origin": ORIGIN,
                "Access-Control-Request-Method": "GET",
                "Access-Control-Request-Headers": "authorization, last-event-id",
            },
        )
        assert answer.status_code == 200, answer.text
        assert answer.headers["access-control-allow-origin"] == ORIGIN
        assert "last-event-id" in answer.headers["access-control-allow-headers"].lower()


async def test_the_preflight_of_a_path_nothing_answers_is_a_404_problem(
    cors_service: Served,
) -> None:
    """The API documents a path it does not list as a 404; its CORS preflight was approved (200),
    for a request that could only fail."""
    preflight = {"Origin": ORIGIN, "Access-Control-Request-Method": "GET"}
    async with httpx2.AsyncClient(base_url=cors_service.url) as client:
        for path in ("/v1/nothing-here", "/v1/me/"):
            answer = await client.options(path, headers=preflight)
            assert answer.status_code == 404, (path, answer.text)
            assert answer.headers["content-type"].startswith("application/problem+json")
        known = await client.options("/v1/me", headers=preflight)
        assert known.status_code == 200
        assert known.headers["access-control-allow-origin"] == ORIGIN


async def test_a_page_of_an_allowed_origin_can_read_a_refusals_retry_after(
    cors_service: Served,
) -> None:
    """A 429's Retry-After (and a 401's WWW-Authenticate, a 405's Allow) are not headers a
    page's script may read unless the answer exposes them."""
    async with httpx2.AsyncClient(base_url=cors_service.url) as client:
        headers = {**auth(QUOTA), "Origin": ORIGIN}
        path = "/v1/conversations/cors-quota/submissions"
        answers = [await client.post(path, json={"text": "hi"}, headers=headers) for _ in range(3)]
        refused = answers[-1]
        assert refused.status_code == 429
        assert refused.headers["access-control-allow-origin"] == ORIGIN
        exposed = {
            h.strip().lower() for h in refused.headers["access-control-expose-headers"].split(",")
        }
        assert {"retry-after", "allow", "www-authenticate"} <= exposed
        unauthenticated = await client.get("/v1/me", headers={"Origin": ORIGIN})
        assert unauthenticated.status_code == 401
        assert (
            "www-authenticate" in unauthenticated.headers["access-control-expose-headers"].lower()
        )
        mine = await client.get("/v1/me", headers={**auth(ANN), "Origin": ORIGIN})
        assert mine.status_code == 200


@pytest.fixture(scope="module")
def impatient(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    # Short enough for the slow bodies to be refused soon, long enough that a body sent at
    # once (the guard below) arrives within it on a busy machine too.
    config = settings(body_timeout=2.0)
    with served(tmp_path_factory.mktemp("impatient") / "serve.db", config) as found:
        yield found


def _answer_then_eof(stream: socket.socket) -> bytes:
    """What the server sends until it closes the connection (bounded: 30 s)."""
    stream.settimeout(30)
    received = b""
    while data := stream.recv(65536):
        received += data
    return received


@pytest.mark.parametrize("sent", [b"", b'{"te'])
def test_a_body_that_does_not_arrive_in_time_is_408_and_the_connection_closes(
    impatient: Served, sent: bytes
) -> None:
    """A client declaring a body and sending it slowly, or not at all (slowloris), held its
    request and its connection for as long as it liked: the server has no read timeout (it
    would end event streams, whose clients send nothing)."""
    host, port = impatient.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port))) as stream:
        stream.sendall(
            f"POST /v1/conversations/slow/submissions HTTP/1.1\r\nHost: {host}\r\n"
            f"Authorization: Bearer {ANN}\r\nContent-Type: application/json\r\n"
            "Content-Length: 100\r\n\r\n".encode()
            + sent
        )
        answer = _answer_then_eof(stream)
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 408 ")
    assert b"content-type: application/problem+json" in head.lower()
    problem = json.loads(body)
    assert problem["type"] == "urn:effectagent:problem:request-timeout"
    assert problem["status"] == 408
    assert problem["instance"] == "/v1/conversations/slow/submissions"


async def test_a_body_that_arrives_in_time_is_admitted(impatient: Served) -> None:
    async with httpx2.AsyncClient(base_url=impatient.url) as client:
        answer = await client.post(
            "/v1/conversations/quick/submissions", json={"text": "hi"}, headers=auth(ANN)
        )
        assert answer.status_code == 202


async def test_every_refused_submission_is_counted_by_its_reason(tmp_path: Path) -> None:
    """``effectagent.serve.refusals`` counted the quota's refusals only: a submission refused
    while draining, or by the queue (an idempotency conflict, an unknown agent), was not."""
    reader = InMemoryMetricReader()
    metrics = ServeMetrics(MeterProvider(metric_readers=[reader]).get_meter("test"))
    async with open_database(tmp_path / "serve.db") as database:
        api = ServeApi(database, settings(), agents=("assistant",), metrics=metrics)
        stop = trio.Event()
        async with trio.open_nursery() as nursery:
            urls = await nursery.start(
                lambda task_status: serve(api, stop, bind="127.0.0.1:0", task_status=task_status)
            )
            async with httpx2.AsyncClient(base_url=urls[0]) as client:
                path = "/v1/conversations/counted/submissions"
                keyed = {**auth(ANN), "Idempotency-Key": "k"}
                sent = [
                    await client.post(path, json={"text": "a"}, headers=keyed),
                    await client.post(path, json={"text": "b"}, headers=keyed),
                    await client.post(path, json={"text": "a", "agent": "x"}, headers=auth(ANN)),
                ]
                own = "/v1/conversations/quota-own/submissions"
                for where in (path, own, own, own):  # the 404 gives its token back
                    sent.append(await client.post(where, json={"text": "q"}, headers=auth(QUOTA)))
                api.drain()
                sent.append(await client.post(path, json={"text": "c"}, headers=auth(ANN)))
            assert [a.status_code for a in sent] == [202, 409, 422, 404, 202, 202, 429, 503]
            stop.set()
    data = reader.get_metrics_data()
    assert data is not None
    points: list[Any] = [
        point
        for resource in data.resource_metrics
        for scope in resource.scope_metrics
        for metric in scope.metrics
        if metric.name == "effectagent.serve.refusals"
        for point in metric.data.data_points
    ]
    counted = {
        (p.attributes["effectagent.principal"], p.attributes["reason"]): p.value for p in points
    }
    assert counted == {
        ("ann", "idempotency-conflict"): 1,
        ("ann", "unknown-agent"): 1,
        ("quota", "not-found"): 1,  # ann's conversation: the 404 of one that does not exist
        ("quota", "quota"): 1,
        ("ann", "draining"): 1,
    }


class _Gone(StorageError):
    """The storage failing under a stream (a database gone away)."""


class _FailingLog:
    """A conversation log whose entries cannot be read."""

    async def entries(self, conversation_id: str, *, after: int, limit: int) -> list[object]:
        raise _Gone()


def test_a_stream_whose_storage_fails_ends_whole_for_its_client_to_reconnect(
    tmp_path: Path,
) -> None:
    """A storage failure under a stream escaped the app: the server logged an error of the ASGI
    framework and cut the connection without the stream's end."""
    with served(tmp_path / "serve.db", worker=False) as service:
        with httpx2.Client(base_url=service.url) as client:
            made = client.post(
                "/v1/conversations/gone/submissions", json={"text": "hi"}, headers=auth(ANN)
            )
            assert made.status_code == 202
        api = service.api
        assert api is not None
        api._log = _FailingLog()  # type: ignore[assignment]
        host, port = service.url.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port))) as stream:
            stream.sendall(
                f"GET /v1/conversations/gone/events HTTP/1.1\r\nHost: {host}\r\n"
                f"Authorization: Bearer {ANN}\r\n\r\n".encode()
            )
            answer = _answer_then_eof(stream)
    assert answer.startswith(b"HTTP/1.1 200 ")
    assert answer.endswith(b"\r\n0\r\n\r\n")  # the chunked body's end: the stream ended whole


@pytest.mark.parametrize("pieces", [1, 40])
def test_a_head_over_16_kib_is_a_bare_431_and_the_connection_closes(
    cors_service: Served, pieces: int
) -> None:
    """The server bounds only the head it must buffer before it is whole: one over 16 KiB that
    arrived in a single read was served (200), where the guide promises 431 — now refused alike,
    however it arrives. A head just within the bound is served."""
    host, port = cors_service.url.removeprefix("http://").split(":")
    start = f"GET /healthz HTTP/1.1\r\nHost: {host}\r\nX-Padding: ".encode()
    for size, status in ((16 * 1024 + 1, b"431"), (16 * 1024, b"200")):
        padding = b"a" * (size - len(start) - 4)  # 4: the padding's end and the blank line
        head = start + padding + b"\r\n\r\n"
        assert len(head) == size
        with socket.create_connection((host, int(port))) as stream:
            step = -(-len(head) // pieces)
            for at in range(0, len(head), step):
                stream.sendall(head[at : at + step])
            if status == b"200":
                stream.settimeout(30)
                answer = stream.recv(65536)
            else:
                answer = _answer_then_eof(stream)  # the server closes the connection
        assert answer.startswith(b"HTTP/1.1 " + status + b" "), (size, answer[:60])
        if status == b"431":
            head_out, _, body = answer.partition(b"\r\n\r\n")
            assert body == b""
            assert b"content-length: 0" in head_out.lower()
