"""The scripted approver under cancellation: cancelled before it starts, a request neither
records itself nor takes the script's next answer."""

from __future__ import annotations

import trio

from capabilities.approval import Answer, ScriptedApproval
from effectagent.core import ApprovalRequest


def _request(call_id: str) -> ApprovalRequest:
    return ApprovalRequest(
        "run", "conv", "ops", "delete_file", call_id, "delete", (), "high", {}, 1e12
    )


async def test_a_request_cancelled_before_it_starts_leaves_the_script_as_it_was() -> None:
    approver = ScriptedApproval([Answer.approve("first"), Answer.deny("second")])
    with trio.CancelScope() as scope:
        scope.cancel()
        await approver.request(_request("call_a"))
    assert scope.cancelled_caught
    assert approver.requests == []
    # Before: the cancelled request took "first", and this one got "second".
    decision = await approver.request(_request("call_b"))
    assert (decision.approved, decision.reason) == (True, "first")
