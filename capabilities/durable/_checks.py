"""The checks the durable runtime's public constructors and methods make of their arguments, so
that a bad one is refused where it is given — with a ``TypeError`` or ``ValueError`` naming it —
rather than when a worker first runs, or as a database error that differs by backend. Pure: no
I/O. A refusal never repeats a value that may be secret (a secret, a submission's text)."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from effectagent.core import SecretRedactor

from .._rules import storable

__all__ = [
    "check_callable",
    "check_database",
    "check_identifier",
    "check_seconds",
    "check_secrets",
]

#: What every opened database has (``capabilities.storage.Database``), looked for by name: the
#: port is a protocol, so an object of another kind is told apart by what it lacks.
_DATABASE_METHODS = ("read", "write", "listen")


def check_database(database: object) -> None:
    """Refuse (``TypeError``) what is not an opened database: a path, a URL, None."""
    if isinstance(database, str | bytes) or not all(
        callable(getattr(database, name, None)) for name in _DATABASE_METHODS
    ):
        raise TypeError(
            "database must be an opened database (capabilities.storage.open_database or "
            f"open_postgres), got {type(database).__name__}"
        )


def check_callable(name: str, value: object) -> None:
    """Refuse (``TypeError``) a ``value`` that cannot be called."""
    if not callable(value):
        raise TypeError(f"{name} must be callable, got {type(value).__name__}")


def check_identifier(name: str, value: object) -> str:
    """``value`` if it is a str that is not empty or only spaces and that every database keeps:
    ``TypeError`` for another type, ``ValueError`` for an empty one or one holding NUL or a lone
    surrogate (PostgreSQL refuses it at the first write: a worker so named never claimed)."""
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str, got {type(value).__name__}")
    if not value.strip():
        raise ValueError(f"{name} must not be empty")
    if not storable(value):
        raise ValueError(f"{name} must not hold NUL or a lone surrogate")
    return value


def check_seconds(name: str, value: object, *, infinite: bool = False) -> float:
    """``value`` as a float if it is a number of seconds, at least 0 (an int or a float, not a
    bool, not NaN; infinite only when ``infinite``): ``TypeError`` for another type,
    ``ValueError`` out of range."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{name} must be a number of seconds, got {type(value).__name__}")
    seconds = float(value)
    if math.isnan(seconds) or seconds < 0 or (math.isinf(seconds) and not infinite):
        raise ValueError(f"{name} must be a finite number of seconds, at least 0")
    return seconds


def check_secrets(secrets: object) -> tuple[str, ...]:
    """``secrets`` — the runtime's secrets — checked as the runtime will check them, when the
    object is made rather than at its first run: a sequence of str (a lone str or bytes is a
    ``TypeError``: taken letter by letter, it would redact every one of its letters everywhere),
    each one that the redactor accepts (``ValueError`` for one under 4 characters). A refusal
    never repeats a secret."""
    if isinstance(secrets, str | bytes):
        raise TypeError(
            f"secrets must be a sequence of str, not a lone {type(secrets).__name__} "
            "(a one-item list for one secret)"
        )
    if not isinstance(secrets, Iterable):
        raise TypeError(f"secrets must be a sequence of str, got {type(secrets).__name__}")
    found = tuple[Any, ...](secrets)
    for secret in found:
        if not isinstance(secret, str):
            raise TypeError(f"each of secrets must be a str, got {type(secret).__name__}")
    SecretRedactor(found)  # refuses a secret it cannot redact (too short), without echoing it
    return found
