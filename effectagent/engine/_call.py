"""Phase 2 of a tool batch for one call — spec §2 steps 4 to 8: authorize, approve, take a permit,
run the handler in a scope of its own, encode, redact and bound.

The handler runs through :func:`~effectagent.effect.attempt` with the tool's declared failures, so
its outcome follows the effect core's one rule: every leaf of what it raised declared — also when
the handler's own nursery raised a group — is a ``ToolFailure``; anything else undeclared is a
``ToolDefect`` that names what was raised; a cancellation propagates untouched. A tool's
``timeout`` is the deadline of the scope the handler runs in (a tool without one runs in no scope:
entering and leaving a Trio cancel scope costs more than a whole call of a handler that never
waits).
"""

from __future__ import annotations

import time
from typing import Any, final

import attrs
import trio

from effectagent.ai import (
    Handler,
    OutcomeUnknown,
    OutputSchemaViolation,
    Tool,
    ToolCallContext,
    encode_failure,
    handler_result,
)
from effectagent.core import (
    AgentPolicy,
    ApprovalDecision,
    ApprovalRequest,
    ApprovalRequested,
    Risk,
    ToolApprovalDecided,
    ToolApprovalRequested,
    ToolCallStarted,
    ToolDefect,
    ToolFailure,
    ToolOutcome,
    ToolRejected,
    ToolResultBounds,
    ToolSuccess,
    ToolUnknownOutcome,
    bounded_json,
)
from effectagent.effect import Cause, Exit, Failure, Success, TaggedError, attempt

from ._batch_plan import PlannedCall
from ._broker import CallBroker
from ._host import BatchScope, CallHost
from ._permits import Permit
from ._replay import CallPlan, Gated, Reconcile, Rerun, Settle, denied, reconcile_call
from ._resume import BatchReplay
from ._seams import Approval, ApprovalError, ApprovalSuspended, AuthorizationDecision

__all__ = ["CallRunner"]

_PREVIEW_BOUNDS = ToolResultBounds(max_bytes=2048)
# What the model reads when a seam crashed: neutral, the details are in the run's log.
_APPROVAL_FAILED = "the approval service failed; the call was not run"
_AUTHORIZATION_FAILED = "not authorized: the authorization service failed; the call was not run"
_CANNOT_SUSPEND = (
    "the approval service answered that the decision comes later, and this run cannot wait for "
    "it (a subagent's, or the service does not say it suspends); the call was not run"
)


@final
class CallRunner:
    """Runs the calls of one batch: what they share (the batch's scope, the policy, the permit
    the batch's calls borrow first)."""

    __slots__ = (
        "audits",
        "digest",
        "io",
        "lender",
        "plans",
        "policy",
        "replay",
        "scope",
        "services",
        "turn",
    )

    def __init__(
        self,
        *,
        scope: BatchScope,
        policy: AgentPolicy,
        lender: Permit | None,
        audits: list[dict[str, Any] | None],
        replay: BatchReplay | None = None,
    ) -> None:
        self.scope = scope
        # The batch's audit metadata, by declaration index: each call writes its own slot, also
        # when it is interrupted (what its inner calls and child runs did is still true).
        self.audits = audits
        self.io = scope.io
        self.services = scope.services
        self.turn = scope.turn
        self.digest = scope.services.digest_arguments
        self.policy = policy
        # A child run's calls borrow the permit of the call that started the child first.
        self.lender = lender
        # What the log says of a resumed batch (its approvals asked and decided), and what was
        # decided for some calls before any ran (a resumed batch's, a suspending approver's).
        self.replay = replay
        self.plans: dict[int, CallPlan] | None = None

    def _context(self, call: PlannedCall, host: CallHost) -> ToolCallContext:
        io = self.io
        return ToolCallContext(
            call.id,
            call.name,
            io.run_id,
            io.conversation_id,
            io.agent_name,
            host.report,
            io.author,
            None,
            host,
            self.services.steps,
        )

    async def gate(self, calls: list[PlannedCall]) -> tuple[tuple[str, ...], str]:
        """Before any call of the batch runs, authorize the calls that may need approval and
        ask for their approval, in declaration order, with an approver that may suspend; return
        the calls whose approval was suspended (none: every call may run as decided) and why.
        What was decided becomes each call's plan.

        Cancellation: as the authorizer's and the approver's.
        """
        plans = self.plans if self.plans is not None else {}
        self.plans = plans
        suspended: list[str] = []
        reason = ""
        authorization = self.services.authorization
        for call in calls:
            if call.index in plans or not call.tool.may_need_approval:
                continue
            context = self._context(call, CallHost(self.scope, call.id, call.name))
            if authorization is not None:
                rejected = await self._authorize(call, context)
                if rejected is not None:
                    plans[call.index] = Settle(rejected)
                    continue
            answer = await self._approval(call, context, may_suspend=True)
            if isinstance(answer, ApprovalSuspended):
                suspended.append(call.id)
                reason = reason or self.io.redact_text(answer.reason)
            else:
                plans[call.index] = Gated() if answer is None else Settle(answer)
        return tuple(suspended), reason

    async def run(self, call: PlannedCall) -> ToolOutcome | None:
        """The call's outcome, or None if the batch is interrupted meanwhile; its audit metadata
        (what its inner calls and child runs noted) goes to its slot of the batch's audits, on
        every exit. An engine-side error while serving the call is the call's ``ToolDefect``.
        Raises only ``KeyboardInterrupt``/``SystemExit``.

        Cancellation: a cancellation point before the permit is taken; then as the handler's own.
        An interruption of the batch ends the call quietly — the ``Cancelled`` (alone or inside
        a group) is absorbed and None returned; the batch's scope stays cancelled, and the batch
        surfaces it and settles the call as interrupted. The permit is given back on every exit.
        """
        try:
            io = self.io
            tool = call.tool
            host = CallHost(self.scope, call.id, call.name)
            context = self._context(call, host)
            broker = None
            if tool.inner_tools:
                broker = CallBroker(io, self.services, context, tool.inner_tools, host)
                context = attrs.evolve(context, broker=broker)
            services = self.services
            plans = self.plans
            plan = None if plans is None else plans.get(call.index)
            if plan is None:
                if services.authorization is not None:
                    rejected = await self._authorize(call, context)
                    if rejected is not None:
                        return rejected
                if tool.may_need_approval:
                    answer = await self._approval(call, context, may_suspend=False)
                    if answer is not None:
                        assert isinstance(answer, ToolRejected)  # only a gate may suspend
                        return answer
            else:
                settled = await self._planned(plan, call, context)
                if settled is not None:
                    return settled

            handler = services.handlers[tool]
            pool = self.scope.pool
            lender = self.lender
            # Only the cancellation point when a permit is free, not a scheduler pass: a call that
            # never waits runs to its end in the batch's task — that is what makes such a call cheap
            # — and fairness to other tasks is kept by the turn loop's one scheduler pass per turn;
            # a call that has to wait for a permit yields in ``take``.
            await trio.lowlevel.checkpoint_if_cancelled()
            permit = pool.book.try_take(lender) or await pool.take(lender)
            host.permit = permit
            try:
                io.emit(ToolCallStarted, turn=self.turn, tool_call_id=call.id, tool_name=call.name)
                exit_: Exit[Any, TaggedError] | None
                if tool.timeout is None and services.listener is None:
                    # The common case, without a scope of any kind around the handler.
                    exit_ = await attempt(handler, call.params, context, errors=tool.failure)
                else:
                    exit_ = await self._attempt_in_scopes(tool, handler, call, context)
            finally:
                host.permit = None
                pool.give_back(permit)
                audit = host.notes
                if broker is not None and (inner := broker.audit()) is not None:
                    audit = {**inner, **audit} if audit else inner
                if audit is not None:
                    self.audits[call.index] = audit
            if exit_ is None:
                return ToolDefect(call.id, call.name, f"timed out after {tool.timeout} s")
            return self.settle(tool, call, exit_)
        except Exception as exc:  # an engine-side defect while serving this call
            return ToolDefect(
                call.id, call.name, self.io.redact_text(f"{type(exc).__name__}: {exc}")
            )
        except BaseException as exc:
            if isinstance(exc, trio.Cancelled) or _holds_cancelled(exc):
                return None
            raise

    async def _planned(
        self, plan: CallPlan, call: PlannedCall, context: ToolCallContext
    ) -> ToolOutcome | None:
        """What a call's plan settles it with, or None to run its handler.

        Cancellation: as the authorizer's and the reconcile function's.
        """
        if isinstance(plan, Settle):
            return plan.outcome
        if isinstance(plan, Gated):
            return None
        if isinstance(plan, Reconcile):
            found = await reconcile_call(self, call, context)
            if found is not None:
                return found
        elif not isinstance(plan, Rerun):  # pragma: no cover - every plan is one of four
            raise TypeError(f"unknown call plan {plan!r}")
        # Run (again): authorized as any call is; its approval was decided before.
        if self.services.authorization is not None:
            return await self._authorize(call, context)
        return None

    async def _attempt_in_scopes(
        self,
        tool: Tool[Any, Any],
        handler: Handler,
        call: PlannedCall,
        context: ToolCallContext,
    ) -> Exit[Any, TaggedError] | None:
        """The handler's exit under the tool's timeout (a scope with that deadline) and the run
        listener's call context; None if the timeout passed first.

        Cancellation: as the handler's; the timeout's own cancellation is caught here.
        """
        listener = self.services.listener
        scope = _NO_DEADLINE if tool.timeout is None else trio.move_on_after(tool.timeout)
        exit_: Exit[Any, TaggedError] | None = None
        with scope:
            if listener is None:
                exit_ = await attempt(handler, call.params, context, errors=tool.failure)
            else:
                with listener.call_context(self.io.run_id, call.id):
                    exit_ = await attempt(handler, call.params, context, errors=tool.failure)
        return None if scope.cancelled_caught else exit_

    def settle(
        self, tool: Tool[Any, Any], call: PlannedCall, exit_: Exit[Any, TaggedError]
    ) -> ToolOutcome:
        io = self.io
        if isinstance(exit_, Success):
            try:
                # A ``returns`` Result is opened here, after ``attempt``: its Failure raises, and
                # is reified by the same rule (declared → Fail, anything else → Die).
                value = handler_result(exit_.value)
                encoded = tool.encode_success(value)
            except OutputSchemaViolation as exc:
                return ToolDefect(call.id, call.name, io.redact_text(str(exc)))
            except Exception as exc:
                exit_ = Failure(Cause.from_exception(exc, tool.failure))
            else:
                bounded = bounded_json(io.redactor.redact(encoded), self.policy.tool_result_bounds)
                return ToolSuccess(call.id, call.name, bounded)
        cause = exit_.cause
        if not cause.is_failure_only:
            defects = cause.defects
            if len(defects) == 1 and not cause.failures and isinstance(defects[0], OutcomeUnknown):
                return ToolUnknownOutcome(call.id, call.name, io.redact_text(defects[0].reason))
            return ToolDefect(call.id, call.name, io.redact_text(describe_cause(cause)))
        try:
            envelope = _failure_envelope(cause.failures)
        except OutputSchemaViolation as exc:
            return ToolDefect(call.id, call.name, io.redact_text(str(exc)))
        bounded = bounded_json(io.redact(envelope), self.policy.tool_result_bounds)
        return ToolFailure(call.id, call.name, bounded)

    async def _authorize(self, call: PlannedCall, context: ToolCallContext) -> ToolRejected | None:
        """Ask the authorizer; None if the call may run. An authorizer that crashes refuses the
        call (fail closed): the model reads a neutral reason, the run's log what was raised.

        Cancellation: as the authorizer's; a ``trio.Cancelled`` (alone or in a group) is never
        taken for a crash and propagates.
        """
        io = self.io
        authorization = self.services.authorization
        assert authorization is not None
        try:
            # Typed as what it is: any object, until checked (a provider is anyone's code).
            decision: object = await authorization.authorize(call.tool, call.params, context)
        except Exception as exc:
            self.log_crash("authorization service failed", call.id, exc)
            return ToolRejected(call.id, call.name, _AUTHORIZATION_FAILED)
        except BaseExceptionGroup as group:
            raise self.propagated(group, "authorization service failed", call.id) from None
        if not isinstance(decision, AuthorizationDecision):
            answer = f"the authorizer answered with {type(decision).__name__}, not a decision"
            self.log_crash("authorization service failed", call.id, TypeError(answer))
            return ToolRejected(call.id, call.name, _AUTHORIZATION_FAILED)
        if decision.allowed:
            return None
        reason = io.redact_text(f"not authorized: {decision.reason or 'denied'}")
        return ToolRejected(call.id, call.name, reason)

    async def _ask(
        self, approval: Approval, request: ApprovalRequest, deadline: float, may_suspend: bool
    ) -> ApprovalDecision | ApprovalSuspended:
        """The provider's decision, or the denial that stands for its silence or failure — or,
        when ``may_suspend``, its answer that the decision comes later.

        Cancellation: the wait ends at ``deadline`` (a denial); the run's interruption, or a
        ``trio.Cancelled`` raised in a group, propagates.
        """
        failed = "approval service failed"
        try:
            with trio.move_on_at(deadline) as waited:
                # Typed as what it is: any object, until checked (a provider is anyone's code).
                decision: object = await approval.request(request)
        except ApprovalError as exc:  # the provider's own account, meant to be read
            return ApprovalDecision.deny(self.io.redact_text(exc.message), "approval-error")
        except Exception as exc:
            self.log_crash(failed, request.tool_call_id, exc)
            return ApprovalDecision.deny(_APPROVAL_FAILED, "approval-error")
        except BaseExceptionGroup as group:
            raise self.propagated(group, failed, request.tool_call_id) from None
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
            self.log_crash(failed, request.tool_call_id, TypeError(answer))
            return ApprovalDecision.deny(_APPROVAL_FAILED, "approval-error")
        return decision

    def log_crash(self, event: str, call_id: str, exc: BaseException) -> None:
        """What a crashed seam raised, for the run's log (its type and redacted message) — never
        for the model, an event or a record."""
        io = self.io
        leaves = exc.exceptions if isinstance(exc, BaseExceptionGroup) else (exc,)
        detail = "; ".join(f"{type(leaf).__name__}: {leaf}" for leaf in leaves)
        io.logs.warning(
            event, tool_call_id=call_id, error=type(exc).__name__, detail=io.redact_text(detail)
        )

    def propagated(self, group: BaseExceptionGroup, event: str, call_id: str) -> BaseException:
        """A group a seam raised that holds more than exceptions (a cancellation, an interrupt):
        what must propagate — the group without its exceptions, which are logged."""
        crashed, rest = group.split(Exception)
        if crashed is not None:
            self.log_crash(event, call_id, crashed)
        assert rest is not None  # a group of exceptions alone is an ``Exception``
        return rest

    async def _approval(
        self, call: PlannedCall, context: ToolCallContext, *, may_suspend: bool
    ) -> ToolRejected | ApprovalSuspended | None:
        """Ask for approval if the tool's rule says so for these parameters (or a resumed
        batch's log holds a request for the call); None if approved — or, when
        ``may_suspend``, the approver's answer that the decision comes later."""
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
        targets = () if tool.targets is None else tuple(tool.targets(call.params))
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
        decision that reaches the engine later is refused. A provider that fails — an
        ``ApprovalError``, or anything else it raises — is a recorded denial (fail closed); the
        model reads an ``ApprovalError``'s message, or a neutral sentence for a crash, whose
        type and message go to the run's log only.

        A resumed batch: a request the log holds (``recorded``) is not recorded again, and a
        decision it holds (``known``) is taken without asking anyone — if it is bound to this
        call; one that is not is refused, as a recorded denial. With ``may_suspend``, the
        service may answer that the decision comes later: nothing more is recorded then.

        Cancellation: as the records' appends and the service's wait; an interruption after the
        request was recorded leaves it without a decision (the run ends interrupted). A
        ``trio.Cancelled`` the provider raises (alone or in a group) is never taken for a crash.
        """
        io = self.io
        deadline = request.deadline
        assert deadline is not None  # ``_request`` or ``_rearmed`` made it in this runtime
        if not recorded:
            await io.record(
                ToolApprovalRequested(
                    conversation_id=io.conversation_id,
                    run_id=io.run_id,
                    request=request,
                    at=time.time(),
                )
            )
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
            if approval is None:  # preflight forbids this; fail closed if it happens anyway
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
            if refused is None and decision.approved and trio.current_time() > deadline:
                refused = "the decision came after the request expired"
        if refused is not None:
            io.logs.warning(
                "approval decision refused", tool_call_id=request.tool_call_id, why=refused
            )
            decision = ApprovalDecision.deny(f"refused: {refused}", "engine")
        decided = ApprovalDecision.for_request(
            request, decision.approved, io.redact_text(decision.reason), decision.decided_by
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


@final
class _NoDeadline:
    """The scope of a handler without a timeout (when a listener's call context is entered):
    like a cancel scope whose deadline never comes, without the cost of one."""

    __slots__ = ()

    cancelled_caught = False

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc_info: object) -> None:
        return None


_NO_DEADLINE = _NoDeadline()


def _failure_envelope(failures: tuple[BaseException, ...]) -> Any:
    """What the model sees of declared failures: one error's envelope, or all of them."""
    envelopes = [encode_failure(_tagged(error)) for error in failures]
    if len(envelopes) == 1:
        return envelopes[0]
    return {
        "_tag": "MultipleFailures",
        "message": f"the tool failed with {len(envelopes)} declared errors",
        "failures": envelopes,
    }


def _tagged(error: BaseException) -> TaggedError:
    assert isinstance(error, TaggedError)  # declared failures are TaggedError subclasses
    return error


def _holds_cancelled(exc: BaseException) -> bool:
    # A handler that runs its own nursery raises a *group* holding Cancelled when the run is
    # interrupted: that is an interruption to propagate, not a crash of the tool.
    return isinstance(exc, BaseExceptionGroup) and exc.subgroup(trio.Cancelled) is not None


def describe_cause(cause: Cause[Any]) -> str:
    """A defect's message: what was raised, declared errors named apart from the crashes."""
    defects = cause.defects
    if len(defects) == 1 and not cause.failures and isinstance(defects[0], OutputSchemaViolation):
        return str(defects[0])
    crashes = "; ".join(f"{type(d).__name__}: {d}" for d in defects)
    if not cause.failures:
        return f"the tool crashed ({crashes})"
    declared = "; ".join(f"{type(f).__name__}: {f}" for f in cause.failures)
    return f"the tool crashed ({crashes}) while also failing with declared errors ({declared})"


def _risk(tool: Tool[Any, Any]) -> Risk:
    annotations = tool.annotations
    if annotations.readonly:
        return "low"
    return "high" if annotations.destructive else "medium"
