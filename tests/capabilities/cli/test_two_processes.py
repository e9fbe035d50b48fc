"""Two ``effectagent`` processes on one state directory (#25 item 2): a ``chat`` stays open in a
pseudo-terminal while ``run --session OTHER`` and ``sessions`` work in another process; a run of
the chat's own session while the chat's run goes is refused with a sentence and exit status 3,
nothing of it sent or written, and goes through once that run has ended."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pexpect
import pytest

from tests.providers.replay import Reply
from tests.providers.wire import ChatWire

from .support import EFFECTAGENT, ServerThread, cli_env, serve, spawn

MODEL = ["--model", "openai-compatible:test-model", "--api-key-env", "CLI_TEST_KEY"]
PROMPT = "you> "
#: The checkout these tests belong to: the commands they start import it first.
ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def server() -> Iterator[ServerThread]:
    with serve() as running:
        yield running


def _env(home: Path) -> dict[str, str]:
    return cli_env(home, PYTHONPATH=str(ROOT))


def _args(server: ServerThread, command: str, *rest: str) -> list[str]:
    return [command, *MODEL, "--base-url", server.url, *rest]


def _command(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``effectagent ARGS`` in another process, not on a terminal, to its end."""
    return subprocess.run(
        [EFFECTAGENT, *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
        check=False,
    )


def _finish(child: pexpect.spawn[str]) -> int:
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus is not None, f"ended by signal {child.signalstatus}"
    return child.exitstatus


def test_chat_open_while_run_and_sessions_work_in_another_process(
    server: ServerThread, tmp_path: Path
) -> None:
    wire = ChatWire()
    server.script(
        Reply.sse(wire.text("Hello from the chat.")),
        Reply.sse(wire.text("Hello from the run.")),
        Reply.sse(wire.text("Still here.")),
    )
    env = _env(tmp_path)
    chat = spawn(_args(server, "chat", "--session", "talk"), env)
    chat.expect(PROMPT)
    chat.sendline("Hi.")
    chat.expect("Hello from the chat.")
    chat.expect(PROMPT)

    ran = _command(_args(server, "run", "Hi there.", "--session", "other"), env)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout == "Hello from the run.\n"
    listed = _command(["sessions"], env)
    assert listed.returncode == 0, listed.stderr
    names = [line.split()[0] for line in listed.stdout.splitlines()[1:]]
    assert sorted(names) == ["other", "talk"]

    chat.sendline("And now?")  # the chat goes on, on the same file
    chat.expect("Still here.")
    chat.expect(PROMPT)
    chat.sendeof()
    assert _finish(chat) == 0


def test_the_same_session_at_once_is_refused_with_a_sentence_and_exit_status_3(
    server: ServerThread, tmp_path: Path
) -> None:
    wire = ChatWire()
    server.script(
        Reply.sse(wire.text("First.")),
        Reply.stall(),  # the chat's second run waits for the model
        Reply.sse(wire.text("Your turn now.")),
    )
    env = _env(tmp_path)
    chat = spawn(_args(server, "chat", "--session", "talk"), env)
    chat.expect(PROMPT)
    chat.sendline("One.")
    chat.expect("First.")
    chat.expect(PROMPT)
    chat.sendline("Two.")  # its run is now going, waiting for the model
    server.wait_for_requests(2)  # once it reached the server, the run holds its session

    refused = _command(_args(server, "run", "Me too.", "--session", "talk", "--json"), env)
    assert refused.returncode == 3
    assert refused.stdout == ""
    assert refused.stderr == (
        f"effectagent: session talk has a run going in another process (process {chat.pid}): "
        "nothing was sent; wait for that run to end, or use another --session\n"
    )
    assert len(server.requests()) == 2  # nothing reached the model

    chat.sendintr()  # Ctrl-C: the chat's run is interrupted, the session goes on
    chat.expect(PROMPT)
    chat.sendeof()
    assert _finish(chat) == 0

    ran = _command(_args(server, "run", "My turn?", "--session", "talk", "--json"), env)
    assert ran.returncode == 0, ran.stderr
    events = [json.loads(line) for line in ran.stdout.splitlines()]
    assert events[-1]["type"] == "RunCompleted"
    inputs = [m["content"] for m in server.requests()[-1].json()["messages"] if m["role"] == "user"]
    assert "Me too." not in str(inputs)  # the refused run wrote nothing to the conversation
