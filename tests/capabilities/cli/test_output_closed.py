"""Standard output that cannot be written — ``effectagent run … | head -c 10``, a closed
descriptor, a full disk — stops the command with a sentence on stderr and status 1, never a
traceback; standard error that cannot be written is not a reason to fail."""

from __future__ import annotations

import io
import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from capabilities.cli._console import Console, OutputClosed, Text
from tests.providers.replay import Reply
from tests.providers.wire import ChatWire

from .support import EFFECTAGENT, ServerThread, cli_env, serve
from .test_cli import args


@pytest.fixture
def server() -> Iterator[ServerThread]:
    with serve() as running:
        yield running


def test_a_reader_that_goes_away_stops_the_run_in_a_sentence(
    server: ServerThread, tmp_path: Path
) -> None:
    server.script(Reply.sse(ChatWire().text("A long answer, ", "in pieces.")))
    proc = subprocess.Popen(
        [EFFECTAGENT, *args(server, "run", "Hi")],
        env=cli_env(tmp_path),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    proc.stdout.close()  # `| head -c 0`: the reader is gone before anything is written
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 1, err
    assert "effectagent: stopped: standard output was closed by its reader (a broken pipe)" in err
    assert "Traceback" not in err
    assert "Exception ignored" not in err


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_a_full_disk_stops_the_run_in_a_sentence(server: ServerThread, tmp_path: Path) -> None:
    server.script(Reply.sse(ChatWire().text("Yes.")))
    with open("/dev/full", "w") as full:
        done = subprocess.run(
            [EFFECTAGENT, *args(server, "run", "Hi", "--json")],
            env=cli_env(tmp_path),
            stdin=subprocess.DEVNULL,
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
            check=False,
        )
    assert done.returncode == 1, done.stderr
    assert "effectagent: stopped: standard output cannot be written (No space left on" in (
        done.stderr
    )
    assert "Traceback" not in done.stderr


class _Broken(io.StringIO):
    def write(self, text: str) -> int:
        raise BrokenPipeError(32, "Broken pipe")


def test_the_console_raises_once_for_standard_output_and_never_for_standard_error() -> None:
    out, err = _Broken(), io.StringIO()
    console = Console(out, err)
    with pytest.raises(OutputClosed, match="closed by its reader"):
        console.out.write(Text("answer"))
    console.out.line("dropped, not raised again")
    console.err.line("said")
    assert err.getvalue() == "said\n"
    quiet = Console(io.StringIO(), _Broken())
    quiet.err.line("a note nobody reads")  # dropped: standard error's failure is no failure
    quiet.out.line("the answer")
    closed = io.StringIO()
    closed.close()
    with pytest.raises(OutputClosed, match="standard output is closed"):
        Console(closed).out.line("x")


def test_an_encoding_that_lacks_a_character_is_no_closed_output(
    server: ServerThread, tmp_path: Path
) -> None:
    """A locale that is not UTF-8 (here ASCII): the answer's other characters are written as
    escapes, the run completes, and each ``--json`` line still parses to what the model sent."""
    answer = "café ☃ 🎉"
    server.script(Reply.sse(ChatWire().text(answer)), Reply.sse(ChatWire().text(answer)))
    env = cli_env(tmp_path, PYTHONIOENCODING="ascii")
    done = subprocess.run(
        [EFFECTAGENT, *args(server, "run", "Hi")],
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.decode("ascii").strip() == "caf\\u00e9 \\u2603 \\ud83c\\udf89"
    done = subprocess.run(
        [EFFECTAGENT, *args(server, "run", "Hi", "--json")],
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    events = [json.loads(line) for line in done.stdout.decode("ascii").splitlines()]
    assert [e["text"] for e in events if e.get("type") == "RunCompleted"] == [answer]


def test_the_console_escapes_what_the_stream_cannot_encode() -> None:
    raw = io.BytesIO()
    out = io.TextIOWrapper(raw, encoding="latin-1", write_through=True)
    Console(out).out.write(Text("café ☃\n"))
    assert raw.getvalue() == "café \\u2603\n".encode("latin-1")
