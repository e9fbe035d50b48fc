"""Who has a PostgreSQL store open: the openers' advisory lock (``_postgres``), on a connection
of its own.

As the SQLite lock file does (``_database``), a session-level advisory lock keyed by the schema
(:func:`~._postgres_names.lock_key`) says who is there. An opener that takes it exclusively
(:meth:`OpenersLock.take_alone`) is alone: whatever pending state, queued steering and plain
runs' lanes the store holds were left by processes that ended, and it cleans them up
(``_recovery``) before it shares the lock like every other opener
(:meth:`OpenersLock.share_after_recovery`); an opener that is not alone waits, bounded, to share
it (:meth:`OpenersLock.share`). The server lets the lock go when the connection closes or the
process dies.

**Kept while open.** The lock lives as long as its connection: one the server dropped (it
restarted, or failed over, or an administrator ended it) takes the lock with it, and an opener
that came then would count as alone and clean up what live processes hold. So the database checks
the connection every few seconds (:meth:`OpenersLock.check`, from a task of ``_postgres``): a
lost one is replaced and the lock shared again — at once, not exclusively: this process is
alive, so whoever is there is not alone. The window in which another opener may wrongly count as
alone is the time the loss takes to be noticed (a check interval, or — for a cut network — the
TCP keepalive and user timeout set on this connection, about 30 s).
"""

from __future__ import annotations

import random
import threading
import time
from typing import Any, Final, final

import psycopg
from psycopg.conninfo import conninfo_to_dict
from psycopg.rows import TupleRow

from .._logging import log_warning
from ._busy import BusyPolicy
from ._errors import CannotOpenDatabase, StorageError
from ._postgres_names import Names, SchemaInUse

__all__ = ["CONNECT_TIMEOUT", "LOCK_APPLICATION_NAME", "OpenersLock"]

_Conn = psycopg.Connection[TupleRow]

#: The ``application_name`` of the lock's connection.
LOCK_APPLICATION_NAME: Final = "effectagent-lock"

#: Seconds a connection of the store is given to be made (libpq's ``connect_timeout``).
CONNECT_TIMEOUT: Final = 10

#: How a long-lived connection (the lock's, the listeners', live text's sender) notices a network
#: that went silent (TCP only; the URL's own settings win): keepalives after 10 s idle, every
#: 5 s, 3 unanswered; unacknowledged data abandoned after 30 s; a connect given up after 10 s.
_KEEPALIVE: Final[dict[str, Any]] = {
    "keepalives": 1,
    "keepalives_idle": 10,
    "keepalives_interval": 5,
    "keepalives_count": 3,
    "tcp_user_timeout": 30_000,
    "connect_timeout": CONNECT_TIMEOUT,
}


def keepalive_options(url: str) -> dict[str, Any]:
    """The libpq parameters a long-lived connection to ``url`` adds (:data:`_KEEPALIVE`, less
    what the URL sets itself)."""
    given = conninfo_to_dict(url)
    return {k: v for k, v in _KEEPALIVE.items() if k not in given}


@final
class OpenersLock:
    """The openers' lock of one schema, held on a connection of its own (see the module notes).
    Every method blocks: call them from a worker thread."""

    __slots__ = ("_closed", "_conn", "_key", "_mutex", "_names", "_policy", "_url", "retaken")

    def __init__(self, url: str, key: int, names: Names, policy: BusyPolicy) -> None:
        self._url = url  # holds the password: never shown
        self._key = key
        self._names = names
        self._policy = policy
        self._mutex = threading.Lock()
        self._conn: _Conn | None = None
        self._closed = False
        #: How many times a lost connection was replaced and the lock taken again.
        self.retaken = 0

    def connect(self) -> _Conn:
        """Open the lock's connection (autocommit); raises :class:`CannotOpenDatabase`."""
        extra = keepalive_options(self._url)
        try:
            conn = psycopg.connect(
                self._url, autocommit=True, application_name=LOCK_APPLICATION_NAME, **extra
            )
        except psycopg.Error as exc:
            raise CannotOpenDatabase(self._names.where, self._names.reason(exc)) from None
        with self._mutex:
            self._conn = conn
        return conn

    @property
    def connection(self) -> _Conn:
        """The lock's connection (after :meth:`connect`)."""
        if self._conn is None:
            raise RuntimeError("the openers' lock has no connection")
        return self._conn

    @property
    def backend_pid(self) -> int:
        """The server process of the lock's connection."""
        return int(self.connection.info.backend_pid)

    def take_alone(self) -> bool:
        """Take the lock exclusively if nobody holds it: whether this opener is alone."""
        got = self.connection.execute("SELECT pg_try_advisory_lock(%s)", (self._key,)).fetchone()
        return got is not None and bool(got[0])

    def share_after_recovery(self) -> None:
        """Share the lock, then let the exclusive hold go (never unlocked in between)."""
        conn = self.connection
        conn.execute("SELECT pg_advisory_lock_shared(%s)", (self._key,))
        conn.execute("SELECT pg_advisory_unlock(%s)", (self._key,))

    def share(self) -> None:
        """Share the lock, waiting — at most ``policy.bound`` seconds — while an opener that is
        cleaning up holds it exclusively; then :class:`SchemaInUse`."""
        _share(self.connection, self._key, self._names, self._policy)

    def check(self) -> bool:
        """Whether the lock had to be taken again: its connection was found lost, replaced, and
        the lock shared on the new one. Never raises (a failure is logged; the next check tries
        again)."""
        with self._mutex:
            conn = self._conn
            if conn is None or self._closed:
                return False
            try:
                conn.execute("SELECT 1")
                return False
            except psycopg.Error:
                pass
            conn.close()
        log_warning("the store's openers' lock was lost with its connection: taking it again")
        try:
            fresh = self.connect()
            _share(fresh, self._key, self._names, self._policy)
        except Exception as exc:
            error = str(exc) if isinstance(exc, StorageError) else self._names.reason(exc)
            log_warning("the store's openers' lock could not be taken again", error=error)
            return False
        if self.closed:  # closed meanwhile: nothing to keep
            fresh.close()
            return False
        self.retaken += 1
        return True

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        with self._mutex:
            return self._closed

    def close(self) -> None:
        """Close the connection (the server lets the lock go). Idempotent."""
        with self._mutex:
            self._closed = True
            conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()


def _share(conn: _Conn, key: int, names: Names, policy: BusyPolicy) -> None:
    """Hold ``key`` shared on ``conn``, waiting (bounded) while another opener holds it
    exclusively."""
    delays = policy.delays(random.Random())
    waited = 0.0
    while True:
        got = conn.execute("SELECT pg_try_advisory_lock_shared(%s)", (key,)).fetchone()
        if got is not None and got[0]:
            return
        wait = next(delays, None)
        if wait is None:
            raise SchemaInUse(names.where, round(waited, 1))
        time.sleep(wait)
        waited += wait
