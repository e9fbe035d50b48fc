"""Scheduling properties of the tool pipeline, over generated batches run through the real engine.

Each example builds a fresh runtime whose scripted model declares one generated batch
(:func:`effectagent.testing.batches`) and then answers; :func:`effectagent.testing.run_batch`
runs it on ``MockClock(autojump_threshold=0)`` with instrumented handlers. Latencies are multiples
of 0.25 s, so completion order varies freely and ties are common; under pytest-trio hypothesis also
drives Trio's scheduling order, so tied tasks run in every order across examples.

Proves CAP-005 (deterministic commits), RUN-005 (the next request sees a complete batch), RUN-001
(``run`` reduces the same stream as ``stream``) and the pipeline's settlement and cancellation
guarantees (DESIGN §4).
"""

from __future__ import annotations

import collections
from typing import Any

import attrs
import trio
import trio.testing
from hypothesis import event, given
from hypothesis import strategies as st

from effectagent import Tool, ToolCallContext, Toolkit
from effectagent.ai import AssistantMessage, ToolCallContent
from effectagent.core import (
    TERMINAL_EVENTS,
    RunCompleted,
    RunFailedRecord,
    RunInterrupted,
    TextDelta,
    ToolCallDeclared,
    ToolCallFailed,
    ToolCallStarted,
    ToolCallSucceeded,
    ToolDefect,
    ToolFailure,
    ToolOutcome,
)
from effectagent.testing import (
    BatchReport,
    BatchSpec,
    CallSpec,
    batches,
    run_batch,
    run_batch_sync,
)

from .helpers import Forecast, Lookup, UnknownCity

CONCURRENCY = st.integers(1, 4)
INTERRUPTED = "interrupted before it settled"
STEPS_BASE, STEPS_PER_CALL = 6, 3  # a run's scheduler steps: about 4, plus 2-3 per call that waits


@st.composite
def batch_and_cancellation(draw: st.DrawFn) -> tuple[BatchSpec, dict[str, Any]]:
    """A batch and where to cancel its consumer: at a time on the mock clock (a multiple of the
    latency step, so it ties with handler completions), or after the run's tasks took n scheduler
    steps, n spread over the whole run (about STEPS_PER_CALL per call plus STEPS_BASE), so that
    cancellations land at every scheduler step — including those where no time passes (a call
    that yields without waiting, the consumer taking events)."""
    batch = draw(batches())
    if draw(st.booleans()):
        steps = STEPS_BASE + STEPS_PER_CALL * len(batch)
        return batch, {"cancel_after_steps": draw(st.integers(1, steps))}
    return batch, {"cancel_at": draw(st.integers(0, 48)) * 0.25}


def _inversions(order: tuple[str, ...], declared: tuple[str, ...]) -> int:
    rank = {call_id: i for i, call_id in enumerate(declared)}
    ranks = [rank[call_id] for call_id in order]
    return sum(1 for i, a in enumerate(ranks) for b in ranks[i + 1 :] if a > b)


def _assert_committed_in_declaration_order(report: BatchReport) -> None:
    batch = report.batch
    # The canonical log: one ToolCallSettled per call, in declaration order, in one append.
    assert report.settled_ids == batch.ids
    positions = [i for i, r in enumerate(report.records) if r in report.settlements]
    assert positions == list(range(positions[0], positions[0] + len(batch))), "not one append"
    # The next model request: the assistant's calls and then their results, both in that order.
    assert report.results_seen_by_model == batch.ids
    messages = report.requests[1].messages
    (assistant,) = [m for m in messages if isinstance(m, AssistantMessage)]
    assert tuple(c.id for c in assistant.content if isinstance(c, ToolCallContent)) == batch.ids


# ---- commit order --------------------------------------------------------------------------------


@given(batch=batches(), tool_concurrency=CONCURRENCY)
def test_commit_order_is_declaration_order(batch: BatchSpec, tool_concurrency: int) -> None:
    """CAP-005 / RUN-005: whatever order the calls complete in, the log and the next model request
    see the results in the model's declaration order."""
    report = run_batch_sync(batch, tool_concurrency=tool_concurrency)

    reordered = _inversions(report.completion_order, batch.ids) > 0
    event("completion order differs" if reordered else "completion order as declared")
    assert report.status == "completed", report.result
    _assert_committed_in_declaration_order(report)


async def test_reversed_completion_still_commits_in_declaration_order(
    autojump_clock: trio.testing.MockClock,
) -> None:
    slowest_first = BatchSpec(
        CallSpec(f"call_{name}", "probe_echo", '{"text": "x"}', latency=latency)
        for name, latency in (("c", 3.0), ("a", 2.0), ("b", 1.0))
    )
    report = await run_batch(slowest_first, tool_concurrency=3)

    assert report.completion_order == ("call_b", "call_a", "call_c")
    _assert_committed_in_declaration_order(report)
    assert trio.current_time() == 3.0  # concurrent: the batch took its slowest call, not the sum


# ---- concurrency ---------------------------------------------------------------------------------


@given(batch=batches(), tool_concurrency=CONCURRENCY)
def test_never_more_than_tool_concurrency_handlers_at_once(
    batch: BatchSpec, tool_concurrency: int
) -> None:
    """The permits bound the handlers running at once — and the bound is used, not serialized."""
    report = run_batch_sync(batch, tool_concurrency=tool_concurrency)

    valid = batch.valid_calls
    waiting = [c for c in valid if c.latency > 0 or c.behaviour == "hang"]
    assert report.max_concurrency <= tool_concurrency
    assert min(tool_concurrency, len(waiting)) <= report.max_concurrency <= len(valid)
    started = [e.tool_call_id for e in report.events if isinstance(e, ToolCallStarted)]
    assert sorted(started) == sorted(c.tool_call_id for c in valid)
    assert report.permits_in_use == 0


# ---- settlement ----------------------------------------------------------------------------------


@given(batch=batches(), tool_concurrency=CONCURRENCY)
def test_every_declared_call_settles_exactly_once_with_the_outcome_its_behaviour_implies(
    batch: BatchSpec, tool_concurrency: int
) -> None:
    """Invalid arguments → invalid-input; declared failure → failure; crash → defect; success →
    success; a hang → defect at the tool's timeout. One settlement and one outcome event each."""
    report = run_batch_sync(batch, tool_concurrency=tool_concurrency)

    assert collections.Counter(report.settled_ids) == collections.Counter(batch.ids)
    assert report.unexpected() == ()
    assert sorted(report.completion_order) == sorted(batch.ids)
    announced = {
        e.tool_call_id: e.outcome
        for e in report.events
        if isinstance(e, ToolCallSucceeded | ToolCallFailed)
    }
    assert announced == {s.tool_call_id: s.outcome for s in report.settlements}
    assert report.prepared_ids == tuple(c.tool_call_id for c in batch.valid_calls)
    ran = collections.Counter(t.tool_call_id for t in report.traces)
    assert ran == collections.Counter(c.tool_call_id for c in batch.valid_calls)
    for call in batch.valid_calls:
        outcome = report.outcome(call.tool_call_id)
        if call.behaviour == "hang":
            assert isinstance(outcome, ToolDefect)
            assert outcome.message.startswith("timed out after")
        elif call.behaviour == "declared-failure":
            assert isinstance(outcome, ToolFailure)
            assert outcome.error["_tag"] == "ProbeFailed"


@given(batch=batches(invalid_ratio=0.5, max_size=6), tool_concurrency=CONCURRENCY)
def test_handlers_only_ever_see_decoded_input(batch: BatchSpec, tool_concurrency: int) -> None:
    """A handler gets an instance of its tool's attrs parameters type (schema-valid JSON for a
    dynamic tool) — never the raw text — and a call whose arguments do not decode never runs."""
    report = run_batch_sync(batch, tool_concurrency=tool_concurrency)

    assert report.undecoded == ()
    assert {t.tool_call_id for t in report.traces} == {c.tool_call_id for c in batch.valid_calls}


# ---- cancellation --------------------------------------------------------------------------------


@given(
    case=batch_and_cancellation(),
    tool_concurrency=CONCURRENCY,
    model_part_delay=st.sampled_from([0.0, 0.25]),
)
def test_cancelling_the_consumer_at_any_point_leaves_nothing_running(
    case: tuple[BatchSpec, dict[str, Any]], tool_concurrency: int, model_part_delay: float
) -> None:
    """Cancelling the consumer — at a time, or at any scheduler step — leaves no handler running
    and no permit held; every prepared call settles, the batch commits whole or not at all, and a
    run cancelled while handlers ran ends with RunInterrupted."""
    batch, cancel = case
    report = run_batch_sync(
        batch, tool_concurrency=tool_concurrency, model_part_delay=model_part_delay, **cancel
    )

    # No handler left running, every one that started ended, every permit is back.
    assert report.live_handlers == 0
    assert all(t.ending is not None for t in report.traces)
    assert report.permits_in_use == 0

    # Exactly one terminal, last; a run with handlers still going when cancelled is interrupted.
    terminals = [e for e in report.events if isinstance(e, TERMINAL_EVENTS)]
    assert len(terminals) == 1
    assert terminals[0] is report.events[-1]
    terminal = terminals[0]
    event(f"{'cancelled' if report.cancelled else 'not cancelled'}: {type(terminal).__name__}")
    if report.cancelled and report.live_at_cancel:
        assert isinstance(terminal, RunInterrupted)
    assert isinstance(terminal, RunInterrupted | RunCompleted)

    # Every prepared call settled; a batch commits whole or not at all, in declaration order.
    assert set(report.prepared_ids) <= set(report.settled_ids)
    assert report.settled_ids in ((), batch.ids)

    if isinstance(terminal, RunCompleted):
        assert report.unexpected() == ()
        _assert_committed_in_declaration_order(report)
        return
    assert any(isinstance(r, RunFailedRecord) and r.reason == "interrupted" for r in report.records)
    # What ended before the interruption keeps its real outcome; the rest are interrupted defects.
    endings = {t.tool_call_id: t.ending for t in report.traces}
    for call, outcome in zip(batch.calls, report.outcomes, strict=False):
        ending = endings.get(call.tool_call_id)
        if ending in ("returned", "raised") or not call.valid:
            assert outcome.kind == call.expected_kind, (call, outcome)
        else:
            assert isinstance(outcome, ToolDefect), (call, outcome)
            assert call.behaviour == "hang" or outcome.message == INTERRUPTED
    if report.outcomes and any(
        isinstance(o, ToolDefect) and o.message == INTERRUPTED for o in report.outcomes
    ):
        assert len(report.requests) == 1  # an interrupted batch is never followed by a request


def test_an_interruption_under_event_backpressure_still_settles_every_prepared_call() -> None:
    """A batch with more early outcomes than the stream buffers events (one call runs, 300 are
    invalid): cancelling the consumer at each scheduler step — before, during and after
    ``ToolCallPrepared`` was appended — must still commit the whole batch."""
    batch = BatchSpec(
        [CallSpec("call_runs", "probe_echo", '{"text": "x"}', latency=0.25)]
        + [CallSpec(f"call_{i}", "probe_echo", "{", valid=False) for i in range(300)]
    )
    for steps in range(1, 500):  # every step of the run, until the run ends before the cancel
        report = run_batch_sync(batch, tool_concurrency=1, cancel_after_steps=steps)
        assert set(report.prepared_ids) <= set(report.settled_ids), steps
        assert report.settled_ids in ((), batch.ids), steps
        if report.status == "completed":  # the cancellation came after the run's terminal
            break
        assert report.cancelled
        assert isinstance(report.events[-1], RunInterrupted), steps
    else:
        raise AssertionError("the run never completed")


@st.composite
def batch_and_cut(draw: st.DrawFn) -> tuple[BatchSpec, dict[str, Any]]:
    """A batch and how it is cut short: the consumer cancelled after n scheduler steps or at a
    time, or the run's own deadline (``max_duration``), after which the run ends through its grace
    turn. (``cancel_at`` far beyond the deadline only lets hanging calls into the batch.)"""
    batch, cancel = draw(batch_and_cancellation())
    if draw(st.booleans()):
        return batch, {"max_duration": draw(st.integers(1, 24)) * 0.25, "cancel_at": 10_000.0}
    return batch, cancel


def _settled_key(turn: int, tool_call_id: str, outcome: ToolOutcome) -> tuple[int, str, str]:
    return (turn, tool_call_id, repr(outcome))


@given(
    case=batch_and_cut(),
    tool_concurrency=CONCURRENCY,
    mode=st.sampled_from(["stream", "run"]),
)
def test_settle_events_and_run_result_agree_with_the_log(
    case: tuple[BatchSpec, dict[str, Any]], tool_concurrency: int, mode: Any
) -> None:
    """For every run, however its batch is cut short — the consumer cancelled anywhere, or the
    deadline passed and the run completed through its grace turn — the settle events and
    ``RunResult.outcomes`` are exactly the log's settlements for that run, one each."""
    batch, cut = case
    report = run_batch_sync(batch, tool_concurrency=tool_concurrency, mode=mode, **cut)
    logged = [(s.turn, s.tool_call_id, repr(s.outcome)) for s in report.settlements]
    assert len({key[:2] for key in logged}) == len(logged)  # one settlement per call
    if mode == "stream":
        announced = [
            _settled_key(e.turn, e.tool_call_id, e.outcome)
            for e in report.events
            if isinstance(e, ToolCallSucceeded | ToolCallFailed)
        ]
        assert sorted(announced) == sorted(logged)
    if report.result is not None:
        assert report.result.outcomes == report.outcomes
    event(f"{mode}: {report.status}, {'deadline' if 'max_duration' in cut else 'cancel'}")


def test_calls_cut_off_by_the_deadline_are_announced_before_the_grace_turn_answers() -> None:
    """Two hanging calls and a deadline: both settle as interrupted defects, each announced by a
    ``ToolCallFailed`` event, and the run completes through its grace turn with both outcomes."""
    batch = BatchSpec(
        [
            CallSpec("call_a", "probe_echo", '{"text": "a"}', behaviour="hang"),
            CallSpec("call_b", "probe_echo", '{"text": "b"}', behaviour="hang"),
        ]
    )
    report = run_batch_sync(batch, tool_concurrency=2, max_duration=5.0, cancel_at=10_000.0)
    assert report.status == "completed"
    assert report.result is not None
    assert report.result.exhausted == "duration"
    failed = [e for e in report.events if isinstance(e, ToolCallFailed)]
    assert [(e.tool_call_id, e.outcome.kind) for e in failed] == [
        ("call_a", "defect"),
        ("call_b", "defect"),
    ]
    assert [o.tool_call_id for o in report.result.outcomes] == ["call_a", "call_b"]
    assert report.result.outcomes == report.outcomes


# ---- run and stream ------------------------------------------------------------------------------


@given(batch=batches(max_size=6), tool_concurrency=CONCURRENCY)
def test_run_and_stream_agree(batch: BatchSpec, tool_concurrency: int) -> None:
    """RUN-001: ``run`` is the reduction of the very stream ``stream`` yields."""
    streamed = run_batch_sync(batch, tool_concurrency=tool_concurrency, mode="stream")
    ran = run_batch_sync(batch, tool_concurrency=tool_concurrency, mode="run")
    assert streamed.result is not None
    assert ran.result is not None

    # The same result but for the run's own ID — completion order (ties, permit order) may differ
    # between the two runs; nothing in the result may depend on it. The same commits, too.
    assert attrs.evolve(streamed.result, run_id="") == attrs.evolve(ran.result, run_id="")
    assert streamed.outcomes == ran.outcomes

    # And the stream's reduction says what the events say.
    result = streamed.result
    assert result.events == len(streamed.events)
    assert result.text == "".join(e.text for e in streamed.events if isinstance(e, TextDelta))
    # RunResult.outcomes are in declaration (commit) order, whatever the completion order.
    declared = [e.tool_call_id for e in streamed.events if isinstance(e, ToolCallDeclared)]
    settled = {
        e.tool_call_id: e.outcome
        for e in streamed.events
        if isinstance(e, ToolCallSucceeded | ToolCallFailed)
    }
    assert result.outcomes == tuple(settled[i] for i in declared if i in settled)


# ---- a user's own toolkit ------------------------------------------------------------------------


HIGHS = {"Oslo": 4.0, "Rome": 17.5, "Lima": 19.0}
forecast = Tool(
    "forecast",
    "Today's forecast for a city.",
    parameters=Lookup,
    success=Forecast,
    failure=UnknownCity,
    readonly=True,
    timeout=30.0,
)
weather_tools = Toolkit(forecast)


async def handle_forecast(params: Lookup, call: ToolCallContext) -> Forecast:
    assert isinstance(params, Lookup)
    if params.city not in HIGHS:
        raise UnknownCity(params.city)
    await trio.sleep(0.5)
    return Forecast(params.city, HIGHS[params.city])


@given(
    batch=batches(
        weather_tools,
        arguments={"forecast": st.builds(Lookup, st.sampled_from(sorted(HIGHS)))},
        failures={"forecast": st.builds(UnknownCity, st.sampled_from(["Atlantis", "Mu"]))},
        max_size=6,
    ),
    tool_concurrency=CONCURRENCY,
)
def test_a_users_toolkit_is_scheduled_by_the_same_rules(
    batch: BatchSpec, tool_concurrency: int
) -> None:
    """What docs/guides/testing.md shows: your toolkit, your handler, the same guarantees."""
    report = run_batch_sync(
        batch, tool_concurrency=tool_concurrency, handlers={forecast: handle_forecast}
    )

    assert report.status == "completed"
    assert report.unexpected() == ()
    assert report.undecoded == ()
    assert report.max_concurrency <= tool_concurrency
    _assert_committed_in_declaration_order(report)


# ---- the strategy itself -------------------------------------------------------------------------


@given(batch=batches(min_size=0, max_size=12, invalid_ratio=0.4))
def test_generated_batches_say_the_truth_about_their_calls(batch: BatchSpec) -> None:
    assert len(batch) <= 12
    assert len(set(batch.ids)) == len(batch)
    kit = batch.toolkit
    for call in batch.calls:
        tool = kit.get(call.tool_name)
        decodes = tool is not None
        if tool is not None:
            try:
                tool.decode_arguments(call.arguments)
            except Exception:
                decodes = False
        assert decodes == call.valid, call
        if call.valid:
            assert tool is not None
            assert 0 <= call.latency <= 5.0
            if tool.timeout is not None:
                assert call.latency <= tool.timeout / 2
            assert call.behaviour != "hang" or tool.timeout is not None


def test_a_call_whose_permit_comes_as_the_batch_is_interrupted_never_starts() -> None:
    """One permit: the first call ends at 2.0 s as the consumer is cancelled, and the permit goes
    to the next call in that same instant. That call raised its declared failure at once (it
    never awaits) and the engine, seeing the batch interrupted, took the failure for the
    interruption's: a handler that ran settled "interrupted before it settled". Now a call whose
    permit comes as the batch is interrupted does not start."""
    from effectagent.testing._strategies import ProbeFailed

    batch = BatchSpec(
        [
            CallSpec("call_a", "probe_echo", '{"text": ""}', latency=2.0),
            CallSpec(
                "call_b",
                "probe_echo",
                '{"text": ""}',
                behaviour="declared-failure",
                failure=ProbeFailed("no such key"),
            ),
        ]
    )
    report = run_batch_sync(batch, tool_concurrency=1, cancel_at=2.0)
    assert isinstance(report.events[-1], RunInterrupted)
    endings = {trace.tool_call_id: trace.ending for trace in report.traces}
    assert "call_b" not in endings  # it never ran
    (_, b) = report.outcomes
    assert isinstance(b, ToolDefect)
    assert b.message == INTERRUPTED
