"""Approval of a tool call (CAP-006): the request made and recorded, the provider asked under the
policy's timeout, its decision checked against the call and recorded — or, for a resumed batch,
the request and decision the log holds taken as they are; or, with a provider that may suspend,
its answer that the decision comes later."""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any, final

import attrs
import trio

from effectagent.ai import Tool, ToolCallContext
from effectagent.core import (
    AgentPolicy,
    ApprovalDecision,
    ApprovalRequest,
    ApprovalRequested,
    Risk,
    ToolApprovalDecided,
    ToolApprovalRequested,
    ToolRejected,
    ToolResultBounds,
    bounded_json,
)

from ._batch_plan import PlannedCall
from ._io import RunIO
from ._replay import denied
from ._resume import BatchReplay
from ._seams import Approval, ApprovalError, ApprovalSuspended
from ._services import RunServices

__all__ = ["Approvals", "log_crash", "propagated"]

_PREVIEW_BOUNDS = ToolResultBounds(max_bytes=2048)
# What the model reads when a seam crashed: neutral, the details are in the run's log.
_APPROVAL_FAILED = "the approval service failed; the call was not run"
_CANNOT_SUSPEND = (
    "the approval service answered that the decision comes later, and this run cannot wait for "
    "it (a subagent's, or the service does not say it suspends); the call was not run"
)


@final
class Approvals:
    """How the calls of one batch are approved: what they share (the run's output, the
    services, the policy, the batch's turn, and — for a resumed batch — what the log says)."""

    __slots__ = ("digest", "io", "policy", "replay", "services", "turn")

    def __init__(
        self,
        *,
        io: RunIO,
        services: RunServices,
        policy: AgentPolicy,
        turn: int,
        replay: BatchReplay | None,
    ) -> None:
        self.io = io
        self.services = services
        self.policy = policy
        self.turn = turn
        self.replay = replay
        self.digest = services.digest_arguments

    async def approval(
        self, call: PlannedCall, context: ToolCallContext, *, may_suspend: bool
    ) -> ToolRejected | ApprovalSuspended | None:
        """Ask for approval if the tool's rule says so for these parameters (or a resumed
        batch's log holds a request for the call); None if approved — or, when
        ``may_suspend``, the approver's answer that the decision comes later.

        Cancellation: as :meth:`_decide`'s (the records' appends and the service's wait)."""
        io = self.io
        tool = call.tool
        replay = self.replay
        recorded = None if replay is None else replay.requests.get(call.id)
        try:
            if recorded is not None:
                request: ApprovalRequest | None = self._rearmed(recorded, tool)
            else:
                needed = tool.requires_approval(call.params, context)
                request = self._request(call) if needed else None
        except Exception as exc:  # the tool's own rule, targets or summary crashed: fail closed
            reason = io.redact_text(f"approval policy failed: {type(exc).__name__}: {exc}")
            return ToolRejected(call.id, call.name, reason)
        if request is None:
            return None
        known = None if replay is None else replay.decisions.get(call.id)
        decision = await self._decide(
            request, recorded=recorded is not None, known=known, may_suspend=may_suspend
        )
        if isinstance(decision, ApprovalSuspended):
            return decision
        if decision.approved:
            return None
        return denied(call, decision, request.denial_is_terminal, io.redact_text)

    def _request(self, call: PlannedCall) -> ApprovalRequest:
        io = self.io
        tool = call.tool
        preview = bounded_json(call.arguments, _PREVIEW_BOUNDS)
        if tool.summarize is not None:
            summary = tool.summarize(call.params)
        else:
            summary = f"{tool.annotations.title or call.name}: {tool.description}"
        targets = () if tool.targets is None else _targets(tool.targets(call.params), call.name)
        return ApprovalRequest(
            run_id=io.run_id,
            conversation_id=io.conversation_id,
            agent=io.agent_name,
            tool_name=call.name,
            tool_call_id=call.id,
            summary=io.redact_text(str(summary)),
            targets=tuple(io.redact_text(str(target)) for target in targets),
            risk=_risk(tool),
            input_preview=preview,
            expires_at=time.time() + self.policy.approval_timeout,  # for people to read
            denial_is_terminal=tool.denial_is_terminal,
            arguments_digest=self.digest(tool, call.params),
        ).in_runtime(tool, trio.current_time() + self.policy.approval_timeout)

    def _rearmed(self, recorded: ApprovalRequest, tool: Tool[Any, Any]) -> ApprovalRequest:
        """A request the log holds, asked again by a resumed run: the recorded one (its
        arguments digest included, so a decision made for it from the log fits it), expiring
        ``approval_timeout`` from now."""
        timeout = self.policy.approval_timeout
        request = attrs.evolve(recorded, expires_at=time.time() + timeout)
        return request.in_runtime(tool, trio.current_time() + timeout)

    async def _decide(
        self,
        request: ApprovalRequest,
        *,
        recorded: bool = False,
        known: ApprovalDecision | None = None,
        may_suspend: bool = False,
    ) -> ApprovalDecision | ApprovalSuspended:
        """Record the request, ask the Approval service, record its decision (CAP-006).

        Expiry is judged on one clock, Trio's: the wait ends at ``request.deadline`` and a
        decision that reaches the engine then or later is refused. A provider that fails — an
        ``ApprovalError``, or anything else it raises — is a recorded denial (fail closed); the
        model reads an ``ApprovalError``'s message, or a neutral sentence for a crash, whose
        type and message go to the run's log only.

        A resumed batch: a request the log holds (``recorded``) is not recorded again, and a
        decision it holds (``known``) is taken without asking anyone — if it is bound to this
        call; one that is not is refused, as a recorded denial. With ``may_suspend``, the
        service may answer that the decision comes later: nothing more is recorded then; and
        the request is appended with what follows it (the decision made at once, in one append,
        or the suspension) rather than on its own first.

        Cancellation: as the records' appends and the service's wait; an interruption after the
        request was recorded leaves it without a decision (the run ends interrupted). A
        ``trio.Cancelled`` the provider raises (alone or in a group) is never taken for a crash.
        """
        io = self.io
        deadline = request.deadline
        assert deadline is not None  # ``_request`` or ``_rearmed`` made it in this runtime
        if not recorded:
            asked = ToolApprovalRequested(
                conversation_id=io.conversation_id,
                run_id=io.run_id,
                request=request,
                at=time.time(),
            )
            if may_suspend:
                # The service answers at once or suspends: the request goes in the append of
                # its decision, or of the suspension — never committed alone before either.
                io.record_later(asked)
            else:
                await io.record(asked)
        decision: ApprovalDecision
        if known is not None:
            refused = known.mismatch(request)
            if refused is None:
                io.logs.info(
                    "approval decision taken from the log",
                    tool=request.tool_name,
                    tool_call_id=request.tool_call_id,
                    approved=known.approved,
                    decided_by=known.decided_by,
                )
                return known
            decision = known
        else:
            io.emit(
                ApprovalRequested,
                turn=self.turn,
                tool_call_id=request.tool_call_id,
                tool_name=request.tool_name,
                request=request,
            )
            approval = self.services.approval
            # Preflight refuses an agent's own tools that may need approval without a service; a
            # tool source's tools come only at a turn's start: such a call is denied, never run.
            if approval is None:
                decision = ApprovalDecision.deny("no approval service", "engine")
            else:
                answer = await self._ask(approval, request, deadline, may_suspend)
                if isinstance(answer, ApprovalSuspended):
                    io.logs.info(
                        "approval suspended",
                        tool=request.tool_name,
                        tool_call_id=request.tool_call_id,
                    )
                    return answer
                decision = answer
            refused = decision.mismatch(request)
            # At ``deadline`` the engine has stopped waiting (``move_on_at`` fires then): a
            # decision that reaches it at that instant — from a provider that swallowed the
            # cancellation, or shielded itself from it — is as late as one after it.
            if refused is None and decision.approved and trio.current_time() >= deadline:
                refused = "the decision came after the request expired"
        if refused is not None:
            io.logs.warning(
                "approval decision refused", tool_call_id=request.tool_call_id, why=refused
            )
            decision = ApprovalDecision.deny(f"refused: {refused}", "engine")
        decided = ApprovalDecision.for_request(
            request,
            decision.approved,
            io.redact_text(decision.reason),
            io.redact_text(decision.decided_by),
        )
        await io.record(
            ToolApprovalDecided(
                conversation_id=io.conversation_id,
                run_id=io.run_id,
                tool_call_id=request.tool_call_id,
                decision=decided,
                at=time.time(),
            )
        )
        io.logs.info(
            "approval decided",
            tool=request.tool_name,
            tool_call_id=request.tool_call_id,
            approved=decided.approved,
            decided_by=decided.decided_by,
        )
        return decided

    async def _ask(
        self, approval: Approval, request: ApprovalRequest, deadline: float, may_suspend: bool
    ) -> ApprovalDecision | ApprovalSuspended:
        """The provider's decision, or the denial that stands for its silence or failure — or,
        when ``may_suspend``, its answer that the decision comes later.

        Cancellation: the wait ends at ``deadline`` (a denial by "timeout", also when the provider
        raises an ordinary exception as it is cancelled then); the run's interruption, or a
        ``trio.Cancelled`` raised in a group, propagates — an exception raised as the run is
        interrupted too.
        """
        failed = "approval service failed"
        try:
            with trio.move_on_at(deadline) as waited:
                # Typed as what it is: any object, until checked (a provider is anyone's code).
                decision: object = await approval.request(request)
        except ApprovalError as exc:  # the provider's own account, meant to be read
            return ApprovalDecision.deny(self.io.redact_text(exc.message), "approval-error")
        except Exception as exc:
            log_crash(self.io, failed, request.tool_call_id, exc)
            if waited.cancel_called:  # it raised as its wait ran out (a client's closed socket)
                return ApprovalDecision.deny("approval timed out", "timeout")
            # Raised as the run was interrupted: the interruption goes on, no decision is made.
            await trio.lowlevel.checkpoint_if_cancelled()
            return ApprovalDecision.deny(_APPROVAL_FAILED, "approval-error")
        except BaseExceptionGroup as group:
            raise propagated(self.io, group, failed, request.tool_call_id) from None
        if waited.cancelled_caught:
            return ApprovalDecision.deny("approval timed out", "timeout")
        if isinstance(decision, ApprovalSuspended):
            if may_suspend:
                return decision
            self.io.logs.warning(
                "approval suspended where the run cannot suspend",
                tool_call_id=request.tool_call_id,
            )
            return ApprovalDecision.deny(_CANNOT_SUSPEND, "engine")
        if not isinstance(decision, ApprovalDecision):
            answer = f"the provider answered with {type(decision).__name__}, not a decision"
            log_crash(self.io, failed, request.tool_call_id, TypeError(answer))
            return ApprovalDecision.deny(_APPROVAL_FAILED, "approval-error")
        return decision


def log_crash(io: RunIO, event: str, call_id: str, exc: BaseException) -> None:
    """What a crashed seam raised, for the run's log (its type and redacted message) — never for
    the model, an event or a record."""
    leaves = exc.exceptions if isinstance(exc, BaseExceptionGroup) else (exc,)
    detail = "; ".join(f"{type(leaf).__name__}: {leaf}" for leaf in leaves)
    io.logs.warning(
        event, tool_call_id=call_id, error=type(exc).__name__, detail=io.redact_text(detail)
    )


def propagated(io: RunIO, group: BaseExceptionGroup, event: str, call_id: str) -> BaseException:
    """A group a seam raised that holds more than exceptions (a cancellation, an interrupt): what
    must propagate — the group without its exceptions, which are logged."""
    crashed, rest = group.split(Exception)
    if crashed is not None:
        log_crash(io, event, call_id, crashed)
    assert rest is not None  # a group of exceptions alone is an ``Exception``
    return rest


def _risk(tool: Tool[Any, Any]) -> Risk:
    annotations = tool.annotations
    if annotations.readonly:
        return "low"
    return "high" if annotations.destructive else "medium"


def _targets(given: Iterable[object], tool: str) -> tuple[object, ...]:
    """What a tool's ``targets(params)`` gave, as a tuple — a lone string is refused (taken as
    a sequence, it would be its letters, which no rule about the real target matches)."""
    if isinstance(given, (str, bytes)):
        raise TypeError(
            f"targets(params) of tool {tool!r} returned one {type(given).__name__}; it must "
            'return the targets as a list, e.g. ["file:/tmp/a"]'
        )
    return tuple(given)
