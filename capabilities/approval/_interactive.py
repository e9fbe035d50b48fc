"""The interactive approval provider: requests wait for a person, answered from a UI.

A UI — a CLI prompt, a web page, a chat bot — learns of requests in one of two ways:

* **a channel**: :meth:`InteractiveApproval.subscribe` returns a Trio memory receive channel of
  :data:`ApprovalUpdate` values: first an :class:`ApprovalOpened` for every approval already
  pending (a UI that connects late, or reconnects, sees them all), then every opening and closing
  as it happens. Any number of subscribers; closing the receive channel unsubscribes. A
  subscriber that falls ``buffer`` updates behind is disconnected (its channel ends after what it
  was sent) rather than slowing the approver or growing without bound: subscribe again for a
  fresh snapshot.
* **a callback**: ``on_update`` is called with each update, synchronously, as it happens. An
  exception it raises for an opening withdraws that approval and fails the request (a denial, as
  the engine records an ``ApprovalError``); one it raises for a closing is logged.

The person answers with :meth:`approve`, :meth:`deny` or :meth:`answer`, by approval ID, in any
order, with any number pending at once (up to ``max_pending``). An answer for an approval that is
not pending raises :class:`ApprovalNotPending` saying what became of it.

**Withdrawal.** A waiting request is cancelled when the engine's approval timeout runs out or its
run is interrupted. The approval is then withdrawn the moment the cancellation reaches the wait,
before any other task runs: it leaves :meth:`pending`, every subscriber and the callback get an
:class:`ApprovalClosed` with state ``"withdrawn"``, and an answer given from then on — even one
given at the very moment the engine stopped waiting — is refused, never reported as taken for a
request nobody waits for. (Withdrawal never waits, so it happens even in a cancelled task.)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, final

import trio

from effectagent.core import ApprovalDecision, ApprovalRequest
from effectagent.effect import Context, Exit, Layer, Scope
from effectagent.engine import ApprovalError, ApprovalService, RedactorService

from .._ids import new_id
from .._logging import log_warning
from ._pending import (
    ApprovalNotPending,
    ApprovalOpened,
    ApprovalUpdate,
    PendingApproval,
    PendingApprovals,
    TooManyPending,
)

__all__ = ["InteractiveApproval"]


@final
class InteractiveApproval:
    """Approval requests answered by a person through a UI (see the module notes).

    ``max_pending`` bounds the approvals waiting at once (one more is denied at once, as an
    ``ApprovalError``); ``buffer`` how far a subscriber may fall behind. An answer is judged
    late on the Trio clock, against the request's ``deadline`` — the clock and the moment the
    engine judges by — so answers are given from within the Trio run.
    """

    __slots__ = ("_buffer", "_on_update", "_redact", "_subscribers", "_table", "_waiters")

    def __init__(
        self,
        *,
        max_pending: int = 100,
        buffer: int = 256,
        on_update: Callable[[ApprovalUpdate], object] | None = None,
    ) -> None:
        if type(buffer) is not int:
            raise TypeError(f"buffer must be an int, got {type(buffer).__name__}")
        if buffer < 1:
            raise ValueError(f"buffer must be a positive int, got {buffer!r}")
        if on_update is not None and not callable(on_update):
            raise TypeError("on_update must be a function of an update, or None")
        self._table = PendingApprovals(max_pending)
        self._buffer = buffer
        self._on_update = on_update
        self._subscribers: list[trio.MemorySendChannel[ApprovalUpdate]] = []
        self._waiters: dict[str, trio.lowlevel.Task] = {}
        # The runtime's redaction once :meth:`layer` is built in one (``RedactorService``).
        self._redact: Callable[[str], str] = _unchanged

    # ---- the engine's side ---------------------------------------------------------------------

    async def request(self, request: ApprovalRequest) -> ApprovalDecision:
        """Show ``request`` to the UIs and wait for a person's answer (bound to the request).

        Cancellation: waits until answered; if cancelled — the engine's approval timeout, the
        run's interruption — the approval is withdrawn at the moment the cancellation reaches
        the wait, before any other task runs (see the module notes): an answer given from then
        on is refused, never taken for a request nobody waits for. Cancelled before it starts,
        it raises at once: no UI is shown the request. Raises :class:`ApprovalError` when
        ``max_pending`` are waiting or the callback refused the opening.
        """
        await trio.lowlevel.checkpoint_if_cancelled()
        approval_id = new_id("approval")
        try:
            approval = self._table.open(approval_id, request, trio.current_time())
        except TooManyPending as exc:
            raise ApprovalError(str(exc)) from None
        try:
            self._publish(ApprovalOpened(approval), opening=True)
        except BaseException:
            self._withdraw(approval_id)
            self._table.collect(approval_id)
            raise
        if self._table.state(approval_id) == "pending":
            self._waiters[approval_id] = trio.lowlevel.current_task()

            def abort(_: object) -> trio.lowlevel.Abort:
                # Called synchronously as the cancellation is delivered: nobody waits any more.
                del self._waiters[approval_id]
                self._withdraw(approval_id)
                self._table.collect(approval_id)
                return trio.lowlevel.Abort.SUCCEEDED

            await trio.lowlevel.wait_task_rescheduled(abort)
        else:  # the callback answered while being told of the opening: nothing to wait for
            await trio.lowlevel.cancel_shielded_checkpoint()
        decision = self._table.collect(approval_id)
        assert decision is not None  # woken only once answered (or expired)
        return decision

    def _withdraw(self, approval_id: str) -> None:
        closed = self._table.withdraw(approval_id, "the request was cancelled")
        if closed is not None:
            self._publish(closed)

    # ---- the UI's side -------------------------------------------------------------------------

    def pending(self) -> tuple[PendingApproval, ...]:
        """The approvals waiting for an answer, oldest first."""
        return self._table.pending()

    def subscribe(self) -> trio.MemoryReceiveChannel[ApprovalUpdate]:
        """A channel of updates: the pending approvals first, then every change (module notes).
        Close it (``with channel:``, or ``channel.close()``) to unsubscribe."""
        pending = self._table.pending()
        send, receive = trio.open_memory_channel[ApprovalUpdate](self._buffer + len(pending))
        for approval in pending:
            send.send_nowait(ApprovalOpened(approval))
        self._subscribers.append(send)
        return receive

    def answer(
        self, approval_id: str, approved: bool, *, reason: str = "", by: str = "interactive"
    ) -> ApprovalDecision:
        """Answer a pending approval; returns the decision, bound to its request. Raises
        :class:`ApprovalNotPending` if it is not pending — also when the answer came after the
        request's ``deadline`` (the request is then denied). Call it within the Trio run: the
        Trio clock says whether the answer is late.

        ``reason`` and ``by`` are redacted with the runtime's redaction (when :meth:`layer` was
        built by a runtime) before anything is told of them: the decision, its record, the log
        and the subscribers' ``ApprovalClosed`` hold the redacted text."""
        _check_answer(approval_id, approved, reason, by)
        reason, by = self._redact(reason), self._redact(by)
        state = self._table.state(approval_id)
        if state != "pending":  # refused without asking the clock (nothing waits for it)
            raise ApprovalNotPending(approval_id, state)
        closing = self._table.answer(approval_id, approved, reason, by, trio.current_time())
        if closing.closed is not None:
            waiter = self._waiters.pop(approval_id, None)
            if waiter is not None:  # None: answered from the callback, before the wait began
                trio.lowlevel.reschedule(waiter)
            self._publish(closing.closed)
        if closing.refused is not None:
            raise closing.refused
        assert closing.decision is not None
        return closing.decision

    def approve(self, approval_id: str, reason: str = "", *, by: str = "interactive") -> None:
        """Approve a pending approval (see :meth:`answer`)."""
        self.answer(approval_id, True, reason=reason, by=by)

    def deny(self, approval_id: str, reason: str = "", *, by: str = "interactive") -> None:
        """Deny a pending approval (see :meth:`answer`)."""
        self.answer(approval_id, False, reason=reason, by=by)

    def close(self) -> None:
        """End every subscriber's channel (after what it was sent). Pending requests keep
        waiting; new subscriptions still work. Idempotent."""
        subscribers, self._subscribers = self._subscribers, []
        for send in subscribers:
            send.close()

    def layer(self) -> Layer:
        """This provider as the engine's ``ApprovalService``; the subscribers' channels end when
        the layer is torn down (the runtime closes). Built by a runtime, it redacts the answers
        people give with the runtime's redaction (``RedactorService``: see :meth:`answer`)."""

        async def build(context: Context, scope: Scope) -> Context:
            self._bind(context, scope)
            return Context.of(ApprovalService, self)

        return Layer.from_build(
            "InteractiveApproval",
            provides=[ApprovalService],
            uses=[RedactorService],
            build=build,
        )

    def _bind(self, context: Context, scope: Scope) -> None:
        """Take the runtime's redaction (``RedactorService``, when the runtime builds it) for
        the answers people give, and end the subscribers' channels when ``scope`` closes — for
        this provider's own layer and for a :class:`PolicyApproval` that asks it."""

        async def close(_: Exit[Any, Any]) -> None:
            self.close()

        redactor = context.get(RedactorService)  # the runtime's, when open_runtime builds it
        if redactor is not None:
            self._redact = redactor.redact_text
        scope.add_finalizer(close)

    # ---- delivery ------------------------------------------------------------------------------

    def _publish(self, update: ApprovalUpdate, *, opening: bool = False) -> None:
        kept: list[trio.MemorySendChannel[ApprovalUpdate]] = []
        for send in self._subscribers:
            try:
                send.send_nowait(update)
            except trio.WouldBlock:
                send.close()  # fell too far behind: its channel ends; it may subscribe again
                log_warning("approval subscriber disconnected", reason="behind")
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                pass  # the subscriber closed its channel: unsubscribed
            else:
                kept.append(send)
        self._subscribers = kept
        if self._on_update is None:
            return
        try:
            self._on_update(update)
        except Exception as exc:
            if opening:
                raise ApprovalError(f"the approval UI failed: {type(exc).__name__}") from None
            log_warning("approval update callback failed", error=type(exc).__name__)


def _unchanged(text: str) -> str:
    return text


def _check_answer(approval_id: object, approved: object, reason: object, by: object) -> None:
    if not isinstance(approval_id, str):
        raise TypeError(f"approval_id must be a str, got {type(approval_id).__name__}")
    if not isinstance(approved, bool):
        raise TypeError(f"approved must be a bool, got {type(approved).__name__}")
    if not isinstance(reason, str) or not isinstance(by, str):
        raise TypeError("reason and by must be str")
