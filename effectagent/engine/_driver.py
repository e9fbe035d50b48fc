"""The turn loop of one run (DESIGN §4): a thin Trio driver around pure decisions.

Each turn: budgets and stop policy → drain steering → compaction → one streamed model response
(``_model_step``) → the final answer, or the whole tool batch (``_batch_plan``, ``_batch``)
committed in declaration order → loop. Exactly one terminal event ends every run; the
Conversation Log gets the canonical records as they become true.

The driver owns the run's state — the prompt, the budgets, the turn, the permits — and is the only
code that changes it: the model step, the batch and compaction write events and records through the
run's :class:`~effectagent.engine._io.RunIO` and *return* what changed (a step, a batch result, a
new prompt), which the driver applies.

Cancellation contract of :meth:`RunDriver.execute`: cancelling the run (caller, runtime close,
:meth:`RunDriver.interrupt`) stops the model stream and every tool call; unfinished tool calls of
the batch settle as interrupted defects; a ``RunFailedRecord`` and the ``RunInterrupted`` event are
written shielded; no task is left running.
"""

from __future__ import annotations

import time
from typing import Any, Literal, final

import attrs
import trio

from effectagent.ai import (
    ContextLengthExceeded,
    Message,
    ModelRequest,
    ModelResponse,
    Toolkit,
    ToolSnapshot,
    UserMessage,
)
from effectagent.core import (
    Agent,
    BudgetExhausted,
    BudgetWarning,
    ContextAdded,
    ContextItem,
    ConversationCreated,
    EngineDefect,
    EventBase,
    FinalTurnDeclaredTools,
    LogEntry,
    ModelFailed,
    ModelRetrying,
    OutputInvalid,
    Record,
    RepeatedToolFailure,
    RunCompleted,
    RunCompletedRecord,
    RunError,
    RunFailed,
    RunFailedRecord,
    RunInterrupted,
    RunStarted,
    StorageFailed,
    TurnCompleted,
    TurnStarted,
    UserInputRecorded,
    project_messages,
)
from effectagent.effect import SchemaError, Semaphore, decode_json, encode

from ._batch import Batch
from ._batch_plan import plan_batch
from ._budget import BudgetState
from ._compaction import maybe_compact
from ._handover import EventQueue
from ._ids import new_id
from ._io import EventSink, RunIO
from ._model_step import ModelStep, stream_model, used_call_ids
from ._retry import retry_delay
from ._seams import ConversationLogError, RunEnding, RunInfo, SteeringInput
from ._services import RunServices

__all__ = ["RunDriver"]


@final
class RunDriver:
    """One run: its identity, its state and its turn loop. Created by the runtime."""

    def __init__(
        self,
        services: RunServices,
        agent: Agent,
        user_input: str,
        *,
        run_id: str,
        conversation_id: str,
        events: EventQueue | EventSink,
        author: str = "user",
        new_conversation: bool = False,
        context: tuple[ContextItem, ...] = (),
        depth: int = 0,
        may_delegate: bool = True,
        backpressure: EventQueue | None = None,
    ) -> None:
        self.services = services
        self.agent = agent
        # The turn's tools and the services that serve them: the agent's toolkit, joined by what
        # its tool sources offer when it has some (``_take_tool_snapshots``, once per turn).
        self.toolkit = agent.toolkit
        self.turn_services = services
        self._snapshots: tuple[ToolSnapshot, ...] = ()
        self.user_input = user_input
        self.context = context  # recorded as ContextAdded before the user's input
        self.author = author
        self.io = RunIO(
            run_id=run_id,
            conversation_id=conversation_id,
            agent_name=agent.name,
            log=services.log,
            redactor=services.redactor,
            events=events,
            on_consumer_lost=self.interrupt,
            author=author,
            listener=services.listener,
            backpressure=backpressure,
        )
        # Child runs: how deep this run is (0: started by the runtime), whether it may start
        # children of its own. The audit metadata of the current batch's calls, by tool call ID:
        # what inner calls and child runs add, written with the calls' settlements.
        self.depth = depth
        self.may_delegate = may_delegate
        self.call_audits: dict[str, dict[str, Any]] = {}
        # The run made this conversation's ID up: it has no history to read.
        self.new_conversation = new_conversation
        # The history as read before the run started (``read_history``), or what reading it
        # raised (the run then fails with it when it executes).
        self._history: tuple[LogEntry, ...] | None = None
        self._history_error: Exception | None = None
        self.messages: list[Message] = []
        self.budget = BudgetState(agent.policy, 0.0)
        # The permits of ``tool_concurrency``, made by the run's first tool batch.
        self.permits: Semaphore | None = None
        # The run's one cancel scope at a time: the turns (with the run's deadline), then, if a
        # budget ran out, the exhaustion phase. ``interrupt`` cancels whichever is current.
        self.cancel_scope: trio.CancelScope | None = None
        self._interrupted = False
        self.terminal: EventBase | None = None
        self.finished = False
        self._done: trio.Event | None = None  # made only if someone waits for the end
        # Set once the run observers were told the run started (they are then told it ended).
        self._observed: RunInfo | None = None
        self.turn = 0
        # Whether the last batch left a nursery (a schedule point): see ``_turns``.
        self._yielded = False
        # Final answers sent back because they did not decode into ``Agent.output``.
        self._output_retries = 0
        # (a prefix of the prompt, in messages; its tokens — as the provider reported them for
        # the last request, or as counted here): see ``_live_context``.
        self._context_base: tuple[int, int] | None = None
        # When the run must have ended, on Trio's clock: its start plus ``max_duration``.
        self._end_at = float("inf")
        # The tool-call IDs the conversation has used (its history, then each response of the
        # run): a call that reuses one gets a fresh ID (``_model_step``). Made at the first step.
        self._call_ids: set[str] | None = None

    @property
    def run_id(self) -> str:
        """The run's ID."""
        return self.io.run_id

    @property
    def conversation_id(self) -> str:
        """The conversation's ID."""
        return self.io.conversation_id

    @property
    def ending(self) -> RunEnding:
        """How the run ended, from its terminal event ("interrupted" while it has none)."""
        terminal = self.terminal
        if isinstance(terminal, RunCompleted):
            return "completed"
        return "failed" if isinstance(terminal, RunFailed) else "interrupted"

    def interrupt(self) -> None:
        """Ask the run to stop; it ends with RunInterrupted. Idempotent; does not wait."""
        self._interrupted = True
        if self.cancel_scope is not None:
            self.cancel_scope.cancel()

    async def wait_done(self) -> None:
        """Wait until the run has ended (its terminal event is handed over).

        Cancellation: a cancellation point while waiting.
        """
        if self.finished:
            await trio.lowlevel.checkpoint()
            return
        if self._done is None:
            self._done = trio.Event()
        await self._done.wait()

    async def read_history(self) -> tuple[LogEntry, ...] | None:
        """Read the conversation's history before the run starts, for the run to use; None when
        it cannot be read (the run then fails with that storage error as it executes).

        Cancellation: a cancellation point while the log reads.
        """
        try:
            self._history = tuple(await self.services.log.entries(self.conversation_id))
        except Exception as exc:
            self._history_error = exc
            return None
        return self._history

    # ---- the run -----------------------------------------------------------------------------

    async def execute(self) -> None:
        """Run to exactly one terminal event. Never raises except Trio's own cancellation of the
        enclosing scope (after writing the interruption, shielded).

        Cancellation: one cancel scope holds the turns and carries the run's deadline
        (``max_duration``). When a budget runs out — the deadline cancelled that scope, or a count
        was used up — the exhaustion phase (grace turn or failure) runs in a fresh scope without
        that deadline. :meth:`interrupt` cancels whichever scope is current, and an interrupted
        run never enters the exhaustion phase.
        """
        started = trio.current_time()
        self.budget.started_at = started
        policy = self.agent.policy
        # ``max_duration`` is the run's whole wall time, its grace turn included: under
        # "final-answer" the turns stop ``grace_reserve`` seconds early so that a grace turn fits
        # before the run's end (see ``AgentPolicy``).
        self._end_at = started + policy.max_duration
        # The deadline is set as the scope is made (cheaper than setting it on an entered
        # scope); a run interrupted before it started begins cancelled.
        scope = self.cancel_scope = trio.CancelScope(deadline=self._end_at - policy.grace_reserve)
        if self._interrupted:
            scope.cancel()
        io = self.io
        try:
            with scope:
                await self._main()
            if self.terminal is None and not self._interrupted:
                scope = self.cancel_scope = trio.CancelScope()
                with scope:
                    await self._exhausted()
        except Exception as exc:  # storage failed, or a defect: fail the run, not the runtime
            if self.terminal is None:
                error: RunError
                if isinstance(exc, ConversationLogError):
                    reason = io.redact_text(str(exc))
                    error = StorageFailed(exc.conversation_id, exc.seq, reason)
                else:
                    error = EngineDefect(io.redact_text(f"{type(exc).__name__}: {exc}"))
                with trio.CancelScope(shield=True):
                    try:
                        await self._fail(error)
                    except Exception as unwritten:
                        # Not even the failure record could be written: the run still ends
                        # with its one RunFailed event; the log lacks the end (said here).
                        if self.terminal is None:
                            self.terminal = io.emit(RunFailed, error, self.budget.usage)
                        io.logs.warning(
                            "run failed, and its failure record was not written",
                            error=error.tag,
                            unwritten=io.redact_text(str(unwritten)),
                        )
        finally:
            if self.terminal is None:
                with trio.CancelScope(shield=True):
                    await self._record_interrupted()
            if self._observed is not None:
                with trio.CancelScope(shield=True):
                    await self._tell_ended(self._observed)
            self.finished = True
            io.close()
            if self._done is not None:
                self._done.set()

    async def _record_interrupted(self) -> None:
        """Write the interruption and hand over ``RunInterrupted`` — the event also when the
        record cannot be written (logged): a run always ends, and whoever waits for it wakes."""
        io = self.io
        try:
            await io.record(
                RunFailedRecord(io.conversation_id, io.run_id, None, "interrupted", time.time())
            )
        except Exception as unwritten:
            io.logs.warning(
                "run interrupted, and its record was not written",
                unwritten=io.redact_text(str(unwritten)),
            )
        finally:
            self.terminal = io.emit(RunInterrupted, "interrupted", self.budget.usage)
            io.logs.info("run interrupted", turns=self.turn, tool_calls=self.budget.tool_calls)

    async def _tell_started(self) -> None:
        """Tell the run observers (the steering inbox first) that the run starts."""
        io = self.io
        run = RunInfo(
            io.run_id,
            io.conversation_id,
            self.agent.name,
            self.author,
            self.services.redactor.redact_text,
        )
        for observer in self.services.observers:
            if self._observed is None:
                self._observed = run  # from the first call on, every observer hears the end
            await observer.run_started(run)

    async def _tell_ended(self, run: RunInfo) -> None:
        """Tell every run observer how the run ended; what one raises is logged, not raised."""
        ending = self.ending
        for observer in self.services.observers:
            try:
                await observer.run_ended(run, ending)
            except Exception as exc:
                message = self.io.redact_text(f"{type(exc).__name__}: {exc}")
                self.io.logs.warning(
                    "run observer failed", observer=type(observer).__qualname__, error=message
                )

    async def _main(self) -> None:
        io = self.io
        services = self.services
        text = services.redactor.redact_text(self.user_input)
        io.emit(RunStarted, io.redact_text(text))
        io.logs.debug("run started")
        conversation_id = io.conversation_id
        if self._history_error is not None:
            raise self._history_error
        if self._history is not None:
            history = self._history
        elif self.new_conversation:
            history = ()
        else:
            history = tuple(await services.log.entries(conversation_id))
        now = time.time()
        records: list[Record] = []
        if not history:
            records.append(ConversationCreated(conversation_id, self.agent.name, now))
        redact = services.redactor.redact_text
        added = [
            ContextAdded(
                conversation_id,
                io.run_id,
                attrs.evolve(item, source=redact(item.source), text=redact(item.text)),
                now,
            )
            for item in self.context
        ]
        records += added
        records.append(
            UserInputRecorded(
                conversation_id, io.run_id, new_id("input"), "user", text, self.author, now
            )
        )
        await io.record(*records)
        self.messages = [services.system]
        if history:
            self.messages += project_messages(history)
        self.messages += [UserMessage.text(record.item.as_message_text()) for record in added]
        self.messages.append(UserMessage.text(text))
        if services.observers:
            await self._tell_started()

        error = await self._turns()
        if error is not None:
            await self._fail(error)

    async def _exhausted(self) -> None:
        """No terminal yet and not interrupted: a budget ran out (a count, or the deadline)."""
        budget = self.budget
        now = trio.current_time()
        exhausted = budget.exhausted(now)
        if exhausted is None:  # only the deadline can end the turns without a count used up
            exhausted = ("duration", now - budget.started_at, self.agent.policy.max_duration)
        dimension, used, limit = exhausted
        self.io.logs.warning("budget exhausted", dimension=dimension, used=used, limit=limit)
        await self._on_exhaustion(exhausted)

    async def _turns(self) -> RunError | None:
        """Turns until a final answer (terminal emitted) or exhaustion (returns None, no terminal)."""
        budget = self.budget
        services = self.services
        io = self.io
        while True:
            # One scheduler yield per turn keeps runs fair to every other task even when the
            # model, the log and the event hand-over need no I/O (they only check cancellation).
            # A batch that ran in a nursery has just yielded on leaving it: then only check.
            if self._yielded:
                self._yielded = False
                await trio.lowlevel.checkpoint_if_cancelled()
            else:
                await trio.lowlevel.checkpoint()
            await io.wait_for_consumer()
            if services.inbox is not None:
                await self._drain_steering()
            if budget.exhausted(trio.current_time()) is not None:
                return None
            if services.compactor is not None and self.agent.policy.context_token_limit:
                await self._compact_if_over_limit()
            if services.tool_sources:
                self._take_tool_snapshots()
            budget.start_turn()
            self.turn = budget.turns
            io.emit(TurnStarted, self.turn, False)
            step = await self._model_step(grace=False)
            if isinstance(step, RunError):
                return step
            response = step.response
            if not response.tool_calls and not response.truncated_calls:
                follow_ups = self._take_follow_ups()
                if follow_ups:
                    assistant = step.assistant_message()
                    if assistant is not None:
                        self.messages.append(assistant)
                    await self._admit_inputs(follow_ups)
                    self._turn_completed(response)
                    continue
                output, problem = self._output(response)
                if problem is not None:
                    if self._output_retries < self.agent.policy.output_retries:
                        self._output_retries += 1
                        await self._give_feedback(step, problem)
                        self._turn_completed(response)
                        continue
                    return self._output_invalid(problem)
                # The answer ends the run: no later request needs it as an assistant message.
                await self._complete(response, "stop", None, output)
                return None
            failure = await self._batch(step)
            self._turn_completed(response)
            if failure is not None:
                return failure

    async def _compact_if_over_limit(self) -> None:
        """Compact the prompt when its live-context figure exceeds ``context_token_limit`` —
        before every model request the run makes, the grace turn's included.

        Cancellation: as the compactor's summary call and the record's append.
        """
        limit = self.agent.policy.context_token_limit
        if self.services.compactor is None or limit is None:
            return
        estimate = self._live_context()
        if estimate <= limit:  # the common case, under the limit, costs only the count
            return
        compacted = await maybe_compact(
            self.io,
            self.services,
            self.agent.policy,
            self.messages,
            self.turn + 1,
            self.budget.record_usage,
            estimate=estimate,
        )
        if compacted is not None:
            self.messages = compacted
            self._context_base = None  # a new prompt: no report covers it yet

    async def _batch(self, step: ModelStep) -> RunError | None:
        """Run the tool batch of ``step``; apply what it changed; return a run-ending error."""
        agent = self.agent
        toolkit = self.toolkit
        plan = plan_batch(step, toolkit, self.services.redactor)
        admitted = self.budget.admit_tool_calls(len(plan.runnable))
        permits = self.permits
        if permits is None and admitted:
            permits = self.permits = Semaphore(agent.policy.tool_concurrency)
        batch = Batch(
            self.io,
            self.turn_services,
            agent.policy,
            permits or _NO_PERMITS,
            self.turn,
            plan,
            admitted,
            step.assistant_message(),
            self.budget.admit_tool_calls,
            self,
            self.call_audits,
        )
        try:
            result = await batch.run(toolkit)
        finally:
            # An interrupted batch is still committed: the prompt gets it for the grace turn.
            if batch.committed is not None:
                self.messages += batch.committed
        self._yielded = result.yielded
        self.budget.record_outcomes(result.outcomes)
        return result.failure

    def _turn_completed(self, response: ModelResponse) -> None:
        io = self.io
        io.emit(TurnCompleted, self.turn, response.finish_reason, self.budget.usage)
        for dim, used, limit in self.budget.due_warnings(trio.current_time()):
            io.emit(BudgetWarning, dim, used, limit)

    async def _on_exhaustion(self, exhausted: tuple[str, float, float]) -> None:
        dim, used, limit = exhausted
        policy = self.agent.policy
        if dim == "repeated_failures" and self.budget.repeated_failure is not None:
            name, count = self.budget.repeated_failure
            if policy.on_exhaustion == "fail":
                await self._fail(RepeatedToolFailure(name, count))
                return
        elif policy.on_exhaustion == "fail":
            await self._fail(BudgetExhausted(dim, used, limit))
            return
        # "final-answer": exactly one grace turn, tool choice "none", fail closed on tool calls.
        # It lasts ``grace_turn_duration`` at most, and never past the run's end (``max_duration``
        # is the whole run's wall time); its prompt is compacted like any other when over the limit.
        io = self.io
        grace_end = min(trio.current_time() + policy.grace_turn_duration, self._end_at)
        with trio.move_on_at(grace_end) as grace_deadline:
            await self._compact_if_over_limit()
            self.turn += 1
            io.emit(TurnStarted, self.turn, True)
            step = await self._model_step(grace=True)
            if isinstance(step, RunError):
                await self._fail(step)
                return
            response = step.response
            if response.tool_calls or response.truncated_calls:
                names = tuple(c.name for c in response.tool_calls) + tuple(
                    c.name for c in response.truncated_calls
                )
                await self._fail(FinalTurnDeclaredTools(names))
                return
            io.emit(TurnCompleted, self.turn, response.finish_reason, self.budget.usage)
            output, problem = self._output(response)
            if problem is not None:
                await self._fail(self._output_invalid(problem))
                return
            await self._complete(response, "budget-exhausted", dim, output)
        if grace_deadline.cancelled_caught and self.terminal is None:
            await self._fail(BudgetExhausted(dim, used, limit))

    async def _model_step(self, *, grace: bool) -> ModelStep | RunError:
        """One model response for the prompt so far; its record waits for the turn's next append.

        A call that fails with a retryable error is tried again per ``AgentPolicy.model_retry``
        (see ``_retry``), after a ``ModelRetrying`` event; nothing of a failed call is recorded.
        Cancellation: a cancellation point while streaming and while waiting to retry.
        """
        io = self.io
        services = self.services
        toolkit = self.toolkit
        policy = self.agent.policy
        request = ModelRequest(
            tuple(self.messages),
            () if grace else toolkit.descriptors,
            "none" if grace or not len(toolkit) else "auto",
            policy.max_output_tokens,
            output=services.output,
        )
        used_ids = self._call_ids
        if used_ids is None:
            used_ids = self._call_ids = used_call_ids(self._history, self.messages)
        retry = policy.model_retry
        attempt = 1
        compacted = False
        while True:
            step = await stream_model(
                io,
                services.model,
                request,
                self.turn,
                limits=policy.response_limits,
                used_ids=used_ids,
            )
            if isinstance(step, ModelStep):
                break
            error = step.error
            message = io.redact_text(str(error))
            if isinstance(error, ContextLengthExceeded) and not compacted:
                # The model refused the context: compact once, whatever the estimate said, and
                # ask again at once (a new request, not a retry of the same one).
                compacted = True
                shorter = await maybe_compact(
                    io,
                    services,
                    self.agent.policy,
                    self.messages,
                    self.turn,
                    self.budget.record_usage,
                    force=True,
                )
                if shorter is not None:
                    self.messages = shorter
                    self._context_base = None
                    request = attrs.evolve(request, messages=tuple(shorter))
                    io.emit(
                        ModelRetrying, self.turn, attempt, error.tag, message, 0.0, step.streamed
                    )
                    continue
            delay = retry_delay(
                retry, error, attempt, trio.current_time(), trio.current_effective_deadline()
            )
            if delay is None:
                io.logs.warning(
                    "model call failed", error=error.tag, message=message, attempts=attempt
                )
                return ModelFailed(error.tag, message)
            io.emit(ModelRetrying, self.turn, attempt, error.tag, message, delay, step.streamed)
            io.logs.info("model call retried", error=error.tag, attempt=attempt, delay=delay)
            await trio.sleep(delay)
            attempt += 1
        self.budget.record_usage(step.usage)
        io.record_later(step.record)
        # The provider's count of this request's input: the base of the next live-context figure
        # (a provider that reports none leaves the engine's own count as the base).
        if step.usage.input_tokens > 0:
            self._context_base = (len(request.messages), step.usage.input_tokens)
        return step

    def _take_tool_snapshots(self) -> None:
        """This turn's tools: the agent's toolkit and, after it, what each tool source offers
        now (see ``Agent.tool_sources``). A source tool whose name is taken is left out, with a
        warning; a source that fails or returns something else fails the run as a defect (it
        raises here). Unchanged snapshots reuse the last turn's toolkit."""
        snapshots = tuple(source.snapshot() for source in self.services.tool_sources)
        for snapshot in snapshots:
            if not isinstance(snapshot, ToolSnapshot):
                raise TypeError(
                    f"a tool source returned {type(snapshot).__name__}, not a ToolSnapshot"
                )
        if len(snapshots) == len(self._snapshots) and all(
            new is old for new, old in zip(snapshots, self._snapshots, strict=True)
        ):
            return
        self._snapshots = snapshots
        tools = list(self.agent.toolkit)
        taken = {tool.name for tool in tools}
        handlers = dict(self.services.handlers)
        for snapshot in snapshots:
            for tool in snapshot.tools:
                if tool.name in taken:
                    self.io.logs.warning("tool source tool left out: name taken", tool=tool.name)
                    continue
                taken.add(tool.name)
                tools.append(tool)
                handlers[tool] = snapshot.handlers[tool.name]
        self.toolkit = Toolkit(*tools)
        self.turn_services = self.services.with_handlers(handlers)

    def _live_context(self) -> int:
        """The live-context figure for compaction: the tokens the provider reported for the
        last request's input plus the count of what was added since — or, before any report (or
        from a provider that reports none, or after a compaction), the count of the whole prompt
        once and then of each message as it is added. Each message is counted once: a turn costs
        the count of what it added, not of the whole prompt."""
        messages = self.messages
        count = self.services.count_tokens
        base = self._context_base
        if base is None or base[0] > len(messages):
            tokens = count(messages)
        elif base[0] == len(messages):
            return base[1]
        else:
            tokens = base[1] + count(messages[base[0] :])
        self._context_base = (len(messages), tokens)
        return tokens

    def _output(self, response: ModelResponse) -> tuple[Any, str | None]:
        """The final answer decoded into ``Agent.output`` — or, when it does not decode, why
        (redacted). From the redacted text, like the answer itself: a secret the model echoed
        must not reach the event or the record through the structured output either."""
        output_type = self.agent.output
        if output_type is None:
            return None, None
        text = _unfenced(self.services.redactor.redact_text(response.text))
        try:
            return decode_json(output_type, text), None
        except SchemaError as exc:
            return None, self.io.redact_text(_output_problem(exc))

    async def _give_feedback(self, step: ModelStep, problem: str) -> None:
        """Send the final answer that did not decode back to the model with the decoder's
        message: recorded as input of kind ``feedback`` (author ``engine``), so a later request,
        or a conversation continued after a restart, sees exactly what this one saw."""
        io = self.io
        text = (
            "Your final answer must be JSON that matches the required output schema, and it is "
            f"not: {problem}\nAnswer again with only that JSON."
        )
        await io.record(
            UserInputRecorded(
                io.conversation_id,
                io.run_id,
                new_id("input"),
                "feedback",
                text,
                "engine",
                time.time(),
            )
        )
        assistant = step.assistant_message()
        if assistant is not None:
            self.messages.append(assistant)
        self.messages.append(UserMessage.text(text))

    # ---- endings -------------------------------------------------------------------------------

    def _output_invalid(self, problem: str) -> OutputInvalid:
        output_type = self.agent.output
        name = getattr(output_type, "__name__", repr(output_type))
        tries = self._output_retries
        after = f" after {tries} {'retry' if tries == 1 else 'retries'}" if tries else ""
        return OutputInvalid(
            f"the final answer does not match the output type {name}{after}: {problem}"
        )

    async def _complete(
        self,
        response: ModelResponse,
        finish: Literal["stop", "budget-exhausted"],
        exhausted: str | None,
        output: Any,
    ) -> None:
        io = self.io
        text = self.services.redactor.redact_text(response.text)
        encoded = encode(output) if output is not None else text
        budget = self.budget
        record = RunCompletedRecord(io.conversation_id, io.run_id, encoded, finish, time.time())
        await io.record(record)
        # Nothing between the record and its event (see ``_fail``).
        self.terminal = io.emit(
            RunCompleted,
            text,
            output,
            finish,
            exhausted,
            budget.usage,
            self.turn,
            budget.tool_calls,
        )
        io.logs.info(
            "run completed",
            finish_reason=finish,
            exhausted=exhausted,
            turns=self.turn,
            tool_calls=budget.tool_calls,
            input_tokens=budget.usage.input_tokens,
            output_tokens=budget.usage.output_tokens,
        )

    async def _fail(self, error: RunError) -> None:
        """Write the failure record, then hand over ``RunFailed`` with nothing in between.

        Cancellation: the log's append is all-or-nothing (see ``ConversationLog.append``), and
        the event is handed over synchronously right after it returns — so a deadline or
        interruption either stops the ending before anything is written (the run then ends
        another way, once) or comes after both; it can never separate the record from its event
        or add a second terminal.
        """
        io = self.io
        await io.record(
            RunFailedRecord(io.conversation_id, io.run_id, error, error.tag, time.time())
        )
        self.terminal = io.emit(RunFailed, error, self.budget.usage)
        io.logs.warning("run failed", error=error.tag, detail=_detail(error))

    # ---- steering and follow-ups -----------------------------------------------------------------

    async def _drain_steering(self) -> None:
        inbox = self.services.inbox
        if inbox is None:
            return
        inputs = inbox.drain_steering(self.io.conversation_id)
        if inputs:
            await self._admit_inputs(inputs)

    def _take_follow_ups(self) -> list[SteeringInput]:
        inbox = self.services.inbox
        if inbox is None:
            return []
        return list(inbox.take_follow_ups(self.io.conversation_id))

    async def _admit_inputs(self, inputs: Any) -> None:
        io = self.io
        redact = self.services.redactor.redact_text
        texts = [redact(i.text) for i in inputs]
        records: list[Record] = [
            UserInputRecorded(
                io.conversation_id, io.run_id, i.input_id, i.kind, text, i.author, i.at
            )
            for i, text in zip(inputs, texts, strict=True)
        ]
        await io.record(*records)
        self.messages.extend(UserMessage.text(text) for text in texts)


#: Permits for a batch whose every call was refused by the budget (nothing runs, nothing waits).
_NO_PERMITS = Semaphore(1)


def _output_problem(error: SchemaError) -> str:
    """Where and how a final answer misses the output type: its issues (at most five), each
    with its path — about the *output*, never worded as the tools' "invalid input"."""
    issues = error.issues
    shown = "; ".join(str(issue) for issue in issues[:5])
    if len(issues) > 5:
        shown += f"; and {len(issues) - 5} more"
    return shown


def _detail(error: RunError) -> str:
    """A failed run's error for the log: its (already redacted) fields, compactly."""
    return repr(error)


def _unfenced(text: str) -> str:
    """The answer without one Markdown code fence around it (```json ... ```), which models
    often add even when asked for bare JSON; anything else is left as it is."""
    stripped = text.strip()
    if stripped.startswith("```") and stripped.endswith("```") and len(stripped) > 6:
        body = stripped[3:-3]
        newline = body.find("\n")
        if newline != -1 and body[:newline].strip().isidentifier():
            body = body[newline + 1 :]  # the language tag (json)
        return body.strip()
    return text
