"""The machine's decisions on a final answer (``_machine``), as plain functions without Trio: an
answer with checks waits for their verdict (``CheckAnswer`` / ``AnswerChecked``); a rejection goes
back like a decoding failure, counted in ``output_retries``; the tool output mode's final_result
call is the answer, refused as the tool's failure, and not taken beside other calls."""

from __future__ import annotations

import json
from typing import Any

import attrs
from hypothesis import given
from hypothesis import strategies as st

from effectagent.ai import Toolkit
from effectagent.core import (
    GuardrailTripped,
    OutputInvalid,
    ToolInvalidInput,
    ToolSuccess,
    UsageDelta,
)
from effectagent.engine._machine import (
    AnswerChecked,
    CheckAnswer,
    Complete,
    Fail,
    RecordFeedback,
    RecordUsage,
    RunBatch,
    RunState,
    TurnDue,
    step,
)
from effectagent.engine._output_modes import final_tools
from effectagent.testing import Turn

from .helpers import forecast_tool
from .test_machine import Lookup, begin, config, kinds, responded

GOOD = json.dumps({"city": "Oslo"})


def _checked(**fields: Any) -> Any:
    return attrs.evolve(config(Lookup, **fields), checks=True)


def _tool_mode(**fields: Any) -> Any:
    return attrs.evolve(config(Lookup, **fields), final_tools=final_tools(Lookup))


def test_the_usage_of_guardrails_beside_a_request_is_recorded_after_its_response() -> None:
    """Input guardrails beside the first request used the model: their usage counts after the
    turn's (so the turn is counted first) and is recorded right after the response, so a run
    resumed from the records counts them in the same order; without them, nothing more."""
    state, _ = step(begin(config()), TurnDue(0.0))
    used = ((UsageDelta(7, 1), "judge"),)
    plain = responded(Turn.text("Hi."))
    beside = attrs.evolve(plain, checked=used)
    after, commands = step(state, beside)
    assert kinds(commands)[:2] == ["AppendLater", "RecordUsage"]
    assert commands[1] == RecordUsage(1, "check", used)
    without, alone = step(state, plain)
    assert kinds(alone) == [kinds(commands)[0], *kinds(commands)[2:]]
    tokens = after.budget.usage.input_tokens - without.budget.usage.input_tokens
    assert tokens == 7


def _answered(cfg: Any, turn: Turn) -> tuple[RunState, Any]:
    state, _ = step(begin(cfg), TurnDue(0.0))
    return step(state, responded(turn))


def test_an_answer_with_checks_waits_for_their_verdict_then_completes() -> None:
    state, commands = _answered(_checked(), Turn.text(GOOD))
    assert kinds(commands) == ["AppendLater", "CheckAnswer"]
    assert state.phase == "checking"
    check = commands[-1]
    assert isinstance(check, CheckAnswer)
    used = ((UsageDelta(5, 1), None),)
    state, commands = step(state, AnswerChecked(check.complete, None, used, 1.0))
    # Recorded, then the turn's end, then the run's.
    assert kinds(commands) == ["RecordUsage", "CompleteTurn", "Complete"]
    assert (commands[0], commands[2]) == (RecordUsage(1, "check", used), check.complete)
    assert state.phase == "ended"
    assert state.budget.usage.input_tokens >= 5  # the checks' model calls count


def test_a_trip_fails_the_run_and_a_rejection_goes_back() -> None:
    state, commands = _answered(_checked(), Turn.text(GOOD))
    check = commands[-1]
    tripped = GuardrailTripped("g", "output", "no")
    _, ended = step(state, AnswerChecked(check.complete, tripped, (), 1.0))
    assert kinds(ended) == ["CompleteTurn", "Fail"]
    assert ended[-1] == Fail(tripped)
    state, commands = step(state, AnswerChecked(check.complete, "too vague", (), 1.0))
    assert kinds(commands) == ["RecordFeedback", "CompleteTurn", "NextTurn"]
    feedback = commands[0]
    assert isinstance(feedback, RecordFeedback)
    assert "too vague" in feedback.text
    assert (state.phase, state.output_retries) == ("turn", 1)


@given(st.integers(0, 5))
def test_rejections_end_the_run_after_output_retries(retries: int) -> None:
    """However often the checks reject: ``retries + 1`` answers, then ``OutputInvalid``."""
    state = begin(_checked(output_retries=retries, max_turns=20))
    answers = 0
    while True:
        state, commands = step(state, TurnDue(float(answers)))
        state, commands = step(state, responded(Turn.text(GOOD)))
        answers += 1
        check = commands[-1]
        assert isinstance(check, CheckAnswer)
        state, commands = step(state, AnswerChecked(check.complete, "no", (), 0.0))
        if state.phase == "ended":
            break
    assert answers == retries + 1
    failed = commands[-1]
    assert isinstance(failed, Fail)
    assert isinstance(failed.error, OutputInvalid)


def test_a_final_result_call_is_the_answer_settled_with_the_completion() -> None:
    _, commands = _answered(_tool_mode(), Turn.tool_calls(("final_result", {"city": "Oslo"})))
    assert kinds(commands) == ["AppendLater", "CompleteTurn", "Complete"]
    complete = commands[-1]
    assert isinstance(complete, Complete)
    assert complete.output == Lookup("Oslo")
    (settled,) = complete.settled
    assert isinstance(settled, ToolSuccess)


def test_a_bad_final_result_call_is_refused_as_a_batch_of_its_own() -> None:
    state, commands = _answered(_tool_mode(), Turn.tool_calls(("final_result", {"town": 1})))
    assert kinds(commands) == ["AppendLater", "RunBatch"]
    batch = commands[-1]
    assert isinstance(batch, RunBatch)
    assert batch.plan.runnable == []
    (refusal,) = [e.outcome for e in batch.plan.early]
    assert isinstance(refusal, ToolInvalidInput)
    assert "$.city" in refusal.message
    assert (state.phase, state.output_retries) == ("batch", 1)


def test_final_result_beside_another_call_is_not_taken() -> None:
    cfg = _tool_mode()
    state, _ = step(begin(cfg), TurnDue(0.0))
    turn = Turn.tool_calls(("forecast", {"city": "Oslo"}), ("final_result", {"city": "Oslo"}))
    event = attrs.evolve(responded(turn), toolkit=Toolkit(forecast_tool()))
    state, commands = step(state, event)
    batch = commands[-1]
    assert isinstance(batch, RunBatch)
    assert [c.name for c in batch.plan.runnable] == ["forecast"]
    (refusal,) = [e.outcome for e in batch.plan.early]
    assert isinstance(refusal, ToolInvalidInput)
    assert "called alone" in refusal.message
    assert state.output_retries == 0
