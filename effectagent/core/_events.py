"""Run events: one stream per run; ``run`` reduces the same stream ``stream`` yields (RUN-001).

Every event carries the run, conversation and agent identity, a per-run sequence number and a
wall-clock timestamp; turn and tool-call IDs where they apply. Exactly one terminal event ends a run:
RunCompleted, RunFailed, RunInterrupted or RunSuspended.

Events are made by keyword only (``TurnStarted(run_id=..., conversation_id=..., agent=..., seq=...,
at=..., turn=3)``): many have several fields of one type, which a positional call could swap
without a word. A run makes its events through ``RunIO.emit``, which sets the header — ``run_id``,
``conversation_id``, ``agent``, ``seq``, ``at`` — and takes the event's own fields.
"""

from __future__ import annotations

from typing import Any, Literal, TypeAlias

import attrs

from effectagent.effect import _fast_init

from ._approval import ApprovalRequest
from ._errors import RunError
from ._outcomes import (
    ToolDefect,
    ToolFailure,
    ToolInvalidInput,
    ToolRejected,
    ToolSuccess,
    ToolUnknownOutcome,
)
from ._policy import ChildBudget
from ._usage import UsageDelta, UsageTotals

__all__ = [
    "ApprovalRequested",
    "BudgetWarning",
    "CompactionPerformed",
    "Event",
    "EventBase",
    "ModelRetrying",
    "ModelStarted",
    "ReasoningDelta",
    "RunCompleted",
    "RunFailed",
    "RunInterrupted",
    "RunStarted",
    "RunSuspended",
    "SubagentCompleted",
    "SubagentEvent",
    "SubagentStarted",
    "TERMINAL_EVENTS",
    "TextDelta",
    "ToolCallDeclared",
    "ToolCallFailed",
    "ToolCallStarted",
    "ToolCallSucceeded",
    "ToolProgress",
    "TurnCompleted",
    "TurnStarted",
]


@_fast_init
@attrs.frozen(slots=True, kw_only=True)
class EventBase:
    """Identity and ordering shared by every event."""

    run_id: str
    conversation_id: str
    agent: str
    seq: int
    at: float


@_fast_init
@attrs.frozen(slots=True, kw_only=True)
class RunStarted(EventBase):
    """The run was admitted; ``input`` is the user's (redacted) text. ``resumed``: the run is
    continued from its records (``Runtime.resume``), not started — ``input`` is then the text it
    was started with."""

    input: str
    resumed: bool = False


@_fast_init
@attrs.frozen(slots=True, kw_only=True)
class TurnStarted(EventBase):
    """A turn begins; ``grace`` marks the single final-answer turn after exhaustion."""

    turn: int
    grace: bool = False


@_fast_init
@attrs.frozen(slots=True, kw_only=True)
class ModelStarted(EventBase):
    """The model request for ``turn`` is sent."""

    turn: int


@_fast_init
@attrs.frozen(slots=True, kw_only=True)
class ModelRetrying(EventBase):
    """The model call of ``turn`` failed with a retryable error; it is tried again after
    ``delay`` seconds (attempt ``attempt + 1``).

    ``discard`` is True when the failed attempt had already streamed text or reasoning: those
    deltas were provisional — drop what this turn showed so far; the next attempt streams the
    answer anew. Nothing of a failed attempt is ever recorded.
    """

    turn: int
    attempt: int
    error_tag: str
    message: str
    delay: float
    discard: bool


@_fast_init
@attrs.frozen(slots=True, kw_only=True)
class TextDelta(EventBase):
    """Streamed answer text."""

    turn: int
    text: str


@_fast_init
@attrs.frozen(slots=True, kw_only=True)
class ReasoningDelta(EventBase):
    """Streamed reasoning text."""

    turn: int
    text: str


@_fast_init
@attrs.frozen(slots=True, kw_only=True)
class ToolCallDeclared(EventBase):
    """The model declared a tool call (arguments redacted, bounded)."""

    turn: int
    tool_call_id: str
    tool_name: str
    arguments: Any


@_fast_init
@attrs.frozen(slots=True, kw_only=True)
class ToolCallStarted(EventBase):
    """The handler of a tool call starts (permits held)."""

    turn: int
    tool_call_id: str
    tool_name: str


@_fast_init
@attrs.frozen(slots=True, kw_only=True)
class ToolProgress(EventBase):
    """A handler reported progress (redacted, bounded)."""

    turn: int
    tool_call_id: str
    tool_name: str
    data: Any


@_fast_init
@attrs.frozen(slots=True, kw_only=True)
class ToolCallSucceeded(EventBase):
    """A tool call settled with ToolSuccess (``outcome``)."""

    turn: int
    tool_call_id: str
    tool_name: str
    outcome: ToolSuccess


@_fast_init
@attrs.frozen(slots=True, kw_only=True)
class ToolCallFailed(EventBase):
    """A tool call settled with any other outcome (``outcome``: every kind but ToolSuccess)."""

    turn: int
    tool_call_id: str
    tool_name: str
    outcome: ToolRejected | ToolInvalidInput | ToolFailure | ToolDefect | ToolUnknownOutcome


@_fast_init
@attrs.frozen(slots=True, kw_only=True)
class ApprovalRequested(EventBase):
    """A tool call waits for approval."""

    turn: int
    tool_call_id: str
    tool_name: str
    request: ApprovalRequest


@_fast_init
@attrs.frozen(slots=True, kw_only=True)
class TurnCompleted(EventBase):
    """A turn ended (its batch, if any, committed). ``usage`` is the run's totals so far;
    ``model`` names the model that answered the turn (as ``ModelResponseRecorded.model``)."""

    turn: int
    finish_reason: str
    usage: UsageTotals
    model: str | None = None


@_fast_init
@attrs.frozen(slots=True, kw_only=True)
class BudgetWarning(EventBase):
    """A budget dimension passed its warning ratio (once per dimension per run)."""

    dimension: str
    used: float
    limit: float


@_fast_init
@attrs.frozen(slots=True, kw_only=True)
class CompactionPerformed(EventBase):
    """Context was compacted before ``turn``: the last record's ``kind`` and how far it covers,
    the live-context estimate before and the count after. ``started_at`` is the wall-clock time
    the compaction began (reading the log, planning, a summary's model call): with ``at``, its
    duration. ``model`` names the model of the summary's calls, if it made any, and ``usage``
    holds what each of those calls used, in order (none: nothing was summarized by a model)."""

    turn: int
    kind: str
    covers_through: int
    tokens_before: int
    tokens_after: int
    started_at: float = 0.0
    model: str | None = None
    usage: tuple[UsageDelta, ...] = ()


@_fast_init
@attrs.frozen(slots=True, kw_only=True)
class SubagentStarted(EventBase):
    """Tool call ``tool_call_id`` started an attached child run (a subagent): the child's
    identity, and ``budget``, what it was given of this run's remaining budgets. The child's own
    events follow as :class:`SubagentEvent`, then one :class:`SubagentCompleted`."""

    turn: int
    tool_call_id: str
    tool_name: str
    child_run_id: str
    child_conversation_id: str
    child_agent: str
    budget: ChildBudget


@_fast_init
@attrs.frozen(slots=True, kw_only=True)
class SubagentEvent(EventBase):
    """One event of the child run ``child_run_id`` that tool call ``tool_call_id`` started, as
    the child emitted it (its own run ID, sequence number and time). A grandchild's events arrive
    wrapped twice: the tree of runs is the nesting of these."""

    turn: int
    tool_call_id: str
    child_run_id: str
    event: EventBase


@_fast_init
@attrs.frozen(slots=True, kw_only=True)
class SubagentCompleted(EventBase):
    """The child run of tool call ``tool_call_id`` ended: how (``status``), and what it used —
    its usage (included in this run's totals from now on), its turns and its tool calls
    (grandchildren's included), which count against this run's budgets."""

    turn: int
    tool_call_id: str
    child_run_id: str
    status: Literal["completed", "failed", "interrupted"]
    usage: UsageTotals
    turns: int
    tool_calls: int


@_fast_init
@attrs.frozen(slots=True, kw_only=True)
class RunCompleted(EventBase):
    """Terminal: the run produced its answer. ``finish_reason`` is "stop" or "budget-exhausted";
    ``model`` names the model that gave the answer (as ``TurnCompleted.model``); ``usage.by_model``
    has what each model used."""

    text: str
    output: Any
    finish_reason: Literal["stop", "budget-exhausted"]
    exhausted: str | None
    usage: UsageTotals
    turns: int
    tool_calls: int
    model: str | None = None


@_fast_init
@attrs.frozen(slots=True, kw_only=True)
class RunFailed(EventBase):
    """Terminal: the run failed with ``error``."""

    error: RunError
    usage: UsageTotals


@_fast_init
@attrs.frozen(slots=True, kw_only=True)
class RunInterrupted(EventBase):
    """Terminal: the run was cancelled (caller, runtime close)."""

    reason: str
    usage: UsageTotals


@_fast_init
@attrs.frozen(slots=True, kw_only=True)
class RunSuspended(EventBase):
    """Terminal for this execution of the run: it waits durably for the approval decisions of
    ``tool_call_ids`` (an approval service that suspends, such as ``SuspendingApproval``, said so)
    and ran none of its batch. It is not over: ``Runtime.resume`` continues it from its records
    once decisions are recorded. ``usage`` is what this execution used."""

    reason: str
    tool_call_ids: tuple[str, ...] = ()
    usage: UsageTotals = attrs.field(factory=UsageTotals)


#: Any run event.
Event: TypeAlias = (
    RunStarted
    | TurnStarted
    | ModelStarted
    | ModelRetrying
    | TextDelta
    | ReasoningDelta
    | ToolCallDeclared
    | ToolCallStarted
    | ToolProgress
    | ToolCallSucceeded
    | ToolCallFailed
    | ApprovalRequested
    | TurnCompleted
    | BudgetWarning
    | CompactionPerformed
    | SubagentStarted
    | SubagentEvent
    | SubagentCompleted
    | RunCompleted
    | RunFailed
    | RunInterrupted
    | RunSuspended
)

#: The event types that end a run; exactly one ends each run.
TERMINAL_EVENTS: tuple[type[EventBase], ...] = (
    RunCompleted,
    RunFailed,
    RunInterrupted,
    RunSuspended,
)
