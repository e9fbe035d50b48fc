"""The command's cassettes: ``effectagent run --record FILE`` records a run against the provider
(the replay server), and ``effectagent sessions export NAME --cassette FILE`` writes a stored
SQLite conversation as a cassette; each replays offline through ``ReplayModel`` to the same
answers and, for the export, to the records the database holds. The API key never reaches a
cassette."""

from __future__ import annotations

import io
import json
import os
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from capabilities import sqlite_storage
from capabilities.cli import main
from capabilities.cli._main import DATABASE, DEFAULT_INSTRUCTIONS
from capabilities.sessions import SessionStoreService
from effectagent import Agent, AgentPolicy, Toolkit, open_runtime
from effectagent.core import LogEntry
from effectagent.testing import Cassette, ReplayModel, assert_same_records
from tests.providers.replay import Reply
from tests.providers.wire import ChatWire

from .support import KEY, ServerThread, cli_env, serve

MODEL = ["--model", "openai-compatible:test-model", "--api-key-env", "CLI_TEST_KEY"]

#: The agent the command runs when no config gives it tools or instructions.
ASSISTANT = Agent("assistant", DEFAULT_INSTRUCTIONS, AgentPolicy(), Toolkit())


@pytest.fixture
def server() -> Iterator[ServerThread]:
    with serve() as running:
        yield running


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The environment a spawned command would get, for ``main`` in this process."""
    for name in list(os.environ):
        if name.startswith(("OPENAI_", "ANTHROPIC_", "EFFECTAGENT_", "XDG_")):
            monkeypatch.delenv(name)
    for name, value in cli_env(tmp_path).items():
        monkeypatch.setenv(name, value)
    # Nothing piped (pytest's own stdin cannot be read): the prompt is the argument alone.
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"")))
    return tmp_path


def run(server: ServerThread, *rest: str) -> int:
    return main(["run", *MODEL, "--base-url", server.url, *rest])


def replayed(layer: Any, prompts: Sequence[str]) -> tuple[list[str], list[LogEntry]]:
    """The command's agent run on ``prompts`` in one conversation over ``layer``."""

    async def go() -> tuple[list[str], list[LogEntry]]:
        answers: list[str] = []
        async with open_runtime(layer, agents=[ASSISTANT]) as runtime:
            conversation: str | None = None
            for prompt in prompts:
                result = await runtime.run(ASSISTANT, prompt, conversation_id=conversation)
                assert result.status == "completed", result.error
                answers.append(result.text)
                conversation = result.conversation_id
            assert conversation is not None
            return answers, list(await runtime.log.entries(conversation))

    return trio.run(go, clock=trio.testing.MockClock(autojump_threshold=0))


def stored(home: Path) -> list[LogEntry]:
    """The log of the conversation the command's one session continues."""

    async def go() -> list[LogEntry]:
        async with open_runtime(sqlite_storage(home / "state" / "effectagent" / DATABASE)) as rt:
            (session,) = await rt.context[SessionStoreService].list()
            return list(await rt.log.entries(session.conversations[-1]))

    return trio.run(go)


def test_run_record_writes_a_cassette_that_replays_offline(
    server: ServerThread, home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    wire = ChatWire()
    server.script(Reply.sse(wire.text("Oslo is ", f"4 °C (not {KEY}).")))
    cassette = home / "run.jsonl"
    assert run(server, "How warm is Oslo?", "--record", str(cassette)) == 0
    assert capsys.readouterr().out.startswith("Oslo is 4 °C (not [REDACTED]).")
    text = cassette.read_text()
    assert KEY not in text
    read = Cassette.read(cassette)
    assert read.model == {"name": "openai-compatible:test-model", "native_output": True}
    (exchange,) = read.exchanges
    assert exchange.request["messages"][-1]["content"][0]["text"] == "How warm is Oslo?"
    answers, _ = replayed(ReplayModel.layer(cassette), ["How warm is Oslo?"])
    assert answers == ["Oslo is 4 °C (not [REDACTED])."]
    assert len(server.requests()) == 1  # the replay asked the provider nothing


def test_a_cassette_that_cannot_be_written_stops_the_command_before_the_run(
    server: ServerThread, home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    nowhere = home / "missing" / "run.jsonl"
    assert run(server, "Hi", "--record", str(nowhere)) == 3
    error = capsys.readouterr().err
    assert error.startswith(f"effectagent: cannot start: cannot write the cassette {nowhere}: ")
    assert "No such file or directory" in error
    assert server.requests() == []


def test_sessions_export_writes_the_stored_conversation_as_a_cassette(
    server: ServerThread, home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    wire = ChatWire()
    server.script(Reply.sse(wire.text("Pack a coat.")), Reply.sse(wire.text("Pack sunglasses.")))
    prompts = ["Pack for Oslo?", "And for Rome?"]
    for prompt in prompts:
        assert run(server, "--session", "trip", prompt) == 0
    cassette = home / "trip.jsonl"
    capsys.readouterr()
    assert main(["sessions", "export", "trip", "--cassette", str(cassette)]) == 0
    assert capsys.readouterr().out == f"wrote 2 exchanges of session trip to {cassette}\n"

    header = json.loads(cassette.read_text().splitlines()[0])
    assert header["source"] == "export"
    assert header["unchecked"] == [
        "tools",
        "tool_choice",
        "max_output_tokens",
        "output",
        "metadata",
    ]
    read = Cassette.read(cassette)
    second = read.exchanges[1].request["messages"]
    assert [m["role"] for m in second] == ["system", "user", "assistant", "user"]
    assert second[0]["content"] == DEFAULT_INSTRUCTIONS

    answers, records = replayed(ReplayModel.layer(cassette), prompts)
    assert answers == ["Pack a coat.", "Pack sunglasses."]
    assert_same_records(stored(home), records)
    assert len(server.requests()) == 2  # the replay asked the provider nothing


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["sessions", "export", "nope", "--cassette", "x.jsonl"], "there are no sessions yet"),
        (["sessions", "export", "nope"], "the following arguments are required: --cassette"),
    ],
)
def test_export_errors_are_sentences(
    home: Path, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    try:
        status = main(argv)
    except SystemExit as exit_:  # argparse's own usage error
        status = int(exit_.code or 0)
    assert status == 2
    assert message in capsys.readouterr().err


def test_exporting_an_unknown_session_says_so(
    server: ServerThread, home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    server.script(Reply.sse(ChatWire().text("Hi.")))
    assert run(server, "--session", "trip", "Hello?") == 0
    capsys.readouterr()
    assert main(["sessions", "export", "trap", "--cassette", str(home / "x.jsonl")]) == 2
    assert capsys.readouterr().err == "effectagent: there is no session trap with a conversation\n"
    assert not (home / "x.jsonl").exists()
    assert main(["sessions"]) == 0  # listing still works without an action
    assert capsys.readouterr().out.splitlines()[1].startswith("trip ")
