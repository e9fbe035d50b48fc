"""``make demo``: an operations assistant investigating a failing service, as a timeline.

No API key, no network, nothing to start by hand. A :class:`~effectagent.testing.ScriptedModel`
plays an on-call investigation of ``checkout-api`` (503s since 09:15) through the real engine,
and every capability takes part — each visible in the output:

* **parallel tools** — logs and two metrics in one batch, running concurrently;
* a **sandboxed command** — ``grep`` over the log file in bubblewrap, the workspace read-only;
* **Code Mode** — one JavaScript program in Deno (inside bubblewrap) comparing six series;
* **steering** — the on-call engineer reads the assistant's incident update and steers the run
  ("also check the database"); the input is admitted at the next safe point, before the next
  model request;
* **compaction** — a small ``context_token_limit``: old tool results are pruned once;
* a **subagent** — the database specialist, delegated to with ``capabilities.subagents``: its
  run (its own conversation, tools a subset of the assistant's, a carved-out budget) shows
  indented under the call;
* an **MCP server** over stdio — the runbook service (:mod:`examples.ops.runbook_server`);
* **approval by policy** — the restart is approved by a rule, the destructive database action
  denied by another;
* a **persisted session** — the conversation lives in a SQLite file, and a second process
  (``python -m examples.demo --resume ...``) reopens it and continues the conversation;
* **usage totals** — input (cache reads and writes apart), output, turns and tool calls.

The events are shown as ``effectagent chat`` shows them (``capabilities.cli.render.Timeline``);
lines starting with ``»`` are the demo's notes (:mod:`examples.ops.timeline`).

Run it as ``python -m examples.demo [--state-dir DIR] [--no-color]``. The SQLite file goes to
``DIR`` (default: a new temporary directory, printed at the end). It runs on the real clock:
the sandbox, Deno and the MCP server are processes, which a mock clock would race past.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final, TextIO

import attrs
import trio

from capabilities import (
    ApprovalRule,
    LogCompactor,
    PolicyApproval,
    SessionCreate,
    SessionPatch,
    SessionStoreService,
    SteeringService,
    sqlite_storage,
)
from capabilities.code_mode import CodeMode, code_mode
from capabilities.mcp import StdioServer, connect
from capabilities.steering import InputReceipt, Steering
from capabilities.subagents import delegate
from effectagent import Agent, AgentPolicy, ChildBudget, Toolkit, open_runtime
from effectagent.ai import ToolCallContext
from effectagent.core import (
    ApprovalRequested,
    CompactionPolicy,
    EventBase,
    RunCompleted,
    ToolApprovalDecided,
    ToolCallFailed,
    ToolCallStarted,
    TurnStarted,
    UsageTotals,
    UserInputRecorded,
)
from effectagent.engine import Runtime
from effectagent.testing import ScriptedModel
from examples.ops import world
from examples.ops.model import PromptCachingModel
from examples.ops.script import (
    POSTMORTEM_QUESTION,
    QUESTION,
    STEERING,
    postmortem_script,
    script,
)
from examples.ops.timeline import Narrator, compact
from examples.ops.tools import (
    DB_SESSIONS,
    DB_STATUS,
    GREP_LOGS,
    METRICS,
    POST_UPDATE,
    RECENT_LOGS,
    RESTART,
    SERVICE_STATUS,
    TERMINATE,
    DbFinding,
    DbQuestion,
    Ops,
)
from sandbox import BubblewrapSandbox, SandboxUnavailable

__all__ = ["CONTEXT_LIMIT", "DB_NAME", "Outcome", "assistant", "cli", "main", "resume"]

REPO: Final = Path(__file__).resolve().parent.parent
DB_NAME: Final = "ops-assistant.db"
ON_CALL: Final = "dana (on-call)"
CONTEXT_LIMIT: Final = 2_600
HEADER: Final = "effectagent demo: an operations assistant investigates a failing service"
INSTRUCTIONS: Final = (
    "You are the operations assistant of the checkout team. Investigate with the read-only "
    "tools first; keep the incident channel informed; follow the runbook; never guess."
)

RUNBOOKS: Final = StdioServer(
    sys.executable,
    ["-m", "examples.ops.runbook_server"],
    cwd=REPO,
    name="runbooks",
    prefix="runbook",  # the model sees runbook_lookup and runbook_changes
)


DB_SPECIALIST: Final = Agent(
    "db-specialist",
    "You are the database specialist. Find who holds a database's connections and what is safe "
    "to do about it. Answer with JSON.",
    AgentPolicy(max_turns=3, max_tool_calls=4, max_duration=30, tool_concurrency=2),
    Toolkit(DB_STATUS, DB_SESSIONS),  # the same tools the assistant has: a subset of its own
    output=DbFinding,
)
ASK_DB_SPECIALIST: Final = delegate(
    DB_SPECIALIST,
    name="ask_db_specialist",
    description="Ask the database specialist (a subagent) to look into a database.",
    parameters=DbQuestion,
    prompt=lambda question: f"{question.database}: {question.symptom}",
    budget=ChildBudget(turns=3, tool_calls=4),
)


def assistant(code: CodeMode) -> Agent:
    """The operations assistant: its own tools, Code Mode, the database specialist, and the
    runbook server's tools."""
    return Agent(
        "ops-assistant",
        INSTRUCTIONS,
        AgentPolicy(
            max_turns=12,
            max_tool_calls=30,
            max_duration=60,
            tool_concurrency=4,
            # Small on purpose: once the logs have been read, the context outgrows it and the
            # compactor prunes old tool results (prune-only: no summary call to script).
            context_token_limit=CONTEXT_LIMIT,
            compaction=CompactionPolicy(keep_recent_tokens=1_200, strategy="prune-only"),
        ),
        Toolkit(
            SERVICE_STATUS,
            RECENT_LOGS,
            METRICS,
            GREP_LOGS,
            DB_STATUS,
            DB_SESSIONS,
            code.tool,
            ASK_DB_SPECIALIST.tool,
            POST_UPDATE,
            RESTART,
            TERMINATE,
        ),
        tool_sources=(RUNBOOKS.key,),
    )


def approval(agent: Agent) -> PolicyApproval:
    """First match wins; anything else is denied."""
    return PolicyApproval(
        [
            ApprovalRule.deny(
                destructive=True,
                name="nothing destructive",
                reason="destructive actions are for the DBA on call (#dba-oncall)",
            ),
            ApprovalRule.approve(
                tools="restart_service",
                targets="service:checkout-*",
                name="rolling restarts of checkout services",
            ),
        ],
        agents=[agent],
    )


@attrs.define
class OnCall:
    """The on-call engineer: reads each incident update, and steers the run after the first."""

    timeline: Narrator
    steering: Steering | None = None
    receipts: list[InputReceipt] = attrs.Factory(list)  # steering not yet seen delivered
    steered: bool = False

    async def read(self, text: str, call: ToolCallContext) -> str:
        """Read ``text``; answer the first update by steering the run that posted it."""
        self.timeline.note("on-call", f"{ON_CALL} reads #inc-4711-checkout: {compact(text, 100)}")
        if self.steering is not None and not self.steered:
            receipt = await self.steering.steer(call.conversation_id, STEERING, author=ON_CALL)
            self.receipts.append(receipt)
            self.steered = True
            self.timeline.note(
                "steering",
                f"{ON_CALL} steers the run: {STEERING!r} → {receipt.admission} "
                f"(position {receipt.position}, durable {receipt.durable})",
            )
        return ON_CALL


@attrs.frozen
class Outcome:
    """What the demo did: the run's status and totals, where the session lives, the second
    process's exit status."""

    status: str
    usage: UsageTotals | None
    session_id: str
    database: Path
    resumed: int
    events: tuple[EventBase, ...]


async def _annotate(
    event: EventBase, runtime: Runtime, on_call: OnCall, approvals: dict[str, str]
) -> None:
    """The demo's notes on ``event``: steering reaching the run, approval decisions."""
    timeline = on_call.timeline
    match event:
        case TurnStarted(turn=turn) if on_call.receipts and on_call.steering is not None:
            for receipt in list(on_call.receipts):
                status = await on_call.steering.status(receipt.input_id)
                if status is not None and status.state == "delivered":
                    on_call.receipts.remove(receipt)
                    timeline.note(
                        "steering",
                        f"admitted at the next safe point, before turn {turn}'s model request: "
                        f"UserInputRecorded at seq {status.seq}",
                    )
        case ApprovalRequested(tool_call_id=cid, tool_name=tool):
            approvals[cid] = tool
        case ToolCallStarted(tool_call_id=cid) | ToolCallFailed(tool_call_id=cid) if (
            cid in approvals
        ):
            tool = approvals.pop(cid)
            for entry in await runtime.log.entries(event.conversation_id):
                record = entry.record
                if isinstance(record, ToolApprovalDecided) and record.tool_call_id == cid:
                    decision = record.decision
                    verdict = "approved" if decision.approved else "denied"
                    timeline.note(
                        "approval",
                        f"{tool}: {verdict} by {decision.decided_by} — {decision.reason}",
                    )


async def main(
    out: TextIO | None = None, *, color: bool | None = None, state_dir: Path | None = None
) -> Outcome:
    """Run the investigation, continue it in a second process, print it all; return what
    happened. Colour defaults to on when ``out`` is a terminal (and ``NO_COLOR`` is not set).
    Cancellation: cancelling the caller interrupts the run and stops the processes it started."""
    out = sys.stdout if out is None else out
    if color is None:
        color = out.isatty() and "NO_COLOR" not in os.environ
    if state_dir is None:
        state_dir = Path(tempfile.mkdtemp(prefix="effectagent-demo-"))
    database = state_dir / DB_NAME
    on_call = OnCall(Narrator(out, color))
    sandbox = await trio.to_thread.run_sync(BubblewrapSandbox)
    code = code_mode({"ops": [METRICS, SERVICE_STATUS]})
    agent = assistant(code)
    model = PromptCachingModel(ScriptedModel(script()))
    with tempfile.TemporaryDirectory(prefix="effectagent-demo-workspace-") as workspace:
        world.write_workspace(Path(workspace))
        ops = Ops(Path(workspace), sandbox, on_call.read)
        async with connect(RUNBOOKS) as runbooks:
            identity = runbooks.identity
            posture = sandbox.implementation
            print(HEADER, file=out)
            for label, text in [
                ("model", "ScriptedModel: a scripted story, no API key, no network"),
                (
                    "sandbox",
                    f"{posture.name} {posture.version}, {posture.isolation.value}, "
                    f"security boundary {posture.is_security_boundary}: grep_logs runs in it",
                ),
                (
                    "code mode",
                    f"{code.tool.name} over ops.metrics and ops.service_status, "
                    "Deno inside bubblewrap",
                ),
                (
                    "mcp",
                    f"{identity.name} {identity.version} over stdio "
                    f"(python -m examples.ops.runbook_server): "
                    + ", ".join(tool.name for tool in runbooks.tools),
                ),
                (
                    "approval",
                    "policy: deny destructive, approve restart_service on "
                    "service:checkout-*, deny anything else",
                ),
                (
                    "compaction",
                    f"context_token_limit {agent.policy.context_token_limit}, "
                    "prune old tool results only",
                ),
                ("storage", f"SQLite {database}"),
            ]:
                print(f"  {label:<11} {text}", file=out)
            print(file=out)
            timeline = on_call.timeline = Narrator(out, color)  # counts from here
            layer = (
                ops.layer()
                + code.layer
                + ASK_DB_SPECIALIST.layer()
                + runbooks.layer()
                + approval(agent).layer()
                + LogCompactor().layer()
                + model.layer()
                + sqlite_storage(database)
            )
            async with open_runtime(layer, agents=[agent]) as runtime:
                on_call.steering = runtime.context[SteeringService]
                approvals: dict[str, str] = {}
                seen: list[EventBase] = []
                async with runtime.stream(agent, QUESTION, author="sam (SRE)") as events:
                    async for event in events:
                        timeline.render(event)
                        await _annotate(event, runtime, on_call, approvals)
                        seen.append(event)
                conversation = events.conversation_id
                sessions = runtime.context[SessionStoreService]
                session = await sessions.create(
                    SessionCreate(
                        "INC-4711 checkout-api 503s",
                        {"incident": "INC-4711", "service": world.SERVICE},
                        conversations=(conversation,),
                    )
                )
    model.model.assert_consumed()
    print(file=out)
    timeline.note(
        "session",
        f"process {os.getpid()} saved {session.id} (conversation {conversation}) in {database}",
    )
    resumed = await _second_process(database, session.id, out, color)
    terminal = seen[-1]
    usage = terminal.usage if isinstance(terminal, RunCompleted) else None
    _totals(terminal, database, session.id, out)
    status = "completed" if isinstance(terminal, RunCompleted) else type(terminal).__name__
    return Outcome(status, usage, session.id, database, resumed, tuple(seen))


async def _second_process(database: Path, session_id: str, out: TextIO, color: bool) -> int:
    """``python -m examples.demo --resume`` on the same file; its output, indented."""
    command = [sys.executable, "-m", "examples.demo", "--resume", "--db", str(database)]
    command += ["--session", session_id] + ([] if color else ["--no-color"])
    print(f"$ python -m examples.demo --resume --db {database} --session {session_id}", file=out)
    process = await trio.run_process(
        command, cwd=REPO, check=False, capture_stdout=True, stderr=subprocess.STDOUT
    )
    for line in process.stdout.decode().splitlines():
        print(f"  | {line}", file=out)
    return process.returncode


def _totals(terminal: EventBase, database: Path, session_id: str, out: TextIO) -> None:
    if not isinstance(terminal, RunCompleted):
        print(f"\nthe run did not complete: {terminal!r}", file=out)
        return
    usage = terminal.usage
    uncached = usage.input_tokens - usage.cache_read_input_tokens - usage.cache_write_input_tokens
    for line in [
        "",
        f"turns       {terminal.turns} ({usage.model_calls} model calls, the subagent's included)",
        f"tool calls  {terminal.tool_calls}",
        f"input       {usage.input_tokens} tokens: cache read {usage.cache_read_input_tokens}, "
        f"cache write {usage.cache_write_input_tokens}, uncached {uncached}",
        f"output      {usage.output_tokens} tokens (reasoning {usage.reasoning_tokens})",
        f"session     {session_id} in {database}",
    ]:
        print(line, file=out)


# ---- the second process ----------------------------------------------------------------------


async def resume(database: Path, session_id: str, out: TextIO, color: bool) -> int:
    """Reopen ``database``, find the session's conversation, and continue it: the model is asked
    for the postmortem with the whole earlier conversation as its history. A ``database`` that
    is not there is said, and not created; so is a session not in it (both return 1).
    Cancellation: cancelling the caller interrupts the run and closes the database."""
    if not await trio.Path(database).is_file():  # opening would create one (or fail: no dir)
        print(f"no database at {database}", file=out)
        return 1
    timeline = Narrator(out, color)
    writer = Agent("ops-assistant", INSTRUCTIONS, AgentPolicy(max_turns=2, max_tool_calls=1))
    model = PromptCachingModel(ScriptedModel(postmortem_script()))
    async with open_runtime(model.layer() + sqlite_storage(database), agents=[writer]) as runtime:
        sessions = runtime.context[SessionStoreService]
        session = await sessions.get(session_id)
        if session is None:
            print(f"no session {session_id} in {database}", file=out)
            return 1
        (conversation,) = session.conversations
        entries = await runtime.log.entries(conversation)
        inputs = [e.record for e in entries if isinstance(e.record, UserInputRecorded)]
        timeline.note(
            "reopened",
            f"process {os.getpid()}: session {session.id!r} (revision {session.revision}), "
            f"{len(entries)} log entries",
        )
        for record in inputs:
            timeline.note(
                "history", f"{record.kind} from {record.author}: {compact(record.text, 200)}"
            )
        terminal: EventBase | None = None
        async with runtime.stream(writer, POSTMORTEM_QUESTION, conversation_id=conversation) as run:
            async for event in run:
                timeline.render(event)
                terminal = event
        (request,) = model.model.requests
        earlier = len(request.messages) - 2  # the system prompt and the new question
        timeline.note("history", f"the model's request carried {earlier} earlier messages")
        updated = await sessions.update(
            session.id,
            SessionPatch(metadata={**_metadata(session.metadata), "postmortem": "drafted"}),
            expected_revision=session.revision,
        )
        timeline.note("session", f"{updated.id} now at revision {updated.revision}")
    model.model.assert_consumed()
    return 0 if isinstance(terminal, RunCompleted) else 1


def _metadata(value: Any) -> dict[str, Any]:
    return dict(value) if isinstance(value, dict) else {}


# ---- the command line -------------------------------------------------------------------------


def cli(argv: Sequence[str] | None = None) -> int:
    """``python -m examples.demo [--state-dir DIR] [--no-color]``, or, as the second process,
    ``--resume --db FILE --session ID``."""
    parser = argparse.ArgumentParser(
        description="An operations assistant, scripted, as a timeline."
    )
    parser.add_argument("--state-dir", type=Path, help="where the SQLite file goes (default: new)")
    parser.add_argument("--no-color", action="store_true", help="plain output even on a terminal")
    parser.add_argument("--resume", action="store_true", help="continue a stored session")
    parser.add_argument("--db", type=Path, help="with --resume: the SQLite file")
    parser.add_argument("--session", help="with --resume: the session's ID")
    args = parser.parse_args(argv)
    color = False if args.no_color else sys.stdout.isatty() and "NO_COLOR" not in os.environ
    if args.resume:
        if args.db is None or args.session is None:
            parser.error("--resume needs --db and --session")
        return trio.run(resume, args.db, args.session, sys.stdout, color)
    if args.state_dir is not None:
        args.state_dir.mkdir(parents=True, exist_ok=True)
    try:
        outcome = trio.run(lambda: main(color=color, state_dir=args.state_dir))
    except SandboxUnavailable as error:  # Code Mode and grep_logs run in bubblewrap
        print(f"the demo needs bubblewrap ({error.reason}): run `make sysdeps`", file=sys.stderr)
        return 2
    return 0 if outcome.status == "completed" and outcome.resumed == 0 else 1


if __name__ == "__main__":
    try:
        sys.exit(cli())
    except KeyboardInterrupt:  # Ctrl-C: the runs were interrupted and the database closed
        print("interrupted", file=sys.stderr)
        sys.exit(130)
