"""The transport under a connection: a stdio server's process or a streamable HTTP endpoint, as the
SDK's pair of message streams, and the end of what a stdio server wrote to its stderr.

The SDK is imported inside :func:`open_transport`, never when this module is imported.
"""

from __future__ import annotations

from contextlib import AsyncExitStack
from typing import Any, TextIO

from ._servers import HttpServer, McpServer, StdioServer

__all__ = ["open_transport", "stderr_tail"]

_STDERR_TAIL = 2048


async def open_transport(
    server: McpServer, stack: AsyncExitStack, errlog: TextIO
) -> tuple[Any, Any]:
    """The (read, write) message streams to ``server``, entered into ``stack``: a stdio server's
    process is started (its stderr going to ``errlog``), an HTTP endpoint reached with the
    server's headers. Leaving ``stack`` closes them (and stops the process).

    Cancellation: as the SDK's transport; what was entered is left by ``stack``.
    """
    if isinstance(server, StdioServer):
        from mcp import StdioServerParameters, stdio_client

        params = StdioServerParameters(
            command=server.command,
            args=list(server.args),
            env=dict(server.env) if server.env is not None else None,
            cwd=server.cwd,
        )
        streams = await stack.enter_async_context(stdio_client(params, errlog=errlog))
    else:
        assert isinstance(server, HttpServer)
        from mcp.client.streamable_http import streamable_http_client

        client = None
        if server.headers:
            import httpx2

            client = await stack.enter_async_context(
                httpx2.AsyncClient(
                    headers=dict(server.headers),
                    timeout=httpx2.Timeout(30.0, read=300.0),
                )
            )
        streams = await stack.enter_async_context(
            streamable_http_client(server.url, http_client=client)
        )
    return streams[0], streams[1]


def stderr_tail(log: TextIO | None) -> str:
    """The end of what the server wrote to ``log`` (its stderr file), as a clause to add to an
    error message ("" when it wrote nothing, or there is no file)."""
    if log is None:
        return ""
    try:
        log.flush()
        size = log.seek(0, 2)
        log.seek(max(0, size - _STDERR_TAIL))
        tail = log.read().strip()
    except (OSError, ValueError):
        return ""
    return f"; it wrote to stderr: ...{tail}" if tail else ""
