"""Approvals in a terminal session: the person answers each request inline — yes, no, or always
(for this tool, until the session ends).

:class:`SessionApproval` fills the engine's approval seam: a tool the person said *always* to is
approved at once (the decision says so); any other request waits in an
:class:`~capabilities.approval.InteractiveApproval`, whose updates :class:`ApprovalPrompt` turns
into prompts on the terminal and answers from the lines the person types.
"""

from __future__ import annotations

import contextlib
from collections import OrderedDict
from collections.abc import Callable
from typing import TextIO

from capabilities.approval import (
    ApprovalClosed,
    ApprovalNotPending,
    ApprovalOpened,
    InteractiveApproval,
    PendingApproval,
)
from effectagent.core import ApprovalDecision, ApprovalRequest
from effectagent.effect import Layer
from effectagent.engine import ApprovalService

__all__ = ["ApprovalPrompt", "SessionApproval"]

_ANSWERS = {
    "y": "yes",
    "yes": "yes",
    "n": "no",
    "no": "no",
    "a": "always",
    "always": "always",
}


class SessionApproval:
    """The approval provider of one terminal session (see the module notes).

    ``ask`` False denies every request that is not always-approved, saying there is nobody to ask
    (for a session without a terminal on its input).
    """

    def __init__(self, *, ask: bool = True) -> None:
        self.interactive = InteractiveApproval()
        self.always: set[str] = set()
        self.ask = ask

    async def request(self, request: ApprovalRequest) -> ApprovalDecision:
        """Approve an always-approved tool at once; otherwise wait for the person's answer.

        Cancellation: as :meth:`InteractiveApproval.request` — the prompt is withdrawn before
        the cancellation goes on.
        """
        if request.tool_name in self.always:
            return ApprovalDecision.for_request(
                request, True, "always approved for this session", "session"
            )
        if not self.ask:
            return ApprovalDecision.for_request(
                request, False, "nobody to ask: the input is not a terminal", "session"
            )
        return await self.interactive.request(request)

    def layer(self) -> Layer:
        """This provider as the engine's ``ApprovalService``."""
        return Layer.succeed(ApprovalService, self, name="SessionApproval")


class ApprovalPrompt:
    """Shows each pending approval as a prompt on ``out`` (oldest first) and takes answers.

    Feed it the updates of :meth:`InteractiveApproval.subscribe` (:meth:`update`) and the lines
    the person types while any is pending (:meth:`answer`). ``paint`` styles a prompt.
    """

    def __init__(
        self,
        approval: SessionApproval,
        out: TextIO,
        *,
        paint: Callable[[str], str] = lambda text: text,
    ) -> None:
        self._approval = approval
        self._out = out
        self._paint = paint
        self._pending: OrderedDict[str, PendingApproval] = OrderedDict()
        self._asked: str | None = None
        # The calls whose ApprovalRequested event was shown: a prompt waits for its call's
        # event, so it comes after the line that says which call waits, never before.
        self._announced: set[str] = set()
        self._line_open = False  # a prompt waits on its line for the person's answer

    @property
    def waiting(self) -> bool:
        """Whether a prompt is on the screen, waiting for its answer (a line typed before any
        prompt shows is not an answer)."""
        return self._asked is not None

    def announce(self, tool_call_id: str) -> None:
        """The timeline has shown that ``tool_call_id`` waits for approval: its prompt may come."""
        self._announced.add(tool_call_id)
        self._ask_next()

    def update(self, update: ApprovalOpened | ApprovalClosed) -> None:
        """Take one update: prompt for a new approval, drop a closed one."""
        if isinstance(update, ApprovalOpened):
            approval = update.approval
            self._pending[approval.approval_id] = approval
        else:
            closed = self._pending.pop(update.approval_id, None)
            if closed is not None:
                self._announced.discard(closed.request.tool_call_id)
                if update.state in ("withdrawn", "expired"):
                    self._say(f"  (approval for {closed.request.tool_name} {update.state})")
            if self._asked == update.approval_id:
                self._asked = None
        self._ask_next()

    def end_line(self) -> None:
        """End the line of a prompt still waiting for its answer (before other output)."""
        if self._line_open:
            self._out.write("\n")
            self._line_open = False

    def answer(self, line: str) -> None:
        """Answer the approval on the screen with ``line`` (y/yes, n/no, a/always)."""
        self._line_open = False  # the person's Enter ended the prompt's line
        approval_id = self._asked
        approval = self._pending.get(approval_id) if approval_id is not None else None
        if approval_id is None or approval is None:
            return
        choice = _ANSWERS.get(line.strip().lower())
        if choice is None:
            self._say("  answer y (yes), n (no) or a (always for this session)")
            self._asked = None
            self._ask_next()
            return
        tool_name = approval.request.tool_name
        interactive = self._approval.interactive
        # Answered: off the screen at once (its closing update follows), and the next one asked.
        self._asked = None
        self._pending.pop(approval_id, None)
        self._announced.discard(approval.request.tool_call_id)
        try:
            if choice == "no":
                interactive.deny(approval_id, "denied by the user", by="user")
            else:
                reason = "approved by the user"
                if choice == "always":
                    self._approval.always.add(tool_name)
                    reason = "approved by the user, always for this session"
                interactive.approve(approval_id, reason, by="user")
                if choice == "always":
                    self._approve_others(tool_name)
        except ApprovalNotPending as exc:
            self._say(f"  (too late: the approval is {exc.state})")
        self._ask_next()

    def _approve_others(self, tool_name: str) -> None:
        """'Always' answers the other requests of the same tool waiting now, too."""
        for other_id, other in list(self._pending.items()):
            if other.request.tool_name == tool_name:
                del self._pending[other_id]
                self._announced.discard(other.request.tool_call_id)
                with contextlib.suppress(ApprovalNotPending):  # closed meanwhile: nothing to do
                    self._approval.interactive.approve(
                        other_id, "approved by the user, always for this session", by="user"
                    )

    def _ask_next(self) -> None:
        if self._asked is not None or not self._pending:
            return
        approval_id, approval = next(iter(self._pending.items()))
        if approval.request.tool_call_id not in self._announced:
            return
        self._asked = approval_id
        question = self._paint(f"  allow {approval.request.tool_name}?")
        self._out.write(f"{question} [y]es / [n]o / [a]lways for this session: ")
        self._out.flush()
        self._line_open = True

    def _say(self, text: str) -> None:
        self.end_line()
        self._out.write(f"{text}\n")
        self._out.flush()
