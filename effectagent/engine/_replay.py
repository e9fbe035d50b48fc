"""A resumed batch's calls: what becomes of each, from what the log says of it.

A run resumed from its records (``Runtime.resume``) may continue a batch that was not settled. Each
of its calls gets a *plan* (:func:`plan_resumed`), decided by
:func:`~effectagent.engine._resume.dangling_path` from the log: a call never prepared, or one that
waited for its approval, runs as any call does (no plan: its recorded request is not recorded
again, a recorded decision is taken); a prepared call whose approval was denied is rejected as it
was (:class:`Settle`); one that may have run is run again (:class:`Rerun`, for an idempotent
tool), reconciled (:class:`Reconcile`, for a tool bound with a reconcile function) or settled
``ToolUnknownOutcome`` (:class:`Settle`). A batch whose approver may suspend has its approvals
decided before any call runs (:class:`Gated`: decided, and approved).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, final

import attrs

from effectagent.ai import Reconciled, ToolCallContext
from effectagent.core import (
    ApprovalDecision,
    ToolDefect,
    ToolOutcome,
    ToolRejected,
    ToolUnknownOutcome,
)
from effectagent.effect import Success

from ._batch_plan import EarlyOutcome, PlannedCall
from ._resume import BatchReplay, dangling_path

if TYPE_CHECKING:
    from ._call import CallRunner

__all__ = [
    "MAY_HAVE_RUN",
    "CallPlan",
    "Gated",
    "Reconcile",
    "Rerun",
    "Settle",
    "denied",
    "plan_resumed",
    "reconcile_call",
    "unknown_for_prepared",
]

#: What the model reads of a call that may or may not have run.
MAY_HAVE_RUN = (
    "the run stopped after this call was prepared and before its outcome was recorded, so it "
    "may or may not have happened; check before you repeat it"
)
_RECONCILE_FAILED = (
    "the run stopped after this call was prepared and before its outcome was recorded, and "
    "checking whether it happened failed; it may or may not have happened"
)


@final
@attrs.frozen
class Gated:
    """Authorized and approved before the batch's calls ran: run the handler."""


@final
@attrs.frozen
class Rerun:
    """May have run; its tool is idempotent: authorize it and run it again."""


@final
@attrs.frozen
class Reconcile:
    """May have run: ask its reconcile function."""


@final
@attrs.frozen
class Settle:
    """Settled without running: ``outcome``."""

    outcome: ToolOutcome


#: What a call of a batch does before (or instead of) its handler, when that was decided apart.
CallPlan = Gated | Rerun | Reconcile | Settle


def plan_resumed(
    runner: CallRunner, replay: BatchReplay, runnable: list[PlannedCall]
) -> dict[int, CallPlan]:
    """The plans of a resumed batch's runnable calls (see the module notes), by declaration
    index; a call without one runs as any call does."""
    plans: dict[int, CallPlan] = {}
    reconcilers = runner.services.reconcilers
    for call in runnable:
        tool = call.tool
        prepared = call.id in replay.prepared
        if not prepared:
            continue
        decision = replay.decisions.get(call.id)
        needs = call.id in replay.requests or _needs_approval(runner, call)
        path = dangling_path(
            prepared=prepared,
            needs_approval=needs,
            decision=decision,
            idempotent=tool.annotations.idempotent,
            reconciles=tool in reconcilers,
        )
        if path == "rerun":
            plans[call.index] = Rerun()
        elif path == "reconcile":
            plans[call.index] = Reconcile()
        elif path == "unknown":
            plans[call.index] = Settle(ToolUnknownOutcome(call.id, call.name, MAY_HAVE_RUN))
        elif path == "denied":
            assert decision is not None
            request = replay.requests.get(call.id)
            terminal = request.denial_is_terminal if request else tool.denial_is_terminal
            plans[call.index] = Settle(denied(call, decision, terminal, runner.io.redact_text))
    return plans


def denied(
    call: PlannedCall, decision: ApprovalDecision, terminal: bool, redact: Callable[[str], str]
) -> ToolRejected:
    """The rejection of a call whose approval was denied (``terminal``: the denial ends the run)."""
    reason = redact(f"approval denied: {decision.reason or 'no reason given'}")
    return ToolRejected(call.id, call.name, reason, terminal)


def unknown_for_prepared(replay: BatchReplay, early: list[EarlyOutcome]) -> list[EarlyOutcome]:
    """``early`` with a prepared call that cannot be planned now — its tool is gone, or its
    recorded arguments no longer decode — settled as may have run, not as invalid input."""
    return [
        EarlyOutcome(
            e.index, ToolUnknownOutcome(e.outcome.tool_call_id, e.outcome.tool_name, MAY_HAVE_RUN)
        )
        if e.outcome.tool_call_id in replay.prepared
        else e
        for e in early
    ]


def _needs_approval(runner: CallRunner, call: PlannedCall) -> bool:
    """Whether the call's approval rule asks for one (a rule that fails: it does, fail closed)."""
    tool = call.tool
    if not tool.may_need_approval:
        return False
    io = runner.io
    context = ToolCallContext(
        call.id, call.name, io.run_id, io.conversation_id, io.agent_name, author=io.author
    )
    try:
        return tool.requires_approval(call.params, context)
    except Exception:
        return True


async def reconcile_call(
    runner: CallRunner, call: PlannedCall, context: ToolCallContext
) -> ToolOutcome | None:
    """Ask the reconcile function bound with the call's tool whether the call took effect: its
    outcome — success with the reconciled value, or unknown — or None when it did not take
    effect (the call is then run). A function that fails, or answers something else, leaves
    the outcome unknown (its error goes to the run's log only).

    Cancellation: as the reconcile function's own; a ``trio.Cancelled`` is never taken for a
    failure.
    """
    reconcile = runner.services.reconcilers[call.tool]
    event = "reconcile function failed"
    try:
        found: object = await reconcile(call.params, context)
    except Exception as exc:
        runner.log_crash(event, call.id, exc)
        return ToolUnknownOutcome(call.id, call.name, _RECONCILE_FAILED)
    except BaseExceptionGroup as group:
        raise runner.propagated(group, event, call.id) from None
    if not isinstance(found, Reconciled):
        answer = f"the reconcile function answered with {type(found).__name__}, not Reconciled"
        runner.log_crash(event, call.id, TypeError(answer))
        return ToolUnknownOutcome(call.id, call.name, _RECONCILE_FAILED)
    outcome: ToolOutcome | None
    if found.kind == "done":
        outcome = runner.settle(call.tool, call, Success(_value(found)))
    elif found.kind == "unknown":
        outcome = ToolUnknownOutcome(call.id, call.name, runner.io.redact_text(found.reason))
    else:
        outcome = None
    runner.io.logs.info(
        "tool call reconciled", tool=call.name, tool_call_id=call.id, found=found.kind
    )
    if isinstance(outcome, ToolDefect):
        runner.io.logs.warning("reconciled result refused", tool_call_id=call.id)
    return outcome


def _value(found: Reconciled[Any]) -> Any:
    return found.value
