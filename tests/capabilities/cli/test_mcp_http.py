"""An MCP server reached over streamable HTTP, from the config file, end to end: the command
connects to the URL, offers the server's tools to the model and runs the one it calls."""

from __future__ import annotations

import gc
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from capabilities.cli import ConfigError, load_config
from capabilities.cli._tools import open_tools
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


@pytest.fixture
def collected() -> Iterator[None]:
    """Garbage collected before the test ends (see the filter below)."""
    yield
    gc.collect()


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


# In this process, the SDK's streamable HTTP client leaves its SSE parser's generators to the
# garbage collector (see tests/capabilities/mcp/test_http.py): only their warnings are let
# through, and the test collects garbage before it ends.
@pytest.mark.filterwarnings(
    r"ignore:Async generator '(httpx2\._sse\.EventSource\.__aiter__|httpx2\._models\.Response\."
    r"aiter_(text|bytes|raw)|httpcore2\._async\.connection_pool\.PoolByteStream\.__aiter__)' "
    r"was garbage collected:ResourceWarning"
)
async def test_code_mode_calls_a_url_servers_tools_only_when_the_config_trusts_it(
    tmp_path: Path, demo_http: HttpServer, collected: None
) -> None:
    """Its readOnlyHint is the server's claim: by default none of its tools is run without
    asking, so none enters Code Mode's readonly set; ``approval = "unless-readonly"`` trusts
    the claim."""
    path = write_config(tmp_path, f'[code_mode]\n[[mcp]]\nname = "demo"\nurl = "{demo_http.url}"\n')
    with pytest.raises(ConfigError, match=r"\[code_mode\] has no readonly tool to offer"):
        async with open_tools(load_config(path)):
            pass
    path.write_text(path.read_text() + 'approval = "unless-readonly"\n')
    async with open_tools(load_config(path)) as tooling:
        (program,) = [t for t in tooling.tools if t.name == "run_program"]
        assert "declare const demo: {" in program.description
        assert "  demo_echo(input" in program.description  # readOnlyHint, now trusted
        assert "demo_delete_item(" not in program.description
