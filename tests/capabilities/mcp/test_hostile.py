"""A server that breaks the protocol's good manners on purpose (``servers/hostile.py``): what it
lists, says or writes is bounded, and what breaks settles one tool or one call — never the run,
never the event loop."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio

from capabilities.mcp import (
    McpConnectError,
    McpConnection,
    McpLimits,
    McpRequestError,
    McpToolError,
    McpUnavailable,
    connect,
)
from capabilities.mcp._errors import McpMalformedResult
from effectagent import Agent, AgentPolicy, Toolkit, open_runtime
from effectagent import tool as tool_decorator
from effectagent.ai import OutcomeUnknown, ToolCallContext
from effectagent.core import ToolSuccess
from effectagent.testing import ScriptedModel, Turn

from .conftest import LIMITS, MakeHostile, alive

CALL = ToolCallContext("call-1", "tool")
POLICY = AgentPolicy(max_turns=4, max_tool_calls=8, max_duration=120, tool_concurrency=4)
OBJ: dict[str, Any] = {"type": "object", "properties": {"q": {"type": "string"}}}
ECHO = {"name": "echo", "description": "Echo q.", "inputSchema": OBJ}


async def invoke(connection: McpConnection, name: str, arguments: dict[str, Any]) -> Any:
    handler = {t.name: t for t in connection.tools}[name].handler
    assert handler is not None
    return await handler(arguments, CALL)


def tool(name: str, schema: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"name": name, "description": f"The tool {name}.", "inputSchema": schema, **extra}


LOOP = {
    "type": "object",
    "properties": {"q": {"$ref": "#/$defs/x"}},
    "$defs": {"x": {"$ref": "#/$defs/x"}},
}


async def test_a_tool_whose_schema_loops_is_skipped_and_the_run_goes_on(
    hostile: MakeHostile,
) -> None:
    """Offering a tool whose input schema is a ``$ref`` loop failed the whole run with a
    RecursionError as soon as the model called it."""
    mutual = {
        "type": "object",
        "properties": {"q": {"$ref": "#/$defs/a"}},
        "$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}},
    }
    server = hostile(
        {
            "tools": [
                ECHO,
                tool("reflooop", LOOP),
                tool("refmutual", mutual),
                tool("outloop", OBJ, outputSchema=LOOP),
            ]
        }
    )
    agent = Agent("a", "Use the tools.", POLICY, tool_sources=(server.key,))
    async with connect(server) as connection:
        assert [t.name for t in connection.tools] == ["echo"]
        skipped = {t.name: t.reason for t in connection.skipped}
        assert set(skipped) == {"reflooop", "refmutual", "outloop"}
        assert "refers to itself without end" in skipped["reflooop"]
        model = ScriptedModel.layer(
            [Turn.tool_calls(("echo", {"q": "hi"}), ("reflooop", {"q": "x"})), Turn.text("ok")]
        )
        async with open_runtime(connection.layer() + model, agents=[agent]) as runtime:
            with trio.fail_after(60):
                result = await runtime.run(agent, "Go.")
    assert result.status == "completed"
    echo, loop = result.outcomes
    assert isinstance(echo, ToolSuccess)
    assert not isinstance(loop, ToolSuccess)  # a tool the model was not offered


async def test_tools_past_max_tools_are_skipped_and_further_pages_not_read(
    hostile: MakeHostile, tmp_path: Path
) -> None:
    """Listings had no bound: 50,000 tools were all checked and offered, page after page."""
    log = tmp_path / "lists.log"
    server = hostile(
        {
            "tools": [tool(f"t{i}", OBJ) for i in range(4)],
            "tools_cursor": True,
            "list_log": str(log),
        },
        limits=attrs.evolve(LIMITS, max_tools=10),
    )
    async with connect(server) as connection:
        names = [t.name for t in connection.tools]
        skipped = [(t.name, t.reason) for t in connection.skipped]
    assert names == ["t0", "t1", "t2", "t3", "t0_p1", "t1_p1", "t2_p1", "t3_p1", "t0_p2", "t1_p2"]
    assert len(log.read_text().splitlines()) == 3  # no fourth page was asked for
    over = "the server lists more than 10 tools (max_tools)"
    assert skipped == [
        ("t2_p2", over),
        ("t3_p2", over),
        ("(more pages)", "the listing reached max_tools (10): its further pages were not read"),
    ]


async def test_a_storm_of_list_changed_notifications_is_paced(
    hostile: MakeHostile, tmp_path: Path
) -> None:
    """Each list-changed notification could start a re-listing as soon as the last one ended: a
    server that kept announcing kept the client listing. Re-listings start at least
    ``relist_interval`` apart; the notifications meanwhile are covered by the next."""
    log = tmp_path / "lists.log"
    storm = tool("storm", {"type": "object", "properties": {"n": {"type": "integer"}}})
    server = hostile({"tools": [ECHO, storm], "list_log": str(log)})
    interval = server.limits.relist_interval
    started = trio.current_time()
    async with connect(server) as connection:
        for _ in range(2):
            await invoke(connection, "storm", {"n": 300})
            assert connection.version >= 2  # the call returned once its change was adopted
    elapsed = trio.current_time() - started
    relistings = len(log.read_text().splitlines()) - 1  # the first is the connection's own
    assert relistings >= 2
    # Each re-listing started at least `interval` after the one before.
    assert relistings <= 1 + elapsed / interval, (relistings, elapsed)


async def test_a_listing_answer_the_sdk_cannot_read_fails_the_connect_at_once(
    hostile: MakeHostile,
) -> None:
    """One tool nested deeper than the SDK's JSON parser goes made it drop the whole answer:
    the connect waited out connect_timeout and blamed the server's slowness."""
    levels = 200  # 400 levels of JSON: pydantic's parser stops at 255
    schema = '{"type": "object", "properties": {"a": ' * levels + "{}" + "}}" * levels
    raw = '{"tools": [{"name": "deep", "inputSchema": ' + schema + "}]}"
    server = hostile({"tools_raw": raw}, limits=attrs.evolve(LIMITS, connect_timeout=10.0))
    with pytest.raises(McpConnectError) as caught:
        async with connect(server):
            pass  # pragma: no cover - refused before
    reason = caught.value.reason
    assert "connect_timeout" not in reason
    assert reason.startswith("the answer to tools/list could not be read: ")
    assert "recursion limit exceeded" in reason


@tool_decorator(readonly=True)
async def ping(q: str) -> str:
    """The local ping.

    Args:
        q: anything.
    """
    return f"local ping {q}"


async def test_a_server_tool_an_agents_own_tool_hides_is_listed_as_skipped(
    hostile: MakeHostile,
) -> None:
    """The agent's toolkit comes before its tool sources (``Agent.tool_sources``): the server's
    ``ping`` was left out of every turn with only a log line, and ``skipped`` did not say."""
    server = hostile({"tools": [ECHO, tool("ping", OBJ), tool("pong", OBJ)]})
    agent = Agent("a", "Use the tools.", POLICY, toolkit=Toolkit(ping), tool_sources=(server.key,))
    async with connect(server) as connection:
        connection.reserve(agent, "pong")
        assert [t.name for t in connection.tools] == ["echo"]
        why = "a tool of the agent 'a' has this name, and an agent's own tools come first"
        assert [(t.name, t.reason) for t in connection.skipped] == [
            ("ping", why),
            ("pong", "the name is reserved (McpConnection.reserve)"),
        ]
        assert connection.snapshot().tools == connection.tools
        await connection.refresh()  # a new listing keeps the reservations
        assert [t.name for t in connection.skipped] == ["ping", "pong"]
        model = ScriptedModel.layer([Turn.tool_calls(("ping", {"q": "hi"})), Turn.text("ok")])
        layers = connection.layer() + model + Toolkit(ping).handlers()
        async with open_runtime(layers, agents=[agent]) as runtime:
            result = await runtime.run(agent, "Go.")
    (pinged,) = result.outcomes
    assert isinstance(pinged, ToolSuccess)
    assert pinged.result == "local ping hi"


async def test_a_refused_reservation_reserves_nothing(hostile: MakeHostile) -> None:
    """``reserve("pong", 5)`` kept "pong" before it refused 5, yet left the listing as it was:
    "pong" was offered until the next listing, then skipped — for a call that had failed."""
    server = hostile({"tools": [ECHO, tool("pong", OBJ)]})
    async with connect(server) as connection:
        with pytest.raises(TypeError, match=r"^reserve: each owner must be .*got int$"):
            connection.reserve("pong", 5)  # type: ignore[arg-type]
        await connection.refresh()
        assert [t.name for t in connection.tools] == ["echo", "pong"]
        assert connection.skipped == ()


async def test_a_resource_listing_that_never_ends_is_refused_past_its_bound(
    hostile: MakeHostile,
) -> None:
    """An endless cursor gave 200,000 resources: every page was read and kept."""
    server = hostile({"resources_per_page": 300}, limits=attrs.evolve(LIMITS, max_list_items=1_000))
    async with connect(server) as connection:
        with pytest.raises(McpRequestError, match=r"more than 1000 items \(max_list_items\)"):
            await connection.list_resources()
        assert connection.lost is None
    few = hostile({"resources_per_page": 1})
    async with connect(few) as connection:
        with pytest.raises(McpRequestError, match="more than 100 pages"):
            await connection.list_resources()
    assert McpLimits().max_list_items == 10_000


async def test_what_a_server_writes_to_stderr_is_drained_and_only_its_end_kept(
    hostile: MakeHostile,
) -> None:
    """A stdio server's stderr went to a temporary file that grew without bound (500 MB written
    in the audit) to quote its last 2 KiB. It is a pipe now, read into a small ring."""
    server = hostile({"tools": [ECHO, tool("stderr", {"type": "object"})]})
    async with connect(server) as connection:
        # 2 MiB: far more than a pipe holds, so the call returns only if someone reads it.
        answered = await invoke(connection, "stderr", {"n": 2 * 1024 * 1024})
    assert answered["content"][0]["text"].startswith("pipe:")
    flood = hostile({"stderr_then_exit": 1024 * 1024})
    with pytest.raises(McpConnectError) as caught:
        async with connect(flood):
            pass  # pragma: no cover - refused before
    reason = caught.value.reason
    assert reason.endswith("LAST-LINE")
    quoted = reason[reason.index("it wrote to stderr: ") :]
    assert len(quoted) <= 4200


async def test_the_stderr_a_failed_connect_quotes_masks_the_servers_env_values(
    hostile: MakeHostile,
) -> None:
    """``env`` is how a stdio server gets its token; a server that logs its settings to stderr
    and exits had the token quoted in the connect error."""
    canary = "CANARY-s3cr3t-9f2"
    server = attrs.evolve(
        hostile({"stderr_then_exit": 0, "echo_env": ["API_TOKEN", "MODE"]}),
        env={"API_TOKEN": canary, "MODE": "on"},
    )
    with pytest.raises(McpConnectError) as caught:
        async with connect(server):
            pass  # pragma: no cover - refused before
    assert canary not in str(caught.value)
    assert "API_TOKEN=***" in caught.value.reason
    assert "MODE=on" in caught.value.reason  # too short to be a secret: quoted as it is
    assert caught.value.reason.endswith("LAST-LINE")


async def test_a_message_over_max_message_bytes_drops_the_connection_saying_why(
    hostile: MakeHostile,
) -> None:
    """The SDK's stdio reader joins the pieces of a line again for each piece it reads: a 50 MB
    answer took minutes of CPU before it was even measured against max_result_bytes."""
    limits = attrs.evolve(LIMITS, max_message_bytes=1024 * 1024)
    server = hostile({"tools": [ECHO, tool("huge", {"type": "object"})]}, limits=limits)
    async with connect(server) as connection:
        small = await invoke(connection, "huge", {"n": 1000})  # under the limit: as usual
        assert small["content"][0]["text"] == "H" * 1000
        with pytest.raises(OutcomeUnknown, match=r"max_message_bytes"):
            await invoke(connection, "huge", {"n": 4 * 1024 * 1024})
        assert connection.lost is not None
        assert "more than 1048576 bytes (max_message_bytes)" in connection.lost
        with pytest.raises(McpUnavailable, match="max_message_bytes"):
            await invoke(connection, "echo", {"q": "after"})
    assert McpLimits().max_message_bytes == 8 * 1024 * 1024


async def test_a_server_that_ignores_eof_and_sigterm_is_stopped_with_its_child(
    hostile: MakeHostile, tmp_path: Path
) -> None:
    """Leaving the block stops the whole process group: stdin closed, then SIGTERM, then
    SIGKILL — also a child the server started, which keeps the pipes open."""
    pids = tmp_path / "pids"
    server = hostile({"stubborn": True, "pids_file": str(pids)})
    async with connect(server):
        leader, child = (int(pid) for pid in pids.read_text().split())
        handles = [os.pidfd_open(leader), os.pidfd_open(child)]
    try:
        with trio.fail_after(30):  # the process exits: its pidfd turns readable
            for handle in handles:
                await trio.lowlevel.wait_readable(handle)
    finally:
        for handle in handles:
            os.close(handle)
    assert not alive(leader)
    assert not alive(child)


TREE_OUT: dict[str, Any] = {
    "type": "object",
    "properties": {"v": {"$ref": "#/$defs/n"}},
    "$defs": {"n": {"type": "array", "items": {"anyOf": [{"allOf": [{"$ref": "#/$defs/n"}]}]}}},
}
# The same, each level going through many more schemas at its place.
LONG: dict[str, Any] = {"$ref": "#/$defs/n"}
for _ in range(8):
    LONG = {"allOf": [LONG]}
TREE_LONG = {**TREE_OUT, "$defs": {"n": {"type": "array", "items": LONG}}}


async def test_structured_content_too_deep_to_check_is_a_defect_of_the_call(
    hostile: MakeHostile,
) -> None:
    """Checking structured content against a recursive output schema recursed once for each
    schema at each level of the value: deep content against a long chain of schemas recursed past
    Python's limit (where jsonschema's Rust helpers may turn the RecursionError into a
    PanicException, not even an Exception). Structured content may be 32 levels deep, and an
    output schema is judged for that depth as an input schema is."""
    deep = tool("deep", {"type": "object"}, outputSchema=TREE_OUT)
    long = tool("long", {"type": "object"}, outputSchema=TREE_LONG)
    server = hostile({"tools": [ECHO, deep, long]})
    agent = Agent("a", "Use the tools.", POLICY, tool_sources=(server.key,))
    async with connect(server) as connection:
        assert [t.name for t in connection.tools] == ["echo", "deep"]
        (skipped,) = connection.skipped
        assert skipped.name == "long"
        assert "its output schema is too deep to check" in skipped.reason
        shallow = await invoke(connection, "deep", {"n": 30})  # 32 levels with its object
        value, levels = shallow["structured"]["v"], 2
        while value:
            value, levels = value[0], levels + 1
        assert levels == 32
        model = ScriptedModel.layer(
            [Turn.tool_calls(("deep", {"n": 40}), ("echo", {"q": "hi"})), Turn.text("ok")]
        )
        async with open_runtime(connection.layer() + model, agents=[agent]) as runtime:
            with trio.fail_after(60):
                result = await runtime.run(agent, "Go.")
    assert result.status == "completed"
    too_deep, echo = result.outcomes
    assert too_deep.kind == "defect"
    assert "nested deeper than 32 levels" in too_deep.message
    assert isinstance(echo, ToolSuccess)


_DEEP = '{"a": ' * 200 + "1" + "}" * 200  # 200 levels: past the SDK's JSON parser


@pytest.mark.parametrize(
    ("frame", "why"),
    [
        ('"result": "a string"', "Input should be an object"),
        ('"result": ' + _DEEP, "recursion limit exceeded"),
        ('"result": {"content": []}, "trailing": ', "Invalid JSON"),
        ('"error": "not an error object"', "Field required"),
    ],
)
async def test_an_answer_to_a_call_that_cannot_be_read_fails_the_call_at_once(
    hostile: MakeHostile, frame: str, why: str
) -> None:
    """The SDK drops an answer its parser refuses and the call waited out call_timeout, then
    read as an outcome nobody knows; the server did answer, and the call now fails at once with
    the parser's reason. The connection stays usable."""
    raw = tool("raw", {"type": "object"})
    server = hostile({"tools": [ECHO, raw]}, limits=attrs.evolve(LIMITS, call_timeout=30.0))
    async with connect(server) as connection:
        with pytest.raises(McpMalformedResult) as caught:
            await invoke(connection, "raw", {"frame": frame})
        message = str(caught.value)
        assert "answered 'raw' with something that could not be read: " in message
        assert why in message
        assert (await invoke(connection, "echo", {"q": "still here"}))["content"] == [
            {"type": "text", "text": "still here"}
        ]


async def test_a_server_error_of_code_32000_is_the_servers_error_not_a_lost_connection(
    hostile: MakeHostile,
) -> None:
    """-32000 opens JSON-RPC's range of server errors, and the SDK uses it for a closed
    connection too: a server's own -32000 error ("rate limited") read as a lost connection — the
    call an unknown outcome, every later call refused unsent."""
    raw = tool("raw", {"type": "object"})
    server = hostile({"tools": [ECHO, raw]})
    frame = '"error": {"code": -32000, "message": "rate limited, retry later"}'
    async with connect(server) as connection:
        with pytest.raises(McpToolError) as caught:
            await invoke(connection, "raw", {"frame": frame})
        assert (caught.value.message, caught.value.code) == ("rate limited, retry later", -32000)
        assert connection.lost is None
        assert (await invoke(connection, "echo", {"q": "still here"}))["content"] == [
            {"type": "text", "text": "still here"}
        ]
