"""Live text: the model's text deltas of the runs this process's worker runs, handed to the event
streams following their conversations as they are streamed, before the response is recorded.

Deltas are ephemeral: they are not in the log and carry no sequence number. Each follower has a
bounded buffer (at most ``bound`` deltas and ``max_chars`` characters): a follower that does
not keep up loses deltas — the run never waits for it, and nothing grows — and the recorded
response that follows holds the whole text anyway.

The listener (:meth:`LiveText.listener`) is the engine's run listener, called synchronously in
the run's task: it must run in the same Trio run as the streams (``serve(..., worker=...)``).
What it publishes is the events' text, which the engine has already redacted.

A worker in another process reaches the streams through a PostgreSQL database
(:class:`LiveRelay`, :func:`live_relay`): its relay's listener sends the deltas (``NOTIFY``,
``capabilities.storage._postgres_live``), and the serving process's relay hears them and
publishes them here — but those of its own sender, which its in-process worker published
already. Such text may come a moment after its response was recorded: a feed drops what comes
for a turn whose response it has passed (:meth:`LiveFeed.forget`).
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import (
    AbstractContextManager,
    ExitStack,
    asynccontextmanager,
    contextmanager,
    nullcontext,
)
from typing import TYPE_CHECKING, Final, Literal, final

import attrs
import trio

from effectagent.core import EventBase, ModelRetrying, TextDelta
from effectagent.engine import RunListener

from .._logging import log_warning
from ..storage import Database
from ._sse import live_bytes

if TYPE_CHECKING:
    from ..storage._postgres_live import LivePiece, PostgresLive

__all__ = [
    "Live",
    "LiveFeed",
    "LiveRelay",
    "LiveText",
    "RunListeners",
    "check_listeners",
    "live_relay",
    "send_live",
]

#: A follower's buffer, by default: deltas, and characters of their text.
BOUND: Final = 256
MAX_CHARS: Final = 64 * 1024
#: What a :class:`LiveRelay`'s sender queues at most by default: pieces, and characters of their
#: text (``capabilities.storage._postgres_live``'s own defaults, named here without importing
#: the driver).
RELAY_BOUND: Final = 1024
RELAY_MAX_CHARS: Final = 1024 * 1024
#: The runs whose recorded turn a feed remembers (to drop their late text), at most.
RECORDED: Final = 64


@attrs.frozen(slots=True)
class Live:
    """One published piece of live text. ``stamp``: its place among all published (from 1);
    ``kind``: ``delta`` (``text`` streamed) or ``discard`` (the run's model call is retried and
    the text streamed since its turn began is void); ``turn``: the run's turn it belongs to (None:
    not said)."""

    stamp: int
    run_id: str
    kind: Literal["delta", "discard"]
    text: str = ""
    turn: int | None = None

    def data(self) -> dict[str, str]:
        """The event's data: ``{"run_id", "text"}`` (a discard: ``{"run_id"}``). Pure."""
        return (
            {"run_id": self.run_id, "text": self.text}
            if self.kind == "delta"
            else {"run_id": self.run_id}
        )


@final
class LiveFeed:
    """What one follower of a conversation has not taken yet: at most ``bound`` pieces and
    ``max_chars`` characters; what does not fit is dropped (counted in :attr:`dropped`)."""

    __slots__ = (
        "_bound",
        "_chars",
        "_items",
        "_max_chars",
        "_recorded",
        "_wake",
        "dropped",
        "late",
    )

    def __init__(self, bound: int = BOUND, max_chars: int = MAX_CHARS) -> None:
        if bound < 1 or max_chars < 1:
            raise ValueError("a live feed must hold at least one delta and one character")
        self._bound = bound
        self._max_chars = max_chars
        self._items: deque[Live] = deque()
        self._chars = 0
        self._wake = trio.Event()
        #: The last turn of each run whose response was sent (the latest runs only).
        self._recorded: OrderedDict[str, int] = OrderedDict()
        #: How many pieces did not fit.
        self.dropped = 0
        #: How many pieces came after their turn's response was sent (left out).
        self.late = 0

    def __len__(self) -> int:
        return len(self._items)

    @property
    def chars(self) -> int:
        """The characters held."""
        return self._chars

    def offer(self, piece: Live) -> None:
        """Keep ``piece`` if it fits, else drop it; leave it out if its turn's response was sent
        (:meth:`forget`). Never blocks."""
        if piece.turn is not None:
            recorded = self._recorded.get(piece.run_id)
            if recorded is not None and piece.turn <= recorded:
                self.late += 1
                return
        if len(self._items) >= self._bound or self._chars + len(piece.text) > self._max_chars:
            self.dropped += 1
        else:
            self._items.append(piece)
            self._chars += len(piece.text)
        self._wake.set()

    def take(self) -> list[Live]:
        """All the pieces held, oldest first (the feed is empty after)."""
        taken = list(self._items)
        self._items.clear()
        self._chars = 0
        if self._wake.is_set():
            self._wake = trio.Event()
        return taken

    def forget(self, run_id: str, through: int, turn: int | None = None) -> None:
        """Drop ``run_id``'s pieces stamped ``through`` or before (their response was sent) —
        with ``turn`` (the response's), also those of that turn or an earlier one, and leave out
        any such piece offered later (text from another process may come after its response)."""
        if turn is not None:
            self._recorded[run_id] = max(turn, self._recorded.pop(run_id, turn))
            while len(self._recorded) > RECORDED:
                self._recorded.popitem(last=False)

        def gone(piece: Live) -> bool:
            if piece.run_id != run_id:
                return False
            return piece.stamp <= through or (
                turn is not None and piece.turn is not None and piece.turn <= turn
            )

        kept = [p for p in self._items if not gone(p)]
        if len(kept) != len(self._items):
            self._items = deque(kept)
            self._chars = sum(len(p.text) for p in kept)

    def wake(self) -> None:
        """End a :meth:`wait` in progress (the streams close)."""
        self._wake.set()

    async def wait(self) -> None:
        """Wait until a piece is offered or :meth:`wake` is called (at once if one already was
        since the last :meth:`take`).

        Cancellation: stops at once; nothing changes."""
        await self._wake.wait()


async def send_live(feed: LiveFeed, send: Callable[[bytes], Awaitable[None]]) -> bool:
    """Send what ``feed`` holds, as events without ``id`` (whether there was any).

    Cancellation: stops at once; what was sent was whole events (the rest is lost)."""
    pieces = feed.take()
    for piece in pieces:
        await send(live_bytes(piece.kind, piece.data()))
    return bool(pieces)


@final
class LiveText:
    """The followers of each conversation and what is published to them."""

    __slots__ = ("_bound", "_feeds", "_max_chars", "_stamp")

    def __init__(self, *, bound: int = BOUND, max_chars: int = MAX_CHARS) -> None:
        self._bound = bound
        self._max_chars = max_chars
        self._feeds: dict[str, set[LiveFeed]] = {}
        self._stamp = 0

    @property
    def stamp(self) -> int:
        """The stamp of the last piece published (0: none yet)."""
        return self._stamp

    @contextmanager
    def subscribe(self, conversation_id: str) -> Iterator[LiveFeed]:
        """A feed of ``conversation_id``'s live text for the block (forgotten after it)."""
        feed = LiveFeed(self._bound, self._max_chars)
        self._feeds.setdefault(conversation_id, set()).add(feed)
        try:
            yield feed
        finally:
            feeds = self._feeds[conversation_id]
            feeds.discard(feed)
            if not feeds:
                del self._feeds[conversation_id]

    def followers(self, conversation_id: str) -> tuple[LiveFeed, ...]:
        """The feeds of ``conversation_id``'s followers now."""
        return tuple(self._feeds.get(conversation_id, ()))

    def publish(
        self,
        conversation_id: str,
        run_id: str,
        text: str = "",
        kind: Literal["delta", "discard"] = "delta",
        turn: int | None = None,
    ) -> None:
        """Offer a piece to every follower of ``conversation_id`` (none: nothing is kept);
        ``turn``: the run's turn it belongs to. Never blocks."""
        feeds = self._feeds.get(conversation_id)
        if not feeds:
            return
        self._stamp += 1
        piece = Live(self._stamp, run_id, kind, text, turn)
        for feed in feeds:
            feed.offer(piece)

    def close(self) -> None:
        """Wake every follower (the streams are closing)."""
        for feeds in self._feeds.values():
            for feed in feeds:
                feed.wake()

    def listener(self) -> RunListener:
        """The engine's run listener publishing each run's ``TextDelta`` (and a ``discard`` for
        a retried model call whose streamed text is void)."""
        return _LiveListener(self)


@final
class _LiveListener:
    __slots__ = ("_live",)

    def __init__(self, live: LiveText) -> None:
        self._live = live

    def on_event(self, event: EventBase) -> None:
        if isinstance(event, TextDelta):
            self._live.publish(event.conversation_id, event.run_id, event.text, turn=event.turn)
        elif isinstance(event, ModelRetrying) and event.discard:
            self._live.publish(event.conversation_id, event.run_id, kind="discard", turn=event.turn)

    def call_context(self, run_id: str, tool_call_id: str) -> AbstractContextManager[object]:
        return nullcontext()


def check_listeners(listeners: tuple[object, ...]) -> None:
    """Raise ``TypeError`` naming the first of ``listeners`` that is not a run listener (an
    object with ``on_event`` and ``call_context``): it would otherwise fail at a run's first
    event, far from where it was given."""
    for index, listener in enumerate(listeners):
        if not (
            callable(getattr(listener, "on_event", None))
            and callable(getattr(listener, "call_context", None))
        ):
            raise TypeError(
                f"run listener {index + 1} must have on_event and call_context methods "
                f"(a RunListener such as Telemetry), got {type(listener).__name__}"
            )


@final
class RunListeners:
    """Several run listeners as one: each sees every event, in order; one that raises is logged
    and not asked again (by any run; the others are)."""

    __slots__ = ("_failed", "_listeners")

    def __init__(self, *listeners: RunListener) -> None:
        check_listeners(listeners)
        self._listeners = listeners
        self._failed: set[int] = set()

    def on_event(self, event: EventBase) -> None:
        for index, listener in enumerate(self._listeners):
            if index in self._failed:
                continue
            try:
                listener.on_event(event)
            except Exception as exc:
                self._failed.add(index)
                log_warning("run listener failed", error=type(exc).__name__)

    def call_context(self, run_id: str, tool_call_id: str) -> AbstractContextManager[object]:
        stack = ExitStack()
        for listener in self._listeners:
            stack.enter_context(listener.call_context(run_id, tool_call_id))
        return stack


# ---- across processes ------------------------------------------------------------------------


@final
class LiveRelay:
    """Live text between processes through a PostgreSQL database (see the module notes): a
    worker in another process than the event streams gives :meth:`listener` to its layer, and
    the serving process :meth:`follow` s its :attr:`ServeApi.live <.ServeApi.live>` — a process
    doing both (``serve`` with its worker) has its own deltas once, from its worker directly.
    Best-effort: what does not fit its queue (``bound`` pieces, ``max_chars`` characters), or
    comes while the connection is down, is dropped and counted (:attr:`dropped`); a run never
    waits for it.

    Made by :func:`live_relay`, which runs its sender; ``TypeError`` for a database that is not
    PostgreSQL (on SQLite, run the worker in the serving process). Needs the ``postgres``
    extra."""

    __slots__ = ("_following", "_live")

    def __init__(
        self, database: Database, *, bound: int = RELAY_BOUND, max_chars: int = RELAY_MAX_CHARS
    ):
        if database.dialect != "postgresql":
            raise TypeError(
                "live text crosses processes only through PostgreSQL: on SQLite, give the worker "
                "in the serving process ServeApi.listener()"
            )
        from ..storage._postgres_live import PostgresLive  # psycopg: for its users only

        self._live: PostgresLive = PostgresLive(database, bound=bound, max_chars=max_chars)
        self._following: LiveText | None = None

    @property
    def transport(self) -> PostgresLive:
        """The sender and receiver underneath (``capabilities.storage._postgres_live``)."""
        return self._live

    @property
    def sent(self) -> int:
        """The deltas and discards sent so far."""
        return self._live.sent

    @property
    def dropped(self) -> int:
        """The deltas and discards dropped so far (a full queue, the connection down)."""
        return self._live.dropped

    @property
    def heard(self) -> int:
        """The pieces heard from other processes so far (:meth:`follow`)."""
        return self._live.heard

    def listener(self) -> RunListener:
        """The engine's run listener sending each run's ``TextDelta`` (and a ``discard`` for a
        retried model call whose streamed text is void) to the processes that follow the
        database's live text. Give it to a worker's layer: ``Layer.succeed(RunListenerService,
        relay.listener())``, or ``api.listener(relay.listener())`` beside a service's own."""
        return self._live.listener()

    async def follow(self, live: LiveText) -> None:
        """Publish to ``live`` the text that workers of other processes send through the
        database, from now until the relay closes (its own sender's is left out). Raises
        ``RuntimeError`` if it follows already; the storage's error when it cannot listen.

        Cancellation: a checkpoint; once connecting started, it finishes and is listened on."""
        if self._following is not None:
            raise RuntimeError("this relay follows a LiveText already")
        self._following = live

        def publish(pieces: list[LivePiece]) -> None:
            for piece in pieces:
                live.publish(
                    piece.conversation_id, piece.run_id, piece.text, piece.kind, piece.turn
                )

        try:
            await self._live.hear(publish)
        except BaseException:
            self._following = None
            raise


@asynccontextmanager
async def live_relay(
    database: Database, *, bound: int = RELAY_BOUND, max_chars: int = RELAY_MAX_CHARS
) -> AsyncIterator[LiveRelay]:
    """A :class:`LiveRelay` on ``database`` (PostgreSQL) for the block, its sender running in a
    task of its own; closed after it (what is still queued is dropped: the recorded responses
    hold it). ``TypeError`` for another database.

    Cancellation: closing is shielded (a few milliseconds)."""
    relay = LiveRelay(database, bound=bound, max_chars=max_chars)
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(relay.transport.run)
            try:
                yield relay
            finally:
                nursery.cancel_scope.cancel()
    finally:
        await relay.transport.aclose()
