"""An MCP server with one read-only tool (run without asking), for the CLI's tests. Run as
``python one_tool_mcp.py KIND`` (stdio), KIND being

* ``whoami`` — the tool answers with the token it was given in its environment
  (``NOTES_TOKEN``): the secrets a config hands to a server;
* ``wait`` — the tool never answers: a run stopped while a tool goes.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import anyio
import mcp_types as types
from mcp.server.lowlevel import NotificationOptions, Server
from mcp.server.stdio import stdio_server

KIND = sys.argv[1] if len(sys.argv) > 1 else "whoami"
if KIND not in ("whoami", "wait"):
    raise SystemExit(f"one_tool_mcp.py: unknown kind {KIND!r}")

TOOLS = [
    types.Tool(
        name=KIND,
        description="Who am I." if KIND == "whoami" else "Wait for ever.",
        input_schema={"type": "object", "properties": {}},
        annotations=types.ToolAnnotations(read_only_hint=True),
    )
]


async def list_tools(
    ctx: Any, params: types.PaginatedRequestParams | None
) -> types.ListToolsResult:
    return types.ListToolsResult(tools=list(TOOLS))


async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
    if KIND == "wait":
        await anyio.sleep_forever()
    token = os.environ.get("NOTES_TOKEN", "?")
    return types.CallToolResult(content=[types.TextContent(type="text", text=f"token is {token}")])


server: Server[Any] = Server(KIND, version="1", on_list_tools=list_tools, on_call_tool=call_tool)


async def serve() -> None:
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options(NotificationOptions()))


if __name__ == "__main__":
    anyio.run(serve)
