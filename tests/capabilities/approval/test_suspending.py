"""``SuspendingApproval``: the decision comes later, so the run suspends durably — alone, or behind a
policy whose rules decide what they can at once; resumed once the decisions are in the log."""

from __future__ import annotations

import pathlib
from collections.abc import Sequence

import pytest
import trio
import trio.testing

from capabilities import sqlite_storage
from capabilities.approval import ApprovalRule, PolicyApproval, ScriptedApproval, SuspendingApproval
from capabilities.storage import SqliteConversationLog, open_database
from effectagent import ToolCallContext, open_runtime
from effectagent.core import (
    ApprovalRequest,
    LogEntry,
    Record,
    ToolApprovalDecided,
    ToolApprovalRequested,
    approval_decided,
)
from effectagent.effect import Layer
from effectagent.engine import (
    ApprovalSuspended,
    ConversationLogService,
    InMemoryConversationLog,
    pending_approvals,
)
from effectagent.testing import ScriptedModel, Turn

from .support import AGENT, TOOLS, FileParams, calls_turn, run_turns


def _request() -> ApprovalRequest:
    return ApprovalRequest(
        run_id="r",
        conversation_id="c",
        agent="ops",
        tool_name="write_file",
        tool_call_id="w1",
        summary="write",
        targets=("file:/tmp/a",),
        risk="medium",
        input_preview={},
        expires_at=0.0,
    )


async def test_it_answers_that_the_decision_comes_later() -> None:
    approver = SuspendingApproval("waiting for the on-call engineer")
    assert approver.suspends
    assert await approver.request(_request()) == ApprovalSuspended(
        "waiting for the on-call engineer"
    )
    with pytest.raises(ValueError, match="reason must be a sentence"):
        SuspendingApproval("  ")
    with pytest.raises(TypeError, match="reason must be a sentence \\(a str\\), got int"):
        SuspendingApproval(5)  # type: ignore[arg-type]


def test_a_policy_suspends_when_what_it_asks_does() -> None:
    rules = [ApprovalRule.approve(tools="read_file")]
    assert PolicyApproval(rules, default="ask", ask=SuspendingApproval()).suspends
    assert not PolicyApproval(rules, default="ask", ask=ScriptedApproval({})).suspends
    assert not PolicyApproval(rules).suspends


async def test_behind_a_policy_the_rules_decide_at_once_and_the_rest_suspends(
    autojump_clock: trio.testing.MockClock,
) -> None:
    policy = PolicyApproval(
        [ApprovalRule.deny(tools="delete_file", reason="never")],
        default="ask",
        ask=SuspendingApproval("waiting for ann"),
    )
    ran = await run_turns(
        [calls_turn(("write_file", "/tmp/a", 1, "w1"), ("delete_file", "/tmp/b", 1, "d1"))],
        policy.layer(),
    )
    assert ran.result.status == "suspended"
    assert ran.handled == []
    decided = ran.records(ToolApprovalDecided)
    assert [(d.tool_call_id, d.decision.approved) for d in decided] == [("d1", False)]
    assert not any("Suspend" in type(e.record).__name__ for e in ran.log)  # ledger state only
    assert [p.request.tool_call_id for p in pending_approvals(ran.log, ran.result.run_id)] == ["w1"]


class _AppendsSeen:
    """A Conversation Log that notes what each append held (the kinds of its records)."""

    def __init__(self) -> None:
        self.log = InMemoryConversationLog()
        self.appends: list[list[str]] = []

    async def append(self, conversation_id: str, records: Sequence[Record]) -> int:
        self.appends.append([type(record).__name__ for record in records])
        return await self.log.append(conversation_id, records)

    async def entries(self, conversation_id: str, *, after: int = 0) -> Sequence[LogEntry]:
        return await self.log.entries(conversation_id, after=after)


async def test_a_decision_made_at_once_commits_in_the_append_of_its_request(
    autojump_clock: trio.testing.MockClock,
) -> None:
    policy = PolicyApproval(
        [ApprovalRule.deny(tools="delete_file", reason="never")],
        default="ask",
        ask=SuspendingApproval("waiting for ann"),
    )
    seen = _AppendsSeen()
    ran = await run_turns(
        [calls_turn(("delete_file", "/tmp/b", 1, "d1"), ("write_file", "/tmp/a", 1, "w1"))],
        policy.layer() + Layer.succeed(ConversationLogService, seen),
    )
    assert ran.result.status == "suspended"
    requested, decided = ToolApprovalRequested.__name__, ToolApprovalDecided.__name__
    # The rule's denial of d1 is appended with d1's request, never after it on its own; w1's
    # request, whose decision comes later, is appended at the latest as the run suspends (the
    # run's last append: no record marks the suspension).
    (with_decision,) = [kinds for kinds in seen.appends if decided in kinds]
    assert with_decision.count(requested) >= 1
    assert with_decision.index(requested) < with_decision.index(decided)
    with_suspension = seen.appends[-1]
    waiting = [e.record for e in ran.log if isinstance(e.record, ToolApprovalRequested)]
    assert [r.request.tool_call_id for r in waiting] == ["d1", "w1"]
    assert requested in with_decision + with_suspension


async def test_a_suspended_run_resumes_with_the_decision_recorded_from_elsewhere(
    autojump_clock: trio.testing.MockClock,
) -> None:
    handled: list[str] = []

    async def handle(params: FileParams, call: ToolCallContext) -> str:
        handled.append(call.tool_call_id)
        return f"{call.tool_name} {params.path}"

    model = ScriptedModel([calls_turn(("write_file", "/tmp/a", 1, "w1")), Turn.text("Written.")])
    layer = (
        AGENT.toolkit.handlers(dict.fromkeys(TOOLS, handle))
        + model.as_layer()
        + SuspendingApproval().layer()
    )
    async with open_runtime(layer, agents=[AGENT]) as runtime:
        first = await runtime.run(AGENT, "Write.")
        assert first.status == "suspended"
        log = runtime.log
        (pending,) = pending_approvals(await log.entries(first.conversation_id), first.run_id)
        await log.append(
            first.conversation_id,
            [approval_decided(pending, approved=True, decided_by="ann", at=1.0)],
        )
        resumed = await runtime.resume(
            AGENT, conversation_id=first.conversation_id, run_id=first.run_id
        )
    assert resumed.status == "completed"
    assert resumed.text == "Written."
    assert handled == ["w1"]
    assert len(model.requests) == 2  # the batch's response, then the answer: never asked again


@pytest.mark.parametrize("first_approves", [False, True])
async def test_the_first_decision_recorded_for_a_call_is_the_one_that_applies(
    autojump_clock: trio.testing.MockClock, first_approves: bool
) -> None:
    """Two decisions recorded for one suspended call (two operators, two processes): the last
    one applied, so a denial followed by an approval ran the call."""
    handled: list[str] = []

    async def handle(params: FileParams, call: ToolCallContext) -> str:
        handled.append(call.tool_call_id)
        return "ok"

    model = ScriptedModel([calls_turn(("write_file", "/tmp/a", 1, "w1")), Turn.text("Done.")])
    layer = (
        AGENT.toolkit.handlers(dict.fromkeys(TOOLS, handle))
        + model.as_layer()
        + SuspendingApproval().layer()
    )
    async with open_runtime(layer, agents=[AGENT]) as runtime:
        first = await runtime.run(AGENT, "Write.")
        log, conversation = runtime.log, first.conversation_id
        (pending,) = pending_approvals(await log.entries(conversation), first.run_id)
        for approved, by, at in ((first_approves, "ann", 1.0), (not first_approves, "bob", 2.0)):
            await log.append(
                conversation, [approval_decided(pending, approved=approved, decided_by=by, at=at)]
            )
        resumed = await runtime.resume(AGENT, conversation_id=conversation, run_id=first.run_id)
    assert resumed.status == "completed"
    assert handled == (["w1"] if first_approves else [])


async def test_a_suspended_run_on_sqlite_lets_its_lane_go_for_another_runtime_to_resume_it(
    tmp_path: pathlib.Path,
) -> None:
    """No record marks a suspension (its requests are where the run stopped), so no append lets
    the run's lane go: the run's end, told to the storage, does — while the runtime that ran it
    stays open, another runtime on the file resumes it."""
    handled: list[str] = []

    async def handle(params: FileParams, call: ToolCallContext) -> str:
        handled.append(call.tool_call_id)
        return "ok"

    path = tmp_path / "runs.db"
    handlers = AGENT.toolkit.handlers(dict.fromkeys(TOOLS, handle))
    turns = [calls_turn(("write_file", "/tmp/a", 1, "w1")), Turn.text("Written.")]
    first_layer = handlers + ScriptedModel(turns).as_layer() + SuspendingApproval().layer()
    async with open_runtime(first_layer.provide_merge(sqlite_storage(path)), agents=[AGENT]) as a:
        first = await a.run(AGENT, "Write.", conversation_id="c", create=True)
        assert first.status == "suspended"
        entries = await a.log.entries("c")
        assert not any("Suspend" in type(e.record).__name__ for e in entries)
        (pending,) = pending_approvals(entries, first.run_id)
        decided = approval_decided(pending, approved=True, decided_by="ann", at=1.0)
        await a.log.append("c", [decided])
        second_layer = handlers + ScriptedModel(turns[1:]).as_layer() + SuspendingApproval().layer()
        async with open_runtime(
            second_layer.provide_merge(sqlite_storage(path)), agents=[AGENT]
        ) as b:
            resumed = await b.resume(AGENT, conversation_id="c", run_id=first.run_id)
    assert resumed.status == "completed", resumed.error
    assert handled == ["w1"]


async def test_a_suspended_run_on_a_sqlite_log_without_steering_lets_its_lane_go(
    tmp_path: pathlib.Path,
) -> None:
    """A runtime over a bare ``SqliteConversationLog`` (no steering inbox to tell of the run's
    end) still lets a suspended run's lane go: the log hears the run end. Another runtime on the
    file resumes it, and the first one runs the conversation on."""
    handled: list[str] = []

    async def handle(params: FileParams, call: ToolCallContext) -> str:
        handled.append(call.tool_call_id)
        return "ok"

    handlers = AGENT.toolkit.handlers(dict.fromkeys(TOOLS, handle))
    turns = [calls_turn(("write_file", "/tmp/a", 1, "w1")), Turn.text("Written.")]
    path = tmp_path / "runs.db"
    async with open_database(path) as one, open_database(path) as two:
        first_layer = (
            handlers
            + ScriptedModel([turns[0], Turn.text("Again.")]).as_layer()
            + SuspendingApproval().layer()
            + Layer.succeed(ConversationLogService, SqliteConversationLog(one))
        )
        async with open_runtime(first_layer, agents=[AGENT]) as a:
            first = await a.run(AGENT, "Write.", conversation_id="c", create=True)
            assert first.status == "suspended"
            (pending,) = pending_approvals(await a.log.entries("c"), first.run_id)
            decided = approval_decided(pending, approved=True, decided_by="ann", at=1.0)
            await a.log.append("c", [decided])
            second_layer = (
                handlers
                + ScriptedModel(turns[1:]).as_layer()
                + SuspendingApproval().layer()
                + Layer.succeed(ConversationLogService, SqliteConversationLog(two))
            )
            async with open_runtime(second_layer, agents=[AGENT]) as b:
                resumed = await b.resume(AGENT, conversation_id="c", run_id=first.run_id)
            assert resumed.status == "completed", resumed.error
            again = await a.run(AGENT, "Once more.", conversation_id="c")
    assert again.status == "completed", again.error
    assert handled == ["w1"]


async def test_two_runtimes_resuming_one_suspended_run_on_sqlite_run_its_batch_once(
    tmp_path: pathlib.Path,
) -> None:
    """A resumed run writes no input record, which would claim its lane: it claims it as it
    starts, so of two runtimes on the file resuming it at once, one runs the batch and the other
    is refused before it writes anything."""
    handled: list[str] = []
    started, refused = trio.Event(), trio.Event()

    async def handle(params: FileParams, call: ToolCallContext) -> str:
        handled.append(call.tool_call_id)
        if len(handled) == 1:
            started.set()
            await refused.wait()  # still running while the other resume is tried
        return "ok"

    handlers = AGENT.toolkit.handlers(dict.fromkeys(TOOLS, handle))
    path = tmp_path / "runs.db"

    def layer(*turns: Turn) -> Layer:
        model = ScriptedModel(list(turns)).as_layer()
        return (handlers + model + SuspendingApproval().layer()).provide_merge(sqlite_storage(path))

    first_layer = layer(calls_turn(("write_file", "/tmp/a", 1, "w1")))
    async with open_runtime(first_layer, agents=[AGENT]) as a:
        first = await a.run(AGENT, "Write.", conversation_id="c", create=True)
        (pending,) = pending_approvals(await a.log.entries("c"), first.run_id)
        decided = approval_decided(pending, approved=True, decided_by="ann", at=1.0)
        await a.log.append("c", [decided])
    results: list[str] = []

    async def resume(wait: bool) -> None:
        async with open_runtime(layer(Turn.text("Written.")), agents=[AGENT]) as runtime:
            if wait:
                await started.wait()
            resumed = await runtime.resume(AGENT, conversation_id="c", run_id=first.run_id)
            results.append(resumed.status)
            if wait:
                refused.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(resume, False)
        nursery.start_soon(resume, True)
    assert sorted(results) == ["completed", "failed"]
    assert handled == ["w1"]
    async with open_runtime(layer(), agents=[AGENT]) as c:
        ends = [e.record for e in await c.log.entries("c") if "Run" in type(e.record).__name__]
    assert [type(r).__name__ for r in ends] == ["RunCompletedRecord"]


async def test_a_log_an_older_version_marked_a_suspension_in_still_reads_and_resumes(
    tmp_path: pathlib.Path,
) -> None:
    """Versions before this one appended a ``RunSuspendedRecord`` as a run suspended: such a
    log still decodes, its run resumes once decided, and its conversation runs on."""
    from effectagent.core._records import RunSuspendedRecord

    handled: list[str] = []

    async def handle(params: FileParams, call: ToolCallContext) -> str:
        handled.append(call.tool_call_id)
        return "ok"

    handlers = AGENT.toolkit.handlers(dict.fromkeys(TOOLS, handle))
    path = tmp_path / "runs.db"
    turns = [
        calls_turn(("write_file", "/tmp/a", 1, "w1")),
        Turn.text("Written."),
        Turn.text("Again."),
    ]
    layer = handlers + ScriptedModel(turns).as_layer() + SuspendingApproval().layer()
    async with open_runtime(layer.provide_merge(sqlite_storage(path)), agents=[AGENT]) as rt:
        first = await rt.run(AGENT, "Write.", conversation_id="c", create=True)
        assert first.status == "suspended"
        legacy = RunSuspendedRecord(
            conversation_id="c",
            run_id=first.run_id,
            turn=1,
            tool_call_ids=("w1",),
            reason="waiting for an approval decision",
            at=1.0,
        )
        await rt.log.append("c", [legacy])  # as an older version wrote it
    async with open_runtime(layer.provide_merge(sqlite_storage(path)), agents=[AGENT]) as rt:
        entries = await rt.log.entries("c")
        assert type(entries[-1].record).__name__ == "RunSuspendedRecord"  # read back
        (pending,) = pending_approvals(entries, first.run_id)
        await rt.log.append(
            "c", [approval_decided(pending, approved=True, decided_by="ann", at=2.0)]
        )
        resumed = await rt.resume(AGENT, conversation_id="c", run_id=first.run_id)
        again = await rt.run(AGENT, "Once more.", conversation_id="c")
    assert (resumed.status, resumed.text) == ("completed", "Written."), resumed.error
    assert again.status == "completed", again.error
    assert handled == ["w1"]
