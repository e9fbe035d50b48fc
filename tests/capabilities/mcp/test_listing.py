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

from capabilities.mcp._listing import (
    NotAListing,
    Relistings,
    build_listing,
    checked_tools,
    tool_page,
)
from capabilities.mcp._mapping import ToolShape
from effectagent.ai import Tool

_OBJECT = {"type": "object", "properties": {}}


def test_each_tool_is_checked_on_its_own() -> None:
    valid, skipped = checked_tools(
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


def test_a_second_tool_of_a_name_is_skipped_and_the_first_offered() -> None:
    listed = [
        {"name": "echo", "description": "first", "inputSchema": _OBJECT},
        {"name": "echo", "description": "second", "inputSchema": _OBJECT},
        {"name": "other", "inputSchema": _OBJECT},
    ]
    listing, _ = build_listing("srv", "s", listed, [], {}, _made)
    assert [tool.name for tool in listing.tools] == ["s_echo", "s_other"]
    assert listing.tools[0].description.startswith("first")
    assert [(t.name, t.reason) for t in listing.skipped] == [
        ("echo", "the server lists another tool of this name first")
    ]


def test_a_tool_whose_schema_refers_outside_itself_is_skipped() -> None:
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
    listing, _ = build_listing("srv", None, listed, [], {}, _made)
    assert [tool.name for tool in listing.tools] == ["fine"]
    reasons = {t.name: t.reason for t in listing.skipped}
    assert set(reasons) == {"dangling", "remote"}
    assert "refers to '#/$defs/x', which it does not hold" in reasons["dangling"]
