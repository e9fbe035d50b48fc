"""``effectagent chat`` with its input piped (a script, a here-document): each line is the next
prompt, run in order, once the run before it has ended — piped lines are all there at once, so
none may be taken as steering of the run going, and the end of the input ends the chat once the
last run has ended, never interrupting it. A line is an approval's answer only once the prompt
asks."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.providers.replay import Reply
from tests.providers.wire import ChatWire

from .support import EFFECTAGENT, ServerThread, cli_env, serve
from .test_cli import args, messages, shell_config, workspace  # noqa: F401 (a fixture)


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
