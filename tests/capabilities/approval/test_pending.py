"""The interactive approver's table as a pure object (no Trio): under any sequence of openings,
answers (in time or late), withdrawals and collections, the pending view is exactly what is open,
each approval closes once, late and repeated answers are refused, decisions are bound."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from capabilities.approval._pending import TRANSITIONS, PendingApprovals, TooManyPending
from effectagent.core import ApprovalDecision, ApprovalRequest

EXPIRES = 100.0  # the deadline, on the Trio clock


def _request(n: int) -> ApprovalRequest:
    return ApprovalRequest(
        run_id=f"run_{n % 2}",
        conversation_id="conv",
        agent="ops",
        tool_name="delete_file",
        tool_call_id=f"call_{n}",
        summary=f"delete {n}",
        targets=(f"file:/tmp/{n}",),
        risk="high",
        input_preview={"path": f"/tmp/{n}"},
        expires_at=1_700_000_000.0,  # the wall clock's, for people: not what is judged
        arguments_digest=f"{n:064x}",
    ).in_runtime(None, EXPIRES)  # the deadline on the Trio clock: what is judged


OPS = st.lists(
    st.one_of(
        st.tuples(st.just("open")),
        st.tuples(st.just("answer"), st.integers(0, 7), st.booleans(), st.booleans()),
        st.tuples(st.just("withdraw"), st.integers(0, 7)),
        st.tuples(st.just("collect"), st.integers(0, 7)),
    ),
    max_size=30,
)


@given(ops=OPS, max_pending=st.integers(1, 4))
def test_every_approval_closes_once_and_the_pending_view_is_exactly_what_is_open(
    ops: list[tuple[Any, ...]], max_pending: int
) -> None:
    table = PendingApprovals(max_pending)
    opened: list[str] = []
    state: dict[str, str] = {}
    requests: dict[str, ApprovalRequest] = {}
    collected: set[str] = set()
    for op in ops:
        if op[0] == "open":
            n = len(opened)
            approval_id = f"approval_{n}"
            if sum(s == "pending" for s in state.values()) >= max_pending:
                with pytest.raises(TooManyPending):
                    table.open(approval_id, _request(n), 1.0)
                continue
            approval = table.open(approval_id, _request(n), 1.0)
            assert approval.request.tool_call_id == f"call_{n}"
            opened.append(approval_id)
            state[approval_id] = "pending"
            requests[approval_id] = approval.request
            continue
        if not opened:
            continue
        approval_id = opened[op[1] % len(opened)]
        if op[0] == "answer":
            _, _, approved, late = op
            closing = table.answer(
                approval_id, approved, "why", "ann", EXPIRES + 1 if late else 1.0
            )
            if state[approval_id] != "pending":
                assert closing.closed is None
                assert closing.decision is None
                assert closing.refused is not None
                assert closing.refused.state == table.state(approval_id)
                continue
            request = requests[approval_id]
            assert closing.decision is not None
            assert closing.closed is not None
            assert closing.decision.mismatch(request) is None  # bound to its call
            assert closing.decision.run_id == request.run_id
            if late:
                assert closing.refused is not None
                assert closing.refused.state == "expired"
                assert not closing.decision.approved
                state[approval_id] = "expired"
            else:
                assert closing.refused is None
                assert closing.decision == ApprovalDecision.for_request(
                    request, approved, "why", "ann"
                )
                state[approval_id] = "approved" if approved else "denied"
            assert closing.closed.state == state[approval_id]
        elif op[0] == "withdraw":
            closed = table.withdraw(approval_id, "cancelled")
            if state[approval_id] == "pending":
                assert closed is not None
                assert closed.state == "withdrawn"
                state[approval_id] = "withdrawn"
            else:
                assert closed is None
        else:
            decision = table.collect(approval_id)
            if (
                state[approval_id] in ("approved", "denied", "expired")
                and approval_id not in collected
            ):
                assert decision is not None
                collected.add(approval_id)
            else:
                assert decision is None
        assert table.state(approval_id) == state[approval_id]
        assert [p.approval_id for p in table.pending()] == [
            a for a in opened if state[a] == "pending"
        ]
    assert [p.approval_id for p in table.pending()] == [a for a in opened if state[a] == "pending"]


def test_only_pending_moves_and_only_once() -> None:
    assert {before for before, _ in TRANSITIONS} == {"pending"}
    assert "pending" not in TRANSITIONS.values()


def test_bad_input() -> None:
    with pytest.raises(ValueError, match="max_pending must be a positive int"):
        PendingApprovals(0)
    table = PendingApprovals(2)
    table.open("a", _request(1), 0.0)
    with pytest.raises(ValueError, match="already used"):
        table.open("a", _request(2), 0.0)
    assert table.answer("nope", True, "", "", 0.0).refused is not None
