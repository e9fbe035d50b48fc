"""The command's toolsets: the shell reads the workspace through a read-only mount in the real
bubblewrap sandbox, and only shell_write — which asks first — may change it; MCP servers are made
from the config as configured."""

from __future__ import annotations

import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest

from capabilities.approval import Answer, ScriptedApproval
from capabilities.cli._config import Config, McpConfig, ShellConfig
from capabilities.cli._tools import _Origins, _server, open_tools, shell_tools
from capabilities.mcp import HttpServer, StdioServer
from effectagent import Agent, AgentPolicy, Toolkit, open_runtime
from effectagent.ai import ToolAnnotations
from effectagent.core import ToolSuccess
from effectagent.testing import ScriptedModel, Turn
from sandbox import BubblewrapSandbox


@pytest.fixture
def workspace() -> Iterator[Path]:
    """Directly under the temp dir, open to the workload user (nobody, when tests run as root)."""
    directory = Path(tempfile.mkdtemp(prefix="effectagent-tools-"))
    directory.chmod(0o777)
    try:
        yield directory
    finally:
        shutil.rmtree(directory)


async def _run(
    workspace: Path, calls: list[tuple[str, dict[str, Any]]], timeout: float = 20
) -> list[Any]:
    tools = shell_tools(ShellConfig(workspace, write=True, timeout=timeout), BubblewrapSandbox())
    agent = Agent(
        "a",
        "Work.",
        AgentPolicy(max_turns=4, max_tool_calls=4, max_duration=60, tool_concurrency=1),
        Toolkit(*tools),
    )
    model = ScriptedModel.layer([Turn.tool_calls(*calls), Turn.text("Done.")])
    approval = ScriptedApproval([Answer.approve()] * len(calls))
    layer = Toolkit(*tools).handlers() + model + approval.layer()
    async with open_runtime(layer, agents=[agent]) as runtime:
        result = await runtime.run(agent, "Go.")
    # Exactly the writes asked for approval; reading never did.
    asked = [request.tool_name for request in approval.requests]
    assert asked == [name for name, _ in calls if name == "shell_write"]
    return list(result.outcomes)


async def test_shell_sees_the_workspace_read_only(workspace: Path) -> None:
    (workspace / "a.txt").write_text("alpha\n")
    (workspace / "a.txt").chmod(0o644)
    read, write = await _run(
        workspace,
        [("shell", {"command": "cat a.txt; pwd"}), ("shell", {"command": "echo x > b.txt"})],
    )
    assert isinstance(read, ToolSuccess)
    assert read.result["stdout"] == "alpha\n/workspace\n"
    assert isinstance(write, ToolSuccess)  # the command ran and failed: its exit status says so
    assert write.result["exit_code"] != 0
    assert "Read-only file system" in write.result["stderr"]
    assert not (workspace / "b.txt").exists()


async def test_shell_write_asks_first_and_may_write(workspace: Path) -> None:
    (written,) = await _run(workspace, [("shell_write", {"command": "echo x > b.txt"})])
    assert isinstance(written, ToolSuccess)
    assert written.result["exit_code"] == 0
    assert (workspace / "b.txt").read_text() == "x\n"


async def test_a_command_may_spend_its_whole_timeout_on_the_cpu(workspace: Path) -> None:
    """The sandbox's per-process CPU limit (30 s by default) is raised to the shell timeout, so a
    busy command is ended by its timeout, not by the CPU limit before it."""
    (long,) = await _run(workspace, [("shell", {"command": "ulimit -t"})], timeout=120)
    (short,) = await _run(workspace, [("shell", {"command": "ulimit -t"})], timeout=5)
    assert isinstance(long, ToolSuccess)
    assert isinstance(short, ToolSuccess)
    assert (long.result["stdout"], short.result["stdout"]) == ("120\n", "30\n")


def test_only_shell_is_readonly_and_only_shell_write_needs_approval(tmp_path: Path) -> None:
    shell, shell_write = shell_tools(ShellConfig(tmp_path, write=True), BubblewrapSandbox())
    assert (shell.name, shell.annotations.readonly, shell.needs_approval) == ("shell", True, False)
    assert (shell_write.name, shell_write.annotations.readonly) == ("shell_write", False)
    assert shell_write.needs_approval is True
    (alone,) = shell_tools(ShellConfig(tmp_path), BubblewrapSandbox())
    assert alone.name == "shell"
    assert "shell_write" not in alone.description


def test_mcp_servers_are_made_as_configured(tmp_path: Path) -> None:
    stdio = _server(McpConfig("notes", "python", ("server.py",), {"A": "1"}, tmp_path))
    assert isinstance(stdio, StdioServer)
    assert (stdio.name, stdio.command, stdio.args, stdio.cwd, stdio.prefix) == (
        "notes",
        "python",
        ("server.py",),
        tmp_path,
        "notes",
    )
    asks = stdio.needs_approval  # a command the config starts: its readOnlyHint is trusted
    assert callable(asks)
    assert asks(ToolAnnotations(readonly=True)) is False
    assert asks(ToolAnnotations(readonly=False)) is True
    web = _server(McpConfig("my web", url="http://127.0.0.1:9000/mcp"))
    assert isinstance(web, HttpServer)
    # Over the network every call asks, whatever the server says of its tools.
    assert (web.url, web.needs_approval, web.prefix) == (
        "http://127.0.0.1:9000/mcp",
        True,
        "my_web",
    )
    trusted = _server(McpConfig("w", url="http://h/mcp", approval="unless-readonly", prefix=False))
    assert callable(trusted.needs_approval)
    assert trusted.prefix is None
    never = _server(McpConfig("n", command="x", approval="never", prefix="own"))
    assert (never.needs_approval, never.prefix) == (False, "own")


@attrs.frozen
class _Listed:
    name: str


@attrs.frozen
class _Connection:
    tools: tuple[_Listed, ...]


def test_origins_follow_the_engines_order_and_taken_names_are_reported() -> None:
    origins = _Origins()
    origins.own.update({"shell": "built in: the sandboxed shell", "run_program": "Code Mode"})
    first = _Connection((_Listed("run_program"), _Listed("lookup")))
    second = _Connection((_Listed("lookup"), _Listed("wipe")))
    assert origins.left_out("a", first) == [  # type: ignore[arg-type]
        "MCP server 'a': its tool 'run_program' is left out, the name is taken by Code Mode "
        "(set prefix in its [[mcp]] table)"
    ]
    origins.servers.append(("a", first))  # type: ignore[arg-type]
    assert origins.left_out("b", second) == [  # type: ignore[arg-type]
        "MCP server 'b': its tool 'lookup' is left out, the name is taken by MCP server 'a' "
        "(set prefix in its [[mcp]] table)"
    ]
    origins.servers.append(("b", second))  # type: ignore[arg-type]
    assert [origins(name) for name in ("run_program", "lookup", "wipe", "shell", "gone")] == [
        "Code Mode",
        "MCP server 'a'",
        "MCP server 'b'",
        "built in: the sandboxed shell",
        "a tool of this session",
    ]


async def test_a_servers_tool_under_a_taken_name_is_reported_when_the_tools_open() -> None:
    """Without prefixes two servers offering the same names: the second's are left out (as the
    engine leaves them out), and the command can say so; each name's origin is the first."""
    hostile = str(Path(__file__).with_name("hostile_mcp.py"))
    servers = tuple(
        McpConfig(name, sys.executable, (hostile,), prefix=False) for name in ("first", "second")
    )
    async with open_tools(Config(mcp=servers)) as tooling:
        assert tooling.notes == (
            "MCP server 'second': its tool 'wipe' is left out, the name is taken by MCP server "
            "'first' (set prefix in its [[mcp]] table)",
            "MCP server 'second': its tool 'list_notes' is left out, the name is taken by MCP "
            "server 'first' (set prefix in its [[mcp]] table)",
        )
        assert tooling.origin("wipe") == "MCP server 'first'"
