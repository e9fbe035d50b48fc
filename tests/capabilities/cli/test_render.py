"""The Timeline renders a real run's events: streamed text, tool calls with their outcome and
duration, approvals, the run's end with its usage — plain or in color."""

from __future__ import annotations

import io

import attrs

from capabilities.approval import Answer, ScriptedApproval
from capabilities.cli.render import Timeline, preview
from effectagent import Agent, AgentPolicy, Tool, ToolCallContext, Toolkit, open_runtime
from effectagent.testing import ScriptedModel, Turn


@attrs.frozen
class Path:
    path: str


read = Tool("read", "Read a file.", parameters=Path, success=str, readonly=True)
delete: Tool[Path, None] = Tool("delete", "Delete a file.", parameters=Path, needs_approval=True)
toolkit = Toolkit(read, delete)
agent = Agent(
    "helper",
    "Help.",
    AgentPolicy(max_turns=4, max_tool_calls=4, max_duration=30, tool_concurrency=1),
    toolkit,
)


async def handle_read(params: Path, call: ToolCallContext) -> str:
    return f"contents of {params.path}"


async def handle_delete(params: Path, call: ToolCallContext) -> None:
    return None


async def _timeline(color: bool) -> str:
    model = ScriptedModel.layer(
        [
            Turn.tool_calls(("read", {"path": "a.txt"}), ("delete", {"path": "b.txt"})),
            Turn.text("Read a.txt; b.txt stays."),
        ]
    )
    approval = ScriptedApproval([Answer.deny("keep it")]).layer()
    layer = toolkit.handlers({read: handle_read, delete: handle_delete}) + model + approval
    out = io.StringIO()
    timeline = Timeline(out, color=color)
    async with (
        open_runtime(layer, agents=[agent]) as runtime,
        runtime.stream(agent, "Tidy up.") as events,
    ):
        async for event in events:
            timeline.render(event)
    timeline.close()
    return out.getvalue()


async def test_a_run_as_plain_text() -> None:
    text = await _timeline(color=False)
    lines = text.splitlines()
    assert lines[0] == "▶ helper Tidy up."
    assert '▸ read {"path":"a.txt"}' in lines
    assert '▸ delete {"path":"b.txt"}' in lines
    assert any(line.startswith("? delete waits for approval") for line in lines)
    settled = [line for line in lines if line.startswith(("✓", "✗"))]
    assert any(
        line.startswith("✓ read ") and line.endswith("s contents of a.txt") for line in settled
    )
    assert any(
        line.startswith("✗ delete ") and "rejected: approval denied" in line for line in settled
    )
    assert "Read a.txt; b.txt stays." in lines
    assert lines[-1].startswith("usage: input ")
    assert "cache read 0 · cache write 0" in lines[-1]
    assert "\x1b[" not in text


async def test_color_styles_the_outcomes() -> None:
    text = await _timeline(color=True)
    assert "\x1b[32m✓ read" in text
    assert "\x1b[31m✗ delete" in text


def test_preview_is_one_bounded_line() -> None:
    assert preview({"a": "x\ny"}) == '{"a":"x\\ny"}'
    assert preview("a  b\n c") == "a b c"
    cut = preview("word " * 100, 20)
    assert len(cut) == 20
    assert cut.endswith("…")


def test_subagent_events_are_indented_under_their_parent() -> None:
    """Read by attribute: the child's events one level deeper than the parent's."""

    @attrs.frozen
    class SubagentStarted:
        run_id: str
        child_run_id: str
        child_agent: str
        task: str

    @attrs.frozen
    class SubagentEvent:
        run_id: str
        child_run_id: str
        event: object

    @attrs.frozen
    class SubagentCompleted:
        run_id: str
        child_run_id: str
        child_agent: str
        status: str

    from effectagent.core import TextDelta

    out = io.StringIO()
    timeline = Timeline(out)
    timeline.render(SubagentStarted("run_1", "run_2", "researcher", "find it"))
    inner = TextDelta("run_2", "conv_2", "researcher", 3, 0.0, 1, "found\nit")
    timeline.render(SubagentEvent("run_1", "run_2", inner))
    timeline.render(SubagentCompleted("run_1", "run_2", "researcher", "completed"))
    assert out.getvalue().splitlines() == [
        "  ↳ subagent researcher find it",
        "  found",
        "  it",
        "  ↲ subagent researcher completed",
    ]
