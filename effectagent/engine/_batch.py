"""The tool pipeline of spec §2 over one whole batch.

Phase 1 (sequential, no checkpoints between calls): reduce → resolve → decode → admit against the
tool-call budget → one atomic ``ToolCallPrepared`` append in declaration order. Phase 2 (concurrent):
authorize → approve → acquire a permit → run the handler → encode → redact → bound → settle, for
every call. Phase 3: commit every ``ToolCallSettled`` in declaration order in one append, then extend
the prompt with the complete batch (RUN-005, CAP-005).

Phase 2 runs calls *eagerly*, the way asyncio's eager tasks do: a call starts in the batch's own
task and runs until it ends or has to wait; only a call that waits makes room for another task, which
takes the calls queued behind it (:class:`~effectagent.engine._scheduler.WorkerPool`). So calls still
run concurrently — a waiting call never holds up the ones after it, and calls that all wait get a
task each, all children of the batch's nursery — but a call that never waits (a cache hit, a pure
computation) costs no task at all, and a batch of one call needs no nursery. Each call runs in a
copy of its worker's ``contextvars`` context, exactly as a child task would
(:func:`~effectagent.engine._eager.in_context`): a context variable a handler sets never reaches
another call, the run or the caller.

If the run is interrupted (or its deadline passes) mid-batch, every unsettled call settles as a
``ToolDefect`` ("interrupted"), the batch is committed shielded, and the cancellation propagates.
Calls are never interrupted one by one: the scope of the batch is cancelled only as a whole, by the
run's own cancellation. Each call checks for cancellation before it takes a permit; it yields to the
scheduler there only when it has to wait for one (all ``tool_concurrency`` permits are held).

The arguments' JSON text is parsed once for the preview and the ``ToolCallPrepared`` record (the
event and the record share that redacted value, as events and records share tool outcomes) — and,
when redaction changes nothing, for the prompt's copy of the call too — and once more, strictly and
into values of its own, by the tool's decoder (the handler may do what it likes with them).
"""

from __future__ import annotations

import time
from contextvars import copy_context
from operator import itemgetter
from typing import TYPE_CHECKING, Any, final

import trio

from effectagent.ai import (
    ModelResponse,
    Tool,
    ToolCallContext,
    ToolMessage,
    ToolResultContent,
    encode_failure,
    handler_result,
)
from effectagent.ai._tool import OutputSchemaViolation
from effectagent.core import (
    ApprovalDecision,
    ApprovalRequest,
    ApprovalRequested,
    RunError,
    ToolApprovalDecided,
    ToolApprovalRequested,
    ToolCallDeclared,
    ToolCallFailed,
    ToolCallPrepared,
    ToolCallSettled,
    ToolCallStarted,
    ToolCallSucceeded,
    ToolDefect,
    ToolFailedRun,
    ToolFailure,
    ToolInvalidInput,
    ToolOutcome,
    ToolProgress,
    ToolRejected,
    ToolResultBounds,
    ToolSuccess,
    bound_json,
    parse_arguments,
)
from effectagent.core._bounds import bounded_json, bounded_parsed
from effectagent.effect import Semaphore
from effectagent.effect._cause import is_passthrough
from effectagent.effect._schema import SchemaError, encode

from ._eager import in_context
from ._scheduler import BatchLedger, WorkerPool
from ._seams import ApprovalError

if TYPE_CHECKING:
    from ._run import RunDriver

__all__ = ["run_batch"]

_PREVIEW_BOUNDS = ToolResultBounds(max_bytes=2048)
_first = itemgetter(0)
_PROGRESS_BOUNDS = ToolResultBounds(max_bytes=4096)


@final
class _Call:
    """One runnable call of a batch (resolved and decoded), and where its progress goes."""

    __slots__ = ("arguments", "driver", "id", "index", "name", "params", "tool", "turn")

    def __init__(
        self,
        driver: RunDriver,
        turn: int,
        index: int,
        call_id: str,
        name: str,
        tool: Tool[Any, Any],
        params: Any,
        arguments: Any,
    ) -> None:
        self.driver = driver
        self.turn = turn
        self.index = index
        self.id = call_id
        self.name = name
        self.tool = tool
        self.params = params
        self.arguments = arguments  # parsed and redacted, for the ToolCallPrepared record

    async def report(self, data: Any) -> None:
        """The handler's progress report: redacted, bounded, emitted as ``ToolProgress``.

        Cancellation: a checkpoint (as ``ToolCallContext.progress`` promises) before anything is
        emitted; then, for a streamed run, it waits while the consumer lags (backpressure).
        """
        driver = self.driver
        preview, _, _ = bound_json(driver.services.redactor.redact(data), _PROGRESS_BOUNDS)
        await trio.lowlevel.checkpoint()
        driver.emit(ToolProgress, self.turn, self.id, self.name, preview)
        await driver.wait_for_consumer()


async def run_batch(driver: RunDriver, turn: int, response: ModelResponse) -> RunError | None:
    """Run the whole batch of ``response``; commit it; return a run-ending error, if any.

    Cancellation: see the module notes — the batch is always committed complete.
    """
    declared = [(c.id, c.name, c.arguments, False) for c in response.tool_calls] + [
        (c.id, c.name, c.partial_arguments, True) for c in response.truncated_calls
    ]
    ledger = BatchLedger([d[0] for d in declared])
    redactor = driver.services.redactor
    toolkit = driver.agent.toolkit
    runnable: list[_Call] = []
    settled_early: list[tuple[int, ToolOutcome]] = []
    # When redaction changes nothing, the prompt's arguments (parsed from the record's text) are
    # this same parse of the same text: keep it, rather than parse every call's arguments again.
    parsed: dict[str, Any] | None = None if driver.redacting else {}

    for index, (call_id, name, arguments, truncated) in enumerate(declared):
        if truncated:
            shown: Any = ""
            preview: Any = ""
        elif parsed is not None:  # nothing to redact: the parse itself is what is shown
            shown = parsed[call_id] = parse_arguments(arguments)
            preview = bounded_parsed(shown, arguments, _PREVIEW_BOUNDS)
        else:
            shown = redactor.redact(parse_arguments(arguments))
            preview = bounded_json(shown, _PREVIEW_BOUNDS)
        driver.emit(ToolCallDeclared, turn, call_id, name, preview)
        tool = toolkit.get(name)
        if truncated:
            settled_early.append(
                (
                    index,
                    ToolInvalidInput(
                        call_id,
                        name,
                        "the arguments were cut off by the output "
                        "length limit; the call was not executed",
                    ),
                )
            )
        elif tool is None:
            available = ", ".join(toolkit.names) or "none"
            settled_early.append(
                (
                    index,
                    ToolInvalidInput(
                        call_id, name, f"unknown tool {name!r} (available: {available})"
                    ),
                )
            )
        else:
            try:
                params = tool.decode_arguments(arguments)
            except SchemaError as exc:
                settled_early.append(
                    (index, ToolInvalidInput(call_id, name, redactor.redact_text(str(exc))))
                )
            else:
                runnable.append(_Call(driver, turn, index, call_id, name, tool, params, shown))

    admitted = driver.budget.admit_tool_calls(len(runnable))
    for call in runnable[admitted:]:
        settled_early.append(
            (
                call.index,
                ToolRejected(call.id, call.name, "the run's tool-call budget is exhausted"),
            )
        )
    runnable = runnable[:admitted]
    if runnable:
        if driver.permits is None:
            driver.permits = Semaphore(driver.agent.policy.tool_concurrency)
        now = time.time()
        conversation_id, run_id = driver.conversation_id, driver.run_id
        await driver.record(
            *[
                ToolCallPrepared(conversation_id, run_id, turn, c.id, c.name, c.arguments, now)
                for c in runnable
            ]
        )
    early = sorted(settled_early, key=_first) if settled_early else settled_early
    for index, outcome in early:
        ledger.settle(index, outcome)

    outcomes: list[ToolOutcome] | None = None
    try:
        # Announced inside the try: once ToolCallPrepared is appended, an interruption at any
        # checkpoint must still commit the batch (every prepared call gets its settlement).
        for _, outcome in early:
            _announce(driver, turn, outcome)
        if len(runnable) == 1:
            # One call: nothing could run beside it, so it needs no task and no nursery.
            await in_context(_execute(driver, ledger, turn, runnable[0]), copy_context())
        elif runnable:
            # A plain nursery: the workers need none of a Scope's bookkeeping (no finalizers, no
            # Exits; errors are reified per call by ``_execute``).
            async with trio.open_nursery() as nursery:
                await _Workers(driver, ledger, turn, runnable, nursery).work()
            driver.yielded = True  # leaving a nursery is always a schedule point
        if not ledger.complete:
            # Each call absorbs its own Cancelled, so an interrupted batch can get here without
            # raising: surface the cancellation now, so the rest settle as interrupted.
            await trio.lowlevel.checkpoint()
        # Unshielded: the log's append is all-or-nothing, so if it is cancelled nothing was
        # written, and the handler below commits the (complete) batch shielded instead.
        outcomes = await _commit(driver, ledger, turn, response, parsed)
    except BaseException:
        if outcomes is None:
            with trio.CancelScope(shield=True):
                ledger.settle_rest(
                    lambda i: ToolDefect(
                        declared[i][0], declared[i][1], "interrupted before it settled"
                    )
                )
                await _commit(driver, ledger, turn, response, parsed)
        raise
    driver.budget.record_outcomes(outcomes)
    for outcome in outcomes:
        if isinstance(outcome, ToolFailure):
            tool = toolkit.get(outcome.tool_name)
            if tool is not None and tool.failure_mode == "error":
                return ToolFailedRun(outcome.tool_call_id, outcome.tool_name, outcome.error)
    return None


async def _commit(
    driver: RunDriver,
    ledger: BatchLedger,
    turn: int,
    response: ModelResponse,
    parsed: dict[str, Any] | None,
) -> list[ToolOutcome]:
    """Append the batch's settlements in declaration order, then extend the prompt with it.

    Everything that could fail is done before the append and nothing after it can, so a caller
    that sees this raise knows nothing was written. Cancellation: as ``ConversationLog.append``.
    """
    outcomes = ledger.commit()
    assistant = driver.assistant_message(response, parsed)
    results = ToolMessage(
        tuple(
            [
                ToolResultContent(o.tool_call_id, o.tool_name, o.model_content(), o.is_failure)
                for o in outcomes
            ]
        )
    )
    now = time.time()
    conversation_id, run_id = driver.conversation_id, driver.run_id
    await driver.record(
        *[
            ToolCallSettled(conversation_id, run_id, turn, o.tool_call_id, o.tool_name, o, now)
            for o in outcomes
        ]
    )
    if assistant is not None:
        driver.messages.append(assistant)
    driver.messages.append(results)
    return outcomes


def _announce(driver: RunDriver, turn: int, outcome: ToolOutcome) -> None:
    event = ToolCallSucceeded if outcome.kind == "success" else ToolCallFailed
    driver.emit(event, turn, outcome.tool_call_id, outcome.tool_name, outcome)


@final
class _Workers:
    """The calls of a batch of two or more, run eagerly (see the module notes).

    The batch's task works first (:meth:`work`); whenever a call is about to wait while calls are
    still queued, :class:`WorkerPool` asks for one more worker, a child task of the batch's nursery
    that works the same queue. Each call runs in a copy of its worker's context, so what one
    handler sets in a context variable never reaches another call, the run or the caller.
    """

    __slots__ = ("calls", "driver", "ledger", "nursery", "pool", "turn")

    def __init__(
        self,
        driver: RunDriver,
        ledger: BatchLedger,
        turn: int,
        calls: list[_Call],
        nursery: trio.Nursery,
    ) -> None:
        self.driver = driver
        self.ledger = ledger
        self.turn = turn
        self.calls = calls
        self.nursery = nursery
        self.pool = WorkerPool(len(calls))

    async def work(self) -> None:
        """Run queued calls, one after another, until none is left or the batch is interrupted.

        Cancellation: an interruption ends the current call quietly (see :func:`_execute`) and
        this worker takes no further call.
        """
        pool, calls, call_waits = self.pool, self.calls, self.call_waits
        while (index := pool.take()) is not None:
            execute = _execute(self.driver, self.ledger, self.turn, calls[index])
            if not await in_context(execute, copy_context(), call_waits):
                return

    def call_waits(self) -> None:
        """A call is about to wait: add a worker if the pool says so."""
        if self.pool.call_waits():
            self.nursery.start_soon(self._helper)

    async def _helper(self) -> None:
        self.pool.worker_started()
        await self.work()


async def _execute(driver: RunDriver, ledger: BatchLedger, turn: int, call: _Call) -> bool:
    """One call: its outcome settled and announced (True), or nothing if the batch is interrupted
    (False).

    Cancellation: an interruption of the batch ends the call quietly — the Cancelled is absorbed
    (the batch's scope stays cancelled, and the batch surfaces it and settles the call as
    interrupted). Only KeyboardInterrupt/SystemExit propagate.
    """
    try:
        outcome = await _outcome(driver, turn, call)
    except Exception as exc:  # an engine-side defect while serving this call
        outcome = ToolDefect(call.id, call.name, driver.redact_text(f"{type(exc).__name__}: {exc}"))
    except BaseException as exc:
        if isinstance(exc, trio.Cancelled) or _holds_cancelled(exc):
            return False
        raise
    ledger.settle(call.index, outcome)
    _announce(driver, turn, outcome)
    return True


async def _outcome(driver: RunDriver, turn: int, call: _Call) -> ToolOutcome:
    services = driver.services
    tool = call.tool
    context = ToolCallContext(
        call.id, call.name, driver.run_id, driver.conversation_id, driver.agent_name, call.report
    )
    if services.authorization is not None:
        decision = await services.authorization.authorize(tool, call.params, context)
        if not decision.allowed:
            return ToolRejected(
                call.id,
                call.name,
                driver.redact_text(f"not authorized: {decision.reason or 'denied'}"),
            )
    if tool.may_need_approval:
        try:
            needed = tool.requires_approval(call.params, context)
        except Exception as exc:
            return ToolRejected(
                call.id, call.name, driver.redact_text(f"approval policy failed: {exc}")
            )
        if needed:
            decision_ = await _approve(driver, turn, call)
            if not decision_.approved:
                return ToolRejected(
                    call.id,
                    call.name,
                    driver.redact_text(f"approval denied: {decision_.reason or 'no reason given'}"),
                )

    handler = services.handlers[tool]
    permits = driver.permits
    assert permits is not None  # made by ``run_batch`` before any call runs
    # A cancellation point per call; a scheduler pass only when the call must wait for a permit.
    await trio.lowlevel.checkpoint_if_cancelled()
    if not permits.acquire_nowait():
        await permits.acquire()
    try:
        driver.emit(ToolCallStarted, turn, call.id, call.name)
        try:
            if tool.timeout is None:  # no deadline, no cancel scope: measurable per call
                value = handler_result(await handler(call.params, context))
                return _success(driver, tool, call, value)
            with trio.move_on_after(tool.timeout):
                value = handler_result(await handler(call.params, context))
                return _success(driver, tool, call, value)
        except trio.Cancelled:
            raise
        except BaseException as exc:
            if is_passthrough(exc) or _holds_cancelled(exc):
                raise
            if tool.is_declared_failure(exc):
                envelope = services.redactor.redact(encode_failure(exc))  # type: ignore[arg-type]
                bounded, _, _ = bound_json(envelope, driver.agent.policy.tool_result_bounds)
                return ToolFailure(call.id, call.name, bounded)
            return ToolDefect(call.id, call.name, driver.redact_text(_describe(exc)))
        return ToolDefect(call.id, call.name, f"timed out after {tool.timeout} s")
    finally:
        permits.release()


def _holds_cancelled(exc: BaseException) -> bool:
    # A handler that runs its own nursery raises a *group* holding Cancelled when the run is
    # interrupted: that is an interruption to propagate, not a crash of the tool.
    return isinstance(exc, BaseExceptionGroup) and exc.subgroup(trio.Cancelled) is not None


def _describe(exc: BaseException) -> str:
    if isinstance(exc, OutputSchemaViolation):
        return f"output schema violation: {exc}"
    return f"the tool crashed ({type(exc).__name__}: {exc})"


def _success(driver: RunDriver, tool: Tool[Any, Any], call: _Call, value: Any) -> ToolOutcome:
    try:
        encoded = tool.encode_success(value)
    except OutputSchemaViolation as exc:
        return ToolDefect(call.id, call.name, driver.redact_text(_describe(exc)))
    bounded = bounded_json(
        driver.services.redactor.redact(encoded), driver.agent.policy.tool_result_bounds
    )
    return ToolSuccess(call.id, call.name, bounded)


def _risk(tool: Tool[Any, Any]) -> Any:
    annotations = tool.annotations
    if annotations.readonly:
        return "low"
    return "high" if annotations.destructive else "medium"


async def _approve(driver: RunDriver, turn: int, call: _Call) -> ApprovalDecision:
    services = driver.services
    approval = services.approval
    policy = driver.agent.policy
    preview, _, _ = bound_json(
        services.redactor.redact(parse_arguments(_raw_arguments(call))), _PREVIEW_BOUNDS
    )
    title = call.tool.annotations.title or call.name
    request = ApprovalRequest(
        run_id=driver.run_id,
        conversation_id=driver.conversation_id,
        agent=driver.agent.name,
        tool_name=call.name,
        tool_call_id=call.id,
        summary=f"{title}: {call.tool.description}",
        targets=(),
        risk=_risk(call.tool),
        input_preview=preview,
        expires_at=time.time() + policy.approval_timeout,
    )
    await driver.record(
        ToolApprovalRequested(driver.conversation_id, driver.run_id, request, time.time())
    )
    driver.emit(ApprovalRequested, turn, call.id, call.name, request)
    decision: ApprovalDecision
    if approval is None:  # preflight forbids this; fail closed if it happens anyway
        decision = ApprovalDecision.deny("no approval service", "engine")
    else:
        with trio.move_on_after(policy.approval_timeout) as waited:
            try:
                decision = await approval.request(request)
            except ApprovalError as exc:
                decision = ApprovalDecision.deny(driver.redact_text(exc.message), "approval-error")
        if waited.cancelled_caught:
            decision = ApprovalDecision.deny("approval timed out", "timeout")
    await driver.record(
        ToolApprovalDecided(driver.conversation_id, driver.run_id, call.id, decision, time.time())
    )
    return decision


def _raw_arguments(call: _Call) -> Any:
    return encode(call.params) if not call.tool.is_dynamic else call.params
