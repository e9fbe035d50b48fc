"""Waiting for the write lock another process holds: bounded retries with backoff.

Several processes write one database file (WAL: any number of readers, one writer at a time).
A write transaction starts with ``BEGIN IMMEDIATE``, which takes the file's write lock at once or
fails with ``SQLITE_BUSY`` while another connection — usually another process — holds it. Only
that first statement can meet the lock: once it is taken, nothing else in the transaction waits
for another writer (in WAL, readers never block a writer, and ``COMMIT`` needs no other lock).

So the wait is here, around ``BEGIN IMMEDIATE`` alone: SQLite's own busy handler is off on the
writer connection, and :func:`begin_immediate` retries with exponential backoff and jitter
(:meth:`BusyPolicy.delays`, pure) until the policy's ``bound`` — the most it ever waits in all —
is spent, then raises :class:`DatabaseBusy`. Nothing was written then: the transaction never
began. It never waits without a bound, and never leaves half a transaction behind.
"""

from __future__ import annotations

import math
import random
import sqlite3
import time
from collections.abc import Callable, Iterator
from typing import Final, TypeVar

import attrs

from ._errors import DatabaseBusy

__all__ = ["BusyPolicy", "begin_immediate", "finite_seconds", "is_busy", "retry_busy"]

R = TypeVar("R")

#: SQLite's primary result codes for "another connection holds a lock".
_SQLITE_BUSY: Final = 5
_SQLITE_LOCKED: Final = 6


def finite_seconds(name: str, value: object) -> float:
    """``value`` (an argument named ``name``), checked: a finite, positive number — not a bool,
    not infinity (a bound that is none: a wait, or a lease, without end). Raises ``ValueError``
    naming ``name``."""
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value <= 0
    ):
        raise ValueError(f"{name} must be a finite, positive number, got {value!r}")
    return value


def _positive(instance: object, attribute: attrs.Attribute[float], value: object) -> None:
    finite_seconds(f"BusyPolicy.{attribute.name}", value)


@attrs.frozen
class BusyPolicy:
    """How long to wait for another process's write lock, and how.

    Waits grow from ``first`` by ``factor`` up to ``cap`` seconds each, every one drawn between
    half of that and all of it (jitter: processes that met the lock together do not retry
    together), and stop once they add up to ``bound`` seconds. Each is a finite, positive
    number (``ValueError`` otherwise: an infinite ``bound`` would wait for ever).
    """

    bound: float = attrs.field(default=10.0, validator=_positive)
    first: float = attrs.field(default=0.002, validator=_positive)
    factor: float = attrs.field(default=2.0, validator=_positive)
    cap: float = attrs.field(default=0.1, validator=_positive)

    @factor.validator
    def _growing(self, attribute: attrs.Attribute[float], value: float) -> None:
        if value < 1:
            raise ValueError(f"BusyPolicy.factor must be at least 1, got {value!r}")

    def delays(self, rng: random.Random) -> Iterator[float]:
        """The waits between attempts, in order; their sum never exceeds ``bound`` (the last is
        cut to fit). Pure given ``rng``."""
        left = self.bound
        step = min(self.first, self.cap)
        while left > 0:
            wait = min(rng.uniform(step / 2, step), left)
            left -= wait
            yield wait
            step = min(step * self.factor, self.cap)


def is_busy(exc: BaseException) -> bool:
    """Whether ``exc`` is SQLite saying another connection holds a lock it needs."""
    if not isinstance(exc, sqlite3.OperationalError):
        return False
    code = getattr(exc, "sqlite_errorcode", None)
    if isinstance(code, int):
        return code & 0xFF in (_SQLITE_BUSY, _SQLITE_LOCKED)
    return "locked" in str(exc) or "busy" in str(exc)  # pragma: no cover - Python < 3.11


def retry_busy(
    attempt: Callable[[], R],
    policy: BusyPolicy,
    *,
    rng: random.Random | None = None,
    sleep: Callable[[float], object] = time.sleep,
) -> R:
    """``attempt()``, tried again after each wait of ``policy`` while it fails busy; raises
    :class:`DatabaseBusy` (with the seconds waited) once the waits are spent. Any other error
    propagates at once. Runs in a worker thread (it sleeps there)."""
    waited = 0.0
    delays = policy.delays(rng or random.Random())
    while True:
        try:
            return attempt()
        except sqlite3.OperationalError as exc:
            if not is_busy(exc):
                raise
            wait = next(delays, None)
            if wait is None:
                raise DatabaseBusy(round(waited, 3)) from None
        sleep(wait)
        waited += wait


def begin_immediate(
    conn: sqlite3.Connection,
    policy: BusyPolicy,
    *,
    rng: random.Random | None = None,
    sleep: Callable[[float], object] = time.sleep,
) -> None:
    """Begin a write transaction on ``conn``, waiting for the write lock as ``policy`` says
    (see :func:`retry_busy`)."""
    retry_busy(lambda: conn.execute("BEGIN IMMEDIATE"), policy, rng=rng, sleep=sleep)
