"""SIGTERM (a ``kill``) and SIGHUP (the terminal closed) end a chat or a run as Ctrl-C ends a
run: the run going is interrupted and its end written to the session's log, then the command
exits 128 + the signal's number, saying so — never killed mid-run with the run left open in the
log."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

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

from .support import EFFECTAGENT, Lines, ServerThread, cli_env, run_cli, serve, spawn
from .test_cli import args, write_config

ONE_TOOL_MCP = Path(__file__).with_name("one_tool_mcp.py")


def _started(
    command: list[str], home: Path, *, stdin: int = subprocess.DEVNULL, **options: Any
) -> subprocess.Popen[str]:
    """The command, started with its own state under ``home``, its output piped as text."""
    return subprocess.Popen(
        command,
        env=cli_env(home),
        stdin=stdin,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **options,
    )


def _assert_interrupted_in_the_log(home: Path) -> None:
    """The session ``work``'s last record is its run's interruption."""
    last = logged(home, "work")[-1].record
    assert isinstance(last, RunFailedRecord)
    assert last.reason == "interrupted"


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


def hanging_tool(server: ServerThread, home: Path) -> None:
    """The model calls a read-only MCP tool (run without asking) that never answers."""
    server.script(Reply.sse(ChatWire().calls(("call_1", "slow_wait", "{}"))))
    config = (
        f'[[mcp]]\nname = "slow"\ncommand = "{sys.executable}"\nargs = ["{ONE_TOOL_MCP}", "wait"]\n'
    )
    write_config(home, config)


@pytest.mark.parametrize("blocked", ["model", "tool"])
@pytest.mark.parametrize(
    "stop", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT], ids=lambda stop: stop.name
)
def test_a_json_run_stopped_by_a_signal_ends_its_events_with_the_interruption(
    server: ServerThread, tmp_path: Path, stop: signal.Signals, blocked: str
) -> None:
    """`run --json` stopped while its model streams or its tool goes: the run is interrupted,
    not cancelled, so its last event on stdout is its `RunInterrupted`, as the log's last record
    is its interruption; the exit status is 128 + the signal (SIGINT: 130)."""
    if blocked == "model":
        hanging_answer(server)
    else:
        hanging_tool(server, tmp_path)
    command = [EFFECTAGENT, *args(server, "run", "Wait.", "--json", "--session", "work")]
    with _started(command, tmp_path) as process:
        lines = Lines(process)
        lines.until_event("TextDelta" if blocked == "model" else "ToolCallStarted")
        process.send_signal(stop)
        events = [json.loads(line) for line in lines.rest()]
        assert process.stderr is not None
        err = process.stderr.read()
        process.wait(timeout=60)
    assert process.returncode == 128 + stop, err
    last = events[-1]
    assert last["type"] == "RunInterrupted", [event["type"] for event in events]
    assert last["run_id"] == events[0]["run_id"]
    if stop != signal.SIGINT:
        assert err.endswith(f"effectagent: stopped by {stop.name}\n"), err
    _assert_interrupted_in_the_log(tmp_path)


def test_a_piped_chat_stopped_by_sigterm_ends_after_its_run_ends(
    server: ServerThread, tmp_path: Path
) -> None:
    """A chat without a terminal: SIGTERM interrupts the run going, the timeline shows its
    end, the chat ends (the session saved, as it says) instead of reading the next prompt."""
    hanging_answer(server)
    command = [EFFECTAGENT, *args(server, "chat", "--session", "work")]
    with _started(command, tmp_path, stdin=subprocess.PIPE) as process:
        assert process.stdin is not None
        process.stdin.write("Think.\nAnd then?\n")
        process.stdin.flush()
        server.wait_for_requests(1)
        process.send_signal(signal.SIGTERM)
        out, err = process.communicate(timeout=60)
    assert process.returncode == 128 + signal.SIGTERM, err
    assert "interrupted" in out
    assert "session work saved: effectagent chat --session work" in out
    assert err.endswith("effectagent: stopped by SIGTERM\n"), err
    assert len(server.requests()) == 1  # the next prompt was never sent
    _assert_interrupted_in_the_log(tmp_path)


def _ignore_sighup() -> None:
    """In the child, before the command starts: SIGHUP ignored, as `nohup` leaves it."""
    signal.signal(signal.SIGHUP, signal.SIG_IGN)


def test_a_run_started_ignoring_sighup_keeps_ignoring_it(
    server: ServerThread, tmp_path: Path
) -> None:
    """Under `nohup` (SIGHUP ignored from the start) a run is not stopped by SIGHUP: only the
    SIGTERM sent after it stops the run, and the command says so."""
    hanging_answer(server)
    command = [EFFECTAGENT, *args(server, "run", "Think.", "--json", "--session", "work")]
    with _started(command, tmp_path, preexec_fn=_ignore_sighup) as process:
        lines = Lines(process)
        lines.until_event("TextDelta")
        process.send_signal(signal.SIGHUP)  # (pending together, SIGHUP would be taken first)
        process.send_signal(signal.SIGTERM)
        events = [json.loads(line) for line in lines.rest()]
        assert process.stderr is not None
        err = process.stderr.read()
        process.wait(timeout=60)
    assert process.returncode == 128 + signal.SIGTERM, err
    assert err.endswith("effectagent: stopped by SIGTERM\n"), err
    assert events[-1]["type"] == "RunInterrupted"


def test_a_run_whose_terminal_closes_is_interrupted_and_exits_129(
    server: ServerThread, tmp_path: Path
) -> None:
    """The terminal a `run` writes to and reads from goes away (the kernel sends SIGHUP; reading
    it fails): the run is interrupted in the log and the command exits 129 — never a traceback
    about the terminal that cannot be read."""
    hanging_answer(server)
    child = spawn(args(server, "run", "Think.", "--session", "work"), cli_env(tmp_path))
    child.expect_exact("Thinking")
    assert child.pid is not None
    os.close(child.child_fd)  # the terminal closes
    _, status = os.waitpid(child.pid, 0)
    child.closed = True
    assert os.waitstatus_to_exitcode(status) == 128 + signal.SIGHUP
    _assert_interrupted_in_the_log(tmp_path)


def test_a_chat_without_the_line_editor_ends_when_its_terminal_goes_under_nohup(
    server: ServerThread, tmp_path: Path
) -> None:
    """SIGHUP ignored (`nohup`), no line editor (`TERM=dumb`): the terminal closing makes its
    reads fail (EIO), and that is the end of input — the chat ends as on Ctrl-D, never with a
    traceback about the terminal that cannot be read. (What it still writes then has nowhere
    to go: its stderr is a file here, to be read.)"""
    err = tmp_path / "stderr.txt"
    command = shlex.join([EFFECTAGENT, *args(server, "chat", "--session", "work")])
    child = pexpect.spawn(
        "/bin/sh",
        ["-c", f"exec {command} 2>{shlex.quote(str(err))}"],
        env=cli_env(tmp_path),
        encoding="utf-8",
        timeout=20,
        echo=False,
        preexec_fn=_ignore_sighup,
    )
    child.expect_exact("you>")
    assert child.pid is not None
    os.close(child.child_fd)  # the terminal closes
    os.waitpid(child.pid, 0)
    child.closed = True
    said = err.read_text()
    assert "Traceback" not in said, said
    assert "OSError" not in said, said


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGHUP])
def test_a_run_stopped_by_a_signal_is_interrupted_in_the_log(
    server: ServerThread, tmp_path: Path, stop: signal.Signals
) -> None:
    hanging_answer(server)
    command = [EFFECTAGENT, *args(server, "run", "Think.", "--session", "work")]
    with _started(command, tmp_path) as process:
        server.wait_for_requests(1)
        process.send_signal(stop)
        _out, err = process.communicate(timeout=30)
    assert process.returncode == 128 + stop, err
    assert f"effectagent: stopped by {stop.name}" in err
    _assert_interrupted_in_the_log(tmp_path)


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
    _assert_interrupted_in_the_log(tmp_path)


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
