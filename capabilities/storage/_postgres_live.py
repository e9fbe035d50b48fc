"""PostgreSQL live text: the text deltas of runs, from the worker process that runs them to the
service processes that stream them, as ``NOTIFY`` payloads on a channel of the schema's own.

* **The channel** is ``effectagent_live_`` and the MD5 of the schema's name (as the wake-up
  channel, ``_postgres_listen``): two schemas never hear each other's text.
* **Sending** (:class:`PostgresLive` ``offer`` and ``run``; :func:`running_live` runs it for a
  block, and :meth:`PostgresLive.listener` is the engine's run listener offering each run's
  deltas — a worker's layer has it): ``offer`` — called from the run listener, in the run's
  task — appends a piece to a bounded queue and never waits; a piece that
  does not fit (``bound`` pieces, ``max_chars`` characters) is dropped and counted. ``run`` (a
  Trio task) takes everything queued at once and sends it from a worker thread, on a connection
  of its own in autocommit mode: consecutive deltas of one run's turn joined, packed into
  payloads of at most ``limit`` bytes (the server refuses 8000) — a long text is cut between
  characters, never inside one, with JSON's escapes counted — and every payload of the batch
  sent by one statement, so in one transaction, in order. While one batch is sent the next one
  gathers. A batch that fails (the connection lost, the server down) is dropped and counted, and
  nothing is sent for ``reconnect`` seconds (what is offered meanwhile is dropped): live text is
  best-effort — the recorded response always follows with the whole text — and a run is never
  slowed down.
* **A payload** is compact JSON: ``{"s": sender, "n": seq, "p": [[conversation, run, turn,
  kind, text], …]}`` — ``kind`` ``"d"`` (a delta) or ``"x"`` (the turn's streamed text is void:
  its model call is retried). ``seq`` counts the sender's payloads, so no two are alike (the
  server folds identical notifications of one transaction into one) and a gap says some were
  lost.
* **Hearing** (:meth:`PostgresLive.hear`): a :class:`~._postgres_listen.Listener` on the channel,
  on a connection of its own (reconnecting as the wake-up listener does; what is sent while it
  is away is lost), hands the pieces of each payload — but those of its own sender, which its
  process showed already — to the receiver, in the order they were sent.
* **Sealed**: PostgreSQL checks no privilege for ``LISTEN`` or ``NOTIFY`` — any role that may
  connect to the database could hear the channel or send on it. So every payload is sealed with
  AES-GCM (the channel as associated data) under the schema's own random key (``live_key``,
  laid out with the tables: read only by roles that may read the schema): on the channel a
  payload is ``base64(nonce ‖ ciphertext ‖ tag)``, which tells nothing but its size, and one
  that does not open under the key is dropped (counted as malformed) — nobody without the key
  reads live text or makes it up. Nor sends it again: a payload whose number is not past the last
  one heard from its sender — one heard already, sent again by anyone who may ``NOTIFY`` — is
  dropped (counted as replayed); only a sender not heard since this listener started (or since
  it forgot its senders, past 4096 of them) could have its payloads heard twice. The text is the
  runs' text as the engine streamed it, already redacted; it waits (sealed) in the server's
  notification queue until every listener has read it, and is never stored in a table. Errors
  name the database without its password.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import secrets
import threading
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from contextlib import AbstractContextManager, asynccontextmanager, nullcontext
from typing import Any, Final, Literal, final

import attrs
import psycopg
import trio
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from effectagent.core import EventBase, ModelRetrying, TextDelta

from .._logging import log_debug
from ._errors import CannotOpenDatabase, StorageClosed
from ._lanes import process_prefix
from ._postgres_listen import Listener, channel
from ._wakeups import WakeUps

__all__ = [
    "LIMIT",
    "plain_limit",
    "seal",
    "unseal",
    "LivePiece",
    "PostgresLive",
    "decode",
    "encode",
    "live_channel",
    "merged",
    "running_live",
]

#: Bytes a payload holds at most (the server refuses 8000 or more).
LIMIT: Final = 7800
#: The sender's queue, by default: pieces, and characters of their text.
BOUND: Final = 1024
MAX_CHARS: Final = 1024 * 1024
#: Seconds nothing is sent after a batch failed.
RECONNECT: Final = 1.0

#: A sealed payload's bytes besides its text: the nonce and the tag.
_SEAL_BYTES: Final = 12 + 16
#: The live text key of the schema (``_postgres_layout.LIVE_KEY_TABLE``).
_KEY_SQL: Final = "SELECT key FROM live_key"


def plain_limit(limit: int) -> int:
    """The bytes a payload's JSON may take so that, sealed and in base64, it takes at most
    ``limit``."""
    return (limit // 4) * 3 - _SEAL_BYTES


def seal(key: AESGCM, channel: str, payload: str) -> str:
    """``payload`` sealed for ``channel`` (see the module notes). Pure but for the nonce."""
    nonce = os.urandom(12)
    sealed = key.encrypt(nonce, payload.encode("utf-8"), channel.encode("utf-8"))
    return base64.b64encode(nonce + sealed).decode("ascii")


def unseal(key: AESGCM, channel: str, sealed: str) -> str:
    """The payload :func:`seal` sealed for ``channel``; ``ValueError`` for anything else."""
    refused = ValueError("a live payload must be sealed with the schema's key")
    try:
        raw = base64.b64decode(sealed.encode("ascii"), validate=True)
    except (ValueError, UnicodeError, binascii.Error):
        raise refused from None
    if len(raw) < _SEAL_BYTES:
        raise refused
    try:
        return key.decrypt(raw[:12], raw[12:], channel.encode("utf-8")).decode("utf-8")
    except (InvalidTag, UnicodeError):
        raise refused from None


#: How full the server's notification queue may be for live text to be sent. The queue is
#: the server's, shared with the durable writes' wake-ups (which go with their transactions: a
#: full queue fails them at COMMIT) — a listener that stopped reading anywhere keeps it from
#: emptying, so live text gives way long before it could fill it.
QUEUE_LIMIT: Final = 0.25

#: Every payload of a batch, in order, in one statement (so one transaction) — none while the
#: notification queue is fuller than the sender's ``queue_limit`` (:data:`QUEUE_LIMIT`).
_SEND: Final = (
    "SELECT pg_notify(%s, p) FROM unnest(%s::text[]) WITH ORDINALITY AS t(p, i) "
    "WHERE pg_notification_queue_usage() < %s ORDER BY i"
)
#: The room a text needs for its first character, whatever it is (``\\u0000`` is 6 bytes).
_MIN_ROOM: Final = 16
#: The biggest sequence number a payload's size is reckoned with.
_BIG_SEQ: Final = 10**19
_KINDS: Final = {"delta": "d", "discard": "x"}
_NAMES: Final = {"d": "delta", "x": "discard"}


def live_channel(schema: str) -> str:
    """The notification channel of ``schema``'s live text (``_postgres_listen.channel``'s
    naming)."""
    return channel(schema, "live")


@attrs.frozen(slots=True)
class LivePiece:
    """A piece of live text of ``run_id``'s ``turn`` in ``conversation_id``: ``delta`` (``text``
    streamed) or ``discard`` (what the turn streamed so far is void)."""

    conversation_id: str
    run_id: str
    turn: int
    kind: Literal["delta", "discard"]
    text: str = ""


# ---- payloads (pure) -----------------------------------------------------------------------------


def _json(value: object) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _size(value: object) -> int:
    return len(_json(value).encode("utf-8"))


def _clean(text: str) -> str:
    """``text`` as UTF-8 can carry it (a lone surrogate becomes ``?``)."""
    return text if text.isascii() else text.encode("utf-8", "replace").decode("utf-8")


def _fit(text: str, room: int) -> int:
    """How many of ``text``'s first characters fit in ``room`` bytes as a JSON string's inside."""
    low, high = 0, min(len(text), room)
    while low < high:
        middle = (low + high + 1) // 2
        if _size(text[:middle]) - 2 <= room:
            low = middle
        else:
            high = middle - 1
    return low


def merged(pieces: Iterable[LivePiece]) -> list[LivePiece]:
    """``pieces`` with each run of consecutive deltas of one run's turn joined into one (empty
    deltas left out)."""
    found: list[LivePiece] = []
    for piece in pieces:
        if piece.kind == "delta":
            if not piece.text:
                continue
            if found:
                last = found[-1]
                if (
                    last.kind == "delta"
                    and last.run_id == piece.run_id
                    and last.turn == piece.turn
                    and last.conversation_id == piece.conversation_id
                ):
                    found[-1] = attrs.evolve(last, text=last.text + piece.text)
                    continue
        found.append(piece)
    return found


def encode(
    sender: str, seq: int, pieces: Sequence[LivePiece], limit: int = LIMIT
) -> tuple[list[str], int, int]:
    """The payloads carrying ``pieces`` (:func:`merged`), each at most ``limit`` bytes of UTF-8,
    numbered from ``seq``; the next number; and how many pieces could not be carried at all (their
    identifiers alone fill a payload). Pure."""
    head = _size({"s": sender, "n": _BIG_SEQ, "p": []})
    payloads: list[str] = []
    items: list[list[object]] = []
    used = head
    unsendable = 0
    for piece in merged(pieces):
        kind = _KINDS[piece.kind]
        text = _clean(piece.text)
        while True:
            cost = _size([piece.conversation_id, piece.run_id, piece.turn, kind, ""]) + 1
            room = limit - used - cost
            if room < (_MIN_ROOM if text else 0):
                if items:
                    payloads.append(_json({"s": sender, "n": seq, "p": items}))
                    seq += 1
                    items, used = [], head
                    continue
                unsendable += 1
                break
            taken = _fit(text, room)
            part, text = text[:taken], text[taken:]
            items.append([piece.conversation_id, piece.run_id, piece.turn, kind, part])
            used += cost + _size(part) - 2
            if not text:
                break
    if items:
        payloads.append(_json({"s": sender, "n": seq, "p": items}))
        seq += 1
    return payloads, seq, unsendable


def decode(payload: str) -> tuple[str, int, list[LivePiece]]:
    """The sender, sequence number and pieces of ``payload``; ``ValueError`` for anything that is
    not one :func:`encode` makes. Pure."""
    try:
        value = json.loads(payload)
    except ValueError:
        raise ValueError("a live payload must be JSON") from None
    fields = value if isinstance(value, dict) else {}
    sender, seq, items = fields.get("s"), fields.get("n"), fields.get("p")
    if not isinstance(sender, str) or type(seq) is not int or not isinstance(items, list):
        raise ValueError("a live payload needs a sender, a sequence number and pieces")
    pieces: list[LivePiece] = []
    for item in items:
        if not (
            isinstance(item, list)
            and len(item) == 5
            and isinstance(item[0], str)
            and isinstance(item[1], str)
            and type(item[2]) is int
            and item[3] in _NAMES
            and isinstance(item[4], str)
        ):
            raise ValueError("a live piece is [conversation, run, turn, kind, text]")
        conversation_id, run_id, turn, kind, text = item
        pieces.append(
            LivePiece(conversation_id, run_id, turn, "delta" if kind == "d" else "discard", text)
        )
    return sender, seq, pieces


# ---- sending and hearing ---------------------------------------------------------------------


def _wake_listener(database: object) -> tuple[Listener, str, Any]:
    """The wake-up listener of an open PostgreSQL ``database``, its schema and its names."""
    from ._postgres import PostgresDatabase  # (no cycle: _postgres does not import this module)

    if not isinstance(database, PostgresDatabase):
        raise TypeError(
            f"live text crosses processes only through PostgreSQL, not {type(database).__name__}"
        )
    return database.wake_listener(), database.schema, database.names


@final
class PostgresLive:
    """Live text through the schema of ``database`` (an open ``PostgresDatabase``): pieces
    offered here are sent (:meth:`offer`, while :meth:`run` runs), and the pieces of other
    senders are heard (:meth:`hear`). See the module notes. ``TypeError`` for another database.

    Counts: :attr:`offered`, :attr:`sent` (pieces in payloads the server took), :attr:`payloads`,
    :attr:`dropped` (a full queue, a failed batch, the connection down); :attr:`heard` (pieces
    handed to the receiver), :attr:`ignored` (this sender's own payloads heard back),
    :attr:`lost` (others' payloads missing between two heard), :attr:`malformed`,
    :attr:`replayed` (a sender's payload heard already, sent again)."""

    __slots__ = (
        "_chars",
        "_conn",
        "_database",
        "_down_until",
        "_heard_seq",
        "_hearing",
        "_key",
        "_lock",
        "_names",
        "_on_pieces",
        "_queue",
        "_sending",
        "_seq",
        "_stopped",
        "_wake",
        "_wake_listener",
        "arrivals",
        "batches",
        "bound",
        "channel",
        "dropped",
        "heard",
        "ignored",
        "limit",
        "lost",
        "malformed",
        "max_chars",
        "offered",
        "payloads",
        "queue_limit",
        "reconnect",
        "replayed",
        "sender",
        "sent",
    )

    def __init__(
        self,
        database: object,
        *,
        bound: int = BOUND,
        max_chars: int = MAX_CHARS,
        limit: int = LIMIT,
    ) -> None:
        if bound < 1 or max_chars < 1:
            raise ValueError("a live queue must hold at least one piece and one character")
        if not 512 <= limit < 8000:
            raise ValueError(f"a payload's limit must be 512 to 7999 bytes, got {limit!r}")
        self._wake_listener, schema, self._names = _wake_listener(database)
        self._database: Any = database
        self._key: AESGCM | None = None  # the schema's live text key, read when first needed
        self.channel = live_channel(schema)
        #: Who sends this object's payloads: its process's prefix and a random part.
        self.sender = f"{process_prefix()}{secrets.token_hex(4)}"
        self.bound = bound
        self.max_chars = max_chars
        self.limit = limit
        #: Seconds nothing is sent after a batch failed.
        self.reconnect = RECONNECT
        #: How full the server's notification queue may be for a batch to be sent.
        self.queue_limit = QUEUE_LIMIT
        self._queue: deque[LivePiece] = deque()
        self._chars = 0
        self._wake = trio.Event()
        self._down_until = float("-inf")
        self._seq = 0
        self._conn: psycopg.Connection[Any] | None = None
        self._lock = threading.Lock()  # the sending connection: one thread at a time
        self._stopped = False
        self._hearing: Listener | None = None
        self._on_pieces: Callable[[list[LivePiece]], None] | None = None
        self._heard_seq: dict[str, int] = {}
        self._sending = 0
        #: A count of the batches done (sent, or dropped), to wait for.
        self.batches = WakeUps()
        #: A count of the payloads heard (handed on, ignored or dropped), to wait for.
        self.arrivals = WakeUps()
        self.offered = 0
        self.sent = 0
        self.payloads = 0
        self.dropped = 0
        self.heard = 0
        self.ignored = 0
        self.lost = 0
        self.malformed = 0
        self.replayed = 0

    async def _sealing_key(self) -> AESGCM:
        """The schema's live text key (read once). Cancellation: as the database's read."""
        key = self._key
        if key is None:
            row = await self._database.read(lambda conn: conn.execute(_KEY_SQL).fetchone())
            if row is None:
                raise StorageClosed()  # a schema always has its key: it is being dropped
            key = self._key = AESGCM(bytes(row[0]))
        return key

    # ---- sending -------------------------------------------------------------------------------

    def offer(self, piece: LivePiece) -> None:
        """Queue ``piece`` to be sent, or drop it (counted) when the queue is full. Never blocks
        (Trio's thread)."""
        self.offered += 1
        if self._stopped or (
            len(self._queue) >= self.bound or self._chars + len(piece.text) > self.max_chars
        ):
            self.dropped += 1
            return
        self._queue.append(piece)
        self._chars += len(piece.text)
        self._wake.set()

    @property
    def queued(self) -> int:
        """The pieces waiting to be sent."""
        return len(self._queue)

    @property
    def sending(self) -> int:
        """The pieces of the batch being sent (:attr:`offered` is :attr:`sent`, :attr:`dropped`,
        :attr:`queued` and these)."""
        return self._sending

    @property
    def backend_pid(self) -> int | None:
        """The server process of the sending connection (None while there is none; read it
        between batches)."""
        conn = self._conn
        return None if conn is None else conn.info.backend_pid

    async def run(self) -> None:
        """Send what is offered, batch after batch, until cancelled (never returns otherwise;
        never raises but ``Cancelled``).

        Cancellation: stops at once; a batch being sent is abandoned to its thread, which sends
        it and — once :meth:`aclose` was called — closes the connection."""
        key: AESGCM | None = None
        while True:
            await self._wake.wait()
            self._wake = trio.Event()
            batch = list(self._queue)
            self._queue.clear()
            self._chars = 0
            if not batch:
                continue
            if trio.current_time() < self._down_until:
                self.dropped += len(batch)
                self.batches.bump()
                continue
            if key is None:
                try:
                    key = await self._sealing_key()
                except Exception as exc:  # the database is failing: as a failed batch
                    log_debug("live text key could not be read", error=type(exc).__name__)
                    self.dropped += len(batch)
                    self._down_until = trio.current_time() + self.reconnect
                    self.batches.bump()
                    continue
            self._sending = len(batch)
            outcome = await trio.to_thread.run_sync(
                self._send_sync, batch, key, abandon_on_cancel=True
            )
            self._sending = 0
            if outcome is None:
                self.dropped += len(batch)
                self._down_until = trio.current_time() + self.reconnect
            else:
                payloads, unsendable = outcome
                self.payloads += payloads
                self.sent += len(batch) - unsendable
                self.dropped += unsendable
            self.batches.bump()

    def _connect(self) -> psycopg.Connection[Any]:
        return self._wake_listener.connect("effectagent-live")  # with the shared keepalives

    def _send_sync(self, batch: list[LivePiece], key: AESGCM) -> tuple[int, int] | None:
        """Send ``batch`` sealed with ``key`` (a worker thread): the payloads sent and the pieces
        that could not be, or None when it failed (the connection is closed; the next batch
        makes another)."""
        with self._lock:
            try:
                if self._stopped:
                    return None
                payloads, seq, unsendable = encode(
                    self.sender, self._seq, batch, plain_limit(self.limit)
                )
                if not payloads:
                    return 0, unsendable
                sealed = [seal(key, self.channel, payload) for payload in payloads]
                if self._conn is None:
                    self._conn = self._connect()
                sent = self._conn.execute(_SEND, (self.channel, sealed, self.queue_limit)).rowcount
                if sent < len(sealed):  # the server's notification queue is filling: give way
                    log_debug("live text dropped: the notification queue is filling")
                    return 0, len(batch)
                self._seq = seq
                return len(payloads), unsendable
            except (psycopg.Error, OSError) as exc:
                # The error's kind only: libpq's messages may name where the server is.
                log_debug("live text could not be sent", error=type(exc).__name__)
                self._close_sync()
                return None
            finally:
                if self._stopped:
                    self._close_sync()

    def _close_sync(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except Exception as exc:  # closing a broken connection: nothing more to do
                log_debug("live connection did not close cleanly", error=type(exc).__name__)

    def listener(self) -> LiveListener:
        """The engine's run listener offering each run's ``TextDelta`` here (and a ``discard``
        for a retried model call whose streamed text is void): give it to a worker's layer
        (``Layer.succeed(RunListenerService, live.listener())``)."""
        return LiveListener(self)

    # ---- hearing -------------------------------------------------------------------------------

    async def hear(self, on_pieces: Callable[[list[LivePiece]], None]) -> None:
        """Listen on the schema's live channel (from now until :meth:`aclose`) and hand the
        pieces of every payload another sender sends to ``on_pieces`` (Trio's thread; it must not
        block). Raises ``RuntimeError`` if it hears already; :class:`CannotOpenDatabase` (no
        password in it) when the first connection fails.

        Cancellation: a checkpoint; once connecting started, it finishes and is listened on."""
        if self._hearing is not None:
            raise RuntimeError("this relay hears its channel already")
        if self._stopped:
            raise StorageClosed()
        await self._sealing_key()
        self._on_pieces = on_pieces
        listener = self._wake_listener.sibling(
            self.channel, self._heard, application_name="effectagent-live-listen"
        )
        self._hearing = listener
        try:
            await listener.start()
        except psycopg.Error as exc:
            self._hearing = None
            raise CannotOpenDatabase(self._names.where, self._names.reason(exc)) from None

    @property
    def hearing(self) -> Listener | None:
        """The listener of :meth:`hear` (None before)."""
        return self._hearing

    def _heard(self, payloads: list[str]) -> None:
        on_pieces = self._on_pieces
        key = self._key
        for payload in payloads:
            try:
                if key is None:  # not heard before the key is read (see ``hear``)
                    self.malformed += 1
                    continue
                sender, seq, pieces = decode(unseal(key, self.channel, payload))
            except ValueError:
                self.malformed += 1
                continue
            if sender == self.sender:
                self.ignored += 1
                continue
            last = self._heard_seq.get(sender)
            if last is not None:
                if seq <= last:  # heard already: sent again, by anyone who may NOTIFY
                    self.replayed += 1
                    continue
                if seq > last + 1:
                    self.lost += seq - last - 1
            if len(self._heard_seq) >= 4096 and sender not in self._heard_seq:
                self._heard_seq.clear()  # senders come and go: forget the old ones
            self._heard_seq[sender] = seq
            self.heard += len(pieces)
            if on_pieces is not None and pieces:
                on_pieces(pieces)
        self.arrivals.bump()

    # ---- closing -------------------------------------------------------------------------------

    async def aclose(self) -> None:
        """Stop sending (what is queued is dropped) and hearing, and close both connections
        (idempotent). :meth:`run` should be cancelled first.

        Cancellation: shielded (a few milliseconds; a batch still being sent is left to its
        thread, which closes the connection after it)."""
        self._stopped = True
        self.dropped += len(self._queue)
        self._queue.clear()
        self._chars = 0
        with trio.CancelScope(shield=True):
            if self._hearing is not None:
                await self._hearing.aclose()
            if self._lock.acquire(blocking=False):
                try:
                    await trio.to_thread.run_sync(self._close_sync)
                finally:
                    self._lock.release()


@final
class LiveListener:
    """The run listener of :meth:`PostgresLive.listener` (the engine's ``RunListener``)."""

    __slots__ = ("_live",)

    def __init__(self, live: PostgresLive) -> None:
        self._live = live

    def on_event(self, event: EventBase) -> None:
        if isinstance(event, TextDelta):
            piece = LivePiece(event.conversation_id, event.run_id, event.turn, "delta", event.text)
            self._live.offer(piece)
        elif isinstance(event, ModelRetrying) and event.discard:
            self._live.offer(LivePiece(event.conversation_id, event.run_id, event.turn, "discard"))

    def call_context(self, run_id: str, tool_call_id: str) -> AbstractContextManager[object]:
        return nullcontext()


@asynccontextmanager
async def running_live(database: object, **options: int) -> AsyncIterator[PostgresLive]:
    """A :class:`PostgresLive` on ``database`` for the block (``options``: its bounds), its
    sender running in a task of its own; closed after it (what is still queued is dropped).

    Cancellation: closing is shielded (a few milliseconds)."""
    live = PostgresLive(database, **options)
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(live.run)
            try:
                yield live
            finally:
                nursery.cancel_scope.cancel()
    finally:
        await live.aclose()
