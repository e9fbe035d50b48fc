"""The approver that suspends: no decision now — the run waits durably for one from elsewhere.

:class:`SuspendingApproval` answers every request with ``ApprovalSuspended``: the engine records the
batch's approval requests (no record of the suspension: the requests are where the run stopped),
runs none of the batch's calls, and the run ends this execution suspended (``RunSuspended``, ``status == "suspended"``). A person, a policy or
another process decides later by appending ``effectagent.core.approval_decided(...)`` records to the
conversation's log (``effectagent.engine.pending_approvals`` lists what the run waits for), and
``Runtime.resume`` continues the batch from the log without asking the model again.

Put rules in front of it to decide what they can at once and suspend the rest:
``PolicyApproval(rules, default="ask", ask=SuspendingApproval())``.
"""

from __future__ import annotations

from typing import final

import trio

from effectagent.core import ApprovalRequest
from effectagent.effect import Layer
from effectagent.engine import ApprovalService, ApprovalSuspended

__all__ = ["SuspendingApproval"]


@final
class SuspendingApproval:
    """Answers every approval request: the decision comes later (``reason`` says from where)."""

    __slots__ = ("reason",)

    #: Tells the engine this approver may answer ``ApprovalSuspended``.
    suspends = True

    def __init__(self, reason: str = "waiting for an approval decision") -> None:
        given: object = reason  # checked: not every caller runs mypy
        if not isinstance(given, str):
            raise TypeError(f"reason must be a sentence (a str), got {type(given).__name__}")
        if not given.strip():
            raise ValueError(f"reason must be a sentence, got {reason!r}")
        self.reason = reason

    async def request(self, request: ApprovalRequest) -> ApprovalSuspended:
        """Suspend: the decision comes later.

        Cancellation: a checkpoint."""
        await trio.lowlevel.checkpoint()
        return ApprovalSuspended(self.reason)

    def layer(self) -> Layer:
        """This provider as the engine's ``ApprovalService``."""
        return Layer.succeed(ApprovalService, self, name="SuspendingApproval")
