"""The chat's commands beyond /help, /new and /exit, in a real chat (a pseudo-terminal, the plain
line reader): /model switches the next run's model, /sessions lists, /resume continues another
session, /compact runs the configured compactor at once, /usage adds the cost where the config
prices the model; a command a stalled server holds up gives way to Ctrl-C."""

from __future__ import annotations

import json
import signal
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pexpect
import pytest

from capabilities.cli._config import Price
from capabilities.cli._costs import cost, price_table
from effectagent.core import UsageTotals
from tests.providers.replay import Recorded, Reply
from tests.providers.wire import ChatWire

from .support import EFFECTAGENT, ServerThread, cli_env, serve, spawn
from .test_cli import PROMPT, args, end_chat, messages, open_chat, write_config


@pytest.fixture
def server() -> Iterator[ServerThread]:
    with serve() as running:
        yield running


#: The idle prompt, naming the model once /model changed it.
ANY_PROMPT = r"you( \(\S+\))?> "


def ask(child: pexpect.spawn[str], line: str, *shown: str) -> None:
    """Send ``line``; wait for each of ``shown``, then the next prompt."""
    child.sendline(line)
    for text in shown:
        child.expect_exact(text)
    child.expect(ANY_PROMPT)


def test_model_switches_the_model_of_the_next_run(server: ServerThread, tmp_path: Path) -> None:
    wire = ChatWire()
    server.script(Reply.sse(wire.text("From the first.")), Reply.sse(wire.text("From the other.")))
    child = open_chat(server, tmp_path)
    ask(child, "/model", "model: openai-compatible:test-model (/model PROVIDER:MODEL changes it")
    ask(child, "Hi?", "From the first.")
    ask(child, "/model nope", "/model: unknown model string 'nope'", "(still openai-compatible")
    child.sendline("/model openai-compatible:other-model")
    child.expect_exact("the next run uses openai-compatible:other-model")
    child.expect_exact("you (openai-compatible:other-model)> ")  # the prompt says so
    child.sendline("And now?")
    child.expect_exact("From the other.")
    child.expect_exact("you (openai-compatible:other-model)> ")
    end_chat(child)
    first, second = (request.json() for request in server.requests())
    assert (first["model"], second["model"]) == ("test-model", "other-model")
    assert ("user", "Hi?") in messages(second)  # the same conversation goes on


def test_a_model_that_cannot_be_opened_leaves_the_one_before(
    server: ServerThread, tmp_path: Path
) -> None:
    """Its string is good, but no key is set for it: opening it fails in the background, the
    chat says so, and the next run goes to the model before it."""
    server.script(Reply.sse(ChatWire().text("Still here.")))
    child = open_chat(server, tmp_path)
    child.sendline("/model anthropic:claude-sonnet-4-5")
    child.expect_exact("the next run uses anthropic:claude-sonnet-4-5")
    child.expect_exact(
        "anthropic:claude-sonnet-4-5 cannot be used: no API key for Anthropic: set the "
        "ANTHROPIC_API_KEY environment variable"
    )
    child.expect_exact("(still openai-compatible:test-model)")
    child.sendline("Hello?")
    child.expect_exact("Still here.")
    child.expect(PROMPT)
    end_chat(child)
    assert server.requests()[0].json()["model"] == "test-model"


def test_sessions_and_resume_continue_another_session(server: ServerThread, tmp_path: Path) -> None:
    wire = ChatWire()
    server.script(
        *(Reply.sse(wire.text(text)) for text in ("Oslo is cold.", "Rome.", "Pack a coat."))
    )
    first = spawn(args(server, "chat", "--session", "trip"), cli_env(tmp_path))
    first.expect(PROMPT)
    ask(first, "Where am I going?", "Oslo is cold.")
    end_chat(first)
    child = open_chat(server, tmp_path)  # a new session
    ask(child, "Something else?", "Rome.")
    child.sendline("/sessions")
    child.expect(r"NAME +CONVERSATION +UPDATED +RUNS")
    child.expect(r"chat-\S+ +\S+ +\S+ \S+ +1")  # this one, updated last, first
    child.expect(r"trip +\S+ +\S+ \S+ +1")
    child.expect_exact("this chat: session chat-")
    child.expect(PROMPT)
    ask(child, "/resume nope", "there is no session nope with a conversation")
    ask(
        child,
        "/resume trip",
        "session trip resumed (1 run, conversation ",
        "you> Where am I going?",
        "assistant> Oslo is cold.",
    )
    child.sendline("What should I pack?")
    child.expect_exact("Pack a coat.")
    child.expect(PROMPT)
    child.sendeof()
    child.expect_exact("session trip saved: effectagent chat --session trip")
    child.expect(pexpect.EOF)
    said = messages(server.requests()[2].json())
    assert [text for role, text in said if role == "user"] == [
        "Where am I going?",
        "What should I pack?",
    ]


def test_compact_without_a_compactor_says_how_to_have_one(
    server: ServerThread, tmp_path: Path
) -> None:
    child = open_chat(server, tmp_path)
    ask(child, "/compact", "no compactor is configured: a [compaction] table in the config")
    end_chat(child)
    assert server.requests() == []


def test_compact_summarizes_the_conversation_now(server: ServerThread, tmp_path: Path) -> None:
    """The compactor's summary call goes to the chat's model; the next run's prompt holds the
    summary instead of what it covers, and /usage counts the call."""
    write_config(
        tmp_path,
        "[compaction]\ncontext_tokens = 100000\nkeep_recent_tokens = 0\nsummary_tokens = 60\n",
    )
    wire = ChatWire()
    long = "Oslo in January: " + "snow, dark afternoons and cold wind. " * 20
    server.script(
        Reply.sse(wire.text(long)),
        Reply.sse(wire.text("Wool.")),
        Reply.sse(wire.text("Ann plans a winter trip to Oslo.", usage=wire.usage(500, 9))),
        Reply.sse(wire.text("Boots too.")),
    )
    child = open_chat(server, tmp_path)
    ask(child, "Tell me about Oslo in winter.", "cold wind.")
    ask(child, "What should I wear?", "Wool.")
    ask(child, "/compact", "⇲ context compacted (summarize): ~")
    ask(child, "Anything else?", "Boots too.")
    ask(child, "/usage", "usage of this chat (3 runs): input 530 · output ")
    end_chat(child)
    summary_request, after = (request.json() for request in server.requests()[2:])
    assert summary_request["messages"][0]["content"].startswith("Summarize the conversation")
    sent = " ".join(text for _, text in messages(after))
    assert "Ann plans a winter trip to Oslo." in sent
    assert "dark afternoons" not in sent  # covered by the summary
    assert messages(after)[-1] == ("user", "Anything else?")


def test_ctrl_c_abandons_a_command_a_stalled_server_holds_up(
    server: ServerThread, tmp_path: Path
) -> None:
    write_config(
        tmp_path,
        "[compaction]\ncontext_tokens = 100000\nkeep_recent_tokens = 0\nsummary_tokens = 20\n",
    )
    wire = ChatWire()
    summary_asked = threading.Event()

    def stall(_: Recorded) -> Reply:
        summary_asked.set()
        return Reply.stall()

    server.script(
        Reply.sse(wire.text("A long answer. " * 40)),
        Reply.sse(wire.text("Another.")),
        stall,
        Reply.sse(wire.text("Yes.")),
    )
    child = open_chat(server, tmp_path)
    ask(child, "Talk.", "A long answer.")
    ask(child, "More.", "Another.")  # the newest exchange is never compacted: two of them
    child.sendline("/compact")
    assert summary_asked.wait(30)  # the compactor's summary call waits on the server
    child.sendline("Still there?")  # typed while the command waits: kept for the next prompt
    child.kill(signal.SIGINT)
    child.expect_exact("^C — the command is abandoned")
    child.expect_exact("Yes.")  # the line typed meanwhile was the next prompt's
    child.expect(PROMPT)
    end_chat(child)
    assert messages(server.requests()[-1].json())[-1] == ("user", "Still there?")


def test_usage_says_the_cost_where_the_config_prices_the_model(
    server: ServerThread, tmp_path: Path
) -> None:
    write_config(
        tmp_path,
        '[prices."openai-compatible:test-model"]\ninput = 1000\noutput = 2000\ncached = 100\n',
    )
    wire = ChatWire()
    server.script(
        Reply.sse(wire.text("One.", usage=wire.usage(12, 3, cached=10))),
        Reply.sse(wire.text("Two.", usage=wire.usage(30, 4))),
        Reply.sse(wire.text("Three.", usage=wire.usage(5, 5))),
    )
    child = open_chat(server, tmp_path)
    ask(child, "First?", "One.")
    ask(child, "Second?", "Two.")
    # (2 + 30) * 1000 + 10 * 100 + 7 * 2000, per million tokens
    ask(child, "/usage", "input 42 · output 7 · cache read 10 · cache write 0 · cost $0.0470")
    ask(child, "/model openai-compatible:unpriced", "the next run uses")
    ask(child, "Third?", "Three.")
    ask(
        child,
        "/usage",
        "cost $0.0470, not counting openai-compatible:unpriced (no price: add one under [prices])",
    )
    end_chat(child)


def test_a_run_s_result_holds_the_cost_the_config_prices(
    server: ServerThread, tmp_path: Path
) -> None:
    """The config's ``[prices]`` reach the runtime too: the run's own usage (its events, its
    result, its spans) is priced by the table ``/usage`` uses, not only by the shipped one."""
    write_config(tmp_path, '[prices."openai-compatible:test-model"]\ninput = 1000\noutput = 2000\n')
    wire = ChatWire()
    server.script(Reply.sse(wire.text("Four.", usage=wire.usage(12, 3))))
    child = spawn(args(server, "run", "How warm?", "--json"), cli_env(tmp_path))
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0
    printed = child.before
    assert isinstance(printed, str)
    events = [json.loads(line) for line in printed.splitlines() if line.startswith("{")]
    usage = events[-1]["usage"]
    assert events[-1]["type"] == "RunCompleted"
    # 12 * 1000 + 3 * 2000 dollars per million tokens: 18,000 micro-dollars
    assert (usage["cost_micros"], usage["unpriced_calls"]) == (18_000, 0)


def test_cost_prices_each_kind_of_token() -> None:
    usage = UsageTotals(
        input_tokens=1_000_000,
        output_tokens=500_000,
        cache_read_input_tokens=200_000,
        cache_write_input_tokens=100_000,
    )
    table = price_table(
        {
            "openai:flat": Price(input=3.0, output=15.0),
            "openai:cached": Price(input=3.0, output=15.0, cached=0.3, cache_write=3.75),
        }
    )
    flat, cached = table.price_of("openai:flat"), table.price_of("openai:cached")
    assert flat is not None
    assert cached is not None
    assert cost(usage, flat) == 3_000_000 + 7_500_000  # micro-dollars
    assert cost(usage, cached) == 700_000 * 3 + 200_000 * 3 // 10 + 100_000 * 375 // 100 + 7_500_000
    # The shipped table prices the providers' models without a config.
    assert table.price_of("anthropic:claude-sonnet-4-5") is not None


def test_every_provider_s_key_is_kept_out_of_the_chat(server: ServerThread, tmp_path: Path) -> None:
    """A chat may switch to any provider whose key is set, so each of those keys is redacted
    from the start — here one the model repeats before any /model."""
    canary = "sk-ant-canary-0123456789abcdef"
    server.script(Reply.sse(ChatWire().text(f"Your other key is {canary}.")))
    child = spawn(args(server, "chat"), cli_env(tmp_path, ANTHROPIC_API_KEY=canary))
    child.expect(PROMPT)
    child.sendline("Tell me a secret.")
    child.expect_exact("Your other key is [REDACTED].")
    child.expect(PROMPT)
    end_chat(child)
    listed = effectagent_output(tmp_path, "history", "key")
    assert canary not in listed
    assert "[REDACTED]" in listed


def effectagent_output(home: Path, *arguments: str) -> str:
    done = subprocess.run(
        [EFFECTAGENT, *arguments],
        env=cli_env(home),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return done.stdout + done.stderr
