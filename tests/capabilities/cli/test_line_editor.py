"""Typing and pasting at ``effectagent chat`` with the line editor (prompt_toolkit), through a
real pseudo-terminal as a terminal emulator drives it: a paste arrives as the terminal sends it,
between the bracketed-paste markers, and keys as their escape sequences.

The terminal is ``xterm`` (the line editor is used on a terminal that can move its cursor; a
``dumb`` one keeps the plain line reader the other CLI tests use), and it does not answer cursor
position requests (``PROMPT_TOOLKIT_NO_CPR``). Each test waits for what the command prints.
"""

from __future__ import annotations

import contextlib
import io
import json
import shutil
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pexpect
import pytest

from tests.providers.replay import Reply
from tests.providers.wire import ChatWire

from .support import ServerThread, cli_env, serve, spawn, terminal_screen
from .test_cli import args, finish, messages, shell_config

PASTE_START, PASTE_END = "\x1b[200~", "\x1b[201~"
UP = "\x1b[A"
ENTER = "\r"
CTRL_C, CTRL_D = "\x03", "\x04"


@pytest.fixture
def server() -> Iterator[ServerThread]:
    with serve() as running:
        yield running


@pytest.fixture
def workspace() -> Iterator[Path]:
    """Directly under the temp dir, open to the sandbox's user (nobody when tests run as root)."""
    directory = Path(tempfile.mkdtemp(prefix="effectagent-editor-"))
    directory.chmod(0o777)
    try:
        yield directory
    finally:
        shutil.rmtree(directory)


def open_chat(server: ServerThread, home: Path) -> tuple[pexpect.spawn[str], io.StringIO]:
    """``effectagent chat`` in an xterm-like pty, at its first prompt; and its transcript."""
    env = cli_env(home, TERM="xterm", PROMPT_TOOLKIT_NO_CPR="1")
    child = spawn(args(server, "chat"), env)
    seen = io.StringIO()
    child.logfile_read = seen
    child.expect_exact("you>")
    return child, seen


def answered(child: pexpect.spawn[str], text: str) -> None:
    """Wait for the run's answer, its end, and the idle prompt drawn again."""
    child.expect_exact(text)
    child.expect_exact("usage: ")
    child.expect_exact("you>")


def end(child: pexpect.spawn[str]) -> None:
    child.send(CTRL_D)
    _, status = finish(child)
    assert status == 0


def last_user_message(server: ServerThread, index: int) -> str:
    return messages(server.requests()[index].json())[-1][1]


def test_a_two_line_paste_is_one_message(server: ServerThread, tmp_path: Path) -> None:
    """Before: the second line went out as steering while no run was going, and was lost."""
    server.script(Reply.sse(ChatWire().text("Got both.")))
    child, _ = open_chat(server, tmp_path)
    child.send(f"{PASTE_START}first line\nsecond line{PASTE_END}")
    child.send(ENTER)
    answered(child, "Got both.")
    end(child)
    assert len(server.requests()) == 1
    assert last_user_message(server, 0) == "first line\nsecond line"


def test_a_10000_character_paste_arrives_whole(server: ServerThread, tmp_path: Path) -> None:
    """Before: a line in the terminal's canonical mode stopped at 4,095 characters, silently."""
    pasted = "".join(f"{n:04d}abcdef" for n in range(1000)) + "\nand a last line"
    assert len(pasted) > 10_000
    server.script(Reply.sse(ChatWire().text("Read it all.")))
    child, _ = open_chat(server, tmp_path)
    chunk = 1000  # what the command echoes is read between the pieces: neither side blocks
    text = f"{PASTE_START}{pasted}{PASTE_END}"
    for start in range(0, len(text), chunk):
        child.send(text[start : start + chunk])
        with contextlib.suppress(pexpect.TIMEOUT):
            child.read_nonblocking(1_000_000, timeout=0)
    child.send(ENTER)
    answered(child, "Read it all.")
    end(child)
    assert last_user_message(server, 0) == pasted


def test_history_recalls_a_message_in_this_session_and_the_next(
    server: ServerThread, tmp_path: Path
) -> None:
    wire = ChatWire()
    server.script(
        Reply.sse(wire.text("Four.")),
        Reply.sse(wire.text("Still four.")),
        Reply.sse(wire.text("Four again.")),
    )
    child, _ = open_chat(server, tmp_path)
    child.send("What is 2 + 2?" + ENTER)
    answered(child, "Four.")
    child.send(UP + ENTER)  # the last message, recalled
    answered(child, "Still four.")
    end(child)
    history = tmp_path / "state" / "effectagent" / "history"
    assert stat.S_IMODE(history.stat().st_mode) == 0o600  # what was typed is the user's alone
    again, _ = open_chat(server, tmp_path)  # a new process: the history was kept
    again.send(UP + ENTER)
    answered(again, "Four again.")
    end(again)
    assert [last_user_message(server, index) for index in range(3)] == ["What is 2 + 2?"] * 3


def test_steering_typed_during_a_streamed_answer_stays_out_of_it(
    server: ServerThread, tmp_path: Path
) -> None:
    """Before: ``word3 actually, answer in Frenchword4``. Now the typed text stays in the input
    line below the answer while it streams, and is shown as steering on its own line."""
    wire = ChatWire()
    server.script(Reply.sse(wire.text("word1 ", "word2 ", "word3"), ending="hang"))
    child, seen = open_chat(server, tmp_path)
    child.send("Count in words." + ENTER)
    child.expect_exact("word3")  # streaming; the server holds the rest back
    child.send("actually, answer in French")
    child.expect_exact("French")  # drawn in the input line
    child.send(ENTER)
    child.expect_exact("steering: taken at the next turn")
    child.send(CTRL_C)  # the answer never ends: interrupt it
    child.expect_exact("interrupted")
    child.expect_exact("you>")
    end(child)
    screen = terminal_screen(seen.getvalue(), tmp_path).splitlines()
    answer = screen.index("word1 word2 word3")  # the answer's line, whole
    assert screen[answer + 1 : answer + 3] == [
        "> actually, answer in French",
        "  ↪ steering: taken at the next turn",
    ]
    assert not [row for row in screen if "word3" in row and "French" in row]


def test_esc_enter_starts_a_new_line_in_the_message(server: ServerThread, tmp_path: Path) -> None:
    server.script(Reply.sse(ChatWire().text("Two lines.")))
    child, _ = open_chat(server, tmp_path)
    child.send("line one" + "\x1b" + ENTER + "line two")
    child.expect_exact("line two")
    child.send(ENTER)
    answered(child, "Two lines.")
    end(child)
    assert last_user_message(server, 0) == "line one\nline two"


def test_ctrl_r_finds_an_earlier_message(server: ServerThread, tmp_path: Path) -> None:
    wire = ChatWire()
    server.script(
        Reply.sse(wire.text("Cold.")),
        Reply.sse(wire.text("Warm.")),
        Reply.sse(wire.text("Cold again.")),
    )
    child, _ = open_chat(server, tmp_path)
    child.send("How cold is Oslo?" + ENTER)
    answered(child, "Cold.")
    child.send("How warm is Rome?" + ENTER)
    answered(child, "Warm.")
    child.send("\x12" + "Oslo")  # Ctrl-R, then what to look for
    child.expect_exact("Oslo")
    child.send(ENTER)  # take what was found …
    child.send(ENTER)  # … and send it
    answered(child, "Cold again.")
    end(child)
    assert last_user_message(server, 2) == "How cold is Oslo?"


def test_an_approval_is_asked_and_answered_at_the_input_line(
    server: ServerThread, tmp_path: Path, workspace: Path
) -> None:
    """The question is shown whole above the input line; the answer typed there decides."""
    shell_config(tmp_path, workspace)
    wire = ChatWire()
    command = "echo approved > note.txt"
    server.script(
        Reply.sse(wire.calls(("call_1", "shell_write", json.dumps({"command": command})))),
        Reply.sse(wire.text("Wrote note.txt.")),
    )
    child, seen = open_chat(server, tmp_path)
    child.send("Write a note." + ENTER)
    child.expect_exact("shell_write waits for approval")
    child.expect_exact("[a]lways for this session:")  # drawn above the input line
    assert not (workspace / "note.txt").exists()  # nothing ran before the answer
    child.send("y" + ENTER)
    answered(child, "Wrote note.txt.")
    end(child)
    assert (workspace / "note.txt").read_text() == "approved\n"
    screen = terminal_screen(seen.getvalue(), tmp_path)
    assert f'"command": "{command}"' in screen
    assert "allow shell_write? [y]es / [n]o / [a]lways for this session: y" in screen
