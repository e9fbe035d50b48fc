"""The npm reference server ``@modelcontextprotocol/server-everything`` over stdio: a server
not written with the Python SDK. Installed with npm by a fixture (skipped when npm is absent)."""

from __future__ import annotations

from typing import Any

from capabilities.mcp import StdioServer, connect
from effectagent import Agent, AgentPolicy, open_runtime
from effectagent.core import ToolSuccess
from effectagent.testing import ScriptedModel, Turn

from .conftest import LIMITS


async def test_the_reference_server_through_the_engine(
    everything_server: list[str], no_leaked_children: None
) -> None:
    command, *args = everything_server
    server = StdioServer(command, args, name="everything", prefix="ev", limits=LIMITS)
    agent = Agent(
        "ev",
        "Use the tools.",
        AgentPolicy(max_turns=4, max_tool_calls=8, max_duration=120, tool_concurrency=4),
        tool_sources=(server.key,),
    )
    async with connect(server) as connection:
        assert connection.identity.name == "mcp-servers/everything"
        assert connection.capabilities["tools"]["listChanged"] is True
        tools = {tool.name: tool for tool in connection.tools}
        assert connection.remote_names["ev_get-sum"] == "get-sum"
        assert tools["ev_echo"].annotations.readonly
        assert connection.skipped == ()
        model = ScriptedModel.layer(
            [
                Turn.tool_calls(
                    ("ev_echo", {"message": "hello"}),
                    ("ev_get-sum", {"a": 2, "b": 3}),
                    ("ev_get-tiny-image", {}),
                ),
                Turn.text("done"),
            ]
        )
        async with open_runtime(connection.layer() + model, agents=[agent]) as runtime:
            result = await runtime.run(agent, "Go.")
        prompts = await connection.list_prompts()
        resources = await connection.list_resources()
        first = await connection.read_resource(resources[0].uri)
    echo, total, image = result.outcomes
    assert isinstance(echo, ToolSuccess)
    assert echo.result["content"][0]["text"] == "Echo: hello"
    assert isinstance(total, ToolSuccess)
    assert "5" in total.result["content"][0]["text"]
    assert isinstance(image, ToolSuccess)
    kinds: list[Any] = [block["type"] for block in image.result["content"]]
    assert "image" in kinds
    (picture,) = [b for b in image.result["content"] if b["type"] == "image"]
    assert picture["mimeType"] == "image/png"
    assert picture["data"]
    assert "simple-prompt" in [p.name for p in prompts]
    assert first
    assert first[0].uri == resources[0].uri
