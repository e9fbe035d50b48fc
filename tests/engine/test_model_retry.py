"""Model retries (``AgentPolicy.model_retry``): a retryable model error is tried again on the Trio
clock — exponential backoff with jitter, a provider's ``retry_after`` honoured, never past the
run's deadline — after a ``ModelRetrying`` event; nothing of a failed call is ever recorded."""

from __future__ import annotations

import math

import pytest
import trio
import trio.testing
from hypothesis import given
from hypothesis import strategies as st

from effectagent.ai import (
    AiError,
    AuthenticationFailed,
    ModelNetworkError,
    ModelUnavailable,
    RateLimited,
    TextDeltaPart,
    TextStartPart,
)
from effectagent.core import (
    EventBase,
    LogEntry,
    ModelFailed,
    ModelResponseRecorded,
    ModelRetrying,
    RetryPolicy,
    RunCompleted,
    RunFailed,
    RunInterrupted,
)
from effectagent.engine import open_runtime
from effectagent.engine._retry import retry_delay
from effectagent.testing import Turn

from .helpers import (
    TrackingModel,
    assert_well_formed,
    entries,
    events_of,
    make_agent,
    make_policy,
    records_of,
    run_events,
)


async def _run(turns: list[Turn], **policy: object) -> tuple[list[EventBase], list[LogEntry]]:
    model = TrackingModel(turns)
    agent = make_agent(policy=make_policy(**policy))
    async with open_runtime(model.layer(), agents=[agent]) as runtime:
        events = await run_events(runtime, agent, "Hi")
        log = await entries(runtime, events[0].conversation_id)
    return events, log


async def test_a_rate_limit_waits_retry_after_then_the_answer_completes_the_run(
    autojump_clock: trio.testing.MockClock,
) -> None:
    start = trio.current_time()
    events, log = await _run(
        [Turn.fail(RateLimited("slow down", retry_after=7.0)), Turn.text("Hello.")]
    )
    terminal = assert_well_formed(events)
    assert isinstance(terminal, RunCompleted)
    assert terminal.text == "Hello."
    (retrying,) = events_of(events, ModelRetrying)
    assert (retrying.attempt, retrying.error_tag, retrying.delay) == (1, "RateLimited", 7.0)
    assert retrying.discard is False
    assert trio.current_time() - start >= 7.0
    assert len(records_of(log, ModelResponseRecorded)) == 1


async def test_an_unavailable_model_that_says_when_to_come_back_is_waited_for(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A 503 with ``Retry-After`` lost the header: only a rate limit carried it."""
    start = trio.current_time()
    events, _ = await _run(
        [Turn.fail(ModelUnavailable("overloaded", retry_after=9.0)), Turn.text("Hello.")]
    )
    assert isinstance(assert_well_formed(events), RunCompleted)
    (retrying,) = events_of(events, ModelRetrying)
    assert (retrying.error_tag, retrying.delay) == ("ModelUnavailable", 9.0)
    assert trio.current_time() - start >= 9.0


async def test_a_call_that_failed_mid_stream_says_its_deltas_are_to_be_dropped(
    autojump_clock: trio.testing.MockClock,
) -> None:
    broken = Turn.fail(
        ModelUnavailable("overloaded"),
        after=[TextStartPart("t"), TextDeltaPart("t", "Half an ans")],
    )
    events, log = await _run([broken, Turn.text("A whole answer.")])
    terminal = assert_well_formed(events)
    assert isinstance(terminal, RunCompleted)
    assert terminal.text == "A whole answer."
    (retrying,) = events_of(events, ModelRetrying)
    assert retrying.discard is True
    (response,) = records_of(log, ModelResponseRecorded)
    assert "Half an ans" not in repr(response)


async def test_an_error_that_is_not_retryable_fails_at_once(
    autojump_clock: trio.testing.MockClock,
) -> None:
    events, _ = await _run([Turn.fail(AuthenticationFailed("bad key")), Turn.text("never")])
    terminal = assert_well_formed(events)
    assert isinstance(terminal, RunFailed)
    assert isinstance(terminal.error, ModelFailed)
    assert events_of(events, ModelRetrying) == []


async def test_retries_stop_after_the_policys_attempts(
    autojump_clock: trio.testing.MockClock,
) -> None:
    failing = [Turn.fail(ModelNetworkError("reset")) for _ in range(3)]
    events, _ = await _run([*failing, Turn.text("never")], model_retry=RetryPolicy(attempts=3))
    terminal = assert_well_formed(events)
    assert isinstance(terminal, RunFailed)
    assert isinstance(terminal.error, ModelFailed)
    assert [e.attempt for e in events_of(events, ModelRetrying)] == [1, 2]


async def test_a_thousand_retries_wait_max_delay_and_end_in_the_models_error(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """``initial_delay * multiplier ** (n - 1)`` overflows a float past n ≈ 1,025 at the
    default multiplier; the wait stays ``max_delay`` and the run ends in the model's error, not
    an engine defect."""
    failing = [Turn.fail(ModelNetworkError("reset")) for _ in range(1100)]
    events, _ = await _run(
        failing, model_retry=RetryPolicy(attempts=1100, max_delay=1.0), max_duration=100_000.0
    )
    terminal = assert_well_formed(events)
    assert isinstance(terminal, RunFailed)
    assert isinstance(terminal.error, ModelFailed)
    assert len(events_of(events, ModelRetrying)) == 1099
    policy = RetryPolicy(attempts=10**6, initial_delay=0.5, max_delay=30.0, jitter=0.0)
    for attempt in (1, 2, 6, 7, 1025, 1100, 10**5):
        delay = retry_delay(policy, ModelNetworkError("x"), attempt, 0.0, math.inf)
        assert delay == min(30.0, 0.5 * 2.0 ** min(attempt - 1, 100))


async def test_no_retry_is_attempted_that_would_end_past_the_deadline(
    autojump_clock: trio.testing.MockClock,
) -> None:
    start = trio.current_time()
    events, _ = await _run(
        [Turn.fail(RateLimited("later", retry_after=120.0)), Turn.text("never")],
        max_duration=60.0,
    )
    terminal = assert_well_formed(events)
    assert isinstance(terminal, RunFailed)
    assert trio.current_time() - start < 1.0  # failed at once, not at the deadline


async def test_interrupting_a_run_waiting_to_retry_ends_it_at_once(
    autojump_clock: trio.testing.MockClock,
) -> None:
    model = TrackingModel([Turn.fail(RateLimited("later", retry_after=50.0)), Turn.text("x")])
    agent = make_agent()
    seen: list[EventBase] = []
    async with (
        open_runtime(model.layer(), agents=[agent]) as runtime,
        runtime.stream(agent, "Hi") as events,
    ):
        async for event in events:
            seen.append(event)
            if isinstance(event, ModelRetrying):
                events.interrupt()
    assert isinstance(seen[-1], RunInterrupted)
    assert len(model.requests) == 1


@given(
    attempts=st.integers(1, 6),
    initial=st.floats(0.01, 5.0),
    multiplier=st.floats(1.0, 4.0),
    max_delay=st.floats(0.01, 60.0),
    jitter=st.floats(0.0, 0.99),
    attempt=st.integers(1, 8),
    draw=st.floats(0.0, 0.999),
    retry_after=st.none() | st.floats(0.0, 100.0),
    room=st.floats(0.0, 200.0),
)
def test_the_retry_delay_stays_within_the_policy(
    attempts: int,
    initial: float,
    multiplier: float,
    max_delay: float,
    jitter: float,
    attempt: int,
    draw: float,
    retry_after: float | None,
    room: float,
) -> None:
    policy = RetryPolicy(attempts, initial, max_delay, multiplier, jitter)
    error: AiError = RateLimited("x", retry_after=retry_after)
    delay = retry_delay(policy, error, attempt, 100.0, 100.0 + room, lambda: draw)
    base = min(max_delay, initial * multiplier ** (attempt - 1))
    expected = max(base * (1 - jitter * draw), retry_after or 0.0)
    # Compared as the engine compares them, on the clock: ``now + delay >= deadline`` (a delay
    # a hair under ``room`` may round up to the deadline once added to ``now``).
    if attempt >= attempts or 100.0 + expected >= 100.0 + room:
        assert delay is None
    else:
        assert delay is not None
        assert math.isclose(delay, expected)
        assert base * (1 - jitter) <= delay or delay == retry_after
        assert 100.0 + delay < 100.0 + room


@pytest.mark.parametrize("error", [AuthenticationFailed("x"), AiError("x")])
def test_errors_that_are_not_retryable_are_never_retried(error: AiError) -> None:
    assert retry_delay(RetryPolicy(), error, 1, 0.0, math.inf) is None


@pytest.mark.parametrize("asked", [3_600.5, 1e308, math.inf, math.nan])
def test_a_retry_after_past_an_hour_is_not_waited_for_even_without_a_deadline(
    asked: float,
) -> None:
    """Without a deadline (``max_duration=math.inf``) a Retry-After of 1e308 s was slept."""
    error = RateLimited("slow down", retry_after=asked)
    assert retry_delay(RetryPolicy(), error, 1, 0.0, math.inf, lambda: 0.0) is None
    assert len(str(error)) < 60  # not hundreds of digits
    fine = RateLimited("slow down", retry_after=3_600.0)
    assert retry_delay(RetryPolicy(), fine, 1, 0.0, math.inf, lambda: 0.0) == 3_600.0
