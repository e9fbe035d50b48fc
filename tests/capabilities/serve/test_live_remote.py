"""Live text from a worker in another process, through PostgreSQL: a run in one opening of the
schema (another process, as far as the server knows) streams its deltas to the event streams of
a service on another opening — in order, before its recorded response, a long text whole — and
the serving process's own worker is shown once; a relay that cannot keep up drops (counted)
without holding the run up, and a listener whose connection was killed listens again."""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import attrs
import psycopg
import pytest
import trio
from psycopg import sql

from capabilities.durable import DurableQueue, DurableWorker, WorkerOptions
from capabilities.serve import LiveRelay, LiveText, ServeApi, live_relay
from capabilities.serve._live import Live, LiveFeed
from capabilities.storage._postgres import PostgresDatabase, open_postgres
from capabilities.storage._postgres_listen import channel
from capabilities.storage._postgres_live import (
    LIMIT,
    LivePiece,
    PostgresLive,
    decode,
    encode,
    live_channel,
    merged,
    running_live,
)
from effectagent import Agent, Layer
from effectagent.ai import (
    FinishPart,
    LanguageModelService,
    ModelRequest,
    ModelResponse,
    ResponsePart,
    TextDeltaPart,
    TextEndPart,
    TextStartPart,
    Usage,
    generate,
)
from effectagent.core import TextDelta
from effectagent.engine import RunListenerService
from tests.postgres import postgres_database, postgres_url

from .support import settings

AGENT = Agent("assistant", "Do as asked.")
#: Text with characters of one to four bytes, quotes, escapes and controls.
MIXED = 'plain é ü 中文 😀 "quoted" back\\slash\nnew\tline \x01 end '
LONG = (MIXED * (30_000 // len(MIXED) + 1))[:30_000]


# ---- payloads ----------------------------------------------------------------------------------


def _piece(text: str, run: str = "run_1", turn: int = 1) -> LivePiece:
    return LivePiece("conv", run, turn, "delta", text)


def test_a_long_text_is_cut_into_payloads_within_the_limit_between_characters() -> None:
    payloads, seq, unsendable = encode("sender", 7, [_piece(LONG)])
    assert unsendable == 0
    assert len(payloads) > 3
    assert all(len(p.encode("utf-8")) <= LIMIT for p in payloads)
    decoded = [decode(p) for p in payloads]
    assert [n for _, n, _ in decoded] == list(range(7, 7 + len(payloads)))
    assert seq == 7 + len(payloads)
    assert {s for s, _, _ in decoded} == {"sender"}
    texts = [piece.text for _, _, pieces in decoded for piece in pieces]
    assert "".join(texts) == LONG


def test_consecutive_deltas_of_a_turn_travel_together_and_a_discard_stays_apart() -> None:
    pieces = [
        _piece("a"),
        _piece("b"),
        _piece(""),
        LivePiece("conv", "run_1", 1, "discard"),
        _piece("c"),
        _piece("d", turn=2),
        _piece("e", run="run_2", turn=2),
    ]
    assert [(p.kind, p.text, p.turn) for p in merged(pieces)] == [
        ("delta", "ab", 1),
        ("discard", "", 1),
        ("delta", "c", 1),
        ("delta", "d", 2),
        ("delta", "e", 2),
    ]
    payloads, _, _ = encode("s", 0, pieces)
    assert len(payloads) == 1
    assert decode(payloads[0])[2] == merged(pieces)


@pytest.mark.parametrize(
    "payload",
    [
        "",
        "[]",
        "{}",
        '{"s": "x", "n": 1, "p": [["c", "r", 1, "?", ""]]}',
        '{"s": 1, "n": 1, "p": []}',
    ],
)
def test_what_is_not_a_payload_is_refused(payload: str) -> None:
    with pytest.raises(ValueError):
        decode(payload)


def test_the_live_channel_is_the_schema_s_own_and_not_the_wake_up_channel() -> None:
    assert live_channel("a") != live_channel("b")
    assert live_channel("a") != channel("a")
    assert len(live_channel("x" * 63).encode()) <= 63


def test_a_feed_leaves_out_text_of_a_turn_whose_response_it_passed() -> None:
    feed = LiveFeed()
    feed.offer(Live(1, "run", "delta", "a", turn=1))
    feed.offer(Live(2, "run", "delta", "b", turn=2))
    feed.forget("run", 0, turn=1)
    assert [p.text for p in feed.take()] == ["b"]
    feed.offer(Live(3, "run", "delta", "late", turn=1))
    feed.offer(Live(4, "run", "delta", "c", turn=2))
    assert [p.text for p in feed.take()] == ["c"]
    assert feed.late == 1


def test_a_relay_needs_postgresql() -> None:
    class Sqlite:
        dialect = "sqlite"

    with pytest.raises(TypeError, match="PostgreSQL"):
        LiveRelay(Sqlite())  # type: ignore[arg-type]


# ---- through the server ---------------------------------------------------------------------


class Gated:
    """A model streaming ``pieces`` as deltas, then waiting for :attr:`release` to finish."""

    def __init__(self, *pieces: str) -> None:
        self.pieces = pieces
        self.release = trio.Event()

    async def stream(self, request: ModelRequest) -> AsyncIterator[ResponsePart]:
        yield TextStartPart("t0")
        for piece in self.pieces:
            yield TextDeltaPart("t0", piece)
        await self.release.wait()
        yield TextEndPart("t0")
        yield FinishPart("stop", Usage.of(1, 1))

    async def generate(self, request: ModelRequest) -> ModelResponse:
        return await generate(self, request)


@asynccontextmanager
async def other_opening(db: PostgresDatabase) -> AsyncIterator[PostgresDatabase]:
    """Another opening of ``db``'s schema: another process, as far as the server knows."""
    async with open_postgres(postgres_url(), schema=db.schema) as other:
        yield other


@asynccontextmanager
async def working(db: PostgresDatabase, model: Gated, listening: Layer) -> AsyncIterator[None]:
    """A worker on ``db`` running ``model``, its run listener provided by ``listening``."""
    layer = Layer.succeed(LanguageModelService, model, name="gated") + listening
    worker = DurableWorker(db, layer, [AGENT], options=WorkerOptions(poll_interval=0.05))
    async with trio.open_nursery() as nursery:
        await nursery.start(worker.run)
        yield
        nursery.cancel_scope.cancel()


def relayed(relay: LiveRelay) -> Layer:
    return Layer.succeed(RunListenerService, relay.listener(), name="relay")


async def _submit(db: PostgresDatabase, conversation: str) -> None:
    await DurableQueue(db).submit(
        "assistant", "go", conversation_id=conversation, idempotency_key="k", principal="ann"
    )


async def _text_of(feed: LiveFeed, want: str) -> str:
    """What ``feed`` receives until it holds ``want``'s length (deltas joined)."""
    said = ""
    with trio.fail_after(60):  # a bound for a failure
        while len(said) < len(want):
            await feed.wait()
            said += "".join(p.text for p in feed.take() if p.kind == "delta")
    return said


async def _sent(relay: LiveRelay, count: int) -> None:
    """Wait until ``relay`` counted ``count`` pieces sent (once their batch is done)."""
    live = relay.transport
    with trio.fail_after(60):  # a bound for a failure
        while live.sent < count:
            await live.batches.wait(live.batches.count)


class Events:
    """What an event stream sent, parsed."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.changed = trio.Event()

    async def send(self, chunk: bytes) -> None:
        for block in chunk.decode().split("\n\n"):
            fields = dict(
                line.split(": ", 1) for line in block.split("\n") if line and ":" in line[1:]
            )
            if "data" in fields:
                self.events.append({**fields, "data": json.loads(fields["data"])})
        self.changed.set()
        self.changed = trio.Event()

    def ended(self) -> bool:
        """Whether a run's completion was sent."""
        return any(e["event"] == "RunCompletedRecord" for e in self.events)

    def said(self) -> str:
        return "".join(e["data"]["text"] for e in self.events if e["event"] == "delta")

    async def until(self, done: Any) -> None:
        with trio.fail_after(60):  # a bound for a failure
            while not done():
                await self.changed.wait()


async def test_a_run_in_another_process_streams_in_order_before_its_response() -> None:
    model = Gated("Hello", ", ", "wor", "ld", "!")
    async with postgres_database() as served, other_opening(served) as elsewhere:
        api = ServeApi(served, settings(sse_poll=0.02))
        async with live_relay(served) as following, live_relay(elsewhere) as sending:
            await following.follow(api.live)
            seen = Events()
            async with working(elsewhere, model, relayed(sending)), trio.open_nursery() as n:
                await _submit(served, "c1")
                n.start_soon(api.stream, "c1", 0, seen.send)
                await seen.until(lambda: seen.said() == "Hello, world!")
                # all of it came live (events without id), before the response was recorded
                assert "ModelResponseRecorded" not in {e["event"] for e in seen.events}
                assert all("id" not in e for e in seen.events if e["event"] == "delta")
                model.release.set()
                await seen.until(seen.ended)
                n.cancel_scope.cancel()
        kinds = [e["event"] for e in seen.events]
        response = kinds.index("ModelResponseRecorded")
        assert kinds.count("delta") >= 1
        assert "delta" not in kinds[response:]  # none after its response
        assert following.heard >= 1
        assert sending.sent == 5
        assert sending.dropped == 0


async def test_a_long_delta_arrives_whole_and_in_order() -> None:
    model = Gated(LONG, "!")
    async with postgres_database() as served, other_opening(served) as elsewhere:
        live = LiveText(max_chars=64 * 1024)
        async with live_relay(served) as following, live_relay(elsewhere) as sending:
            await following.follow(live)
            with live.subscribe("c1") as feed:
                async with working(elsewhere, model, relayed(sending)):
                    await _submit(served, "c1")
                    assert await _text_of(feed, LONG + "!") == LONG + "!"
                    await _sent(sending, 2)
                    model.release.set()
            assert sending.transport.payloads > 3  # it took several notifications
            assert sending.dropped == 0


async def test_the_serving_process_shows_its_own_worker_s_text_once() -> None:
    model = Gated("one ", "two ", "three")
    async with postgres_database() as served, other_opening(served) as elsewhere:
        api = ServeApi(served, settings())
        remote = LiveText()
        async with live_relay(served) as relay, live_relay(elsewhere) as other:
            await relay.follow(api.live)
            await other.follow(remote)
            hearing = relay.transport.hearing
            assert hearing is not None
            with api.live.subscribe("c1") as here, remote.subscribe("c1") as there:
                # the service's worker, as `serve` has it: the API's listener and the relay's
                async with working(served, model, api.listener(relay.listener())):
                    await _submit(served, "c1")
                    assert await _text_of(there, "one two three") == "one two three"
                    await _sent(relay, 3)
                    sender = relay.transport
                    with trio.fail_after(60):  # a bound for a failure
                        while sender.ignored < sender.payloads:  # they came back to it too
                            await hearing.wake_ups.wait(hearing.wake_ups.count)
                    said = "".join(p.text for p in here.take())
                    model.release.set()
            assert said == "one two three"  # from its worker directly, once
            assert relay.transport.ignored >= 1  # its own text came back, and was left out
            assert relay.sent == 3


def _delta(text: str, seq: int = 1, conversation: str = "c") -> TextDelta:
    return TextDelta(
        run_id="run_x", conversation_id=conversation, agent="a", seq=seq, at=0.0, turn=1, text=text
    )


def _terminate(pid: int | None) -> None:
    """End the server process ``pid`` and wait (up to a minute) until it has."""
    assert pid is not None
    with psycopg.connect(postgres_url(), autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s, 60000)", (pid,))


async def test_a_relay_that_cannot_keep_up_drops_counted_without_holding_the_run_up() -> None:
    async with postgres_database() as db, live_relay(db, bound=1) as relay:
        live = relay.transport
        listener = relay.listener()
        for seq in range(50):  # one after another, never yielding: the sender cannot take any
            listener.on_event(_delta(str(seq), seq))
        assert (live.queued, live.dropped, live.offered) == (1, 49, 50)
        # a whole run through a relay that holds one piece: it finishes, its counts add up
        model = Gated(*"abcdefghijklmnop")
        model.release.set()
        api = ServeApi(db, settings(sse_poll=0.02))
        seen = Events()
        async with working(db, model, relayed(relay)), trio.open_nursery() as nursery:
            await _submit(db, "c1")
            nursery.start_soon(api.stream, "c1", 0, seen.send)
            await seen.until(seen.ended)
            nursery.cancel_scope.cancel()
        assert live.offered == 50 + 16
        assert live.offered == live.sent + live.dropped + live.queued + live.sending
        assert live.dropped >= 49


async def test_a_sender_whose_connection_was_killed_drops_a_batch_then_sends_again() -> None:
    async with postgres_database() as served, other_opening(served) as elsewhere:
        live = LiveText()
        async with live_relay(served) as following, live_relay(elsewhere) as sending:
            await following.follow(live)
            sender = sending.transport
            sender.reconnect = 0.0
            listener = sending.listener()
            with live.subscribe("c") as feed:
                listener.on_event(_delta("first"))
                assert await _text_of(feed, "first") == "first"
                await trio.to_thread.run_sync(_terminate, sender.backend_pid)
                done = sender.batches.count
                listener.on_event(_delta("lost"))
                with trio.fail_after(60):  # a bound for a failure
                    await sender.batches.wait(done)
                assert (sender.sent, sender.dropped) == (1, 1)
                done = sender.batches.count
                listener.on_event(_delta("again"))  # on a new connection
                assert await _text_of(feed, "again") == "again"
                with trio.fail_after(60):  # a bound for a failure
                    await sender.batches.wait(done)
                assert (sender.sent, sender.dropped) == (2, 1)


async def test_a_listener_whose_connection_was_killed_listens_again() -> None:
    async with postgres_database() as served, other_opening(served) as elsewhere:
        live = LiveText()
        async with live_relay(served) as following, live_relay(elsewhere) as sending:
            await following.follow(live)
            hearing = following.transport.hearing
            assert hearing is not None
            hearing.reconnect = 0.0
            pid = hearing.backend_pid
            seen = hearing.wake_ups.count
            await trio.to_thread.run_sync(_terminate, pid)
            with trio.fail_after(60):  # a bound for a failure
                await hearing.wake_ups.wait(seen)  # connected again (it says so)
            assert hearing.backend_pid not in (None, pid)
            with live.subscribe("c") as feed:
                sending.listener().on_event(_delta("heard again"))
                assert await _text_of(feed, "heard again") == "heard again"


@attrs.frozen
class _Snooped:
    """Two live relays of one schema (``sending`` to ``hearing``, which keeps what it hands on in
    ``heard``) and ``snoop``, a plain connection listening on their channel ``name``."""

    name: str
    hearing: PostgresLive
    sending: PostgresLive
    heard: list[LivePiece]
    snoop: psycopg.Connection[Any]

    async def until_heard(self, count: int) -> None:
        """Wait until ``count`` pieces were handed on."""
        with trio.fail_after(60):  # a bound for a failure
            while len(self.heard) < count:
                await self.hearing.arrivals.wait(self.hearing.arrivals.count)


@asynccontextmanager
async def _snooped() -> AsyncIterator[_Snooped]:
    async with postgres_database() as db, other_opening(db) as elsewhere:
        name = live_channel(db.schema)
        heard: list[LivePiece] = []
        async with running_live(db) as hearing, running_live(elsewhere) as sending:
            await hearing.hear(heard.extend)
            with psycopg.connect(postgres_url(), autocommit=True) as snoop:
                snoop.execute(sql.SQL("LISTEN {}").format(sql.Identifier(name)))
                yield _Snooped(name, hearing, sending, heard, snoop)


async def test_live_text_is_sealed_on_the_channel_and_a_forged_payload_is_dropped() -> None:
    """PostgreSQL checks no privilege for LISTEN or NOTIFY: whoever may connect hears the
    channel and may send on it. What the channel carries tells nothing of the text, and a
    payload not sealed with the schema's key — a plain one made as the relay would — is dropped
    (counted), never shown."""
    canary = "live-canary-2f9d7c41"
    async with _snooped() as snooped:
        forged, _, _ = encode("someone", 0, [_piece("Click http://evil.example")])
        snooped.snoop.execute("SELECT pg_notify(%s, %s)", (snooped.name, forged[0]))
        snooped.sending.offer(_piece(canary))
        await snooped.until_heard(1)
        seen = [n.payload for n in snooped.snoop.notifies(timeout=60, stop_after=2)]
    assert [p.text for p in snooped.heard] == [canary]  # the sealed one alone
    assert snooped.hearing.malformed == 1  # the forged one
    assert seen[0] == forged[0]
    assert canary not in seen[1]
    assert base64.b64decode(seen[1], validate=True)  # base64 of nonce, ciphertext and tag


async def test_a_sealed_payload_sent_again_is_dropped() -> None:
    """Whoever may connect can hear a sealed payload and NOTIFY it again: it still opens under
    the key, but its sender's number is not past the last heard, so it is dropped (counted),
    never shown twice."""
    async with _snooped() as snooped:
        hearing = snooped.hearing
        snooped.sending.offer(_piece("once"))
        await snooped.until_heard(1)
        (captured,) = [n.payload for n in snooped.snoop.notifies(timeout=60, stop_after=1)]
        arrived = hearing.arrivals.count
        snooped.snoop.execute("SELECT pg_notify(%s, %s)", (snooped.name, captured))
        with trio.fail_after(60):  # a bound for a failure
            await hearing.arrivals.wait(arrived)
        snooped.sending.offer(_piece("next"))  # the sender's next payload is heard as ever
        await snooped.until_heard(2)
    assert [p.text for p in snooped.heard] == ["once", "next"]
    assert (hearing.replayed, hearing.malformed, hearing.lost) == (1, 0, 0)


def test_the_relay_s_default_bounds_are_its_sender_s() -> None:
    from capabilities.serve._live import RELAY_BOUND, RELAY_MAX_CHARS
    from capabilities.storage import _postgres_live

    assert (RELAY_BOUND, RELAY_MAX_CHARS) == (_postgres_live.BOUND, _postgres_live.MAX_CHARS)


async def test_live_text_gives_way_while_the_notification_queue_is_filling() -> None:
    """The server's notification queue is shared with the wake-ups durable writes send in their
    transactions: past ``queue_limit`` a batch is dropped (counted), never sent; below, sent."""
    async with postgres_database() as db, running_live(db) as sending:
        sending.queue_limit = 0.0  # the queue is "fuller" than nothing: give way
        done = sending.batches.count
        sending.offer(_piece("dropped"))
        with trio.fail_after(60):  # a bound for a failure
            await sending.batches.wait(done)
        assert (sending.sent, sending.payloads, sending.dropped) == (0, 0, 1)
        sending.queue_limit = 0.25
        done = sending.batches.count
        sending.offer(_piece("sent"))
        with trio.fail_after(60):
            await sending.batches.wait(done)
        assert (sending.sent, sending.payloads, sending.dropped) == (1, 1, 1)


def test_long_lived_connections_notice_a_silent_network_unless_the_url_says_otherwise() -> None:
    from capabilities.storage._postgres_lock import keepalive_options

    given = keepalive_options("postgresql://ann@db/agents")
    assert given["keepalives"] == 1
    assert given["tcp_user_timeout"] > 0
    assert given["connect_timeout"] > 0
    own = keepalive_options("postgresql://ann@db/agents?keepalives_idle=60&connect_timeout=3")
    assert "keepalives_idle" not in own
    assert "connect_timeout" not in own
