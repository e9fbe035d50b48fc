"""The examples run in CI.

``make demo`` is run as the command it is (``python -m examples.demo``, in a subprocess, with its
SQLite file in the test's own directory) and every capability's line is looked for in its output;
then the database it left is opened and checked against what it printed. Its expected values are
computed here from the simulated world (:mod:`examples.ops.world`), not copied from a run.
"""

from __future__ import annotations

import io
import re
import subprocess
import sys
from pathlib import Path

import attrs
import pytest
import trio
import trio.testing

from capabilities import SessionStoreService, sqlite_storage
from effectagent import open_runtime
from effectagent.ai import ModelRequest, SystemMessage, Usage, UserMessage
from effectagent.core import (
    CompactionCreated,
    RunCompletedRecord,
    ToolApprovalDecided,
    UserInputRecorded,
)
from effectagent.engine import estimate_tokens
from effectagent.testing import ScriptedModel
from examples import demo, embed_in_trio_service
from examples.ops import world
from examples.ops.model import PromptCachingModel
from examples.ops.script import QUESTION, STEERING
from examples.ops.timeline import Timeline

REPO = Path(__file__).resolve().parents[2]
ANSI = re.compile(r"\x1b\[[0-9;]*m")
TOTALS = re.compile(
    r"input\s+(\d+) tokens: cache read (\d+), cache write (\d+), uncached (\d+)\n"
    r"output\s+(\d+) tokens"
)


@attrs.frozen
class DemoRun:
    returncode: int
    stdout: str
    stderr: str
    state: Path

    @property
    def lines(self) -> list[str]:
        """The output's lines, each wrapped line joined again (a continuation is indented)."""
        lines: list[str] = []
        for line in self.stdout.splitlines():
            if lines and line.removeprefix("  | ").startswith(" " * 10):
                lines[-1] += " " + line.removeprefix("  | ").strip()
            else:
                lines.append(line)
        return lines

    def index(self, *needles: str) -> int:
        """The number of the only line holding every needle."""
        found = [i for i, line in enumerate(self.lines) if all(n in line for n in needles)]
        assert len(found) == 1, (needles, [self.lines[i] for i in found])
        return found[0]

    def with_all(self, *needles: str) -> list[str]:
        return [line for line in self.lines if all(n in line for n in needles)]


@pytest.fixture(scope="module")
def make_demo(tmp_path_factory: pytest.TempPathFactory) -> DemoRun:
    """``python -m examples.demo`` (what ``make demo`` runs), once for this module's tests."""
    state = tmp_path_factory.mktemp("demo-state")
    done = subprocess.run(
        [sys.executable, "-m", "examples.demo", "--no-color", "--state-dir", str(state)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    return DemoRun(done.returncode, done.stdout, done.stderr, state)


def test_the_demo_exits_zero_with_plain_output(make_demo: DemoRun) -> None:
    assert make_demo.returncode == 0, make_demo.stdout + make_demo.stderr
    assert not ANSI.search(make_demo.stdout), "output that is not a terminal must be plain"
    assert (make_demo.state / demo.DB_NAME).is_file()
    (completed,) = make_demo.with_all("RunCompleted", "stop after 8 turns")
    assert "19 tool calls" in completed


def test_diagnostics_run_in_parallel(make_demo: DemoRun) -> None:
    """The logs and both metrics are one batch: all three start before any of them finishes."""
    ids = ["logs", "5xx", "pool"]
    started = [make_demo.index("ToolCallStarted", f" {cid} ") for cid in ids]
    finished = [make_demo.index("ToolCallSucceeded", f" {cid} ") for cid in ids]
    assert max(started) < min(finished)
    turn = make_demo.index("TurnStarted", "turn 2"), make_demo.index("TurnCompleted", "turn 2,")
    assert turn[0] < min(started)
    assert max(finished) < turn[1]


def test_grep_runs_in_the_sandbox_over_the_workspace(make_demo: DemoRun) -> None:
    pattern = re.compile(r"refund-export: batch [0-9]+ upload failed")
    expected = [n for n, line in enumerate(world.log_lines(), 1) if pattern.search(line)]
    (line,) = make_demo.with_all("ToolCallSucceeded", " grep ")
    assert f'"matches": {len(expected)}' in line
    assert f'"first": ["{expected[0]}:2026-12-03T09:13:08Z' in line
    assert "bubblewrap" in make_demo.with_all("sandbox", "security boundary True")[0]
    assert "/workspace read-only, network none, exit 0" in line


def test_a_code_mode_pass_compares_the_replicas(make_demo: DemoRun) -> None:
    start = make_demo.index("ToolCallSucceeded", " program ")
    result = make_demo.lines[start]
    for replica in range(len(world.REPLICAS)):
        full = world.clock(world.saturated(replica))
        assert f'"replica": "checkout-api-{replica}", "pool_full_at": "{full}"' in result
    assert make_demo.with_all("Deno inside bubblewrap")
    assert make_demo.index("ToolCallStarted", " program ") < start


def test_steering_is_admitted_at_the_next_safe_point(make_demo: DemoRun) -> None:
    posted = make_demo.index("* incident channel", "#inc-4711-checkout")
    steered = make_demo.index("* steering ", "accepted", "durable True")
    turn_4_done = make_demo.index("TurnCompleted", "turn 4,")
    turn_5 = make_demo.index("TurnStarted", "turn 5")
    admitted = make_demo.index("* steering admitted", "before turn 5's model request")
    answer_5 = next(
        i for i, line in enumerate(make_demo.lines) if i > turn_5 and "TextDelta" in line
    )
    assert posted < steered < turn_4_done < turn_5 < admitted < answer_5
    assert "As Dana asks, checking orders-db too." in make_demo.lines[answer_5]


def test_compaction_happens_once(make_demo: DemoRun) -> None:
    (line,) = make_demo.with_all("CompactionPerformed")
    match = re.search(r"clear-tool-results: (\d+) → (\d+) tokens", line)
    assert match is not None
    before, after = int(match.group(1)), int(match.group(2))
    assert after < demo.CONTEXT_LIMIT < before


def test_the_runbook_comes_from_the_mcp_server(make_demo: DemoRun) -> None:
    assert make_demo.with_all("mcp", "runbooks 3.1.0 over stdio", "runbook_lookup")
    (lookup,) = make_demo.with_all("ToolCallSucceeded", " runbook ")
    assert "[runbooks 3.1.0] checkout-api runbook." in lookup
    (changes,) = make_demo.with_all("ToolCallSucceeded", " changes ")
    assert "deploy 2.14.0" in changes


def test_approvals_are_decided_by_policy(make_demo: DemoRun) -> None:
    (restart,) = make_demo.with_all("* approval decided", "restart_service")
    assert "approved by policy" in restart
    assert "rolling restarts of checkout services" in restart
    (kill,) = make_demo.with_all("* approval decided", "terminate_db_sessions")
    assert "denied by policy" in kill
    (rejected,) = make_demo.with_all("ToolCallFailed", " kill ")
    assert "rejected: approval denied: destructive actions" in rejected
    assert make_demo.with_all("ToolCallSucceeded", " restart ", '"replicas_replaced": 3')


def test_a_second_process_continues_the_stored_session(make_demo: DemoRun) -> None:
    saved = re.search(r"\* session\s+process (\d+) saved (session_\w+)", make_demo.stdout)
    reopened = re.search(
        r"\|.*\* reopened\s+process (\d+): session '(session_\w+)' \(revision 1\)",
        make_demo.stdout,
    )
    assert saved is not None
    assert reopened is not None
    assert saved.group(1) != reopened.group(1), "the session is reopened by another process"
    assert saved.group(2) == reopened.group(2)
    assert make_demo.with_all("|", "* history", "user from sam (SRE)")
    assert make_demo.with_all("|", "* history", f"steering from dana (on-call): {STEERING[:40]}")
    carried = re.search(r"\|.*the model's request carried (\d+) earlier messages", make_demo.stdout)
    assert carried is not None
    assert int(carried.group(1)) >= 10
    assert make_demo.with_all("|", "RunCompleted", "stop after 1 turns")
    assert make_demo.with_all("|", "* session", "now at revision 2")


def test_the_totals_add_up(make_demo: DemoRun) -> None:
    match = TOTALS.search(make_demo.stdout)
    assert match is not None
    total, read, write, uncached, output = map(int, match.groups())
    assert total == read + write + uncached
    assert read > 0
    assert write > 0
    assert output > 0
    assert "turns       8 (8 model calls)" in make_demo.stdout
    assert "tool calls  19" in make_demo.stdout
    assert f"in {make_demo.state / demo.DB_NAME}" in make_demo.lines[-1]


async def test_the_database_holds_what_the_demo_printed(make_demo: DemoRun) -> None:
    session_id = re.search(r"saved (session_\w+)", make_demo.stdout)
    assert session_id is not None
    async with open_runtime(sqlite_storage(make_demo.state / demo.DB_NAME), agents=[]) as runtime:
        session = await runtime.context[SessionStoreService].get(session_id.group(1))
        assert session is not None
        assert session.revision == 2
        assert session.metadata["postmortem"] == "drafted"
        (conversation,) = session.conversations
        records = [entry.record for entry in await runtime.log.entries(conversation)]
    inputs = [(r.kind, r.text) for r in records if isinstance(r, UserInputRecorded)]
    assert inputs[:2] == [("user", QUESTION), ("steering", STEERING)]
    assert inputs[2][0] == "user"
    assert "postmortem" in inputs[2][1]
    assert len([r for r in records if isinstance(r, CompactionCreated)]) == 1
    decisions = sorted(
        (r.tool_call_id, r.decision.approved) for r in records if isinstance(r, ToolApprovalDecided)
    )
    assert decisions == [("kill", False), ("restart", True)]
    assert len([r for r in records if isinstance(r, RunCompletedRecord)]) == 2


async def test_main_in_process_returns_its_outcome(tmp_path: Path) -> None:
    out = io.StringIO()
    outcome = await demo.main(out, color=False, state_dir=tmp_path)
    assert outcome.status == "completed"
    assert outcome.resumed == 0
    assert outcome.database == tmp_path / demo.DB_NAME
    assert outcome.usage is not None
    assert outcome.usage.model_calls == 8
    assert outcome.session_id in out.getvalue().splitlines()[-1]


async def test_resuming_a_session_that_is_not_there_says_so(tmp_path: Path) -> None:
    out = io.StringIO()
    assert await demo.resume(tmp_path / "empty.db", "session_missing", out, False) == 1
    assert "no session session_missing" in out.getvalue()


def test_the_prompt_cache_reads_the_prefix_it_saw_before() -> None:
    cache = PromptCachingModel(ScriptedModel())
    system = SystemMessage("You are terse.")
    first = (system, UserMessage.text("one " * 40))
    second = (*first, UserMessage.text("two " * 40))
    reported = Usage.of(0, 7)
    usage = cache.usage(ModelRequest(first), reported)
    assert (usage.input.cache_read, usage.input.cache_write) == (0, estimate_tokens(first))
    usage = cache.usage(ModelRequest(second), reported)
    assert usage.input.cache_read == estimate_tokens(first)
    assert usage.input.total == estimate_tokens(second)
    assert usage.output.total == 7
    other = (SystemMessage("Another agent."), *first[1:])  # another agent: its own cache
    assert cache.usage(ModelRequest(other), reported).input.cache_read == 0


def test_the_timeline_colours_only_when_asked() -> None:
    plain, painted = io.StringIO(), io.StringIO()
    Timeline(plain, False).note("steering", "accepted")
    Timeline(painted, True).note("steering", "accepted")
    assert not ANSI.search(plain.getvalue())
    assert ANSI.search(painted.getvalue())
    assert ANSI.sub("", painted.getvalue()).split()[1:] == plain.getvalue().split()[1:]


async def test_embedding_in_a_trio_service(autojump_clock: trio.testing.MockClock) -> None:
    reports: list[str] = []
    statuses = await embed_in_trio_service.main(reports.append)

    assert statuses == {"slow": "interrupted", "quick": "completed"}
    assert any("RunFailed('interrupted')" in r for r in reports)
    assert "runs still active: 0" in reports
    # The slow request was cut off by its own deadline, not by the quick one finishing.
    assert trio.current_time() >= embed_in_trio_service.REQUEST_DEADLINE
