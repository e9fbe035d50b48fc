"""The pure part of the PostgreSQL store (``_postgres``): what a driver error means, how the
database is named in errors (never with a password), which schema names are accepted, and the
key of a schema's openers' lock."""

from __future__ import annotations

import hashlib
import re
from typing import Final, Literal
from urllib.parse import unquote, urlsplit

import attrs
import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from ._errors import DatabaseInUse

__all__ = [
    "Failure",
    "Names",
    "SchemaInUse",
    "check_schema",
    "failure_kind",
    "lock_key",
    "redact_url",
    "url_passwords",
]

#: A schema name this store accepts: a plain lower-case identifier (the same quoted or not).
_SCHEMA: Final = re.compile(r"[a-z_][a-z0-9_]{0,62}")

#: SQLSTATEs of a transaction the server rolled back because of another one: run it again.
_CONFLICTS: Final = frozenset({"40001", "40P01"})

#: SQLSTATEs of a unique (or exclusion) constraint refusing a row: a true duplicate, or one a
#: concurrent transaction committed after this one's snapshot was taken (the server does not
#: always report that as a serialization failure). Run again a few times: a new snapshot sees
#: the other's row, and a true duplicate fails each time.
_DUPLICATES: Final = frozenset({"23505", "23P01"})

#: What to do about a driver error (:func:`failure_kind`).
Failure = Literal["conflict", "duplicate", "reconnect", "unknown", "failed"]


def failure_kind(sqlstate: str | None, broken: bool, *, committing: bool) -> Failure:
    """What a driver error of a write means, from its SQLSTATE (None: the server sent none),
    whether the connection is broken, and whether ``COMMIT`` had been sent. Pure.

    * ``conflict`` — a serialization failure or deadlock: the server rolled back; run it again;
    * ``duplicate`` — a unique or exclusion constraint refused a row: nothing committed; run it
      again a few times (a row a concurrent transaction added after the snapshot), then it is a
      true duplicate;
    * ``reconnect`` — the connection dropped before ``COMMIT``: nothing committed; run it again
      on another connection;
    * ``unknown`` — the connection failed during ``COMMIT``: it may or may not have committed;
    * ``failed`` — the server refused it: nothing committed; not worth running again.
    """
    if sqlstate in _CONFLICTS:
        return "conflict"
    if sqlstate in _DUPLICATES:
        return "duplicate"
    if committing and (broken or sqlstate is None):
        return "unknown"
    if broken:
        return "reconnect"
    return "failed"


@attrs.frozen
class SchemaInUse(DatabaseInUse):
    """Another process kept the schema's lock for itself (it is cleaning up after processes that
    ended) longer than opening waits for it."""

    waited: float = 0.0

    def __str__(self) -> str:
        return (
            f"the database {self.path} was held by another process cleaning up after processes "
            f"that ended for {self.waited:.1f} s, as long as opening waits: try again"
        )


# ---- names and secrets ---------------------------------------------------------------------------


def url_passwords(url: str) -> list[str]:
    """Every password ``url`` carries (in its user part, or as a parameter)."""
    found: list[str] = []
    if "://" in url:
        userinfo = urlsplit(url).netloc.rpartition("@")[0]
        if ":" in userinfo:
            found.append(userinfo.split(":", 1)[1])
            found.append(unquote(found[-1]))
    try:
        params = conninfo_to_dict(url)
    except psycopg.Error:
        params = {}
    found += [str(v) for k, v in params.items() if "password" in k and v]
    return sorted({p for p in found if p}, key=len, reverse=True)


#: The connection parameters an error may show (anything else might be a secret, or a typo of one).
_SHOWN: Final = frozenset(
    {"host", "hostaddr", "port", "dbname", "user", "sslmode", "target_session_attrs"}
)


def redact_url(url: str) -> str:
    """``url`` as errors show it: ``postgresql://user@host/db?…`` without its password, keeping
    only the parameters that say where (host, port, database, user, ``sslmode``,
    ``target_session_attrs``); a ``key=value`` string likewise. Pure."""
    if "://" in url:
        parts = urlsplit(url)
        userinfo, at, hosts = parts.netloc.rpartition("@")
        netloc = f"{userinfo.split(':', 1)[0]}@{hosts}" if at else hosts
        query = "&".join(p for p in parts.query.split("&") if p.split("=")[0] in _SHOWN)
        return f"{parts.scheme}://{netloc}{parts.path}" + (f"?{query}" if query else "")
    try:
        params = conninfo_to_dict(url)
    except psycopg.Error:
        return "a PostgreSQL database (its connection string cannot be read)"
    return make_conninfo("", **{k: v for k, v in params.items() if k in _SHOWN})


@attrs.frozen
class Names:
    """How to name the database in errors, and what must never appear in them."""

    where: str
    secrets: tuple[str, ...]

    def scrub(self, text: str) -> str:
        for secret in self.secrets:
            text = text.replace(secret, "***")
        return text

    def reason(self, exc: BaseException) -> str:
        """A driver error as a sentence: the server's primary message and SQLSTATE (its detail,
        which may quote values, is left out)."""
        if isinstance(exc, psycopg.Error):
            lines = str(exc).strip().splitlines()
            text = exc.diag.message_primary or (lines[0] if lines else "") or type(exc).__name__
            if exc.sqlstate:
                text = f"{text} (SQLSTATE {exc.sqlstate})"
        else:
            text = type(exc).__name__
        return self.scrub(text)


def check_schema(schema: str) -> None:
    """Refuse (``ValueError``, a sentence) a schema name that is not a plain lower-case
    identifier (the same quoted or not) or that PostgreSQL reserves (``pg_…``); ``TypeError``
    when it is not a str."""
    given: object = schema  # checked at run time too: not every caller runs mypy
    if not isinstance(given, str):
        raise TypeError(f"schema must be a str, got {type(given).__name__}")
    if not _SCHEMA.fullmatch(schema) or schema.startswith("pg_"):
        raise ValueError(
            "the schema must be a plain lower-case name of at most 63 letters, digits and "
            f"underscores, not starting with a digit or 'pg_': {schema!r} is not"
        )


def lock_key(schema: str) -> int:
    """The advisory lock key of ``schema``'s openers (a signed 64-bit number)."""
    digest = hashlib.blake2b(f"effectagent openers {schema}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)
