"""Approval state and argument digests at their boundaries (pure, no Trio; ``make mutate`` runs
these against ``capabilities/approval/_pending.py`` and ``effectagent/engine/_digest.py``).

* An answer exactly at the request's deadline is in time; the least later time is too late.
* A request without a deadline never expires here.
* Closed approvals are remembered up to ``_REMEMBERED``: the next one collected evicts the oldest,
  which is then ``"unknown"``.
* What each refusal says, and what the table refuses to be built with.
* A digest is HMAC-SHA256, under the runtime's key, of the arguments' canonical JSON.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import math
from typing import Any

import attrs
import pytest

from capabilities.approval._pending import (
    _REMEMBERED,
    ApprovalClosed,
    ApprovalNotPending,
    PendingApprovals,
    TooManyPending,
)
from effectagent.ai import Tool
from effectagent.core import ApprovalDecision, ApprovalRequest
from effectagent.engine._digest import ArgumentDigest

DEADLINE = 100.0  # on the Trio clock


def _request(n: int = 0, *, deadline: float | None = DEADLINE) -> ApprovalRequest:
    request = ApprovalRequest(
        run_id="run_1",
        conversation_id="conv",
        agent="ops",
        tool_name="delete_file",
        tool_call_id=f"call_{n}",
        summary=f"delete {n}",
        targets=(f"file:/tmp/{n}",),
        risk="high",
        input_preview={"path": f"/tmp/{n}"},
        expires_at=1_700_000_000.0,
        arguments_digest=f"{n:064x}",
    )
    return request if deadline is None else request.in_runtime(None, deadline)


def _refusal(refused: ApprovalNotPending | None) -> tuple[str, str] | None:
    """An error compares by identity: its fields are what is compared."""
    return None if refused is None else (refused.approval_id, refused.state)


# ---- expiry ---------------------------------------------------------------------------------


def test_an_answer_exactly_at_the_deadline_is_taken() -> None:
    table = PendingApprovals(1)
    table.open("a", _request(), 1.0)
    closing = table.answer("a", True, "fine", "ann", DEADLINE)
    assert _refusal(closing.refused) is None
    assert closing.closed == ApprovalClosed("a", "approved", "fine")
    assert closing.decision == ApprovalDecision.for_request(_request(), True, "fine", "ann")
    assert table.state("a") == "approved"


def test_an_answer_just_after_the_deadline_expires_the_approval_and_is_refused() -> None:
    table = PendingApprovals(1)
    table.open("a", _request(), 1.0)
    closing = table.answer("a", True, "fine", "ann", math.nextafter(DEADLINE, math.inf))
    assert _refusal(closing.refused) == ("a", "expired")
    assert closing.closed == ApprovalClosed("a", "expired", "answered after the request expired")
    assert closing.decision == ApprovalDecision.for_request(
        _request(), False, "the answer came after the request expired", "expired"
    )
    assert table.state("a") == "expired"
    assert table.pending() == ()
    assert table.collect("a") == closing.decision  # the denial is what the engine is given


def test_a_request_without_a_deadline_does_not_expire() -> None:
    table = PendingApprovals(1)
    table.open("a", _request(deadline=None), 1.0)
    closing = table.answer("a", False, "no", "ann", 1e12)
    assert closing.refused is None
    assert closing.closed == ApprovalClosed("a", "denied", "no")
    assert closing.decision is not None
    assert not closing.decision.approved
    assert table.state("a") == "denied"


# ---- remembering closed approvals -----------------------------------------------------------


def _close_and_collect(table: PendingApprovals, approval_id: str) -> None:
    table.open(approval_id, _request(), 1.0)
    table.answer(approval_id, True, "ok", "ann", 1.0)
    assert table.collect(approval_id) is not None


def test_closed_approvals_are_remembered_up_to_the_limit_then_the_oldest_is_forgotten() -> None:
    table = PendingApprovals(1)
    for n in range(_REMEMBERED):
        _close_and_collect(table, f"a{n}")
    assert table.state("a0") == "approved"  # exactly the limit: all remembered
    assert _refusal(table.answer("a0", True, "again", "ann", 1.0).refused) == ("a0", "approved")
    _close_and_collect(table, f"a{_REMEMBERED}")
    assert table.state("a0") == "unknown"  # one more: the oldest goes
    assert table.state("a1") == "approved"
    assert table.state(f"a{_REMEMBERED}") == "approved"
    assert _refusal(table.answer("a0", True, "late", "ann", 1.0).refused) == ("a0", "unknown")
    with pytest.raises(ValueError, match="already used"):
        table.open("a1", _request(), 1.0)


def test_collect_forgets_a_closed_approval_and_keeps_a_pending_one() -> None:
    table = PendingApprovals(2)
    table.open("p", _request(1), 1.0)
    table.open("w", _request(2), 1.0)
    assert table.collect("p") is None  # pending: not forgotten
    assert [a.approval_id for a in table.pending()] == ["p", "w"]
    assert table.withdraw("w", "cancelled") == ApprovalClosed("w", "withdrawn", "cancelled")
    assert table.withdraw("w", "again") is None
    assert table.collect("w") is None  # withdrawn: no decision
    assert table.state("w") == "withdrawn"
    assert table.collect("w") is None
    assert table.collect("never") is None
    assert table.state("never") == "unknown"
    table.open("q", _request(3), 1.0)  # a forgotten entry leaves room
    assert [a.approval_id for a in table.pending()] == ["p", "q"]


# ---- what is refused, in words --------------------------------------------------------------


def test_refusals_say_what_happened() -> None:
    assert str(ApprovalNotPending("a", "denied")) == "approval 'a' is not pending (denied)"
    assert str(TooManyPending(3)) == "3 approvals are already waiting for an answer"
    table = PendingApprovals(1)
    table.open("a", _request(), 1.0)
    with pytest.raises(ValueError, match=r"^approval ID 'a' is already used$"):
        table.open("a", _request(), 1.0)
    with pytest.raises(TooManyPending) as raised:
        table.open("b", _request(), 1.0)
    assert raised.value.max_pending == 1


@pytest.mark.parametrize("bad", [True, 1.0, "1"])
def test_max_pending_must_be_an_int(bad: object) -> None:
    with pytest.raises(TypeError, match=rf"^max_pending must be an int, got {type(bad).__name__}$"):
        PendingApprovals(bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", [0, -1])
def test_max_pending_must_be_positive(bad: int) -> None:
    with pytest.raises(ValueError, match=rf"^max_pending must be a positive int, got {bad}$"):
        PendingApprovals(bad)
    assert PendingApprovals(1).max_pending == 1


# ---- argument digests -----------------------------------------------------------------------

KEY = b"k" * 32
_DYNAMIC = Tool.dynamic("lookup", "Look up.", {"type": "object"})


@attrs.frozen
class _Params:
    city: str
    days: int


_TYPED: Tool[_Params, Any] = Tool("forecast", "Forecast.", parameters=_Params)


def _reference(canonical: str) -> str:
    return hmac.new(KEY, canonical.encode("utf-8"), hashlib.sha256).hexdigest()


def test_a_digest_is_the_keyed_hash_of_the_canonical_json() -> None:
    digest = ArgumentDigest(KEY)
    value = {"b": [1, "é"], "a": {"y": None, "x": True}}
    assert digest(_DYNAMIC, value) == _reference('{"a":{"x":true,"y":null},"b":[1,"é"]}')
    assert digest(_TYPED, _Params("Oslo", 3)) == _reference('{"city":"Oslo","days":3}')


def test_a_digest_depends_on_the_key_and_each_runtime_draws_its_own() -> None:
    value = {"a": 1}
    assert ArgumentDigest(KEY)(_DYNAMIC, value) == ArgumentDigest(KEY)(_DYNAMIC, value)
    assert ArgumentDigest(b"j" * 32)(_DYNAMIC, value) != ArgumentDigest(KEY)(_DYNAMIC, value)
    assert ArgumentDigest()(_DYNAMIC, value) != ArgumentDigest()(_DYNAMIC, value)


def test_a_digest_refuses_nan_and_takes_lone_surrogates() -> None:
    digest = ArgumentDigest(KEY)
    with pytest.raises(ValueError, match="JSON compliant"):
        digest(_DYNAMIC, {"x": math.nan})
    canonical = json.dumps({"s": "\ud800"}, ensure_ascii=False, separators=(",", ":"))
    expected = hmac.new(KEY, canonical.encode("utf-8", "surrogatepass"), hashlib.sha256)
    assert digest(_DYNAMIC, {"s": "\ud800"}) == expected.hexdigest()
