"""The crash-point classifier as a table: every crash point, the facts the stores hold after a
crash there, and the one decision recovery takes (``capabilities.durable._classifier``)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from capabilities.durable._classifier import (
    CRASH_POINTS,
    Durability,
    LedgerFacts,
    LogFacts,
    RecoveryDecision,
    classify,
)
from capabilities.durable._model import RetryBudget

RETRY = RetryBudget(max_attempts=3)
TOOLS: dict[str, Durability] = {"charge": None, "lookup": "idempotent", "book": "reconcile"}

CALLS = (("c1", "lookup"), ("c2", "charge"), ("c3", "book"))

#: crash point -> (ledger facts, log facts, action, settlement)
TABLE: dict[str, tuple[LedgerFacts | None, LogFacts, str, str | None]] = {
    "before-admission": (None, LogFacts(), "nothing", None),
    "after-admission": (LedgerFacts(status="queued", attempts=1), LogFacts(), "run", None),
    "after-claim": (LedgerFacts(status="active", attempts=2), LogFacts(), "run", None),
    "after-run-start": (
        LedgerFacts(status="active", attempts=2),
        LogFacts(records=2),
        "resume",
        None,
    ),
    "after-model-response": (
        LedgerFacts(status="active", attempts=2),
        LogFacts(records=3, responded=True, declared=CALLS),
        "resume",
        None,
    ),
    "after-prepare": (
        LedgerFacts(status="active", attempts=2),
        LogFacts(records=6, responded=True, prepared=CALLS),
        "resume",
        None,
    ),
    "after-settle": (
        LedgerFacts(status="active", attempts=2),
        LogFacts(records=9, responded=True),
        "resume",
        None,
    ),
    "after-final-answer": (
        LedgerFacts(status="active", attempts=2),
        LogFacts(records=10, responded=True, final_answer=True),
        "resume",
        None,
    ),
    "after-suspend": (
        LedgerFacts(status="active", attempts=2),
        LogFacts(records=5, responded=True, suspended=True, undecided=1, declared=CALLS[:1]),
        "suspend",
        None,
    ),
    "after-decision": (
        LedgerFacts(status="queued", attempts=2),
        LogFacts(records=6, responded=True, suspended=True, undecided=0, declared=CALLS[:1]),
        "resume",
        None,
    ),
    "after-terminal-record": (
        LedgerFacts(status="active", attempts=1),
        LogFacts(records=4, responded=True, terminal="completed"),
        "settle",
        "completed",
    ),
    "after-reserve": (
        LedgerFacts(status="active", attempts=2, settlement="reserved", reserved="failed"),
        LogFacts(records=4, responded=True),
        "append",
        "failed",
    ),
    "after-append": (
        LedgerFacts(status="active", attempts=2, settlement="reserved", reserved="failed"),
        LogFacts(records=5, responded=True, terminal="failed"),
        "finalize",
        "failed",
    ),
    "after-join": (
        LedgerFacts(status="joining", attempts=0),
        LogFacts(absorbed=True),
        "join",
        "joined",
    ),
    "joining-not-recorded": (
        LedgerFacts(status="joining", attempts=0),
        LogFacts(),
        "requeue",
        None,
    ),
    "after-finalize": (
        LedgerFacts(status="completed", attempts=1, settlement="final", reserved="completed"),
        LogFacts(records=4, terminal="completed"),
        "nothing",
        "completed",
    ),
}


def test_the_table_covers_every_crash_point_but_the_handler_s() -> None:
    # A kill inside a tool handler leaves the same records as one right after its preparation.
    assert set(TABLE) == set(CRASH_POINTS) - {"in-handler"}


@pytest.mark.parametrize("point", list(TABLE))
def test_each_crash_point_gets_its_decision(point: str) -> None:
    ledger, log, action, outcome = TABLE[point]
    decision = classify(ledger, log, retry=RETRY, tools=TOOLS)
    assert (decision.crash_point, decision.action, decision.outcome) == (point, action, outcome)
    assert decision.reason  # a sentence for the audit row


def test_unsettled_calls_are_run_run_again_reconciled_or_unknown_by_what_the_tool_declares() -> (
    None
):
    ledger, log, *_ = TABLE["after-prepare"]
    decision = classify(ledger, log, retry=RETRY, tools=TOOLS)
    assert decision.calls == (
        ("c1", "lookup", "run-again"),
        ("c2", "charge", "unknown"),
        ("c3", "book", "reconcile"),
    )
    ledger, log, *_ = TABLE["after-model-response"]
    decision = classify(ledger, log, retry=RETRY, tools=TOOLS)
    assert [fate for *_, fate in decision.calls] == ["run", "run", "run"]
    # a tool the worker does not know (no declaration) is never run again blindly
    decision = classify(ledger, LogFacts(records=6, prepared=(("c9", "gone"),)), retry=RETRY)
    assert decision.calls == (("c9", "gone", "unknown"),)


def test_a_terminal_record_decides_the_settlement_whatever_the_ledger_says() -> None:
    for terminal, settled in [
        ("completed", "completed"),
        ("failed", "failed"),
        ("interrupted", "failed"),
        ("aborted", "aborted"),
    ]:
        decision = classify(
            LedgerFacts(status="active", attempts=9),  # past the budget: still settled
            LogFacts(records=3, terminal=terminal),  # type: ignore[arg-type]
            retry=RETRY,
        )
        assert (decision.action, decision.outcome) == ("settle", settled)


def test_past_the_retry_budget_a_run_or_resume_is_dead_lettered_instead() -> None:
    for log in [LogFacts(), LogFacts(records=3, responded=True)]:
        within = classify(LedgerFacts(status="active", attempts=3), log, retry=RETRY)
        beyond = classify(LedgerFacts(status="active", attempts=4), log, retry=RETRY)
        assert within.action in ("run", "resume")
        assert beyond.action == "dead"
        assert beyond.crash_point == within.crash_point


def test_an_agent_the_worker_does_not_know_fails_the_submission() -> None:
    decision = classify(
        LedgerFacts(status="queued", attempts=1, agent_known=False), LogFacts(), retry=RETRY
    )
    assert (decision.action, decision.outcome) == ("append", "failed")
    assert "registry" in decision.reason


def test_an_unreadable_record_quarantines_before_anything_else_is_decided() -> None:
    decision = classify(
        LedgerFacts(status="active", attempts=2),
        LogFacts(records=3, terminal="completed", undecodable=7),
        retry=RETRY,
    )
    assert decision.action == "quarantine"
    assert "7" in decision.reason


_statuses = st.sampled_from(
    ["queued", "active", "suspended", "joining", "dead", "completed", "failed", "aborted", "joined"]
)
_settled = st.sampled_from(["completed", "failed", "aborted", "joined"])
_ledgers = st.one_of(
    st.none(),
    st.builds(
        LedgerFacts,
        status=_statuses,
        attempts=st.integers(0, 6),
        settlement=st.sampled_from([None, "reserved", "final"]),
        reserved=st.one_of(st.none(), _settled),
        agent_known=st.booleans(),
    ),
)
_calls = st.lists(
    st.tuples(st.sampled_from(["a", "b", "c"]), st.sampled_from(list(TOOLS))), max_size=3
)
_logs = st.builds(
    LogFacts,
    records=st.integers(0, 5),
    terminal=st.sampled_from([None, "completed", "failed", "interrupted", "aborted"]),
    responded=st.booleans(),
    suspended=st.booleans(),
    undecided=st.integers(0, 2),
    final_answer=st.booleans(),
    declared=_calls.map(tuple),
    prepared=_calls.map(tuple),
    absorbed=st.booleans(),
    undecodable=st.one_of(st.none(), st.integers(1, 9)),
)


@given(ledger=_ledgers, log=_logs)
def test_every_combination_of_facts_gets_one_decision_that_keeps_the_promise(
    ledger: LedgerFacts | None, log: LogFacts
) -> None:
    decision = classify(ledger, log, retry=RETRY, tools=TOOLS)
    assert isinstance(decision, RecoveryDecision)
    if ledger is None or ledger.settlement == "final":
        assert decision.action == "nothing"  # settled once: never settled again
        return
    if log.undecodable is not None:
        assert decision.action == "quarantine"
        return
    if decision.action in ("run", "resume"):
        assert ledger.attempts <= RETRY.max_attempts
        assert ledger.agent_known
        assert log.terminal is None  # an ended run is never run again
    if decision.action == "run":
        assert log.records == 0  # a run with records is resumed, never started over
    if log.terminal is not None:
        assert decision.action in ("settle", "finalize")
    if decision.action in ("settle", "finalize", "append", "join"):
        assert decision.outcome is not None
