"""Live text: the model's text deltas reach the event streams following a conversation as they
are streamed — events without ``id`` (``Last-Event-ID`` keeps naming a log entry), redacted,
before the response recorded with the whole text — and a follower that does not read holds at
most its bound while the run goes on. Through the served app on loopback, and the feeds alone."""

from __future__ import annotations

import secrets
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
import trio
from hypothesis import given
from hypothesis import strategies as st
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from capabilities.serve import LiveFeed, LiveText, RunListeners, ServeApi, ServeMetrics
from capabilities.serve._live import BOUND, MAX_CHARS, Live
from capabilities.storage import SqliteConversationLog, open_database
from capabilities.telemetry import Telemetry
from effectagent import Agent, open_runtime
from effectagent.ai import (
    ModelRequest,
    TextDeltaPart,
    TextEndPart,
    TextStartPart,
    Usage,
    UserMessage,
)
from effectagent.core import (
    ConversationCreated,
    ModelResponseRecorded,
    ModelRetrying,
    TextDelta,
    UsageDelta,
    UserInputRecorded,
)
from effectagent.testing import FunctionModel, Turn

from .support import ANN, Served, SseReader, auth, served, settings

#: A secret the worker knows: it must never reach a client.
CANARY = "live-secret-canary-4c2e9a7f1b3d5086"
SPOKEN = "the answer is long enough to come in many pieces"
BIG = 2_000_000  # characters of the "big" answer: far more than any socket buffers


def _respond(request: ModelRequest) -> Turn | str:
    """``hang``: stream a text (a secret across its deltas) and hang before finishing;
    ``stream``: stream :data:`SPOKEN` in small deltas; ``big``: a very long text; else echo."""
    last = request.messages[-1]
    text = "".join(getattr(p, "text", "") for p in last.content)
    if isinstance(last, UserMessage) and text == "hang":
        said = f"before {CANARY} after"
        deltas = [TextDeltaPart("t0", said[i : i + 5]) for i in range(0, len(said), 5)]
        return Turn.hanging(after=(TextStartPart("t0"), *deltas, TextEndPart("t0")))
    if isinstance(last, UserMessage) and text == "stream":
        return Turn.text(SPOKEN, chunk=3)
    if isinstance(last, UserMessage) and text == "big":
        return Turn.text("x" * BIG, chunk=1000)
    return f"echo: {text}"


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    path = tmp_path_factory.mktemp("live") / "serve.db"
    with served(path, model=_respond, secrets=(CANARY,)) as found:
        yield found


async def _submit(client: httpx2.AsyncClient, conversation: str, text: str) -> str:
    answer = await client.post(
        f"/v1/conversations/{conversation}/submissions", json={"text": text}, headers=auth(ANN)
    )
    assert answer.status_code == 202, answer.text
    submission: str = answer.json()["submission_id"]
    return submission


# A suspended run's log stops at the approval request it waits on (no record marks a suspension).
_ENDS = ("RunCompletedRecord", "RunFailedRecord", "ToolApprovalRequested")


async def _until(reader: SseReader, done: Any) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    with trio.fail_after(60):
        while not events or not done(events[-1], events):
            events.append(await reader.event())
    return events


def _ended(event: dict[str, Any], _: object) -> bool:
    return event["event"] in _ENDS


async def _following(client: httpx2.AsyncClient, service: Served) -> tuple[str, SseReader, str]:
    """A conversation with one run done, followed from its start (read through that run, whose
    last event's id is returned): what runs next in it is streamed to a follower already there."""
    conversation = "live-" + secrets.token_hex(6)
    await _submit(client, conversation, "hello")
    reader = await SseReader.open(service.url, f"/v1/conversations/{conversation}/events", ANN)
    assert reader.status == 200
    done = await _until(reader, _ended)
    return conversation, reader, done[-1]["id"]


async def test_text_is_streamed_live_redacted_without_id_before_any_response_is_recorded(
    service: Served,
) -> None:
    async with httpx2.AsyncClient(base_url=service.url) as client:
        conversation, reader, last_id = await _following(client, service)
        try:
            submission = await _submit(client, conversation, "hang")  # never finishes

            def streamed(_: dict[str, Any], events: list[dict[str, Any]]) -> bool:
                text = "".join(e["data"]["text"] for e in events if e["event"] == "delta")
                return text.endswith(" after")

            events = await _until(reader, streamed)
            # Nothing of the run is in the log yet (its input is recorded with its first
            # response): all it said so far came live, piece by piece, without an id.
            assert len(events) > 1
            assert all(e["event"] == "delta" for e in events)
            assert all("id" not in e for e in events)
            assert all(set(e["data"]) == {"run_id", "text"} for e in events)
            run_id = events[0]["data"]["run_id"]
            assert all(e["data"]["run_id"] == run_id for e in events)
            said = "".join(e["data"]["text"] for e in events)
            assert said.startswith("before ")
            assert CANARY not in said  # redacted, even split across deltas

            aborted = await client.post(
                f"/v1/submissions/{submission}/abort", json={"reason": "enough"}, headers=auth(ANN)
            )
            assert aborted.status_code == 200, aborted.text
            after = await _until(reader, _ended)
            assert all("id" in e for e in after)
            assert run_id in {e["data"]["record"].get("run_id") for e in after}
        finally:
            await reader.aclose()
        # A reconnect resumes after the last entry seen before the live text: it gets the
        # entries it missed, exactly, and no live text again.
        again = await SseReader.open(
            service.url, f"/v1/conversations/{conversation}/events", ANN, last_event_id=last_id
        )
        try:
            rest = await _until(again, _ended)
        finally:
            await again.aclose()
        assert [e["id"] for e in rest] == [e["id"] for e in after]
        assert int(rest[0]["id"]) == int(last_id) + 1


async def test_live_text_comes_before_its_response_which_holds_the_whole_text(
    service: Served,
) -> None:
    async with httpx2.AsyncClient(base_url=service.url) as client:
        conversation, reader, _ = await _following(client, service)
        try:
            await _submit(client, conversation, "stream")
            events = await _until(reader, _ended)
        finally:
            await reader.aclose()
    response = next(i for i, e in enumerate(events) if e["event"] == "ModelResponseRecorded")
    run_id = events[response]["data"]["record"]["run_id"]
    content = events[response]["data"]["record"]["content"]
    assert ["text", SPOKEN] in [list(part) for part in content]  # the whole text, recorded
    deltas = [i for i, e in enumerate(events) if e["event"] == "delta"]
    assert deltas
    assert max(deltas) < response  # live text first, none after its response
    pieces = [events[i]["data"]["text"] for i in deltas]
    assert all(events[i]["data"]["run_id"] == run_id for i in deltas)
    assert all(p in SPOKEN for p in pieces)  # (redaction may hold a piece back, then join)


async def test_a_follower_that_never_reads_neither_blocks_the_run_nor_holds_more_than_its_bound(
    service: Served,
) -> None:
    async with httpx2.AsyncClient(base_url=service.url, timeout=60) as client:
        conversation, reader, _ = await _following(client, service)
        # A raw connection that asks for the stream and never reads a byte of it.
        host, port = service.url.removeprefix("http://").split(":")
        stuck = trio.socket.socket()
        stuck.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        await stuck.connect((host, int(port)))
        head = (
            f"GET /v1/conversations/{conversation}/events HTTP/1.1\r\nHost: {host}\r\n"
            f"Authorization: Bearer {ANN}\r\nLast-Event-ID: 1000000\r\n\r\n"
        )
        await stuck.send(head.encode())
        try:
            api = service.api
            assert api is not None
            with trio.fail_after(30):  # both streams follow it before the run begins
                # another thread's state: looked at until it is so
                while len(api.live.followers(conversation)) < 2:  # noqa: ASYNC110
                    await trio.sleep(0.01)
            await _submit(client, conversation, "big")
            events = await _until(reader, _ended)  # the run finished: nothing waited on it
            assert events[-1]["event"] == "RunCompletedRecord"
            feeds = api.live.followers(conversation)
            assert len(feeds) == 2
            assert all(len(f) <= BOUND and f.chars <= MAX_CHARS for f in feeds)
            assert sum(f.dropped for f in feeds) > 0  # the one not read lost what did not fit
        finally:
            stuck.close()
            await reader.aclose()


# ---- the feeds alone ----------------------------------------------------------------------------

_OPS = st.lists(
    st.one_of(
        st.tuples(st.just("offer"), st.sampled_from("ab"), st.text(max_size=7)),
        st.tuples(st.just("take"), st.just(""), st.just("")),
        st.tuples(st.just("forget"), st.sampled_from("ab"), st.just("")),
    ),
    max_size=60,
)


@given(_OPS, st.integers(1, 6), st.integers(1, 20))
def test_a_feed_keeps_what_fits_in_order_and_counts_what_it_dropped(
    ops: list[tuple[str, str, str]], bound: int, max_chars: int
) -> None:
    feed = LiveFeed(bound, max_chars)
    model: list[Live] = []
    dropped = stamp = 0
    for op, run_id, text in ops:
        if op == "offer":
            stamp += 1
            piece = Live(stamp, run_id, "delta", text)
            feed.offer(piece)
            fits = len(model) < bound and sum(len(p.text) for p in model) + len(text) <= max_chars
            if fits:
                model.append(piece)
            else:
                dropped += 1
        elif op == "take":
            assert feed.take() == model
            model = []
        else:
            feed.forget(run_id, stamp)
            model = [p for p in model if p.run_id != run_id]
        assert len(feed) == len(model) <= bound
        assert feed.chars == sum(len(p.text) for p in model) <= max_chars
        assert feed.dropped == dropped


def _delta(conversation: str, text: str, run_id: str = "run-1") -> TextDelta:
    return TextDelta(
        run_id=run_id, conversation_id=conversation, agent="a", seq=1, at=0.0, turn=1, text=text
    )


def test_only_the_followers_of_a_conversation_get_its_text_and_a_discard_voids_it() -> None:
    live = LiveText(bound=3)
    listener = live.listener()
    listener.on_event(_delta("c1", "nobody follows"))
    assert live.stamp == 0  # nothing kept for a conversation nobody follows
    with live.subscribe("c1") as one, live.subscribe("c1") as two, live.subscribe("c2") as other:
        for n in range(5):
            listener.on_event(_delta("c1", f"d{n}"))
        retried = ModelRetrying(
            run_id="run-1",
            conversation_id="c1",
            agent="a",
            seq=2,
            at=0.0,
            turn=1,
            attempt=1,
            error_tag="RateLimited",
            message="later",
            delay=1.0,
            discard=True,
        )
        listener.on_event(retried)
        assert [p.text for p in one.take()] == ["d0", "d1", "d2"]
        assert one.dropped == 3
        assert len(two) == 3
        assert len(other) == 0
        assert two.take()[-1].data() == {"run_id": "run-1", "text": "d2"}
        listener.on_event(retried)
        assert [p.data() for p in two.take()] == [{"run_id": "run-1"}]
        assert len(live.followers("c1")) == 2
    assert live.followers("c1") == ()


async def test_a_waiting_follower_wakes_for_text_and_for_the_streams_closing() -> None:
    live = LiveText()
    with live.subscribe("c") as feed:
        async with trio.open_nursery() as nursery:
            woke: list[str] = []

            async def wait() -> None:
                await feed.wait()
                woke.append("woke")

            nursery.start_soon(wait)
            await trio.testing.wait_all_tasks_blocked()
            live.publish("c", "r", "hi")
        assert woke == ["woke"]
        feed.take()
        with trio.move_on_after(0) as nothing:
            await feed.wait()
        assert nothing.cancelled_caught  # taken: nothing to wake for
        live.close()
        await feed.wait()  # closing wakes it at once


class _Failing:
    def on_event(self, event: object) -> None:
        raise RuntimeError("listener defect")

    def call_context(self, run_id: str, tool_call_id: str) -> Any:
        from contextlib import nullcontext

        return nullcontext()


def test_listeners_together_each_see_every_event_and_one_failing_spares_the_others() -> None:
    live = LiveText()
    both = RunListeners(_Failing(), live.listener())
    with live.subscribe("c") as feed:
        both.on_event(_delta("c", "one"))
        both.on_event(_delta("c", "two"))
        with both.call_context("r", "call"):
            pass
    assert [p.text for p in feed.take()] == ["one", "two"]


async def test_the_service_listener_keeps_tracing_given_to_it_and_metrics_too(
    tmp_path: Path,
) -> None:
    """A runtime has one run listener: tracing given to ``api.listener`` (and to
    ``metrics.listener``) sees every run beside the live text and the token counts — one run,
    its spans exported, its text followed, its tokens counted. Not a listener: ``TypeError``."""
    spans = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(spans))
    reader = InMemoryMetricReader()
    metrics = ServeMetrics(MeterProvider(metric_readers=[reader]).get_meter("test"))
    telemetry = Telemetry(tracer_provider=tracer_provider)
    agent = Agent("assistant", "Answer.")
    model = FunctionModel(lambda request: Turn.text("Fine, thanks.", usage=Usage.of(5, 3)))
    async with open_database(tmp_path / "serve.db") as database:
        api = ServeApi(database, settings(), metrics=metrics)
        with api.live.subscribe("c-traced") as feed:
            layer = model.as_layer() + api.listener(telemetry)
            async with open_runtime(layer, agents=[agent]) as runtime:
                result = await runtime.run(
                    agent, "How are you?", conversation_id="c-traced", create=True
                )
            assert result.text == "Fine, thanks."
            assert "".join(p.text for p in feed.take()) == "Fine, thanks."
    names = [span.name for span in spans.get_finished_spans()]
    assert any(name.startswith("invoke_agent") for name in names), names
    data = reader.get_metrics_data()
    assert data is not None
    tokens: dict[Any, Any] = {
        dict(point.attributes or {})["direction"]: getattr(point, "value", None)
        for resource in data.resource_metrics
        for scope in resource.scope_metrics
        for metric in scope.metrics
        if metric.name == "effectagent.runs.tokens"
        for point in metric.data.data_points
    }
    assert tokens == {"input": 5, "output": 3}
    spans.clear()
    async with open_runtime(model.as_layer() + metrics.listener(telemetry), agents=[agent]) as rt:
        await rt.run(agent, "Again?")
    assert [s for s in spans.get_finished_spans() if s.name.startswith("invoke_agent")]
    for wrong in (api.listener, metrics.listener, RunListeners):
        with pytest.raises(TypeError, match="run listener 1 must have on_event and call_context"):
            wrong(object())  # type: ignore[arg-type]
    tracer_provider.shutdown()


# ---- the stream's order, with the log read at a chosen moment -----------------------------------


class _ReadLate:
    """The service's log, but a read taken while ``armed`` first lets the run stream its last
    deltas and record its response (as a worker beside it may, while the read is in a thread)."""

    def __init__(self, log: Any, live: LiveText, conversation: str) -> None:
        self._log, self._live, self._conversation = log, live, conversation
        self.armed = False

    async def entries(self, conversation_id: str, *, after: int, limit: int) -> Any:
        if self.armed:
            self.armed = False
            self._live.publish(self._conversation, "run-1", " world")
            response = ModelResponseRecorded(
                conversation_id=self._conversation,
                run_id="run-1",
                turn=1,
                content=(("text", "hello world"),),
                finish_reason="stop",
                usage=UsageDelta(),
                at=0.0,
            )
            await self._log.append(self._conversation, [response])
        return await self._log.entries(conversation_id, after=after, limit=limit)


async def test_text_streamed_while_the_log_is_read_never_follows_its_recorded_response(
    tmp_path: Path,
) -> None:
    conversation = "c-read-late"
    async with open_database(tmp_path / "serve.db") as database:
        api = ServeApi(database, settings(sse_poll=0.01))
        log = SqliteConversationLog(database)
        await log.append(
            conversation, [ConversationCreated(conversation_id=conversation, agent="a", at=0.0)]
        )
        late = _ReadLate(log, api.live, conversation)
        api._log = late  # type: ignore[assignment]
        sent: list[bytes] = []
        done = trio.Event()

        async def send(chunk: bytes) -> None:
            sent.append(chunk)
            if b"ModelResponseRecorded" in chunk:
                done.set()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(api.stream, conversation, 0, send)
            with trio.fail_after(30):
                while not sent:  # noqa: ASYNC110 - the first entry sent: the stream follows
                    await trio.sleep(0.01)
                api.live.publish(conversation, "run-1", "hello")
                late.armed = True
                said = UserInputRecorded(
                    conversation_id=conversation,
                    run_id="run-1",
                    input_id="in-1",
                    kind="user",
                    text="hi",
                    author="ann",
                    at=0.0,
                )
                await log.append(conversation, [said])  # the stream reads the log again
                await done.wait()
                api.live.publish(conversation, "run-2", "next")  # another run goes on live
                while not any(b"run-2" in chunk for chunk in sent):  # noqa: ASYNC110
                    await trio.sleep(0.01)
            api.close_streams()
    kinds = [chunk.split(b"\n")[1 if chunk.startswith(b"id:") else 0] for chunk in sent]
    assert kinds == [
        b"event: ConversationCreated",
        b"event: delta",  # "hello": before the read
        b"event: UserInputRecorded",
        b"event: ModelResponseRecorded",  # " world" came during the read: not sent after it
        b"event: delta",  # run-2's
    ]


async def test_a_stream_resumed_past_a_response_leaves_out_late_text_of_its_turn(
    tmp_path: Path,
) -> None:
    """A client that resumes after a response has it: text of that turn arriving late (from a
    worker in another process, through a relay) is left out, as for the stream that sent the
    response; text of a later turn still comes."""
    conversation = "c-resumed"
    async with open_database(tmp_path / "serve.db") as database:
        api = ServeApi(database, settings())
        response = ModelResponseRecorded(
            conversation_id=conversation,
            run_id="run-1",
            turn=1,
            content=(("text", "hello"),),
            finish_reason="stop",
            usage=UsageDelta(),
            at=0.0,
        )
        created = ConversationCreated(conversation_id=conversation, agent="a", at=0.0)
        last = await SqliteConversationLog(database).append(conversation, [created, response])
        feed = LiveFeed()
        await api._recorded_before(feed, conversation, last)
        feed.offer(Live(1, "run-1", "delta", "late hello", turn=1))
        feed.offer(Live(2, "run-1", "delta", "next turn", turn=2))
        assert [p.text for p in feed.take()] == ["next turn"]
        assert feed.late == 1
        before = LiveFeed()  # resumed before the response: its turn's text still comes
        await api._recorded_before(before, conversation, last - 1)
        before.offer(Live(3, "run-1", "delta", "hello", turn=1))
        assert [p.text for p in before.take()] == ["hello"]
