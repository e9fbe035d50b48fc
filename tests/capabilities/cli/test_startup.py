"""Start-up: the chat's prompt takes input before the provider's SDK is even imported (the SDK
loads in the background while the person types). Here the SDK's import is held at a gate the
test opens — no timing is measured: what is asserted is the order."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.providers.replay import Reply
from tests.providers.wire import ChatWire

from .support import ServerThread, cli_env, serve, spawn
from .test_cli import args
from .test_line_editor import ENTER, end

#: A package named ``openai`` first on the path: its import waits until the gate (a FIFO) is
#: opened for writing, then hands over to the real SDK.
GATED_SDK = """\
import importlib, os, sys

with open(os.environ["SDK_GATE"], encoding="utf-8") as gate:  # blocks until the test opens it
    gate.read()
sys.path.remove(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
del sys.modules["openai"]
sys.modules["openai"] = importlib.import_module("openai")
"""


@pytest.fixture
def server() -> Iterator[ServerThread]:
    with serve() as running:
        yield running


def test_the_prompt_takes_a_message_while_the_sdk_is_still_loading(
    server: ServerThread, tmp_path: Path
) -> None:
    gated = tmp_path / "gated"
    (gated / "openai").mkdir(parents=True)
    (gated / "openai" / "__init__.py").write_text(GATED_SDK)
    gate = tmp_path / "gate"
    os.mkfifo(gate)
    server.script(Reply.sse(ChatWire().text("Hi there.")))
    env = cli_env(
        tmp_path,
        TERM="xterm",
        PROMPT_TOOLKIT_NO_CPR="1",
        PYTHONPATH=str(gated),
        SDK_GATE=str(gate),
    )
    child = spawn(args(server, "chat"), env)
    child.expect_exact("you>")  # up while the SDK's import waits at the gate
    child.send("Hello?" + ENTER)  # typed, and taken, before the model can be opened
    child.expect_exact("session chat-")  # the rest opened meanwhile
    assert server.requests() == []
    with open(gate, "w", encoding="utf-8") as opening:  # the SDK may load now
        opening.write("go")
    child.expect_exact("Hi there.")
    child.expect_exact("you>")
    end(child)
    assert server.requests()[0].json()["messages"][-1] == {"role": "user", "content": "Hello?"}


#: Ctrl-C (a real SIGINT) delivered while the command imports its engine: the module that
#: holds it is about to load when the signal is raised.
INTERRUPTED_WHILE_LOADING = """\
import importlib.abc, signal, sys

class CtrlC(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name == "capabilities.cli._main":
            signal.raise_signal(signal.SIGINT)
        return None

sys.meta_path.insert(0, CtrlC())
from capabilities.cli import main
sys.exit(main(["run", "--model", "openai-compatible:m", "--base-url", "http://127.0.0.1:9/v1",
               "Hi"]))
"""


def test_ctrl_c_while_the_command_loads_is_an_interruption_not_a_traceback(
    tmp_path: Path,
) -> None:
    """In the second or so the engine takes to import, Ctrl-C ends the command as it does
    later: `effectagent: interrupted`, exit status 130 — never a KeyboardInterrupt traceback."""
    done = subprocess.run(
        [sys.executable, "-c", INTERRUPTED_WHILE_LOADING],
        env=cli_env(tmp_path),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=Path(__file__).resolve().parents[3],
    )
    assert done.returncode == 130, done.stderr
    assert done.stderr == "effectagent: interrupted\n"
