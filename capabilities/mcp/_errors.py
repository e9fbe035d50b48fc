"""What can go wrong with an MCP server: connecting (an exception, raised when the connection
opens) and calling a tool (declared failures the model reads, or ``OutcomeUnknown``)."""

from __future__ import annotations

import attrs

from effectagent.effect import TaggedError

__all__ = [
    "McpConnectError",
    "McpMalformedResult",
    "McpRequestError",
    "McpResultTooLarge",
    "McpToolError",
    "McpUnavailable",
    "ServerIdentity",
]


@attrs.frozen
class ServerIdentity:
    """Who answered: the server's name and version as it states them, and the protocol
    version the connection speaks. Recorded in every result envelope, and in the tool
    failures of a connection that completed its handshake (``server``)."""

    name: str
    version: str
    protocol_version: str

    def as_json(self) -> dict[str, str]:
        """The identity as the envelope's ``server`` object."""
        return {
            "name": self.name,
            "version": self.version,
            "protocol_version": self.protocol_version,
        }


class McpConnectError(ConnectionError):
    """The server could not be started, reached or initialized within the connect timeout.

    ``server`` names it (its configured name), ``reason`` says what happened; for a stdio server
    whose process wrote to stderr, the message ends with the last 4 KiB it wrote. An HTTP
    server's header values and query values are masked in it (``***``).
    """

    def __init__(self, server: str, reason: str) -> None:
        super().__init__(f"MCP server {server!r}: {reason}")
        self.server = server
        self.reason = reason


class McpMalformedResult(Exception):
    """The server answered a call with something that is not a tool result of the protocol. The
    engine settles it as a ``ToolDefect``: the remote tool broke its contract."""


@attrs.frozen
class McpToolError(TaggedError):
    """The server ran the tool and says it failed (an ``isError`` result), or refused the call
    with a protocol error (``code`` is then the JSON-RPC error code). The model reads
    ``message``: the text the server gave, bounded by the result size limit, with the
    connection's secrets (an HTTP server's header and query values, a stdio server's ``env``
    values) masked as ``***``. ``server`` is who answered (the handshake's identity)."""

    tool: str
    message: str
    code: int | None = None
    server: ServerIdentity | None = None

    def __str__(self) -> str:
        return self.message


@attrs.frozen
class McpResultTooLarge(TaggedError):
    """The server's result, mapped to JSON, is larger than the connection's ``max_result_bytes``
    (``size`` bytes against ``limit``); it is not passed on, not even in part. ``server`` is
    who answered (the handshake's identity)."""

    tool: str
    size: int
    limit: int
    server: ServerIdentity | None = None

    def __str__(self) -> str:
        return (
            f"the result of {self.tool!r} is {self.size} bytes, over the limit of "
            f"{self.limit} bytes (max_result_bytes)"
        )


@attrs.frozen
class McpUnavailable(TaggedError):
    """The connection to the server was already lost when the call was made (or its request
    could not even be connected), so the call was not sent: nothing happened on the server.
    The connection is not reopened by itself. ``server`` is the server the connection had
    reached (the handshake's identity)."""

    tool: str
    message: str
    server: ServerIdentity | None = None

    def __str__(self) -> str:
        return self.message


class McpRequestError(Exception):
    """A request of the connection's own API (a listing, a resource read, a prompt) got no
    usable answer: the server answered with a protocol error (``code`` is its JSON-RPC code), did
    not answer within the call timeout, or the connection is lost (``code`` is None for both)."""

    def __init__(self, server: str, method: str, reason: str, code: int | None = None) -> None:
        super().__init__(f"MCP server {server!r}: {method}: {reason}")
        self.server = server
        self.method = method
        self.reason = reason
        self.code = code
