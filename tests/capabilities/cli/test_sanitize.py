"""Nothing untrusted reaches the terminal as something it obeys or hides: the escaping function,
the console every write goes through, and — for generated strings full of controls, bidi and
zero-width characters — everything the timeline, the approval prompt and ``--json`` write."""

from __future__ import annotations

import io
import json
import logging
import sys
import unicodedata
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from capabilities.cli._approval_view import argument_lines
from capabilities.cli._console import HELD_CHARS, STYLES, Console, Styled, Text
from capabilities.cli._errors import figure, sentence, steering_rejection
from capabilities.cli._main import _library_logs
from capabilities.cli._sanitize import is_hidden, json_safe, visible
from capabilities.cli._session import event_json
from capabilities.cli.render import Timeline
from capabilities.mcp import McpToolError
from capabilities.storage import DatabaseInUse
from effectagent.core import (
    ApprovalRequest,
    ApprovalRequested,
    BudgetExhausted,
    BudgetWarning,
    ModelFailed,
    ReasoningDelta,
    RunFailed,
    RunStarted,
    TextDelta,
    ToolCallDeclared,
    ToolCallFailed,
    ToolFailure,
    ToolInvalidInput,
    ToolProgress,
    UsageTotals,
)

_CATEGORIES = {"Cc", "Cf", "Cs", "Zl", "Zp"}
#: Format characters of Unicode versions newer than some Pythons' ``unicodedata``.
_NEWER_FORMAT = {chr(c) for c in range(0x13439, 0x13440)}

ESC = "\x1b"
#: What no output may hold: ESC, the C1 controls, the bidi controls.
_FORBIDDEN = {ESC, *map(chr, range(0x80, 0xA0))} | {
    "\u061c",
    "\u200e",
    "\u200f",
    *map(chr, range(0x202A, 0x202F)),
    *map(chr, range(0x2066, 0x206A)),
}


def test_hidden_is_exactly_the_control_and_format_categories() -> None:
    """Checked against the running Python's ``unicodedata``, code point by code point."""
    for code in range(sys.maxunicode + 1):
        char = chr(code)
        expected = unicodedata.category(char) in _CATEGORIES or char in _NEWER_FORMAT
        assert is_hidden(char) is expected, f"U+{code:04X}"


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("\x1b[2K\x1b]52;c;Y3VybA==\x07", "\\x1b[2K\\x1b]52;c;Y3VybA==\\x07"),
        ("\x9b6n", "\\x9b6n"),
        ("evil\u202etxt.exe", "evil\\u202etxt.exe"),
        ("zero\u200bwidth\ufeff", "zero\\u200bwidth\\ufeff"),
        ("tag\U000e0041", "tag\\U000e0041"),
        ("lone \ud800", "lone \\ud800"),
        ("a\rb\x7f", "a\\rb\\x7f"),
        ("two\nlines\tand tab", "two\\nlines\\tand tab"),
        ("ordinary — text, ünïcode, 漢字", "ordinary — text, ünïcode, 漢字"),
    ],
)
def test_visible_shows_each_hidden_character_as_an_escape(text: str, shown: str) -> None:
    assert visible(text) == shown


def test_text_of_lines_keeps_newline_and_tab_only() -> None:
    assert visible("one\n\ttwo\r\x1b[A", lines=True) == "one\n\ttwo\\r\\x1b[A"


def test_json_safe_is_lossless() -> None:
    value = {"k\u202e": ["\x1b[31m", "\x9b", "\U000e0041", "\ud800", "plain\n"]}
    text = json_safe(json.dumps(value, ensure_ascii=False))
    assert json.loads(text) == value
    assert not any(is_hidden(char) for char in text)
    assert "\\u202e" in text
    assert "\\udb40\\udc41" in text  # a code point above U+FFFF as its surrogate pair


# ---- the console ----------------------------------------------------------------------------------


def test_our_styles_are_the_only_escape_sequences() -> None:
    out = io.StringIO()
    console = Console(out, color=True)
    console.out.line(Styled("red", "\x1b]0;title\x07"), " ", Text("a\nb\x1b[2J"))
    assert out.getvalue() == "\x1b[31m\\x1b]0;title\\x07\x1b[0m a\nb\\x1b[2J\n"


def test_a_field_never_starts_a_line_of_its_own() -> None:
    out = io.StringIO()
    Console(out).out.line("name\n? forged waits for approval")
    assert out.getvalue() == "name\\n? forged waits for approval\n"


def test_while_held_only_the_prompt_writes_and_the_rest_follows_in_order() -> None:
    out, err = io.StringIO(), io.StringIO()
    console = Console(out, err)
    console.out.line("before")
    console.hold()
    console.err.write("held on err ")
    console.out.line("held on out")
    console.out.show("the prompt? ", end="")
    assert (out.getvalue(), err.getvalue()) == ("before\nthe prompt? ", "")
    console.release()
    assert (out.getvalue(), err.getvalue()) == (
        "before\nthe prompt? held on out\n",
        "held on err ",
    )
    console.out.line("after")
    assert out.getvalue().endswith("held on out\nafter\n")


def test_held_output_is_bounded_and_what_is_left_out_is_said() -> None:
    out = io.StringIO()
    console = Console(out)
    console.hold()
    console.out.write("x" * HELD_CHARS)
    console.out.write("y" * 10)  # over the bound: counted, not kept
    console.release()
    text = out.getvalue()
    assert "y" not in text
    assert text.endswith(
        "\n(10 characters of output that came while the prompt waited were left out)\n"
    )


# ---- errors as sentences ------------------------------------------------------------------------


def test_errors_read_as_sentences_with_figures_rounded() -> None:
    assert sentence(DatabaseInUse("/home/ann/effectagent.db")) == (
        "the session database /home/ann/effectagent.db is held for itself alone by another "
        "process (an older version of effectagent): try again once that one has ended"
    )
    assert sentence(BudgetExhausted("duration", 5.005364324999391, 5.0)) == (
        "the duration budget ran out: 5.0 s used of 5.0 s"
    )
    assert sentence({"_tag": "SlowThing", "used": 5.005364324999391, "limit": 5}) == (
        "slow thing (used 5.01, limit 5)"
    )
    assert sentence(McpToolError("wipe", "it broke")) == "it broke"
    assert (figure(1234.56), figure(0.000123456), figure(7.0)) == ("1235", "0.000123", "7")
    assert steering_rejection("too-large") == "it is too long"


def test_what_libraries_log_reaches_the_terminal_escaped() -> None:
    """The MCP SDK and HTTP clients may log what a server sent; effectagent's own logs stay
    quiet as the library leaves them."""
    out, err = io.StringIO(), io.StringIO()
    with _library_logs(Console(out, err).err):
        logging.getLogger("mcp.client.stdio").warning("bad line: %s", "\x1b]0;pwned\x07")
        logging.getLogger("effectagent.engine").warning("a run failed")
    logging.getLogger("mcp.client.stdio").warning("after the command: not ours")
    assert (out.getvalue(), err.getvalue()) == (
        "",
        "effectagent: mcp.client.stdio: bad line: \\x1b]0;pwned\\x07\n",
    )


# ---- every path to the terminal, for all strings ------------------------------------------------

_NASTY = st.text(
    alphabet=st.one_of(
        st.sampled_from(sorted(_FORBIDDEN | {"\n", "\t", "\r", "\x07", "\x7f", "\u200b"})),
        st.characters(codec="utf-8"),
        st.characters(categories=["Cc", "Cf", "Cs", "Zl", "Zp"]),
    ),
    max_size=40,
)


def _events(text: str) -> list[Any]:
    base: dict[str, Any] = {
        "run_id": "run_1",
        "conversation_id": "conv_1",
        "agent": text,
        "seq": 1,
        "at": 0.0,
    }
    usage = UsageTotals()
    request = ApprovalRequest(
        "run_1", "conv_1", text, text, "call_1", text, (text,), "high", {text: text}, 0.0
    )
    return [
        RunStarted(**base, input=text),
        TextDelta(**base, turn=1, text=text),
        ReasoningDelta(**base, turn=1, text=text),
        ToolCallDeclared(
            **base, turn=1, tool_call_id="call_1", tool_name=text, arguments={"command": text}
        ),
        ToolCallDeclared(
            **base, turn=1, tool_call_id="call_2", tool_name=text, arguments=text
        ),  # arguments that are not JSON
        ToolProgress(**base, turn=1, tool_call_id="call_1", tool_name=text, data=text),
        ApprovalRequested(**base, turn=1, tool_call_id="call_1", tool_name=text, request=request),
        ToolCallFailed(
            **base,
            turn=1,
            tool_call_id="call_1",
            tool_name=text,
            outcome=ToolFailure("call_1", text, {"_tag": text, "message": text}),
        ),
        ToolCallFailed(
            **base,
            turn=1,
            tool_call_id="call_2",
            tool_name=text,
            outcome=ToolInvalidInput("call_2", text, text),
        ),
        BudgetWarning(**base, dimension=text, used=5.005364324999391, limit=6.0),
        RunFailed(**base, error=ModelFailed(text, text), usage=usage),
    ]


@given(_NASTY)
def test_no_rendered_output_holds_an_escape_a_c1_control_or_a_bidi_control(text: str) -> None:
    """The timeline (plain and in colour), the approval prompt's arguments and ``--json``."""
    for color in (False, True):
        out = io.StringIO()
        timeline = Timeline(out, color=color)
        for event in _events(text):
            timeline.render(event)
        timeline.close()
        written = out.getvalue()
        if color:  # our own styles are the only escapes: take them out, nothing else may be left
            for code in (*STYLES.values(), "\x1b[0m"):
                written = written.replace(code, "")
        assert not _FORBIDDEN & set(written)
        assert not any(is_hidden(c) for c in written if c not in "\n\t")
    for line in argument_lines({text: [text, {"k": text}]}):
        assert not any(is_hidden(char) for char in line)
    for event in _events(text):
        encoded = event_json(event)
        assert not any(is_hidden(char) for char in encoded)
        assert json.loads(encoded)["run_id"] == "run_1"


@given(_NASTY)
def test_json_events_carry_the_text_exactly(text: str) -> None:
    (event,) = [e for e in _events(text) if isinstance(e, TextDelta)]
    assert json.loads(event_json(event))["text"] == text
