"""Phases 2 and 3 of a tool batch: run every runnable call, then commit the whole batch.

Phase 1 (``_batch_plan``) decided which calls run. Here: the ``ToolCallPrepared`` records of the
runnable calls are appended in one atomic append in declaration order; every call runs
(``_call``); then every ``ToolCallSettled`` is committed in declaration order in one append, and the
prompt gets the complete batch (RUN-005, CAP-005).

Calls run *eagerly*, the way asyncio's eager tasks do: a call starts in the batch's own task and
runs until it ends or has to wait; only a call that waits makes room for another task, which takes
the calls queued behind it (:class:`~effectagent.engine._scheduler.WorkerPool`). So calls still run
concurrently — a waiting call never holds up the ones after it, and calls that all wait get a task
each, all children of the batch's nursery — but a call that never waits (a cache hit, a pure
computation) costs no task at all, and a batch of one call needs no nursery. Each call runs in a
copy of its worker's ``contextvars`` context, exactly as a child task would
(:func:`~effectagent.engine._eager.in_context`): a context variable a handler sets never reaches
another call, the run or the caller. A call of a ``sequential`` tool runs alone: the calls before
it settle first, and those after it start once it has settled
(:func:`~effectagent.engine._scheduler.run_groups`).

Every call settles exactly once, and each settlement is announced (``ToolCallSucceeded`` /
``ToolCallFailed``) exactly once: a call as it settles; if the run is interrupted (or its deadline
passes) mid-batch, every call not settled yet settles as a ``ToolDefect`` ("interrupted"), the batch
is committed shielded, those settlements are announced after the commit, and the cancellation
propagates. So the events a consumer sees, ``RunResult.outcomes`` and the log's settlements always
agree. Calls are never interrupted one by one: the batch's scope is cancelled only as a whole, by
the run's own cancellation.
"""

from __future__ import annotations

import time
from contextvars import copy_context
from typing import Any, final

import trio

from effectagent.ai import AssistantMessage, Message, Toolkit, ToolMessage, ToolResultContent
from effectagent.core import (
    AgentPolicy,
    ToolCallDeclared,
    ToolCallFailed,
    ToolCallPrepared,
    ToolCallSettled,
    ToolCallSucceeded,
    ToolDefect,
    ToolOutcome,
    ToolRejected,
    ToolSuccess,
)

from ._batch_plan import BUDGET_SPENT, BatchPlan, EarlyOutcome, PlannedCall, run_error
from ._call import CallRunner
from ._eager import in_context
from ._host import BatchScope
from ._machine_values import BatchSettled, BatchSuspended
from ._media import settled_with_media
from ._permits import Permit
from ._replay import plan_resumed, unknown_for_prepared
from ._resume import BatchReplay
from ._scheduler import BatchLedger, WorkerPool, run_groups

__all__ = ["Batch"]

_INTERRUPTED = "interrupted before it settled"


@final
class Batch:
    """One tool batch of a turn. :meth:`run` it once; its commit is in :attr:`committed`."""

    __slots__ = (
        "_debug",
        "_ledger",
        "_may_suspend",
        "_plan",
        "_replay",
        "_runner",
        "admitted",
        "assistant",
        "committed",
        "io",
        "scope",
        "turn",
        "yielded",
    )

    def __init__(
        self,
        *,
        scope: BatchScope,
        policy: AgentPolicy,
        plan: BatchPlan,
        admitted: bool,
        assistant: AssistantMessage | None,
        lender: Permit | None,
        replay: BatchReplay | None = None,
        may_suspend: bool = False,
    ) -> None:
        io = self.io = scope.io
        self.turn = scope.turn
        self.scope = scope
        self._plan = plan
        # Whether the runnable calls run: all of them, or — over the tool-call budget — none.
        self.admitted = admitted
        self.assistant = assistant  # the response's message, added to the prompt with the batch
        self._ledger = BatchLedger([declared.id for declared in plan.declared])
        self._runner = CallRunner(scope=scope, policy=policy, lender=lender, replay=replay)
        # A resumed batch: what the log says of it. And whether an approval may be suspended
        # (then every approval is asked before any call runs).
        self._replay = replay
        self._may_suspend = may_suspend
        self._debug = io.logs.debugging  # a line per settled call, at debug level
        #: The prompt messages of the committed batch, once its settlements are appended — also
        #: when :meth:`run` then raises (an interrupted batch is still committed).
        self.committed: tuple[Message, ...] | None = None
        #: Whether the batch yielded to the scheduler (a group of calls left a nursery).
        self.yielded = False

    async def run(self, toolkit: Toolkit) -> BatchSettled | BatchSuspended:
        """Run and commit the batch; return what it changed, as the run's state machine takes
        it: its outcomes in declaration order, the messages the prompt gets, the error that ends
        the run (if any) and what its calls took beyond themselves (inner calls, child runs).

        A resumed batch (``replay``) prepares only the calls the log does not hold prepared, and
        plans each of those it does (see ``_replay``). With an approver that may suspend, every
        call that may need approval is authorized and asked first; if one is suspended, no call
        runs, nothing settles, and the result is :class:`BatchSuspended` (which calls, and why).

        Cancellation: if the run is interrupted (or its deadline passes) after the calls were
        prepared, the batch is still committed — every call not settled yet as interrupted —
        shielded, and the cancellation propagates; :attr:`committed` then holds the messages. If
        it is interrupted while the calls are being prepared, nothing of the batch is written.
        With an approver that may suspend, an interruption while the approvals are asked (before
        any call is prepared) still commits the batch: every call not settled yet settles as
        interrupted, none of them prepared.
        """
        # What runs in this frame is what stays while a call waits (possibly many runs parked at
        # once): the rare paths — a resumed batch, approvals that may suspend, sequential tools,
        # an interruption — are helpers of their own, and a batch of one call runs right here.
        early, runnable, to_prepare, gating = self._start()
        if to_prepare and not gating:
            await self._prepare(to_prepare)
        for settled in early:
            self._ledger.settle(settled.index, settled.outcome)
        yielded = False
        try:
            if gating:
                suspended = await self._gate(runnable, to_prepare)
                if suspended is not None:
                    return suspended
            # Announced inside the try: once ToolCallPrepared is appended, an interruption at any
            # checkpoint must still commit the batch (every prepared call gets its settlement).
            for settled in early:
                self._announce(settled.outcome)
            if len(runnable) == 1:
                # One call (sequential or not): nothing could run beside it, so it needs no task
                # and no nursery; it runs in this task, in a copy of its context.
                self._settled(
                    runnable[0], await in_context(self._runner.run(runnable[0]), copy_context())
                )
            elif any(c.tool.sequential for c in runnable):
                yielded = await self._run_groups(runnable)
            elif runnable:
                yielded = await self._run_group(runnable)
            if not self._ledger.complete:
                # Each call absorbs its own Cancelled, so an interrupted batch can get here
                # without raising: surface the cancellation now, so the rest settle as interrupted.
                await trio.lowlevel.checkpoint()
            self.yielded = yielded
            # Unshielded: the log's append is all-or-nothing, so if it is cancelled nothing was
            # written, and the handler below commits the (complete) batch shielded instead.
            return self._settled_batch(await self._commit(), toolkit)
        except BaseException:
            if self.committed is None:
                with trio.CancelScope(shield=True):
                    await self._commit_interrupted()
            raise

    def _settled_batch(self, outcomes: list[ToolOutcome], toolkit: Toolkit) -> BatchSettled:
        """What the committed batch changed, for the run's state machine."""
        assert self.committed is not None
        return BatchSettled(
            tuple(outcomes),
            self.committed,
            run_error(outcomes, toolkit),
            self.scope.delegated(),
            trio.current_time(),
        )

    def _start(self) -> tuple[list[EarlyOutcome], list[PlannedCall], list[PlannedCall], bool]:
        """Announce the declared calls; return the calls settled early (in declaration order),
        the calls that run, those of them to prepare, and whether approvals are asked first.

        Past the tool-call budget none of the calls runs (each is rejected early); a resumed
        batch plans its calls from the log (see ``_replay``) and prepares only those the log
        does not hold prepared.
        """
        io, turn, plan = self.io, self.turn, self._plan
        for declared in plan.declared:
            io.emit(
                ToolCallDeclared,
                turn=turn,
                tool_call_id=declared.id,
                tool_name=declared.name,
                arguments=declared.preview,
            )
        early = plan.early
        if self.admitted:
            runnable = plan.runnable
        else:  # past the tool-call budget: none of the calls runs
            runnable = []
            early = sorted(
                [
                    *early,
                    *(
                        EarlyOutcome(c.index, ToolRejected(c.id, c.name, BUDGET_SPENT))
                        for c in plan.runnable
                    ),
                ],
                key=_index,
            )
        to_prepare = runnable
        replay = self._replay
        runner = self._runner
        if replay is not None:
            early = unknown_for_prepared(replay, early)
            runner.plans = plan_resumed(runner, replay, runnable)
            prepared = replay.prepared
            to_prepare = [c for c in runnable if c.id not in prepared]
        # With an approver that may suspend, the calls are prepared once their approvals are in:
        # a suspended batch prepares nothing, so a call prepared is one about to run.
        gating = self._may_suspend and _may_need_approval(runnable, runner.plans)
        return early, runnable, to_prepare, gating

    async def _gate(
        self, runnable: list[PlannedCall], to_prepare: list[PlannedCall]
    ) -> BatchSuspended | None:
        """Ask every approval first (an approver that may suspend): the batch suspended (no call
        runs, nothing settles), or None once ``to_prepare`` is prepared and the calls may run as
        decided.

        Cancellation: as the authorizer's, the approver's and the log's append.
        """
        suspended, reason = await self._runner.gate(runnable)
        if suspended:
            return BatchSuspended(suspended, reason)
        if to_prepare:
            await self._prepare(to_prepare)
        return None

    async def _run_groups(self, runnable: list[PlannedCall]) -> bool:
        """Run a batch that holds a sequential call: group after group (see ``run_groups``), a
        sequential call alone, and no group after one an interruption cut short; True when a
        group left a nursery.

        Cancellation: as :meth:`_run_group`.
        """
        ledger = self._ledger
        yielded = False
        for group in run_groups([c.tool.sequential for c in runnable]):
            calls = runnable[group.start : group.stop]
            yielded |= await self._run_group(calls)
            if not all(ledger.is_settled(c.index) for c in calls):
                break
        return yielded

    async def _commit_interrupted(self) -> None:
        """The batch was interrupted before its commit: settle every call not settled yet as
        interrupted, commit, and announce those settlements. The caller shields it."""
        declared = self._plan.declared
        rest = self._ledger.settle_rest(
            lambda i: ToolDefect(declared[i].id, declared[i].name, _INTERRUPTED)
        )
        outcomes = await self._commit()
        for i in rest:
            self._announce(outcomes[i])

    async def _run_group(self, calls: list[PlannedCall]) -> bool:
        """Run ``calls`` concurrently (eagerly, see the module notes) and settle each; True when
        that left a nursery (a schedule point).

        Cancellation: an interruption ends the calls quietly (see ``CallRunner.run``); those not
        settled are left for the batch to settle as interrupted.
        """
        if len(calls) == 1:
            # One call: nothing could run beside it, so it needs no task and no nursery.
            only = calls[0]
            self._settled(only, await in_context(self._runner.run(only), copy_context()))
            return False
        # A plain nursery: the workers need none of a Scope's bookkeeping (no finalizers, no
        # Exits; each call's outcome is reified by ``CallRunner.run``).
        async with trio.open_nursery() as nursery:
            await _Workers(self, calls, nursery).work()
        return True  # leaving a nursery is always a schedule point

    async def _prepare(self, calls: list[PlannedCall]) -> None:
        """Append the calls' ``ToolCallPrepared`` records, in declaration order, in one append.

        Cancellation: as ``ConversationLog.append`` (all or nothing)."""
        io, turn = self.io, self.turn
        now = time.time()
        conversation_id, run_id = io.conversation_id, io.run_id
        await io.record(
            *[
                ToolCallPrepared(
                    conversation_id=conversation_id,
                    run_id=run_id,
                    turn=turn,
                    tool_call_id=c.id,
                    tool_name=c.name,
                    arguments=c.arguments,
                    at=now,
                )
                for c in calls
            ]
        )

    async def _commit(self) -> list[ToolOutcome]:
        """Append the batch's settlements in declaration order; set :attr:`committed`.

        Everything that could fail is done before the append and nothing after it can, so a
        caller that sees this raise knows nothing was written. Cancellation: as
        ``ConversationLog.append``.
        """
        outcomes = self._ledger.commit()
        io, turn = self.io, self.turn
        if any(type(o) is ToolSuccess and o.media for o in outcomes):  # a tool returned media
            results = await settled_with_media(io, outcomes)
        else:
            results = ToolMessage(
                tuple(
                    [
                        ToolResultContent(
                            o.tool_call_id, o.tool_name, o.model_content(), o.is_failure
                        )
                        for o in outcomes
                    ]
                )
            )
        now = time.time()
        conversation_id, run_id = io.conversation_id, io.run_id
        audits = self._runner.audits  # the calls' audit metadata, by declaration index
        await io.record(
            *[
                ToolCallSettled(
                    conversation_id=conversation_id,
                    run_id=run_id,
                    turn=turn,
                    tool_call_id=o.tool_call_id,
                    tool_name=o.tool_name,
                    outcome=o,
                    at=now,
                    audit=None if audits is None else audits.get(i),
                )
                for i, o in enumerate(outcomes)
            ]
        )
        assistant = self.assistant
        self.committed = (results,) if assistant is None else (assistant, results)
        return outcomes

    def _announce(self, outcome: ToolOutcome) -> None:
        io = self.io
        if outcome.kind == "success":
            io.emit(
                ToolCallSucceeded,
                turn=self.turn,
                tool_call_id=outcome.tool_call_id,
                tool_name=outcome.tool_name,
                outcome=outcome,
            )
            if self._debug:
                io.logs.debug("tool call settled", tool=outcome.tool_name, kind="success")
            return
        io.emit(
            ToolCallFailed,
            turn=self.turn,
            tool_call_id=outcome.tool_call_id,
            tool_name=outcome.tool_name,
            outcome=outcome,
        )
        if isinstance(outcome, ToolDefect):
            io.logs.warning(
                "tool call failed with a defect",
                tool=outcome.tool_name,
                tool_call_id=outcome.tool_call_id,
                message=outcome.message,
            )
        elif self._debug:
            io.logs.debug("tool call settled", tool=outcome.tool_name, kind=outcome.kind)

    def _settled(self, call: PlannedCall, outcome: ToolOutcome | None) -> bool:
        """Settle and announce a call's outcome (True), or nothing if the batch was interrupted
        while it ran (False: the batch settles it as interrupted)."""
        if outcome is None:
            return False
        self._ledger.settle(call.index, outcome)
        self._announce(outcome)
        return True


def _index(item: EarlyOutcome) -> int:
    return item.index


def _may_need_approval(calls: list[PlannedCall], plans: dict[int, Any] | None) -> bool:
    """Whether a call among ``calls`` without a plan may need approval."""
    return any(c.tool.may_need_approval and (plans is None or c.index not in plans) for c in calls)


@final
class _Workers:
    """The calls of a batch of two or more, run eagerly (see the module notes).

    The batch's task works first (:meth:`work`); whenever a call is about to wait while calls are
    still queued, :class:`WorkerPool` asks for one more worker, a child task of the batch's
    nursery that works the same queue. Each call runs in a copy of its worker's context, so what
    one handler sets in a context variable never reaches another call, the run or the caller.
    """

    __slots__ = ("batch", "calls", "nursery", "pool")

    def __init__(self, batch: Batch, calls: list[PlannedCall], nursery: trio.Nursery) -> None:
        self.batch = batch
        self.calls = calls
        self.nursery = nursery
        self.pool = WorkerPool(len(calls))

    async def work(self) -> None:
        """Run queued calls, one after another, until none is left or the batch is interrupted.

        Cancellation: an interruption ends the current call quietly (see ``CallRunner.run``) and
        this worker takes no further call.
        """
        pool, calls, call_waits, batch = self.pool, self.calls, self.call_waits, self.batch
        run = batch._runner.run
        while (index := pool.take()) is not None:
            call = calls[index]
            if not batch._settled(call, await in_context(run(call), copy_context(), call_waits)):
                return

    def call_waits(self) -> None:
        """A call is about to wait: add a worker if the pool says so."""
        if self.pool.call_waits():
            self.nursery.start_soon(self._helper)

    async def _helper(self) -> None:
        self.pool.worker_started()
        await self.work()
