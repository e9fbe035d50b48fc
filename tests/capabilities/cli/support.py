"""What the CLI tests share: the provider replay server in a thread of its own, and the
``effectagent`` command started in a pseudo-terminal with an environment of its own.

The replay server (``tests.providers.replay``) runs in its own ``trio.run`` in a background
thread, so the tests themselves are plain functions that may block on ``pexpect``; scripting the
server and reading what it received go through the server's Trio token (thread-safe).
"""

from __future__ import annotations

import json
import os
import queue
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pexpect
import trio

from tests.providers.replay import Recorded, ReplayServer, Script, start_server

__all__ = ["TMUX", "Lines", "ServerThread", "cli_env", "serve", "spawn", "terminal_screen"]

#: A made-up key: it must never show in anything the command prints.
KEY = "sk-cli-test-canary-0123456789abcdef"

#: The command, as a user would start it (the installed console script).
EFFECTAGENT = str(Path(sys.executable).with_name("effectagent"))

#: tmux, the terminal emulator a transcript is shown in (None when it is not installed).
TMUX = shutil.which("tmux")  # ``make sysdeps`` installs it: never None there


class ServerThread:
    """A :class:`ReplayServer` in a thread (see the module notes)."""

    def __init__(self) -> None:
        self._ready = threading.Event()
        self._server: ReplayServer | None = None
        self._token: trio.lowlevel.TrioToken | None = None
        self._stop: trio.Event | None = None
        self._thread = threading.Thread(target=trio.run, args=(self._main,), daemon=True)
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("the replay server did not start")

    async def _main(self) -> None:
        self._stop = trio.Event()
        async with trio.open_nursery() as nursery:
            self._server = await start_server(nursery)
            self._token = trio.lowlevel.current_trio_token()
            self._ready.set()
            await self._stop.wait()
            nursery.cancel_scope.cancel()

    @property
    def url(self) -> str:
        """The OpenAI-compatible root the command is pointed at."""
        assert self._server is not None
        return f"{self._server.url}/v1"

    def script(self, *replies: Script) -> None:
        """Answer the next requests with ``replies``."""
        assert self._server is not None
        trio.from_thread.run_sync(self._server.script, *replies, trio_token=self._token)

    def requests(self) -> list[Recorded]:
        """What the server received so far."""
        server = self._server
        assert server is not None
        return trio.from_thread.run_sync(lambda: list(server.requests), trio_token=self._token)

    def wait_for_requests(self, count: int, *, bound: float = 60.0) -> None:
        """Block until the server has received ``count`` requests (woken as each arrives, never
        polled); ``bound`` seconds only guard against a test that would hang otherwise."""
        server = self._server
        assert server is not None

        async def wait() -> None:
            with trio.fail_after(bound):
                await server.wait_for_requests(count)

        trio.from_thread.run(wait, trio_token=self._token)

    def close(self) -> None:
        """Stop the server and its thread."""
        stop = self._stop
        assert stop is not None
        trio.from_thread.run_sync(stop.set, trio_token=self._token)
        self._thread.join(10)


@contextmanager
def serve() -> Iterator[ServerThread]:
    """A replay server for the block."""
    server = ServerThread()
    try:
        yield server
    finally:
        server.close()


class Lines:
    """The lines a process writes to its stdout (text mode), read in a thread as they come: a
    test waits for a line (never for a time), ``bound`` seconds only guarding against a hang."""

    def __init__(self, process: subprocess.Popen[str], *, bound: float = 60.0) -> None:
        assert process.stdout is not None
        self._stdout = process.stdout
        self._lines: queue.Queue[str | None] = queue.Queue()
        self._bound = bound
        self.seen: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self._stdout:
            self._lines.put(line)
        self._lines.put(None)

    def until(self, text: str) -> str:
        """Read lines until one holding ``text``; that line."""
        while True:
            line = self._lines.get(timeout=self._bound)
            assert line is not None, f"stdout ended before {text!r}: {self.seen}"
            self.seen.append(line)
            if text in line:
                return line

    def until_event(self, kind: str) -> None:
        """Read ``--json`` events until one of type ``kind``."""
        while True:
            line = self.until('"type":')
            if json.loads(line)["type"] == kind:
                return

    def rest(self) -> list[str]:
        """Every line read, once stdout has ended."""
        while (line := self._lines.get(timeout=self._bound)) is not None:
            self.seen.append(line)
        return list(self.seen)


def cli_env(home: Path, **extra: str) -> dict[str, str]:
    """An environment of the test's own: HOME and the XDG directories under ``home``, no
    provider settings of the machine, no colors unless asked, the made-up key."""
    keep = ("PATH", "LANG", "LC_ALL", "TMPDIR", "SYSTEMROOT")
    env = {name: os.environ[name] for name in keep if name in os.environ}
    env.update(
        HOME=str(home),
        XDG_STATE_HOME=str(home / "state"),
        XDG_CONFIG_HOME=str(home / "config"),
        TERM="dumb",
        NO_COLOR="1",
        PYTHONUNBUFFERED="1",
        CLI_TEST_KEY=KEY,
    )
    env.update(extra)
    return env


def run_cli(
    args: list[str], env: dict[str, str], *, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """``ARGS`` (``[EFFECTAGENT, ...]`` or another program) to its end, stdin empty, its output
    captured as text; the exit status is the test's to judge."""
    return subprocess.run(
        args,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def spawn(args: list[str], env: dict[str, str], *, timeout: float = 20) -> pexpect.spawn[str]:
    """``effectagent ARGS`` in a pseudo-terminal (no echo of what the test types)."""
    child = pexpect.spawn(
        EFFECTAGENT,
        args,
        env=env,
        encoding="utf-8",
        timeout=timeout,
        dimensions=(40, 200),
        echo=False,
    )
    # pexpect's courtesy pauses (before each send, after closing) only slow the tests: each
    # test waits for what the command prints, and closes only a process that has ended.
    child.delaybeforesend = None
    child.delayafterclose = 0.0
    child.delayafterterminate = 0.0
    return child


def terminal_screen(
    transcript: str, directory: Path, *, size: tuple[int, int] = (200, 40), styles: bool = False
) -> str:
    """What a terminal shows after receiving ``transcript`` (bytes as the command wrote them):
    it is written to a tmux pane of ``size`` (columns, rows) on a tmux server of the test's own
    (its socket in ``directory``), and the pane's text is read back (``capture-pane``). No
    waiting on time: the pane signals once it has written the transcript. With ``styles``, each
    row keeps its colours and styles as SGR sequences (``capture-pane -e``)."""
    assert TMUX is not None, "tmux is missing: `make sysdeps` installs it"
    socket = str(directory / "tmux.sock")
    shown = directory / "transcript.bin"
    shown.write_text(transcript, encoding="utf-8")
    tmux = [TMUX, "-S", socket, "-f", "/dev/null"]
    columns, rows = size
    pane = f"cat {shown}; {TMUX} -S {socket} wait-for -S shown; {TMUX} -S {socket} wait-for gone"
    env = {**os.environ, "TERM": "xterm"}
    subprocess.run(
        [*tmux, "new-session", "-d", "-x", str(columns), "-y", str(rows), pane],
        check=True,
        env=env,
        timeout=30,
    )
    try:
        subprocess.run([*tmux, "wait-for", "shown"], check=True, timeout=30)
        return subprocess.run(
            [*tmux, "capture-pane", "-p", *(["-e"] if styles else [])],
            check=True,
            capture_output=True,
            text=True,
            timeout=30,
        ).stdout
    finally:
        subprocess.run([*tmux, "kill-server"], check=False, timeout=30)
