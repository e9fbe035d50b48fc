"""The ledger's transition table and the retry arithmetic, without Trio or a database."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from capabilities.durable._ledger import EVENTS, TRANSITIONS, IllegalTransition, guard, transition
from capabilities.durable._model import (
    MAX_MESSAGE_BYTES,
    MAX_TAG_CHARS,
    TERMINAL_STATUSES,
    RetryBudget,
    WorkerOptions,
    bounded_diagnostic,
    payload_digest,
)

STATUSES = ["queued", "active", "suspended", "joining", "dead", *sorted(TERMINAL_STATUSES)]
_settled = st.sampled_from(sorted(TERMINAL_STATUSES))


@given(
    steps=st.lists(st.tuples(st.sampled_from(EVENTS), _settled), max_size=30),
)
def test_a_settled_submission_never_changes_whatever_happens_next(
    steps: list[tuple[str, str]],
) -> None:
    status = "queued"
    settled_as: str | None = None
    for event, settlement in steps:
        try:
            after = transition(status, event, settlement)  # type: ignore[arg-type]
        except IllegalTransition:
            continue
        if settled_as is not None:
            pytest.fail(f"{event} changed a settled submission")
        if after in TERMINAL_STATUSES:
            assert event == "settle"  # the one way in
            settled_as = after
        status = after
    if settled_as is not None:
        assert status == settled_as


@pytest.mark.parametrize("status", STATUSES)
def test_every_status_not_settled_can_still_be_settled(status: str) -> None:
    if status in TERMINAL_STATUSES:
        with pytest.raises(IllegalTransition):
            transition(status, "settle", "aborted")  # type: ignore[arg-type]
        return
    assert transition(status, "settle", "aborted") == "aborted"  # type: ignore[arg-type]


def test_the_sql_guard_is_the_table() -> None:
    for event in EVENTS:
        allowed, _ = TRANSITIONS[event]
        condition = guard(event)
        for status in STATUSES:
            assert (f"'{status}'" in condition) == (status in allowed), (event, status)


@given(
    attempts=st.integers(0, 200),
    draw=st.floats(0, 1, exclude_max=True),
    base=st.floats(0, 10),
    cap=st.floats(0, 1000),
    jitter=st.floats(0, 1),
)
def test_backoff_grows_doubling_up_to_its_cap_and_jitter_only_shortens_it(
    attempts: int, draw: float, base: float, cap: float, jitter: float
) -> None:
    policy = RetryBudget(base=base, cap=cap, jitter=jitter)
    delay = policy.delay(attempts, draw)
    if attempts == 0:
        assert delay == 0
        return
    full = min(cap, base * 2 ** min(attempts - 1, 62))
    assert full * (1 - jitter) - 1e-9 <= delay <= full + 1e-9
    assert delay <= cap + 1e-9
    # for one draw, a later attempt never waits less (until the cap)
    assert policy.delay(attempts + 1, draw) >= delay - 1e-9


def test_the_retry_budget_counts_claims() -> None:
    policy = RetryBudget(max_attempts=2)
    assert not policy.exhausted(1)
    assert policy.exhausted(2)
    assert RetryBudget(base=1, cap=8, jitter=0).delay(3, 0.9) == 4
    assert RetryBudget(base=1, cap=8, jitter=1).delay(3, 0.5) == 2


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"max_attempts": 0}, "max_attempts"),
        ({"base": -1}, "base"),
        ({"cap": float("inf")}, "cap"),
        ({"jitter": 2}, "jitter"),
    ],
)
def test_a_retry_policy_out_of_range_is_refused(kwargs: dict[str, float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        RetryBudget(**kwargs)  # type: ignore[arg-type]


def test_worker_options_out_of_range_are_refused() -> None:
    with pytest.raises(ValueError, match="max_active"):
        WorkerOptions(max_active=0)
    with pytest.raises(ValueError, match="lease"):
        WorkerOptions(lease=0)


@given(tag=st.text(max_size=600), message=st.text(max_size=20_000))
def test_a_diagnostic_is_bounded(tag: str, message: str) -> None:
    diagnostic = bounded_diagnostic(tag, message)
    assert len(diagnostic.tag) <= MAX_TAG_CHARS
    assert len(diagnostic.message.encode("utf-8")) <= MAX_MESSAGE_BYTES
    if len(tag) <= MAX_TAG_CHARS:
        assert diagnostic.tag == tag
    if len(message.encode("utf-8")) <= MAX_MESSAGE_BYTES:
        assert diagnostic.message == message
    else:
        assert diagnostic.message.endswith("…[truncated]")


def test_the_payload_digest_binds_agent_text_and_mode() -> None:
    one = payload_digest("a", "hello", "queue")
    assert one == payload_digest("a", "hello", "queue")
    assert (
        len(
            {
                one,
                payload_digest("b", "hello", "queue"),
                payload_digest("a", "hello!", "queue"),
                payload_digest("a", "hello", "join"),
            }
        )
        == 4
    )
    # no ambiguity where one field ends and the next begins
    assert payload_digest("ab", "c", "queue") != payload_digest("a", "bc", "queue")
