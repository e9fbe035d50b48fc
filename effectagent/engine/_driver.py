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
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Literal, final, get_args

import trio

from effectagent.ai import Message, ModelRequest, ToolSnapshot, UserMessage
from effectagent.core import (
    Agent,
    BudgetWarning,
    ContextItem,
    EngineDefect,
    EventBase,
    LogEntry,
    ModelRetrying,
    ModelUsageRecorded,
    RunError,
    RunFailed,
    RunSuspended,
    StorageFailed,
    TurnCompleted,
    TurnStarted,
    UsageDelta,
    UsageTotals,
    UserInputRecorded,
)

from ._authoring import PromptOverride, TurnPreparer, prepare_turn, status_note_of
from ._batch import Batch
from ._budget import Exhaustion
from ._checks import BesideGuard, answer_checked, first_turns
from ._compaction import maybe_compact
from ._edges import RunEdges, RunEnds
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
    CheckAnswer,
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
    PrepareTurn,
    RecordFeedback,
    RecordInputs,
    RecordUsage,
    RequestModel,
    RunBatch,
    RunState,
    StartTurn,
    Suspend,
    TakeFollowUps,
    TimeRanOut,
    Transition,
    TurnDue,
    TurnPrepared,
    WarnBudget,
    step,
)
from ._media import recorded_parts, store_media
from ._model_step import (
    ModelStep,
    UsedCallIds,
    hidden_call_ids,
    id_bits,
    prompt_call_ids,
    response_id_bits,
    stream_model,
)
from ._output_modes import tools_offered
from ._permits import Permit, PermitPool
from ._resume import BatchReplay, FoundRun
from ._seams import ConversationLogError, RunInfo
from ._services import RunServices

__all__ = ["RunDriver"]

#: The commands that do not wait, by class: done synchronously by the interpreter (see ``_drive``).
_EFFECTS: dict[type[Any], Callable[[Any, Any], Any]] = {}

_jitter = random.Random()
_NEXT_TURN = NextTurn()
_NO_USAGE = UsageTotals()


@final
class RunDriver(RunEdges):
    """One run: its identity, its state (one :class:`RunState`) and the interpreter of its state
    machine. Created by the runtime (or by ``run_child`` for a child run)."""

    __slots__ = (
        "_done",
        "_hidden_ids",
        "_id_bits",
        "_interrupted",
        "_running_batch",
        "beside",
        "cancel_scope",
        "chosen_run_id",
        "depth",
        "finished",
        "lender",
        "may_delegate",
        "pool",
    )

    def __init__(
        self,
        services: RunServices,
        agent: Agent,
        user_input: str,
        *,
        run_id: str,
        conversation_id: str,
        events: EventSink,
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
            owner=self,
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
        self._told = 0
        # The batch running, or the last one (whether it left a nursery — a schedule point — is
        # for ``_next_turn``; an interrupted one is committed to the state by ``_drive``).
        self._running_batch: Batch | None = None
        # The tool-call IDs the conversation has used that the prompt does not hold (its
        # history's compacted calls, and the run's own that a compaction took out): with the
        # prompt's, a response's call that reuses one gets a fresh ID (``_model_step``). Found at
        # the first request or compaction; none, most often (then no set is kept).
        self._hidden_ids: frozenset[str] | None = None
        # Every ID the conversation has used, as a Bloom filter (``_model_step.UsedCallIds``).
        self._id_bits = 0
        # A run continued from its records (``Runtime.resume``): what they are, and the batch it
        # resumes (for its first batch only).
        self._resuming = resuming
        self._replay: BatchReplay | None = None
        # Whether the caller chose the run's ID (it must then be new to the conversation).
        self.chosen_run_id = False
        # Input guardrails beside the first model call (``_checks.BesideGuard``), if any.
        self.beside: BesideGuard | None = None
        # A typed input (``Agent.input``) as checked (set by the runtime: ``_authoring``); the
        # run's computed instructions and context hook, made at its first turn when it has them;
        # the prompt the hook gave for the current turn.
        self.run_input = None
        self.preparer: TurnPreparer | None = None
        self.prompt: PromptOverride | None = None

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
    def turns_used(self) -> int:
        """Model turns taken, the grace turn and the run's children's included."""
        state = self.state
        return 0 if state is None else state.turn + state.budget.delegated_turns

    @property
    def permits_in_use(self) -> int:
        """Permits of the run's pool held right now (0 before its first batch)."""
        return 0 if self.pool is None else self.pool.in_use

    def interrupt(self) -> None:
        """Ask the run to stop; it ends with RunInterrupted. Idempotent; does not wait."""
        self._interrupted = True
        if self.cancel_scope is not None:
            self.cancel_scope.cancel()

    def never_ran(self) -> None:
        """The run will not execute (refused, or cancelled, before it started): it counts as
        ended, and whoever waits for its end — a closing runtime — wakes."""
        if not self.finished:
            self.finished = True
            if self._done is not None:
                self._done.set()

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
        interrupted run never enters the exhaustion phase. An ordinary exception that a model
        stream or a seam raises as it is cancelled (a client reporting its closed connection) is
        logged, not taken for a failure: the run ends as its cancellation says (interrupted, or
        exhausted), and a cancellation of the caller's that is pending re-raises.
        """
        # What runs in this frame is what stays while a call waits (possibly many runs parked at
        # once): the rest — a resumed run, the exhaustion phase, a failure, the end — are
        # helpers of their own.
        started = trio.current_time()
        policy = self.agent.policy
        # The deadline is set as the scope is made (cheaper than setting it on an entered
        # scope); a run interrupted before it started begins cancelled.
        scope = self.cancel_scope = trio.CancelScope(
            deadline=started + policy.max_duration - policy.grace_reserve
        )
        if self._interrupted:
            scope.cancel()
        try:
            grace: EnterGrace | None = None
            with scope:
                try:
                    if self._resuming is not None:
                        grace = await self._resumed_turns(started)
                    else:
                        # No local keeps the first state: from here it is the driver's alone (a
                        # run parked in a tool call holds no stale copy of it, its budget and its
                        # usage).
                        await self._begin(started)
                        if self.agent.input_guardrails:  # before or beside the first turn
                            grace = await first_turns(self, self._current())
                        else:
                            grace = await self._drive((self._current(), (_NEXT_TURN,)))
                except Exception as exc:
                    if not self._raised_while_cancelled(scope, exc):
                        # The caller's cancellation, if it came meanwhile, is what ends the run.
                        await trio.lowlevel.checkpoint_if_cancelled()
                        raise
            if self.terminal is None and not self._interrupted:
                await self._exhausted(grace)
        except Exception as exc:  # storage failed, or a defect: fail the run, not the runtime
            if self.terminal is None:
                with trio.CancelScope(shield=True):
                    await self._failed_by(exc)
        finally:
            if self.terminal is None or self._observed is not None:
                with trio.CancelScope(shield=True):
                    await self._end_told()
            self._finish()

    def _raised_while_cancelled(self, scope: trio.CancelScope, exc: Exception) -> bool:
        """Whether ``exc`` — raised out of the run's turns — came as the run's scope was
        cancelled (interrupted, or its deadline passed); it is then logged and dropped, and the
        run ends as that cancellation says. A model stream or a seam that raises an ordinary
        exception as it is cancelled (a client reporting its closed connection) must not turn
        an interruption into a failure."""
        if not scope.cancel_called:
            return False
        io = self.io
        io.logs.warning(
            "run cancelled, and an error was raised meanwhile",
            error=type(exc).__name__,
            detail=io.redact_text(str(exc)),
        )
        return True

    async def _resumed_turns(self, started: float) -> EnterGrace | None:
        """The turns of a run continued from its records (``Runtime.resume``), as ``execute``'s.

        Cancellation: as :meth:`_drive`."""
        resumed = await self._begin_resumed(started)
        if self.agent.input_guardrails and resumed[0].turn == 0:
            # No turn was recorded: its input never got past the guardrails.
            return await first_turns(self, resumed[0])
        return await self._drive(resumed)

    async def _exhausted(self, grace: EnterGrace | None) -> None:
        """The exhaustion phase, in a fresh scope of its own: the grace turn (``grace``, or the
        machine's answer to the turns' deadline when None) under its own deadline, or the
        failure the machine decides.

        Cancellation: :meth:`interrupt` cancels this phase's scope. An ordinary exception
        raised as a scope of it is cancelled is taken for that cancellation (see
        :meth:`execute`).
        """
        scope = self.cancel_scope = trio.CancelScope()
        with scope:
            try:
                if grace is None:  # the turns' deadline passed
                    grace = await self._drive(self._step(TimeRanOut(trio.current_time())))
                if grace is not None:
                    with trio.move_on_at(grace.deadline) as grace_scope:
                        try:
                            await self._drive(self._step(GraceBegun(self._last_inputs())))
                        except Exception as exc:
                            if not self._raised_while_cancelled(grace_scope, exc):
                                raise
                    if grace_scope.cancel_called and self.terminal is None:
                        await self._drive(self._step(TimeRanOut(trio.current_time())))
            except Exception as exc:
                if not self._raised_while_cancelled(scope, exc):
                    await trio.lowlevel.checkpoint_if_cancelled()  # the caller's, if it came
                    raise

    async def _failed_by(self, exc: Exception) -> None:
        """The run raised ``exc`` (its storage failed, a part the user gave failed, or a
        defect): end it failed with ``StorageFailed``, the error :class:`RunEnds` carries, or
        ``EngineDefect``. The caller shields it."""
        io = self.io
        error: RunError
        if isinstance(exc, ConversationLogError):
            reason = io.redact_text(str(exc))
            error = StorageFailed(exc.conversation_id, exc.seq, reason)
        elif isinstance(exc, RunEnds):
            error = exc.error
        else:
            error = EngineDefect(io.redact_text(f"{type(exc).__name__}: {exc}"))
        try:
            await self._fail(error)
        except Exception as unwritten:
            # Not even the failure record could be written: the run still ends with its one
            # RunFailed event; the log lacks the end (said here).
            if self.terminal is None:
                self.terminal = io.emit(RunFailed, error=error, usage=self.usage)
            io.logs.warning(
                "run failed, and its failure record was not written",
                error=error.tag,
                unwritten=io.redact_text(str(unwritten)),
            )

    async def _end_told(self) -> None:
        """The run is over, whatever ended it: an interruption not written yet is, and the run
        observers are told. The caller shields it."""
        if self.terminal is None:
            await self._record_interrupted()
        if self._observed is not None:
            await self._tell_ended(self._observed)

    def _finish(self) -> None:
        """The run is over and told: its steps' results and its event sink's owner go, and
        whoever waits for the end is woken."""
        io = self.io
        forget = self.services.forget_steps
        if forget is not None and not isinstance(self.terminal, RunSuspended):
            forget(io.run_id)  # the run is over: its steps' results go
        self.finished = True
        io.close()
        if self._done is not None:
            self._done.set()

    def _current(self) -> RunState:
        state = self.state
        assert state is not None
        return state

    def _step(self, event: Input) -> Transition:
        return step(self._current(), event)

    async def _drive(self, transition: Transition) -> EnterGrace | None:
        """Perform transitions until the run ends (None) or enters its grace turn.

        Effects that do not wait (events, log lines, a pending record) are done through a table
        by command class; the commands that wait are awaited. A batch — always its transition's
        last command — runs once the loop over the commands is left: while its calls wait (for
        long, perhaps, and many runs at once), nothing of the transition is referenced here.
        Cancellation: as the commands performed (see each).
        """
        state, commands = transition
        del transition  # the first state is not kept for the whole run (see ``execute``)
        while True:
            self.state = state
            answer: Input | EnterGrace | None = None
            batch: RunBatch | None = None
            for command in commands:
                kind = type(command)
                effect = _EFFECTS.get(kind)
                if effect is not None:
                    answer = effect(self, command)
                elif isinstance(command, RunBatch):
                    batch = command  # the transition's last command: run once the loop is left
                else:
                    answer = await _WAITS[kind](self, command)
            if batch is not None:
                if commands[-1] is not batch:
                    raise AssertionError("a batch must be its transition's last command")
                # Its calls may wait for long (many runs parked at once): nothing of the
                # transition is kept meanwhile.
                running = self._batch(batch)
                del batch, command, commands
                try:
                    answer = await running
                except BaseException:
                    self._batch_interrupted()
                    raise
            if answer is None:
                return None
            if isinstance(answer, EnterGrace):
                return answer
            state, commands = step(state, answer)

    async def _record_inputs(self, command: RecordInputs) -> None:
        """Record admitted steering or follow-ups; the bytes of their media first, kept in the
        log's media store (a log that keeps none ends the run ``failed``: ``MediaNotKept``).

        Cancellation: the inputs were taken from the inbox, so an interruption never loses them:
        their media are stored shielded, and their records, if the append is cancelled, stay
        pending and are appended with the run's interruption (see ``RunIO.record``).
        """
        io = self.io
        contents = command.contents or (None,) * len(command.inputs)
        redact = io.redactor.redact_text
        for content in contents:
            if content is not None:
                with trio.CancelScope(shield=True):
                    await store_media(io.conversation_log, content, io.conversation_id)
        for i, text, content in zip(command.inputs, command.texts, contents, strict=True):
            io.record_later(
                UserInputRecorded(
                    conversation_id=io.conversation_id,
                    run_id=io.run_id,
                    input_id=i.input_id,
                    kind=i.kind,
                    text=text,
                    author=i.author,
                    at=i.at,
                    parts=() if content is None else recorded_parts(content, redact),
                )
            )
        await io.record()

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

    async def _prepare_turn(self, command: PrepareTurn) -> TurnPrepared:
        """Prepare the turn (``_authoring.prepare_turn``). Cancellation: as there."""
        return await prepare_turn(self, command)

    async def _compact(self, command: Compact) -> Compacted:
        state = self.state
        assert state is not None
        # The compactor reads the log for the prompt: a prepared turn's items must be in it.
        await self.io.flush()
        before = state.messages
        messages, usage, model = await maybe_compact(
            self.io,
            self.services,
            self.agent.policy,
            before,
            command.turn,
            estimate=command.estimate,
            force=command.force,
        )
        if messages is not None:  # the calls it took out of the prompt stay used
            hidden = self._hidden_ids
            if hidden is None:
                hidden = self._note_used_ids(before)
            gone = prompt_call_ids(before).difference(prompt_call_ids(messages))
            self._hidden_ids = hidden.union(gone) if gone else hidden
        return Compacted(messages, usage, model)

    def _note_used_ids(self, messages: Sequence[Message]) -> frozenset[str]:
        """Before the run's first request or compaction: note the tool-call IDs the
        conversation has used (its history's and its prompt's, ``messages``); return those the
        prompt does not hold."""
        in_prompt = prompt_call_ids(messages)
        hidden = self._hidden_ids = hidden_call_ids(self._history, in_prompt)
        self._id_bits = id_bits(in_prompt) | id_bits(hidden)
        return hidden

    async def _end_failed(self, command: Fail) -> None:
        await self._fail(command.error)

    # ---- the effects: commands that do not wait ------------------------------------------------

    def _start_turn(self, command: StartTurn) -> None:
        if not command.grace and self.services.tool_sources:
            self._take_tool_snapshots()
        self.io.emit(TurnStarted, turn=command.turn, grace=command.grace)

    def _append_later(self, command: AppendLater) -> None:
        record = command.record
        if record is not None:  # None: a resumed run's response is in the log already
            self.io.record_later(record)

    def _record_usage(self, command: RecordUsage) -> None:
        self.record_usage(command.turn, command.purpose, command.calls)

    def record_usage(
        self,
        turn: int,
        purpose: Literal["check", "compaction"],
        calls: Sequence[tuple[UsageDelta, str | None]],
    ) -> None:
        """Have a ``ModelUsageRecorded`` of each of ``calls`` (model calls made besides the
        turn's request, already counted in the budget) appended first by the run's next append.
        A run always appends again — its next response, its feedback, its end — so they are
        written with it; a process that dies first loses them, and its resumed run counts only
        what was written."""
        io = self.io
        now = time.time()
        for usage, model in calls:
            io.record_later(
                ModelUsageRecorded(
                    conversation_id=io.conversation_id,
                    run_id=io.run_id,
                    turn=turn,
                    purpose=purpose,
                    usage=usage,
                    at=now,
                    model=model,
                )
            )

    def _complete_turn(self, command: CompleteTurn) -> None:
        io = self.io
        io.emit(
            TurnCompleted,
            turn=command.turn,
            finish_reason=command.finish_reason,
            usage=command.usage,
            model=command.model,
        )
        self._warn(command.warnings)

    def _warn_budget(self, command: WarnBudget) -> None:
        self._warn(command.warnings)

    def _warn(self, warnings: Sequence[Exhaustion]) -> None:
        io = self.io
        for warning in warnings:
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

    def _last_inputs(self) -> tuple[Any, ...]:
        """The grace turn begins: take what the inbox holds (steering and follow-ups alike) for
        its prompt. The inbox hands out nothing twice, and once it has nothing left to hand
        out it refuses later submissions (``"run-ending"``): the run takes no more turns."""
        inbox = self.services.inbox
        if inbox is None:
            return ()
        conversation_id = self.io.conversation_id
        taken = tuple(inbox.take_follow_ups(conversation_id))
        if taken:  # a second look finds nothing, which marks the run as ending
            taken += tuple(inbox.take_follow_ups(conversation_id))
        return taken

    async def _next_turn(self, command: NextTurn | None = None) -> TurnDue:
        """The boundary between two turns: one scheduler yield (fairness), the consumer's
        backpressure, then the steering waiting to be admitted.

        Cancellation: a checkpoint; and while the consumer lags.
        """
        # One scheduler yield per turn keeps runs fair to every other task even when the model,
        # the log and the event hand-over need no I/O (they only check cancellation). A batch
        # that ran in a nursery has just yielded on leaving it: then only check.
        batch, self._running_batch = self._running_batch, None
        if batch is not None and batch.yielded:
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
        messages = sent = state.messages
        if self.prompt is not None:  # the prompt the turn's context hook gave
            sent = self.prompt.apply(state.turn, messages) or messages
        if policy.status_note:
            sent = (*sent, UserMessage.text(status_note_of(state, grace, trio.current_time())))
        request = ModelRequest(
            sent,
            *tools_offered(self.agent, toolkit, grace),
            policy.max_output_tokens,
            output=services.output,
            cache=policy.prompt_caching,
        )
        hidden = self._hidden_ids
        if hidden is None:
            hidden = self._note_used_ids(messages)
        if grace:  # the grace turn may have a model of its own (``Agent.grace_model``)
            model, name = services.grace_model, services.grace_model_name
        else:
            model, name = services.model, services.model_name
        beside = self.beside  # input guardrails beside the first call (``_checks``)
        stream = stream_model if beside is None or beside.done else beside.stream
        outcome = await stream(
            io,
            model,
            request,
            state.turn,
            limits=policy.response_limits,
            used_ids=UsedCallIds(messages, hidden, self._id_bits),
            name=name,
            prices=services.prices,
        )
        now = trio.current_time()
        if isinstance(outcome, ModelStep):
            self._id_bits |= response_id_bits(outcome.response)  # its calls' final IDs
            checked = () if beside is None else beside.take_usage()
            return ModelResponded(outcome, len(messages), toolkit, now, checked)
        deadline = trio.current_effective_deadline()
        return ModelCallFailed(outcome.error, outcome.streamed, now, deadline, _jitter.random())

    def _batch(self, command: RunBatch) -> Awaitable[BatchSettled | BatchSuspended]:
        """Run and commit the batch; what it changed is the machine's to apply. Returns the
        batch's run to await (``_drive`` awaits it): no frame of this method stays while a call
        waits.

        Cancellation: an interrupted batch is still committed (see ``Batch.run``): its messages
        and what its calls used reach the state (``_batch_interrupted``) before the cancellation
        propagates — the grace turn's prompt holds the whole batch.
        """
        self._running_batch = None  # until this one is made (see ``_batch_interrupted``)
        state = self._current()
        pool = self.pool
        if pool is None:
            pool = self.pool = PermitPool(self.agent.policy.tool_concurrency)
        scope = BatchScope(
            io=self.io,
            agent=self.agent,
            services=self.turn_services,
            toolkit=self.toolkit,
            turn=state.turn,
            depth=self.depth,
            may_delegate=self.may_delegate,
            budget=state.budget,
            pool=pool,
        )
        replay, self._replay = self._replay, None  # a resumed batch is the first one only
        batch = self._running_batch = Batch(
            scope=scope,
            policy=self.agent.policy,
            plan=command.plan,
            admitted=command.admitted,
            assistant=command.assistant,
            lender=self.lender,
            replay=replay,
            may_suspend=self.depth == 0 and self.turn_services.approval_suspends,
        )
        return batch.run(self.toolkit)

    def _batch_interrupted(self) -> None:
        """The running batch raised (interrupted, or its deadline passed): what it committed
        reaches the state."""
        batch = self._running_batch
        self._running_batch = None
        if batch is not None and batch.committed is not None:
            self.state, _ = step(
                self._current(), BatchInterrupted(batch.committed, batch.scope.delegated())
            )


_EFFECTS.update(
    {
        StartTurn: RunDriver._start_turn,
        AppendLater: RunDriver._append_later,
        RecordUsage: RunDriver._record_usage,
        CompleteTurn: RunDriver._complete_turn,
        WarnBudget: RunDriver._warn_budget,
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
    RunBatch: RunDriver._batch,  # performed by ``_drive`` itself, last (see there)
    Complete: RunDriver._complete,
    Fail: RunDriver._end_failed,
    Suspend: RunDriver._suspend,
    RecordInputs: RunDriver._record_inputs,
    RecordFeedback: RunDriver._record_feedback,
    PrepareTurn: RunDriver._prepare_turn,
    Compact: RunDriver._compact,
    CheckAnswer: answer_checked,
}


def _check_commands_are_all_handled() -> None:
    handled = _EFFECTS.keys() | _WAITS.keys()
    missing = [cls.__name__ for cls in get_args(Command) if cls not in handled]
    if missing:  # a new command the interpreter cannot perform is a bug at import, not mid-run
        raise TypeError(f"the run interpreter cannot perform {', '.join(missing)}")


_check_commands_are_all_handled()
