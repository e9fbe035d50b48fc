"""What a delegation tool says about itself: its annotations, and whether its child delegates."""

from __future__ import annotations

from typing import Any

import attrs
import pytest

from capabilities.subagents import delegate
from effectagent.ai import Tool, ToolCallContext, Toolkit, ToolSource
from effectagent.core import Agent
from effectagent.effect import ServiceKey

MAILBOX: ServiceKey[ToolSource] = ServiceKey("mailbox-tools")


@attrs.frozen
class Question:
    topic: str


def _reader() -> Tool[Question, str]:
    return Tool("read_notes", "Read the notes.", parameters=Question, success=str, readonly=True)


def test_a_child_with_tool_sources_makes_the_delegation_neither_readonly_nor_harmless() -> None:
    """It was annotated readonly when the child's toolkit was, though the child's tool sources
    (an MCP server, say) may offer any tool: approval rules on annotations and Code Mode's
    readonly check took it at its word."""
    child = Agent("clerk", "Help.", toolkit=Toolkit(_reader()), tool_sources=[MAILBOX])
    delegation = delegate(child, name="ask", description="Ask.", parameters=Question)
    assert not delegation.tool.annotations.readonly
    assert delegation.tool.annotations.destructive
    plain = Agent("clerk", "Help.", toolkit=Toolkit(_reader()))
    assert delegate(
        plain, name="ask", description="Ask.", parameters=Question
    ).tool.annotations.readonly


class _OwnChildRunner:
    """A handler of one's own that runs a child agent (``run_child``), telling preflight so."""

    def __init__(self, agent: Agent) -> None:
        self.child_agents = (agent,)

    async def __call__(self, params: Question, call: ToolCallContext) -> str:
        raise NotImplementedError  # never called here


def test_a_child_holding_a_tool_whose_handler_runs_children_must_be_declared_nested() -> None:
    """Only ``delegate``'s own tools counted: a hand-written child runner in the child's
    toolkit let it delegate without nested=True."""
    runner: Tool[Question, str] = Tool(
        "consult",
        "Consult an expert.",
        parameters=Question,
        success=str,
        readonly=True,
        handler=_OwnChildRunner(Agent("expert", "Know.")),
    )
    child = Agent("clerk", "Help.", toolkit=Toolkit(runner))
    with pytest.raises(ValueError, match=r"'clerk' can delegate \(consult\); .*nested=True"):
        delegate(child, name="ask", description="Ask.", parameters=Question)
    nested: Any = delegate(child, name="ask", description="Ask.", parameters=Question, nested=True)
    assert nested.nested
