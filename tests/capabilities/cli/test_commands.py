"""The chat's commands: which lines are commands (pure), the usage totals (a property), and
``/help``, ``/usage``, ``/new`` and ``/exit`` in a real chat."""

from __future__ import annotations

import re
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

from .support import ServerThread, serve
from .test_cli import PROMPT, finish, messages, open_chat


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
    assert not Command("resume").known


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
