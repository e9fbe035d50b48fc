"""What a tool call may reach of the run that serves it: a narrow handle, never the run itself.

A handler gets its :class:`~effectagent.ai.ToolCallContext`; its ``host`` is a :class:`CallHost`,
opaque to handlers and used by the engine's own functions (``run_child``, the broker). Through it a
call can lease a child run's budget and take tool-call permits — from the batch's
:class:`~effectagent.engine._budget.Allowance` and the run's
:class:`~effectagent.engine._permits.PermitPool` — and note audit metadata for its own settlement.
It cannot change the run's state: that is the run's state machine's alone, which folds in what the
batch's calls used when the batch settles.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, final

import trio

from effectagent.ai import Toolkit
from effectagent.core import Agent, ToolProgress, ToolResultBounds, bounded_json

from ._budget import NOTHING_DELEGATED, Allowance, Budget, Delegated
from ._io import RunIO
from ._permits import Permit, PermitPool

if TYPE_CHECKING:
    from ._services import RunServices

__all__ = ["BatchScope", "CallHost"]

_PROGRESS_BOUNDS = ToolResultBounds(max_bytes=4096)


@final
class BatchScope:
    """What every call of one batch shares of its run: read-only facts, and the batch's own
    allowance and the run's permit pool (each with its own owner and rules). The allowance is
    made when a call first needs it (an inner call or a child run): most batches never do."""

    __slots__ = (
        "_allowance",
        "agent",
        "budget",
        "depth",
        "io",
        "may_delegate",
        "pool",
        "services",
        "toolkit",
        "turn",
    )

    def __init__(
        self,
        *,
        io: RunIO,
        agent: Agent,
        services: RunServices,
        toolkit: Toolkit,
        turn: int,
        depth: int,
        may_delegate: bool,
        budget: Budget,
        pool: PermitPool,
    ) -> None:
        self.io = io
        self.agent = agent
        self.services = services  # the turn's (its tool sources' handlers included)
        self.toolkit = toolkit  # the turn's tools
        self.turn = turn
        self.depth = depth  # 0: a run the runtime started; n: a child n levels down
        self.may_delegate = may_delegate
        self.budget = budget  # the run's, as the batch began
        self._allowance: Allowance | None = None
        self.pool = pool

    @property
    def allowance(self) -> Allowance:
        """What the batch's calls may take beyond the batch's own calls (made at first use)."""
        allowance = self._allowance
        if allowance is None:
            allowance = self._allowance = Allowance(self.budget)
        return allowance

    def delegated(self) -> Delegated:
        """What the batch's inner calls and settled child runs used (nothing, if no call asked
        for the allowance)."""
        allowance = self._allowance
        return NOTHING_DELEGATED if allowance is None else allowance.totals()


@final
class CallHost:
    """One call's handle on its batch (see the module notes). ``permit`` is the call's while its
    handler runs — what the calls it makes borrow first. Calling it reports progress."""

    __slots__ = ("_notes", "permit", "scope", "tool_call_id", "tool_name")

    def __init__(self, scope: BatchScope, tool_call_id: str, tool_name: str) -> None:
        self.scope = scope
        self.tool_call_id = tool_call_id
        self.tool_name = tool_name
        self.permit: Permit | None = None
        self._notes: dict[str, Any] | None = None

    def note(self, key: str, value: Any) -> None:
        """Add ``key`` to this call's audit metadata (written with its settlement)."""
        if self._notes is None:
            self._notes = {}
        self._notes[key] = value

    @property
    def notes(self) -> dict[str, Any] | None:
        """The audit metadata noted so far (None: nothing)."""
        return self._notes

    async def __call__(self, data: Any) -> None:
        """The handler's progress report (its context's ``progress``; the host is the context's
        ``report``, so a call needs no bound method for it): redacted, bounded, emitted as
        ``ToolProgress``.

        Cancellation: a checkpoint (as ``ToolCallContext.progress`` promises) before anything is
        emitted; then, for a streamed run, it waits while the consumer lags (backpressure).
        """
        scope = self.scope
        io = scope.io
        preview = bounded_json(io.redact(data), _PROGRESS_BOUNDS)
        await trio.lowlevel.checkpoint()
        io.emit(
            ToolProgress,
            turn=scope.turn,
            tool_call_id=self.tool_call_id,
            tool_name=self.tool_name,
            data=preview,
        )
        await io.wait_for_consumer()
