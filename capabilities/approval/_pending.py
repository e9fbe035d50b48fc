"""The interactive approver's table of requests waiting for a person, as a pure object.

Each request a person is asked about is an *approval* with an ID, in one of five states::

    pending --approve--> approved        pending --withdraw--> withdrawn
    pending --deny-----> denied          pending --expire----> expired

Only a pending approval moves, and only once (:data:`TRANSITIONS`). *Withdrawn* is what happens
when its waiting request is cancelled (the engine's approval timeout, the run's interruption);
*expired* when an answer comes after the request's ``deadline`` — the answer is refused and the
request denied, since the engine would refuse a late approval anyway. Time is the Trio clock's
(``trio.current_time()``), the one the engine judges expiry on: ``now`` and ``opened_at`` are
on it, and so is ``ApprovalRequest.deadline`` (the wall-clock ``expires_at`` is for people to
read). A request without a ``deadline`` — one not made by a runtime — does not expire here.

Invariants (tested in ``tests/capabilities/approval/test_pending.py`` without Trio):

* :meth:`PendingApprovals.pending` is exactly the approvals opened and not yet closed, in the
  order they were opened, whatever order they are answered or withdrawn in;
* each approval closes exactly once; every later answer is refused with the state it is in
  (:class:`ApprovalNotPending`), never taken;
* the decision of an answered approval is bound to its request's run, tool, call and arguments;
* at most ``max_pending`` approvals are pending at once: one more is refused when opened.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Final, Literal, final

import attrs

from effectagent.core import ApprovalDecision, ApprovalRequest
from effectagent.effect import TaggedError

__all__ = [
    "TRANSITIONS",
    "ApprovalClosed",
    "ApprovalNotPending",
    "ApprovalOpened",
    "ApprovalState",
    "ApprovalUpdate",
    "Closing",
    "PendingApproval",
    "PendingApprovals",
    "TooManyPending",
]

#: Where an approval is.
ApprovalState = Literal["pending", "approved", "denied", "withdrawn", "expired"]

#: What can happen to an approval.
_Event = Literal["approve", "deny", "withdraw", "expire"]

#: The state machine, as data: (state, event) -> next state. Anything absent is not allowed.
TRANSITIONS: Final[dict[tuple[ApprovalState, _Event], ApprovalState]] = {
    ("pending", "approve"): "approved",
    ("pending", "deny"): "denied",
    ("pending", "withdraw"): "withdrawn",
    ("pending", "expire"): "expired",
}

#: How many closed approvals are remembered, so a late answer is told what became of its request.
_REMEMBERED: Final = 4096


@attrs.frozen
class PendingApproval:
    """A request waiting for a person: everything a UI shows is in ``request`` — run,
    conversation, agent, tool and call identity, the summary, targets, risk, the redacted input
    preview, ``expires_at`` (wall-clock seconds, to show) and whether a denial ends the run.
    ``opened_at`` is on the Trio clock, like ``request.deadline``: the time left to answer is
    ``request.deadline - trio.current_time()``."""

    approval_id: str
    request: ApprovalRequest
    opened_at: float


@attrs.frozen
class ApprovalOpened:
    """An update for UIs: a request now waits for an answer."""

    approval: PendingApproval


@attrs.frozen
class ApprovalClosed:
    """An update for UIs: the approval no longer waits — take it off the screen."""

    approval_id: str
    state: Literal["approved", "denied", "withdrawn", "expired"]
    reason: str


#: What a UI is told, in order: approvals opening and closing.
ApprovalUpdate = ApprovalOpened | ApprovalClosed


@attrs.frozen
class ApprovalNotPending(TaggedError):
    """An answer for an approval that is not pending — already answered, withdrawn, expired, or
    never opened here (``state="unknown"``). The answer was not taken."""

    approval_id: str
    state: ApprovalState | Literal["unknown"]

    def __str__(self) -> str:
        return f"approval {self.approval_id!r} is not pending ({self.state})"


@attrs.frozen
class TooManyPending(TaggedError):
    """An approval could not be opened: ``max_pending`` are already waiting."""

    max_pending: int

    def __str__(self) -> str:
        return f"{self.max_pending} approvals are already waiting for an answer"


@attrs.frozen
class Closing:
    """What an answer did: the update for UIs and, when it was taken, the decision. ``refused``
    is the error to give the person who answered (None when the answer was taken)."""

    closed: ApprovalClosed | None
    decision: ApprovalDecision | None
    refused: ApprovalNotPending | None


@final
@attrs.define(eq=False)
class _Entry:
    approval: PendingApproval
    state: ApprovalState = "pending"
    decision: ApprovalDecision | None = None


@final
class PendingApprovals:
    """The approvals of one interactive approver (see the module notes)."""

    __slots__ = ("_closed", "_entries", "max_pending")

    def __init__(self, max_pending: int) -> None:
        if type(max_pending) is not int:
            raise TypeError(f"max_pending must be an int, got {type(max_pending).__name__}")
        if max_pending < 1:
            raise ValueError(f"max_pending must be a positive int, got {max_pending!r}")
        self.max_pending = max_pending
        self._entries: dict[str, _Entry] = {}  # pending (and closed, until collected), in order
        self._closed: OrderedDict[str, ApprovalState] = OrderedDict()

    def pending(self) -> tuple[PendingApproval, ...]:
        """The approvals waiting for an answer, oldest first."""
        return tuple(e.approval for e in self._entries.values() if e.state == "pending")

    def state(self, approval_id: str) -> ApprovalState | Literal["unknown"]:
        """Where the approval is (``"unknown"``: never opened, or closed long ago)."""
        entry = self._entries.get(approval_id)
        if entry is not None:
            return entry.state
        return self._closed.get(approval_id, "unknown")

    def open(self, approval_id: str, request: ApprovalRequest, now: float) -> PendingApproval:
        """Open an approval for ``request``. Raises :class:`TooManyPending` when full and
        ``ValueError`` for an ID already used."""
        if approval_id in self._entries or approval_id in self._closed:
            raise ValueError(f"approval ID {approval_id!r} is already used")
        if len(self.pending()) >= self.max_pending:
            raise TooManyPending(self.max_pending)
        approval = PendingApproval(approval_id, request, now)
        self._entries[approval_id] = _Entry(approval)
        return approval

    def answer(
        self, approval_id: str, approved: bool, reason: str, decided_by: str, now: float
    ) -> Closing:
        """A person's answer at ``now`` (the Trio clock): taken while pending and unexpired;
        after the request's ``deadline`` it expires the approval (denied) and is refused;
        otherwise refused."""
        entry = self._entries.get(approval_id)
        if entry is None or entry.state != "pending":
            return Closing(None, None, ApprovalNotPending(approval_id, self.state(approval_id)))
        request = entry.approval.request
        if request.deadline is not None and now > request.deadline:
            closed = self._move(entry, "expire", "answered after the request expired")
            entry.decision = ApprovalDecision.for_request(
                request, False, "the answer came after the request expired", "expired"
            )
            return Closing(closed, entry.decision, ApprovalNotPending(approval_id, "expired"))
        decision = ApprovalDecision.for_request(request, approved, reason, decided_by)
        closed = self._move(entry, "approve" if approved else "deny", reason)
        entry.decision = decision
        return Closing(closed, decision, None)

    def withdraw(self, approval_id: str, reason: str) -> ApprovalClosed | None:
        """Withdraw a pending approval (its request was cancelled); None if it was not pending."""
        entry = self._entries.get(approval_id)
        if entry is None or entry.state != "pending":
            return None
        return self._move(entry, "withdraw", reason)

    def collect(self, approval_id: str) -> ApprovalDecision | None:
        """Forget a closed approval, returning its decision (None: withdrawn or still pending —
        a pending one is not forgotten)."""
        entry = self._entries.get(approval_id)
        if entry is None or entry.state == "pending":
            return None
        del self._entries[approval_id]
        self._closed[approval_id] = entry.state
        while len(self._closed) > _REMEMBERED:
            self._closed.popitem(last=False)
        return entry.decision

    def _move(self, entry: _Entry, event: _Event, reason: str) -> ApprovalClosed:
        state = TRANSITIONS[(entry.state, event)]
        entry.state = state
        assert state != "pending"
        return ApprovalClosed(entry.approval.approval_id, state, reason)
