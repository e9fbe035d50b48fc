"""``Runtime.run(..., run_id=...)`` and ``Runtime.resume``: a run continued from its records after
its process died — its calls that may have run, its recorded answer, its budget."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs
import pytest
import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st

from effectagent.ai import ModelRequest, Reconciled, Tool, ToolCallContext, Toolkit
from effectagent.core import (
    Agent,
    LogEntry,
    ModelResponseRecorded,
    RunCompleted,
    RunCompletedRecord,
    RunStarted,
    ToolCallFailed,
    ToolCallPrepared,
    ToolCallSettled,
    ToolSuccess,
    ToolUnknownOutcome,
)
from effectagent.effect import Layer
from effectagent.engine import (
    InMemoryConversationLog,
    RunAlreadyEnded,
    RunExists,
    UnknownRun,
    open_runtime,
)
from effectagent.testing import FunctionModel, ScriptedModel, Turn

from .crash import DyingLog, copy_until, log_layer
from .helpers import make_policy, records_of, results_by_id

CONV, RUN = "conv-1", "run-1"


@attrs.frozen
class Charge:
    amount: int


def charge_tool(**options: Any) -> Tool[Charge, str]:
    return Tool("charge", "Charge the card.", parameters=Charge, success=str, **options)


class Card:
    """A card that is charged by the handler, once per call it serves."""

    def __init__(self) -> None:
        self.charges: list[tuple[str, int]] = []

    async def charge(self, params: Charge, call: ToolCallContext) -> str:
        await trio.lowlevel.checkpoint()
        self.charges.append((call.tool_call_id, params.amount))
        return f"charged {params.amount}"


def agent_of(tool: Tool[Any, Any], **policy: Any) -> Agent:
    return Agent("payer", "Pay what you are asked.", make_policy(**policy), Toolkit(tool))


async def crash_while_running(
    agent: Agent, handlers: Layer, *, appends: int, turns: list[Turn] | None = None
) -> InMemoryConversationLog:
    """Run ``agent`` until its process dies after ``appends`` appends; return what the log held."""
    log = DyingLog(appends=appends)
    model = ScriptedModel(
        turns
        if turns is not None
        else [Turn.tool_calls(("charge", {"amount": 5})), Turn.text("Paid.")]
    )
    async with open_runtime(handlers + model.as_layer() + log.layer(), agents=[agent]) as runtime:
        result = await runtime.run(agent, "Pay 5.", conversation_id=CONV, create=True, run_id=RUN)
    assert result.status == "failed"  # the process "died": its end is not in the log
    return log.log


async def resume(
    agent: Agent, handlers: Layer, log: InMemoryConversationLog, model: ScriptedModel
) -> Any:
    async with open_runtime(
        handlers + model.as_layer() + log_layer(log), agents=[agent]
    ) as runtime:
        return await runtime.resume(agent, conversation_id=CONV, run_id=RUN)


def settled_outcomes(entries: list[LogEntry]) -> list[Any]:
    return [r.outcome for r in records_of(entries, ToolCallSettled)]


# ---- run_id ------------------------------------------------------------------------------------


async def test_a_run_takes_the_run_id_it_is_given(autojump_clock: trio.testing.MockClock) -> None:
    agent = agent_of(charge_tool())
    card = Card()
    layer = agent.toolkit.handlers({"charge": card.charge}) + ScriptedModel.layer(
        [Turn.text("Hi.")]
    )
    async with open_runtime(layer, agents=[agent]) as runtime:
        async with runtime.stream(agent, "Hi.", run_id="run-chosen") as events:
            seen = [event async for event in events]
        result = await runtime.run(
            agent, "Hi.", conversation_id=events.conversation_id, run_id="r2"
        )
        log = list(await runtime.log.entries(events.conversation_id))
    assert {event.run_id for event in seen} == {"run-chosen"}
    assert result.run_id == "r2"
    assert {getattr(e.record, "run_id", None) for e in log} == {None, "run-chosen", "r2"}


async def test_a_run_id_the_conversation_has_is_refused_before_anything_is_written(
    autojump_clock: trio.testing.MockClock,
) -> None:
    agent = agent_of(charge_tool())
    layer = agent.toolkit.handlers({"charge": Card().charge}) + ScriptedModel.layer(
        [Turn.text("Hi.")]
    )
    async with open_runtime(layer, agents=[agent]) as runtime:
        first = await runtime.run(agent, "Hi.", run_id=RUN)
        before = list(await runtime.log.entries(first.conversation_id))
        with pytest.raises(RunExists, match=f"already has records of run '{RUN}'"):
            await runtime.run(agent, "Again.", conversation_id=first.conversation_id, run_id=RUN)
        with pytest.raises(RunExists):
            async with runtime.stream(
                agent, "Again.", conversation_id=first.conversation_id, run_id=RUN
            ):
                pass  # pragma: no cover - refused as the block is entered
        assert list(await runtime.log.entries(first.conversation_id)) == before
        assert runtime.active_runs == 0


@pytest.mark.parametrize(
    ("run_id", "error"), [("", ValueError), ("  ", ValueError), (7, TypeError)]
)
async def test_a_run_id_is_a_non_empty_str(run_id: Any, error: type[Exception]) -> None:
    agent = agent_of(charge_tool())
    layer = agent.toolkit.handlers({"charge": Card().charge}) + ScriptedModel.layer()
    async with open_runtime(layer, agents=[agent]) as runtime:
        with pytest.raises(error, match="run_id"):
            await runtime.run(agent, "Hi.", run_id=run_id)
        with pytest.raises(error, match="run_id"):
            await runtime.resume(agent, conversation_id=CONV, run_id=run_id)


# ---- what cannot be resumed ---------------------------------------------------------------------


async def test_resume_refuses_an_unknown_run_and_an_ended_one_writing_nothing(
    autojump_clock: trio.testing.MockClock,
) -> None:
    agent = agent_of(charge_tool())
    model = ScriptedModel([Turn.text("Hi.")])
    layer = agent.toolkit.handlers({"charge": Card().charge}) + model.as_layer()
    async with open_runtime(layer, agents=[agent]) as runtime:
        done = await runtime.run(agent, "Hi.", conversation_id=CONV, create=True, run_id=RUN)
        assert done.status == "completed"
        before = list(await runtime.log.entries(CONV))
        with pytest.raises(RunAlreadyEnded, match="it has completed"):
            await runtime.resume(agent, conversation_id=CONV, run_id=RUN)
        with pytest.raises(UnknownRun, match="no records of run 'run-9'"):
            await runtime.resume(agent, conversation_id=CONV, run_id="run-9")
        with pytest.raises(UnknownRun):
            async with runtime.stream_resume(agent, conversation_id="nowhere", run_id=RUN):
                pass  # pragma: no cover - refused as the block is entered
        assert list(await runtime.log.entries(CONV)) == before
        assert runtime.active_runs == 0


# ---- a call that may have run -------------------------------------------------------------------

# Appends of the run: 1 its input, 2 the response and the prepared call, 3 the settlement — so a
# process that dies at its third append has charged the card and recorded nothing of it.
DIES_AFTER_THE_HANDLER = 2


async def test_a_prepared_call_of_an_ordinary_tool_settles_unknown_and_the_model_is_told(
    autojump_clock: trio.testing.MockClock,
) -> None:
    card = Card()
    agent = agent_of(charge_tool())
    handlers = agent.toolkit.handlers({"charge": card.charge})
    log = await crash_while_running(agent, handlers, appends=DIES_AFTER_THE_HANDLER)
    model = ScriptedModel([Turn.text("It may have been charged.")])
    result = await resume(agent, handlers, log, model)
    assert result.status == "completed"
    assert len(card.charges) == 1  # run once, before the crash; never again
    (outcome,) = result.outcomes
    assert isinstance(outcome, ToolUnknownOutcome)
    assert "may or may not have happened" in outcome.reason
    shown = results_by_id(model.requests[0])["call_0"]
    assert shown.result == {"_tag": "ToolUnknownOutcome", "message": outcome.reason}
    assert shown.is_failure
    entries = list(await log.entries(CONV))
    assert len(records_of(entries, ToolCallPrepared)) == 1  # not prepared again
    assert settled_outcomes(entries) == [outcome]
    assert len(records_of(entries, RunCompletedRecord)) == 1
    assert [e.seq for e in entries] == list(range(1, len(entries) + 1))


async def test_a_prepared_call_of_an_idempotent_tool_runs_again(
    autojump_clock: trio.testing.MockClock,
) -> None:
    card = Card()
    agent = agent_of(charge_tool(idempotent=True))
    handlers = agent.toolkit.handlers({"charge": card.charge})
    log = await crash_while_running(agent, handlers, appends=DIES_AFTER_THE_HANDLER)
    result = await resume(agent, handlers, log, ScriptedModel([Turn.text("Paid.")]))
    assert result.status == "completed"
    assert card.charges == [("call_0", 5), ("call_0", 5)]  # at-least-once, the same call
    assert result.outcomes == (ToolSuccess("call_0", "charge", "charged 5"),)


@pytest.mark.parametrize(
    ("found", "charges", "outcome"),
    [
        (
            Reconciled.done("charged 5 (found on the statement)"),
            1,
            ToolSuccess("call_0", "charge", "charged 5 (found on the statement)"),
        ),
        (Reconciled.not_done(), 2, ToolSuccess("call_0", "charge", "charged 5")),
        (
            Reconciled.unknown("the bank does not answer"),
            1,
            ToolUnknownOutcome("call_0", "charge", "the bank does not answer"),
        ),
    ],
)
async def test_a_prepared_call_of_a_tool_with_a_reconcile_function_is_reconciled(
    found: Reconciled[str], charges: int, outcome: Any, autojump_clock: trio.testing.MockClock
) -> None:
    card = Card()
    asked: list[tuple[Charge, str]] = []

    async def reconcile(params: Charge, call: ToolCallContext) -> Reconciled[str]:
        await trio.lowlevel.checkpoint()
        asked.append((params, call.tool_call_id))
        return found

    tool = charge_tool()
    agent = agent_of(tool)
    handlers = agent.toolkit.handlers(tool.bind(card.charge, reconcile=reconcile))
    log = await crash_while_running(agent, handlers, appends=DIES_AFTER_THE_HANDLER)
    result = await resume(agent, handlers, log, ScriptedModel([Turn.text("Done.")]))
    assert asked == [(Charge(5), "call_0")]
    assert len(card.charges) == charges
    assert result.outcomes == (outcome,)


async def test_a_reconcile_function_that_fails_leaves_the_outcome_unknown(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async def reconcile(params: Charge, call: ToolCallContext) -> Reconciled[str]:
        raise ConnectionError("bank unreachable")

    card = Card()
    tool = charge_tool()
    agent = agent_of(tool)
    handlers = agent.toolkit.handlers(tool.bind(card.charge, reconcile=reconcile))
    log = await crash_while_running(agent, handlers, appends=DIES_AFTER_THE_HANDLER)
    result = await resume(agent, handlers, log, ScriptedModel([Turn.text("Done.")]))
    (outcome,) = result.outcomes
    assert isinstance(outcome, ToolUnknownOutcome)
    assert "checking whether it happened failed" in outcome.reason
    assert "bank unreachable" not in outcome.reason  # the error is for the run's log only
    assert len(card.charges) == 1


async def test_a_declared_call_never_prepared_runs(autojump_clock: trio.testing.MockClock) -> None:
    card = Card()
    agent = agent_of(charge_tool())
    handlers = agent.toolkit.handlers({"charge": card.charge})
    log = await crash_while_running(agent, handlers, appends=DIES_AFTER_THE_HANDLER)
    # The log as if the process died between the response and its call's preparation.
    cut = await copy_until(log, CONV, 3)
    assert isinstance(list(await cut.entries(CONV))[-1].record, ModelResponseRecorded)
    card.charges.clear()
    result = await resume(agent, handlers, cut, ScriptedModel([Turn.text("Paid.")]))
    assert card.charges == [("call_0", 5)]
    assert result.outcomes == (ToolSuccess("call_0", "charge", "charged 5"),)
    assert len(records_of(list(await cut.entries(CONV)), ToolCallPrepared)) == 1


async def test_an_answer_recorded_without_the_runs_end_completes_without_a_model_call(
    autojump_clock: trio.testing.MockClock,
) -> None:
    agent = agent_of(charge_tool())
    handlers = agent.toolkit.handlers({"charge": Card().charge})
    model = ScriptedModel([Turn.text("Nothing to pay.")])
    async with open_runtime(handlers + model.as_layer(), agents=[agent]) as runtime:
        await runtime.run(agent, "Pay 0.", conversation_id=CONV, create=True, run_id=RUN)
        log = await copy_until(runtime.log, CONV, 3)  # type: ignore[arg-type]
    silent = ScriptedModel([])  # a model that fails the run if it is asked anything
    layer = handlers + silent.as_layer() + log_layer(log)
    async with (
        open_runtime(layer, agents=[agent]) as rt,
        rt.stream_resume(agent, conversation_id=CONV, run_id=RUN) as events,
    ):
        seen = [event async for event in events]
    assert silent.requests == []
    first, last = seen[0], seen[-1]
    assert isinstance(first, RunStarted)
    assert first.resumed
    assert first.input == "Pay 0."
    assert type(last).__name__ == "RunCompleted"
    assert isinstance(last, RunCompleted)
    assert last.text == "Nothing to pay."
    entries = list(await log.entries(CONV))
    assert len(records_of(entries, ModelResponseRecorded)) == 1  # not recorded again
    assert len(records_of(entries, RunCompletedRecord)) == 1


# ---- the budget, counted again from the records -----------------------------------------------------


def _always_a_call(calls: int) -> Callable[[ModelRequest], Turn]:
    def answer(request: ModelRequest) -> Turn:
        if request.tool_choice == "none":
            return Turn.text("Out of budget.")
        return Turn.tool_calls(*[("charge", {"amount": n}) for n in range(calls)])

    return answer


class Counting:
    """A model and a card that count what a run — and its resumption — did."""

    def __init__(self, calls: int) -> None:
        self.model_calls = 0
        self.card = Card()
        self._answer = _always_a_call(calls)

    def model(self) -> Layer:
        def answer(request: ModelRequest) -> Turn:
            self.model_calls += 1
            return self._answer(request)

        return FunctionModel.layer(answer)


async def _crash_and_resume(
    max_turns: int, max_tool_calls: int, calls: int, cut: int
) -> tuple[int, int, int, list[LogEntry]]:
    agent = agent_of(charge_tool(), max_turns=max_turns, max_tool_calls=max_tool_calls)
    whole = Counting(calls)
    handlers = agent.toolkit.handlers({"charge": whole.card.charge})
    log = DyingLog()
    async with open_runtime(handlers + whole.model() + log.layer(), agents=[agent]) as runtime:
        await runtime.run(agent, "Pay.", conversation_id=CONV, create=True, run_id=RUN)
    boundaries = log.boundaries[:-1]  # every append but the run's end
    records = boundaries[cut % len(boundaries)]
    crashed = await copy_until(log.log, CONV, records)
    before = list(await crashed.entries(CONV))
    # What the run did before it died: the responses and calls the log holds.
    responses = len(records_of(before, ModelResponseRecorded))
    prepared = len(records_of(before, ToolCallPrepared))
    again = Counting(calls)
    handlers = agent.toolkit.handlers({"charge": again.card.charge})
    async with open_runtime(handlers + again.model() + log_layer(crashed), agents=[agent]) as rt:
        result = await rt.resume(agent, conversation_id=CONV, run_id=RUN)
    assert result.status == "completed"
    after = list(await crashed.entries(CONV))
    return responses + again.model_calls, prepared, len(again.card.charges), after


@settings(max_examples=60)
@given(
    max_turns=st.integers(1, 4),
    max_tool_calls=st.integers(1, 5),
    calls=st.integers(1, 3),
    cut=st.integers(0, 50),
)
def test_a_run_cut_at_any_append_and_resumed_stays_within_its_budget(
    max_turns: int, max_tool_calls: int, calls: int, cut: int
) -> None:
    model_calls, prepared, charged, log = trio.run(
        _crash_and_resume, max_turns, max_tool_calls, calls, cut
    )
    assert model_calls <= max_turns + 1  # its turns and the one grace turn
    # Calls prepared before the crash are never run again (the tool is not idempotent): they
    # settle unknown; the calls run after it and those are within the tool-call budget.
    assert prepared + charged <= max_tool_calls
    assert len(records_of(log, ModelResponseRecorded)) <= max_turns + 1
    assert len(records_of(log, RunCompletedRecord)) == 1
    settled = records_of(log, ToolCallSettled)
    assert len({(s.turn, s.tool_call_id) for s in settled}) == len(settled)  # each once


CANARY = "tok-canary-5f1e"


async def test_what_a_resumed_run_tells_of_a_call_never_holds_a_secret(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async def reconcile(params: Charge, call: ToolCallContext) -> Reconciled[str]:
        await trio.lowlevel.checkpoint()
        return Reconciled.unknown(f"the bank answered with {CANARY}")

    card = Card()
    tool = charge_tool()
    agent = agent_of(tool)
    handlers = agent.toolkit.handlers(tool.bind(card.charge, reconcile=reconcile))
    log = await crash_while_running(agent, handlers, appends=DIES_AFTER_THE_HANDLER)
    model = ScriptedModel([Turn.text("Unsure.")])
    layer = handlers + model.as_layer() + log_layer(log)
    async with (
        open_runtime(layer, agents=[agent], secrets=[CANARY]) as runtime,
        runtime.stream_resume(agent, conversation_id=CONV, run_id=RUN) as events,
    ):
        seen = [event async for event in events]
    (outcome,) = [e.outcome for e in seen if isinstance(e, ToolCallFailed)]
    assert isinstance(outcome, ToolUnknownOutcome)
    assert outcome.reason == "the bank answered with [REDACTED]"
    assert CANARY not in repr(seen)
    assert CANARY not in repr(list(await log.entries(CONV)))
    assert CANARY not in repr(model.requests)
