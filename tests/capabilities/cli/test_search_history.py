"""``effectagent history SEARCH`` on the storage's full-text index, through the real command: a
word is matched as written, never as query syntax (``OR``, ``NEAR(``, quotes), every word must
be there, any case, newest first, ``--limit`` bounds the lines; punctuation alone is refused in
a sentence; a secret the log never held is never found; and the search works while a chat in
another process holds the same file, its run going."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.providers.replay import Reply
from tests.providers.wire import ChatWire

from .support import EFFECTAGENT, KEY, ServerThread, cli_env, serve, spawn
from .test_cli import args
from .test_two_processes import PROMPT, _args, _env, _finish


@pytest.fixture
def server() -> Iterator[ServerThread]:
    with serve() as running:
        yield running


def effectagent(home: Path, *arguments: str) -> subprocess.CompletedProcess[str]:
    """The command in another process, not on a terminal, to its end."""
    return subprocess.run(
        [EFFECTAGENT, *arguments],
        env=cli_env(home),
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
        check=False,
    )


def said(done: subprocess.CompletedProcess[str]) -> list[str]:
    """The ``who: text`` part of each line found."""
    assert done.returncode == 0, done.stderr
    return [line.split("  ", 2)[2] for line in done.stdout.splitlines()]


def test_words_are_matched_as_written_never_as_query_syntax(
    server: ServerThread, tmp_path: Path
) -> None:
    wire = ChatWire()
    server.script(
        Reply.sse(wire.text("Noted.")),
        Reply.sse(wire.text("Both, NEAR(the door) — and the e-mail.")),
    )
    for prompt in ("Pack foo and bar.", "Is it foo OR bar?"):
        done = effectagent(tmp_path, *args(server, "run", prompt, "--session", "trip"))
        assert done.returncode == 0, done.stderr
    assert said(effectagent(tmp_path, "history", "foo OR bar")) == ["you: Is it foo OR bar?"]
    assert said(effectagent(tmp_path, "history", "near(", '"the', "DOOR)")) == [
        "assistant: Both, NEAR(the door) — and the e-mail."
    ]
    assert said(effectagent(tmp_path, "history", "FOO", "--limit", "1")) == [
        "you: Is it foo OR bar?"  # the newest
    ]
    missing = effectagent(tmp_path, "history", "fo")
    assert missing.returncode == 0, missing.stderr
    assert missing.stdout == "no message holds 'fo' (1 conversation read)\n"  # whole words
    refused = effectagent(tmp_path, "history", '"', "*", "(-)")
    assert refused.returncode == 2
    assert refused.stdout == ""
    assert refused.stderr == (
        "effectagent: there is no word to search for in '\" * (-)': history matches words "
        "(letters and digits), and punctuation alone is none\n"
    )


def test_a_secret_the_log_never_held_is_never_found(server: ServerThread, tmp_path: Path) -> None:
    server.script(Reply.sse(ChatWire().text(f"Your key is {KEY}, noted.")))
    done = effectagent(tmp_path, *args(server, "run", f"Remember my key {KEY}", "--session", "s"))
    assert done.returncode == 0, done.stderr
    stored = b"".join(path.read_bytes() for path in tmp_path.rglob("*.db*") if path.is_file())
    assert stored  # the database is there, and the canary is nowhere in it (index included)
    assert KEY.encode() not in stored
    found = effectagent(tmp_path, "history", "key")
    assert said(found) == [
        "assistant: Your key is [REDACTED], noted.",
        "you: Remember my key [REDACTED]",
    ]
    assert KEY not in found.stdout + found.stderr
    for part in ("canary", "0123456789abcdef", KEY):
        assert effectagent(tmp_path, "history", part).stdout.startswith("no message holds")


def test_history_works_while_a_chat_in_another_process_runs(
    server: ServerThread, tmp_path: Path
) -> None:
    wire = ChatWire()
    server.script(Reply.sse(wire.text("First, the harbour.")), Reply.stall())
    env = _env(tmp_path)
    chat = spawn(_args(server, "chat", "--session", "talk"), env)
    chat.expect(PROMPT)
    chat.sendline("One about the harbour.")
    chat.expect("First, the harbour.")
    chat.expect(PROMPT)
    chat.sendline("Two about the harbour.")  # its run now waits for the model
    server.wait_for_requests(2)  # once it reached the server, the run holds its session

    found = effectagent(tmp_path, "history", "Harbour")
    assert said(found) == [
        "you: Two about the harbour.",
        "assistant: First, the harbour.",
        "you: One about the harbour.",
    ]
    assert [line.split("  ")[1] for line in found.stdout.splitlines()] == ["talk"] * 3

    chat.sendintr()  # Ctrl-C: the run is interrupted, the chat goes on
    chat.expect(PROMPT)
    chat.sendeof()
    assert _finish(chat) == 0


def test_a_search_of_more_words_than_the_log_takes_is_exit_status_2(tmp_path: Path) -> None:
    """One word of 1,001 parts (``a.a.a…``) was the log's ``ValueError``: exit status 3, "cannot
    start", as if the storage could not be opened."""
    state = tmp_path / "state-dir"
    state.mkdir(mode=0o700)
    (state / "effectagent.db").touch()  # a store there: the search reaches the log
    refused = effectagent(tmp_path, "history", "--state-dir", str(state), ".".join(["a"] * 1001))
    assert refused.returncode == 2, refused.stderr
    assert refused.stdout == ""
    assert refused.stderr == (
        "effectagent: history searches for at most 1,000 words, each part of a word counted "
        "(e-mail is two); this search holds more\n"
    )
