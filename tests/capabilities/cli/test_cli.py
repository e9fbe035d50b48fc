"""The ``effectagent`` command, driven as a person would: a real process in a pseudo-terminal
(pexpect), talking to the provider replay server (``openai-compatible`` at 127.0.0.1), with its
own HOME, state and config directories under the test's tmp dir.

pexpect waits for what the command prints (``expect`` with a timeout); no test sleeps to wait for
a state. The shell tool runs in the real bubblewrap sandbox, over a workspace each test makes.
"""

from __future__ import annotations

import fcntl
import io
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pexpect
import pytest

from capabilities.cli import ConfigError, load_config, main
from capabilities.cli._config import CompactionConfig, Price
from capabilities.cli._main import DATABASE, private_directory
from sandbox import SandboxLimits, SandboxRequest
from sandbox._command import InvalidRequest
from sandbox._command_checks import validate_request
from tests.capabilities.skills.helpers import write_skill
from tests.providers.replay import Reply
from tests.providers.wire import ChatWire

from .support import EFFECTAGENT, KEY, ServerThread, cli_env, run_cli, serve, spawn

MODEL = ["--model", "openai-compatible:test-model", "--api-key-env", "CLI_TEST_KEY"]
PROMPT = "you> "
ASK = r"\[a\]lways for this session: "


@pytest.fixture
def server() -> Iterator[ServerThread]:
    with serve() as running:
        yield running


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path


@pytest.fixture
def isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """For the tests that call ``main`` in this process: the environment a spawned command
    would get (HOME and XDG directories under tmp_path, no provider keys)."""
    for name in list(os.environ):
        if name.startswith(("OPENAI_", "ANTHROPIC_", "EFFECTAGENT_", "XDG_")):
            monkeypatch.delenv(name)
    for name, value in cli_env(tmp_path).items():
        monkeypatch.setenv(name, value)
    return tmp_path


@pytest.fixture
def workspace() -> Iterator[Path]:
    """A workspace the sandbox's workload user can reach and write (directly under the temp
    dir: when the tests run as root the workload runs as nobody)."""
    directory = Path(tempfile.mkdtemp(prefix="effectagent-cli-"))
    directory.chmod(0o777)
    (directory / "readme.txt").write_text("hello from the workspace\n")
    (directory / "readme.txt").chmod(0o644)
    try:
        yield directory
    finally:
        shutil.rmtree(directory)


def args(server: ServerThread, *rest: str) -> list[str]:
    return [*rest[:1], *MODEL, "--base-url", server.url, *rest[1:]]


def write_config(home: Path, text: str) -> Path:
    path = home / "config" / "effectagent" / "config.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def shell_config(home: Path, workspace: Path) -> None:
    write_config(home, f'[shell]\nworkspace = "{workspace}"\nwrite = true\n')


def finish(child: pexpect.spawn[str]) -> tuple[str, int]:
    """Everything the process still prints, and its exit status."""
    child.expect(pexpect.EOF)
    output = child.before or ""
    child.close()
    assert child.exitstatus is not None, f"ended by signal {child.signalstatus}"
    return output, child.exitstatus


def open_chat(server: ServerThread, home: Path) -> pexpect.spawn[str]:
    """``effectagent chat`` against ``server``, at its first prompt."""
    child = spawn(args(server, "chat"), cli_env(home))
    child.expect(PROMPT)
    return child


def end_chat(child: pexpect.spawn[str]) -> None:
    """Ctrl-D: the session ends with status 0."""
    child.sendeof()
    _, status = finish(child)
    assert status == 0


def messages(request_body: dict[str, Any]) -> list[tuple[str, str]]:
    """(role, text) of each message the model was sent."""
    shown = []
    for message in request_body["messages"]:
        content = message.get("content")
        if isinstance(content, list):
            content = "".join(part.get("text", "") for part in content)
        shown.append((message["role"], content or json.dumps(message.get("tool_calls"))))
    return shown


# ---- effectagent run ------------------------------------------------------------------------------


def test_run_prints_the_answer_and_exits_0(server: ServerThread, home: Path) -> None:
    wire = ChatWire()
    server.script(Reply.sse(wire.text("Oslo is ", "4 °C.", usage=wire.usage(12, 5, cached=8))))
    child = spawn(args(server, "run", "How warm is Oslo?"), cli_env(home))
    output, status = finish(child)
    assert status == 0
    lines = output.splitlines()
    assert lines[0] == "Oslo is 4 °C."
    assert lines[1] == "usage: input 12 · output 5 · cache read 8 · cache write 0"
    (request,) = server.requests()
    assert messages(request.json())[-1] == ("user", "How warm is Oslo?")
    assert request.headers["authorization"] == f"Bearer {KEY}"  # the key went to the provider…
    assert KEY not in output  # …and nowhere else
    # The sessions are the user's alone: the state directory (and the one it was made in).
    for made in (home / "state", home / "state" / "effectagent"):
        assert stat.S_IMODE(made.stat().st_mode) == 0o700, made


def test_run_json_prints_one_object_per_event(server: ServerThread, home: Path) -> None:
    wire = ChatWire()
    server.script(Reply.sse(wire.text("Four", " degrees.")))
    child = spawn(args(server, "run", "How warm?", "--json"), cli_env(home))
    output, status = finish(child)
    assert status == 0
    *lines, saved = output.splitlines()  # the pty merges stderr, which names the new session
    assert saved.startswith("session run-")
    events = [json.loads(line) for line in lines]
    types = [event["type"] for event in events]
    assert types[0] == "RunStarted"
    assert types[-1] == "RunCompleted"
    assert "".join(e["text"] for e in events if e["type"] == "TextDelta") == "Four degrees."
    assert events[-1]["text"] == "Four degrees."
    assert events[-1]["usage"]["output_tokens"] == 2
    assert [e["seq"] for e in events] == sorted(e["seq"] for e in events)


def test_a_failed_run_exits_1_and_says_why(server: ServerThread, home: Path) -> None:
    server.script(Reply.json(400, {"error": {"message": "bad request: no such model"}}))
    child = spawn(args(server, "run", "Hello?"), cli_env(home))
    output, status = finish(child)
    assert status == 1
    (failed,) = [line for line in output.splitlines() if line.startswith("✗ run failed")]
    # A sentence, never a repr: no class name, no field=value.
    assert failed.startswith("✗ run failed: the model call failed (InvalidModelRequest): ")
    assert failed.endswith("answered HTTP 400: bad request: no such model")
    assert "ModelFailed" not in output
    assert "=" not in failed


def test_a_database_in_use_is_said_in_a_sentence(
    isolated: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Not ``DatabaseInUse: DatabaseInUse(path=...)``: what happened and what to do. (Processes
    of this version share the file; one of an older version holds its lock file exclusively,
    as here, and the command gives up once the storage's bounded wait is spent.)"""
    path = isolated / "state" / "effectagent" / DATABASE
    path.parent.mkdir(parents=True)
    with open(f"{path}.lock", "wb") as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
        command = ["run", "Hi", *MODEL, "--base-url", "http://127.0.0.1:9/v1"]
        status = main(command)
    assert status == 3
    said = capsys.readouterr().err
    assert said.startswith(
        f"effectagent: cannot start: the session database {path} is held for itself alone by "
        "another process"
    ), said
    assert said.count("\n") == 1
    assert "DatabaseInUse" not in said


def test_a_crash_shows_its_traceback_escaped(
    isolated: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(args: object, environ: object, config: object) -> Path:
        raise RuntimeError("a bug \x1b]0;pwned\x07")

    monkeypatch.setattr("capabilities.cli._stored.store_of", broken)
    assert main(["sessions"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("Traceback (most recent call last):\n")
    assert err.endswith("RuntimeError: a bug \\x1b]0;pwned\\x07\n")


@pytest.mark.parametrize("variable", [None, "", "   "])
def test_without_a_model_it_says_how_to_configure_one(home: Path, variable: str | None) -> None:
    # A blank EFFECTAGENT_MODEL is as unset (spaces read "unknown model string ''").
    extra = {} if variable is None else {"EFFECTAGENT_MODEL": variable}
    child = spawn(["run", "Hello?"], cli_env(home, **extra))
    output, status = finish(child)
    assert status == 2
    assert "no model configured" in output
    assert "--model" in output
    assert "EFFECTAGENT_MODEL" in output
    assert "`make demo` in a checkout of the project" in output  # no Makefile in an install
    assert not (home / "state").exists()  # nothing made up, nothing stored


def test_a_model_string_naming_no_provider_is_a_usage_error(
    isolated: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["run", "Hello?", "--model", "gpt-4.1"]) == 2
    assert "unknown model string 'gpt-4.1'" in capsys.readouterr().err


def test_openai_compatible_needs_a_base_url(
    isolated: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["run", "Hello?", "--model", "openai-compatible:qwen3"]) == 2
    assert "'openai-compatible:qwen3' needs --base-url URL" in capsys.readouterr().err


def test_a_missing_api_key_is_named_and_exits_3(
    isolated: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["run", "Hello?", "--model", "anthropic:claude-sonnet-4-5"]) == 3
    err = capsys.readouterr().err
    assert "no API key for Anthropic: set the ANTHROPIC_API_KEY environment variable" in err
    assert "--api-key-env" in err


@pytest.mark.parametrize(
    ("config", "argv", "environ", "message"),
    [
        (
            "[model]\nname = 'mistral:7b'\n",
            [],
            {},
            "{config}: [model] name: unknown model string 'mistral:7b'",
        ),
        ("", [], {"EFFECTAGENT_MODEL": "mistral:7b"}, "EFFECTAGENT_MODEL: unknown model string"),
        ("", ["--model", "mistral:7b"], {}, "--model: unknown model string 'mistral:7b'"),
        (
            "",
            ["--model", "openai-compatible:q", "--base-url", "127.0.0.1:8000/v1"],
            {},
            "effectagent: --base-url must be an http:// or https:// URL with a host",
        ),
        (
            "",
            ["--model", "openai:gpt-4.1", "--api-key-env", "MY-KEY"],
            {"OPENAI_API_KEY": KEY},
            "effectagent: --api-key-env must name an environment variable (letters, digits and "
            "_), not hold the key (the value given is not shown)",
        ),
    ],
)
def test_a_bad_model_setting_is_named_where_it_was_given(
    isolated: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    config: str,
    argv: list[str],
    environ: dict[str, str],
    message: str,
) -> None:
    """A model string, base URL or key variable that cannot be used is a usage error (status 2)
    naming the flag, the variable or the config file and key it came from."""
    path = isolated / "config" / "effectagent" / "config.toml"
    if config:
        path.parent.mkdir(parents=True)
        path.write_text(config)
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    assert main(["run", "Hello?", *argv]) == 2
    err = capsys.readouterr().err
    assert message.format(config=path) in err, err
    assert KEY not in err


def test_the_model_comes_from_effectagent_model(server: ServerThread, home: Path) -> None:
    wire = ChatWire()
    server.script(Reply.sse(wire.text("Yes.")))
    env = cli_env(home, EFFECTAGENT_MODEL="openai-compatible:from-env")
    child = spawn(["run", "Hi", "--base-url", server.url, "--api-key-env", "CLI_TEST_KEY"], env)
    output, status = finish(child)
    assert (status, output.splitlines()[0]) == (0, "Yes.")
    assert server.requests()[0].json()["model"] == "from-env"


def test_ctrl_c_ends_run_with_the_interrupted_status(
    server: ServerThread, home: Path, workspace: Path
) -> None:
    shell_config(home, workspace)
    wire = ChatWire()
    server.script(Reply.sse(wire.calls(("call_1", "shell", '{"command": "sleep 60"}'))))
    child = spawn(args(server, "run", "Wait a minute."), cli_env(home))
    child.expect('▸ shell {"command":"sleep 60"}')
    child.sendintr()
    child.expect("■ interrupted")
    output, status = finish(child)
    assert status == 130
    assert output.strip().startswith("usage: input 20")


def test_run_without_a_terminal_denies_what_needs_approval(
    server: ServerThread, home: Path, workspace: Path
) -> None:
    """Nobody can be asked when the input is not a terminal: the write is denied, saying so."""
    shell_config(home, workspace)
    wire = ChatWire()
    server.script(
        Reply.sse(wire.calls(("call_1", "shell_write", '{"command": "touch x"}'))),
        Reply.sse(wire.text("Could not write.")),
    )
    done = run_cli([EFFECTAGENT, *args(server, "run", "Write x.")], cli_env(home), timeout=30)
    assert done.returncode == 0
    assert done.stdout == "Could not write.\n"
    assert "rejected: approval denied: nobody to ask: the input is not a terminal" in done.stderr
    assert not (workspace / "x").exists()


# ---- effectagent chat -----------------------------------------------------------------------------


def test_chat_asks_before_a_write_and_runs_it_when_approved(
    server: ServerThread, home: Path, workspace: Path
) -> None:
    shell_config(home, workspace)
    wire = ChatWire()
    command = "echo approved > note.txt && cat note.txt"
    server.script(
        Reply.sse(wire.calls(("call_1", "shell_write", json.dumps({"command": command})))),
        Reply.sse(wire.text("Wrote note.txt.")),
    )
    child = open_chat(server, home)
    child.sendline("Write a note.")
    child.expect("shell_write waits for approval")
    child.expect(ASK)
    assert not (workspace / "note.txt").exists()  # nothing ran before the answer
    child.sendline("y")
    child.expect("✓ shell_write")
    child.expect("Wrote note.txt.")
    child.expect("usage: input ")
    child.expect(PROMPT)
    end_chat(child)
    assert (workspace / "note.txt").read_text() == "approved\n"
    tool_message = server.requests()[1].json()["messages"][-1]
    assert tool_message["role"] == "tool"
    assert json.loads(tool_message["content"])["stdout"] == "approved\n"


def test_chat_denied_write_never_runs_and_the_model_reads_why(
    server: ServerThread, home: Path, workspace: Path
) -> None:
    shell_config(home, workspace)
    wire = ChatWire()
    command = "echo denied > note.txt"
    server.script(
        Reply.sse(wire.calls(("call_1", "shell_write", json.dumps({"command": command})))),
        Reply.sse(wire.text("I was not allowed to.")),
    )
    child = open_chat(server, home)
    child.sendline("Write a note.")
    child.expect(ASK)
    child.sendline("n")
    child.expect("✗ shell_write")
    child.expect("rejected: approval denied: denied by the user")
    child.expect("I was not allowed to.")
    child.expect(PROMPT)
    end_chat(child)
    assert not (workspace / "note.txt").exists()
    tool_message = server.requests()[1].json()["messages"][-1]
    assert tool_message["role"] == "tool"
    assert "approval denied: denied by the user" in tool_message["content"]


def test_parallel_approvals_are_asked_one_after_the_other(
    server: ServerThread, home: Path, workspace: Path
) -> None:
    shell_config(home, workspace)
    wire = ChatWire()
    server.script(
        Reply.sse(
            wire.calls(
                ("call_1", "shell_write", '{"command": "touch first"}'),
                ("call_2", "shell_write", '{"command": "touch second"}'),
            )
        ),
        Reply.sse(wire.text("One of two.")),
    )
    child = open_chat(server, home)
    child.sendline("Make two files.")
    child.expect(ASK)
    child.sendline("y")
    child.expect(ASK)  # the second call's prompt, once the first is answered
    child.sendline("n")
    child.expect("One of two.")
    child.expect(PROMPT)
    end_chat(child)
    made = sorted(p.name for p in workspace.iterdir() if p.name != "readme.txt")
    assert len(made) == 1  # whichever call was asked first ran; the other was denied
    tool_messages = [m for m in server.requests()[1].json()["messages"] if m["role"] == "tool"]
    assert len(tool_messages) == 2
    assert sum("approval denied: denied by the user" in m["content"] for m in tool_messages) == 1


def test_always_approves_the_tool_for_the_rest_of_the_session(
    server: ServerThread, home: Path, workspace: Path
) -> None:
    shell_config(home, workspace)
    wire = ChatWire()
    server.script(
        Reply.sse(wire.calls(("call_1", "shell_write", '{"command": "touch one"}'))),
        Reply.sse(wire.calls(("call_2", "shell_write", '{"command": "touch two"}'))),
        Reply.sse(wire.text("Both made.")),
        Reply.sse(wire.calls(("call_3", "shell_write", '{"command": "touch three"}'))),
        Reply.sse(wire.text("Third made.")),
    )
    child = open_chat(server, home)
    child.sendline("Make two files.")
    child.expect(ASK)
    after = io.StringIO()
    child.logfile_read = after  # everything shown after the answer
    child.sendline("a")
    child.expect("Both made.")
    child.expect(PROMPT)
    child.sendline("And a third.")
    child.expect("Third made.")
    child.expect(PROMPT)
    end_chat(child)
    assert after.getvalue().count("✓ shell_write") == 3
    assert "allow shell_write?" not in after.getvalue()
    assert sorted(p.name for p in workspace.iterdir()) == ["one", "readme.txt", "three", "two"]


def test_ctrl_c_interrupts_the_tool_call_and_the_session_goes_on(
    server: ServerThread, home: Path, workspace: Path
) -> None:
    shell_config(home, workspace)
    wire = ChatWire()
    server.script(
        Reply.sse(wire.calls(("call_1", "shell", json.dumps({"command": "sleep 60"})))),
        Reply.sse(wire.text("Still here.")),
    )
    child = spawn(args(server, "chat", "--session", "long"), cli_env(home))
    child.expect(PROMPT)
    child.sendline("Wait a minute.")
    child.expect('▸ shell {"command":"sleep 60"}')
    child.sendintr()  # Ctrl-C
    child.expect("■ interrupted")
    child.expect("usage: input ")
    child.expect(PROMPT, timeout=10)  # well before the command's minute is up
    child.sendline("Are you there?")
    child.expect("Still here.")
    child.expect(PROMPT)
    end_chat(child)
    _, second = server.requests()
    # The second run continues the conversation: the first prompt and the interrupted call are
    # in it (the call settled as interrupted), then the new prompt.
    sent = messages(second.json())
    assert ("user", "Wait a minute.") in sent
    assert sent[-1] == ("user", "Are you there?")
    assert any(role == "tool" for role, _ in sent)


def test_ctrl_c_at_an_approval_prompt_withdraws_it(
    server: ServerThread, home: Path, workspace: Path
) -> None:
    shell_config(home, workspace)
    wire = ChatWire()
    server.script(
        Reply.sse(wire.calls(("call_1", "shell_write", '{"command": "touch x"}'))),
        Reply.sse(wire.text("Nothing written.")),
    )
    child = open_chat(server, home)
    child.sendline("Touch x.")
    child.expect(ASK)
    child.sendintr()
    child.expect("approval for shell_write withdrawn")
    child.expect("■ interrupted")
    child.expect(PROMPT)
    child.sendline("y")  # a late answer is a new prompt now, never the withdrawn approval's
    child.expect("Nothing written.")
    child.expect(PROMPT)
    end_chat(child)
    assert not (workspace / "x").exists()
    assert messages(server.requests()[1].json())[-1] == ("user", "y")


def test_text_typed_while_a_run_goes_steers_it(
    server: ServerThread, home: Path, workspace: Path
) -> None:
    shell_config(home, workspace)
    wire = ChatWire()
    # The call waits for a file this test makes once the steering is taken: the run is still
    # going when the line is typed, however slow the machine.
    waiting = "until [ -e go ]; do sleep 0.05; done; ls"
    server.script(
        Reply.sse(wire.calls(("call_1", "shell", json.dumps({"command": waiting})))),
        Reply.sse(wire.text("Voilà.")),
    )
    child = open_chat(server, home)
    child.sendline("List the files.")
    child.expect("▸ shell")
    child.sendline("Answer in French.")
    child.expect("steering: taken at the next turn")
    (workspace / "go").touch()
    child.expect("Voilà.")
    child.expect(PROMPT)
    child.sendeof()
    finish(child)
    sent = messages(server.requests()[1].json())
    assert sent[-1] == ("user", "Answer in French.")


def test_a_command_typed_while_a_run_goes_is_never_steering(
    server: ServerThread, home: Path, workspace: Path
) -> None:
    shell_config(home, workspace)
    wire = ChatWire()
    # The call waits for a file this test makes once it has typed its lines: the run goes on
    # until then, however slow the machine.
    waiting = json.dumps({"command": "until [ -e go ]; do sleep 0.05; done; ls"})
    server.script(
        Reply.sse(wire.calls(("call_1", "shell", waiting))),
        Reply.sse(wire.text("Done.")),
    )
    child = open_chat(server, home)
    child.sendline("List the files.")
    child.expect("▸ shell")
    child.sendline("/model openai-compatible:other")
    child.expect("/model waits for the prompt")
    child.sendline("/usage")
    child.expect("usage of this chat")
    child.sendline("/bogus")
    child.expect("there is no command /bogus")
    child.sendline("//etc is where it lives")
    child.expect("steering: taken at the next turn")
    (workspace / "go").touch()
    child.expect("Done.")
    child.expect(PROMPT)
    child.sendeof()
    finish(child)
    sent = messages(server.requests()[1].json())
    assert sent[-1] == ("user", "/etc is where it lives")
    assert not any(text.startswith(("/model", "/usage", "/bogus")) for _, text in sent)
    assert server.requests()[1].json()["model"] == server.requests()[0].json()["model"]


# ---- sessions -------------------------------------------------------------------------------------


def test_a_session_resumed_in_a_new_process_continues_its_conversation(
    server: ServerThread, home: Path
) -> None:
    wire = ChatWire()
    server.script(Reply.sse(wire.text("Hello, Ann.")), Reply.sse(wire.text("You are Ann.")))
    env = cli_env(home)
    child = spawn(args(server, "run", "I am Ann.", "--session", "intro", "--json"), env)
    output, status = finish(child)
    assert status == 0
    conversation = json.loads(output.splitlines()[0])["conversation_id"]

    child = spawn(args(server, "chat", "--session", "intro"), env)
    child.expect("session intro resumed")
    child.expect(PROMPT)
    child.sendline("Who am I?")
    child.expect("You are Ann.")
    child.expect(PROMPT)
    child.sendeof()
    finish(child)
    sent = messages(server.requests()[1].json())
    assert sent[1:] == [
        ("user", "I am Ann."),
        ("assistant", "Hello, Ann."),
        ("user", "Who am I?"),
    ]

    child = spawn(["sessions"], env)  # on a terminal: a table drawn with rich
    output, status = finish(child)
    assert status == 0
    header, rule, row = output.splitlines()
    assert header.split() == ["NAME", "CONVERSATION", "UPDATED", "RUNS"]
    assert set(rule) == {"─"}
    name, listed, _day, _time, runs = row.split()
    assert (name, listed, runs) == ("intro", conversation, "2")
    assert row.endswith(" 2")  # the runs, aligned to the right
    listed_plain = subprocess.run(  # not a terminal: plain columns, as before
        [EFFECTAGENT, "sessions"], env=env, capture_output=True, text=True, timeout=60, check=True
    ).stdout.splitlines()
    assert [line.split() for line in listed_plain] == [
        ["NAME", "CONVERSATION", "UPDATED", "RUNS"],
        ["intro", conversation, _day, _time, "2"],
    ]
    assert "\x1b" not in "".join(listed_plain)
    assert "─" not in "".join(listed_plain)


def test_sessions_with_none_says_so(isolated: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sessions"]) == 0
    assert capsys.readouterr().out.startswith("no sessions yet")


def test_state_dir_overrides_the_xdg_default(server: ServerThread, home: Path) -> None:
    wire = ChatWire()
    server.script(Reply.sse(wire.text("Noted.")))
    elsewhere = home / "elsewhere"
    child = spawn(
        args(server, "run", "Note this.", "--session", "s", "--state-dir", str(elsewhere)),
        cli_env(home),
    )
    assert finish(child)[1] == 0
    assert (elsewhere / "effectagent.db").is_file()
    assert stat.S_IMODE(elsewhere.stat().st_mode) == 0o700
    assert not (home / "state").exists()
    output, _ = finish(spawn(["sessions", "--state-dir", str(elsewhere)], cli_env(home)))
    assert output.splitlines()[2].startswith("s ")  # under the table's header and its rule


def test_the_state_directory_is_made_for_its_owner_alone(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        fresh = tmp_path / "a" / "b"
        private_directory(fresh, tighten=False)
        assert [stat.S_IMODE(p.stat().st_mode) for p in (tmp_path / "a", fresh)] == [0o700] * 2
        ours = tmp_path / "ours"  # the default one, made open by an older version
        ours.mkdir(0o755)
        private_directory(ours, tighten=True)
        assert stat.S_IMODE(ours.stat().st_mode) == 0o700
        given = tmp_path / "given"  # one the user named and made: theirs to set
        given.mkdir(0o755)
        private_directory(given, tighten=False)
        assert stat.S_IMODE(given.stat().st_mode) == 0o755
    finally:
        os.umask(old)


# ---- configuration --------------------------------------------------------------------------------


def test_an_unknown_config_key_is_refused_naming_the_key_and_the_file(home: Path) -> None:
    path = write_config(home, "[shell]\nworkspace = '.'\nwritable = true\n")
    child = spawn(["run", "Hi", "--model", "openai:gpt-4.1"], cli_env(home))
    output, status = finish(child)
    assert status == 2
    assert str(path) in output
    assert "unknown key 'writable' in [shell]" in output


def test_a_chat_that_cannot_start_says_why_in_one_sentence_and_exits_3(tmp_path: Path) -> None:
    """``chat`` starts its model inside a nursery: the refusal used to come out of it wrapped in
    an exception group, shown as a traceback with exit status 1."""
    env = {k: v for k, v in cli_env(tmp_path).items() if not k.endswith("_API_KEY")}
    done = run_cli([EFFECTAGENT, "chat", "--model", "openai:gpt-4o"], env)
    assert done.returncode == 3, done.stderr
    assert "Traceback" not in done.stderr
    assert "effectagent: cannot start: no API key for OpenAI" in done.stderr


def test_a_short_key_of_another_provider_does_not_stop_a_chat(tmp_path: Path) -> None:
    """A chat keeps every provider's key out of what it shows: a value too short to be a key
    (which could not be kept out) in another provider's variable stopped it with exit 3."""
    env = cli_env(tmp_path, OPENAI_API_KEY="q7Z", GEMINI_API_KEY="x")
    done = run_cli([EFFECTAGENT, "chat", *MODEL, "--base-url", "http://127.0.0.1:9/v1"], env)
    assert done.returncode == 0, done.stderr
    assert "session chat-" in done.stdout
    listed = subprocess.run(
        [EFFECTAGENT, "sessions"], env=env, capture_output=True, text=True, timeout=60, check=True
    )
    assert "no sessions yet" in listed.stdout  # a chat that said nothing keeps no session


def test_a_short_key_of_the_model_in_use_is_refused_naming_its_variable(
    isolated: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "q7Z")
    assert main(["run", "Hi", "--model", "anthropic:claude-sonnet-4-5"]) == 2
    err = capsys.readouterr().err
    assert "ANTHROPIC_API_KEY" in err
    assert "too short" in err
    assert "q7Z" not in err
    assert not (isolated / "state").exists()  # refused before anything opened


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[shell]\ntimeout = 'long'\n", "[shell] timeout must be a number, got a string"),
        ("[shell]\nwrite = 1\n", "[shell] write must be true or false, got an integer"),
        ("[agent]\nmax_turns = 0\n", "[agent] max_turns must be a finite positive number, got 0"),
        ("[agent]\nmax_duration = nan\n", "[agent] max_duration must be a finite positive"),
        ("[shell]\ntimeout = inf\n", "[shell] timeout must be a finite positive number, got inf"),
        (
            "[shell]\ntimeout = 86401\n",
            "[shell] timeout must be at most 86400 seconds (a day: the sandbox's longest), "
            "got 86401",
        ),
        ("[agent]\nmax_turns = 2.5\n", "[agent] max_turns must be an integer, got a number"),
        ("[tools]\n", "unknown key 'tools' in the top level"),
        ("[[mcp]]\nname = 'a'\n", "[[mcp]] #1 (a) needs exactly one of command and url"),
        (
            "[[mcp]]\nname = 'a'\ncommand = 'x'\nargs = [1]\n",
            "[[mcp]] #1 args[0] must be a string, got an integer",
        ),
        ("[code_mode]\nexecutor = 'v8'\n", "[code_mode] executor must be one of 'deno'"),
        ("[skills]\npaths = ['missing']\n", "[skills] paths: 'missing' is not a directory"),
        ("[shell]\nworkspace = 'nowhere'\n", "is not a directory"),
        ("shell = 3\n", "[shell] must be a table, got an integer"),
        ("[model\n", "is not valid TOML"),
        (
            "[[mcp]]\nname = 'a'\ncommand = 'x'\nprefix = 'a b'\n",
            "[[mcp]] #1 prefix must be 1-32 letters, digits, '_' or '-', got 'a b'",
        ),
        (
            "[[mcp]]\nname = 'a'\ncommand = 'x'\nprefix = 3\n",
            "[[mcp]] #1 prefix must be true, false or a string, got an integer",
        ),
        (
            "[[mcp]]\nname = 'a.b'\ncommand = 'x'\n[[mcp]]\nname = 'a_b'\ncommand = 'y'\n",
            "two [[mcp]] servers prefix their tools with 'a_b'",
        ),
        ("[compaction]\nkeep_recent_tokens = 10\n", "[compaction] needs context_tokens"),
        (
            "[compaction]\ncontext_tokens = 0\n",
            "[compaction] context_tokens must be a finite positive number",
        ),
        (
            "[compaction]\ncontext_tokens = 9\nstrategy = 'drop'\n",
            "[compaction] strategy must be one of 'prune-then-summarize', 'prune-only'",
        ),
        ("[compaction]\ncontext_tokens = 9\nkeep = 1\n", "unknown key 'keep' in [compaction]"),
        ("[prices.'m:x']\ninput = 1\n", "[prices.'m:x'] needs output"),
        (
            "[prices.'m:x']\ninput = -1\noutput = 2\n",
            "[prices.'m:x'] input must be a finite number ≥ 0, got -1.0",
        ),
        (
            "[prices.'m:x']\ninput = nan\noutput = 2\n",
            "[prices.'m:x'] input must be a finite number ≥ 0, got nan",
        ),
        (
            "[prices.'m:x']\ninput = 1\noutput = 2\ncache = 1\n",
            "unknown key 'cache' in [prices.'m:x']",
        ),
        ("prices = 3\n", "[prices] must be a table, got an integer"),
        (
            "[model]\nname = 'openai-compatible:q'\nbase_url = 'ftp://h/v1'\n",
            "[model] base_url must be an http:// or https:// URL with a host",
        ),
        (
            "[model]\nbase_url = 'http://ann:pw-secret-42@/v1'\n",
            "[model] base_url must be an http:// or https:// URL with a host",
        ),
        (
            "[model]\nname = 'openai:gpt-4.1'\napi_key_env = '1BAD'\n",
            "[model] api_key_env must name an environment variable (letters, digits and _), "
            "not hold the key (the value given is not shown)",
        ),
        (
            "[[mcp]]\nname = 'a'\nurl = 'localhost:9000/mcp'\n",
            "[[mcp]] #1 url must be an http:// or https:// URL with a host",
        ),
        (  # the server would refuse it only as the tools were set up
            "[[mcp]]\nname = 'a'\nurl = 'http://h:99999/mcp'\n",
            "[[mcp]] #1 url must be an http:// or https:// URL with a host (and, if it has a "
            "port, one of digits up to 65535)",
        ),
        (
            "[model]\nbase_url = 'http://h:pw-secret-42/v1'\n",
            "[model] base_url must be an http:// or https:// URL with a host (and",
        ),
        (  # the MCP client would refuse it only as the tools were set up (status 3)
            "[[mcp]]\nname = 'a'\nurl = 'http://ann:pw-secret-42@h/mcp'\n",
            "[[mcp]] #1 url must not hold credentials (user:password@host)",
        ),
    ],
)
def test_config_errors_name_the_key(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "config.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert str(caught.value).startswith(f"{path}: ")
    assert message in str(caught.value)
    assert "pw-secret-42" not in str(caught.value)


@pytest.mark.parametrize(("timeout", "accepted"), [(86400, True), (86400.5, False)])
def test_the_shell_timeout_is_accepted_exactly_when_the_sandbox_accepts_it(
    tmp_path: Path, timeout: float, accepted: bool
) -> None:
    """The config's bound is the sandbox's own: a timeout it let through made every shell call
    fail later, the request refused by the sandbox."""
    path = tmp_path / "config.toml"
    path.write_text(f"[shell]\ntimeout = {timeout}\n")
    limits = SandboxLimits(wall_clock_seconds=timeout)
    if accepted:
        config = load_config(path)
        assert config.shell is not None
        assert config.shell.timeout == timeout
        validate_request(SandboxRequest("/bin/sh", limits=limits))
    else:
        with pytest.raises(ConfigError, match=r"\[shell\] timeout must be at most 86400 seconds"):
            load_config(path)
        with pytest.raises(InvalidRequest, match="wall_clock_seconds"):
            validate_request(SandboxRequest("/bin/sh", limits=limits))


def test_code_mode_without_a_readonly_tool_is_a_config_error(
    isolated: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_config(isolated, "[code_mode]\n")
    status = main(["run", "Hi", *MODEL, "--base-url", "http://127.0.0.1:9/v1"])
    assert status == 2
    assert f"{path}: [code_mode] has no readonly tool to offer" in capsys.readouterr().err


def test_a_full_config_loads(tmp_path: Path) -> None:
    (tmp_path / "skills").mkdir()
    path = tmp_path / "config.toml"
    path.write_text(
        """
[model]
name = "openai-compatible:qwen3"
base_url = "http://127.0.0.1:8000/v1"

[agent]
instructions = "Be brief."
max_turns = 5
max_duration = 60

[shell]
workspace = "."
write = true
timeout = 10

[code_mode]

[[mcp]]
name = "files"
command = "python"
args = ["server.py"]

[[mcp]]
name = "web"
url = "http://127.0.0.1:9000/mcp"
prefix = false

[[mcp]]
name = "trusted web"
url = "http://127.0.0.1:9001/mcp"
approval = "unless-readonly"
prefix = "tw"

[skills]
paths = ["skills"]

[compaction]
context_tokens = 100000
summary_tokens = 500

[prices."anthropic:claude-sonnet-4-5"]
input = 3.0
output = 15
cached = 0.3
"""
    )
    config = load_config(path)
    assert config.model.name == "openai-compatible:qwen3"
    assert (config.agent.max_turns, config.agent.max_duration) == (5, 60.0)
    assert config.shell is not None
    assert (config.shell.workspace, config.shell.write, config.shell.timeout) == (
        tmp_path,
        True,
        10.0,
    )
    assert config.code_mode is not None
    # A server over the network is asked about every call unless the config trusts it; tools
    # are prefixed with the server's name unless the config says otherwise.
    assert [(s.name, s.url, s.approval, s.tool_prefix) for s in config.mcp] == [
        ("files", None, "unless-readonly", "files"),
        ("web", "http://127.0.0.1:9000/mcp", "always", None),
        ("trusted web", "http://127.0.0.1:9001/mcp", "unless-readonly", "tw"),
    ]
    assert config.skills == (tmp_path / "skills",)
    assert config.compaction == CompactionConfig(100_000, 20_000, 500, "prune-then-summarize")
    assert config.prices == {"anthropic:claude-sonnet-4-5": Price(3.0, 15.0, 0.3, None)}


def test_config_flag_must_name_an_existing_file(
    isolated: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = isolated / "nope.toml"
    assert main(["run", "Hi", "--config", str(missing), "--model", "openai:x"]) == 2
    assert f"{missing}: no such configuration file" in capsys.readouterr().err


def test_config_flag_naming_a_directory_says_so(
    isolated: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--config ~/.config/effectagent`` (the directory, not the file in it) is said as such,
    not as a file that does not exist."""
    assert main(["run", "Hi", "--config", str(isolated), "--model", "openai:x"]) == 2
    err = capsys.readouterr().err
    assert f"{isolated}: is a directory, not a configuration file (a TOML file)" in err


def test_help_documents_the_exit_statuses(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["run", "--help"])
    assert exited.value.code == 0
    out = capsys.readouterr().out
    for line in ("0    the run completed", "1    the run failed", "130  the run was interrupted"):
        assert line in out


def test_help_says_the_storage_variable_overrides_the_state_dir(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`--state-dir` is set aside for a PostgreSQL storage named by the config or by
    $EFFECTAGENT_STORAGE alike, and each command's help says so."""
    for command in (["run"], ["sessions"], ["history"]):
        with pytest.raises(SystemExit):
            main([*command, "--help"])
        out = " ".join(capsys.readouterr().out.split())
        assert "$EFFECTAGENT_STORAGE, or the config's storage" in out, command


# ---- the configured toolsets, together ------------------------------------------------------------


def test_configured_toolsets_reach_the_model_and_an_mcp_tool_runs(
    server: ServerThread, home: Path, workspace: Path
) -> None:
    """Shell, Code Mode, an MCP server (the README's example, over stdio) and a skills directory
    from one config: the model is offered all their tools (the server's under its name), and a
    call of the MCP server's readonly tool runs without asking (a command the configuration
    starts is trusted to say which of its tools only read)."""
    skills = home / "skills"
    write_skill(skills, "release-notes", description="Write release notes.")
    repository = Path(__file__).resolve().parents[3]
    write_config(
        home,
        f"""
[shell]
workspace = "{workspace}"
write = true

[code_mode]

[[mcp]]
name = "notes"
command = "{sys.executable}"
args = ["-m", "examples.mcp_server"]
cwd = "{repository}"

[skills]
paths = ["{skills}"]
""",
    )
    program = (
        "async () => {"
        " const note = await notes.notes_lookup({city: 'Oslo'});"
        " const listing = await workspace.shell({command: 'ls'});"
        " return {note, files: listing.stdout}; }"
    )
    wire = ChatWire()
    server.script(
        Reply.sse(wire.calls(("call_1", "notes_lookup", json.dumps({"city": "Oslo"})))),
        Reply.sse(wire.calls(("call_2", "run_program", json.dumps({"program": program})))),
        Reply.sse(wire.text("Pack a coat.")),
    )
    child = spawn(args(server, "run", "What should I pack for Oslo?"), cli_env(home), timeout=40)
    output, status = finish(child)
    assert status == 0, output
    assert "Pack a coat." in output.splitlines()  # stdout; the timeline went to stderr
    first, second, third = server.requests()
    offered = {tool["function"]["name"]: tool["function"] for tool in first.json()["tools"]}
    assert sorted(offered) == [  # the MCP server's tools under its name
        "activate_skill",
        "notes_add",
        "notes_lookup",
        "run_program",
        "shell",
        "shell_write",
    ]
    assert "release-notes: Write release notes." in offered["activate_skill"]["description"]
    # Code Mode declares the readonly tools: the shell's and the MCP server's, not shell_write.
    declarations = offered["run_program"]["description"]
    assert "declare const workspace: {" in declarations
    assert "declare const notes: {" in declarations
    assert "  shell(input" in declarations
    assert "  notes_lookup(input" in declarations
    assert "shell_write(input" not in declarations
    direct = second.json()["messages"][-1]
    assert direct["role"] == "tool"
    assert "Pack a coat: 4 °C." in direct["content"]
    # The program ran in Deno in bubblewrap, calling the MCP server and the sandboxed shell.
    ran = json.loads(third.json()["messages"][-1]["content"])
    assert ran["result"]["note"]["structured"] == {"result": "Pack a coat: 4 °C."}
    assert "readme.txt" in ran["result"]["files"]


def test_python_dash_m_runs_the_same_command(home: Path) -> None:
    done = run_cli(
        [sys.executable, "-m", "capabilities.cli", "run", "Hi"], cli_env(home), timeout=30
    )
    assert done.returncode == 2
    assert "effectagent: no model configured" in done.stderr
