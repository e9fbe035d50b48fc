"""PostgreSQL wake-ups: ``NOTIFY`` in the write that gives work, ``LISTEN`` in whoever waits.

* **The channel** is derived from the schema (``effectagent_wake_`` and the MD5 of its name), so
  two schemas — two independent stores — never wake each other, and the name stays within the
  server's 63 bytes whatever the schema's length.
* **Sending**: a write made with ``wake=True`` runs ``SELECT pg_notify(?, '')`` as its last
  statement, in its own transaction (:func:`waking`): the server delivers the notification only
  if that transaction commits, and once per transaction whatever it sends.
* **Listening**: :class:`Listener` holds one dedicated connection per opened database (outside
  the pool, in autocommit), which ran ``LISTEN``; a Trio task waits for its socket to be readable
  and reads the notifications without blocking (libpq's ``consume_input`` and ``notifies``), so
  no thread is held while nothing happens. Each batch read counts one wake-up. A connection that
  fails is replaced after a short wait (the wake-ups in between are lost: the waiter's poll picks
  that work up), and counts one wake-up once it listens again.
* **Other channels**: a :class:`Listener` made with ``on_payloads`` (see :meth:`Listener.sibling`)
  also hands each batch's payloads, in the order they arrived, to that function — the live text
  relay (``_postgres_live``) listens so, on a connection of its own, reconnecting alike.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any, Final, TypeVar, final

import psycopg
import trio
from psycopg import sql

from .._logging import log_debug, log_warning
from ._port import Connection
from ._postgres_lock import keepalive_options
from ._wakeups import WakeUps

__all__ = ["Listener", "channel", "waking"]

R = TypeVar("R")

#: Seconds between two attempts to connect the listener again after its connection failed.
RECONNECT: Final = 1.0

_NOTIFY: Final = "SELECT pg_notify(?, '')"


def channel(schema: str, purpose: str = "wake") -> str:
    """The notification channel of ``schema``'s wake-ups (or of another ``purpose``: its live
    text's is ``"live"``), within the server's 63 bytes whatever the schema's name."""
    digest = hashlib.md5(schema.encode(), usedforsecurity=False).hexdigest()
    return f"effectagent_{purpose}_{digest}"


def waking(work: Callable[[Connection], R], name: str) -> Callable[[Connection], R]:
    """``work``, then a notification on channel ``name`` in the same transaction."""

    def wrapped(conn: Connection) -> R:
        result = work(conn)
        conn.execute(_NOTIFY, (name,))
        return result

    return wrapped


@final
class Listener:
    """One connection listening on a channel, counting what arrives in :attr:`wake_ups` (and,
    with ``on_payloads``, handing the payloads of each batch to it, in the Trio thread: it must
    not block; what it raises is logged once and it is not called again)."""

    __slots__ = (
        "_application_name",
        "_conn",
        "_done",
        "_on_payloads",
        "_scope",
        "_starting",
        "_url",
        "channel",
        "reconnect",
        "wake_ups",
    )

    def __init__(
        self,
        url: str,
        name: str,
        on_payloads: Callable[[list[str]], None] | None = None,
        *,
        application_name: str = "effectagent-listen",
    ) -> None:
        self._url = url
        self.channel = name
        self.wake_ups = WakeUps()
        #: Seconds between two attempts to connect again after the connection failed.
        self.reconnect = RECONNECT
        self._on_payloads = on_payloads
        self._application_name = application_name
        self._conn: psycopg.Connection[tuple[object, ...]] | None = None
        self._scope: trio.CancelScope | None = None
        self._done: trio.Event | None = None
        self._starting = trio.Lock()

    def sibling(
        self,
        name: str,
        on_payloads: Callable[[list[str]], None],
        *,
        application_name: str,
    ) -> Listener:
        """A new listener (not started) on channel ``name`` of the same server, handing the
        payloads it hears to ``on_payloads``."""
        return Listener(self._url, name, on_payloads, application_name=application_name)

    def connect(self, application_name: str, **options: Any) -> psycopg.Connection[Any]:
        """A new connection to the same server in autocommit mode (blocking: call it from a
        worker thread; the caller closes it). ``options``: more libpq parameters."""
        settings = {**keepalive_options(self._url), **options}
        return psycopg.connect(
            self._url, autocommit=True, application_name=application_name, **settings
        )

    def _connect(self) -> psycopg.Connection[tuple[object, ...]]:
        # Keepalives: a connection that went silent (a partition, a host gone) is noticed and
        # made again, rather than listened on for ever.
        conn = psycopg.connect(
            self._url,
            autocommit=True,
            application_name=self._application_name,
            **keepalive_options(self._url),
        )
        try:
            conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(self.channel)))
        except BaseException:
            conn.close()
            raise
        return conn

    async def start(self) -> None:
        """Connect and ``LISTEN`` (idempotent): every notification sent after this returns is
        counted. Then a system task reads them until :meth:`aclose`. Raises the driver's error
        when the first connection fails.

        Cancellation: a checkpoint; once connecting started, it finishes and is listened on."""
        async with self._starting:
            if self._done is not None:
                return
            self._conn = await trio.to_thread.run_sync(self._connect)
            self._done = trio.Event()
            self._scope = trio.CancelScope()
            trio.lowlevel.spawn_system_task(
                self._run, name=f"effectagent listener ({self._application_name})"
            )

    async def _run(self) -> None:
        assert self._scope is not None
        assert self._done is not None
        try:
            with self._scope:
                while True:
                    conn = self._conn
                    if conn is None:
                        await trio.sleep(self.reconnect)
                        try:
                            self._conn = await trio.to_thread.run_sync(self._connect)
                        except psycopg.Error:
                            continue
                        self.wake_ups.bump()  # what was sent meanwhile is lost: look again
                        continue
                    try:
                        await trio.lowlevel.wait_readable(conn.pgconn.socket)
                        conn.pgconn.consume_input()
                        arrived = 0
                        payloads: list[str] = []
                        while (notify := conn.pgconn.notifies()) is not None:
                            arrived += 1
                            if self._on_payloads is not None:
                                payloads.append(notify.extra.decode("utf-8", "replace"))
                    except (psycopg.Error, OSError) as exc:
                        log_debug(
                            "listener lost its connection",
                            channel=self.channel,
                            error=type(exc).__name__,
                        )
                        self._close_conn()
                        continue
                    if payloads:
                        self._deliver(payloads)
                    if arrived:
                        self.wake_ups.bump()
        finally:
            self._close_conn()
            self._done.set()

    def _deliver(self, payloads: list[str]) -> None:
        on_payloads = self._on_payloads
        if on_payloads is None:
            return
        try:
            on_payloads(payloads)
        except Exception as exc:  # a defect of the receiver: said once, never again called
            self._on_payloads = None
            log_warning(
                "a listener's receiver failed", channel=self.channel, error=type(exc).__name__
            )

    def _close_conn(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()

    @property
    def backend_pid(self) -> int | None:
        """The server process of the listening connection (None while there is none)."""
        conn = self._conn
        return None if conn is None else conn.info.backend_pid

    async def aclose(self) -> None:
        """Stop listening and close the connection (idempotent).

        Cancellation: shielded (a few milliseconds)."""
        if self._done is None:
            return
        if self._scope is not None:
            self._scope.cancel()
        with trio.CancelScope(shield=True):
            await self._done.wait()
