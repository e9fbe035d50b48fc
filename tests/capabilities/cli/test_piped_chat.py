"""``effectagent chat`` with its input piped (a script, a here-document): each line is the next
prompt, run in order, once the run before it has ended — piped lines are all there at once, so
none may be taken as steering of the run going, and the end of the input ends the chat once the
last run has ended, never interrupting it. A line is an approval's answer only once the prompt
asks."""

from __future__ import annotations

import json
import shlex
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from capabilities.cli._args import parse
from tests.providers.replay import Recorded, Reply
from tests.providers.wire import ChatWire

from .support import EFFECTAGENT, ServerThread, cli_env, serve
from .test_cli import args, messages, shell_config, workspace, write_config  # noqa: F401 (a fixture)


@pytest.fixture
def server() -> Iterator[ServerThread]:
    with serve() as running:
        yield running


def piped_chat(server: ServerThread, home: Path, text: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [EFFECTAGENT, *args(server, "chat", "--session", "script")],
        env=cli_env(home),
        input=text,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_each_piped_line_is_a_prompt_of_its_own_run_in_order(
    server: ServerThread, tmp_path: Path
) -> None:
    wire = ChatWire()
    server.script(Reply.sse(wire.text("One.")), Reply.sse(wire.text("Two.")))
    done = piped_chat(server, tmp_path, "first\nsecond\n")
    assert done.returncode == 0, done.stderr
    assert "interrupted" not in done.stdout
    assert "steering" not in done.stdout
    assert done.stdout.index("One.") < done.stdout.index("Two.")
    requests = server.requests()
    assert len(requests) == 2
    assert messages(requests[1].json())[1:] == [
        ("user", "first"),
        ("assistant", "One."),
        ("user", "second"),
    ]


def test_a_piped_line_answers_an_approval_once_it_is_asked(
    server: ServerThread,
    tmp_path: Path,
    workspace: Path,  # noqa: F811 (the fixture)
) -> None:
    shell_config(tmp_path, workspace)
    wire = ChatWire()
    command = "echo approved > note.txt"
    server.script(
        Reply.sse(wire.calls(("call_1", "shell_write", json.dumps({"command": command})))),
        Reply.sse(wire.text("Wrote it.")),
    )
    done = piped_chat(server, tmp_path, "Write a note.\ny\n")
    assert done.returncode == 0, done.stderr
    assert "✓ shell_write" in done.stdout
    assert "Wrote it." in done.stdout
    assert (workspace / "note.txt").read_text() == "approved\n"


def test_the_end_of_piped_input_does_not_abandon_the_last_command(
    server: ServerThread, tmp_path: Path
) -> None:
    """A script ending in ``/compact``: the input ends while the summary call waits on the
    server, and the compaction is still carried out (once, before the chat ends)."""
    write_config(
        tmp_path,
        "[compaction]\ncontext_tokens = 100000\nkeep_recent_tokens = 0\nsummary_tokens = 20\n",
    )
    wire = ChatWire()
    asked, release = threading.Event(), threading.Event()

    def gated(_: Recorded) -> Reply:
        asked.set()
        release.wait(30)  # until the input has ended
        return Reply.sse(wire.text("Ann talked twice."))

    server.script(
        Reply.sse(wire.text("A long answer. " * 40)), Reply.sse(wire.text("Another.")), gated
    )
    with subprocess.Popen(
        [EFFECTAGENT, *args(server, "chat", "--session", "script")],
        env=cli_env(tmp_path),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as proc:
        assert proc.stdin is not None
        assert proc.stdout is not None
        assert proc.stderr is not None
        proc.stdin.write("Talk.\nMore.\n/compact\n")
        proc.stdin.flush()
        assert asked.wait(30)  # the summary call waits on the server
        proc.stdin.close()  # the end of the input, while the command waits
        release.set()
        out, err = proc.stdout.read(), proc.stderr.read()
        proc.wait(60)
    assert proc.returncode == 0, err
    assert "⇲ context compacted (summarize)" in out
    assert "abandoned" not in out + err


@pytest.mark.parametrize("name", ["trip to oslo", "-x", "ann's notes"])
def test_the_command_a_chat_suggests_at_its_end_resumes_its_session(
    server: ServerThread, tmp_path: Path, name: str
) -> None:
    """``session NAME saved: effectagent chat --session NAME`` is a command to paste: a name with
    spaces or quotes is quoted, one starting with ``-`` is joined with ``=`` — read back by a
    shell and the command's parser, it names the same session."""
    server.script(Reply.sse(ChatWire().text("Noted.")))
    done = subprocess.run(
        [EFFECTAGENT, *args(server, "chat", f"--session={name}")],
        env=cli_env(tmp_path),
        input="Remember this.\n",
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    last = done.stdout.splitlines()[-1]
    assert last.startswith(f"session {name} saved: effectagent chat ")
    suggested = shlex.split(last.partition(": ")[2])
    assert suggested[:2] == ["effectagent", "chat"]
    assert parse(suggested[1:]).session == name
