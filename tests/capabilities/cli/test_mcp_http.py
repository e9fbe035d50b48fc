"""An MCP server reached over streamable HTTP, from the config file, end to end: the command
connects to the URL, offers the server's tools to the model and runs the one it calls."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from capabilities.mcp import HttpServer
from tests.capabilities.mcp.conftest import calls
from tests.capabilities.mcp.conftest import demo_http as _demo_http
from tests.providers.replay import Reply
from tests.providers.wire import ChatWire

from .support import ServerThread, cli_env, serve, spawn
from .test_cli import ASK, args, finish, write_config

demo_http = _demo_http  # the MCP tests' demo server over HTTP, as a fixture here too


@pytest.fixture
def server() -> Iterator[ServerThread]:
    with serve() as running:
        yield running


@pytest.fixture
def call_log(tmp_path: Path) -> Path:
    return tmp_path / "calls.jsonl"


def test_an_mcp_server_over_http_from_the_config(
    server: ServerThread, tmp_path: Path, demo_http: HttpServer, call_log: Path
) -> None:
    """Its tools are offered under its name; each call asks first — also of a tool the server
    says only reads (approval "always" is the default for a server over the network) — and the
    prompt says which server the tool comes from."""
    home = tmp_path / "home"
    home.mkdir()
    write_config(home, f'[[mcp]]\nname = "demo"\nurl = "{demo_http.url}"\n')
    wire = ChatWire()
    server.script(
        Reply.sse(wire.calls(("call_1", "demo_echo", json.dumps({"text": "over http"})))),
        Reply.sse(wire.text("It echoed.")),
    )
    child = spawn(args(server, "run", "Echo something."), cli_env(home), timeout=40)
    child.expect("demo_echo waits for approval")
    child.expect("  demo_echo — MCP server 'demo'\r\n")
    child.expect('    "text": "over http"\r\n')
    child.expect(ASK)
    assert calls(call_log) == []  # readOnlyHint or not, nothing ran before the answer
    child.sendline("y")
    output, status = finish(child)
    assert status == 0, output
    assert "It echoed." in output.splitlines()
    first, second = server.requests()
    offered = {tool["function"]["name"] for tool in first.json()["tools"]}
    assert {"demo_echo", "demo_add"} <= offered
    assert not {"echo", "add"} & offered
    result = second.json()["messages"][-1]
    assert result["role"] == "tool"
    assert "over http" in result["content"]
    assert [c["name"] for c in calls(call_log)] == ["echo"]  # the server ran it, once
