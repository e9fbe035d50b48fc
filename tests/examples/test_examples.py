"""The examples run in CI: each example's ``main`` runs in-process, on Trio's mock clock."""

from __future__ import annotations

import io
import re

import pytest
import trio
import trio.testing

from examples import demo, embed_in_trio_service

ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _lines_with(text: str, *needles: str) -> list[str]:
    return [line for line in text.splitlines() if all(n in line for n in needles)]


async def test_demo_timeline_shows_every_feature(autojump_clock: trio.testing.MockClock) -> None:
    out = io.StringIO()
    result = await demo.main(out)
    text = out.getvalue()

    assert result.status == "completed"
    assert not ANSI.search(text), "captured output must be plain"
    # Parallel tools: all three start before any finishes; they finish by latency, not order.
    started = _lines_with(text, "ToolCallStarted", "forecast")[:3]
    assert all(line.lstrip().startswith("+0.000s") for line in started)
    succeeded = _lines_with(text, "ToolCallSucceeded", "ToolSuccess city=")
    assert [line.split()[0] for line in succeeded] == ["+0.050s", "+0.120s", "+0.200s"]
    assert [line.split()[2] for line in succeeded] == ["call_rome", "call_lima", "call_oslo"]
    # A declared failure the model sees, and an invalid input with path-bearing issues.
    assert _lines_with(text, "ToolCallFailed", "call_atlantis", "ToolFailure UnknownCity")
    (invalid,) = _lines_with(text, "ToolCallFailed", "call_typo", "ToolInvalidInput")
    issues = text[text.index(invalid) :].splitlines()[1:4]
    paths = [issue.strip().removeprefix("- ").split(":")[0] for issue in issues]
    assert paths == ["$.city", "$.days", "$.town"]
    # An oversized result became the truncation marker, with the original size.
    (truncated,) = _lines_with(text, "ToolCallSucceeded", "call_log")
    match = re.search(r"Truncated\(original_bytes=(\d+)\)", truncated)
    assert match is not None
    assert int(match.group(1)) > demo.AGENT.policy.tool_result_bounds.max_bytes
    # The budget warning at 80 % of the tool-call budget, then the answer.
    assert _lines_with(text, "BudgetWarning", "tool_calls: 5 of 6 used (83%)")
    (completed,) = _lines_with(text, "RunCompleted")
    assert "finish 'stop' after 4 turns, 5 calls" in completed
    # The summary: cache-aware usage and outcomes by kind.
    assert "cache read 2854, cache write 640" in text
    assert "outcomes    failure 1, invalid-input 1, success 4" in text
    assert result.text.startswith("Lima is warmest today")


async def test_demo_colours_only_on_request(autojump_clock: trio.testing.MockClock) -> None:
    out = io.StringIO()
    await demo.main(out, color=True)
    assert ANSI.search(out.getvalue())


def test_demo_command_line_exits_zero(capsys: pytest.CaptureFixture[str]) -> None:
    """``python -m examples.demo`` in-process: the default (mock) clock, plain output."""
    assert demo.cli([]) == 0
    assert "RunCompleted" in capsys.readouterr().out


async def test_embedding_in_a_trio_service(autojump_clock: trio.testing.MockClock) -> None:
    reports: list[str] = []
    statuses = await embed_in_trio_service.main(reports.append)

    assert statuses == {"slow": "interrupted", "quick": "completed"}
    assert any("RunFailed('interrupted')" in r for r in reports)
    assert "runs still active: 0" in reports
    # The slow request was cut off by its own deadline, not by the quick one finishing.
    assert trio.current_time() >= embed_in_trio_service.REQUEST_DEADLINE
