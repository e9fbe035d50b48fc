"""The durable runtime's approval gateway: a decision that is not made at once suspends the run.

A worker's runtime asks :class:`DurableApproval` for every approval a batch needs. It asks the
``policy`` it was given first (if any): a decision from it is the answer, as with any approver.
Otherwise — no policy, or the policy answers ``ApprovalSuspended`` — the answer is
``ApprovalSuspended``: the engine records the requests — the safe point the run stops at; no
record says it suspended — and the run ends this execution suspended. The worker then marks the
submission suspended (ledger state) and lets its lane and permit go; no process waits. A decision given later from any process
(:meth:`DurableQueue.decide`) is appended to the run's log, and once every call of the batch has
one a worker resumes the run, which takes the decisions from the log without asking the model
(or this gateway) again.
"""

from __future__ import annotations

from typing import final

import trio

from effectagent.core import ApprovalDecision, ApprovalRequest
from effectagent.engine import Approval, ApprovalSuspended

__all__ = ["DurableApproval"]


@final
class DurableApproval:
    """Approval that suspends when no decision is made at once (see the module notes).
    A ``policy`` that is not an ``Approval``, or a ``reason`` that is not a str, is a
    ``TypeError`` here."""

    __slots__ = ("_policy", "_reason")

    #: Tells the engine this approver may answer ``ApprovalSuspended``.
    suspends = True

    def __init__(
        self,
        policy: Approval | None = None,
        *,
        reason: str = "waiting for an approval decision (DurableQueue.decide)",
    ) -> None:
        if policy is not None and not callable(getattr(policy, "request", None)):
            raise TypeError(
                "policy must be an Approval (an object with an async request method), "
                f"got {type(policy).__name__}"
            )
        if not isinstance(reason, str):
            raise TypeError(f"reason must be a str, got {type(reason).__name__}")
        self._policy = policy
        self._reason = reason

    async def request(self, request: ApprovalRequest) -> ApprovalDecision | ApprovalSuspended:
        """The policy's answer (a decision, or ``ApprovalSuspended``), or without a policy
        ``ApprovalSuspended``.

        Cancellation: as the policy's; without one, a checkpoint."""
        if self._policy is not None:
            return await self._policy.request(request)
        await trio.lowlevel.checkpoint()
        return ApprovalSuspended(self._reason)
