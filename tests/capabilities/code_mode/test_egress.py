"""Egress (CAP-016) and the wrapper's report, without a sandbox: what a pass shows the model fits
one byte budget and is made of whole parts; failed calls reach the program as framework envelopes.
"""

from __future__ import annotations

from typing import Any

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from capabilities.code_mode import CodeModeFailed, CodeModeOutput
from capabilities.code_mode._egress import (
    MIN_EGRESS_BYTES,
    Lines,
    failure_egress,
    json_size,
    success_egress,
)
from capabilities.code_mode._pass import FRAMEWORK_TAGS, framework_envelope
from capabilities.code_mode._program import Report, read_report, strip_fence
from effectagent.ai import encode_failure
from effectagent.effect import JSONValue, checked_encoder
from sandbox import LogLine

ENCODE = checked_encoder(CodeModeOutput)

JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
LINES = st.lists(
    st.builds(LogLine, st.sampled_from(["log", "info", "warn", "error", "debug"]), st.text()),
    max_size=30,
)
BUDGETS = st.integers(MIN_EGRESS_BYTES, 4 * MIN_EGRESS_BYTES)


def shown_size(outcome: CodeModeOutput | CodeModeFailed) -> int:
    """The bytes the engine encodes for the model."""
    if isinstance(outcome, CodeModeFailed):
        return json_size(encode_failure(outcome))
    return json_size(ENCODE(outcome))


def whole_prefix(kept: tuple[str, ...], lines: list[LogLine]) -> bool:
    texts = [line.text if line.level == "log" else f"[{line.level}] {line.text}" for line in lines]
    return list(kept) == texts[: len(kept)]


@given(JSON, LINES, st.booleans(), BUDGETS)
def test_a_finished_pass_fits_the_budget_with_whole_lines_in_order(
    value: Any, lines: list[LogLine], cut: bool, budget: int
) -> None:
    outcome = success_egress(value, Lines(tuple(lines), cut), budget, ENCODE)
    assert shown_size(outcome) <= budget
    assert whole_prefix(outcome.logs, lines)
    if cut and lines:  # the executor may have cut its last line: that one never shows
        assert len(outcome.logs) < len(lines)
    assert outcome.logs_truncated == (cut or len(outcome.logs) < len(lines))
    if isinstance(outcome, CodeModeOutput):
        assert outcome.result == value
    else:
        assert outcome.kind == "result-too-large"
        assert f"is {json_size(value)} bytes" in outcome.message


@given(st.text(), LINES, BUDGETS)
def test_a_failure_fits_the_budget_and_a_message_too_large_is_withheld_whole(
    message: str, lines: list[LogLine], budget: int
) -> None:
    outcome = failure_egress("threw", message, Lines(tuple(lines), False), budget, withheld="W")
    assert shown_size(outcome) <= budget
    assert outcome.message in (message, "W")
    assert (outcome.message == "W") == (
        json_size(encode_failure(CodeModeFailed("threw", message))) > budget
    )
    assert whole_prefix(outcome.logs, lines)
    assert outcome.logs_truncated == (len(outcome.logs) < len(lines))


def test_a_result_over_the_budget_says_its_size_and_keeps_what_fits() -> None:
    lines = Lines((LogLine("warn", "careful"),), False)
    outcome = success_egress("x" * 2000, lines, 1024, ENCODE)
    assert isinstance(outcome, CodeModeFailed)  # exceptions compare by identity: compare fields
    assert attrs.astuple(outcome) == (
        "result-too-large",
        "the program's result is 2002 bytes, over the egress budget of 1024 bytes (shared with "
        "console output): return less — filter, aggregate or summarize in the program",
        ("[warn] careful",),
        False,
    )


def test_the_last_line_the_executor_cut_is_dropped() -> None:
    lines = Lines((LogLine("log", "whole"), LogLine("log", "the start of a secr")), True)
    assert success_egress(1, lines, 1024, ENCODE) == CodeModeOutput(1, ("whole",), True)


# ---- the framework envelope of a failed call ----------------------------------------------------


@pytest.mark.parametrize("tag", sorted(FRAMEWORK_TAGS))
def test_the_engines_envelopes_reach_the_program_unchanged(tag: str) -> None:
    envelope: dict[str, JSONValue] = {"_tag": tag, "message": "why"}
    assert framework_envelope(envelope) is envelope


def test_a_result_its_type_refuses_reaches_the_program_without_its_value() -> None:
    # The engine's defect quotes the offending value; what a tool returned stays in the pass.
    envelope: dict[str, JSONValue] = {
        "_tag": "ToolDefect",
        "message": "result violates its schema:\n- $.n: expected an integer, got 'tool-private'\n"
        "- $.tags[0]: expected a string, got 7",
    }
    assert framework_envelope(envelope) == {
        "_tag": "ToolDefect",
        "message": "result violates its schema:\n- $.n: expected an integer\n"
        "- $.tags[0]: expected a string",
    }
    single: dict[str, JSONValue] = {
        "_tag": "ToolDefect",
        "message": "result violates its schema: $: expected an integer, got 'secret'",
    }
    assert framework_envelope(single)["message"] == (
        "result violates its schema: $: expected an integer"
    )


def test_a_declared_error_becomes_a_tool_failure_holding_it() -> None:
    declared: dict[str, JSONValue] = {
        "_tag": "UnknownCity",
        "message": "UnknownCity(city='X')",
        "city": "X",
    }
    assert framework_envelope(declared) == {
        "_tag": "ToolFailure",
        "message": "UnknownCity(city='X')",
        "error": declared,
    }
    assert framework_envelope("not an envelope")["_tag"] == "ToolDefect"


# ---- the program and its report -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("source", "program"),
    [
        ("  async () => 1\n", "async () => 1"),
        ("```js\nasync () => 1\n```", "async () => 1"),
        ("```\nasync () => 1\n```", "async () => 1"),
        ("```typescript\nasync () => 1\n```", "async () => 1"),
        ("```python\nasync () => 1\n```", "```python\nasync () => 1\n```"),
        ("```async () => 1```", "```async () => 1```"),
    ],
)
def test_one_enclosing_code_fence_is_taken_off_and_nothing_else(source: str, program: str) -> None:
    assert strip_fence(source) == program


@pytest.mark.parametrize(
    ("raw", "report"),
    [
        ([0, {"a": 1}], Report("value", value={"a": 1})),
        ([0, None], Report("value", value=None)),
        ([1, "TypeError", "no"], Report("threw", name="TypeError", message="no")),
        ([1, "Error", None, 9000], Report("threw", name="Error", size=9000)),
        ([2, "why"], Report("invalid", message="why")),
        ([9], None),
        ([False, 1], None),
        ([0, 1, 2], None),
        ({"ok": True}, None),
        ("[0, 1]", None),
    ],
)
def test_only_the_wrappers_own_reports_are_read(raw: Any, report: Report | None) -> None:
    assert read_report(raw) == report
