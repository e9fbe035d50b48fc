"""The spinner: what a run waits on, from its events (pure, with made-up times), and shown above
the chat's input line against a server that answers nothing."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from capabilities.cli._progress import FRAMES, Progress, tokens_of
from effectagent.core import (
    ReasoningDelta,
    RunCompleted,
    TextDelta,
    ToolCallDeclared,
    ToolCallStarted,
    ToolCallSucceeded,
    TurnCompleted,
    TurnStarted,
    UsageTotals,
)
from tests.providers.replay import Reply

from .support import ServerThread, serve, terminal_screen
from .test_line_editor import CTRL_C, ENTER, end, open_chat


def event(kind: type[Any], **fields: Any) -> Any:
    base = {"run_id": "r", "conversation_id": "c", "agent": "a", "seq": 0, "at": 0.0}
    return kind(**base, **fields)


def test_the_model_s_wait_shows_after_a_second_until_its_answer_begins() -> None:
    progress = Progress()
    progress.see(event(TurnStarted, turn=1), 100.0)
    assert progress.status(100.9) is None  # most answers start sooner: nothing shown
    assert progress.status(101.0) == "⠙ waiting for the model · 1 s"
    assert progress.status(145.2) == "⠴ waiting for the model · 45 s"
    assert progress.seconds(145.2) == 45
    progress.see(event(TextDelta, turn=1, text="Hi"), 146.0)
    assert progress.seconds(146.0) is None  # nothing is waited on: the answer shows itself


def test_an_answer_s_tokens_are_counted_as_they_stream() -> None:
    """About four characters a token, from the text and the reasoning streamed so far in the
    turn; the model's exact figure comes with the run's usage once the answer is complete."""
    progress = Progress()
    progress.see(event(TurnStarted, turn=1), 10.0)
    progress.see(event(ReasoningDelta, turn=1, text="Let me think."), 10.2)  # 13 characters
    assert progress.status(10.5) is None  # a quick answer shows no spinner
    assert progress.status(11.0) == "⠙ answering · 1 s · ~4 tokens"
    progress.see(event(TextDelta, turn=1, text="x" * 4000), 12.0)
    assert progress.status(12.0) == "⠹ answering · 2 s · ~1,004 tokens"
    progress.see(
        event(ToolCallDeclared, turn=1, tool_call_id="1", tool_name="shell", arguments={}), 12.5
    )
    progress.see(
        event(TurnCompleted, turn=1, finish_reason="tool_calls", usage=UsageTotals()), 13.0
    )
    assert progress.status(20.0) is None  # the turn ended: nothing streams
    progress.see(event(TurnStarted, turn=2), 20.0)
    progress.see(event(TextDelta, turn=2, text="ok"), 20.1)
    assert progress.status(21.0) == "⠙ answering · 1 s · ~1 token"  # a new turn counts anew


@given(st.lists(st.text(max_size=40), max_size=30))
def test_the_token_count_is_the_streamed_characters_over_four_rounded_up(
    pieces: list[str],
) -> None:
    progress = Progress()
    progress.see(event(TurnStarted, turn=1), 0.0)
    for piece in pieces:
        progress.see(event(TextDelta, turn=1, text=piece), 0.0)
    streamed = sum(map(len, pieces))
    status = progress.status(5.0)
    if not streamed:
        assert status == "⠴ waiting for the model · 5 s"
    else:
        shown = status.rsplit("~", 1)[1] if status else ""
        assert shown.split()[0].replace(",", "") == str(tokens_of(streamed))
        assert 4 * tokens_of(streamed) - 3 <= streamed <= 4 * tokens_of(streamed)


def test_each_running_tool_shows_the_longest_first_until_it_settles() -> None:
    progress = Progress()
    progress.see(event(ToolCallStarted, turn=1, tool_call_id="1", tool_name="shell"), 10.0)
    progress.see(event(ToolCallStarted, turn=1, tool_call_id="2", tool_name="notes"), 12.0)
    assert progress.status(18.5) == "⠇ shell running (+1 more) · 8 s"
    outcome: Any = None
    progress.see(
        event(ToolCallSucceeded, turn=1, tool_call_id="1", tool_name="shell", outcome=outcome),
        19.0,
    )
    assert progress.status(19.0) == "⠧ notes running · 7 s"
    progress.see(
        event(
            RunCompleted,
            text="",
            output=None,
            finish_reason="stop",
            exhausted=None,
            usage=UsageTotals(),
            turns=1,
            tool_calls=0,
        ),
        20.0,
    )
    assert progress.status(30.0) is None


@pytest.fixture
def server() -> Iterator[ServerThread]:
    with serve() as running:
        yield running


def test_the_spinner_counts_the_seconds_of_a_server_that_answers_nothing(
    server: ServerThread, tmp_path: Path
) -> None:
    server.script(Reply.stall())
    child, seen = open_chat(server, tmp_path)
    child.send("Hello?" + ENTER)
    child.expect_exact("waiting for the model · 1 s")  # drawn above the input line
    # Then only what changes is drawn again: the frame, the figure (between cursor moves). A
    # busy machine may draw a second late or skip one, so the frames are read, not foretold:
    # each new one is a later second's.
    drawn = 1
    while drawn < 3:
        child.expect(f"[{FRAMES}]")
        assert isinstance(child.after, str)
        second = FRAMES.index(child.after)
        assert second > drawn
        drawn = second
    # what the terminal shows now: the count, above the input line
    screen = terminal_screen(seen.getvalue(), tmp_path).splitlines()
    (line,) = [line for line in screen if "waiting for the model ·" in line]
    figure = int(line.removesuffix(" s").rsplit(" ", 1)[1])
    assert figure >= 3
    assert line == f"{FRAMES[figure % len(FRAMES)]} waiting for the model · {figure} s"
    assert screen[screen.index(line) + 1].startswith(">")
    child.send(CTRL_C)
    child.expect_exact("interrupted")
    child.expect_exact("you>")
    end(child)
