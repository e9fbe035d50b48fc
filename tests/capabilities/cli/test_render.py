"""The Timeline renders a real run's events: streamed text, tool calls with their outcome and
duration, approvals, the run's end with its usage — plain or in color."""

from __future__ import annotations

import io
from typing import Any

import attrs

from capabilities.approval import Answer, ScriptedApproval
from capabilities.cli.render import Timeline, preview
from capabilities.subagents import delegate
from effectagent import Agent, AgentPolicy, Layer, Tool, ToolCallContext, Toolkit, open_runtime
from effectagent.ai import AssistantMessage, ModelRequest, dollars
from effectagent.core import BudgetExhausted, BudgetWarning, RunFailed, UsageTotals
from effectagent.testing import FunctionModel, ScriptedModel, Turn


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
    return await _rendered(layer, agent, "Tidy up.", color=color)


async def _rendered(
    layer: Layer, agent: Agent, prompt: str, *, color: bool = False, header: bool = True
) -> str:
    """What the Timeline shows of one streamed run of ``agent`` on ``prompt``."""
    out = io.StringIO()
    timeline = Timeline(out, color=color, header=header)
    async with (
        open_runtime(layer, agents=[agent]) as runtime,
        runtime.stream(agent, prompt) as events,
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


async def test_reasoning_is_dimmed_or_marked_apart_from_the_answer() -> None:
    quiet = Agent("helper", "Help.")

    async def render(color: bool) -> str:
        model = ScriptedModel.layer([Turn.text("Four.", reasoning="Two and two.")])
        return await _rendered(model, quiet, "2+2?", color=color)

    plain = (await render(False)).splitlines()
    assert "thinking: Two and two." in plain
    assert "Four." in plain
    colored = await render(True)
    assert "\x1b[2mTwo and two.\x1b[0m" in colored  # dim, then reset
    assert "thinking:" not in colored
    assert "\x1b[2mFour." not in colored


def test_preview_is_one_bounded_line() -> None:
    assert preview({"a": "x\ny"}) == '{"a":"x\\ny"}'
    assert preview("a  b\n c\td") == "a  b\\n c\\td"  # a newline shows; it never ends the line
    cut = preview("word " * 100, 20)
    assert len(cut) == 20
    assert cut.endswith("…")


@attrs.frozen
class Question:
    topic: str


async def test_a_subagent_is_indented_under_the_call_that_started_it() -> None:
    """A real delegation: the child's task, tool call and answer one level deeper, then how it
    ended; the parent's own lines at the left margin."""
    child = Agent("researcher", "Research the topic you are given.", toolkit=Toolkit(read))
    research = delegate(
        child,
        name="research",
        description="Research a topic.",
        parameters=Question,
        prompt=lambda p: f"Find out about {p.topic}.",
    )
    parent = Agent("lead", "Lead the work.", toolkit=Toolkit(research.tool, read))

    def respond(request: ModelRequest) -> Turn:
        system = request.messages[0].content
        assert isinstance(system, str)
        step = sum(isinstance(m, AssistantMessage) for m in request.messages)
        if system.startswith("Research"):
            if step == 0:
                return Turn.tool_calls(("read", {"path": "notes.md"}))
            return Turn.text("The notes say it is cold.")
        if step == 0:
            return Turn.tool_calls(("research", {"topic": "cache"}))
        return Turn.text("It is cold.")

    layer = (
        FunctionModel.layer(respond)
        + Toolkit(read).handlers({read: handle_read})
        + research.layer()
    )
    text = await _rendered(layer, parent, "Why is it slow?", header=False)
    lines = [line for line in text.splitlines() if line]
    shown = [line.split(" 0.")[0] if line.lstrip().startswith("✓") else line for line in lines]
    assert shown[:6] == [
        '▸ research {"topic":"cache"}',
        "  ▶ researcher Find out about cache.",
        '  ▸ read {"path":"notes.md"}',
        "  ✓ read",
        "  The notes say it is cold.",
        shown[5],
    ]
    assert shown[5].startswith("  ↲ subagent completed: 2 turns, 1 tool call, input ")
    assert shown[6] == "✓ research"
    assert lines[6].endswith("s The notes say it is cold.")
    assert shown[7] == "It is cold."
    assert shown[8].startswith("usage: input ")
    assert len(shown) == 9


def test_budgets_and_failures_read_as_sentences_with_figures_rounded() -> None:
    out = io.StringIO()
    timeline = Timeline(out)
    base: dict[str, Any] = {
        "run_id": "run_1",
        "conversation_id": "conv_1",
        "agent": "helper",
        "seq": 1,
        "at": 0.0,
    }
    timeline.render(BudgetWarning(**base, dimension="duration", used=5.005364324999391, limit=6.0))
    timeline.render(BudgetWarning(**base, dimension="tool_calls", used=3.0, limit=4.0))
    timeline.render(BudgetWarning(**base, dimension="cost", used=812_345.0, limit=1_000_000.0))
    timeline.render(
        RunFailed(**base, error=BudgetExhausted("duration", 6.012345, 6.0), usage=UsageTotals())
    )
    timeline.render(
        RunFailed(
            **base, error=BudgetExhausted("cost", 1_000_250.0, 1_000_000.0), usage=UsageTotals()
        )
    )
    lines = out.getvalue().splitlines()
    assert lines[2] == f"! cost budget: {dollars(812_345)} of {dollars(1_000_000)} used"
    assert "$" in lines[2]
    assert "812345" not in lines[2]
    assert "$" in lines[5]
    assert "1000250" not in lines[5]
    assert lines[:2] + lines[3:5] == [
        "! duration budget: 5.0 s of 6.0 s used",
        "! tool calls budget: 3 of 4 used",
        "✗ run failed: the duration budget ran out: 6.0 s used of 6.0 s",
        "usage: input 0 · output 0 · cache read 0 · cache write 0",
    ]
