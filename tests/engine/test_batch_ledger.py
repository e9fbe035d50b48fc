"""BatchLedger, the pure bookkeeping of one tool batch — no Trio, no engine.

Whatever order calls settle in, the commit is the declaration order (CAP-005); each call settles
once; nothing commits before the batch is complete; ``settle_rest`` fills exactly the gaps.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from effectagent.core import ToolDefect, ToolOutcome, ToolSuccess
from effectagent.engine._scheduler import BatchLedger

ids_st = st.lists(
    st.text("abcdefghijklmnopqrstuvwxyz0123456789_", min_size=1, max_size=6),
    min_size=1,
    max_size=12,
    unique=True,
)


def _outcome(call_id: str, tag: object = None) -> ToolOutcome:
    return ToolSuccess(call_id, "tool", {"tag": tag})


@st.composite
def batch_and_settle_order(draw: st.DrawFn) -> tuple[list[str], list[int]]:
    ids = draw(ids_st)
    return ids, draw(st.permutations(range(len(ids))))


@given(batch_and_settle_order())
def test_commit_is_declaration_order_for_every_settle_order(
    case: tuple[list[str], list[int]],
) -> None:
    ids, order = case
    ledger = BatchLedger(ids)
    assert len(ledger) == len(ids)
    for step, index in enumerate(order):
        assert not ledger.complete
        assert not ledger.is_settled(index)
        ledger.settle(index, _outcome(ids[index], step))
        assert ledger.is_settled(index)
    assert ledger.complete
    committed = ledger.commit()
    assert [o.tool_call_id for o in committed] == ids
    # Each slot holds the outcome settled for it, not merely one with the right ID.
    assert [o.result["tag"] for o in committed if isinstance(o, ToolSuccess)] == [
        order.index(i) for i in range(len(ids))
    ]


@given(batch_and_settle_order(), st.data())
def test_a_second_settle_raises_and_keeps_the_first(
    case: tuple[list[str], list[int]], data: st.DataObject
) -> None:
    ids, order = case
    ledger = BatchLedger(ids)
    settled = order[: data.draw(st.integers(1, len(order)), label="settled")]
    for index in settled:
        ledger.settle(index, _outcome(ids[index], "first"))
    again = data.draw(st.sampled_from(settled), label="again")
    with pytest.raises(RuntimeError, match="settled twice"):
        ledger.settle(again, _outcome(ids[again], "second"))
    ledger.settle_rest(lambda i: _outcome(ids[i], "rest"))
    outcome = ledger.commit()[again]
    assert isinstance(outcome, ToolSuccess)
    assert outcome.result == {"tag": "first"}


@given(batch_and_settle_order(), st.data())
def test_commit_before_the_batch_is_complete_raises(
    case: tuple[list[str], list[int]], data: st.DataObject
) -> None:
    ids, order = case
    ledger = BatchLedger(ids)
    settled = data.draw(st.integers(0, len(order) - 1), label="settled")
    for index in order[:settled]:
        ledger.settle(index, _outcome(ids[index]))
    assert not ledger.complete
    with pytest.raises(RuntimeError, match=f"{len(ids) - settled} tool call"):
        ledger.commit()


@given(batch_and_settle_order(), st.data())
def test_settle_rest_fills_exactly_the_unsettled_calls(
    case: tuple[list[str], list[int]], data: st.DataObject
) -> None:
    ids, order = case
    ledger = BatchLedger(ids)
    settled = order[: data.draw(st.integers(0, len(order)), label="settled")]
    for index in settled:
        ledger.settle(index, _outcome(ids[index]))
    filled = ledger.settle_rest(lambda i: ToolDefect(ids[i], "tool", "interrupted"))
    assert filled == sorted(set(range(len(ids))) - set(settled))
    assert ledger.complete
    committed = ledger.commit()
    assert [o.tool_call_id for o in committed] == ids
    assert [i for i, o in enumerate(committed) if o.kind == "defect"] == filled
    assert ledger.settle_rest(lambda i: ToolDefect(ids[i], "tool", "again")) == []


def test_an_outcome_for_another_call_is_refused() -> None:
    ledger = BatchLedger(["a", "b"])
    with pytest.raises(ValueError, match="settled at the slot of 'a'"):
        ledger.settle(0, _outcome("b"))
    assert not ledger.is_settled(0)


def test_duplicate_ids_are_refused() -> None:
    with pytest.raises(ValueError, match="unique"):
        BatchLedger(["a", "b", "a"])


def test_an_empty_batch_commits_nothing() -> None:
    ledger = BatchLedger([])
    assert ledger.complete
    assert ledger.commit() == []
