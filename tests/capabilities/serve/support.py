"""What the serve tests share: the service — API, worker and a scripted model — served on
loopback by a thread of its own (its own ``trio.run``), so one served app serves a whole test
module while each test runs in its own Trio run; and a raw HTTP/1.1 reader of event streams
(a test decides exactly when its connection ends)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import attrs
import httpx2
import trio

from capabilities.durable import DurableWorker, RetryBudget, WorkerOptions
from capabilities.serve import (
    Principal,
    Quota,
    ServeApi,
    ServeMetrics,
    ServeSettings,
    Tokens,
    serve,
)
from capabilities.storage import open_database
from effectagent.ai import ModelRequest, Tool, ToolCallContext, Toolkit, UserMessage
from effectagent.core import Agent
from effectagent.testing import FunctionModel, Turn

__all__ = [
    "ANN",
    "QUOTA",
    "auth",
    "settings",
    "BOB",
    "OPS",
    "Served",
    "SseReader",
    "served",
]

#: The tokens (canaries: none may appear in a response, a log line or an error).
ANN = "ann-token-canary-5d1c9f0e7b2a4c68"
BOB = "bob-token-canary-8e3a6b1d0c9f2e47"
OPS = "ops-token-canary-2b7e4d9a1f6c3e80"
QUOTA = "quota-token-canary-7a1d3c5e9b0f2468"


@attrs.frozen
class Path_:
    name: str


delete_file = Tool(
    "delete_file", "Delete a file.", parameters=Path_, success=str, needs_approval=True
)
AGENT = Agent("assistant", "Do as asked.", toolkit=Toolkit(delete_file))


def _text(message: Any) -> str:
    return "".join(getattr(part, "text", "") for part in message.content)


def respond(request: ModelRequest) -> Turn | str:
    """``delete NAME`` asks to delete a file (approval needed); anything else is echoed."""
    last = request.messages[-1]
    if isinstance(last, UserMessage):
        text = _text(last)
        if text.startswith("delete "):
            return Turn.tool_calls(("delete_file", {"name": text.removeprefix("delete ")}))
        return f"echo: {text}"
    return "done"


async def _delete(params: Path_, call: ToolCallContext) -> str:
    return f"deleted {params.name}"


def settings(**changes: Any) -> ServeSettings:
    tokens = Tokens.of(
        [
            (ANN, Principal("ann")),
            (BOB, Principal("bob")),
            (OPS, Principal("ops", operator=True)),
            (QUOTA, Principal("quota")),
        ]
    )
    base = ServeSettings(
        tokens=tokens,
        quota=None,
        quotas={"quota": Quota(per_minute=1.0, burst=2)},
        max_body=4096,
        sse_poll=0.02,
    )
    return attrs.evolve(base, **changes)


class Served:
    """The service in a thread (see the module notes)."""

    def __init__(
        self,
        path: Path,
        config: ServeSettings,
        *,
        worker: bool = True,
        model: Callable[[ModelRequest], Turn | str] | None = None,
        secrets: tuple[str, ...] = (),
    ) -> None:
        self.path = path
        self._config = config
        self._worker = worker
        self._respond = respond if model is None else model
        self._secrets = secrets
        self.url = ""
        self.api: ServeApi | None = None
        self._ready = threading.Event()
        self._token: trio.lowlevel.TrioToken | None = None
        self._stop: trio.Event | None = None
        self._failed: list[BaseException] = []
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        if not self._ready.wait(30) or self._failed:
            raise RuntimeError(f"the service did not start: {self._failed}")

    def _run(self) -> None:
        try:
            trio.run(self._main)
        except BaseException as exc:  # reported to the test that started it
            self._failed.append(exc)
            self._ready.set()

    async def _main(self) -> None:
        self._stop = trio.Event()
        self._token = trio.lowlevel.current_trio_token()
        async with open_database(self.path) as database:
            metrics = ServeMetrics()
            api = ServeApi(
                database,
                self._config,
                agents=("assistant",),
                metrics=metrics,
                secrets=self._secrets,  # the runtime's: its worker's, below
            )
            self.api = api
            worker = None
            if self._worker:
                layer = Toolkit(delete_file).handlers(delete_file.bind(_delete))
                layer = layer + FunctionModel.layer(self._respond)
                layer = layer + api.listener()  # live text, and the metrics' token counts
                options = WorkerOptions(
                    poll_interval=0.02, lease=5.0, retry=RetryBudget(max_attempts=3, base=0.01)
                )
                worker = DurableWorker(
                    database, layer, [AGENT], options=options, secrets=self._secrets
                )
            async with trio.open_nursery() as nursery:
                found = await nursery.start(
                    lambda task_status: serve(
                        api,
                        self._stop,  # type: ignore[arg-type]
                        bind="127.0.0.1:0",
                        worker=worker,
                        metrics_interval=0.05,
                        task_status=task_status,
                    )
                )
                self.url = found[0]
                self._ready.set()

    def close(self) -> None:
        """Drain and stop the service, and its thread."""
        if self._stop is not None and self._token is not None:
            with suppress(trio.RunFinishedError):
                trio.from_thread.run_sync(self._stop.set, trio_token=self._token)
        self._thread.join(30)


@contextmanager
def served(path: Path, config: ServeSettings | None = None, **kwargs: Any) -> Iterator[Served]:
    """A service on a database at ``path`` for the block."""
    service = Served(path, config or settings(), **kwargs)
    try:
        yield service
    finally:
        service.close()


def auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


class SseReader:
    """An event stream read over a raw connection: each :meth:`event` is one parsed event."""

    def __init__(self, stream: trio.SocketStream) -> None:
        self._stream = stream
        self._buffer = b""
        self._payload = b""
        self.status = 0
        self.headers: dict[str, str] = {}

    @classmethod
    async def open(
        cls, url: str, path: str, token: str, last_event_id: str | None = None
    ) -> SseReader:
        host, port = url.removeprefix("http://").split(":")
        stream = await trio.open_tcp_stream(host, int(port))
        lines = [f"GET {path} HTTP/1.1", f"Host: {host}", f"Authorization: Bearer {token}"]
        lines.append("Accept: text/event-stream")
        if last_event_id is not None:
            lines.append(f"Last-Event-ID: {last_event_id}")
        await stream.send_all(("\r\n".join(lines) + "\r\n\r\n").encode())
        reader = cls(stream)
        head = await reader._until(b"\r\n\r\n")
        status, *fields = head.decode("latin-1").split("\r\n")
        reader.status = int(status.split(" ")[1])
        for field in fields:
            name, _, value = field.partition(":")
            reader.headers[name.strip().lower()] = value.strip()
        return reader

    async def _until(self, mark: bytes) -> bytes:
        while mark not in self._buffer:
            data = await self._stream.receive_some(65536)
            if not data:
                raise EOFError("the stream ended")
            self._buffer += data
        found, _, self._buffer = self._buffer.partition(mark)
        return found

    async def event(self) -> dict[str, Any]:
        """The next event: ``{"id", "event", "data"}`` (comments skipped)."""
        while True:
            block = await self._event_block()
            fields: dict[str, Any] = {}
            for line in block.split("\n"):
                if not line or line.startswith(":"):
                    continue
                name, _, value = line.partition(": ")
                fields[name] = value
            if "data" in fields:
                fields["data"] = json.loads(fields["data"])
                return fields

    async def _event_block(self) -> str:
        # The body is chunked: strip the framing as it comes, keep the payload.
        while b"\n\n" not in self._payload:
            size_line = await self._until(b"\r\n")
            size = int(size_line.split(b";")[0], 16)
            if size == 0:
                raise EOFError("the stream ended")
            while len(self._buffer) < size + 2:
                data = await self._stream.receive_some(65536)
                if not data:
                    raise EOFError("the stream ended")
                self._buffer += data
            self._payload += self._buffer[:size]
            self._buffer = self._buffer[size + 2 :]
        block, _, self._payload = self._payload.partition(b"\n\n")
        return block.decode("utf-8")

    async def aclose(self) -> None:
        await self._stream.aclose()


#: The statuses a submission stays in until someone acts (its worker settles it just after its
#: run's last record, so a client that saw that record may look a moment too early).
_RESTING = ("completed", "failed", "aborted", "suspended")


async def settled(client: Any, submission_id: str, token: str) -> dict[str, Any]:
    """The submission once it is settled or suspended (looked at again until then, bounded)."""
    with trio.fail_after(30):
        while True:
            answer = await client.get(f"/v1/submissions/{submission_id}", headers=auth(token))
            body: dict[str, Any] = answer.json()
            if body["submission"]["status"] in _RESTING:
                return body
            await trio.sleep(0.02)


def settled_sync(client: Any, submission_id: str, token: str) -> dict[str, Any]:
    """:func:`settled` for a blocking client. A GET on a kept-alive connection the server closed
    just then is asked again, as HTTP clients do for an idempotent request (seen once in a full
    run: "Server disconnected without sending a response")."""
    deadline = time.monotonic() + 30
    while True:
        try:
            answer = client.get(f"/v1/submissions/{submission_id}", headers=auth(token))
        except httpx2.RemoteProtocolError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.02)  # as between looks: a server gone for good is not asked in a spin
            continue
        body: dict[str, Any] = answer.json()
        if body["submission"]["status"] in _RESTING or time.monotonic() > deadline:
            return body
        time.sleep(0.02)
