"""Events and records are made by keyword only, and ``RunIO.emit`` takes an event's own fields by
keyword: it returns the event of a terminal class (mypy follows the class to it) and None for any
other (an event nobody reads is not built), and mypy rejects a misspelt, mistyped, missing or
positional field at the call — as a direct construction does."""

from __future__ import annotations

from typing import assert_type

from effectagent.core import (
    Event,
    ModelStarted,
    ReasoningDelta,
    RunCompleted,
    RunFailed,
    RunFailedRecord,
    RunInterrupted,
    TextDelta,
    ToolCallFailed,
    ToolCallPrepared,
    ToolCallSucceeded,
    ToolDefect,
    ToolFailure,
    ToolInvalidInput,
    ToolRejected,
    ToolSuccess,
    ToolUnknownOutcome,
    TurnStarted,
    UsageTotals,
)
from effectagent.engine import RunStream
from effectagent.engine._io import RunIO

started = TurnStarted(run_id="run_1", conversation_id="conv_1", agent="a", seq=1, at=0.0, turn=1)
assert_type(started, TurnStarted)
# E: Too many positional arguments for "TurnStarted"  [call-arg]
TurnStarted("run_1", "conv_1", "a", 1, 0.0, 1)
# E: Argument "turn" to "TurnStarted" has incompatible type "str"; expected "int"  [arg-type]
TurnStarted(run_id="run_1", conversation_id="conv_1", agent="a", seq=1, at=0.0, turn="1")
# E: Too many positional arguments for "ToolCallPrepared"  [call-arg]
ToolCallPrepared("conv_1", "run_1", 1, "lookup", "call_1", {}, 0.0)
# E: Missing named argument "reason" for "RunFailedRecord"  [call-arg]
RunFailedRecord(conversation_id="conv_1", run_id="run_1", error=None, at=0.0)


def emitting(io: RunIO, usage: UsageTotals, streamed: type[TextDelta | ReasoningDelta]) -> None:
    assert_type(io.emit(TurnStarted, turn=3), None)
    assert_type(io.emit(TurnStarted, turn=3, grace=True), None)
    assert_type(io.emit(ModelStarted, turn=3), None)
    assert_type(io.emit(streamed, turn=3, text="Oslo"), None)
    assert_type(io.emit(RunInterrupted, reason="stop", usage=usage), RunInterrupted)
    # E: No overload variant of "emit" of "RunIO" matches argument types "type[TurnStarted]", "str"
    io.emit(TurnStarted, turn="3")
    # E: Unexpected keyword argument "trun" for overloaded function "emit" of "RunIO"
    # E: No overload variant of "emit" of "RunIO" matches argument types "type[ModelStarted]", "int"
    io.emit(ModelStarted, trun=3)
    # E: No overload variant of "emit" of "RunIO" matches argument types "type[ModelStarted]", "int"
    io.emit(ModelStarted, 3)
    # E: No overload variant of "emit" of "RunIO" matches argument type "type[ModelStarted]"
    io.emit(ModelStarted)
    # E: Unexpected keyword argument "seq" for overloaded function "emit" of "RunIO"
    # E: No overload variant of "emit" of "RunIO" matches argument types "type[TurnStarted]", "int", "int"
    io.emit(TurnStarted, turn=3, seq=1)


def the_event_of_its_class(io: RunIO, usage: UsageTotals) -> RunFailed:
    # E: Incompatible return value type (got "RunInterrupted", expected "RunFailed")
    return io.emit(RunInterrupted, reason="stop", usage=usage)


def no_event_of_an_ordinary_class(io: RunIO) -> TurnStarted:
    # E: Incompatible return value type (got "None", expected "TurnStarted")
    return io.emit(TurnStarted, turn=3)


async def streamed_events_narrow(stream: RunStream[None]) -> None:
    """A run's stream yields the union of the run events, so an ``isinstance`` (or ``match``)
    narrows; a settled call's event says which outcomes it can hold."""
    async for event in stream:
        assert_type(event, Event)
        if isinstance(event, ToolCallSucceeded):
            assert_type(event.outcome, ToolSuccess)
        elif isinstance(event, ToolCallFailed):
            assert_type(
                event.outcome,
                ToolRejected | ToolInvalidInput | ToolFailure | ToolDefect | ToolUnknownOutcome,
            )
        elif isinstance(event, RunCompleted):
            assert_type(event.text, str)
            # E: "RunCompleted" has no attribute "outcome"  [attr-defined]
            event.outcome  # noqa: B018


def a_success_event_holds_no_failure(io: RunIO, defect: ToolDefect) -> None:
    # E: Argument 1 to "emit" of "RunIO" has incompatible type "type[ToolCallSucceeded]"; expected "type[ToolCallFailed]"  [arg-type]
    io.emit(ToolCallSucceeded, turn=1, tool_call_id="c", tool_name="t", outcome=defect)
