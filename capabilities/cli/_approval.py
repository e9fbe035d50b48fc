"""Approvals in a terminal session: the person answers each request inline — yes, no, or always
(for this tool, until the session ends).

:class:`SessionApproval` fills the engine's approval seam: a tool the person said *always* to is
approved at once (the decision says so); any other request waits in an
:class:`~capabilities.approval.InteractiveApproval`, whose updates :class:`ApprovalPrompt` turns
into prompts on the terminal and answers from the lines the person types.

**What a prompt shows is ours.** The tool's registered name, where it comes from (built in, an MCP
server of the configuration, Code Mode) and the call's whole arguments, escaped and
pretty-printed (:mod:`._approval_view`) — never the request's summary, which for an MCP tool is
the server's own description. A call whose arguments the engine could only carry cut (over its
preview bound) cannot be shown whole, so it is denied without asking, saying why. When the
arguments are longer than the screen, the prompt shows them a screenful at a time (``v`` for the
next) and takes a "yes" only once all were shown.

**Nothing else writes while a prompt waits.** The prompt holds the console
(:meth:`~capabilities.cli._console.Console.hold`): other calls' results and errors, a model's
text, notes — all wait, in order, until the answer, so nothing can overwrite the prompt or print
a forged one under it.
"""

from __future__ import annotations

import contextlib
from collections import OrderedDict
from collections.abc import Callable

import trio

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

from ._approval_view import argument_lines, is_truncated, pages
from ._console import Channel, Styled

__all__ = ["ApprovalPrompt", "SessionApproval"]

_ANSWERS = {
    "y": "yes",
    "yes": "yes",
    "n": "no",
    "no": "no",
    "a": "always",
    "always": "always",
    "v": "view",
    "view": "view",
}

#: Rows of the screen a prompt keeps for itself around a page of arguments: the line saying the
#: call waits, the tool's line, the arguments' heading and the question.
_CHROME = 4

TOO_LONG = (
    "its arguments are too long to show the user whole, so it cannot be approved: split the "
    "work into smaller calls"
)


def _unknown_origin(tool_name: str) -> str:
    return "a tool of this session"


class SessionApproval:
    """The approval provider of one terminal session (see the module notes).

    ``ask`` False denies every request that is not always-approved, saying there is nobody to ask
    (for a session without a terminal on its input). ``origin`` says where a tool comes from, by
    its registered name ("built in", "MCP server 'notes'", "Code Mode").
    """

    def __init__(self, *, ask: bool = True, origin: Callable[[str], str] = _unknown_origin) -> None:
        self.interactive = InteractiveApproval()
        self.always: set[str] = set()
        self.ask = ask
        self.origin = origin

    async def request(self, request: ApprovalRequest) -> ApprovalDecision:
        """Approve an always-approved tool at once; deny any other call whose arguments cannot
        be shown whole; otherwise wait for the person's answer.

        Cancellation: as :meth:`InteractiveApproval.request` — the prompt is withdrawn before
        the cancellation goes on.
        """
        if request.tool_name in self.always:
            return ApprovalDecision.for_request(
                request, True, "always approved for this session", "session"
            )
        if is_truncated(request.input_preview):
            return ApprovalDecision.for_request(request, False, TOO_LONG, "session")
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
    the person types while any is pending (:meth:`answer`). While a prompt waits it holds ``out``'s
    console (module notes). ``size`` gives the screen's (columns, rows) when a prompt is built
    (default: ``out``'s terminal).
    """

    def __init__(
        self,
        approval: SessionApproval,
        out: Channel,
        *,
        size: Callable[[], tuple[int, int]] | None = None,
    ) -> None:
        self._approval = approval
        self._out = out
        self._size = size if size is not None else out.size
        self._pending: OrderedDict[str, PendingApproval] = OrderedDict()
        self._asked: str | None = None
        # The calls whose ApprovalRequested event was shown: a prompt waits for its call's
        # event, so it comes after the line that says which call waits, never before.
        self._announced: set[str] = set()
        self._line_open = False  # a prompt waits on its line for the person's answer
        # The prompt on the screen: the pages of its arguments and how many were shown.
        self._pages: list[list[str]] = []
        self._shown = 0
        self._asking = trio.Event()  # set when a prompt is put on the screen

    @property
    def waiting(self) -> bool:
        """Whether a prompt is on the screen, waiting for its answer (a line typed before any
        prompt shows is not an answer)."""
        return self._asked is not None

    async def wait_asked(self) -> None:
        """Wait until a prompt is on the screen, waiting for its answer (:attr:`waiting`).
        Cancellation: nothing changes."""
        while self._asked is None:
            if self._asking.is_set():
                self._asking = trio.Event()
            await self._asking.wait()

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
            asked = self._asked == update.approval_id
            if closed is not None:
                self._announced.discard(closed.request.tool_call_id)
                if update.state in ("withdrawn", "expired"):
                    note = f"  (approval for {closed.request.tool_name} {update.state})"
                    if asked:
                        self._say(note)  # in place of its prompt
                    else:
                        self._out.line(note)  # after the answer to the prompt on the screen
            if asked:
                self._done()
        self._ask_next()

    def answer(self, line: str) -> None:
        """Answer the approval on the screen with ``line`` (y/yes, n/no, a/always, v/view)."""
        if self._line_open:  # the person's Enter ended the prompt's line
            self._line_open = False
            self._out.line_ended()
        approval_id = self._asked
        approval = self._pending.get(approval_id) if approval_id is not None else None
        if approval_id is None or approval is None:
            return
        choice = _ANSWERS.get(line.strip().lower())
        complete = self._shown >= len(self._pages)
        if choice == "view":
            self._show_page(restart=complete)
            self._question(approval)
            return
        if choice is None or (choice != "no" and not complete):
            if complete:
                self._say("  answer y (yes), n (no) or a (always for this session)")
            else:
                self._say("  the arguments are not all shown yet: v shows the next lines")
            self._question(approval)
            return
        tool_name = approval.request.tool_name
        interactive = self._approval.interactive
        # Answered: off the screen at once (its closing update follows), and the next one asked.
        self._pending.pop(approval_id, None)
        self._announced.discard(approval.request.tool_call_id)
        self._done()
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
            self._out.line(f"  (too late: the approval is {exc.state})")
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
        self._asking.set()
        self._out.console.hold()  # nothing else is written until the answer
        if not self._out.at_line_start:
            self._out.show()
        request = approval.request
        origin = self._approval.origin(request.tool_name)
        columns, rows = self._size()
        self._pages = pages(argument_lines(request.input_preview), columns, rows - _CHROME)
        self._shown = 0
        self._out.show("  ", Styled("bold", request.tool_name), f" — {origin}")
        self._show_page(restart=True)
        self._question(approval)

    def _show_page(self, *, restart: bool) -> None:
        if restart:
            self._shown = 0
        total = sum(len(page) for page in self._pages)
        first = sum(len(page) for page in self._pages[: self._shown]) + 1
        page = self._pages[self._shown]
        self._shown += 1
        if len(self._pages) == 1:
            self._out.show("  arguments:")
        else:
            self._out.show(f"  arguments, lines {first}-{first + len(page) - 1} of {total}:")
        for row in page:
            self._out.show("    ", row)

    def _question(self, approval: PendingApproval) -> None:
        name = approval.request.tool_name
        if self._shown < len(self._pages):
            left = sum(len(page) for page in self._pages[self._shown :])
            choices = f" [v]iew the next lines ({left} more) / [n]o: "
        else:
            choices = " [y]es / [n]o / [a]lways for this session: "
        self._out.show(Styled("bold", f"  allow {name}?"), choices, end="")
        self._line_open = True

    def _done(self) -> None:
        """The prompt on the screen is answered or gone: what waited is written."""
        self._asked = None
        self._pages, self._shown = [], 0
        if self._line_open:  # gone without an answer: its line ends here
            self._out.show()
            self._line_open = False
        self._out.console.release()

    def _say(self, text: str) -> None:
        """A line of the prompt's own (never held)."""
        if self._line_open:
            self._out.show()
            self._line_open = False
        self._out.show(text)
