"""What a policy knows of a call beyond the engine's request: the tool (its annotations) and the
call's decoded parameters. Pure.

The Approval seam hands a provider the :class:`~effectagent.core.ApprovalRequest` — a canonical
record, so it holds the *redacted, bounded* input preview, never the raw arguments. The tool is
the one the request carries (``request.tool``: set by the runtime that made the request, exactly
as the turn's tools had it — a tool of the agent's toolkit or of one of its tool sources, such
as an MCP server). Only a request without it (made elsewhere, or read back from a log) is looked
up by agent and tool name among the agents the policy was given. The parameters are decoded from
the preview with the tool's own schema — exactly the parameters the handler will get whenever
the preview is whole: nothing was redacted in it and it was not cut to its bound. When it is not
whole, the parameters are :class:`Unknown` (with why), and a rule that needs them fails closed.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, final

from effectagent.ai import Tool
from effectagent.core import REDACTED, Agent, ApprovalRequest, compact_json
from effectagent.effect import SchemaError

from ._rules import ApprovalSubject, Known, Parameters, Unknown

__all__ = ["ToolRegistry"]


def _is_truncated(preview: Any) -> bool:
    return (
        isinstance(preview, dict)
        and preview.get("_tag") == "Truncated"
        and ("original_bytes" in preview)
    )


def _holds_redaction(value: Any) -> bool:
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if REDACTED in item:
                return True
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            stack.extend(item)
    return False


@final
class ToolRegistry:
    """The tools of the given agents' toolkits, by agent and tool name (inner tools of a broker
    too): where a policy finds the tool of a request that does not carry it."""

    __slots__ = ("_tools",)

    def __init__(self, agents: Iterable[Agent]) -> None:
        given: object = agents  # checked: not every caller runs mypy
        if isinstance(given, Agent | str | bytes) or not isinstance(given, Iterable):
            raise TypeError(
                f"agents must be an iterable of Agents, not one {type(given).__name__} "
                "(agents=[agent])"
            )
        tools: dict[tuple[str, str], Tool[Any, Any]] = {}
        seen: dict[str, Agent] = {}
        for agent in agents:
            if not isinstance(agent, Agent):
                raise TypeError(f"agents must be Agent values, got {type(agent).__name__}")
            other = seen.setdefault(agent.name, agent)
            if other is not agent:
                raise ValueError(f"two different agents are named {agent.name!r}")
            for outer in agent.toolkit:
                for tool in (outer, *outer.inner_tools):
                    tools[(agent.name, tool.name)] = tool
        self._tools = tools

    def __bool__(self) -> bool:
        return bool(self._tools)

    def tool(self, agent: str, name: str) -> Tool[Any, Any] | None:
        """The tool ``name`` of ``agent`` (None if not among the agents given)."""
        return self._tools.get((agent, name))

    def subject(self, request: ApprovalRequest) -> ApprovalSubject:
        """What the rules see of ``request`` (see the module notes): the tool it carries, else
        the one of that name among the agents given."""
        tool = request.tool
        if tool is None or tool.name != request.tool_name:
            tool = self.tool(request.agent, request.tool_name)
        if tool is None:
            return ApprovalSubject(request)
        return ApprovalSubject(request, tool.annotations, _parameters(tool, request.input_preview))


def _parameters(tool: Tool[Any, Any], preview: Any) -> Parameters:
    if _is_truncated(preview):
        return Unknown("the call's input preview was cut to its bound")
    if _holds_redaction(preview):
        return Unknown("the call's input preview is redacted")
    try:
        return Known(tool.decode_arguments(compact_json(preview)))
    except (SchemaError, ValueError):
        return Unknown("the call's input preview does not decode")
