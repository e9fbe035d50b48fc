"""Tools, an agent and a runner shared by the approval tests that go through the real engine."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs

from effectagent import Agent, AgentPolicy, Tool, ToolCallContext, Toolkit, open_runtime
from effectagent.core import LogEntry, Record
from effectagent.effect import Layer
from effectagent.engine import RunResult
from effectagent.testing import ScriptedModel, Turn


@attrs.frozen
class FileParams:
    path: str
    size: int = 0


def _targets(params: FileParams) -> list[str]:
    return [f"file:{params.path}"]


def _large(params: FileParams, call: ToolCallContext) -> bool:
    return params.size > 5


read = Tool(
    "read_file",
    "Read a file.",
    parameters=FileParams,
    success=str,
    readonly=True,
    needs_approval=_large,
    targets=_targets,
)
write = Tool(
    "write_file",
    "Write a file.",
    parameters=FileParams,
    success=str,
    destructive=False,
    idempotent=True,
    needs_approval=True,
    targets=_targets,
    summarize=lambda params: f"write {params.size} bytes to {params.path}",
)
delete = Tool(
    "delete_file",
    "Delete a file.",
    parameters=FileParams,
    success=str,
    needs_approval=True,
    targets=_targets,
)
wipe = Tool(
    "wipe_disk",
    "Wipe a disk.",
    parameters=FileParams,
    success=str,
    needs_approval=True,
    targets=_targets,
    denial_is_terminal=True,
)
TOOLS = (read, write, delete, wipe)
AGENT = Agent(
    "ops",
    "Operate on files.",
    AgentPolicy(
        max_turns=6, max_tool_calls=32, max_duration=3600, tool_concurrency=4, approval_timeout=30
    ),
    Toolkit(*TOOLS),
)


@attrs.define
class Ran:
    """What a run did: its result, the conversation's log, the handlers that ran, the model."""

    result: RunResult
    log: list[LogEntry]
    handled: list[tuple[str, str]]
    model: ScriptedModel

    def records(self, kind: type[Any]) -> list[Any]:
        return [e.record for e in self.log if isinstance(e.record, kind)]

    def outcome(self, call_id: str) -> Any:
        (found,) = [o for o in self.result.outcomes if o.tool_call_id == call_id]
        return found


def calls_turn(*calls: tuple[str, str, int, str]) -> Turn:
    """One model turn declaring ``(tool, path, size, call ID)`` calls."""
    return Turn.tool_calls(
        *((tool, {"path": path, "size": size}, call_id) for tool, path, size, call_id in calls)
    )


async def run_turns(
    turns: Sequence[Turn], approval: Layer, *, agent: Agent = AGENT, text: str = "Go."
) -> Ran:
    """Run ``agent`` once over ``turns`` (then a final answer) with the ``approval`` layer."""
    handled: list[tuple[str, str]] = []

    async def handle(params: FileParams, call: ToolCallContext) -> str:
        handled.append((call.tool_call_id, call.tool_name))
        return f"{call.tool_name} {params.path}"

    model = ScriptedModel([*turns, Turn.text("Done.")])
    layer = agent.toolkit.handlers(dict.fromkeys(TOOLS, handle)) + model.as_layer() + approval
    async with open_runtime(layer, agents=[agent]) as runtime:
        result = await runtime.run(agent, text)
        log = list(await runtime.log.entries(result.conversation_id))
    return Ran(result, log, handled, model)


def records_of(log: Sequence[LogEntry], kind: type[Any]) -> list[Record]:
    return [e.record for e in log if isinstance(e.record, kind)]
