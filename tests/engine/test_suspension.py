"""Durable approval suspension: an approver that answers "later" suspends the run — none of the
batch runs, its approval requests are recorded (and no record of the suspension: it is no end of
the run), ``status == "suspended"`` —
and ``Runtime.resume`` continues the batch from the log, with the decisions recorded since,
without asking the model again."""

from __future__ import annotations

import attrs
import trio
import trio.testing

from effectagent.ai import Tool, ToolCallContext, Toolkit
from effectagent.core import (
    Agent,
    ApprovalDecision,
    ApprovalRequest,
    ChildBudget,
    EventBase,
    LogEntry,
    ModelResponseRecorded,
    RunCompletedRecord,
    RunFailedRecord,
    RunSuspended,
    ToolApprovalDecided,
    ToolApprovalRequested,
    ToolCallPrepared,
    ToolRejected,
    ToolSuccess,
    ToolUnknownOutcome,
    approval_decided,
)
from effectagent.effect import Layer
from effectagent.engine import (
    Approval,
    ApprovalService,
    ApprovalSuspended,
    InMemoryConversationLog,
    InMemoryStepStore,
    LogRetention,
    RunEnding,
    RunInfo,
    RunObserversService,
    open_runtime,
    pending_approvals,
    run_child,
)
from effectagent.testing import ScriptedModel, Turn

from .crash import DyingLog, log_layer
from .helpers import make_policy, records_of, results_by_id

CONV, RUN = "conv-1", "run-1"


@attrs.frozen
class Transfer:
    amount: int


@attrs.frozen
class Note:
    text: str


class Bank:
    def __init__(self) -> None:
        self.done: list[str] = []

    async def wire(self, params: Transfer, call: ToolCallContext) -> str:
        await trio.lowlevel.checkpoint()
        self.done.append(f"wire {params.amount}")
        return f"wired {params.amount}"

    async def note(self, params: Note, call: ToolCallContext) -> str:
        await trio.lowlevel.checkpoint()
        self.done.append(f"note {params.text}")
        return "noted"


WIRE: Tool[Transfer, str] = Tool(
    "wire", "Wire money.", parameters=Transfer, success=str, needs_approval=True
)
NOTE: Tool[Note, str] = Tool("note", "Take a note.", parameters=Note, success=str)
AGENT = Agent("banker", "Move money.", make_policy(), Toolkit(WIRE, NOTE))
BATCH = Turn.tool_calls(
    ("wire", {"amount": 10}), ("note", {"text": "rent"}), ("wire", {"amount": 20})
)


class Later:
    """An approver that always answers: the decision comes later."""

    suspends = True

    def __init__(self) -> None:
        self.asked: list[str] = []

    async def request(self, request: ApprovalRequest) -> ApprovalSuspended:
        await trio.lowlevel.checkpoint()
        self.asked.append(request.tool_call_id)
        return ApprovalSuspended("waiting for the treasurer")


def layer(bank: Bank, model: ScriptedModel, approver: Approval, log: Layer) -> Layer:
    return (
        AGENT.toolkit.handlers({"wire": bank.wire, "note": bank.note})
        + model.as_layer()
        + Layer.succeed(ApprovalService, approver)
        + log
    )


async def suspend(bank: Bank, log: Layer) -> list[EventBase]:
    model = ScriptedModel([BATCH])
    async with (
        open_runtime(layer(bank, model, Later(), log), agents=[AGENT]) as runtime,
        runtime.stream(AGENT, "Pay rent.", conversation_id=CONV, create=True, run_id=RUN) as events,
    ):
        return [event async for event in events]


async def entries(log: InMemoryConversationLog) -> list[LogEntry]:
    return list(await log.entries(CONV))


async def decide(log: InMemoryConversationLog, *approved: bool) -> None:
    """Decide the run's pending approvals, in order, as another process would."""
    pending = pending_approvals(await entries(log), RUN)
    decisions = [
        approval_decided(p, approved=a, reason="ok" if a else "too much", decided_by="ann", at=1.0)
        for p, a in zip(pending, approved, strict=False)
    ]
    await log.append(CONV, decisions)


async def test_a_suspended_approval_suspends_the_run_and_runs_none_of_its_batch(
    autojump_clock: trio.testing.MockClock,
) -> None:
    bank, log = Bank(), InMemoryConversationLog()
    seen = await suspend(bank, log_layer(log))
    assert bank.done == []  # not even the call that needs no approval
    last = seen[-1]
    assert isinstance(last, RunSuspended)
    assert last.reason == "waiting for the treasurer"
    assert last.tool_call_ids == ("call_0", "call_2")
    assert [type(e).__name__ for e in seen].count("ApprovalRequested") == 2
    assert not any(type(e).__name__ in ("ToolCallSucceeded", "ToolCallFailed") for e in seen)
    records = await entries(log)
    assert [type(e.record).__name__ for e in records][-3:] == [
        "ModelResponseRecorded",
        "ToolApprovalRequested",
        "ToolApprovalRequested",
    ]
    assert records_of(records, ToolCallPrepared) == []
    assert records_of(records, RunCompletedRecord) == []
    assert records_of(records, RunFailedRecord) == []
    # No record says the run suspended: its undecided requests are where it stopped.
    assert not any("Suspend" in type(e.record).__name__ for e in records)
    assert [p.request.tool_call_id for p in pending_approvals(records, RUN)] == ["call_0", "call_2"]


async def test_run_reduces_a_suspension_to_a_suspended_result(
    autojump_clock: trio.testing.MockClock,
) -> None:
    bank = Bank()
    model = ScriptedModel([BATCH])
    async with open_runtime(
        layer(bank, model, Later(), log_layer(InMemoryConversationLog())), agents=[AGENT]
    ) as rt:
        result = await rt.run(AGENT, "Pay rent.")
    assert result.status == "suspended"
    assert result.usage.model_calls == 1
    assert result.outcomes == ()


async def test_resume_runs_the_batch_with_the_recorded_decisions_without_asking_the_model(
    autojump_clock: trio.testing.MockClock,
) -> None:
    bank, log = Bank(), InMemoryConversationLog()
    await suspend(bank, log_layer(log))
    await decide(log, True, False)
    approver = Later()
    model = ScriptedModel([Turn.text("Rent noted; 10 wired; 20 refused.")])
    async with open_runtime(layer(bank, model, approver, log_layer(log)), agents=[AGENT]) as rt:
        result = await rt.resume(AGENT, conversation_id=CONV, run_id=RUN)
    assert result.status == "completed"
    assert approver.asked == []  # every decision came from the log
    assert len(model.requests) == 1  # only for the answer after the batch
    assert sorted(bank.done) == ["note rent", "wire 10"]
    assert [o.kind for o in result.outcomes] == ["success", "success", "rejected"]
    refused = result.outcomes[2]
    assert isinstance(refused, ToolRejected)
    assert refused.reason == "approval denied: too much"
    shown = results_by_id(model.requests[0])
    assert set(shown) == {"call_0", "call_1", "call_2"}
    records = await entries(log)
    assert len(records_of(records, ToolApprovalRequested)) == 2  # not asked or recorded again
    assert len(records_of(records, ToolApprovalDecided)) == 2
    assert len(records_of(records, ModelResponseRecorded)) == 2
    assert len(records_of(records, ToolCallPrepared)) == 3
    assert len(records_of(records, RunCompletedRecord)) == 1
    assert [e.seq for e in records] == list(range(1, len(records) + 1))


async def test_resume_with_decisions_still_missing_suspends_again_recording_nothing_new(
    autojump_clock: trio.testing.MockClock,
) -> None:
    bank, log = Bank(), InMemoryConversationLog()
    await suspend(bank, log_layer(log))
    before = await entries(log)
    silent = ScriptedModel([])
    async with open_runtime(layer(bank, silent, Later(), log_layer(log)), agents=[AGENT]) as rt:
        result = await rt.resume(AGENT, conversation_id=CONV, run_id=RUN)
    assert result.status == "suspended"
    assert silent.requests == []
    assert bank.done == []
    assert await entries(log) == before


async def test_resume_with_some_decisions_suspends_again_for_the_rest(
    autojump_clock: trio.testing.MockClock,
) -> None:
    bank, log = Bank(), InMemoryConversationLog()
    await suspend(bank, log_layer(log))
    await decide(log, True)
    before = await entries(log)
    async with open_runtime(
        layer(bank, ScriptedModel([]), Later(), log_layer(log)), agents=[AGENT]
    ) as rt:
        result = await rt.resume(AGENT, conversation_id=CONV, run_id=RUN)
    assert result.status == "suspended"
    assert bank.done == []
    assert await entries(log) == before  # the request it waits on is recorded already
    assert [p.request.tool_call_id for p in pending_approvals(before, RUN)] == ["call_2"]


async def test_a_recorded_decision_made_for_another_call_is_refused(
    autojump_clock: trio.testing.MockClock,
) -> None:
    bank, log = Bank(), InMemoryConversationLog()
    await suspend(bank, log_layer(log))
    first, second = pending_approvals(await entries(log), RUN)
    # An approval of the 10 transfer, recorded for the 20 one: bound to another call.
    forged = ToolApprovalDecided(
        conversation_id=CONV,
        run_id=RUN,
        tool_call_id="call_2",
        decision=ApprovalDecision.for_request(first.request, True, "ok", "mallory"),
        at=1.0,
    )
    await log.append(
        CONV, [approval_decided(first, approved=True, decided_by="ann", at=1.0), forged]
    )
    model = ScriptedModel([Turn.text("Done.")])
    async with open_runtime(layer(bank, model, Later(), log_layer(log)), agents=[AGENT]) as rt:
        result = await rt.resume(AGENT, conversation_id=CONV, run_id=RUN)
    assert sorted(bank.done) == ["note rent", "wire 10"]
    refused = result.outcomes[2]
    assert isinstance(refused, ToolRejected)
    assert "the decision was made for another tool call" in refused.reason
    last_decision = records_of(await entries(log), ToolApprovalDecided)[-1]
    assert last_decision.tool_call_id == "call_2"
    assert not last_decision.decision.approved  # the engine's refusal, recorded
    assert second.request.tool_call_id == "call_2"


async def test_an_approver_that_does_not_say_it_suspends_cannot_suspend(
    autojump_clock: trio.testing.MockClock,
) -> None:
    class Sneaky:
        async def request(self, request: ApprovalRequest) -> ApprovalSuspended:
            await trio.lowlevel.checkpoint()
            return ApprovalSuspended()

    bank = Bank()
    model = ScriptedModel([BATCH, Turn.text("Refused.")])
    async with open_runtime(
        layer(bank, model, Sneaky(), log_layer(InMemoryConversationLog())), agents=[AGENT]
    ) as rt:
        result = await rt.run(AGENT, "Pay rent.")
    assert result.status == "completed"
    assert bank.done == ["note rent"]
    rejected = [o for o in result.outcomes if isinstance(o, ToolRejected)]
    assert len(rejected) == 2
    assert all("this run cannot wait for it" in o.reason for o in rejected)


async def test_a_call_prepared_after_its_approval_may_have_run_when_resumed_again(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Once its approvals are in, the batch prepares its calls and runs them: a process that
    dies then leaves calls that may have run — unknown, not run a second time."""
    bank, log = Bank(), InMemoryConversationLog()
    await suspend(bank, log_layer(log))
    await decide(log, True, True)
    dying = DyingLog(log, appends=1)  # the prepared calls are written; the settlements are not
    async with open_runtime(
        layer(bank, ScriptedModel([]), Later(), dying.layer()), agents=[AGENT]
    ) as rt:
        crashed = await rt.resume(AGENT, conversation_id=CONV, run_id=RUN)
    assert crashed.status == "failed"
    assert sorted(bank.done) == ["note rent", "wire 10", "wire 20"]
    model = ScriptedModel([Turn.text("Unsure what happened.")])
    async with open_runtime(layer(bank, model, Later(), log_layer(log)), agents=[AGENT]) as rt:
        result = await rt.resume(AGENT, conversation_id=CONV, run_id=RUN)
    assert sorted(bank.done) == ["note rent", "wire 10", "wire 20"]  # nothing ran twice
    assert all(isinstance(o, ToolUnknownOutcome) for o in result.outcomes)


async def test_observers_hear_a_suspension_and_then_the_resumed_runs_end(
    autojump_clock: trio.testing.MockClock,
) -> None:
    heard: list[tuple[str, str]] = []

    class Observer:
        async def run_started(self, run: RunInfo) -> None:
            heard.append((run.run_id, "started"))

        async def run_ended(self, run: RunInfo, ending: RunEnding) -> None:
            heard.append((run.run_id, ending))

    bank, log = Bank(), InMemoryConversationLog()
    observers = Layer.succeed(RunObserversService, (Observer(),))
    await suspend(bank, log_layer(log) + observers)
    await decide(log, True, True)
    model = ScriptedModel([Turn.text("Done.")])
    async with open_runtime(
        layer(bank, model, Later(), log_layer(log) + observers), agents=[AGENT]
    ) as rt:
        await rt.resume(AGENT, conversation_id=CONV, run_id=RUN)
    assert heard == [
        (RUN, "started"),
        (RUN, "suspended"),
        (RUN, "started"),
        (RUN, "completed"),
    ]


async def test_a_batch_without_approvals_runs_as_it_would_without_a_suspending_approver(
    autojump_clock: trio.testing.MockClock,
) -> None:
    bank = Bank()
    model = ScriptedModel([Turn.tool_calls(("note", {"text": "a"})), Turn.text("Noted.")])
    async with open_runtime(
        layer(bank, model, Later(), log_layer(InMemoryConversationLog())), agents=[AGENT]
    ) as rt:
        result = await rt.run(AGENT, "Note a.")
    assert result.status == "completed"
    assert result.outcomes == (ToolSuccess("call_0", "note", "noted"),)


async def test_a_suspended_runs_conversation_is_kept_by_the_in_memory_log_and_its_steps_too(
    autojump_clock: trio.testing.MockClock,
) -> None:
    recorded: list[int] = []

    async def note(params: Note, call: ToolCallContext) -> str:
        async def write() -> str:
            await trio.lowlevel.checkpoint()
            return "noted"

        result = await call.step("write", 1, write)
        assert isinstance(call.steps, InMemoryStepStore)
        stores.append(call.steps)
        return result

    stores: list[InMemoryStepStore] = []
    log = InMemoryConversationLog(LogRetention(max_conversations=1))
    model = ScriptedModel([Turn.tool_calls(("note", {"text": "a"})), BATCH, Turn.text("Other.")])
    layer = (
        AGENT.toolkit.handlers({"wire": Bank().wire, "note": note})
        + model.as_layer()
        + Layer.succeed(ApprovalService, Later())
        + log_layer(log)
    )
    async with open_runtime(layer, agents=[AGENT]) as runtime:
        first = await runtime.run(AGENT, "Note, then pay.", conversation_id=CONV, create=True)
        assert first.status == "suspended"
        other = await runtime.run(AGENT, "Something else.")  # a second conversation, past the cap
        assert other.status == "completed"
        assert list(await log.entries(CONV))  # the suspended run's conversation was not evicted
        assert stores[0].runs == 1  # nor its steps' results
        recorded.append(len(list(await log.entries(other.conversation_id))))
    assert recorded == [0]  # the idle one was evicted instead


async def test_a_subagents_run_cannot_suspend_its_call_is_denied(
    autojump_clock: trio.testing.MockClock,
) -> None:
    bank = Bank()
    child = Agent("teller", "Wire money.", make_policy(max_turns=3), Toolkit(WIRE))

    async def delegate(params: Note, call: ToolCallContext) -> str:
        result = await run_child(
            call, child, params.text, budget=ChildBudget(turns=3, tool_calls=2)
        )
        return f"{result.status}: {result.text}"

    DELEGATE: Tool[Note, str] = Tool("delegate", "Delegate.", parameters=Note, success=str)
    parent = Agent("banker", "Delegate.", make_policy(), Toolkit(DELEGATE, WIRE))
    model = ScriptedModel(
        [
            Turn.tool_calls(("delegate", {"text": "wire 10"})),
            Turn.tool_calls(("wire", {"amount": 10})),  # the child's turn
            Turn.text("Could not."),  # the child's answer
            Turn.text("The teller could not."),
        ]
    )
    layer = (
        parent.toolkit.handlers({"delegate": delegate, "wire": bank.wire})
        + model.as_layer()
        + Layer.succeed(ApprovalService, Later())
    )
    async with open_runtime(layer, agents=[parent]) as runtime:
        result = await runtime.run(parent, "Pay.")
    assert result.status == "completed"
    assert bank.done == []
    assert result.outcomes == (ToolSuccess("call_0", "delegate", "completed: Could not."),)
    child_results = results_by_id(model.requests[2])
    (refused,) = child_results.values()
    assert "this run cannot wait for it" in refused.result["message"]
