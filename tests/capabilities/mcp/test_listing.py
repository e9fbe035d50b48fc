"""A tools/list answer read tool by tool (a tool the SDK rejects is skipped alone), and the
bookkeeping that lets a call wait for the re-listing its server announced — pure, or on Trio's
mock clock."""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.testing
from hypothesis import given
from hypothesis import strategies as st

from capabilities.mcp import McpLimits
from capabilities.mcp._listing import (
    NotAListing,
    Relistings,
    build_listing,
    checked_tools,
    tool_page,
    unreadable_answer,
)
from capabilities.mcp._mapping import ToolShape
from effectagent.ai import Tool

_OBJECT = {"type": "object", "properties": {}}


async def test_each_tool_is_checked_on_its_own() -> None:
    valid, skipped = await checked_tools(
        [
            {"name": "echo", "inputSchema": _OBJECT, "annotations": {"readOnlyHint": True}},
            {"name": 5, "inputSchema": _OBJECT},
            {"name": "schemaless"},
            "not a tool",
            {"name": "stringly", "inputSchema": {"type": "string"}},
        ]
    )
    # The SDK's tool model takes any object as a schema: ours is checked when the tool is made.
    assert [tool["name"] for tool in valid] == ["echo", "stringly"]
    assert valid[0] == {
        "name": "echo",
        "inputSchema": _OBJECT,
        "annotations": {"readOnlyHint": True},
    }
    assert [(tool.name, tool.reason) for tool in skipped] == [
        (
            "(unnamed)",
            "its definition is not a valid MCP tool: name: Input should be a valid string",
        ),
        ("schemaless", "its definition is not a valid MCP tool: inputSchema: Field required"),
        (
            "(unnamed)",
            "its definition is not a valid MCP tool: the tool: Input should be a valid "
            "dictionary or instance of Tool",
        ),
    ]


@pytest.mark.parametrize(
    ("raw", "why"),
    [
        ([], "is not a JSON object"),
        ({"tools": {"echo": {}}}, "has no list of tools"),
        ({"tools": [], "nextCursor": 2}, "a cursor that is not a string"),
    ],
)
def test_an_answer_that_is_not_a_listing_is_refused(raw: Any, why: str) -> None:
    with pytest.raises(NotAListing, match=why):
        tool_page(raw)


def test_a_page_gives_its_tools_and_the_next_cursor() -> None:
    assert tool_page({"tools": [{"name": "a"}], "nextCursor": "p2"}) == ([{"name": "a"}], "p2")
    assert tool_page({"tools": [], "nextCursor": ""}) == ([], None)


EVENTS = st.lists(st.sampled_from(["notify", "start", "finish"]), max_size=40)


@given(events=EVENTS)
def test_a_relisting_covers_only_the_notifications_that_came_before_it_started(
    events: list[str],
) -> None:
    """One re-lister (as the connection has): whatever the interleaving, ``covered`` never
    claims a notification that arrived after the re-listing that covers it had started."""
    relistings = Relistings()
    started: int | None = None  # the count when the re-listing under way started
    covered = 0
    for event in events:
        if event == "notify":
            relistings.announce()
        elif event == "start" and started is None:
            started = relistings.announced
        elif event == "finish" and started is not None:
            relistings.finished(started)
            covered = max(covered, started)
            started = None
        assert relistings.covered == covered
        assert relistings.covered <= relistings.announced


async def test_a_waiter_returns_once_its_notifications_are_covered_or_the_connection_is_gone(
    autojump_clock: trio.testing.MockClock,
) -> None:
    relistings = Relistings()
    gone = False
    returned: list[str] = []

    async def wait(name: str, target: int) -> None:
        await relistings.wait(target, lambda: gone)
        returned.append(name)

    relistings.announce()
    relistings.announce()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(wait, "two", 2)
        nursery.start_soon(wait, "three", 3)
        await trio.testing.wait_all_tasks_blocked()
        relistings.finished(1)  # started before the second notification: not enough
        await trio.testing.wait_all_tasks_blocked()
        assert returned == []
        relistings.finished(2)
        await trio.testing.wait_all_tasks_blocked()
        assert returned == ["two"]
        gone = True
        relistings.wake()  # the connection was lost: nothing more will be listed
    assert returned == ["two", "three"]
    await relistings.wait(2, lambda: False)  # already covered: returns at once


async def _handle(params: Any, call: Any) -> None:
    return None


def _made(remote: str, local: str, shape: ToolShape) -> Tool[Any, Any]:
    """A tool as the connection makes one (its schema as the server gave it)."""
    return Tool.dynamic(
        local,
        shape.description or remote,
        parameters_schema=shape.parameters_schema,
        handler=_handle,
    )


async def test_a_second_tool_of_a_name_is_skipped_and_the_first_offered() -> None:
    listed = [
        {"name": "echo", "description": "first", "inputSchema": _OBJECT},
        {"name": "echo", "description": "second", "inputSchema": _OBJECT},
        {"name": "other", "inputSchema": _OBJECT},
    ]
    listing, _ = await build_listing("srv", "s", listed, [], {}, _made)
    assert [tool.name for tool in listing.tools] == ["s_echo", "s_other"]
    assert listing.tools[0].description.startswith("first")
    assert [(t.name, t.reason) for t in listing.skipped] == [
        ("echo", "the server lists another tool of this name first")
    ]


async def test_a_tool_whose_schema_refers_outside_itself_is_skipped() -> None:
    listed = [
        {
            "name": "dangling",
            "inputSchema": {**_OBJECT, "properties": {"a": {"$ref": "#/$defs/x"}}},
        },
        {
            "name": "remote",
            "inputSchema": {**_OBJECT, "properties": {"a": {"$ref": "https://e.x/s"}}},
        },
        {"name": "fine", "inputSchema": _OBJECT},
    ]
    listing, _ = await build_listing("srv", None, listed, [], {}, _made)
    assert [tool.name for tool in listing.tools] == ["fine"]
    reasons = {t.name: t.reason for t in listing.skipped}
    assert set(reasons) == {"dangling", "remote"}
    assert "refers to '#/$defs/x', which it does not hold" in reasons["dangling"]


def _tools(count: int, description: str = "d") -> list[dict[str, Any]]:
    return [
        {"name": f"t{i}", "description": description, "inputSchema": _OBJECT} for i in range(count)
    ]


async def test_building_a_listing_lets_the_other_tasks_run() -> None:
    """Checking a tool's schemas takes a while: a listing of thousands of tools held the event
    loop for seconds (and ran past connect_timeout, which could not interrupt it)."""
    ticks = 0

    async def tick() -> None:
        nonlocal ticks
        while True:
            await trio.lowlevel.checkpoint()
            ticks += 1

    async with trio.open_nursery() as nursery:
        nursery.start_soon(tick)
        await trio.lowlevel.checkpoint()  # the ticker runs: it never blocks, only yields
        before = ticks
        valid, skipped = await checked_tools(_tools(40))
        listing, _ = await build_listing("srv", None, valid, skipped, {}, _made)
        during = ticks - before
        nursery.cancel_scope.cancel()
    assert len(listing.tools) == 40
    assert during >= 40  # the others ran between each two tools, at least


async def test_a_description_over_the_limit_and_tools_past_the_listing_size_are_skipped() -> None:
    limits = McpLimits(max_description_chars=100, max_listing_bytes=2_000)
    listed = [
        {"name": "wordy", "description": "D" * 101, "inputSchema": _OBJECT},
        *_tools(30, "x" * 90),
    ]
    listing, _ = await build_listing("srv", None, listed, [], {}, _made, limits=limits)
    reasons = {t.name: t.reason for t in listing.skipped}
    assert reasons["wordy"] == (
        "its description is 101 characters, over the limit of 100 (max_description_chars)"
    )
    kept = [tool.name for tool in listing.tools]
    assert kept == [f"t{i}" for i in range(len(kept))]  # the first ones, in the server's order
    assert 5 < len(kept) < 30
    assert set(reasons) == {"wordy"} | {f"t{i}" for i in range(len(kept), 30)}
    assert reasons["t29"] == (
        "the tools before it fill the listing's limit of 2000 bytes (max_listing_bytes)"
    )


def test_the_listing_limits_have_finite_defaults() -> None:
    limits = McpLimits()
    assert limits.max_tools == 1_000
    assert limits.max_description_chars == 10_000
    assert limits.max_listing_bytes == 2 * 1024 * 1024
    assert limits.relist_interval == 0.5
    for field in ("max_tools", "max_description_chars", "max_listing_bytes"):
        with pytest.raises(ValueError, match=field):
            McpLimits(**{field: 0})
    with pytest.raises(ValueError, match="relist_interval"):
        McpLimits(relist_interval=float("inf"))


def _parse_error(line: str | bytes) -> Exception:
    import mcp_types as types

    try:
        types.jsonrpc_message_adapter.validate_json(line, by_name=False)
    except ValueError as exc:
        return exc
    raise AssertionError("parsed")  # pragma: no cover


_DEEP = '{"a": ' * 300 + "1" + "}" * 300


@pytest.mark.parametrize(
    ("line", "found"),
    [
        ('{"jsonrpc": "2.0", "id": "ours-1", "result": ' + _DEEP + "}", "ours-1"),
        ('{"jsonrpc": "2.0", "result": ' + _DEEP + ', "id": 7}', 7),
        ('{"result": {"id": "inner"}, "jsonrpc": "2.0", "x": ' + _DEEP + "}", None),
        ('{"jsonrpc": "2.0", "id": "shape", "result": 5}', "shape"),
    ],
)
def test_an_answer_that_cannot_be_parsed_still_says_which_request_it_answers(
    line: str, found: object
) -> None:
    for text in (line, line.encode()):  # the SDK's transports parse text, ours bytes
        answered = unreadable_answer(_parse_error(text))
        assert answered is not None
        assert answered[0] == found
        assert answered[1]  # the parser's reason
    assert unreadable_answer(ValueError("not a parser's")) is None
