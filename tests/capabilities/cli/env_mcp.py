"""An MCP server whose one tool answers with the token it was given in its environment
(``NOTES_TOKEN``) — for the CLI's tests of the secrets a config hands to a server. Run as
``python env_mcp.py`` (stdio)."""

from __future__ import annotations

import os
from typing import Any

import anyio
import mcp_types as types
from mcp.server.lowlevel import NotificationOptions, Server
from mcp.server.stdio import stdio_server

TOOLS = [
    types.Tool(
        name="whoami",
        description="Who am I.",
        input_schema={"type": "object", "properties": {}},
        annotations=types.ToolAnnotations(read_only_hint=True),
    )
]


async def list_tools(
    ctx: Any, params: types.PaginatedRequestParams | None
) -> types.ListToolsResult:
    return types.ListToolsResult(tools=list(TOOLS))


async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
    token = os.environ.get("NOTES_TOKEN", "?")
    return types.CallToolResult(content=[types.TextContent(type="text", text=f"token is {token}")])


server: Server[Any] = Server("env", version="1", on_list_tools=list_tools, on_call_tool=call_tool)


async def serve() -> None:
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options(NotificationOptions()))


if __name__ == "__main__":
    anyio.run(serve)
