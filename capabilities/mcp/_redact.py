"""What an HTTP server's configuration holds that must not show: its header values (tokens) and
the values of its URL's query string (``?api_key=...``).

* :func:`masked_url` is the URL as reprs and messages show it: every query value ``***``.
* :func:`redactor` makes the function the connection passes every message through that it
  makes from an error (the transport's, the SDK's, the server's): each secret becomes ``***``.
  Only error paths pay for it; a connection without secrets gets ``str`` itself back.
* :func:`redacting_logs` masks the same secrets in what the SDK and httpx2 log while the
  connection is open: the SDK logs the URL it connects to (DEBUG), httpx2 each request's URL
  (INFO). A logging filter on those two loggers rewrites a record that holds a secret.

Pure but for the logging filter, which is installed on first use and does nothing while no
connection has secrets.
"""

from __future__ import annotations

import logging
import re
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from urllib.parse import quote, unquote, unquote_plus, urlsplit, urlunsplit

__all__ = ["MASK", "masked_url", "redacting_logs", "redactor", "secrets_of"]

MASK = "***"

#: Shorter values are not taken for secrets: replacing them would garble every message.
_MIN_SECRET = 4
#: A part of a header value (``Bearer <token>``) is a secret of its own from this length.
_MIN_PART = 8
_PARTS = re.compile(r"[\s,;=]+")

#: The loggers that write a request's URL.
_URL_LOGGERS = ("mcp.client.streamable_http", "httpx2")


def masked_url(url: str) -> str:
    """``url`` with every value of its query string (and its fragment) shown as ``***``."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return MASK
    if not parts.query and not parts.fragment:
        return url
    query = "&".join(
        f"{item.split('=', 1)[0]}={MASK}" if item else item for item in parts.query.split("&")
    )
    return urlunsplit(parts._replace(query=query, fragment=MASK if parts.fragment else ""))


def secrets_of(url: str | None, headers: Mapping[str, str] | None) -> tuple[str, ...]:
    """The texts of a server's configuration no message may show, longest first: each value of
    ``headers`` (an HTTP server's headers, a stdio server's env) and each value of the URL's
    query, in the forms a message may quote them in."""
    found: set[str] = set()
    for value in (headers or {}).values():
        found.update((value, value.strip(), repr(value)[1:-1]))
        found.update(part for part in _PARTS.split(value) if len(part) >= _MIN_PART)
    try:
        parts = urlsplit(url) if url is not None else None
    except ValueError:
        parts = None
    if parts is not None:
        for item in (parts.query.split("&") if parts.query else []) + [parts.fragment]:
            value = item.split("=", 1)[1] if "=" in item else item
            found.update((value, unquote(value), unquote_plus(value), quote(unquote(value))))
    return tuple(sorted((s for s in found if len(s) >= _MIN_SECRET), key=len, reverse=True))


def redactor(secrets: tuple[str, ...]) -> Callable[[str], str]:
    """The function that masks ``secrets`` in a text (``str`` when there are none)."""
    if not secrets:
        return str
    return lambda text: _redact(text, secrets)


def _redact(text: str, secrets: tuple[str, ...]) -> str:
    for secret in secrets:
        if secret in text:
            text = text.replace(secret, MASK)
    return text


class _LogFilter(logging.Filter):
    """Masks the secrets of the open connections in the records of the loggers it is on."""

    def __init__(self) -> None:
        super().__init__()
        self.active: Counter[str] = Counter()
        self.secrets: tuple[str, ...] = ()

    def update(self) -> None:
        self.secrets = tuple(sorted(self.active, key=len, reverse=True))

    def filter(self, record: logging.LogRecord) -> bool:
        secrets = self.secrets
        if not secrets:
            return True
        message = record.getMessage()
        if any(secret in message for secret in secrets):
            record.msg, record.args = _redact(message, secrets), None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = _redact(record.exc_text, secrets)
        return True


_FILTER = _LogFilter()


@contextmanager
def redacting_logs(secrets: tuple[str, ...]) -> Iterator[None]:
    """While the block runs, ``secrets`` are masked in what the SDK and httpx2 log."""
    if not secrets:
        yield
        return
    for name in _URL_LOGGERS:
        logger = logging.getLogger(name)
        if _FILTER not in logger.filters:
            logger.addFilter(_FILTER)
    _FILTER.active.update(secrets)
    _FILTER.update()
    try:
        yield
    finally:
        _FILTER.active.subtract(secrets)
        _FILTER.active += Counter()  # drops the secrets no open connection holds any more
        _FILTER.update()
