"""The chat's commands: which lines are commands (pure), the usage totals (a property), and
``/help``, ``/usage``, ``/new`` and ``/exit`` in a real chat."""

from __future__ import annotations

import io
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from capabilities.cli._commands import COMMANDS, Command, add_usage, command_of, message_of
from effectagent.core import UsageTotals
from tests.providers.replay import Reply
from tests.providers.wire import ChatWire

from .support import EFFECTAGENT, ServerThread, cli_env, serve, spawn
from .test_cli import PROMPT, args, end_chat, finish, messages, open_chat


def test_which_lines_are_commands() -> None:
    assert command_of("/usage") == Command("usage")
    assert command_of("  /EXIT  ") == Command("exit")
    assert command_of("/resume work") == Command("resume", "work")
    assert command_of("/etc/hosts, what is this?") is None  # a path is a message
    assert command_of("what is /usage?") is None
    assert command_of("//help") is None
    assert message_of("//help") == "/help"
    assert message_of("hello") == "hello"
    assert Command("usage").known
    assert Command("resume").known
    assert not Command("frobnicate").known


_TOTALS = st.builds(UsageTotals, *[st.integers(0, 10**9)] * 8)


@given(st.lists(_TOTALS, max_size=6))
def test_usage_totals_are_the_sums_of_the_runs(runs: list[UsageTotals]) -> None:
    """For all runs: each counted figure of the total is the sum of the runs', in any order
    of adding; the last call's figures are the last run's."""
    total = UsageTotals()
    for run in runs:
        total = add_usage(total, run)
    summed = [
        "input_tokens",
        "output_tokens",
        "cache_read_input_tokens",
        "cache_write_input_tokens",
        "reasoning_tokens",
        "model_calls",
    ]
    for name in summed:
        assert getattr(total, name) == sum(getattr(run, name) for run in runs)
    if runs:
        assert (total.last_input_tokens, total.last_output_tokens) == (
            runs[-1].last_input_tokens,
            runs[-1].last_output_tokens,
        )
    backwards = UsageTotals()
    for run in reversed(runs):
        backwards = add_usage(backwards, run)
    assert attrs.evolve(backwards, last_input_tokens=0, last_output_tokens=0) == attrs.evolve(
        total, last_input_tokens=0, last_output_tokens=0
    )


@pytest.fixture
def server() -> Iterator[ServerThread]:
    with serve() as running:
        yield running


def test_help_usage_new_and_exit_in_a_chat(server: ServerThread, tmp_path: Path) -> None:
    wire = ChatWire()
    server.script(
        Reply.sse(wire.text("One.", usage=wire.usage(12, 3))),
        Reply.sse(wire.text("Two.", usage=wire.usage(30, 4))),
        Reply.sse(wire.text("Fresh.")),
    )
    child = open_chat(server, tmp_path)
    child.sendline("/help")
    for name in COMMANDS:
        child.expect_exact(f"/{name}")
    child.expect(PROMPT)
    child.sendline("First?")
    child.expect_exact("One.")
    child.expect(PROMPT)
    child.sendline("Second?")
    child.expect_exact("Two.")
    child.expect(PROMPT)
    child.sendline("/usage")
    child.expect_exact(
        "usage of this chat (2 runs): input 42 · output 7 · cache read 0 · cache write 0"
    )
    child.expect(PROMPT)
    child.sendline("/frobnicate")
    child.expect_exact("there is no command /frobnicate: /help lists them")
    child.expect(PROMPT)
    child.sendline("/new")
    child.expect_exact("a new conversation starts with your next message")
    child.expect(PROMPT)
    child.sendline("Third?")
    child.expect_exact("Fresh.")
    child.expect(PROMPT)
    child.sendline("/exit")
    output, status = finish(child)
    assert status == 0
    said = re.search(r"session (chat-\S+) saved: effectagent chat --session \1\r?$", output, re.M)
    assert said is not None, output  # how to come back
    requests = server.requests()
    assert len(requests) == 3  # no command reached the model
    second, third = (messages(request.json()) for request in requests[1:])
    assert ("user", "First?") in second
    assert [text for role, text in third if role == "user"] == ["Third?"]  # a new conversation


def test_a_resumed_chat_shows_its_last_turns_and_sessions_show_prints_all(
    server: ServerThread, tmp_path: Path
) -> None:
    wire = ChatWire()
    server.script(*(Reply.sse(wire.text(f"Answer {n}.")) for n in (1, 2, 3)))
    child = spawn(args(server, "chat", "--session", "trip"), cli_env(tmp_path))
    for n in (1, 2, 3):
        child.expect(PROMPT)
        child.sendline(f"Question {n}?")
        child.expect_exact(f"Answer {n}.")
    child.expect(PROMPT)
    end_chat(child)

    again = spawn(args(server, "chat", "--session", "trip"), cli_env(tmp_path))
    seen = io.StringIO()
    again.logfile_read = seen
    again.expect_exact("assistant> Answer 3.")  # the last turn replayed …
    again.expect(PROMPT)  # … then the prompt
    end_chat(again)
    opening = seen.getvalue()
    assert "… 2 earlier messages (effectagent sessions show trip)" in opening
    shown = [line for line in opening.splitlines() if "> " in line]
    assert shown[-1] == "you> "  # the prompt, after them
    assert shown[:-1] == [
        "you> Question 2?",
        "assistant> Answer 2.",
        "you> Question 3?",
        "assistant> Answer 3.",
    ]

    listed = subprocess.run(
        [EFFECTAGENT, "sessions", "show", "trip"],
        env=cli_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    assert lines[0].startswith("session trip, conversation ")
    assert lines[1:] == [
        f"{who}> {what} {n}{mark}"
        for n in (1, 2, 3)
        for who, what, mark in (("you", "Question", "?"), ("assistant", "Answer", "."))
    ]
    missing = subprocess.run(
        [EFFECTAGENT, "sessions", "show", "nope"],
        env=cli_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert missing.returncode == 2
    assert "there is no session nope with a conversation" in missing.stderr
