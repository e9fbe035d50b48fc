"""How to reach an MCP server, and the bounds of a connection to it: plain values, checked at
construction, that say nothing about whether a connection is open."""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, TypeAlias
from urllib.parse import urlsplit

import attrs

from effectagent.ai import ToolAnnotations, ToolSource
from effectagent.effect import ServiceKey

from ._redact import masked_url

__all__ = ["HttpServer", "McpLimits", "McpServer", "NeedsApproval", "StdioServer"]

#: Whether a remote tool needs approval: a bool for every tool, or a function of its annotations.
NeedsApproval: TypeAlias = bool | Callable[[ToolAnnotations], bool]

_PREFIX = re.compile(r"^[A-Za-z0-9_-]{1,32}$")
#: What a URL never holds as it is: whitespace and control characters — the C1 controls
#: (U+0080-U+009F) and Unicode's spaces and line and paragraph separators (U+2028) too.
_NOT_IN_URL = re.compile(r"[\x00-\x20\x7f-\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]")


def _positive_seconds(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if type(value) not in (int, float) or not 0 < value < float("inf"):  # type: ignore[operator]
        raise ValueError(f"{attribute.name} must be a positive, finite number, got {value!r}")


def _positive_int(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if type(value) is not int or value < 1:
        raise ValueError(f"{attribute.name} must be a positive int, got {value!r}")


def _seconds(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if type(value) not in (int, float) or not 0 <= value < float("inf"):  # type: ignore[operator]
        raise ValueError(f"{attribute.name} must be a finite number >= 0, got {value!r}")


@attrs.frozen
class McpLimits:
    """The bounds of one connection; every one is finite.

    * ``connect_timeout`` — seconds from starting the process (or the first HTTP request) until
      the handshake and the first tool listing are done;
    * ``call_timeout`` — seconds one request (a tool call, a listing, a resource read) may wait
      for its answer; a tool call that runs out is settled as an unknown outcome;
    * ``max_result_bytes`` — the size of a tool result (or a resource read, a prompt) once
      mapped to compact JSON; a larger one is refused with :class:`McpResultTooLarge`. The
      transport still reads the whole message before it is measured;
    * ``max_message_bytes`` — the size of one message the server sends, as it comes: a stdio
      server's line longer than that drops the connection, saying why (``lost``; a call in
      flight is settled as an unknown outcome, a connect fails). Over streamable HTTP it bounds
      one server-sent event, and a plain JSON answer (read no further: the request it answers
      fails, the connection stays). A message is parsed in one go, holding the event loop for
      about a tenth of a second per MiB.

    What a tool listing may hold (each tool over a bound is left out and named in
    ``connection.skipped`` with the reason; the others are offered):

    * ``max_tools`` — the tools read from the server's listing, in its order, over all its pages;
      the rest of the page that reaches it is skipped and its further pages are not asked for;
    * ``max_description_chars`` — the length of one tool's description;
    * ``max_listing_bytes`` — the size of the offered tools' definitions together (as JSON): a
      tool that would take the listing past it is skipped;
    * ``relist_interval`` — seconds between the starts of two re-listings the server's
      ``list_changed`` notifications cause: the notifications that come meanwhile are covered by
      the next one, so a server that keeps announcing changes cannot keep the client listing.

    ``max_list_items`` bounds a listing of resources or prompts (all its pages together): one
    that goes past it, or past 100 pages, is refused with :class:`McpRequestError`.
    """

    connect_timeout: float = attrs.field(default=20.0, validator=_positive_seconds)
    call_timeout: float = attrs.field(default=60.0, validator=_positive_seconds)
    max_result_bytes: int = attrs.field(default=256 * 1024, validator=_positive_int)
    max_message_bytes: int = attrs.field(default=8 * 1024 * 1024, validator=_positive_int)
    max_tools: int = attrs.field(default=1_000, validator=_positive_int)
    max_description_chars: int = attrs.field(default=10_000, validator=_positive_int)
    max_listing_bytes: int = attrs.field(default=2 * 1024 * 1024, validator=_positive_int)
    relist_interval: float = attrs.field(default=0.5, validator=_seconds)
    max_list_items: int = attrs.field(default=10_000, validator=_positive_int)


def _check_prefix(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if value is not None and (not isinstance(value, str) or not _PREFIX.match(value)):
        raise ValueError(
            f"prefix must be None or 1-32 letters, digits, '_' or '-', got {value!r} (it starts "
            "every tool name the model sees)"
        )


def _check_name(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"name must be a non-empty str, got {value!r}")


def _check_limits(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, McpLimits):
        raise TypeError(
            f"limits must be an McpLimits (e.g. McpLimits(call_timeout=30)), got "
            f"{type(value).__name__}"
        )


def _check_approval(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, bool) and not callable(value):
        raise TypeError(
            "needs_approval must be a bool or a function of the tool's ToolAnnotations, "
            f"got {type(value).__name__}"
        )


def _check_command(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, str):
        raise TypeError(f"command must be a non-empty str, got {type(value).__name__}")
    if not value:
        raise ValueError(f"command must be a non-empty str, got {value!r}")
    if "\0" in value:
        # No process can be started with it: the OS refused it only at connect.
        raise ValueError("command must not hold a NUL character")


def _check_cwd(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if value is None:
        return
    if not isinstance(value, str | os.PathLike):
        raise TypeError(
            "cwd must be None, a str or a path (the server's working directory), got "
            f"{type(value).__name__}"
        )
    if not os.fspath(value):
        raise ValueError("cwd must not be empty: None runs the server in our working directory")


def _check_url(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    # The URL is not echoed: it may hold what must not show in a message.
    if not isinstance(value, str):
        raise TypeError(
            f"url must be a str (an http:// or https:// URL), got {type(value).__name__}"
        )
    if not value.startswith(("http://", "https://")):
        raise ValueError("url must be an http:// or https:// URL")
    if _NOT_IN_URL.search(value):
        raise ValueError(
            "url must not hold a space, a line break or another control character (percent-encode "
            "them; a URL read from a file often ends with a newline: strip it)"
        )
    problem = (
        "url is not a valid URL: its host or port cannot be read (a bracketed IPv6 address, a "
        "port of digits from 1 to 65535)"
    )
    try:  # urllib's message is not passed on: it may quote a part of the URL
        parts = urlsplit(value)
    except ValueError:
        raise ValueError(problem) from None
    if "@" in parts.netloc:
        # The URL names the server in messages, logs and spans (its host is the default name).
        raise ValueError(
            "url must not hold credentials (user:password@host): send them in headers, "
            "e.g. an Authorization header"
        )
    try:
        port = parts.port  # a port that is not one raises here
    except ValueError:
        raise ValueError(problem) from None
    if port == 0:  # no server listens on port 0: "connection refused" only at connect
        raise ValueError(problem)
    if not parts.hostname:
        raise ValueError("url must name a host (http://host[:port]/path)")


def _key(self: Any) -> ServiceKey[ToolSource]:
    return ServiceKey(
        f"MCP server {self.name!r}", "the tools of an open MCP connection (a ToolSource)"
    )


def _str_tuple(value: object) -> tuple[str, ...]:
    # The arguments are not echoed: one may be a token (``--token ...``).
    if isinstance(value, str | bytes) or not isinstance(value, Iterable):
        raise TypeError(
            f"args must be a sequence of str (a one-item tuple for one), got {type(value).__name__}"
        )
    found = tuple(value)
    for index, item in enumerate(found):
        if not isinstance(item, str):
            raise TypeError(f"args[{index}] must be a str, got {type(item).__name__}")
        if "\0" in item:  # named by its place, never shown: it may be a token
            raise ValueError(f"args[{index}] must not hold a NUL character")
    return found


def _args_repr(args: tuple[str, ...]) -> str:
    """How ``args`` shows in a repr: how many there are, never what they are (one may be a
    token, with or without an option naming it)."""
    return f"<{len(args)} argument{'' if len(args) == 1 else 's'}>"


def _str_map(field: str, value: object) -> Mapping[str, str] | None:
    """``field`` (``env``, ``headers``), converted: None, or a copy as a dict of str to str. A
    refusal names the field and the key, and the value's type — never a value, nor the
    mapping: they hold tokens."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise TypeError(f"{field} must be a mapping of str to str, got {type(value).__name__}")
    for key, item in value.items():
        if not isinstance(key, str):
            raise TypeError(f"{field}: each key must be a str, got {type(key).__name__}")
        if not isinstance(item, str):
            raise TypeError(f"{field}[{key!r}] must be a str, got {type(item).__name__}")
    return dict(value)


def _env_map(value: object) -> Mapping[str, str] | None:
    """``env``, converted and checked: each name one a process environment holds (not empty, no
    ``=`` or NUL), each value without a NUL. A refusal names the key, never the value."""
    env = _str_map("env", value)
    for key, item in (env or {}).items():
        if not key or "=" in key or "\0" in key:
            raise ValueError(
                f"env: the name {key!r} is not an environment variable name (not empty, no '=' "
                "or NUL character)"
            )
        if "\0" in item:
            raise ValueError(
                f"env[{key!r}]: the value holds a NUL character, which no process sees"
            )
    return env


# A header's name (an HTTP token) and value (visible ASCII, spaces and tabs only inside it).
_HEADER_NAME = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_HEADER_VALUE = re.compile(r"([\x21-\x7e]([\x20-\x7e\t]*[\x21-\x7e])?)?")


def _headers_map(value: object) -> Mapping[str, str] | None:
    """``headers``, converted and checked: each name an HTTP header name, each value one HTTP
    carries as it is. A refusal names the key, never the value (the HTTP library's refusal,
    later, quoted it)."""
    headers = _str_map("headers", value)
    for key, item in (headers or {}).items():
        if not _HEADER_NAME.fullmatch(key):
            raise ValueError(
                f"headers: the name {key!r} is not an HTTP header name (letters, digits and "
                "!#$%&'*+-.^_`|~)"
            )
        if not _HEADER_VALUE.fullmatch(item):
            raise ValueError(
                f"headers[{key!r}]: the value is not one HTTP carries: printable ASCII only, no "
                "line break or other control character, no space at either end (a token read "
                "from a file often ends with a newline: strip it)"
            )
    return headers


@attrs.frozen(eq=False)  # identity, like a Tool: each server has its own service key
class StdioServer:
    """An MCP server run as a subprocess, spoken to over its stdin and stdout.

    ``command`` and ``args`` start it; ``env`` is added to a small inherited environment
    (``HOME``, ``PATH``, ``USER``, ...) — the rest of ours is not passed on; its values are
    masked in every message the connection makes, the end of the server's stderr a failed
    connect quotes included, and so is an argument given as a credential (``--token VALUE``,
    ``--api-key=VALUE``, ``-e GITHUB_TOKEN=VALUE``, ``"Authorization: Bearer VALUE"``, a URL's
    ``?api_key=VALUE``). Neither ``env`` nor ``args`` shows in the repr (only how many arguments
    there are). Tokens are better passed in ``env``: every local user can read a process's
    arguments. ``cwd`` is its working directory. ``name`` identifies it in messages and its
    service key (default: the command's file name). ``prefix``, when given, starts every tool
    name the model sees (``prefix_toolname``), so two servers' tools cannot collide.
    ``needs_approval`` applies to each of its tools. ``key`` is the service key a connection's :meth:`~McpConnection.layer`
    provides (an ``effectagent.ai.ToolSource``), usable before anything connects.
    """

    command: str = attrs.field(validator=_check_command)
    args: tuple[str, ...] = attrs.field(default=(), converter=_str_tuple, repr=_args_repr)
    env: Mapping[str, str] | None = attrs.field(default=None, converter=_env_map, repr=False)
    cwd: str | Path | None = attrs.field(default=None, validator=_check_cwd)
    name: str = attrs.field(validator=_check_name)
    prefix: str | None = attrs.field(default=None, validator=_check_prefix)
    limits: McpLimits = attrs.field(factory=McpLimits, validator=_check_limits)
    needs_approval: NeedsApproval = attrs.field(default=False, validator=_check_approval)
    key: ServiceKey[ToolSource] = attrs.field(
        init=False, default=attrs.Factory(_key, takes_self=True)
    )

    @name.default
    def _default_name(self) -> str:
        given: object = self.command  # as given: the command's own check runs after this default
        if not isinstance(given, str):
            return "?"
        return Path(given).name or given


@attrs.frozen(eq=False)
class HttpServer:
    """An MCP server reached over streamable HTTP at ``url`` (``http://`` or ``https://``).

    ``headers`` are sent with every request (e.g. an authorization header): each name must be an
    HTTP header name and each value printable ASCII without line breaks (a refusal names the key,
    never the value). Credentials belong there: the URL must not hold a user or password, and
    though a query string (``?api_key=...``) is sent as given, it is shown masked (``?api_key=***``)
    in the repr and in every message, and masked in what the SDK and httpx2 log. A URL without a
    host, with a bad port, or with whitespace or a control character in it is refused. A header value
    or query value an error quotes is masked too. ``name`` (default: the URL's host and port),
    ``prefix``, ``limits``, ``needs_approval`` and ``key`` are as for :class:`StdioServer`.
    """

    url: str = attrs.field(validator=_check_url, repr=masked_url)
    headers: Mapping[str, str] | None = attrs.field(
        default=None, converter=_headers_map, repr=False
    )
    name: str = attrs.field(validator=_check_name)
    prefix: str | None = attrs.field(default=None, validator=_check_prefix)
    limits: McpLimits = attrs.field(factory=McpLimits, validator=_check_limits)
    needs_approval: NeedsApproval = attrs.field(default=False, validator=_check_approval)
    key: ServiceKey[ToolSource] = attrs.field(
        init=False, default=attrs.Factory(_key, takes_self=True)
    )

    @name.default
    def _default_name(self) -> str:
        # The host and port: never the path, the query or the fragment.
        given: object = self.url  # as given: the URL's own check runs after this default
        if not isinstance(given, str):
            return "?"
        rest = given.split("://", 1)[-1]
        return re.split(r"[/?#]", rest, maxsplit=1)[0] or masked_url(self.url)


#: Either kind of server.
McpServer: TypeAlias = StdioServer | HttpServer
