"""Spans of MCP requests, for the effect core's tracing hook (``trace_span``), after the
OpenTelemetry MCP semantic conventions (client side).

Each request is a ``client`` span named ``{mcp.method.name} {target}`` — ``tools/call
{tool}``, ``prompts/get {prompt}``, or the method alone (``resources/read``, ``resources/list``,
...). It carries ``mcp.method.name``, ``mcp.protocol.version``, ``network.transport`` (``pipe``
for stdio, ``tcp`` for HTTP) with ``server.address``/``server.port`` for HTTP, the server's
identity (``effectagent.mcp.server.*``), and for a tool call ``gen_ai.operation.name``
``execute_tool``, ``gen_ai.tool.name`` (the server's name for it) and our name for it; for a
prompt ``gen_ai.prompt.name``. A failed request fails the span with the error's type. Arguments,
a resource's URI and a prompt's arguments are content (the URI may hold anything the caller put
in it), offered only to a starter that asked for content.
"""

from __future__ import annotations

from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from effectagent.effect import AttributeValue, SpanHandle

from ._servers import HttpServer, McpServer

if TYPE_CHECKING:
    from ._mapping import ServerIdentity

__all__ = ["request_started", "span_name"]


def request_started(
    span: SpanHandle,
    server: McpServer,
    identity: ServerIdentity | None,
    method: str,
    *,
    tool: tuple[str, str] | None = None,
    prompt: str | None = None,
) -> None:
    """What a request's span says from its start; ``tool`` is (the server's name, ours)."""
    if not span.recording:
        return
    attributes: dict[str, AttributeValue] = {
        "mcp.method.name": method,
        "effectagent.mcp.server.name": server.name,
    }
    if identity is not None:
        attributes["mcp.protocol.version"] = identity.protocol_version
        attributes["effectagent.mcp.server.identity.name"] = identity.name
        attributes["effectagent.mcp.server.identity.version"] = identity.version
    if isinstance(server, HttpServer):
        attributes["network.transport"] = "tcp"
        address = urlsplit(server.url)  # the host and port only: never credentials or the path
        if address.hostname:
            attributes["server.address"] = address.hostname
        try:
            port = address.port
        except ValueError:
            port = None
        if port is not None:
            attributes["server.port"] = port
    else:
        attributes["network.transport"] = "pipe"
    if tool is not None:
        attributes["gen_ai.operation.name"] = "execute_tool"
        attributes["gen_ai.tool.name"] = tool[0]
        attributes["effectagent.mcp.tool.local_name"] = tool[1]
    if prompt is not None:
        attributes["gen_ai.prompt.name"] = prompt
    for name, value in attributes.items():
        span.set_attribute(name, value)


def span_name(method: str, target: str | None = None) -> str:
    """``{method} {target}``, or the method alone."""
    return method if target is None else f"{method} {target}"
