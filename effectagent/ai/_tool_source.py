"""Tools that can change while a conversation goes on: a :class:`ToolSource` (e.g. an MCP server
whose tool list changes) gives the engine a :class:`ToolSnapshot` at the start of every turn.

The engine asks each source of an agent (``Agent(tool_sources=...)``) once per turn, before the
model request, and uses that snapshot for the whole turn — the tools offered to the model and the
batch that answers it — so a change reaches the next turn, never a batch in flight.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, Protocol

import attrs

from ._checks import check_handler
from ._tool import Handler, Tool

__all__ = ["ToolSnapshot", "ToolSource"]


def _tools(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, tuple) or not all(isinstance(tool, Tool) for tool in value):
        raise TypeError("ToolSnapshot.tools must be a tuple of Tool")
    names = [tool.name for tool in value]
    if len(set(names)) != len(names):
        repeated = sorted({name for name in names if names.count(name) > 1})
        raise ValueError(f"ToolSnapshot.tools names a tool more than once: {', '.join(repeated)}")


def _handlers(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, Mapping):
        raise TypeError("ToolSnapshot.handlers must be a mapping from tool name to handler")
    tools = {tool.name for tool in getattr(instance, "tools", ())}
    missing = sorted(tools - set(value))
    if missing:
        raise ValueError(f"ToolSnapshot.handlers has no handler for: {', '.join(missing)}")
    unknown = sorted(
        repr(name) if type(name) is not str else name for name in value if name not in tools
    )
    if unknown:  # a typo, or a tool left out: either way no call could reach it
        raise ValueError(f"ToolSnapshot.handlers names no tool of it: {', '.join(unknown)}")
    for name, handler in value.items():
        check_handler(f"ToolSnapshot.handlers[{name!r}]", handler)


def _kept(value: Mapping[str, Handler]) -> Mapping[str, Handler]:
    """A mapping of handlers as it is now: a read-only copy, so a source that changes its own
    dict afterwards changes no snapshot it gave (what is not a mapping is left to the check)."""
    given: object = value  # checked: not every caller runs mypy
    return MappingProxyType(dict(value)) if isinstance(given, Mapping) else value


@attrs.frozen
class ToolSnapshot:
    """The tools a :class:`ToolSource` offers right now, each with its handler (by tool name).

    Checked when built: ``tools`` is a tuple of distinct names; every tool has a handler, an
    async function of ``(params, context)``, and every handler a tool. A tool that calls tools
    itself (``inner_tools``) cannot come from a source. ``handlers`` is kept as a read-only copy:
    changing the mapping given afterwards changes no snapshot made from it.
    """

    tools: tuple[Tool[Any, Any], ...] = attrs.field(default=(), validator=_tools)
    handlers: Mapping[str, Handler] = attrs.field(
        factory=dict, converter=_kept, validator=_handlers
    )

    def __attrs_post_init__(self) -> None:
        for tool in self.tools:
            if tool.inner_tools:
                raise ValueError(
                    f"ToolSnapshot: tool {tool.name!r} calls tools itself (inner_tools), which a "
                    "tool source cannot offer"
                )


class ToolSource(Protocol):
    """Offers tools that may change between turns (see the module notes)."""

    def snapshot(self) -> ToolSnapshot:
        """The tools on offer now. Called once per turn by the engine, so it must be quick and
        must not wait: keep the latest snapshot and replace it when the tools change. Returning
        the same object while nothing changed lets the engine reuse what it built from it."""
        ...
