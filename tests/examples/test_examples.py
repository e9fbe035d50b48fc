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
    CompactionPerformed,
    ModelResponseRecorded,
    RunCompletedRecord,
    SubagentCompleted,
    SubagentEvent,
    SubagentStarted,
    ToolApprovalDecided,
    ToolCallSettled,
    ToolCallStarted,
    ToolCallSucceeded,
    UserInputRecorded,
)
from effectagent.engine import estimate_tokens
from effectagent.testing import ScriptedModel
from examples import demo, embed_in_trio_service
from examples.ops import world
from examples.ops.model import PromptCachingModel
from examples.ops.script import QUESTION, STEERING
from examples.ops.timeline import Narrator

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
            if lines and line.removeprefix("  | ").startswith(" " * 15):
                lines[-1] += " " + line.removeprefix("  | ").strip()
            else:
                lines.append(line)
        return lines

    def index(self, *needles: str) -> int:
        """The number of the only line holding every needle."""
        found = [i for i, line in enumerate(self.lines) if all(n in line for n in needles)]
        assert len(found) == 1, (needles, [self.lines[i] for i in found])
        return found[0]

    def starting(self, prefix: str) -> list[int]:
        """The numbers of the lines starting with ``prefix``."""
        return [i for i, line in enumerate(self.lines) if line.startswith(prefix)]

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
    assert make_demo.lines[0].startswith("effectagent demo: an operations assistant")
    assert make_demo.with_all("▶ ops-assistant checkout-api has been returning 503s")


def test_diagnostics_run_in_parallel(make_demo: DemoRun) -> None:
    """The logs and both metrics are one batch: declared together, all started before any
    finished (the note reads the events' order and times)."""
    declared = make_demo.starting("▸ recent_logs") + make_demo.starting("▸ metrics")
    settled = make_demo.starting("✓ recent_logs") + make_demo.starting("✓ metrics")
    assert len(declared) == len(settled) == 3
    assert max(declared) < min(settled)
    note = make_demo.index("» parallel", "3 calls in one batch")
    assert "all started before the first finished" in make_demo.lines[note]
    assert max(settled) < note
    match = re.search(r"(\d+) ms for (\d+) ms of calls", make_demo.lines[note])
    assert match is not None
    assert int(match.group(1)) < int(match.group(2))


def test_grep_runs_in_the_sandbox_over_the_workspace(make_demo: DemoRun) -> None:
    pattern = re.compile(r"refund-export: batch [0-9]+ upload failed")
    expected = [n for n, line in enumerate(world.log_lines(), 1) if pattern.search(line)]
    (settled,) = make_demo.starting("✓ grep_logs")
    assert f'{{"matches":{len(expected)},"first":["{expected[0]}:' in make_demo.lines[settled]
    sandbox = make_demo.lines[settled + 1]
    assert sandbox.startswith("» sandbox")
    assert (
        "grep in bubblewrap (namespaces), /workspace read-only, network none, exit 0: "
        f"{len(expected)} matching lines"
    ) in sandbox
    assert make_demo.with_all("sandbox", "bubblewrap", "security boundary True")


def test_a_code_mode_pass_compares_the_replicas(make_demo: DemoRun) -> None:
    (program,) = make_demo.with_all("» code mode", "the model's program")
    assert "ops.metrics({ service:" in program
    (result,) = make_demo.with_all("» code mode", "the pass printed")
    assert "['compared 6 series of 30 points']" in result
    for replica in range(len(world.REPLICAS)):
        full = world.clock(world.saturated(replica))
        assert f'"replica": "checkout-api-{replica}", "pool_full_at": "{full}"' in result
    assert make_demo.starting("✓ run_program")[0] < make_demo.index("the pass printed")


def test_steering_is_admitted_at_the_next_safe_point(make_demo: DemoRun) -> None:
    read = make_demo.index("» on-call", "reads #inc-4711-checkout")
    steered = make_demo.index("» steering", "accepted", "durable True")
    (posted,) = make_demo.starting("✓ post_incident_update")
    admitted = make_demo.index("» steering", "admitted at the next safe point")
    answer = make_demo.index("As Dana asks, the database specialist checks orders-db.")
    assert read < steered < posted < admitted < answer
    assert "before turn 5's model request" in make_demo.lines[admitted]
    assert STEERING in make_demo.lines[steered]


def test_compaction_happens_once(make_demo: DemoRun) -> None:
    (line,) = make_demo.with_all("⇲ context compacted")
    match = re.search(r"\(clear-tool-results\): (\d+) → (\d+) tokens", line)
    assert match is not None
    before, after = int(match.group(1)), int(match.group(2))
    assert after < demo.CONTEXT_LIMIT < before
    (note,) = make_demo.with_all("» compaction", "CompactionPerformed before turn 5")
    assert f"{before} → {after} tokens" in note


def test_a_subagent_looks_into_the_database(make_demo: DemoRun) -> None:
    (call,) = make_demo.starting("▸ ask_db_specialist")
    (child,) = make_demo.starting("  ▶ db-specialist orders-db: orders-db paged")
    (db,) = make_demo.starting("  ✓ db_status")
    (done,) = make_demo.starting("  ↲ subagent completed: 2 turns, 2 tool calls")
    (answered,) = make_demo.starting("✓ ask_db_specialist")
    assert call < child < db < done < answered
    assert '"cause":"58 sessions of checkout-api' in make_demo.lines[answered]


def test_the_runbook_comes_from_the_mcp_server(make_demo: DemoRun) -> None:
    assert make_demo.with_all("mcp", "runbooks 3.1.0 over stdio", "runbook_lookup")
    (lookup,) = make_demo.starting("✓ runbook_lookup")
    assert '{"server":{"name":"runbooks","version":"3.1.0"' in make_demo.lines[lookup]
    assert make_demo.lines[lookup + 1].startswith(
        "» mcp          runbooks 3.1.0: checkout-api runbook."
    )
    assert make_demo.with_all("» mcp", "deploy 2.14.0 (build 8c1f2e4)")


def test_approvals_are_decided_by_policy(make_demo: DemoRun) -> None:
    assert make_demo.starting("? restart_service waits for approval")
    assert make_demo.starting("? terminate_db_sessions waits for approval")
    (restart,) = make_demo.with_all("» approval", "restart_service")
    assert "approved by policy — approved by rolling restarts of checkout services" in restart
    (kill,) = make_demo.with_all("» approval", "terminate_db_sessions")
    assert "denied by policy — destructive actions are for the DBA on call" in kill
    (rejected,) = make_demo.starting("✗ terminate_db_sessions")
    assert "rejected: approval denied: destructive actions" in make_demo.lines[rejected]
    (restarted,) = make_demo.starting("✓ restart_service")
    assert '"replicas_replaced":3' in make_demo.lines[restarted]


def test_a_second_process_continues_the_stored_session(make_demo: DemoRun) -> None:
    saved = re.search(r"» session\s+process (\d+) saved (session_\w+)", make_demo.stdout)
    reopened = re.search(
        r"\| » reopened\s+process (\d+): session '(session_\w+)' \(revision 1\)",
        make_demo.stdout,
    )
    assert saved is not None
    assert reopened is not None
    assert saved.group(1) != reopened.group(1), "the session is reopened by another process"
    assert saved.group(2) == reopened.group(2)
    assert make_demo.with_all("| » history", "user from sam (SRE)")
    assert make_demo.with_all("| » history", f"steering from dana (on-call): {STEERING}")
    carried = re.search(r"\|.*the model's request carried (\d+) earlier messages", make_demo.stdout)
    assert carried is not None
    assert int(carried.group(1)) >= 10
    assert make_demo.with_all("| INC-4711 (checkout-api, 09:17-09:41 UTC)")
    assert make_demo.with_all("| » session", "now at revision 2")


def test_the_totals_add_up(make_demo: DemoRun) -> None:
    match = TOTALS.search(make_demo.stdout)
    assert match is not None
    total, read, write, uncached, output = map(int, match.groups())
    assert total == read + write + uncached
    assert read > 0
    assert write > 0
    assert output > 0
    usage = f"usage: input {total} · output {output} · cache read {read} · cache write {write}"
    assert make_demo.starting(usage), "the timeline's usage line and the totals agree"
    assert "turns       8 (10 model calls, the subagent's included)" in make_demo.stdout
    assert re.search(r"tool calls  \d+\n", make_demo.stdout)
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
        (delegated,) = [
            r for r in records if isinstance(r, ToolCallSettled) and r.tool_call_id == "dba"
        ]
        child = delegated.audit["subagent"]
        child_records = [e.record for e in await runtime.log.entries(child["conversation_id"])]
    inputs = [(r.kind, r.text) for r in records if isinstance(r, UserInputRecorded)]
    assert inputs[:2] == [("user", QUESTION), ("steering", STEERING)]
    assert inputs[2][0] == "user"
    assert "postmortem" in inputs[2][1]
    # The steering came after turn 4's batch settled, before the model's turn 5.
    steering = next(
        i
        for i, r in enumerate(records)
        if isinstance(r, UserInputRecorded) and r.kind == "steering"
    )
    update = next(
        i
        for i, r in enumerate(records)
        if isinstance(r, ToolCallSettled) and r.tool_call_id == "update"
    )
    response = next(r for r in records[steering:] if isinstance(r, ModelResponseRecorded))
    assert update < steering
    assert response.turn == 5
    assert len([r for r in records if isinstance(r, CompactionCreated)]) == 1
    decisions = sorted(
        (r.tool_call_id, r.decision.approved) for r in records if isinstance(r, ToolApprovalDecided)
    )
    assert decisions == [("kill", False), ("restart", True)]
    assert len([r for r in records if isinstance(r, RunCompletedRecord)]) == 2
    # The subagent ran in a conversation of its own, told only its task.
    assert child["agent"] == "db-specialist"
    assert child["status"] == "completed"
    (task,) = [r for r in child_records if isinstance(r, UserInputRecorded)]
    assert task.text.startswith("orders-db: orders-db paged at 09:20")


async def test_main_in_process_returns_its_events(tmp_path: Path) -> None:
    out = io.StringIO()
    outcome = await demo.main(out, color=False, state_dir=tmp_path)
    assert outcome.status == "completed"
    assert outcome.resumed == 0
    assert outcome.database == tmp_path / demo.DB_NAME
    assert outcome.usage is not None
    assert outcome.usage.model_calls == 10
    assert outcome.session_id in out.getvalue().splitlines()[-1]
    # The diagnostics batch, by the events themselves: all started before the first settled.
    events = outcome.events
    ids = {"logs", "5xx", "pool"}
    started = [e.seq for e in events if isinstance(e, ToolCallStarted) and e.tool_call_id in ids]
    settled = [e.seq for e in events if isinstance(e, ToolCallSucceeded) and e.tool_call_id in ids]
    assert len(started) == len(settled) == 3
    assert max(started) < min(settled)
    assert [type(e) for e in events if isinstance(e, CompactionPerformed)] == [CompactionPerformed]
    (begun,) = [e for e in events if isinstance(e, SubagentStarted)]
    (ended,) = [e for e in events if isinstance(e, SubagentCompleted)]
    assert begun.child_agent == "db-specialist"
    assert ended.status == "completed"
    assert any(
        isinstance(e, SubagentEvent) and e.child_run_id == begun.child_run_id for e in events
    )


async def test_resuming_a_session_that_is_not_there_says_so(tmp_path: Path) -> None:
    database = tmp_path / "empty.db"
    async with open_runtime(sqlite_storage(database)):
        pass  # a database with no session in it
    out = io.StringIO()
    assert await demo.resume(database, "session_missing", out, False) == 1
    assert "no session session_missing" in out.getvalue()


@pytest.mark.parametrize("name", ["missing.db", "no-such-directory/missing.db"])
async def test_resuming_from_a_database_that_is_not_there_says_so_and_creates_nothing(
    tmp_path: Path, name: str
) -> None:
    out = io.StringIO()
    assert await demo.resume(tmp_path / name, "session_x", out, False) == 1
    assert out.getvalue() == f"no database at {tmp_path / name}\n"
    assert list(await trio.Path(tmp_path).iterdir()) == []


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


def test_notes_are_coloured_only_when_asked() -> None:
    plain, painted = io.StringIO(), io.StringIO()
    Narrator(plain, False).note("steering", "accepted")
    Narrator(painted, True).note("steering", "accepted")
    assert not ANSI.search(plain.getvalue())
    assert ANSI.search(painted.getvalue())
    assert ANSI.sub("", painted.getvalue()) == plain.getvalue()


async def test_embedding_in_a_trio_service(autojump_clock: trio.testing.MockClock) -> None:
    reports: list[str] = []
    statuses = await embed_in_trio_service.main(reports.append)

    assert statuses == {"slow": "interrupted", "quick": "completed"}
    assert any("RunFailed('interrupted')" in r for r in reports)
    assert "runs still active: 0" in reports
    # The slow request was cut off by its own deadline, not by the quick one finishing.
    assert trio.current_time() >= embed_in_trio_service.REQUEST_DEADLINE
