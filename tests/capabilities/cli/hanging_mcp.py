"""An MCP server whose one tool, ``wait`` (read-only, so run without asking), never answers —
for the CLI's tests of a run stopped while a tool goes. Run as ``python hanging_mcp.py``
(stdio)."""

from __future__ import annotations

from typing import Any

import anyio
import mcp_types as types
from mcp.server.lowlevel import NotificationOptions, Server
from mcp.server.stdio import stdio_server

TOOLS = [
    types.Tool(
        name="wait",
        description="Wait for ever.",
        input_schema={"type": "object", "properties": {}},
        annotations=types.ToolAnnotations(read_only_hint=True),
    )
]


async def list_tools(
    ctx: Any, params: types.PaginatedRequestParams | None
) -> types.ListToolsResult:
    return types.ListToolsResult(tools=list(TOOLS))


async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
    await anyio.sleep_forever()
    raise AssertionError("unreachable")


server: Server[Any] = Server("hang", version="1", on_list_tools=list_tools, on_call_tool=call_tool)


async def serve() -> None:
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options(NotificationOptions()))


if __name__ == "__main__":
    anyio.run(serve)
