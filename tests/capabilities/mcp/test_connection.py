"""A connection to the demo server over stdio: what it discovers, how results map, its resource
and prompt API, and that closing it leaves no process behind."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio
import trio.testing

from capabilities.mcp import (
    McpConnectError,
    McpLimits,
    McpRequestError,
    McpResourceContents,
    McpToolError,
    StdioServer,
    connect,
)
from capabilities.mcp._errors import McpResultTooLarge, McpUnavailable
from effectagent.ai import Tool, ToolCallContext

from .conftest import alive, calls

CALL = ToolCallContext("call-1", "tool")


def by_name(tools: tuple[Tool[Any, Any], ...]) -> dict[str, Tool[Any, Any]]:
    return {tool.name: tool for tool in tools}


async def invoke(tool: Tool[Any, Any], arguments: dict[str, Any]) -> Any:
    assert tool.handler is not None
    return await tool.handler(arguments, CALL)


async def test_connect_discovers_identity_capabilities_and_tools(demo: StdioServer) -> None:
    async with connect(demo) as connection:
        assert connection.identity.as_json() == {
            "name": "demo",
            "version": "1.2.3",
            "protocol_version": "2025-11-25",
        }
        assert connection.capabilities["tools"] == {"listChanged": True}
        assert connection.version == 1
        tools = by_name(connection.tools)
        assert list(tools)[:3] == ["demo_echo", "demo_add", "demo_bad_output"]
        assert connection.remote_names["demo_weird_name_with_spaces"] == "weird.name/with spaces"
        (skipped,) = connection.skipped
        assert skipped.name == "broken_input"
        assert "not a valid JSON Schema" in skipped.reason
        assert "broken_input" not in connection.remote_names.values()
        echo, delete = tools["demo_echo"], tools["demo_delete_item"]
        assert (echo.annotations.readonly, echo.annotations.idempotent) == (True, True)
        assert echo.parameters_schema["required"] == ["text"]
        assert delete.annotations.readonly is False
        assert (delete.annotations.destructive, delete.annotations.idempotent) == (True, True)
        assert delete.annotations.open_world is False
        assert connection.snapshot().tools == connection.tools
        assert connection.snapshot() is connection.snapshot()  # the same while nothing changed


async def test_results_carry_content_structure_and_identity(demo: StdioServer) -> None:
    async with connect(demo) as connection:
        tools = by_name(connection.tools)
        added = await invoke(tools["demo_add"], {"a": 2, "b": 3})
        assert added["structured"] == {"sum": 5}
        assert added["server"]["name"] == "demo"
        assert added["tool"] == "add"
        assert tools["demo_add"].encode_success(added) == added
        media = await invoke(tools["demo_media"], {})
        text, image, note, blob, link = media["content"]
        assert text == {"type": "text", "text": "a picture"}
        assert image["mimeType"] == "image/png"
        assert image["data"].startswith("iVBORw0KGgo")
        assert note["resource"] == {
            "uri": "demo://notes/1",
            "mimeType": "text/markdown",
            "text": "# Notes",
        }
        assert blob["resource"]["blob"] == "AAEC"
        assert link == {
            "type": "resource_link",
            "uri": "demo://files/2",
            "name": "second",
            "mimeType": "text/plain",
        }


async def test_a_stray_line_on_stdout_does_not_lose_the_connection(demo: StdioServer) -> None:
    async with connect(demo) as connection:
        tools = by_name(connection.tools)
        noisy = await invoke(tools["demo_noise"], {})
        assert noisy["content"][0]["text"] == "after the noise"
        assert connection.lost is None
        assert (await invoke(tools["demo_echo"], {"text": "fine"}))["content"][0]["text"] == "fine"


async def test_an_error_result_is_a_declared_failure(demo: StdioServer) -> None:
    async with connect(demo) as connection:
        fail = by_name(connection.tools)["demo_fail"]
        with pytest.raises(McpToolError) as caught:
            await invoke(fail, {"why": "no disk"})
        assert caught.value.message == "it failed: no disk"
        assert fail.is_declared_failure(caught.value)
        with pytest.raises(McpToolError) as refused:
            await invoke(by_name(connection.tools)["demo_refuse"], {})
        assert refused.value.code == -32602
        assert refused.value.message == "refused: the id is not known here"


async def test_an_oversize_result_is_a_failure_naming_the_limit(
    demo: StdioServer, call_log: Path
) -> None:
    small = attrs.evolve(demo, limits=McpLimits(call_timeout=20, max_result_bytes=4096))
    async with connect(small) as connection:
        big = by_name(connection.tools)["demo_big"]
        assert (await invoke(big, {"size": 100}))["content"][0]["text"] == "x" * 100
        with pytest.raises(McpResultTooLarge) as caught:
            await invoke(big, {"size": 5000})
        assert caught.value.limit == 4096
        assert caught.value.size > 5000
        assert "max_result_bytes" in str(caught.value)
        assert big.is_declared_failure(caught.value)


async def test_resources_and_prompts_have_their_own_api(demo: StdioServer) -> None:
    async with connect(demo) as connection:
        resources = await connection.list_resources()
        assert [(r.uri, r.mime_type) for r in resources] == [
            ("demo://greeting", "text/plain"),
            ("demo://blob", "application/octet-stream"),
        ]
        assert await connection.read_resource("demo://greeting") == (
            McpResourceContents("demo://greeting", "text/plain", text="hello"),
        )
        (blob,) = await connection.read_resource("demo://blob")
        assert (blob.blob, blob.text) == ("AAEC", None)
        (prompt,) = await connection.list_prompts()
        assert prompt.name == "greet"
        assert prompt.arguments[0].required
        rendered = await connection.get_prompt("greet", {"who": "Ann"})
        assert rendered.messages[0].role == "user"
        assert rendered.messages[0].content == {"type": "text", "text": "Say hello to Ann."}
        # Nothing of this is offered as a tool.
        assert not any("greet" in name or "greeting" in name for name in connection.remote_names)


async def test_prompt_arguments_that_are_not_a_mapping_are_refused_naming_them(
    demo: StdioServer,
) -> None:
    """A list or a number of arguments failed inside ``dict()`` ("'int' object is not
    iterable"), or was taken as pairs."""
    async with connect(demo) as connection:
        for arguments in (5, [("who", "Ann")], "who=Ann"):
            with pytest.raises(
                TypeError, match=r"^get_prompt: arguments must be None or a mapping"
            ):
                await connection.get_prompt("greet", arguments)  # type: ignore[arg-type]
        rendered = await connection.get_prompt("greet", {"who": "Ann"})
        assert rendered.messages[0].content["text"] == "Say hello to Ann."


async def test_list_changed_is_adopted_as_a_new_snapshot(demo: StdioServer) -> None:
    async with connect(demo) as connection:
        before = connection.snapshot()
        add_tool = by_name(connection.tools)["demo_add_tool"]
        await invoke(add_tool, {"name": "fresh"})
        with trio.fail_after(20):
            await connection.wait_version(2)
        after = connection.snapshot()
        assert after is not before
        assert "demo_fresh" in {t.name for t in after.tools}
        assert "demo_fresh" not in {t.name for t in before.tools}  # the old one is untouched
        # An unchanged tool keeps its identity (and its handler key) across listings.
        assert by_name(after.tools)["demo_echo"] is by_name(before.tools)["demo_echo"]
        assert (await invoke(by_name(after.tools)["demo_fresh"], {}))["content"][0][
            "text"
        ] == "fresh ran"


async def test_a_tool_the_sdk_would_refuse_is_skipped_and_the_others_stay(
    demo: StdioServer,
) -> None:
    """One tool whose input schema is not an object makes the SDK refuse the whole tools/list
    answer; the connection reads it tool by tool and skips that one alone."""
    bad = attrs.evolve(demo, env={**(demo.env or {}), "DEMO_BAD_TOOL": "1"})
    async with connect(bad) as connection:
        skipped = {tool.name: tool.reason for tool in connection.skipped}
        assert set(skipped) == {"broken_input", "stringly"}
        assert skipped["stringly"] == (
            "its input schema does not describe an object: {'type': 'string'}"
        )
        tools = by_name(connection.tools)
        assert "demo_stringly" not in tools
        assert len(tools) == 15  # the 17 the server lists, but the two skipped
        echoed = await invoke(tools["demo_echo"], {"text": "still offered"})
        assert echoed["content"][0]["text"] == "still offered"
        await connection.refresh()  # a listing again reads it tool by tool
        assert {tool.name for tool in connection.skipped} == {"broken_input", "stringly"}


async def test_closing_stops_the_server_process(demo: StdioServer) -> None:
    async with connect(demo) as connection:
        pid = int((await invoke(by_name(connection.tools)["demo_pid"], {}))["content"][0]["text"])
        assert alive(pid)
        echo = by_name(connection.tools)["demo_echo"]
    assert not alive(pid)
    assert connection.lost == "the connection is closed"
    with pytest.raises(McpUnavailable, match="was not sent"):
        await invoke(echo, {"text": "late"})
    with pytest.raises(McpRequestError, match="closed"):
        await connection.list_resources()


async def test_a_server_that_exits_while_idle_is_lost_and_the_next_call_is_not_sent(
    demo: StdioServer, call_log: Path
) -> None:
    """A stdio server that exited between calls left ``lost`` None, and the next call read as
    one in flight when the connection closed ("it may or may not have run") — it was never
    sent: the SDK refuses to send on a closed connection."""
    async with connect(demo) as connection:
        tools = by_name(connection.tools)
        pid = int((await invoke(tools["demo_pid"], {}))["content"][0]["text"])
        os.kill(pid, signal.SIGKILL)
        # The wait for a listing that never comes ends when the connection is lost.
        with trio.fail_after(20), pytest.raises(McpRequestError, match="stdout ended"):
            await connection.wait_version(connection.version + 1)
        assert connection.lost == "the server's stdout ended — it exited, or closed it"
        with pytest.raises(McpUnavailable, match="the call was not sent"):
            await invoke(tools["demo_echo"], {"text": "after"})
    assert [c["name"] for c in calls(call_log)] == ["pid"]


async def test_an_error_in_the_block_is_raised_as_itself(demo: StdioServer) -> None:
    with pytest.raises(KeyError):
        async with connect(demo):
            raise KeyError("mine")


async def test_a_command_that_cannot_start_is_a_connect_error(no_leaked_children: None) -> None:
    with pytest.raises(McpConnectError, match=r"'ghost'.*'/nonexistent/mcp-server' was not found"):
        async with connect(StdioServer("/nonexistent/mcp-server", name="ghost")):
            pass


async def test_a_server_that_exits_at_once_shows_its_stderr(no_leaked_children: None) -> None:
    crash = StdioServer(
        sys.executable,
        ["-c", "import sys; sys.stderr.write('missing API key\\n'); sys.exit(2)"],
        name="crash",
    )
    with pytest.raises(McpConnectError, match="missing API key"):
        async with connect(crash):
            pass


TOKEN = "tok-3b8e0f71c2d94a"


@pytest.mark.parametrize(
    "given",
    [
        ["--token", TOKEN],
        [f"--api-key={TOKEN}"],
        ["-e", f"GITHUB_TOKEN={TOKEN}"],
        ["--header", f"Authorization: Bearer {TOKEN}"],
        [f"https://mcp.example.com/sse?api_key={TOKEN}"],
    ],
    ids=["option", "option=value", "variable", "header", "url"],
)
async def test_a_server_that_echoes_a_credential_argument_on_stderr_does_not_show_it(
    given: list[str], no_leaked_children: None
) -> None:
    """A failed connect quotes the end of the server's stderr: a server that printed its
    command line (a usage error) showed the token its arguments passed."""
    crash = StdioServer(
        sys.executable,
        ["-c", "import sys; sys.stderr.write('usage: %s\\n' % sys.argv); sys.exit(2)", *given],
        name="crash",
    )
    with pytest.raises(McpConnectError, match="usage:") as caught:
        async with connect(crash):
            pass
    assert TOKEN not in str(caught.value)
    assert "***" in str(caught.value)


async def test_a_server_that_never_answers_the_handshake_times_out(
    no_leaked_children: None,
) -> None:
    silent = StdioServer(
        sys.executable,
        ["-c", "import time; time.sleep(120)"],
        name="silent",
        limits=McpLimits(connect_timeout=1.0),
    )
    with trio.fail_after(30), pytest.raises(McpConnectError, match=r"within 1\.0 s"):
        async with connect(silent):
            pass


async def test_cancelling_the_connect_leaves_no_process(no_leaked_children: None) -> None:
    silent = StdioServer(sys.executable, ["-c", "import time; time.sleep(120)"], name="silent")
    with trio.move_on_after(0.5) as scope:
        async with connect(silent):
            pass
    assert scope.cancelled_caught


async def test_cancelling_a_call_keeps_the_connection_usable(
    demo: StdioServer, call_log: Path
) -> None:
    async with connect(demo) as connection:
        tools = by_name(connection.tools)
        async with trio.open_nursery() as nursery:

            async def hang() -> None:
                await invoke(tools["demo_hang"], {})

            nursery.start_soon(hang)
            # Once every task waits, the request has been written to the server's stdin.
            with trio.fail_after(20):
                await trio.testing.wait_all_tasks_blocked()
            nursery.cancel_scope.cancel()
        echoed = await invoke(tools["demo_echo"], {"text": "still here"})
        assert echoed["content"][0]["text"] == "still here"
        assert connection.lost is None
    # The server was told (notifications/cancelled) and stopped the call, long before the block
    # closed its stdin.
    cancelled = call_log.with_name(call_log.name + ".cancelled")
    assert cancelled.read_text().splitlines() == ['{"name": "hang"}']


def test_importing_capabilities_does_not_import_the_sdk() -> None:
    code = (
        "import sys, capabilities, capabilities.mcp; "
        "assert 'mcp' not in sys.modules and 'pydantic' not in sys.modules, "
        "sorted(m for m in sys.modules if m.startswith(('mcp', 'pydantic')))"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


async def test_a_command_that_cannot_be_started_is_said_in_words(
    no_leaked_children: None, tmp_path: Path
) -> None:
    """'FileNotFoundError: [Errno 2] No such file or directory: 'x'' read as a Python repr."""
    plain = tmp_path / "not-a-program"
    plain.write_text("x")
    plain.chmod(0o644)
    for command, problem in (
        ("no-such-mcp-server-xyz", "'no-such-mcp-server-xyz' was not found"),
        (str(plain), f"{str(plain)!r} may not be used"),
    ):
        with pytest.raises(McpConnectError) as caught:
            async with connect(StdioServer(command, name="tools")):
                pass
        assert str(caught.value) == f"MCP server 'tools': it could not be started: {problem}"
        # What went wrong underneath stays its cause (it was dropped with the task group).
        assert isinstance(caught.value.__cause__, OSError)
