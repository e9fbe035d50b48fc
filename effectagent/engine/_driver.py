"""The interpreter of one run: performs the state machine's commands, feeds back their results.

Every decision of the turn loop is ``_machine.step``'s, made on the run's :class:`RunState` — one
frozen value with one owner, this driver, which replaces it with each transition and never changes
it otherwise. The driver does the I/O the commands ask for — streams the model (``_model_step``),
runs a tool batch (``_batch``), compacts (``_compaction``), appends records and emits events
through the run's :class:`~effectagent.engine._io.RunIO` — and hands what came of it back to the
machine as the next input. The parts it calls return values; none of them reaches into the run.

Cancellation contract of :meth:`RunDriver.execute`: cancelling the run (caller, runtime close,
:meth:`RunDriver.interrupt`) stops the model stream and every tool call; unfinished tool calls of
the batch settle as interrupted defects; a ``RunFailedRecord`` and the ``RunInterrupted`` event are
written shielded; no task is left running. The run's deadline (``max_duration``, less the grace
reserve) is the deadline of the scope the turns run in; when it passes the machine hears
``TimeRanOut`` and decides what exhaustion means.
"""

from __future__ import annotations

import random
import time
from collections.abc import Awaitable, Callable
from typing import Any, final, get_args

import attrs
import trio

from effectagent.ai import Message, ModelRequest, Toolkit, ToolSnapshot, UserMessage
from effectagent.core import (
    Agent,
    BudgetWarning,
    ContextAdded,
    ContextItem,
    ConversationCreated,
    EngineDefect,
    EventBase,
    LogEntry,
    ModelRetrying,
    Record,
    RunCompleted,
    RunCompletedRecord,
    RunError,
    RunFailed,
    RunFailedRecord,
    RunInterrupted,
    RunStarted,
    RunSuspended,
    RunSuspendedRecord,
    StorageFailed,
    TurnCompleted,
    TurnStarted,
    UsageTotals,
    UserInputRecorded,
    project_messages,
)
from effectagent.effect import encode

from ._batch import Batch
from ._budget import Allowance
from ._compaction import maybe_compact
from ._handover import EventQueue
from ._host import BatchScope
from ._ids import new_id
from ._io import EventSink, RunIO
from ._machine import (
    AnnounceRetry,
    AppendLater,
    BatchInterrupted,
    BatchSettled,
    BatchSuspended,
    Command,
    Compact,
    Compacted,
    Complete,
    CompleteTurn,
    EnterGrace,
    Fail,
    FollowUps,
    GraceBegun,
    Input,
    Log,
    ModelCallFailed,
    ModelResponded,
    NextTurn,
    RecordFeedback,
    RecordInputs,
    RequestModel,
    RunBatch,
    RunConfig,
    RunState,
    StartTurn,
    Suspend,
    TakeFollowUps,
    TimeRanOut,
    Transition,
    TurnDue,
    start,
    step,
)
from ._model_step import ModelStep, stream_model, used_call_ids
from ._permits import Permit, PermitPool
from ._resume import BatchReplay, FoundRun, resume_point
from ._seams import ConversationLogError, RunEnding, RunInfo
from ._services import RunServices, split_handlers

__all__ = ["RunDriver"]

#: The commands that do not wait, by class: done synchronously by the interpreter (see ``_drive``).
_EFFECTS: dict[type[Any], Callable[[Any, Any], Any]] = {}

_jitter = random.Random()
_NEXT_TURN = NextTurn()
_NO_USAGE = UsageTotals()


@final
class RunDriver:
    """One run: its identity, its state (one :class:`RunState`) and the interpreter of its state
    machine. Created by the runtime (or by ``run_child`` for a child run)."""

    __slots__ = (
        "_call_ids",
        "_done",
        "_history",
        "_history_error",
        "_interrupted",
        "_observed",
        "_replay",
        "_resuming",
        "_snapshots",
        "_yielded",
        "agent",
        "author",
        "cancel_scope",
        "chosen_run_id",
        "context",
        "depth",
        "finished",
        "io",
        "lender",
        "may_delegate",
        "new_conversation",
        "pool",
        "services",
        "state",
        "terminal",
        "toolkit",
        "turn_services",
        "user_input",
    )

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
        permits: PermitPool | None = None,
        lender: Permit | None = None,
        resuming: FoundRun | None = None,
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
            conversation_log=services.log,
            redactor=services.redactor,
            events=events,
            on_consumer_lost=self.interrupt,
            author=author,
            listener=services.listener,
            backpressure=backpressure,
        )
        # Child runs: how deep this run is (0: started by the runtime), whether it may start
        # children of its own.
        self.depth = depth
        self.may_delegate = may_delegate
        # The run's permits (``tool_concurrency``): a child's are its parent's pool, and its
        # calls borrow the permit of the call that started it first (``lender``).
        self.pool = permits
        self.lender = lender
        # The run made this conversation's ID up: it has no history to read.
        self.new_conversation = new_conversation
        # The history as read before the run started (``read_history``), or what reading it
        # raised (the run then fails with it when it executes).
        self._history: tuple[LogEntry, ...] | None = None
        self._history_error: Exception | None = None
        #: The run's state: None until it has its prompt.
        self.state: RunState | None = None
        # The run's one cancel scope at a time: the turns (with the run's deadline), then, if a
        # budget ran out, the exhaustion phase. ``interrupt`` cancels whichever is current.
        self.cancel_scope: trio.CancelScope | None = None
        self._interrupted = False
        self.terminal: EventBase | None = None
        self.finished = False
        self._done: trio.Event | None = None  # made only if someone waits for the end
        # Set once the run observers were told the run started (they are then told it ended).
        self._observed: RunInfo | None = None
        # Whether the last batch left a nursery (a schedule point): see ``_next_turn``.
        self._yielded = False
        # The tool-call IDs the conversation has used (its history, then each response of the
        # run): a call that reuses one gets a fresh ID (``_model_step``). Made at the first step.
        self._call_ids: set[str] | None = None
        # A run continued from its records (``Runtime.resume``): what they are, and the batch it
        # resumes (for its first batch only).
        self._resuming = resuming
        self._replay: BatchReplay | None = None
        # Whether the caller chose the run's ID (it must then be new to the conversation).
        self.chosen_run_id = False

    # ---- what others read --------------------------------------------------------------------

    @property
    def run_id(self) -> str:
        """The run's ID."""
        return self.io.run_id

    @property
    def conversation_id(self) -> str:
        """The conversation's ID."""
        return self.io.conversation_id

    @property
    def turn(self) -> int:
        """The current turn (0 before the first)."""
        return 0 if self.state is None else self.state.turn

    @property
    def usage(self) -> UsageTotals:
        """What the run (and its children) used so far."""
        return _NO_USAGE if self.state is None else self.state.budget.usage

    @property
    def turns_used(self) -> int:
        """Model turns taken, the grace turn and the run's children's included."""
        state = self.state
        return 0 if state is None else state.turn + state.budget.delegated_turns

    @property
    def tool_calls_used(self) -> int:
        """Tool calls made, inner calls and the run's children's included."""
        state = self.state
        if state is None:
            return 0
        return state.budget.tool_calls + state.budget.delegated_tool_calls

    @property
    def permits_in_use(self) -> int:
        """Permits of the run's pool held right now (0 before its first batch)."""
        return 0 if self.pool is None else self.pool.in_use

    @property
    def ending(self) -> RunEnding:
        """How the run ended, from its terminal event ("interrupted" while it has none)."""
        terminal = self.terminal
        if isinstance(terminal, RunCompleted):
            return "completed"
        if isinstance(terminal, RunSuspended):
            return "suspended"
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

    @property
    def history_error(self) -> Exception | None:
        """What reading the history raised (None: it was read, or not yet)."""
        return self._history_error

    def resume_from(self, found: FoundRun) -> None:
        """Continue the run from ``found``, its records (read before it starts)."""
        self._resuming = found

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
        (``max_duration`` less the grace reserve). When a budget runs out — the deadline
        cancelled that scope, or a count was used up — the exhaustion phase (grace turn or
        failure) runs in a fresh scope, the grace turn under a deadline of its own that never
        passes ``max_duration``. :meth:`interrupt` cancels whichever scope is current, and an
        interrupted run never enters the exhaustion phase.
        """
        started = trio.current_time()
        policy = self.agent.policy
        end_at = started + policy.max_duration
        # The deadline is set as the scope is made (cheaper than setting it on an entered
        # scope); a run interrupted before it started begins cancelled.
        scope = self.cancel_scope = trio.CancelScope(deadline=end_at - policy.grace_reserve)
        if self._interrupted:
            scope.cancel()
        io = self.io
        try:
            grace: EnterGrace | None = None
            with scope:
                if self._resuming is None:
                    state = await self._begin(started, end_at)
                    grace = await self._drive((state, (_NEXT_TURN,)))
                else:
                    grace = await self._drive(await self._begin_resumed(started, end_at))
            if self.terminal is None and not self._interrupted:
                scope = self.cancel_scope = trio.CancelScope()
                with scope:
                    if grace is None:  # the turns' deadline passed
                        grace = await self._drive(self._step(TimeRanOut(trio.current_time())))
                    if grace is not None:
                        with trio.move_on_at(grace.deadline) as grace_scope:
                            await self._drive(self._step(GraceBegun()))
                        if grace_scope.cancelled_caught and self.terminal is None:
                            await self._drive(self._step(TimeRanOut(trio.current_time())))
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
                            self.terminal = io.emit(RunFailed, error=error, usage=self.usage)
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
            forget = self.services.forget_steps
            if forget is not None and not isinstance(self.terminal, RunSuspended):
                forget(io.run_id)  # the run is over: its steps' results go
            self.finished = True
            self._call_ids = None
            io.close()
            if self._done is not None:
                self._done.set()

    def _step(self, event: Input) -> Transition:
        state = self.state
        assert state is not None
        return step(state, event)

    async def _drive(self, transition: Transition) -> EnterGrace | None:
        """Perform transitions until the run ends (None) or enters its grace turn.

        Effects that do not wait (events, log lines, a pending record) are done through a table
        by command class; the commands that wait are awaited. Cancellation: as the commands
        performed (see each).
        """
        effects, waits = _EFFECTS, _WAITS
        state, commands = transition
        while True:
            self.state = state
            answer: Input | EnterGrace | None = None
            for command in commands:
                kind = type(command)
                effect = effects.get(kind)
                if effect is not None:
                    answer = effect(self, command)
                else:
                    answer = await waits[kind](self, command)
            if answer is None:
                return None
            if isinstance(answer, EnterGrace):
                return answer
            state, commands = step(state, answer)

    async def _record_inputs(self, command: RecordInputs) -> None:
        io = self.io
        await io.record(
            *[
                UserInputRecorded(
                    conversation_id=io.conversation_id,
                    run_id=io.run_id,
                    input_id=i.input_id,
                    kind=i.kind,
                    text=text,
                    author=i.author,
                    at=i.at,
                )
                for i, text in zip(command.inputs, command.texts, strict=True)
            ]
        )

    async def _record_feedback(self, command: RecordFeedback) -> None:
        io = self.io
        record = UserInputRecorded(
            conversation_id=io.conversation_id,
            run_id=io.run_id,
            input_id=new_id("input"),
            kind="feedback",
            text=command.text,
            author="engine",
            at=time.time(),
        )
        await io.record(record)

    async def _compact(self, command: Compact) -> Compacted:
        state = self.state
        assert state is not None
        messages, usage = await maybe_compact(
            self.io,
            self.services,
            self.agent.policy,
            state.messages,
            command.turn,
            estimate=command.estimate,
            force=command.force,
        )
        return Compacted(messages, usage)

    async def _end_failed(self, command: Fail) -> None:
        await self._fail(command.error)

    async def _suspend(self, command: Suspend) -> None:
        """Record the suspension, then hand over ``RunSuspended`` with nothing in between (as
        ``_fail``). A run resumed from its suspension that suspends again for the same calls,
        with nothing recorded since, records nothing new.

        Cancellation: as the log's append (all or nothing).
        """
        io = self.io
        last = self._resuming.records[-1].record if self._resuming is not None else None
        again = (
            isinstance(last, RunSuspendedRecord)
            and last.turn == command.turn
            and last.tool_call_ids == command.tool_call_ids
            and not io.appended
        )
        if not again:
            await io.record(
                RunSuspendedRecord(
                    conversation_id=io.conversation_id,
                    run_id=io.run_id,
                    turn=command.turn,
                    tool_call_ids=command.tool_call_ids,
                    reason=command.reason,
                    at=time.time(),
                )
            )
        self.terminal = io.emit(
            RunSuspended,
            reason=command.reason,
            tool_call_ids=command.tool_call_ids,
            usage=self.usage,
        )
        io.logs.info("run suspended", turn=command.turn, tool_calls=list(command.tool_call_ids))

    # ---- the effects: commands that do not wait ------------------------------------------------

    def _start_turn(self, command: StartTurn) -> None:
        if not command.grace and self.services.tool_sources:
            self._take_tool_snapshots()
        self.io.emit(TurnStarted, turn=command.turn, grace=command.grace)

    def _append_later(self, command: AppendLater) -> None:
        step = command.step
        if not step.recorded:  # a resumed run's response is in the log already
            self.io.record_later(step.record)

    def _complete_turn(self, command: CompleteTurn) -> None:
        io = self.io
        io.emit(
            TurnCompleted,
            turn=command.turn,
            finish_reason=command.finish_reason,
            usage=command.usage,
        )
        for warning in command.warnings:
            io.emit(
                BudgetWarning,
                dimension=warning.dimension,
                used=warning.used,
                limit=warning.limit,
            )

    def _take_follow_ups(self, command: TakeFollowUps) -> FollowUps:
        inbox = self.services.inbox
        inputs = () if inbox is None else tuple(inbox.take_follow_ups(self.io.conversation_id))
        return FollowUps(inputs, trio.current_time())

    def _announce_retry(self, command: AnnounceRetry) -> None:
        io = self.io
        io.emit(
            ModelRetrying,
            turn=command.turn,
            attempt=command.attempt,
            error_tag=command.error_tag,
            message=command.message,
            delay=command.delay,
            discard=command.discard,
        )
        if command.delay:
            io.logs.info(
                "model call retried",
                error=command.error_tag,
                attempt=command.attempt,
                delay=command.delay,
            )

    def _log(self, command: Log) -> None:
        logs = self.io.logs
        log = logs.warning if command.level == "warning" else logs.info
        log(command.event, **dict(command.fields))

    @staticmethod
    def _enter_grace(driver: RunDriver, command: EnterGrace) -> EnterGrace:
        return command

    # ---- the commands that wait ----------------------------------------------------------------

    def _drain(self) -> tuple[Any, ...]:
        inbox = self.services.inbox
        if inbox is None:
            return ()
        return tuple(inbox.drain_steering(self.io.conversation_id))

    async def _next_turn(self, command: NextTurn | None = None) -> TurnDue:
        """The boundary between two turns: one scheduler yield (fairness), the consumer's
        backpressure, then the steering waiting to be admitted.

        Cancellation: a checkpoint; and while the consumer lags.
        """
        # One scheduler yield per turn keeps runs fair to every other task even when the model,
        # the log and the event hand-over need no I/O (they only check cancellation). A batch
        # that ran in a nursery has just yielded on leaving it: then only check.
        if self._yielded:
            self._yielded = False
            await trio.lowlevel.checkpoint_if_cancelled()
        else:
            await trio.lowlevel.checkpoint()
        await self.io.wait_for_consumer()
        return TurnDue(trio.current_time(), self._drain())

    async def _request(self, command: RequestModel) -> ModelResponded | ModelCallFailed:
        """Stream one model response for the prompt (after ``command.delay`` for a retry).

        Cancellation: a cancellation point while waiting to retry and while streaming.
        """
        if command.delay:
            await trio.sleep(command.delay)
        state = self.state
        assert state is not None
        io = self.io
        services = self.services
        toolkit = self.toolkit
        policy = self.agent.policy
        grace = command.grace
        messages = state.messages
        request = ModelRequest(
            messages,
            () if grace else toolkit.descriptors,
            "none" if grace or not len(toolkit) else "auto",
            policy.max_output_tokens,
            output=services.output,
        )
        used_ids = self._call_ids
        if used_ids is None:
            used_ids = self._call_ids = used_call_ids(self._history, messages)
        outcome = await stream_model(
            io,
            services.model,
            request,
            state.turn,
            limits=policy.response_limits,
            used_ids=used_ids,
        )
        now = trio.current_time()
        if isinstance(outcome, ModelStep):
            return ModelResponded(outcome, len(messages), toolkit, now)
        deadline = trio.current_effective_deadline()
        return ModelCallFailed(outcome.error, outcome.streamed, now, deadline, _jitter.random())

    async def _batch(self, command: RunBatch) -> BatchSettled | BatchSuspended:
        """Run and commit the batch; what it changed is the machine's to apply.

        Cancellation: an interrupted batch is still committed (see ``Batch.run``): its messages
        and what its calls used reach the state before the cancellation propagates — the grace
        turn's prompt holds the whole batch.
        """
        state = self.state
        assert state is not None
        pool = self.pool
        if pool is None:
            pool = self.pool = PermitPool(self.agent.policy.tool_concurrency)
        allowance = Allowance(state.budget)
        scope = BatchScope(
            io=self.io,
            agent=self.agent,
            services=self.turn_services,
            toolkit=self.toolkit,
            turn=state.turn,
            depth=self.depth,
            may_delegate=self.may_delegate,
            allowance=allowance,
            pool=pool,
        )
        replay, self._replay = self._replay, None  # a resumed batch is the first one only
        batch = Batch(
            scope=scope,
            policy=self.agent.policy,
            plan=command.plan,
            admitted=command.admitted,
            assistant=command.assistant,
            lender=self.lender,
            replay=replay,
            may_suspend=self.depth == 0 and self.turn_services.approval_suspends,
        )
        try:
            result = await batch.run(self.toolkit)
        except BaseException:
            committed = batch.committed
            if committed is not None:
                self.state, _ = step(state, BatchInterrupted(committed, allowance.totals()))
            raise
        if result.suspended is not None:
            ids, reason = result.suspended
            return BatchSuspended(ids, reason)
        self._yielded = result.yielded
        return BatchSettled(
            result.outcomes, result.messages, result.failure, result.delegated, trio.current_time()
        )

    # ---- the run's beginning -------------------------------------------------------------------

    async def _begin(self, started: float, end_at: float) -> RunState:
        """Record the run's input (and the conversation, if new), build its prompt and its state,
        and tell the run observers.

        Cancellation: as the log's append and the observers'.
        """
        io = self.io
        services = self.services
        text = services.redactor.redact_text(self.user_input)
        io.emit(RunStarted, input=io.redact_text(text))
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
            records.append(
                ConversationCreated(conversation_id=conversation_id, agent=self.agent.name, at=now)
            )
        redact = services.redactor.redact_text
        added = [
            ContextAdded(
                conversation_id=conversation_id,
                run_id=io.run_id,
                item=attrs.evolve(item, source=redact(item.source), text=redact(item.text)),
                at=now,
            )
            for item in self.context
        ]
        records += added
        records.append(
            UserInputRecorded(
                conversation_id=conversation_id,
                run_id=io.run_id,
                input_id=new_id("input"),
                kind="user",
                text=text,
                author=self.author,
                at=now,
            )
        )
        await io.record(*records)
        messages: list[Message] = [services.system]
        if history:
            messages += project_messages(history)
        messages += [UserMessage.text(record.item.as_message_text()) for record in added]
        messages.append(UserMessage.text(text))
        state = self.state = start(self._config(end_at), tuple(messages), started)
        if services.observers:
            await self._tell_started()
        return state

    def _config(self, end_at: float) -> RunConfig:
        services = self.services
        return RunConfig(
            policy=self.agent.policy,
            output=self.agent.output,
            compactor=services.compactor is not None,
            follow_ups=services.inbox is not None,
            redactor=services.redactor,
            describe=self.io.redact_text,
            count_tokens=services.count_tokens,
            end_at=end_at,
        )

    async def _begin_resumed(self, started: float, end_at: float) -> Transition:
        """Continue the run from its records (``Runtime.resume``): fold them into its state
        and first transition, and tell the run observers. Nothing is recorded here.

        Cancellation: as the observers'.
        """
        found = self._resuming
        assert found is not None
        services = self.services
        if services.tool_sources:
            self._take_tool_snapshots()  # the resumed turn's tools: what the sources offer now
        resumed = resume_point(
            found,
            config=self._config(end_at),
            toolkit=self.toolkit,
            system=services.system,
            limits=self.agent.policy.response_limits,
            now=started,
        )
        io = self.io
        self.user_input = resumed.text
        self.author = resumed.author
        io.author = resumed.author
        io.emit(RunStarted, input=resumed.text, resumed=True)
        io.logs.info("run resumed", records=len(found.records))
        self.state = resumed.state
        self._replay = resumed.replay
        if services.observers:
            await self._tell_started()
        return resumed.transition

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
        given: dict[Any, Any] = {}
        for snapshot in snapshots:
            for tool in snapshot.tools:
                if tool.name in taken:
                    self.io.logs.warning("tool source tool left out: name taken", tool=tool.name)
                    continue
                taken.add(tool.name)
                tools.append(tool)
                given[tool] = snapshot.handlers[tool.name]
        handlers, reconcilers = split_handlers(given)
        self.toolkit = Toolkit(*tools)
        self.turn_services = self.services.with_handlers(
            {**self.services.handlers, **handlers},
            {**self.services.reconcilers, **reconcilers} if reconcilers else None,
        )

    # ---- endings -------------------------------------------------------------------------------

    async def _complete(self, command: Complete) -> None:
        io = self.io
        response, output, finish = command.response, command.output, command.finish
        text = self.services.redactor.redact_text(response.text)
        encoded = encode(output) if output is not None else text
        state = self.state
        assert state is not None
        budget = state.budget
        record = RunCompletedRecord(
            conversation_id=io.conversation_id,
            run_id=io.run_id,
            output=encoded,
            finish_reason=finish,
            at=time.time(),
        )
        await io.record(record)
        # Nothing between the record and its event (see ``_fail``).
        self.terminal = io.emit(
            RunCompleted,
            text=text,
            output=output,
            finish_reason=finish,
            exhausted=command.exhausted,
            usage=budget.usage,
            turns=state.turn,
            tool_calls=budget.tool_calls,
        )
        io.logs.info(
            "run completed",
            finish_reason=finish,
            exhausted=command.exhausted,
            turns=state.turn,
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
            RunFailedRecord(
                conversation_id=io.conversation_id,
                run_id=io.run_id,
                error=error,
                reason=error.tag,
                at=time.time(),
            )
        )
        self.terminal = io.emit(RunFailed, error=error, usage=self.usage)
        io.logs.warning("run failed", error=error.tag, detail=repr(error))

    async def _record_interrupted(self) -> None:
        """Write the interruption and hand over ``RunInterrupted`` — the event also when the
        record cannot be written (logged): a run always ends, and whoever waits for it wakes."""
        io = self.io
        try:
            await io.record(
                RunFailedRecord(
                    conversation_id=io.conversation_id,
                    run_id=io.run_id,
                    error=None,
                    reason="interrupted",
                    at=time.time(),
                )
            )
        except Exception as unwritten:
            io.logs.warning(
                "run interrupted, and its record was not written",
                unwritten=io.redact_text(str(unwritten)),
            )
        finally:
            self.terminal = io.emit(RunInterrupted, reason="interrupted", usage=self.usage)
            io.logs.info("run interrupted", turns=self.turn, tool_calls=self.tool_calls_used)


_EFFECTS.update(
    {
        StartTurn: RunDriver._start_turn,
        AppendLater: RunDriver._append_later,
        CompleteTurn: RunDriver._complete_turn,
        TakeFollowUps: RunDriver._take_follow_ups,
        AnnounceRetry: RunDriver._announce_retry,
        Log: RunDriver._log,
        EnterGrace: RunDriver._enter_grace,
    }
)

#: The commands that wait, by class: awaited by the interpreter (see ``_drive``).
_WAITS: dict[type[Any], Callable[[Any, Any], Awaitable[Any]]] = {
    RequestModel: RunDriver._request,
    NextTurn: RunDriver._next_turn,
    RunBatch: RunDriver._batch,
    Complete: RunDriver._complete,
    Fail: RunDriver._end_failed,
    Suspend: RunDriver._suspend,
    RecordInputs: RunDriver._record_inputs,
    RecordFeedback: RunDriver._record_feedback,
    Compact: RunDriver._compact,
}


def _check_commands_are_all_handled() -> None:
    handled = _EFFECTS.keys() | _WAITS.keys()
    missing = [cls.__name__ for cls in get_args(Command) if cls not in handled]
    if missing:  # a new command the interpreter cannot perform is a bug at import, not mid-run
        raise TypeError(f"the run interpreter cannot perform {', '.join(missing)}")


_check_commands_are_all_handled()
