"""What an HTTP server's configuration holds that must not show: its header values (tokens) and
the values of its URL's query string (``?api_key=...``).

* :func:`masked_url` is the URL as reprs and messages show it: every query value ``***``.
* :func:`argument_secrets` are the values a stdio server's arguments pass as credentials
  (``--token VALUE``, ``--api-key=VALUE``, ``-e GITHUB_TOKEN=VALUE``, ``--header
  "Authorization: Bearer VALUE"``, ``https://host/sse?api_key=VALUE``): its ``env`` values are
  secrets, and so are these.
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

__all__ = ["MASK", "argument_secrets", "masked_url", "redacting_logs", "redactor", "secrets_of"]

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


#: A name that says its value is a credential: an option (``--api-key``), a variable
#: (``GITHUB_TOKEN``), a header (``Authorization``).
#: A credential word standing alone in the name (``--max-tokens``, ``--author`` name none), and
#: not a name for something about one (``--auth-mode``, ``--token-file``).
_CREDENTIAL_NAME = re.compile(
    r"(?<![a-z])(?:api_?key|key|token|secret|passw(?:or)?d|pwd|auth(?:orization)?|credentials?"
    r"|cookie)(?![a-z])(?!.*?[-_. ](?:file|path|dir|mode|type|method|url|uri|name|id)$)",
    re.IGNORECASE,
)
#: An argument that names a credential and gives its value: ``--token=V``, ``GITHUB_TOKEN=V``,
#: ``Authorization: Bearer V``.
_NAMED_VALUE = re.compile(r"^-{0,2}([A-Za-z0-9_.-]+)\s*[=:]\s*(.+)$", re.DOTALL)


def argument_secrets(args: tuple[str, ...]) -> dict[str, str]:
    """The credentials a stdio server's ``args`` pass, by the option or name that gives each: the
    argument after an option named like a credential (``--token VALUE``), and the value of an
    argument that joins such a name to it (``--api-key=VALUE``, ``GITHUB_TOKEN=VALUE``,
    ``Authorization: Bearer VALUE``), and a URL's query value so named
    (``https://host/sse?api_key=VALUE``). An argument passed without such a name is not known to
    be one."""
    found: dict[str, str] = {}
    for index, arg in enumerate(args):
        named = _NAMED_VALUE.match(arg)
        if "://" in arg:  # a URL (``mcp-remote https://host/sse?api_key=VALUE``)
            query = arg.partition("?")[2].partition("#")[0]
            for number, pair in enumerate(query.split("&") if query else ()):
                name, _, value = pair.partition("=")
                if value and _CREDENTIAL_NAME.search(unquote(name)):
                    found[f"args[{index}].query[{number}]"] = value
        elif named is not None:
            if _CREDENTIAL_NAME.search(named[1]):
                found[f"args[{index}]"] = named[2]
        elif (
            arg.startswith("-")
            and _CREDENTIAL_NAME.search(arg)
            and index + 1 < len(args)
            and not args[index + 1].startswith("-")
        ):
            found[f"args[{index + 1}]"] = args[index + 1]
    return found


def secrets_of(url: str | None, headers: Mapping[str, str] | None) -> tuple[str, ...]:
    """The texts of a server's configuration no message may show, longest first: each value of
    ``headers`` (an HTTP server's headers, a stdio server's env and :func:`argument_secrets`)
    and each value of the URL's query, in the forms a message may quote them in."""
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
