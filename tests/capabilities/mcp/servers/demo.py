"""A small MCP server written with the SDK's low-level ``Server``, for the MCP client's tests.

Run as ``python demo.py stdio`` (over its stdin/stdout) or ``python demo.py http FD`` (streamable
HTTP on a listening socket the test bound). Every ``tools/call`` it receives is appended, as one
JSON line, to the file named by the environment variable ``DEMO_CALL_LOG`` (when set), so a test
can prove what did — or did not — reach the server (and a cancelled ``hang`` adds a line to
that name plus ``.cancelled``); ``DEMO_BAD_TOOL`` adds a tool whose input
schema is not an object. Its tools cover each case the client maps: text, structured output
(valid and not), media and resources, an error result, a large result, a call that never answers,
a call that kills the server, and a call that changes the tool list.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import anyio
import mcp_types as types
from mcp import MCPError
from mcp.server.lowlevel import NotificationOptions, Server
from mcp.server.stdio import stdio_server
from mcp.shared.message import SessionMessage

# A 1x1 transparent PNG.
PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="

_OBJECT: dict[str, Any] = {"type": "object", "properties": {}}
_SUM_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"sum": {"type": "integer"}},
    "required": ["sum"],
    "additionalProperties": False,
}


def _tool(
    name: str, description: str, schema: dict[str, Any] | None = None, **extra: Any
) -> types.Tool:
    return types.Tool(name=name, description=description, input_schema=schema or _OBJECT, **extra)


BASE_TOOLS = [
    _tool(
        "echo",
        "Echo the text back.",
        {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
        annotations=types.ToolAnnotations(read_only_hint=True, idempotent_hint=True),
    ),
    _tool(
        "add",
        "Add two integers.",
        {
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            "required": ["a", "b"],
        },
        output_schema=_SUM_SCHEMA,
        annotations=types.ToolAnnotations(read_only_hint=True),
    ),
    _tool("bad_output", "Claims a sum, returns a string.", output_schema=_SUM_SCHEMA),
    _tool(
        "fail",
        "Always an error result.",
        {"type": "object", "properties": {"why": {"type": "string"}}},
    ),
    _tool("media", "Text, an image, an embedded resource and a link."),
    _tool(
        "big",
        "A text of the given size.",
        {"type": "object", "properties": {"size": {"type": "integer"}}, "required": ["size"]},
    ),
    _tool("hang", "Never answers."),
    _tool("refuse", "Answers with a JSON-RPC error instead of a result."),
    _tool("noise", "Writes a line that is not JSON-RPC to stdout, then answers."),
    _tool("die", "Exits the server in the middle of the call."),
    _tool(
        "pid", "The server's process id.", annotations=types.ToolAnnotations(read_only_hint=True)
    ),
    _tool(
        "delete_item",
        "Delete an item.",
        {"type": "object", "properties": {"id": {"type": "string"}}, "required": ["id"]},
        annotations=types.ToolAnnotations(
            read_only_hint=False, destructive_hint=True, idempotent_hint=True, open_world_hint=False
        ),
    ),
    _tool("weird.name/with spaces", "A name models do not accept as it is."),
    # Not a valid JSON Schema: the client cannot offer it (it is listed among the skipped tools).
    _tool(
        "broken_input",
        "Its input schema names a type JSON Schema does not have.",
        {"type": "object", "properties": {"x": {"type": "nonsense"}}},
    ),
    # An output schema with its own $id cannot be nested in the envelope: the handler checks it.
    _tool(
        "odd_output",
        "Claims an object with an id, sends something else.",
        output_schema={**_SUM_SCHEMA, "$id": "https://example.invalid/sum"},
    ),
    _tool(
        "add_tool",
        "Add a tool named by the argument and tell the client.",
        {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]},
    ),
]

tools: list[types.Tool] = list(BASE_TOOLS)

# With DEMO_BAD_TOOL set, the server says its tool ``stringly`` takes a string, not an object:
# the SDK's client refuses a tools/list answer holding such a tool as a whole, and its server
# refuses to send one, so the answer is changed on its way out (``_spoil``) — as a server written
# with another SDK, or none, sends it.
BAD = os.environ.get("DEMO_BAD_TOOL") is not None
if BAD:
    tools.append(_tool("stringly", "Its input schema describes a string, not an object."))


def _spoil(message: SessionMessage) -> SessionMessage:
    inner = message.message
    if isinstance(inner, types.JSONRPCResponse) and isinstance(inner.result.get("tools"), list):
        for listed in inner.result["tools"]:
            if listed.get("name") == "stringly":
                listed["inputSchema"] = {"type": "string"}
    return message


def _log_call(ctx: Any, name: str, arguments: dict[str, Any] | None) -> None:
    path = os.environ.get("DEMO_CALL_LOG")
    if path:
        entry: dict[str, Any] = {"name": name, "arguments": arguments}
        request = getattr(ctx, "request", None)  # the HTTP request, over streamable HTTP
        authorization = request.headers.get("authorization") if request is not None else None
        if authorization is not None:
            entry["authorization"] = authorization
        with open(path, "a", encoding="utf-8") as log:
            log.write(json.dumps(entry) + "\n")


def _log_cancelled(name: str) -> None:
    path = os.environ.get("DEMO_CALL_LOG")
    if path:
        with open(f"{path}.cancelled", "a", encoding="utf-8") as log:
            log.write(json.dumps({"name": name}) + "\n")


def _text(text: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)])


async def list_tools(
    ctx: Any, params: types.PaginatedRequestParams | None
) -> types.ListToolsResult:
    return types.ListToolsResult(tools=list(tools))


async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
    arguments = params.arguments or {}
    _log_call(ctx, params.name, params.arguments)
    name = params.name
    if name == "echo":
        return _text(str(arguments["text"]))
    if name == "add":
        total = int(arguments["a"]) + int(arguments["b"])
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=str(total))],
            structured_content={"sum": total},
        )
    if name == "bad_output":
        return types.CallToolResult(
            content=[types.TextContent(type="text", text="nope")],
            structured_content={"sum": "nope"},
        )
    if name == "fail":
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=f"it failed: {arguments.get('why', '')}")],
            is_error=True,
        )
    if name == "odd_output":
        return types.CallToolResult(
            content=[types.TextContent(type="text", text="odd")],
            structured_content={"sum": 1, "extra": True},
        )
    if name == "media":
        return types.CallToolResult(
            content=[
                types.TextContent(type="text", text="a picture"),
                types.ImageContent(type="image", data=PNG, mime_type="image/png"),
                types.EmbeddedResource(
                    type="resource",
                    resource=types.TextResourceContents(
                        uri="demo://notes/1", mime_type="text/markdown", text="# Notes"
                    ),
                ),
                types.EmbeddedResource(
                    type="resource",
                    resource=types.BlobResourceContents(
                        uri="demo://files/1.bin", mime_type="application/octet-stream", blob="AAEC"
                    ),
                ),
                types.ResourceLink(
                    type="resource_link",
                    uri="demo://files/2",
                    name="second",
                    mime_type="text/plain",
                ),
            ]
        )
    if name == "big":
        return _text("x" * int(arguments["size"]))
    if name == "hang":
        try:
            await anyio.sleep_forever()
        except anyio.get_cancelled_exc_class():
            _log_cancelled(name)  # the client's notifications/cancelled reached it
            raise
    if name == "refuse":
        raise MCPError(code=-32602, message="refused: the id is not known here")
    if name == "noise":
        print("debug: this line is not a protocol message", flush=True)
        return _text("after the noise")
    if name == "die":
        os._exit(3)
    if name == "pid":
        return _text(str(os.getpid()))
    if name == "delete_item":
        return _text(f"deleted {arguments['id']}")
    if name == "weird.name/with spaces":
        return _text("weird")
    if name == "add_tool":
        added = str(arguments["name"])
        tools.append(_tool(added, f"The tool {added}, added while connected."))
        # Related to this request: over streamable HTTP it travels on the call's own stream,
        # ahead of the answer (an unrelated one takes the standalone stream, in no order).
        await ctx.session.send_notification(
            types.ToolListChangedNotification(), related_request_id=ctx.request_id
        )
        return _text(f"added {added}")
    if any(tool.name == name for tool in tools):
        return _text(f"{name} ran")
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=f"no tool {name}")], is_error=True
    )


async def list_resources(
    ctx: Any, params: types.PaginatedRequestParams | None
) -> types.ListResourcesResult:
    return types.ListResourcesResult(
        resources=[
            types.Resource(uri="demo://greeting", name="greeting", mime_type="text/plain"),
            types.Resource(uri="demo://blob", name="blob", mime_type="application/octet-stream"),
        ]
    )


async def read_resource(
    ctx: Any, params: types.ReadResourceRequestParams
) -> types.ReadResourceResult:
    if str(params.uri) == "demo://blob":
        contents: list[types.TextResourceContents | types.BlobResourceContents] = [
            types.BlobResourceContents(
                uri="demo://blob", mime_type="application/octet-stream", blob="AAEC"
            )
        ]
    else:
        contents = [
            types.TextResourceContents(uri=str(params.uri), mime_type="text/plain", text="hello")
        ]
    return types.ReadResourceResult(contents=contents)


async def list_prompts(
    ctx: Any, params: types.PaginatedRequestParams | None
) -> types.ListPromptsResult:
    return types.ListPromptsResult(
        prompts=[
            types.Prompt(
                name="greet",
                description="Greet someone.",
                arguments=[types.PromptArgument(name="who", required=True)],
            )
        ]
    )


async def get_prompt(ctx: Any, params: types.GetPromptRequestParams) -> types.GetPromptResult:
    who = (params.arguments or {}).get("who", "nobody")
    return types.GetPromptResult(
        description="A greeting.",
        messages=[
            types.PromptMessage(
                role="user", content=types.TextContent(type="text", text=f"Say hello to {who}.")
            )
        ],
    )


server: Server[Any] = Server(
    "demo",
    version="1.2.3",
    on_list_tools=list_tools,
    on_call_tool=call_tool,
    on_list_resources=list_resources,
    on_read_resource=read_resource,
    on_list_prompts=list_prompts,
    on_get_prompt=get_prompt,
)


async def serve_stdio() -> None:
    options = server.create_initialization_options(NotificationOptions(tools_changed=True))
    async with stdio_server() as (read, write):
        if not BAD:
            await server.run(read, write, options)
            return
        send, sent = anyio.create_memory_object_stream[SessionMessage](0)

        async def forward() -> None:
            async with sent:
                async for message in sent:
                    await write.send(_spoil(message))

        async with anyio.create_task_group() as tasks:
            tasks.start_soon(forward)
            async with send:
                await server.run(read, send, options)


def serve_http(fd: int) -> None:
    """Serve on the listening socket ``fd`` the test bound (so no port can be taken meanwhile,
    and connections wait in its backlog until the server accepts them)."""
    import uvicorn

    app = server.streamable_http_app(host="127.0.0.1")
    uvicorn.run(app, fd=fd, log_level="warning")


if __name__ == "__main__":
    if sys.argv[1:2] == ["http"]:
        serve_http(int(sys.argv[2]))
    else:
        anyio.run(serve_stdio)
