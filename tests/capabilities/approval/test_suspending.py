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
