"""The turn loop of one run (DESIGN §4). A thin Trio driver around pure decisions.

Each turn: budgets and stop policy → drain steering → compaction → one streamed model response →
final answer, or the whole tool batch (see ``_batch``) committed in declaration order → loop. Exactly
one terminal event ends every run; the Conversation Log gets the canonical records as they become true.

Cancellation contract of :meth:`RunDriver.execute`: cancelling the run (caller, runtime close,
:meth:`RunDriver.interrupt`) stops the model stream and every tool task; unfinished tool calls of the
batch settle as interrupted defects; a ``RunFailedRecord`` and the ``RunInterrupted`` event are written
shielded; no task is left running.
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Callable, Mapping
from typing import Any, final

import trio

from effectagent.ai import (
    AiError,
    AssistantMessage,
    LanguageModel,
    Message,
    ModelRequest,
    ModelResponse,
    ReasoningDeltaPart,
    ReasoningEndPart,
    ResponseReducer,
    SystemMessage,
    TextDeltaPart,
    TextEndPart,
    Tool,
    UserMessage,
    close_stream,
)
from effectagent.core import (
    Agent,
    BudgetExhausted,
    BudgetWarning,
    ConversationCreated,
    EngineDefect,
    EventBase,
    FinalTurnDeclaredTools,
    ModelFailed,
    ModelResponseRecorded,
    ModelStarted,
    OutputInvalid,
    ReasoningDelta,
    Record,
    Redactor,
    RepeatedToolFailure,
    RunCompleted,
    RunCompletedRecord,
    RunError,
    RunFailed,
    RunFailedRecord,
    RunInterrupted,
    RunStarted,
    StreamRedactor,
    TextDelta,
    TurnCompleted,
    TurnStarted,
    UsageDelta,
    UserInputRecorded,
    assistant_message_of,
    project_messages,
)
from effectagent.effect import Semaphore
from effectagent.effect._schema import SchemaError, decode_json, encode

from ._batch import run_batch
from ._budget import BudgetState
from ._compaction import maybe_compact
from ._handover import EventQueue, RunReducer
from ._seams import (
    Approval,
    Compactor,
    ConversationLog,
    SteeringInbox,
    ToolAuthorization,
)

__all__ = ["RunDriver", "RunServices", "new_id"]

_MAX_ERROR_TEXT = 2000


# Identifiers are unique, not secret (nothing is authorized by knowing one): 64 random bits from a
# generator seeded by the OS, reseeded in a forked child so parent and child never share a stream.
# (``secrets.token_hex`` would cost a system call per identifier, three per run.) The hex digits
# are made 256 identifiers at a time, from one draw of random bits.
_ids = random.Random(os.urandom(32))
_suffixes: list[str] = []
_BATCH = 256


def _reseed_after_fork() -> None:
    _ids.seed(os.urandom(32))
    _suffixes.clear()


os.register_at_fork(after_in_child=_reseed_after_fork)


def _bounded(text: str) -> str:
    """``text`` cut to the length events, records and errors carry."""
    return text if len(text) <= _MAX_ERROR_TEXT else text[:_MAX_ERROR_TEXT] + "…"


def new_id(prefix: str) -> str:
    """A fresh opaque identifier (``prefix_`` + 16 hex digits)."""
    try:
        return f"{prefix}_{_suffixes.pop()}"
    except IndexError:  # used up (another thread may have taken the last one meanwhile): refill
        digits = f"{_ids.getrandbits(64 * _BATCH):0{16 * _BATCH}x}"
        _suffixes.extend(digits[i : i + 16] for i in range(0, 16 * _BATCH, 16))
        return new_id(prefix)


@final
class RunServices:
    """What a run needs from the runtime, resolved once per agent."""

    __slots__ = (
        "approval",
        "authorization",
        "compactor",
        "handlers",
        "inbox",
        "log",
        "model",
        "redactor",
        "system",
    )

    def __init__(
        self,
        *,
        model: LanguageModel,
        log: ConversationLog,
        redactor: Redactor,
        handlers: Mapping[Tool[Any, Any], Any],
        approval: Approval | None,
        authorization: ToolAuthorization | None,
        compactor: Compactor | None,
        inbox: SteeringInbox | None,
        system: SystemMessage,
    ) -> None:
        self.system = system  # the agent's instructions, the first message of every prompt
        self.model = model
        self.log = log
        self.redactor = redactor
        self.handlers = handlers
        self.approval = approval
        self.authorization = authorization
        self.compactor = compactor
        self.inbox = inbox


@final
class RunDriver:
    """One run: its identity, counters, prompt and event channel. Created by the runtime."""

    def __init__(
        self,
        services: RunServices,
        agent: Agent,
        user_input: str,
        *,
        run_id: str,
        conversation_id: str,
        events: EventQueue | RunReducer,
        author: str = "user",
        new_conversation: bool = False,
    ) -> None:
        self.services = services
        self.agent = agent
        self.agent_name = agent.name
        self.user_input = user_input
        self.author = author
        self.run_id = run_id
        self.conversation_id = conversation_id
        # The run made this conversation's ID up: it has no history to read.
        self.new_conversation = new_conversation
        # Records that are true but wait for the run's next append, which writes them first (a
        # model response, with what its turn does next: one append per turn instead of two).
        self._pending: tuple[Record, ...] = ()
        # Where events go: a streamed run's queue, or ``run``'s reducer in the caller's task. A
        # sink that returns False has lost its consumer.
        self._queue = events if isinstance(events, EventQueue) else None
        self._sink: Callable[[EventBase], object] = (
            events.put if isinstance(events, EventQueue) else events.feed
        )
        self._seq = 0
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
        self.turn = 0
        # Set by a batch that yielded to the scheduler (see ``_turns``).
        self.yielded = False
        # Whether the current turn's redaction can change anything (see ``_model_turn``).
        self.redacting = True
        # The redacted record content of the latest model response, reused for its prompt message.
        self._content: tuple[ModelResponse, tuple[tuple[str, Any], ...]] | None = None

    # ---- identity and emission ------------------------------------------------------------------

    def interrupt(self) -> None:
        """Ask the run to stop; it ends with RunInterrupted. Idempotent; does not wait."""
        self._interrupted = True
        if self.cancel_scope is not None:
            self.cancel_scope.cancel()

    def emit(self, cls: type[EventBase], *fields: Any) -> EventBase:
        """Number, stamp and hand over the run's next event; return it.

        Synchronous: handing over never waits, so events are numbered and handed over in one
        atomic step even when tool tasks emit concurrently (the sequence is gap-free and in order).
        If the consumer is gone, the run interrupts itself. Backpressure is separate (see
        :meth:`wait_for_consumer`).
        """
        seq = self._seq = self._seq + 1
        event = cls(self.run_id, self.conversation_id, self.agent_name, seq, time.time(), *fields)
        if self._sink(event) is False:
            self.interrupt()
        return event

    async def wait_for_consumer(self) -> None:
        """Backpressure: wait while a streamed run's consumer lags more than the buffer holds.

        Called where a run could otherwise produce events without bound (model deltas, tool
        progress, each turn). Cancellation: a checkpoint only when it has to wait.
        """
        queue = self._queue
        if queue is not None and queue.full:
            await queue.wait_for_room()

    def _emit_terminal(self, cls: type[EventBase], *fields: Any) -> None:
        self.terminal = self.emit(cls, *fields)

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

    async def record(self, *records: Record) -> None:
        """Append the pending records (see :meth:`record_later`), then ``records``, atomically.

        Cancellation: all or nothing — if the append is cancelled, the pending records stay
        pending for the next one (every way a run ends appends a record).
        """
        pending = self._pending
        if pending:
            records = pending + records
        await self.services.log.append(self.conversation_id, records)
        self._pending = ()

    def record_later(self, record: Record) -> None:
        """Have ``record`` appended first by the run's next :meth:`record` (no checkpoint here).

        Only for a record followed by another append before the turn ends, with no wait between:
        the model response, which its turn's tool calls, settlements or ending follow.
        """
        self._pending += (record,)

    def redact_text(self, text: str) -> str:
        """Redacted and length-bounded text for events, records and errors."""
        return _bounded(self.services.redactor.redact_text(text))

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
        # The run's deadline is set as the scope is made (cheaper than setting it on an entered
        # scope); a run interrupted before it started begins cancelled.
        scope = self.cancel_scope = trio.CancelScope(
            deadline=started + self.agent.policy.max_duration
        )
        if self._interrupted:
            scope.cancel()
        try:
            with scope:
                await self._main()
            if self.terminal is None and not self._interrupted:
                scope = self.cancel_scope = trio.CancelScope()
                with scope:
                    await self._exhausted()
        except Exception as exc:  # an engine or adapter defect: fail the run, not the runtime
            if self.terminal is None:
                with trio.CancelScope(shield=True):
                    await self._fail(EngineDefect(self.redact_text(f"{type(exc).__name__}: {exc}")))
        finally:
            if self.terminal is None:
                with trio.CancelScope(shield=True):
                    await self._record_interrupted()
            self.finished = True
            if self._queue is not None:
                self._queue.close()
            if self._done is not None:
                self._done.set()

    async def _record_interrupted(self) -> None:
        now = time.time()
        try:
            await self.record(
                RunFailedRecord(self.conversation_id, self.run_id, None, "interrupted", now)
            )
        finally:
            self._emit_terminal(RunInterrupted, "interrupted", self.budget.usage)

    async def _main(self) -> None:
        log = self.services.log
        text = self.services.redactor.redact_text(self.user_input)
        self.emit(RunStarted, _bounded(text))
        history = () if self.new_conversation else await log.entries(self.conversation_id)
        now = time.time()
        records: list[Record] = []
        if not history:
            records.append(ConversationCreated(self.conversation_id, self.agent.name, now))
        records.append(
            UserInputRecorded(
                self.conversation_id,
                self.run_id,
                new_id("input"),
                "user",
                text,
                self.author,
                now,
            )
        )
        await self.record(*records)
        self.messages = [self.services.system]
        if history:
            self.messages += project_messages(history)
        self.messages.append(UserMessage.text(text))

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
        await self._on_exhaustion(exhausted)

    async def _turns(self) -> RunError | None:
        """Turns until a final answer (terminal emitted) or exhaustion (returns None, no terminal)."""
        budget = self.budget
        services = self.services
        while True:
            # One scheduler yield per turn keeps runs fair to every other task even when the
            # model, the log and the event hand-over need no I/O (they only check cancellation).
            # A batch that ran in a nursery has just yielded on leaving it: then only check.
            if self.yielded:
                self.yielded = False
                await trio.lowlevel.checkpoint_if_cancelled()
            else:
                await trio.lowlevel.checkpoint()
            await self.wait_for_consumer()
            if services.inbox is not None:
                await self._drain_steering()
            if budget.exhausted(trio.current_time()) is not None:
                return None
            if services.compactor is not None:
                await maybe_compact(self)
            budget.start_turn()
            self.turn = budget.turns
            self.emit(TurnStarted, self.turn, False)
            response = await self._model_turn(self.turn, grace=False)
            if isinstance(response, RunError):
                return response
            if not response.tool_calls and not response.truncated_calls:
                follow_ups = self._take_follow_ups()
                if follow_ups:
                    self._append_assistant(response)
                    await self._admit_inputs(follow_ups)
                    await self._turn_completed(response)
                    continue
                # The answer ends the run: no later request needs it as an assistant message.
                await self._complete(response, "stop", None)
                return None
            failure = await run_batch(self, self.turn, response)
            await self._turn_completed(response)
            if failure is not None:
                return failure

    async def _turn_completed(self, response: ModelResponse) -> None:
        self.emit(TurnCompleted, self.turn, response.finish_reason, self.budget.usage)
        for dim, used, limit in self.budget.due_warnings(trio.current_time()):
            self.emit(BudgetWarning, dim, used, limit)

    async def _on_exhaustion(self, exhausted: tuple[str, float, float]) -> None:
        dim, used, limit = exhausted
        if dim == "repeated_failures" and self.budget.repeated_failure is not None:
            name, count = self.budget.repeated_failure
            if self.agent.policy.on_exhaustion == "fail":
                await self._fail(RepeatedToolFailure(name, count))
                return
        elif self.agent.policy.on_exhaustion == "fail":
            await self._fail(BudgetExhausted(dim, used, limit))
            return
        # "final-answer": exactly one grace turn, tool choice "none", fail closed on tool calls.
        with trio.move_on_after(self.agent.policy.grace_turn_duration) as grace_deadline:
            self.turn += 1
            self.emit(TurnStarted, self.turn, True)
            response = await self._model_turn(self.turn, grace=True)
            if isinstance(response, RunError):
                await self._fail(response)
                return
            if response.tool_calls or response.truncated_calls:
                names = tuple(c.name for c in response.tool_calls) + tuple(
                    c.name for c in response.truncated_calls
                )
                await self._fail(FinalTurnDeclaredTools(names))
                return
            self.emit(TurnCompleted, self.turn, response.finish_reason, self.budget.usage)
            await self._complete(response, "budget-exhausted", dim)
        if grace_deadline.cancelled_caught and self.terminal is None:
            await self._fail(BudgetExhausted(dim, used, limit))

    # ---- one model response ----------------------------------------------------------------------

    async def _model_turn(self, turn: int, *, grace: bool) -> ModelResponse | RunError:
        toolkit = self.agent.toolkit
        request = ModelRequest(
            tuple(self.messages),
            () if grace else toolkit.descriptors,
            "none" if grace or not len(toolkit) else "auto",
        )
        self.emit(ModelStarted, turn)
        reducer = ResponseReducer()
        feed = reducer.feed
        redactor = self.services.redactor
        # Whether redaction can change anything this turn (a redactor may say it has nothing to
        # redact); the turn's batch reads it too.
        self.redacting = getattr(redactor, "active", True)
        # A secret may span two deltas: a StreamRedactor holds back what could become one.
        streamed = StreamRedactor(redactor) if self.redacting else None
        stream = self.services.model.stream(request)
        queue = self._queue
        try:
            async for part in stream:
                cls = feed(part)
                if cls is TextDeltaPart or cls is ReasoningDeltaPart:
                    is_text = cls is TextDeltaPart
                    shown = (
                        part.delta  # type: ignore[union-attr]
                        if streamed is None
                        else streamed.feed((is_text, part.id), part.delta)  # type: ignore[union-attr]
                    )
                elif cls is TextEndPart or cls is ReasoningEndPart:
                    if streamed is None:
                        continue
                    is_text = cls is TextEndPart
                    shown = streamed.end((is_text, part.id))  # type: ignore[union-attr]
                else:
                    continue
                if shown:
                    self.emit(TextDelta if is_text else ReasoningDelta, turn, shown)
                    # ``wait_for_consumer`` inlined: no coroutine per delta when there is room.
                    if queue is not None and queue.full:
                        await queue.wait_for_room()
            response = reducer.finish()
        except AiError as exc:
            return ModelFailed(exc.tag, self.redact_text(str(exc)))
        finally:
            await close_stream(stream)
        usage = UsageDelta.from_usage(response.usage)
        self.budget.record_usage(usage)
        content = self._record_content(response)
        self._content = (response, content)
        self.record_later(
            ModelResponseRecorded(
                self.conversation_id,
                self.run_id,
                turn,
                content,
                response.finish_reason,
                usage,
                time.time(),
            )
        )
        return response

    def _record_content(self, response: ModelResponse) -> tuple[tuple[str, Any], ...]:
        redact = self.services.redactor.redact_text
        content: list[tuple[str, Any]] = []
        for kind, value in response.content:
            if kind == "tool-call":
                call: Any = value
                content.append(
                    (
                        "tool-call",
                        {"id": call.id, "name": call.name, "arguments": redact(call.arguments)},
                    )
                )
            else:
                content.append((kind, redact(str(value))))
        for truncated in response.truncated_calls:
            content.append(
                (
                    "tool-call",
                    {
                        "id": truncated.id,
                        "name": truncated.name,
                        "arguments": redact(truncated.partial_arguments),
                        "truncated": True,
                    },
                )
            )
        return tuple(content)

    def assistant_message(
        self, response: ModelResponse, parsed: Mapping[str, Any] | None = None
    ) -> AssistantMessage | None:
        """The assistant message the log projection gives for ``response`` (complete batch):
        :func:`assistant_message_of` its record content. ``parsed``: see there (the batch passes
        its parse of the arguments when redaction changes nothing)."""
        cached = self._content
        content = (
            cached[1]
            if cached is not None and cached[0] is response
            else self._record_content(response)
        )
        return assistant_message_of(content, parsed=parsed)

    def _append_assistant(self, response: ModelResponse) -> None:
        message = self.assistant_message(response)
        if message is not None:
            self.messages.append(message)

    # ---- endings -------------------------------------------------------------------------------

    async def _complete(self, response: ModelResponse, finish: Any, exhausted: str | None) -> None:
        text = self.services.redactor.redact_text(response.text)
        output: Any = None
        if self.agent.output is not None:
            try:
                # From the redacted text, like ``text``: a secret the model echoed must not
                # reach the event or the record through the structured output either.
                output = decode_json(self.agent.output, text)
            except SchemaError as exc:
                await self._fail(OutputInvalid(self.redact_text(str(exc))))
                return
        encoded = encode(output) if output is not None else text
        budget = self.budget
        await self._end(
            RunCompletedRecord(self.conversation_id, self.run_id, encoded, finish, time.time()),
            RunCompleted,
            text,
            output,
            finish,
            exhausted,
            budget.usage,
            self.turn,
            budget.tool_calls,
        )

    async def _fail(self, error: RunError) -> None:
        await self._end(
            RunFailedRecord(self.conversation_id, self.run_id, error, error.tag, time.time()),
            RunFailed,
            error,
            self.budget.usage,
        )

    async def _end(self, record: Record, cls: type[EventBase], *fields: Any) -> None:
        """Write the terminal record, then hand over the terminal event with nothing in between.

        Cancellation: the log's append is all-or-nothing (see ``ConversationLog.append``), and the
        event is handed over synchronously right after it returns — so a deadline or interruption
        either stops the ending before anything is written (the run then ends another way, once)
        or comes after both; it can never separate the record from its event or add a second
        terminal.
        """
        await self.record(record)
        self._emit_terminal(cls, *fields)

    # ---- steering, follow-ups, compaction ------------------------------------------------------------

    async def _drain_steering(self) -> None:
        inbox = self.services.inbox
        if inbox is None:
            return
        inputs = inbox.drain_steering(self.conversation_id)
        if inputs:
            await self._admit_inputs(inputs)

    def _take_follow_ups(self) -> list[Any]:
        inbox = self.services.inbox
        return list(inbox.take_follow_ups(self.conversation_id)) if inbox is not None else []

    async def _admit_inputs(self, inputs: Any) -> None:
        redact = self.services.redactor.redact_text
        records: list[Record] = [
            UserInputRecorded(
                self.conversation_id,
                self.run_id,
                i.input_id,
                i.kind,
                redact(i.text),
                i.author,
                i.at,
            )
            for i in inputs
        ]
        await self.record(*records)
        self.messages.extend(UserMessage.text(redact(i.text)) for i in inputs)
