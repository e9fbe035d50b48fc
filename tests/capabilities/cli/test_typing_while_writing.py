"""Keys typed while ``effectagent chat`` writes an answer above the input line, through a real
pseudo-terminal: they are neither echoed into the answer by the terminal nor lost, and Ctrl-D
still ends the session.

Each line the chat writes goes out while prompt_toolkit has hidden the input line. prompt_toolkit
used to put the terminal back into its cooked mode (canonical, echoing) for that time, and a key
that arrived then was echoed by the terminal itself, in the middle of the answer; Ctrl-D was taken
by the terminal as an end of line and reached the chat as a NUL byte, so the session went on.

The test hits that time without depending on luck: an answer far longer than the pty's buffer is
written in one piece, so once its first line has been read the command is held inside that write
until the test reads on. The keys are typed then, and the test waits until the terminal has taken
them (the pty reads as ready: in canonical mode only once Ctrl-D ends the line) before it reads on.
"""

from __future__ import annotations

import contextlib
import os
import select
import sys
import termios
from collections.abc import Iterator
from pathlib import Path

import pexpect
import pytest

from tests.providers.replay import Reply
from tests.providers.wire import ChatWire

from .support import ServerThread, serve, terminal_screen
from .test_cli import finish, messages
from .test_line_editor import CTRL_D, ENTER, open_chat

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="finds the pty's name under /proc"
)

#: Rows of each answer: together some 60 KB, well past what a pty holds unread.
ROWS = 400


@pytest.fixture
def server() -> Iterator[ServerThread]:
    with serve() as running:
        yield running


def long_answer(name: str) -> tuple[str, list[str]]:
    """An answer that starts with ``NAME begins.`` (shown only once the answer is complete: the
    draft shows its last rows) and the rows its code block is drawn as."""
    rows = [f"{name} row {n:04d} " + "." * 130 for n in range(ROWS)]
    text = f"{name} begins.\n\n```\n" + "\n".join(rows) + f"\n```\n\n{name} ends."
    return text, [f" {row}" for row in rows]  # a code block is drawn one column in


@contextlib.contextmanager
def terminal_side(child: pexpect.spawn[str]) -> Iterator[int]:
    """The command's terminal (the pty's slave), opened by the test to see when it has taken
    what was typed; it never reads from it."""
    slave = os.open(os.readlink(f"/proc/{child.pid}/fd/0"), os.O_RDONLY | os.O_NOCTTY)
    try:
        yield slave
    finally:
        os.close(slave)


def type_while_held(child: pexpect.spawn[str], keys: str) -> None:
    """Type ``keys`` (ending with Ctrl-D) while the command is held inside a write, and return
    once the terminal has taken them all (the command cannot read them before: it is held).
    Checked on the way: the terminal's output processing is on while the chat writes (a newline
    starts its row at the first column)."""
    output_modes = termios.tcgetattr(child.child_fd)[1]  # a pty's master reads its slave's modes
    assert output_modes & termios.OPOST
    assert output_modes & termios.ONLCR
    assert keys.endswith(CTRL_D)  # what makes a canonical line ready, were the terminal cooked
    with terminal_side(child) as slave:
        child.send(keys)
        ready, _, _ = select.select([slave], [], [], 30)
        assert ready, "the terminal never took what was typed"


def test_keys_typed_while_an_answer_is_written_are_kept_and_ctrl_d_ends_the_session(
    server: ServerThread, tmp_path: Path
) -> None:
    """Before: ``First row 0118 …still here`` on the screen, and a Ctrl-D that never ended the
    session."""
    first, first_rows = long_answer("First")
    second, second_rows = long_answer("Second")
    wire = ChatWire()
    server.script(Reply.sse(wire.text(first)), Reply.sse(wire.text(second)))
    child, seen = open_chat(server, tmp_path)
    child.send("Tell me a lot." + ENTER)
    child.expect_exact("First begins.")  # the answer is being written: the command is held
    # Ctrl-D after text at the input line deletes nothing and does not end the session.
    type_while_held(child, "still here" + CTRL_D)
    child.expect_exact("First ends.")
    child.expect_exact("you>")
    child.expect_exact("still here")  # kept in the input line, below the answer
    # (The screen is judged once the session has ended, below: read now, the input line may be
    # caught between its erase and its redraw on a busy machine.)
    child.send(ENTER)  # … and sent
    child.expect_exact("Second begins.")
    type_while_held(child, CTRL_D)  # on an empty input line: ends the session
    _, status = finish(child)
    assert status == 0
    assert messages(server.requests()[1].json())[-1][1] == "still here"
    rows = 2 * ROWS + 100  # the whole transcript fits: nothing scrolls away
    screen = terminal_screen(seen.getvalue(), tmp_path, size=(200, rows)).splitlines()
    assert [row for row in screen if "still here" in row] == ["you> still here"]  # sent
    assert [row for row in screen if "First row" in row] == first_rows
    assert [row for row in screen if "Second row" in row] == second_rows
