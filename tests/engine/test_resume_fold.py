"""The fold of a run's records into the state it resumes in (``engine._resume``), as plain
functions over hand-made logs: one table row per resume point — no Trio, no I/O, no clock."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import attrs
import pytest

from effectagent.ai import SystemMessage, Tool, Toolkit, ToolMessage, UserMessage
from effectagent.core import (
    AgentPolicy,
    ApprovalDecision,
    ApprovalRequest,
    CompactionCreated,
    ConversationCreated,
    LogEntry,
    ModelResponseRecorded,
    ModelUsageRecorded,
    Record,
    ResponseLimits,
    RunCompletedRecord,
    RunFailedRecord,
    SecretRedactor,
    ToolApprovalRequested,
    ToolCallPrepared,
    ToolCallSettled,
    ToolFailure,
    ToolRejected,
    ToolSuccess,
    UsageDelta,
    UserInputRecorded,
    approval_decided,
)
from effectagent.effect import TaggedError
from effectagent.engine._batch_plan import BUDGET_SPENT
from effectagent.engine._machine import (
    AppendLater,
    Complete,
    Fail,
    RequestModel,
    RunBatch,
    RunConfig,
    StartTurn,
)
from effectagent.engine._resume import (
    FoundRun,
    Resumption,
    RunAlreadyEnded,
    RunExists,
    UnknownRun,
    check_new_run_id,
    dangling_path,
    find_run,
    pending_approvals,
    resume_point,
)

SYSTEM = SystemMessage("Answer.")
RUN, CONV = "run-1", "conv-1"


@attrs.frozen
class Lookup:
    city: str


@attrs.frozen
class Unavailable(TaggedError):
    pass


FORECAST: Tool[Lookup, str] = Tool("forecast", "F.", parameters=Lookup, success=str)
STRICT: Tool[Lookup, str] = Tool(
    "strict", "S.", parameters=Lookup, success=str, failure=Unavailable, failure_mode="error"
)
TOOLKIT = Toolkit(FORECAST, STRICT)


def config(**policy: Any) -> RunConfig:
    fields: dict[str, Any] = {"max_turns": 4, "max_tool_calls": 8, "max_duration": 100}
    fields.update(policy)
    return RunConfig(
        policy=AgentPolicy(**fields),
        output=None,
        compactor=False,
        follow_ups=False,
        redactor=SecretRedactor(()),
        count_tokens=lambda messages: 10 * len(messages),
    )


# ---- records, as a run writes them ----------------------------------------------------------------


def started(text: str = "weather?", run_id: str = RUN) -> list[Record]:
    return [
        ConversationCreated(conversation_id=CONV, agent="a", at=0.0),
        UserInputRecorded(
            conversation_id=CONV,
            run_id=run_id,
            input_id=f"in-{run_id}",
            kind="user",
            text=text,
            author="ann",
            at=0.0,
        ),
    ]


def response(turn: int, *calls: str, text: str = "", tokens: int = 10) -> ModelResponseRecorded:
    content: list[tuple[str, Any]] = [("text", text)] if text else []
    for call in calls:
        name = "strict" if call.startswith("s") else "forecast"
        content.append(
            ("tool-call", {"id": call, "name": name, "arguments": json.dumps({"city": "Oslo"})})
        )
    return ModelResponseRecorded(
        conversation_id=CONV,
        run_id=RUN,
        turn=turn,
        content=tuple(content),
        finish_reason="tool-calls" if calls else "stop",
        usage=UsageDelta(tokens, tokens),
        at=0.0,
    )


def prepared(turn: int, call: str) -> ToolCallPrepared:
    name = "strict" if call.startswith("s") else "forecast"
    return ToolCallPrepared(
        conversation_id=CONV,
        run_id=RUN,
        turn=turn,
        tool_call_id=call,
        tool_name=name,
        arguments={"city": "Oslo"},
        at=0.0,
    )


def settled(turn: int, call: str, outcome: Any = None, audit: Any = None) -> ToolCallSettled:
    name = "strict" if call.startswith("s") else "forecast"
    return ToolCallSettled(
        conversation_id=CONV,
        run_id=RUN,
        turn=turn,
        tool_call_id=call,
        tool_name=name,
        outcome=outcome if outcome is not None else ToolSuccess(call, name, "4 °C"),
        at=0.0,
        audit=audit,
    )


def request(call: str) -> ApprovalRequest:
    return ApprovalRequest(
        run_id=RUN,
        conversation_id=CONV,
        agent="a",
        tool_name="forecast",
        tool_call_id=call,
        summary="Forecast",
        targets=(),
        risk="medium",
        input_preview={"city": "Oslo"},
        expires_at=0.0,
        arguments_digest="d",
    )


def requested(call: str) -> ToolApprovalRequested:
    return ToolApprovalRequested(conversation_id=CONV, run_id=RUN, request=request(call), at=0.0)


def entries(records: Sequence[Record]) -> list[LogEntry]:
    return [LogEntry(seq, record) for seq, record in enumerate(records, 1)]


def resume(records: Sequence[Record], **policy: Any) -> Resumption:
    found = find_run(entries(records), CONV, RUN)
    return resume_point(
        found,
        config=config(**policy),
        toolkit=TOOLKIT,
        system=SYSTEM,
        limits=ResponseLimits(),
        now=50.0,
    )


def kinds(resumed: Resumption) -> list[str]:
    return [type(command).__name__ for command in resumed.transition[1]]


# ---- the table: every resume point ------------------------------------------------------------------

BATCH = [*started(), response(1, "c1", "c2")]


@pytest.mark.parametrize(
    ("name", "records", "phase", "commands", "turns", "tool_calls", "prepared"),
    [
        ("input recorded", started(), "turn", ["NextTurn"], 0, 0, None),
        (
            "compaction record last",
            [
                *started(),
                CompactionCreated(
                    conversation_id=CONV,
                    run_id=RUN,
                    turn=1,
                    kind="clear-tool-results",
                    covers_through=1,
                    summary=None,
                    at=0.0,
                ),
            ],
            "turn",
            ["NextTurn"],
            0,
            0,
            None,
        ),
        ("answer recorded", [*started(), response(1, text="4 °C")], "ended", None, 1, 0, None),
        (
            "answer then feedback",
            [
                *started(),
                response(1, text="warm"),
                UserInputRecorded(
                    conversation_id=CONV,
                    run_id=RUN,
                    input_id="f",
                    kind="feedback",
                    text="JSON, please",
                    author="engine",
                    at=0.0,
                ),
            ],
            "turn",
            ["NextTurn"],
            1,
            0,
            None,
        ),
        (
            "batch declared",
            BATCH,
            "batch",
            ["StartTurn", "AppendLater", "RunBatch"],
            1,
            2,
            frozenset(),
        ),
        (
            "batch half prepared",
            [*BATCH, prepared(1, "c1")],
            "batch",
            ["StartTurn", "AppendLater", "RunBatch"],
            1,
            2,
            frozenset({"c1"}),
        ),
        (
            "batch prepared, not settled",
            [*BATCH, prepared(1, "c1"), prepared(1, "c2")],
            "batch",
            ["StartTurn", "AppendLater", "RunBatch"],
            1,
            2,
            frozenset({"c1", "c2"}),
        ),
        (
            "batch settled",
            [*BATCH, prepared(1, "c1"), prepared(1, "c2"), settled(1, "c1"), settled(1, "c2")],
            "turn",
            ["NextTurn"],
            1,
            2,
            None,
        ),
        (
            "suspended, decisions missing",
            [*BATCH, requested("c1"), requested("c2")],
            "batch",
            ["StartTurn", "AppendLater", "RunBatch"],
            1,
            2,
            frozenset(),
        ),
    ],
)
def test_each_resume_point_folds_into_its_state_and_first_transition(
    name: str,
    records: list[Record],
    phase: str,
    commands: list[str] | None,
    turns: int,
    tool_calls: int,
    prepared: frozenset[str] | None,
) -> None:
    resumed = resume(records)
    state = resumed.transition[0]
    assert state.phase == phase, name
    if commands is not None:
        assert kinds(resumed) == commands, name
    assert state.budget.turns == turns, name
    assert state.budget.tool_calls == tool_calls, name
    assert resumed.text == "weather?"
    assert resumed.author == "ann"
    if prepared is None:
        assert resumed.replay is None
    else:
        assert resumed.replay is not None
        assert resumed.replay.prepared == prepared
    # No resume point asks the model before the run's next turn.
    assert not any(isinstance(c, RequestModel) for c in resumed.transition[1]), name


def test_an_answer_recorded_without_the_runs_end_completes_from_it() -> None:
    resumed = resume([*started(), response(1, text="4 °C in Oslo")])
    *_, complete = resumed.transition[1]
    assert isinstance(complete, Complete)
    assert complete.response.text == "4 °C in Oslo"
    assert complete.finish == "stop"
    later = resumed.transition[1][1]  # after StartTurn: the response's record, not appended again
    assert isinstance(later, AppendLater)
    assert later.record is None


def test_a_settled_batch_that_ends_the_run_fails_it_on_resume() -> None:
    failure = ToolFailure("s1", "strict", {"_tag": "Unavailable", "message": "down"})
    resumed = resume([*started(), response(1, "s1"), prepared(1, "s1"), settled(1, "s1", failure)])
    state, commands = resumed.transition
    assert state.phase == "ended"
    (fail,) = commands
    assert isinstance(fail, Fail)
    assert fail.error.tag == "ToolFailedRun"


def test_a_resumed_batch_is_the_last_responses_with_its_recorded_approvals() -> None:
    decided = approval_decided(requested("c1"), approved=True, decided_by="ann", at=1.0)
    records = [*BATCH, requested("c1"), requested("c2"), decided]
    resumed = resume(records)
    replay = resumed.replay
    assert replay is not None
    assert replay.turn == 1
    assert set(replay.requests) == {"c1", "c2"}
    assert replay.decisions == {"c1": decided.decision}
    _, commands = resumed.transition
    batch = commands[-1]
    assert isinstance(batch, RunBatch)
    assert batch.admitted
    assert [c.id for c in batch.plan.runnable] == ["c1", "c2"]


def test_the_prompt_is_the_projection_up_to_the_resumed_response() -> None:
    first = [*started(), response(1, "c1"), prepared(1, "c1"), settled(1, "c1")]
    resumed = resume([*first, response(2, "c2"), prepared(2, "c2")])
    messages = resumed.state.messages
    assert messages[0] == SYSTEM
    assert messages[1] == UserMessage.text("weather?")
    assert isinstance(messages[-1], ToolMessage)  # the first batch, settled
    assert len(messages) == 4  # system, input, the first batch's call and its result


def test_the_grace_turn_is_not_counted_and_finishes_budget_exhausted() -> None:
    records = [
        *started(),
        response(1, "c1"),
        prepared(1, "c1"),
        settled(1, "c1"),
        response(2, text="Oslo: 4 °C"),
    ]
    resumed = resume(records, max_turns=1)
    assert resumed.state.budget.turns == 1
    assert resumed.state.turn == 2
    *_, complete = resumed.transition[1]
    assert isinstance(complete, Complete)
    assert complete.finish == "budget-exhausted"
    assert complete.exhausted == "turns"
    start = resumed.transition[1][0]
    assert isinstance(start, StartTurn)
    assert start.grace


def test_the_budget_is_counted_again_from_the_records() -> None:
    audit = {"inner_calls": 3, "subagent": {"turns": 2, "tool_calls": 1, "input_tokens": 7}}
    records = [
        *started(),
        response(1, "c1", "c2", tokens=5),
        prepared(1, "c1"),
        prepared(1, "c2"),
        settled(1, "c1", audit=audit),
        settled(1, "c2", ToolFailure("c2", "forecast", {"_tag": "X", "message": "no"})),
        response(2, "c3", tokens=7),
    ]
    budget = resume(records).state.budget
    assert budget.turns == 2  # the resumed response's turn included (the machine counted it)
    assert budget.tool_calls == 2 + 3 + 1  # its own, the inner calls, the resumed batch's
    assert budget.delegated_turns == 2
    assert budget.delegated_tool_calls == 1
    assert budget.usage.input_tokens == 5 + 7 + 7
    assert budget.usage.model_calls == 2
    assert dict(budget.streaks) == {"forecast": 1}  # c1 succeeded, then c2 failed: one in a row


def test_a_resumed_runs_live_context_is_its_last_turns_not_a_side_calls() -> None:
    """A model call besides the turns (``ModelUsageRecorded``: a check's, a summary's) counts in
    the resumed totals, but the live-context estimate stays the last response's."""
    check = ModelUsageRecorded(
        conversation_id=CONV,
        run_id=RUN,
        turn=2,
        purpose="compaction",
        usage=UsageDelta(3, 1),
        at=0.0,
    )
    records = [
        *started(),
        response(1, "c1", tokens=500),
        prepared(1, "c1"),
        settled(1, "c1"),
        check,  # e.g. a summary made before the next turn's request
    ]
    usage = resume(records).state.budget.totals
    assert (usage.input_tokens, usage.model_calls) == (503, 2)
    assert (usage.last_input_tokens, usage.last_output_tokens) == (500, 500)


def test_a_batch_refused_for_the_budget_is_counted_as_it_was() -> None:
    refused = ToolRejected("c1", "forecast", BUDGET_SPENT)
    records = [*started(), response(1, "c1"), settled(1, "c1", refused)]
    resumed = resume(records, max_tool_calls=1)
    assert resumed.state.budget.refused_batch is not None
    assert resumed.state.budget.tool_calls == 0


# ---- which runs may continue ------------------------------------------------------------------


def test_a_run_without_records_is_unknown() -> None:
    with pytest.raises(UnknownRun, match="no records of run 'run-1'"):
        find_run(entries(started(run_id="other")), CONV, RUN)


@pytest.mark.parametrize(
    ("ending", "how"),
    [
        (
            RunCompletedRecord(
                conversation_id=CONV, run_id=RUN, output="x", finish_reason="stop", at=0.0
            ),
            "completed",
        ),
        (
            RunFailedRecord(
                conversation_id=CONV, run_id=RUN, error=None, reason="interrupted", at=0.0
            ),
            "failed",
        ),
        (started(run_id="run-2")[1], "superseded"),
    ],
)
def test_a_run_that_ended_cannot_resume(ending: Record, how: str) -> None:
    with pytest.raises(RunAlreadyEnded) as raised:
        find_run(entries([*started(), response(1, text="x"), ending]), CONV, RUN)
    assert raised.value.how == how


def test_a_new_run_id_must_be_new_to_the_conversation() -> None:
    check_new_run_id(entries(started()), CONV, "run-2")
    with pytest.raises(RunExists, match="already has records of run 'run-1'"):
        check_new_run_id(entries(started()), CONV, RUN)


def test_found_run_is_the_runs_records_alone() -> None:
    found = find_run(entries([*started(run_id="run-0"), *started()[1:]]), CONV, RUN)
    assert isinstance(found, FoundRun)
    assert [type(e.record).__name__ for e in found.records] == ["UserInputRecorded"]


# ---- what becomes of each call of a resumed batch ---------------------------------------------------

APPROVED = ApprovalDecision.approve()
DENIED = ApprovalDecision.deny("no")


@pytest.mark.parametrize(
    ("prepared", "needs", "decision", "idempotent", "reconciles", "path"),
    [
        (False, False, None, False, False, "run"),
        (False, True, None, False, False, "run"),
        (False, True, APPROVED, True, True, "run"),
        (True, True, None, False, False, "run"),  # it waited for its approval: never ran
        (True, True, None, True, True, "run"),
        (True, True, DENIED, True, True, "denied"),
        (True, True, APPROVED, True, False, "rerun"),
        (True, True, APPROVED, False, True, "reconcile"),
        (True, True, APPROVED, False, False, "unknown"),
        (True, False, None, True, True, "rerun"),
        (True, False, None, False, True, "reconcile"),
        (True, False, None, False, False, "unknown"),
    ],
)
def test_each_call_of_a_resumed_batch_takes_its_path(
    prepared: bool,
    needs: bool,
    decision: ApprovalDecision | None,
    idempotent: bool,
    reconciles: bool,
    path: str,
) -> None:
    assert (
        dangling_path(
            prepared=prepared,
            needs_approval=needs,
            decision=decision,
            idempotent=idempotent,
            reconciles=reconciles,
        )
        == path
    )


def test_pending_approvals_are_the_requests_without_a_decision() -> None:
    first = requested("c1")
    decided = approval_decided(first, approved=False, reason="no", decided_by="ann", at=2.0)
    records = [*BATCH, first, requested("c2"), decided]
    (pending,) = pending_approvals(entries(records), RUN)
    assert pending.request.tool_call_id == "c2"
    assert decided.decision.tool_call_id == "c1"
    assert decided.decision.arguments_digest == "d"
    assert decided.decision.mismatch(first.request) is None
    assert pending_approvals(entries(records), "nobody") == ()


def calls_answered(messages: Sequence[Any]) -> bool:
    """Every tool call of an assistant message is answered by the tool message right after it."""
    for index, message in enumerate(messages):
        if message.role != "assistant":
            continue
        calls = {p.id for p in message.content if type(p).__name__ == "ToolCallContent"}
        if not calls:
            continue
        after = messages[index + 1] if index + 1 < len(messages) else None
        if not isinstance(after, ToolMessage) or {r.id for r in after.content} != calls:
            return False
    return True


def test_at_every_cut_the_resumed_prompt_answers_every_call_it_holds() -> None:
    full = [
        *BATCH,
        prepared(1, "c1"),
        prepared(1, "c2"),
        settled(1, "c1"),
        settled(1, "c2"),
        response(2, "c3"),
        prepared(2, "c3"),
        settled(2, "c3"),
        response(3, text="done"),
    ]
    for cut in range(2, len(full) + 1):
        resumed = resume(full[:cut])
        assert calls_answered(resumed.state.messages), cut
