"""``effectagent sessions delete NAME`` (asks first, unless ``--yes``) and ``effectagent history
SEARCH`` (every stored conversation, newest first; the storage's full-text index, or a bounded
scan of a log without one): through the real command, and the search's matching as pure
functions."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio
from hypothesis import given
from hypothesis import strategies as st

from capabilities import in_memory_storage, sqlite_storage
from capabilities.cli import main
from capabilities.cli._common import DATABASE, UsageError
from capabilities.cli._history import Found, excerpt, holds, search, tokens, words_of
from capabilities.sessions import SessionCreate, SessionStoreService
from capabilities.sessions._sqlite import SqliteSessionStore
from capabilities.storage import SqliteConversationLog, open_database
from effectagent import open_runtime
from effectagent.core import UserInputRecorded
from tests.providers.replay import Reply
from tests.providers.wire import ChatWire

from .support import EFFECTAGENT, Lines, ServerThread, cli_env, serve, spawn
from .test_cli import args, finish


@pytest.fixture
def server() -> Iterator[ServerThread]:
    with serve() as running:
        yield running


def effectagent(home: Path, *arguments: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    """The command, not on a terminal (stdin, stdout and stderr are pipes)."""
    return subprocess.run(
        [EFFECTAGENT, *arguments],
        env=cli_env(home),
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def two_sessions(server: ServerThread, home: Path) -> None:
    wire = ChatWire()
    server.script(
        Reply.sse(wire.text("Oslo is cold in January.")),
        Reply.sse(wire.text("Rome is mild.")),
        Reply.sse(wire.text("Take a coat to Oslo.")),
    )
    for session, prompt in (("oslo", "Trip to Oslo?"), ("rome", "Trip to Rome?")):
        done = effectagent(home, *args(server, "run", prompt, "--session", session))
        assert done.returncode == 0, done.stderr
    done = effectagent(home, *args(server, "run", "What do I pack?", "--session", "oslo"))
    assert done.returncode == 0, done.stderr


def test_delete_asks_first_on_a_terminal(server: ServerThread, tmp_path: Path) -> None:
    two_sessions(server, tmp_path)
    child = spawn(["sessions", "delete", "oslo"], cli_env(tmp_path))
    child.expect_exact("delete session oslo (1 conversation)? [y/N] ")
    child.sendline("n")
    child.expect_exact("nothing deleted")
    assert finish(child)[1] == 0
    child = spawn(["sessions", "delete", "oslo"], cli_env(tmp_path))
    child.expect_exact("? [y/N] ")
    child.sendline("y")
    child.expect_exact("deleted session oslo (1 conversation)")
    assert finish(child)[1] == 0
    listed = effectagent(tmp_path, "sessions").stdout
    assert "rome" in listed
    assert "oslo" not in listed


def test_delete_without_a_terminal_needs_yes(server: ServerThread, tmp_path: Path) -> None:
    two_sessions(server, tmp_path)
    refused = effectagent(tmp_path, "sessions", "delete", "rome", stdin="y\n")
    assert refused.returncode == 2
    assert "pass --yes to delete the session rome without asking" in refused.stderr
    assert "rome" in effectagent(tmp_path, "sessions").stdout
    done = effectagent(tmp_path, "sessions", "delete", "rome", "--yes")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "deleted session rome (1 conversation)\n"
    assert "rome" not in effectagent(tmp_path, "sessions").stdout
    missing = effectagent(tmp_path, "sessions", "delete", "rome", "--yes")
    assert missing.returncode == 2
    assert missing.stderr == "effectagent: there is no session rome\n"


def test_history_finds_what_was_said_in_every_conversation(
    server: ServerThread, tmp_path: Path
) -> None:
    two_sessions(server, tmp_path)
    found = effectagent(tmp_path, "history", "OSLO")
    assert found.returncode == 0, found.stderr
    lines = found.stdout.splitlines()
    assert [line.split("  ", 2)[1:] for line in lines] == [
        ["oslo", "assistant: Take a coat to Oslo."],  # newest first
        ["oslo", "assistant: Oslo is cold in January."],
        ["oslo", "you: Trip to Oslo?"],
    ]
    both = effectagent(tmp_path, "history", "trip", "rome").stdout.splitlines()
    assert [line.split("  ", 2)[1:] for line in both] == [["rome", "you: Trip to Rome?"]]
    none = effectagent(tmp_path, "history", "Lisbon")
    assert none.returncode == 0
    assert none.stdout == "no message holds 'Lisbon' (2 conversations read)\n"
    limited = effectagent(tmp_path, "history", "oslo", "--limit", "1").stdout.splitlines()
    assert [line.split("  ", 2)[2] for line in limited] == ["assistant: Take a coat to Oslo."]
    # Deleting a session takes its conversation with it: history finds nothing of it after.
    assert effectagent(tmp_path, "sessions", "delete", "oslo", "--yes").returncode == 0
    gone = effectagent(tmp_path, "history", "coat")
    assert gone.returncode == 0
    assert gone.stdout == "no message holds 'coat' (1 conversation read)\n"
    assert "rome" in effectagent(tmp_path, "history", "Rome").stdout


def test_history_shows_the_match_marked_and_escaped(server: ServerThread, tmp_path: Path) -> None:
    server.script(Reply.sse(ChatWire().text("ok")))
    prompt = "a \x1b]0;title\x07 note about the harbour"
    done = effectagent(tmp_path, *args(server, "run", prompt, "--session", "s"))
    assert done.returncode == 0, done.stderr
    child = spawn(["history", "harbour", "--color", "always"], cli_env(tmp_path))
    output, status = finish(child)
    assert status == 0
    assert "\x1b[33mharbour\x1b[0m" in output  # the match, in our style
    assert "a \\x1b]0;title\\x07 note about the " in output  # the rest, escaped
    assert "\x07" not in output


def test_words_match_whole_whatever_their_case() -> None:
    words = words_of("  Oslo  COAT ")
    assert words == ("oslo", "coat")
    assert holds("Take a coat to oslo.", words)
    assert not holds("Take a coat.", words)
    assert not holds("Take a coathanger to Oslo.", words)  # whole words
    assert holds("anything", ())
    assert words_of("e-mail ??? x") == ("e-mail", "x")  # punctuation alone is no word
    assert holds("send an E-Mail to x", words_of("e-mail x"))
    assert holds("send an e mail to x", words_of("e-mail x"))  # its parts, one after another
    assert not holds("mail an e to x", words_of("e-mail x"))
    assert words_of("   ") == ()


def test_a_search_of_punctuation_alone_is_refused_with_a_sentence() -> None:
    with pytest.raises(UsageError) as raised:
        words_of('"" * -- (')
    assert str(raised.value) == (
        "there is no word to search for in '\"\" * -- (': history matches words "
        "(letters and digits), and punctuation alone is none"
    )


@given(st.text(max_size=300), st.text(min_size=1, max_size=8).filter(lambda w: bool(tokens(w))))
def test_an_excerpt_is_one_line_around_the_word_it_shows(text: str, word: str) -> None:
    words = words_of(word)
    before, match, after = excerpt(text, words, width=40)
    shown = before + match + after
    assert "\n" not in shown
    assert len(shown) <= max(40, len(match)) + 2  # the width (or the word), and two marks
    if any(holds(text, [one]) for one in words):
        assert tokens(match) in [tokens(one) for one in words]  # a word found, as written
    else:
        assert match == ""


async def test_a_log_without_an_index_is_scanned_up_to_its_bound_saying_how_much_it_left() -> None:
    async with open_runtime(in_memory_storage()) as runtime:
        store = runtime.context[SessionStoreService]
        for number in range(5):
            conversation = f"c{number}"
            record = UserInputRecorded(
                conversation_id=conversation,
                run_id="r",
                input_id=f"i{number}",
                kind="user",
                text=f"note {number}",
                author="user",
                at=float(number),
            )
            await runtime.log.append(conversation, [record, record])
            await store.create(SessionCreate(f"s{number}", {}, (conversation,)))
        everything = await search(runtime.log, store, ("note",), limit=100)
        assert (everything.conversations, everything.unread) == (5, 0)
        assert [hit.session for hit in everything.hits][:2] == ["s4", "s4"]
        bounded = await search(runtime.log, store, ("note",), limit=100, budget=3)
        assert (bounded.conversations, bounded.unread) == (2, 3)  # 2 records each: 4 read
        assert len(bounded.hits) == 4


def test_history_says_how_many_messages_a_held_write_lock_left_unsearched(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """When another process keeps the write lock past the wait, the search answers from what it
    could match, and the command says on stderr how many messages it left out (the storage's
    side of it: ``storage/test_search.py``)."""
    for name, value in cli_env(tmp_path).items():  # the command's directories under tmp_path
        monkeypatch.setenv(name, value)
    path = tmp_path / "state" / "effectagent" / DATABASE
    path.parent.mkdir(parents=True)

    async def make() -> None:
        async with open_runtime(sqlite_storage(path)):
            pass

    trio.run(make)

    async def held(*args: object, **kwargs: object) -> Found:
        return Found(hits=(), conversations=2, unread=0, unsearched=3)

    monkeypatch.setattr("capabilities.cli._stored.search", held)
    assert main(["history", "oslo"]) == 0
    out, err = capsys.readouterr()
    assert out == "no message holds 'oslo' (2 conversations read)\n"
    assert err == (
        "another process kept the database's write lock: 3 older messages written since the "
        "last search not searched\n"
    )


def test_a_session_whose_conversation_has_a_run_going_is_not_deleted(
    server: ServerThread, tmp_path: Path
) -> None:
    """The guide's promise: refused with a sentence (exit status 3), nothing of it deleted."""
    two_sessions(server, tmp_path)
    [path] = tmp_path.rglob(DATABASE)

    async def delete_while_held() -> subprocess.CompletedProcess[str]:
        async with open_database(path) as database:  # a run of oslo's conversation going here
            [session] = [
                s
                for s in await SqliteSessionStore[dict[str, object]](database).list()
                if s.name == "oslo"
            ]
            await SqliteConversationLog(database).claim(session.conversations[0], "run-held")
            return await trio.to_thread.run_sync(
                lambda: effectagent(tmp_path, "sessions", "delete", "oslo", "--yes")
            )

    refused = trio.run(delete_while_held)
    assert refused.returncode == 3, refused.stderr
    assert refused.stderr.startswith("effectagent: the session oslo was not deleted: ")
    assert "has a run going" in refused.stderr
    assert "Traceback" not in refused.stderr
    assert "oslo" in effectagent(tmp_path, "sessions").stdout
    assert "Take a coat to Oslo." in effectagent(tmp_path, "history", "coat").stdout


def test_a_chat_whose_session_was_deleted_meanwhile_says_so_and_starts_anew(
    server: ServerThread, tmp_path: Path
) -> None:
    """A chat idle at its prompt holds no run, so `sessions delete` in another process deletes
    its session; the chat's next message then finds its conversation gone: it says so (nothing
    sent, no traceback), and the message sent again starts a new conversation of the session."""
    wire = ChatWire()
    server.script(
        Reply.sse(wire.text("Oslo is cold.")),
        Reply.sse(wire.text("Rome is mild.")),
        Reply.sse(wire.text("Pack a coat.")),
    )
    done = effectagent(tmp_path, *args(server, "run", "Trip to Oslo?", "--session", "trip"))
    assert done.returncode == 0, done.stderr
    command = [EFFECTAGENT, *args(server, "chat", "--session", "trip")]
    with subprocess.Popen(
        command,
        env=cli_env(tmp_path),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as chat:
        assert chat.stdin is not None
        lines = Lines(chat)
        chat.stdin.write("And Rome?\n")
        chat.stdin.flush()
        lines.until("Rome is mild.")
        deleted = effectagent(tmp_path, "sessions", "delete", "trip", "--yes")
        assert deleted.returncode == 0, deleted.stderr
        chat.stdin.write("What do I pack?\n")
        chat.stdin.flush()
        gone = lines.until("is gone")
        chat.stdin.write("What do I pack?\n")
        chat.stdin.close()
        out = "".join(lines.rest())
        assert chat.stderr is not None
        err = chat.stderr.read()
        chat.wait(timeout=60)
    assert chat.returncode == 0, err
    assert "Traceback" not in out + err
    assert "of session trip is gone (deleted in another process): your message was not sent" in (
        gone
    )
    assert "Pack a coat." in out
    assert len(server.requests()) == 3  # the message the gone conversation refused never left
    shown = effectagent(tmp_path, "sessions", "show", "trip")
    assert shown.stdout.splitlines()[1:] == ["you> What do I pack?", "assistant> Pack a coat."]


def test_a_search_of_more_words_than_the_log_takes_is_a_usage_error() -> None:
    """``history a.b.c…`` of more than 1,000 parts reached the log's ``ValueError``: exit status
    3 and "cannot start: …", as if the storage could not be opened."""
    assert len(words_of(" ".join(["a"] * 1000))) == 1000
    for typed in (" ".join(["a"] * 1001), ".".join(["a"] * 1001), "e-mail " * 501):
        with pytest.raises(UsageError) as raised:
            words_of(typed)
        assert str(raised.value) == (
            "history searches for at most 1,000 words, each part of a word counted (e-mail is "
            "two); this search holds more"
        )
