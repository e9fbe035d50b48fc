"""Phase 2 of a tool batch for one call: authorize, approve, take a permit,
run the handler in a scope of its own, encode, redact and bound. (Approval is ``_approve``'s.)

The handler's outcome follows the effect core's one rule (:func:`~effectagent.effect.attempt`'s,
with the tool's declared failures): every leaf of what it raised declared — also when the handler's
own nursery raised a group — is a ``ToolFailure``; anything else undeclared is a ``ToolDefect``
that names what was raised; a cancellation (and ``KeyboardInterrupt``, ``SystemExit``,
``GeneratorExit``) propagates untouched. In the common case the handler is awaited by
:meth:`CallRunner.run` itself, which applies that rule (``effect.propagates``) — no ``attempt``
coroutine between them: a call parked in its handler keeps one frame less (many runs may be parked
at once). A tool's ``timeout`` is the deadline of the scope the handler runs in (a tool without one
runs in no scope: entering and leaving a Trio cancel scope costs more than a whole call of a
handler that never waits).
"""

from __future__ import annotations

import math
from typing import Any, final

import attrs
import trio
from trio import current_effective_deadline

from effectagent.ai import (
    Handler,
    MediaPart,
    OutcomeUnknown,
    OutputSchemaViolation,
    Tool,
    ToolBroker,
    ToolCallContext,
    encode_failure,
    handler_result,
)
from effectagent.core import (
    AgentPolicy,
    ToolCallStarted,
    ToolDefect,
    ToolFailure,
    ToolOutcome,
    ToolRejected,
    ToolSuccess,
    ToolUnknownOutcome,
    bounded_json,
)
from effectagent.effect import Cause, Exit, Failure, Success, TaggedError, attempt, propagates

from ._approve import Approvals, log_crash, propagated
from ._batch_plan import PlannedCall
from ._broker import CallBroker
from ._host import BatchScope, CallHost
from ._media import redacted_content, reference_of
from ._permits import Permit
from ._replay import CallPlan, Gated, Reconcile, Rerun, Settle, reconcile_call
from ._resume import BatchReplay
from ._seams import ApprovalSuspended, AuthorizationDecision

__all__ = ["CallRunner"]

# What the model reads when a seam crashed: neutral, the details are in the run's log.
_AUTHORIZATION_FAILED = "not authorized: the authorization service failed; the call was not run"


@final
class CallRunner:
    """Runs the calls of one batch: what they share (the batch's scope, the policy, the permit
    the batch's calls borrow first)."""

    __slots__ = (
        "_approvals",
        "audits",
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
        replay: BatchReplay | None = None,
    ) -> None:
        self.scope = scope
        # The batch's audit metadata, by declaration index: each call writes its own entry, also
        # when it is interrupted (what its inner calls and child runs did is still true). Made
        # by the first call that has any (most batches have none).
        self.audits: dict[int, dict[str, Any]] | None = None
        self.io = scope.io
        self.services = scope.services
        self.turn = scope.turn
        self.policy = policy
        # A child run's calls borrow the permit of the call that started the child first.
        self.lender = lender
        # What the log says of a resumed batch (its approvals asked and decided), and what was
        # decided for some calls before any ran (a resumed batch's, a suspending approver's).
        self.replay = replay
        self.plans: dict[int, CallPlan] | None = None
        self._approvals: Approvals | None = None  # made by the first call that asks

    @property
    def approvals(self) -> Approvals:
        """How the batch's calls are approved (made when a call first needs it: most batches
        never do)."""
        approvals = self._approvals
        if approvals is None:
            scope = self.scope
            approvals = self._approvals = Approvals(
                io=scope.io,
                services=scope.services,
                policy=self.policy,
                turn=scope.turn,
                replay=self.replay,
            )
        return approvals

    def _context(self, call: PlannedCall, host: CallHost) -> ToolCallContext:
        """The call's context; for a tool that declares inner tools, with the broker that calls
        them."""
        io = self.io
        context = ToolCallContext(
            call.id,
            call.name,
            io.run_id,
            io.conversation_id,
            io.agent_name,
            host,  # the call's progress reporter (a CallHost is one)
            io.author,
            None,
            host,
            self.services.steps,
        )
        inner = call.tool.inner_tools
        if inner:
            broker = CallBroker(io, self.services, context, inner, host)
            context = attrs.evolve(context, broker=broker)
        return context

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
            answer = await self.approvals.approval(call, context, may_suspend=True)
            if isinstance(answer, ApprovalSuspended):
                suspended.append(call.id)
                reason = reason or self.io.redact_text(answer.reason)
            else:
                plans[call.index] = Gated() if answer is None else Settle(answer)
        return tuple(suspended), reason

    async def run(self, call: PlannedCall) -> ToolOutcome | None:
        """The call's outcome, or None if the batch is interrupted meanwhile; its audit metadata
        (what its inner calls and child runs noted) goes to its entry of the batch's audits, on
        every exit. An engine-side error while serving the call is the call's ``ToolDefect``.
        Raises only ``KeyboardInterrupt``/``SystemExit``.

        Cancellation: a cancellation point before the permit is taken; then as the handler's own.
        An interruption of the batch ends the call quietly — the ``Cancelled`` (alone or inside
        a group) is absorbed and None returned; the batch's scope stays cancelled, and the batch
        surfaces it and settles the call as interrupted. The permit is given back on every exit.
        """
        # What runs in this frame is what stays while the handler waits (possibly many runs
        # parked at once): its locals are few.
        try:
            tool = call.tool
            host = CallHost(self.scope, call.id, call.name)
            context = self._context(call, host)
            if (
                self.plans is not None
                or self.services.authorization is not None
                or tool.may_need_approval
            ):
                settled = await self._admit(call, context)
                if settled is not None:
                    return settled

            handler = self.services.handlers[tool]
            # Only the cancellation point when a permit is free, not a scheduler pass: a call that
            # never waits runs to its end in the batch's task — that is what makes such a call cheap
            # — and fairness to other tasks is kept by the turn loop's one scheduler pass per turn;
            # a call that has to wait for a permit yields in ``take``.
            await trio.lowlevel.checkpoint_if_cancelled()
            permit = self.scope.pool.book.try_take(self.lender)
            if permit is None:
                permit = await self.scope.pool.take(self.lender)
                if current_effective_deadline() == -math.inf:
                    # The permit came as the batch was interrupted (both in one instant): the
                    # call never starts — else a handler that fails at once would have its real
                    # outcome taken for the interruption's (see below).
                    self.scope.pool.give_back(permit)
                    return None
            host.permit = permit
            try:
                self.io.emit(
                    ToolCallStarted, turn=self.turn, tool_call_id=call.id, tool_name=call.name
                )
                exit_: Exit[Any, TaggedError] | None
                if tool.timeout is None and self.services.listener is None:
                    # The common case, without a scope of any kind around the handler, awaited
                    # here: ``attempt``'s rule, without its coroutine (see the module notes).
                    try:
                        exit_ = Success(await handler(call.params, context))
                    except BaseException as exc:
                        if propagates(exc):
                            raise
                        exit_ = Failure(Cause.from_exception(exc, tool.failure))
                else:
                    exit_ = await self._attempt_in_scopes(tool, handler, call, context)
            finally:
                host.permit = None
                self.scope.pool.give_back(permit)
                self._keep_audit(call, host, context.broker)
            if exit_ is None:
                return ToolDefect(call.id, call.name, f"timed out after {tool.timeout} s")
            if not isinstance(exit_, Success) and current_effective_deadline() == -math.inf:
                # The batch is interrupted and the handler failed as it was cancelled (a client
                # reporting its closed connection): the call was interrupted, not a crash.
                return None
            settled = self.settle(tool, call, exit_)
            # A failure's traceback holds this frame: without the exit in it, no reference cycle
            # keeps the failure (and what it holds) alive until the garbage collector runs.
            exit_ = None
            return settled
        except Exception as exc:  # an engine-side defect while serving this call
            return self._defect(call, exc)
        except BaseException as exc:
            if isinstance(exc, trio.Cancelled) or _holds_cancelled(exc):
                return None
            raise

    def _keep_audit(self, call: PlannedCall, host: CallHost, broker: ToolBroker | None) -> None:
        """Keep what the call noted (and its inner calls did, through ``broker``) as its audit
        metadata, if any."""
        audit = host.notes
        if isinstance(broker, CallBroker) and (inner := broker.audit()) is not None:
            audit = {**inner, **audit} if audit else inner
        if audit is not None:
            audits = self.audits
            if audits is None:
                audits = self.audits = {}
            audits[call.index] = audit

    def _defect(self, call: PlannedCall, exc: Exception) -> ToolDefect:
        """The call's outcome when serving it failed on the engine's side."""
        return ToolDefect(call.id, call.name, self.io.redact_text(f"{type(exc).__name__}: {exc}"))

    async def _admit(self, call: PlannedCall, context: ToolCallContext) -> ToolOutcome | None:
        """Before the handler runs: what the call's plan (a resumed batch's, a suspending
        approver's), the authorizer or the approval settles it with; None to run the handler.
        (Its own coroutine, so none of this stays in ``run``'s frame while the handler waits.)

        Cancellation: as the authorizer's, the approver's and the reconcile function's.
        """
        plans = self.plans
        plan = None if plans is None else plans.get(call.index)
        if plan is not None:
            return await self._planned(plan, call, context)
        if self.services.authorization is not None:
            rejected = await self._authorize(call, context)
            if rejected is not None:
                return rejected
        if call.tool.may_need_approval:
            answer = await self.approvals.approval(call, context, may_suspend=False)
            if answer is not None:
                assert isinstance(answer, ToolRejected)  # only a gate may suspend
                return answer
        return None

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
                media: tuple[MediaPart, ...] = ()
                if tool.returns_media:  # each part stands in the result as its description
                    value, media = tool.split_media(value)
                encoded = tool.encode_success(value)
            except OutputSchemaViolation as exc:
                return ToolDefect(call.id, call.name, io.redact_text(str(exc)))
            except Exception as exc:
                exit_ = Failure(Cause.from_exception(exc, tool.failure))
            else:
                bounded = bounded_json(io.redactor.redact(encoded), self.policy.tool_result_bounds)
                if not media:
                    return ToolSuccess(call.id, call.name, bounded)
                redacted = redacted_content(media, io.redactor.redact_text)  # text documents
                media = tuple(p for p in redacted if isinstance(p, MediaPart))
                io.keep_media({p.digest: p.data for p in media if not p.url})
                refs = tuple(reference_of(p, io.redact_text) for p in media)
                return ToolSuccess(call.id, call.name, bounded, media=refs)
        cause = exit_.cause
        if not cause.is_failure_only:
            defects = cause.defects
            unknown = [d for d in defects if isinstance(d, OutcomeUnknown)]
            if unknown:  # it may have taken effect, whatever else went wrong beside it
                return ToolUnknownOutcome(
                    call.id, call.name, io.redact_text(_unknown(unknown, cause))
                )
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

    def log_crash(self, event: str, call_id: str, exc: BaseException) -> None:
        """What a crashed seam raised, for the run's log only (see ``_approve.log_crash``)."""
        log_crash(self.io, event, call_id, exc)

    def propagated(self, group: BaseExceptionGroup, event: str, call_id: str) -> BaseException:
        """What must propagate of a group a seam raised (see ``_approve.propagated``)."""
        return propagated(self.io, group, event, call_id)


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


def _unknown(unknown: list[OutcomeUnknown], cause: Cause[Any]) -> str:
    """The reason of a call whose handler raised ``OutcomeUnknown`` (``unknown``, perhaps
    several, perhaps beside other errors of ``cause``): their reasons, and what else was raised
    — the call may have taken effect however it ended, so it is an unknown outcome, never a
    defect the model would take for "nothing happened"."""
    reason = "; ".join(u.reason for u in unknown)
    others = [d for d in cause.defects if not isinstance(d, OutcomeUnknown)]
    others += list(cause.failures)
    if not others:
        return reason
    raised = "; ".join(f"{type(e).__name__}: {e}" for e in others)
    return f"{reason} (it also raised {raised})"


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
