"""Markdown answers and tables drawn with rich, from untrusted text: markup in a model's text is
text, links show where they go, control characters are escaped before rich sees them, and the
only escape sequences written are colours and styles. The Timeline keeps an answer while it
streams (its last rows a draft) and draws it whole once complete; a prompt hides the draft."""

from __future__ import annotations

import io
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from capabilities.cli import _rich
from capabilities.cli._console import Console, Markdown, Table
from capabilities.cli._sanitize import is_hidden
from capabilities.cli.render import Timeline, draft_tail
from effectagent.core import (
    ChildBudget,
    RunCompleted,
    SubagentEvent,
    SubagentStarted,
    TextDelta,
    ToolCallDeclared,
    UsageTotals,
)
from tests.providers.replay import Reply
from tests.providers.wire import ChatWire

from .support import ServerThread, cli_env, serve, spawn, terminal_screen
from .test_cli import args
from .test_line_editor import CTRL_C, ENTER, end

SGR = re.compile(r"\x1b\[[0-9;]*m")

HOSTILE = (
    "Use **care**: [bold]not markup[/bold], [link=https://evil.example]click[/link], "
    "[a link](https://shown.example), \x1b]8;;https://evil.example\x1b\\hidden\x1b]8;;\x1b\\ "
    "\x1b[2J\x1b[31mred \u202egnp.exe\n\n```python\ndef f(x):\n    return x * 2\n```\n"
)


def only_styles_left(drawn: str) -> str:
    """``drawn`` without its colour and style sequences."""
    return SGR.sub("", drawn)


def test_markup_in_a_model_s_text_is_shown_as_text() -> None:
    for color in (False, True):
        drawn = only_styles_left(_rich.markdown(HOSTILE, width=200, color=color))
        assert "[bold]not markup[/bold]" in drawn
        assert "[link=https://evil.example]click[/link]" in drawn
        assert "a link (https://shown.example)" in drawn  # where the link goes, on the screen
        assert "\\x1b]8;;https://evil.example\\x1b\\hidden" in drawn  # OSC 8, made visible
        assert "\\x1b[2J\\x1b[31mred \\u202egnp.exe" in drawn
        assert "\x1b" not in drawn
        assert not any(is_hidden(char) for char in drawn if char not in "\n")


def test_a_code_block_is_highlighted_with_colour_and_laid_out_without() -> None:
    coloured = _rich.markdown(HOSTILE, width=100, color=True)
    (line,) = [line for line in coloured.splitlines() if "def" in line and "f" in line]
    assert SGR.search(line)  # the code's own colours
    assert only_styles_left(line).strip() == "def f(x):"
    plain = _rich.markdown(HOSTILE, width=100, color=False)
    assert "\x1b" not in plain
    assert "    return x * 2" in plain  # the code's own indentation kept
    assert "```" not in plain
    assert coloured.endswith("\x1b[0m")  # nothing after it inherits a style


def test_a_drawn_line_has_no_padding_and_blank_lines_come_one_at_a_time() -> None:
    drawn = _rich.markdown("One.\n\n```\ncode\n```\n\nTwo.", width=60, color=False)
    assert drawn.splitlines() == ["One.", "", " code", "", "Two."]


_NASTY = st.lists(
    st.one_of(
        st.sampled_from([*"[]()*_`#>-|!\\\n\t\x1b\x9b\x07\u202e\u200b=/:", "```", "](x)"]),
        st.characters(codec="utf-8"),
        st.characters(categories=["Cc", "Cf", "Zl", "Zp"]),
    ),
    max_size=40,
).map("".join)


@given(_NASTY, st.booleans())
def test_for_all_text_the_only_escapes_drawn_are_colours_and_styles(text: str, color: bool) -> None:
    for drawn in (
        _rich.markdown(text, width=50, color=color),
        _rich.table(("NAME", "RUNS>"), ((text, text),), width=50, color=color),
    ):
        rest = only_styles_left(drawn)
        assert not any(is_hidden(char) for char in rest if char != "\n")
        if not color:
            assert drawn == rest  # no style at all without colour


def test_a_table_escapes_its_cells_and_aligns_a_marked_column_right() -> None:
    table = Table(("NAME", "RUNS>"), (("trip", "3"), ("a\x1b[31mb\nc", "12")))
    drawn = Console(io.StringIO(), rich=True).render((table,), 60)
    header, rule, first, second = drawn.splitlines()
    assert header.split() == ["NAME", "RUNS"]
    assert rule == "─" * len(header)
    assert first.split() == ["trip", "3"]
    cell = "a\\x1b[31mb\\nc"  # one line, escaped
    assert second == cell + " " * (len(header) - len(cell) - 2) + "12"  # right-aligned
    plain = Console(io.StringIO()).render((table,), 60)  # not a terminal: columns, as before
    assert plain.splitlines() == [
        f"{'NAME':{len(cell)}}  RUNS",
        f"{'trip':{len(cell)}}  3",
        f"{cell}  12",
    ]


def test_without_rich_drawing_markdown_is_the_text_escaped(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    console = Console(io.StringIO())
    assert console.render((Markdown("**a** \x1b[31m\n`b`"),)) == "**a** \\x1b[31m\n`b`"
    monkeypatch.setitem(sys.modules, "rich", None)  # as when rich is not installed
    wanted = Console(io.StringIO(), rich=True)
    assert not wanted.rich
    assert wanted.render((Markdown("**a**"),)) == "**a**"


class _DraftSink(io.StringIO):
    """A stream that can show a draft (as the line editor's output does)."""

    def __init__(self) -> None:
        super().__init__()
        self.drafts: list[str] = []

    def set_draft(self, text: str) -> None:
        self.drafts.append(text)


def test_a_prompt_hides_the_draft_until_it_is_answered() -> None:
    sink = _DraftSink()
    console = Console(sink)
    console.out.draft("half an \x1b[2J answer")
    console.hold()
    console.out.draft("half an answer, and more")  # while the prompt waits: not shown
    console.release()
    assert sink.drafts == ["half an \\x1b[2J answer", "", "half an answer, and more"]
    console.out.draft()
    assert sink.drafts[-1] == ""


def _event(kind: type[Any], **fields: Any) -> Any:
    base = {"run_id": "r", "conversation_id": "c", "agent": "a", "seq": 0, "at": 0.0}
    return kind(**{**base, **fields})


def _completed() -> Any:
    return _event(
        RunCompleted,
        text="",
        output=None,
        finish_reason="stop",
        exhausted=None,
        usage=UsageTotals(),
        turns=1,
        tool_calls=0,
    )


def test_an_answer_is_a_draft_while_it_streams_and_drawn_whole_once_complete() -> None:
    sink = _DraftSink()
    timeline = Timeline(Console(sink, rich=True).out, usage=False)
    for piece in ("# Plan\n\n", "Step **one**,", " [bold]two[/bold]\n"):
        timeline.render(_event(TextDelta, turn=1, text=piece))
    assert sink.getvalue() == ""  # nothing written while it streams …
    assert sink.drafts[-1] == "# Plan\n\nStep **one**, [bold]two[/bold]\n"  # … but its draft
    timeline.render(_event(ToolCallDeclared, turn=1, tool_call_id="1", tool_name="t", arguments={}))
    written = sink.getvalue().splitlines()
    assert [line.strip() for line in written[:3]] == ["Plan", "", "Step one, [bold]two[/bold]"]
    assert written[3].startswith("▸ t")
    assert sink.drafts[-1] == ""  # the draft went with it


def test_a_subagent_s_text_still_streams_indented() -> None:
    sink = _DraftSink()
    timeline = Timeline(Console(sink, rich=True).out, usage=False)
    started = _event(
        SubagentStarted,
        turn=1,
        tool_call_id="1",
        tool_name="ask",
        child_run_id="k",
        child_conversation_id="kc",
        child_agent="s",
        budget=ChildBudget(),
    )
    timeline.render(started)
    child = _event(TextDelta, run_id="k", turn=1, text="from **the child**")
    timeline.render(_event(SubagentEvent, turn=1, tool_call_id="1", child_run_id="k", event=child))
    assert sink.getvalue() == "  from **the child**"
    assert sink.drafts == []


def test_a_timeline_on_a_plain_stream_streams_as_before() -> None:
    out = io.StringIO()
    timeline = Timeline(out, usage=False)
    timeline.render(_event(TextDelta, turn=1, text="**a**"))
    assert out.getvalue() == "**a**"
    timeline.render(_completed())
    assert out.getvalue() == "**a**\n"


@given(st.text(max_size=300), st.integers(1, 120), st.integers(1, 10))
def test_a_draft_shows_the_last_rows_that_fit(text: str, width: int, rows: int) -> None:
    tail = draft_tail(text, width, rows)
    shown = tail.split("\n")
    assert len(shown) <= rows
    assert all(len(row) <= width for row in shown)
    assert text.replace("\n", "").endswith(tail.replace("\n", ""))


# ---- in a chat on a terminal ----------------------------------------------------------------


@pytest.fixture
def server() -> Iterator[ServerThread]:
    with serve() as running:
        yield running


def test_a_chat_draws_the_answer_as_markdown_once_complete_and_no_markup_of_its_text(
    server: ServerThread, tmp_path: Path
) -> None:
    """On a terminal in colour: while the answer streams its tail is a draft above the input
    line, with its tokens counted beside the spinner; complete, it is drawn with rich — code
    highlighted, and every bit of markup, link and escape sequence in it shown as text."""
    wire = ChatWire()
    streaming = [wire.chunk({"role": "assistant", "content": ""})]
    streaming += [wire.chunk({"content": piece}) for piece in ("Thinking about ", "**it**")]
    server.script(Reply.sse(streaming, ending="hang"), Reply.sse(wire.text(HOSTILE)))
    env = cli_env(tmp_path, TERM="xterm", PROMPT_TOOLKIT_NO_CPR="1")
    del env["NO_COLOR"]
    child = spawn(args(server, "chat"), env)
    seen = io.StringIO()
    child.logfile_read = seen
    child.expect_exact("you>")
    child.send("Go on." + ENTER)
    child.expect_exact("Thinking about **it**")  # the draft, as it came
    child.expect(r"answering · \d+ s · ~6 tokens")  # 21 characters, beside the spinner
    child.send(CTRL_C)  # the answer never ends: what came is drawn
    child.expect_exact("interrupted")
    # The run's lines reach the terminal through the editor's stdout proxy (a thread of its own,
    # in order), the idle prompt through the prompt's loop: on a busy machine "you>" may show
    # before the interrupted run's usage line. That line is waited for first, so the next
    # "usage: " is the second run's, and the Ctrl-D of ``end`` never lands while it goes.
    child.expect_exact("usage: ")
    child.expect_exact("you>")
    child.send("Again." + ENTER)
    child.expect_exact("usage: ")  # the second run's: its answer is complete
    child.expect_exact("you>")
    end(child)
    raw = seen.getvalue()
    assert "\x1b]8;" not in raw  # no hyperlink, ever
    assert "\x1b[2J" not in raw
    assert "\u202e" not in raw
    # Judged on the screen a terminal shows, not on the bytes: on a busy machine the input line
    # may be redrawn between two writes of a drawn line, which a terminal puts together again.
    styled = terminal_screen(raw, tmp_path, styles=True).splitlines()
    (code,) = [row for row in styled if "return" in row]
    assert SGR.search(code)  # highlighted
    screen = [only_styles_left(row) for row in styled]
    assert "Thinking about it" in screen  # the interrupted answer, drawn: bold, no stars
    (prose,) = [row for row in screen if "[bold]not markup[/bold]" in row]
    assert prose.startswith("Use care: [bold]not markup[/bold], [link=https://evil.example]")
    assert [row.strip() for row in screen if "return" in row] == ["return x * 2"]
    assert not [row for row in screen if "```" in row]
    assert any("\\x1b]8;;https://evil.example\\x1b\\hidden" in row for row in screen)
