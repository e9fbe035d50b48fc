"""SIGTERM (a ``kill``) and SIGHUP (the terminal closed) end a chat or a run as Ctrl-C ends a
run: the run going is interrupted and its end written to the session's log, then the command
exits 128 + the signal's number, saying so — never killed mid-run with the run left open in the
log."""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pexpect
import pytest
import trio

from capabilities import sqlite_storage
from capabilities.cli._common import DATABASE
from capabilities.sessions import SessionStoreService
from effectagent import open_runtime
from effectagent.core import LogEntry, RunFailedRecord
from tests.providers.replay import Reply
from tests.providers.wire import ChatWire

from .support import EFFECTAGENT, ServerThread, cli_env, run_cli, serve, spawn
from .test_cli import args


@pytest.fixture
def server() -> Iterator[ServerThread]:
    with serve() as running:
        yield running


def logged(home: Path, name: str) -> list[LogEntry]:
    """The log of the conversation the session ``name`` continues."""

    async def go() -> list[LogEntry]:
        async with open_runtime(sqlite_storage(home / "state" / "effectagent" / DATABASE)) as rt:
            (session,) = [s for s in await rt.context[SessionStoreService].list() if s.name == name]
            return list(await rt.log.entries(session.conversations[-1]))

    return trio.run(go)


def hanging_answer(server: ServerThread) -> None:
    """The model starts its answer, then never ends it."""
    wire = ChatWire()
    server.script(
        Reply.sse([wire.chunk({"role": "assistant", "content": "Thinking"})], ending="hang")
    )


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGHUP])
def test_a_run_stopped_by_a_signal_is_interrupted_in_the_log(
    server: ServerThread, tmp_path: Path, stop: signal.Signals
) -> None:
    hanging_answer(server)
    command = [EFFECTAGENT, *args(server, "run", "Think.", "--session", "work")]
    with subprocess.Popen(
        command,
        env=cli_env(tmp_path),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as process:
        server.wait_for_requests(1)
        process.send_signal(stop)
        _out, err = process.communicate(timeout=30)
    assert process.returncode == 128 + stop, err
    assert f"effectagent: stopped by {stop.name}" in err
    last = logged(tmp_path, "work")[-1].record
    assert isinstance(last, RunFailedRecord)
    assert last.reason == "interrupted"


def test_a_run_stopped_by_sigterm_counts_in_the_sessions_runs(
    server: ServerThread, tmp_path: Path
) -> None:
    """`effectagent sessions` counts a run SIGTERM interrupted, as it counts one Ctrl-C
    interrupted: its interruption is in the log like theirs."""
    hanging_answer(server)
    env = cli_env(tmp_path)
    command = [EFFECTAGENT, *args(server, "run", "Think.", "--session", "work")]
    with subprocess.Popen(
        command, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    ) as process:
        server.wait_for_requests(1)
        process.send_signal(signal.SIGTERM)
        process.communicate(timeout=30)
    assert process.returncode == 128 + signal.SIGTERM
    listed = run_cli([EFFECTAGENT, "sessions"], env)
    (row,) = listed.stdout.splitlines()[1:]
    assert row.split()[0] == "work"
    assert row.split()[-1] == "1", listed.stdout


def test_a_chat_stopped_by_sigterm_shows_the_answer_so_far_and_logs_the_interruption(
    server: ServerThread, tmp_path: Path
) -> None:
    hanging_answer(server)
    env = cli_env(tmp_path, TERM="xterm", PROMPT_TOOLKIT_NO_CPR="1")  # the line editor
    child = spawn(args(server, "chat", "--session", "work"), env)
    child.expect_exact("you>")
    child.send("Think.\r")
    server.wait_for_requests(1)
    child.expect_exact("Thinking")  # the draft, above the input line
    child.kill(signal.SIGTERM)
    child.expect("stopped by SIGTERM")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 128 + signal.SIGTERM
    last = logged(tmp_path, "work")[-1].record
    assert isinstance(last, RunFailedRecord)
    assert last.reason == "interrupted"


_HUNG_UP = """
import errno, sys, tempfile
from pathlib import Path
from capabilities.cli._line_editor import LineEditor

editor = LineEditor(Path(tempfile.mkdtemp()) / "history")

def hung_up(*args, **kwargs):  # what prompt_toolkit raises once the terminal is gone
    raise OSError(errno.EIO, "Input/output error")

editor._session.prompt = hung_up
print(repr(editor.read()))
"""


def test_a_terminal_gone_without_a_sighup_ends_the_chats_input() -> None:
    """The terminal closed while SIGHUP is ignored (``nohup``, a shell that traps it): reading
    it fails (EIO), and that is the end of input — the chat ends as on Ctrl-D — never a dead
    input thread that leaves the chat waiting forever."""
    done = subprocess.run(
        [sys.executable, "-c", _HUNG_UP],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "None"
