"""``effectagent serve`` under load on loopback: SSE clients following conversations while
submissions arrive — nothing lost, nothing duplicated, and how long things take.

Run with ``.venv/bin/python benchmarks/serve.py`` (``--quick``: a fifth of the load). It prints
figures and fails only when something was lost or duplicated: a benchmark is not a timed test.

Method
------
One process, one Trio run: the service (``capabilities.serve.serve``: the API under Hypercorn's
Trio worker, a ``DurableWorker`` beside it with ``max_active=16`` and a
:class:`~effectagent.testing.FunctionModel` answering at once) on a file database in a fresh
temporary directory, and its clients over loopback TCP — so the clients' work competes with the
service's for the one loop, and the figures are an upper bound of what the service alone costs.

* 50 conversations; 200 SSE clients (4 a conversation) each follow one from its start, over raw
  HTTP/1.1 connections;
* 2,000 submissions (40 a conversation), sent by 50 concurrent submitters (one HTTP client
  each, keep-alive), each with an ``Idempotency-Key`` of its own;
* **nothing lost**: every submission settles ``completed``, and every SSE client sees its
  conversation's entries numbered 1, 2, 3, … without a gap, and one ``RunCompletedRecord`` per
  submission; **nothing duplicated**: no client sees an ``id`` twice;
* **submit latency**: from sending a submission to its 202 receipt (admitted: committed), p50
  and p99;
* **event delivery lag**: from a run's terminal record's time (``at``, written when it is
  appended) to its event's arrival at a client, p50 and p99 over every client.

The whole run is bounded (``fail_after``): 15 minutes, 5 with ``--quick``.
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Final

ROOT = Path(__file__).resolve().parent.parent
# Run as a script, this directory comes first on sys.path, where benchmarks/sandbox.py would
# shadow the sandbox package: the project root goes before it.
sys.path.insert(0, str(ROOT))

import attrs  # noqa: E402
import httpx2  # noqa: E402
import trio  # noqa: E402

from benchmarks._util import scale_of, scale_parser  # noqa: E402
from capabilities.durable import DurableQueue, DurableWorker, WorkerOptions  # noqa: E402
from capabilities.serve import (  # noqa: E402
    Principal,
    ServeApi,
    ServeSettings,
    Tokens,
    serve,
)
from capabilities.storage import open_database  # noqa: E402
from effectagent.ai import ModelRequest  # noqa: E402
from effectagent.core import Agent  # noqa: E402
from effectagent.testing import FunctionModel  # noqa: E402

TOKEN: Final = "benchmark-token-0123456789abcdef"
CONVERSATIONS: Final = 50
FOLLOWERS: Final = 4  # SSE clients a conversation
PER_CONVERSATION: Final = 40  # submissions a conversation


def _answer(request: ModelRequest) -> str:
    return "noted"


@attrs.define
class _Follower:
    """One SSE client's account of what it received."""

    conversation: str
    ids: list[int] = attrs.field(factory=list)
    completed: int = 0
    lags: list[float] = attrs.field(factory=list)


async def _follow(url: str, follower: _Follower, expected: int) -> None:
    """Follow a conversation over a raw connection until ``expected`` runs completed there."""
    host, port = url.removeprefix("http://").split(":")
    stream = await trio.open_tcp_stream(host, int(port))
    request = (
        f"GET /v1/conversations/{follower.conversation}/events HTTP/1.1\r\nHost: {host}\r\n"
        f"Authorization: Bearer {TOKEN}\r\nAccept: text/event-stream\r\n\r\n"
    )
    await stream.send_all(request.encode())
    raw = b""
    while b"\r\n\r\n" not in raw:
        raw += await stream.receive_some(65536)
    head, _, raw = raw.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200"), head
    payload = b""
    try:
        while follower.completed < expected:
            # chunked framing: size line, data, CRLF
            while b"\r\n" not in raw:
                raw += await stream.receive_some(65536)
            size_line, _, raw = raw.partition(b"\r\n")
            size = int(size_line, 16)
            while len(raw) < size + 2:
                raw += await stream.receive_some(65536)
            payload += raw[:size]
            raw = raw[size + 2 :]
            while b"\n\n" in payload:
                block, _, payload = payload.partition(b"\n\n")
                fields = dict(
                    line.split(": ", 1) for line in block.decode().split("\n") if ": " in line
                )
                if "id" not in fields:
                    continue
                follower.ids.append(int(fields["id"]))
                if fields.get("event") == "RunCompletedRecord":
                    follower.completed += 1
                    data = json.loads(fields["data"])
                    follower.lags.append(time.time() - data["record"]["at"])
    finally:
        await stream.aclose()


async def _submit(url: str, conversation: str, count: int, latencies: list[float]) -> list[str]:
    submitted: list[str] = []
    headers = {"Authorization": f"Bearer {TOKEN}"}
    async with httpx2.AsyncClient(base_url=url, headers=headers, timeout=120) as client:
        for index in range(count):
            started = time.perf_counter()
            answer = await client.post(
                f"/v1/conversations/{conversation}/submissions",
                json={"text": f"note {index}"},
                headers={"Idempotency-Key": f"{conversation}-{index}"},
            )
            latencies.append(time.perf_counter() - started)
            assert answer.status_code == 202, answer.text
            submitted.append(answer.json()["submission_id"])
    return submitted


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def _main(directory: Path, conversations: int, per_conversation: int, bound: float) -> None:
    agent = Agent("assistant", "Take notes.")
    settings = ServeSettings(
        tokens=Tokens.of([(TOKEN, Principal("bench", operator=True))]), quota=None
    )
    followers = [_Follower(f"conv-{c}") for c in range(conversations) for _ in range(FOLLOWERS)]
    latencies: list[float] = []
    submitted: list[str] = []
    with trio.fail_after(bound):
        async with open_database(directory / "serve.db") as database:
            api = ServeApi(database, settings, agents=("assistant",))
            worker = DurableWorker(
                database,
                FunctionModel.layer(_answer),
                [agent],
                options=WorkerOptions(max_active=16, poll_interval=0.05),
            )
            stop = trio.Event()
            async with trio.open_nursery() as nursery:
                urls = await nursery.start(
                    lambda task_status: serve(
                        api, stop, bind="127.0.0.1:0", worker=worker, task_status=task_status
                    )
                )
                url = urls[0]
                # Every conversation exists (its first submission) before its followers connect.
                async with trio.open_nursery() as firsts:
                    for c in range(conversations):

                        async def first(c: int = c) -> None:
                            submitted.extend(await _submit(url, f"conv-{c}", 1, latencies))

                        firsts.start_soon(first)
                started = time.perf_counter()
                async with trio.open_nursery() as load:
                    for follower in followers:
                        load.start_soon(_follow, url, follower, per_conversation)
                    for c in range(conversations):

                        async def rest(c: int = c) -> None:
                            conversation = f"conv-{c}"
                            found = await _submit(url, conversation, per_conversation, latencies)
                            submitted.extend(found[1:])  # the first key again: the same receipt

                        load.start_soon(rest)
                elapsed = time.perf_counter() - started
                queue = DurableQueue(database)
                statuses = [(await queue.status(s)).status for s in set(submitted)]
                stop.set()
    total = conversations * per_conversation
    lost = total - statuses.count("completed")
    duplicated = sum(len(f.ids) - len(set(f.ids)) for f in followers)
    gaps = sum(f.ids != list(range(1, len(f.ids) + 1)) for f in followers)
    lags = [lag for f in followers for lag in f.lags]
    print(f"{len(followers)} SSE clients following {conversations} conversations")
    print(f"{total:,} submissions, all settled in {elapsed:.1f} s ({total / elapsed:,.0f}/s)")
    print(
        f"submissions not completed: {lost}; events seen twice: {duplicated}; "
        f"clients with a gap: {gaps}; runs seen completing: {sum(f.completed for f in followers):,}"
    )
    print(
        f"submit latency: p50 {statistics.median(latencies) * 1000:.1f} ms, "
        f"p99 {_quantile(latencies, 0.99) * 1000:.1f} ms"
    )
    print(
        f"event delivery lag: p50 {statistics.median(lags) * 1000:.1f} ms, "
        f"p99 {_quantile(lags, 0.99) * 1000:.1f} ms"
    )
    if lost or duplicated or gaps or len(set(submitted)) != total:
        raise SystemExit("something was lost or duplicated")


def main() -> None:
    args = scale_parser(__doc__.splitlines()[0], "the conversations and clients").parse_args()
    scale = scale_of(args)
    conversations = max(2, round(CONVERSATIONS * scale))
    with tempfile.TemporaryDirectory() as directory:
        trio.run(
            _main, Path(directory), conversations, PER_CONVERSATION, 300 if args.quick else 900
        )


if __name__ == "__main__":
    main()
