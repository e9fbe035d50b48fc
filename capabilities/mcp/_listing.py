"""A server's tool listing, read tool by tool, and the bookkeeping of re-listings.

**One bad tool is one skipped tool.** The SDK validates a ``tools/list`` answer as a whole: one
tool it rejects (an input schema that is not an object, a name that is not a string) fails the
whole answer, and every good tool with it. So the connection asks for the raw answer
(:func:`tool_page` checks only its frame: a list of tools and an optional cursor) and validates
each tool on its own (:func:`checked_tools`): a tool the SDK's tool model rejects becomes a
:class:`SkippedTool` with the reason, and the others stay. :func:`build_listing` then maps each
tool to a dynamic ``Tool`` — a tool that cannot become one is skipped too.

**A listing is bounded** by ``McpLimits``: the tools past ``max_tools`` are skipped unread
(:func:`past_max_tools`), and :func:`build_listing` skips a tool whose description is over
``max_description_chars`` or that would take the offered definitions past ``max_listing_bytes``.
Checking and making a tool takes a while (its schemas are judged and compiled), so both steps
let the other tasks run between each two tools.

**Re-listings a call waits for.** :class:`Relistings` counts the server's
``notifications/tools/list_changed`` as they arrive and which of them the latest finished
re-listing covers, so a tool call whose answer came after such a notification can wait until the
new list is adopted (or the attempt failed) before it returns — see ``McpConnection``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from typing import Any, final

import attrs
import trio

from effectagent.ai import Handler, Tool, ToolSnapshot

from ._mapping import ToolShape, UnusableTool, local_names, tool_shape
from ._results import SkippedTool
from ._servers import McpLimits

__all__ = [
    "EMPTY",
    "Listing",
    "NotAListing",
    "Relistings",
    "build_listing",
    "checked_tools",
    "past_max_tools",
    "tool_page",
    "unreadable_answer",
    "without_reserved",
]

_MAX_PROBLEMS = 3
_LIMITS = McpLimits()


@attrs.frozen
class Listing:
    """One adopted tool listing: tools in the server's order, handlers by tool name, and the
    tools that could not be offered."""

    tools: tuple[Tool[Any, Any], ...]
    handlers: Mapping[str, Handler]
    skipped: tuple[SkippedTool, ...]
    remote_names: Mapping[str, str]
    snapshot: ToolSnapshot


EMPTY = Listing((), {}, (), {}, ToolSnapshot())


class NotAListing(Exception):
    """A ``tools/list`` answer that is not a tool listing; the message says why."""


def tool_page(raw: object) -> tuple[list[Any], str | None]:
    """The tools of one raw ``tools/list`` answer (each still unchecked) and the next page's
    cursor. Raises :class:`NotAListing` when the answer is not a tool listing."""
    if not isinstance(raw, Mapping):
        raise NotAListing("the answer to tools/list is not a JSON object")
    tools = raw.get("tools")
    if not isinstance(tools, list):
        raise NotAListing("the answer to tools/list has no list of tools")
    cursor = raw.get("nextCursor")
    if cursor is not None and not isinstance(cursor, str):
        raise NotAListing("the answer to tools/list has a cursor that is not a string")
    return tools, cursor or None


# A JSON string, or one of the characters that structure JSON.
_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|[{}\[\]:,]')
_ID_VALUE = re.compile(r'\s*("(?:[^"\\]|\\.)*"|-?\d+)')
_LAST_ID = re.compile(r'"id"\s*:\s*("(?:[^"\\]|\\.)*"|-?\d+)\s*}\s*$')
_HEAD = 64 * 1024
_TAIL = 512


def unreadable_answer(error: Exception) -> tuple[object, str] | None:
    """When the transport could not read a message the server sent (the SDK hands over the
    parser's error instead), the id of the request it answers, if it says, and why it could
    not be read; None for an error that is not a parser's.

    The id is looked for in the message's text without parsing it (it could not be parsed):
    among the top-level keys of its first 64 KiB, or as its last key.
    """
    errors = getattr(error, "errors", None)
    if not callable(errors):
        return None
    try:
        problems = errors(include_url=False)
    except Exception:
        return None
    if not isinstance(problems, list) or not problems:
        return None
    why = "; ".join(str(problem.get("msg", "")) for problem in problems[:_MAX_PROBLEMS])
    for problem in problems:
        value = problem.get("input")
        if isinstance(value, Mapping) and "id" in value:
            return value["id"], why[:300]
        if isinstance(value, bytes):  # only its head and its end are looked at
            cut = value if len(value) <= _HEAD + _TAIL else value[:_HEAD] + value[-_TAIL:]
            value = cut.decode("utf-8", errors="replace")
        if isinstance(value, str):
            return _top_level_id(value), why[:300]
    return None, why[:300]


def _top_level_id(text: str) -> object:
    depth = 0
    key: str | None = None
    for match in _TOKEN.finditer(text, 0, _HEAD):
        token = match.group()
        if token in "{[":
            depth += 1
        elif token in "}]":
            depth -= 1
        elif depth != 1:
            continue
        elif token == ":":
            if key == "id":
                found = _ID_VALUE.match(text, match.end())
                return json.loads(found.group(1)) if found else None
        elif token == ",":
            key = None
        else:
            key = token[1:-1]
    last = _LAST_ID.search(text, max(0, len(text) - _TAIL))
    return json.loads(last.group(1)) if last else None


def _name_of(raw: object) -> str:
    name = raw.get("name") if isinstance(raw, Mapping) else None
    return name if isinstance(name, str) else "(unnamed)"


async def checked_tools(raw_tools: list[Any]) -> tuple[list[dict[str, Any]], list[SkippedTool]]:
    """Each raw tool validated on its own by the SDK's tool model: the valid ones in their JSON
    form (the protocol's field names, nothing empty), and the others as skipped, with why.

    Cancellation: a checkpoint before each tool (the other tasks run meanwhile); nothing is kept.
    """
    import mcp_types as types
    from pydantic import ValidationError

    valid: list[dict[str, Any]] = []
    skipped: list[SkippedTool] = []
    for raw in raw_tools:
        await trio.lowlevel.checkpoint()
        try:
            tool = types.Tool.model_validate(raw, by_name=False)
        except ValidationError as exc:
            skipped.append(SkippedTool(_name_of(raw), _invalid(exc)))
            continue
        valid.append(tool.model_dump(by_alias=True, mode="json", exclude_none=True))
    return valid, skipped


def _invalid(error: Any) -> str:
    problems = error.errors(include_url=False, include_input=False)
    shown = "; ".join(
        f"{'.'.join(str(part) for part in problem['loc']) or 'the tool'}: {problem['msg']}"
        for problem in problems[:_MAX_PROBLEMS]
    )
    more = len(problems) - _MAX_PROBLEMS
    rest = f" (and {more} more)" if more > 0 else ""
    return f"its definition is not a valid MCP tool: {shown}{rest}"


def past_max_tools(
    page: list[Any], listed: int, max_tools: int
) -> tuple[list[Any], list[SkippedTool]]:
    """The tools of ``page`` within ``max_tools`` when ``listed`` came before it, and the rest
    as skipped (by name: they are not checked at all)."""
    room = max(0, max_tools - listed)
    reason = f"the server lists more than {max_tools} tools (max_tools)"
    return page[:room], [SkippedTool(_name_of(raw), reason) for raw in page[room:]]


async def build_listing(
    server: str,
    prefix: str | None,
    listed: list[dict[str, Any]],
    skipped: list[SkippedTool],
    made: Mapping[tuple[str, str], Tool[Any, Any]],
    make_tool: Callable[[str, str, ToolShape], Tool[Any, Any]],
    *,
    limits: McpLimits = _LIMITS,
    reserved: Mapping[str, str] | None = None,
) -> tuple[Listing, dict[tuple[str, str], Tool[Any, Any]]]:
    """The listing of the valid tools ``listed`` (``skipped`` already left out), and the tools
    made, by (local name, definition), for the next listing: a tool whose definition did not
    change is taken from ``made``, so it keeps its identity (and its handler key).

    A tool whose description is over ``limits.max_description_chars``, or that would take the
    definitions offered past ``limits.max_listing_bytes``, is skipped; so is one whose name (ours)
    is ``reserved`` — the reason is the mapping's value.

    Cancellation: a checkpoint before each tool, since checking a tool's schemas takes a while
    (the other tasks run meanwhile); nothing is kept.
    """
    unusable = list(skipped)
    listed = _first_of_each_name(listed, unusable)
    names = local_names(prefix, [str(raw.get("name", "")) for raw in listed])
    tools: list[Tool[Any, Any]] = []
    handlers: dict[str, Handler] = {}
    remote_names: dict[str, str] = {}
    kept: dict[tuple[str, str], Tool[Any, Any]] = {}
    size = 0
    for raw in listed:
        await trio.lowlevel.checkpoint()
        remote = str(raw.get("name", ""))
        local = names[remote]
        if reserved and local in reserved:
            unusable.append(SkippedTool(remote, reserved[local]))
            continue
        description = raw.get("description")
        if isinstance(description, str) and len(description) > limits.max_description_chars:
            unusable.append(
                SkippedTool(
                    remote,
                    f"its description is {len(description)} characters, over the limit of "
                    f"{limits.max_description_chars} (max_description_chars)",
                )
            )
            continue
        text = json.dumps(raw, sort_keys=True)  # ASCII: its length is its size in bytes
        if size + len(text) > limits.max_listing_bytes:
            unusable.append(
                SkippedTool(
                    remote,
                    "the tools before it fill the listing's limit of "
                    f"{limits.max_listing_bytes} bytes (max_listing_bytes)",
                )
            )
            continue
        key = (local, text)
        tool = made.get(key)
        if tool is None:
            try:
                tool = make_tool(remote, local, tool_shape(server, raw))
            except (UnusableTool, TypeError, ValueError) as exc:
                unusable.append(SkippedTool(remote, str(exc)))
                continue
            except RecursionError:  # every schema is judged first: this is not expected
                unusable.append(SkippedTool(remote, "its schemas are nested too deep to check"))
                continue
        size += len(text)
        kept[key] = tool
        tools.append(tool)
        assert tool.handler is not None
        handlers[local] = tool.handler
        remote_names[local] = remote
    snapshot = ToolSnapshot(tuple(tools), dict(handlers))
    listing = Listing(tuple(tools), handlers, tuple(unusable), remote_names, snapshot)
    return listing, kept


def without_reserved(listing: Listing, reserved: Mapping[str, str]) -> Listing:
    """``listing`` without its tools whose name is ``reserved`` (each added to its skipped
    tools, the reason the mapping's value), or ``listing`` itself when none is."""
    if not any(tool.name in reserved for tool in listing.tools):
        return listing
    tools = tuple(tool for tool in listing.tools if tool.name not in reserved)
    handlers = {tool.name: listing.handlers[tool.name] for tool in tools}
    skipped = listing.skipped + tuple(
        SkippedTool(listing.remote_names[tool.name], reserved[tool.name])
        for tool in listing.tools
        if tool.name in reserved
    )
    remote_names = {tool.name: listing.remote_names[tool.name] for tool in tools}
    return Listing(tools, handlers, skipped, remote_names, ToolSnapshot(tools, dict(handlers)))


def _first_of_each_name(
    listed: list[dict[str, Any]], skipped: list[SkippedTool]
) -> list[dict[str, Any]]:
    """``listed`` without the tools whose name an earlier one has (each added to ``skipped``):
    a name is how a call reaches a tool, so a listing that names two tools alike offers the
    first. Pure but for ``skipped``."""
    seen: set[str] = set()
    first: list[dict[str, Any]] = []
    for raw in listed:
        name = str(raw.get("name", ""))
        if name in seen:
            skipped.append(SkippedTool(name, "the server lists another tool of this name first"))
            continue
        seen.add(name)
        first.append(raw)
    return first


@final
class Relistings:
    """The server's list-changed notifications and the re-listings that answer them.

    ``announced`` counts the notifications received; ``covered`` is how many of them the
    latest finished re-listing covers — the count when it started, so a notification that
    arrives while one is under way is covered only by the next. Waiters are woken whenever a
    re-listing finishes (adopted or failed) and when the connection is lost (:meth:`wake`).
    """

    __slots__ = ("_finished", "announced", "covered")

    def __init__(self) -> None:
        self.announced = 0
        self.covered = 0
        self._finished = trio.Event()

    def announce(self) -> None:
        """A notification arrived."""
        self.announced += 1

    def finished(self, covers: int) -> None:
        """A re-listing that started when ``covers`` notifications had arrived has finished."""
        self.covered = max(self.covered, covers)
        self.wake()

    def wake(self) -> None:
        """Wake every waiter to look again (a re-listing finished, the connection was lost)."""
        finished, self._finished = self._finished, trio.Event()
        finished.set()

    async def wait(self, target: int, gone: Callable[[], bool]) -> None:
        """Return once a finished re-listing covers ``target`` notifications, or ``gone()``.

        Cancellation: a plain wait; cancelling it changes nothing.
        """
        while self.covered < target and not gone():
            await self._finished.wait()
