"""API keys: from an argument or the provider's usual environment variable, checked when a model
is opened (a Layer is built), never logged, and scrubbed from every message this package makes."""

from __future__ import annotations

import logging
import os
import re
import threading
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Final
from urllib.parse import SplitResult, unquote, urlsplit, urlunsplit

from effectagent.ai import AuthenticationFailed

__all__ = [
    "redact_url",
    "require_api_key",
    "secret_values",
    "unlogged_url_credentials",
    "url_repr",
    "url_secrets",
]

#: What a credential in a URL is shown as.
_HIDDEN = "[REDACTED]"
#: The shortest URL password (or credential query value) taken as a secret: what is shorter
#: cannot be replaced in a message without mangling it, and is no credential worth the name.
_MIN_URL_SECRET = 4
#: Query parameters whose value is a credential (``?key=…``, ``?access_token=…``, ``?sig=…``).
_CREDENTIAL_PARAMETER = re.compile(r"key|token|secret|password|passwd|sig|auth", re.IGNORECASE)


def require_api_key(given: str | None, variable: str | tuple[str, ...], provider: str) -> str:
    """``given``, else the first of the environment variables ``variable`` (one name, or
    several in order of precedence) that is set and not blank, without surrounding white space
    (the line break a key file ends with); a missing or empty key is
    :class:`~effectagent.ai.AuthenticationFailed` naming the variables."""
    names = (variable,) if isinstance(variable, str) else variable
    if given is not None:
        key = given
    else:
        # A key never starts or ends with white space: a line break a file left is not sent.
        values = (os.environ.get(name, "").strip() for name in names)
        key = next((value for value in values if value), "")
    if not key:
        where = (
            f"the {names[0]} environment variable"
            if len(names) == 1
            else "one of the environment variables " + " or ".join(names)
        )
        raise AuthenticationFailed(f"no API key for {provider}: pass api_key=... or set {where}")
    return key


#: What a key can be sent as in a header: printable ASCII (a key given as ``api_key=`` is checked
#: when the settings are made; one from the environment only here).
_SENDABLE_KEY = re.compile(r"[\t\x20-\x7e]*")


class Secrets(tuple[str, ...]):
    """The secrets of an open model (:func:`secret_values`), and whether its API key can be
    sent at all (``key_sendable``: a key from the environment may hold a line break, or a
    character past ASCII, which no request can carry)."""

    key_sendable: bool = True


def secret_values(key: str | None, headers: Mapping[str, str], url: str | None = None) -> Secrets:
    """What must never appear in a message: the key, the value of each custom header long
    enough to be a credential (plus the part after a ``Bearer`` scheme), and the credentials
    the base ``url`` carries (:func:`url_secrets`)."""
    found: list[str] = [key] if key else []
    for value in headers.values():
        found.extend(_credential_parts(value))
    found.extend(url_secrets(url))
    secrets = Secrets(dict.fromkeys(found))
    secrets.key_sendable = key is None or _SENDABLE_KEY.fullmatch(key) is not None
    return secrets


def url_secrets(url: str | None) -> tuple[str, ...]:
    """The credentials a URL carries, as written and decoded: the password of its user info
    (``https://user:PASSWORD@host``) — or the user name when there is no password and it is
    long enough to be a token (``https://TOKEN@host``) — and the value of each query parameter
    named like a credential (``?api_key=…``)."""
    parts = _split(url)
    if parts is None:
        return ()
    found: list[str] = []
    userinfo, at, _ = parts.netloc.rpartition("@")
    if at:
        user, colon, password = userinfo.partition(":")
        if colon and password:
            found.append(password)
        elif len(user) >= 8:
            found.append(user)
    for pair in parts.query.split("&") if parts.query else ():
        name, equals, value = pair.partition("=")
        if equals and value and _CREDENTIAL_PARAMETER.search(unquote(name)):
            found.append(value)
    forms = (form for value in found for form in (value, unquote(value)))
    return tuple(dict.fromkeys(f for f in forms if len(f) >= _MIN_URL_SECRET))


def redact_url(url: str) -> str:
    """``url`` as it may be shown: its user info (``user:password@``) and the values of its
    credential query parameters replaced by ``[REDACTED]`` — the rest as given."""
    parts = _split(url)
    if parts is None:
        return _HIDDEN
    netloc = parts.netloc
    if "@" in netloc:
        netloc = f"{_HIDDEN}@{netloc.rpartition('@')[2]}"
    pairs = []
    for pair in parts.query.split("&") if parts.query else ():
        name, equals, value = pair.partition("=")
        if equals and value and _CREDENTIAL_PARAMETER.search(unquote(name)):
            pair = f"{name}={_HIDDEN}"
        pairs.append(pair)
    return urlunsplit((parts.scheme, netloc, parts.path, "&".join(pairs), parts.fragment))


def url_repr(url: str | None) -> str:
    """The ``repr`` of a settings' URL field: :func:`redact_url`'s form (None as None)."""
    return repr(None if url is None else redact_url(url))


def _split(url: str | None) -> SplitResult | None:
    if not url:
        return None
    try:
        return urlsplit(url)
    except ValueError:
        return None


def _credential_parts(value: str) -> Iterable[str]:
    if len(value) >= 8:
        yield value
        scheme, _, token = value.partition(" ")
        if token and scheme.lower() in ("bearer", "basic", "token"):
            yield token


#: The loggers that write a request's URL — the SDKs' HTTP stack at INFO (``HTTP Request: POST
#: https://user:PASSWORD@host/...``), the SDKs' clients at DEBUG.
_URL_LOGGERS: Final = (
    "httpx2",
    "httpx",
    "openai._base_client",
    "anthropic._base_client",
    "google_genai._api_client",
)


class _UrlCredentials(logging.Filter):
    """Replaces the credentials of the open models' base URLs in the records of
    :data:`_URL_LOGGERS` (a logger's filter sees the records logged to it, whatever handles
    them). The secrets are a tuple swapped whole: a record may be logged from a worker thread."""

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()
        self._counts: Counter[str] = Counter()
        self._secrets: tuple[str, ...] = ()

    def filter(self, record: logging.LogRecord) -> bool:
        secrets = self._secrets
        if secrets:
            try:
                message = record.getMessage()
            except Exception:  # a record that cannot be formatted: its handler reports it
                return True
            clean = message
            for secret in secrets:
                clean = clean.replace(secret, _HIDDEN)
            if clean != message:
                record.msg, record.args = clean, None
        return True

    def change(self, secrets: Iterable[str], by: int) -> None:
        with self._lock:
            self._counts.update(dict.fromkeys(secrets, by))
            self._counts = +self._counts  # drops what no open model holds any more
            # The longest first: a secret inside another is not replaced before it.
            self._secrets = tuple(sorted(self._counts, key=len, reverse=True))


_FILTER: Final = _UrlCredentials()


@contextmanager
def unlogged_url_credentials(url: str | None) -> Iterator[None]:
    """For the block, the credentials ``url`` carries (:func:`url_secrets`) are replaced by
    ``[REDACTED]`` in what the SDKs and their HTTP stack log (they log each request's URL)."""
    secrets = url_secrets(url)
    if not secrets:
        yield
        return
    for name in _URL_LOGGERS:
        logging.getLogger(name).addFilter(_FILTER)  # once: a filter already there is kept
    _FILTER.change(secrets, 1)
    try:
        yield
    finally:
        _FILTER.change(secrets, -1)
