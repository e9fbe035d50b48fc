"""A run's outputs: numbered events, canonical records, redaction, backpressure and its log.

:class:`RunIO` is what every part of a run writes through — the turn loop, the model step, the tool
batch and compaction — and the only state it holds is about writing: the next event number, the
records waiting for the next append, where events go. The run's own state (prompt, budgets, turn)
stays with the driver; the parts that write here return what changed instead of reaching into it.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any, Final, Literal, Protocol, TypeVar, final, overload

from effectagent.core import (
    ApprovalRequest,
    ApprovalRequested,
    BudgetWarning,
    ChildBudget,
    CompactionPerformed,
    EventBase,
    ModelRetrying,
    ModelStarted,
    ReasoningDelta,
    Record,
    Redactor,
    RunCompleted,
    RunError,
    RunFailed,
    RunInterrupted,
    RunStarted,
    RunSuspended,
    SubagentCompleted,
    SubagentEvent,
    SubagentStarted,
    TextDelta,
    ToolCallDeclared,
    ToolCallFailed,
    ToolCallStarted,
    ToolCallSucceeded,
    ToolDefect,
    ToolFailure,
    ToolInvalidInput,
    ToolProgress,
    ToolRejected,
    ToolSuccess,
    ToolUnknownOutcome,
    TurnCompleted,
    TurnStarted,
    UsageDelta,
    UsageTotals,
)

from ._handover import TAKEN_EVENTS, EventQueue, RunReducer
from ._logging import RunLog
from ._seams import ConversationLog, RunListener

__all__ = ["RunIO", "bounded"]

E = TypeVar("E", bound=EventBase)

_MAX_ERROR_TEXT = 2000


def bounded(text: str) -> str:
    """``text`` cut to the length events, records and errors carry."""
    return text if len(text) <= _MAX_ERROR_TEXT else text[:_MAX_ERROR_TEXT] + "…"


class EventSink(Protocol):
    """Where a run's events go: ``runtime.run``'s reducer, a child run's forwarding to its
    parent's events, or a streamed run's :class:`~effectagent.engine._handover.EventQueue`."""

    def feed(self, event: EventBase) -> object:
        """Take the run's next event (False: its consumer is gone)."""
        ...


class Interruptible(Protocol):
    """The run whose events a :class:`RunIO` carries: interrupted when their consumer is gone."""

    def interrupt(self) -> None:
        """Ask the run to stop (does not wait)."""
        ...


@final
class _NobodyToInterrupt:
    """What a closed :class:`RunIO` holds instead of its run."""

    __slots__ = ()

    def interrupt(self) -> None:
        return None


_NOBODY: Final = _NobodyToInterrupt()


@final
class HeldEvents:
    """Events a run emitted while they were held back (:meth:`RunIO.hold_events`)."""

    __slots__ = ("events", "seq", "sink")

    def __init__(self, sink: EventSink, seq: int) -> None:
        self.sink = sink  # where events went before, and go again when the hold ends
        self.seq = seq  # the run's last event number when the hold began
        self.events: list[EventBase] = []

    def feed(self, event: EventBase) -> None:
        """Keep ``event`` (never "consumer lost")."""
        self.events.append(event)


@final
class _Listened:
    """A sink that shows each event to a run listener first. A listener that raises is logged
    and not asked again for this run: observing never changes what the run does."""

    __slots__ = ("failed", "listener", "logs", "sink")

    def __init__(self, sink: EventSink, listener: RunListener, logs: RunLog) -> None:
        self.sink = sink
        self.listener = listener
        self.logs = logs
        self.failed = False

    def feed(self, event: EventBase) -> object:
        if not self.failed:
            try:
                self.listener.on_event(event)
            except Exception as exc:
                self.failed = True
                self.logs.warning("run listener failed", error=type(exc).__name__)
        return self.sink.feed(event)


@final
class RunIO(RunLog):
    """Where one run's events, records and log lines go (``logs``: the run's :class:`RunLog`,
    which is this object); how its text is redacted."""

    __slots__ = (
        "_media",
        "_owner",
        "_owns_queue",
        "_pending",
        "_queue",
        "_seq",
        "_sink",
        "agent_name",
        "appended",
        "author",
        "conversation_id",
        "conversation_log",
        "redactor",
        "run_id",
    )

    def __init__(
        self,
        *,
        run_id: str,
        conversation_id: str,
        agent_name: str,
        conversation_log: ConversationLog,
        redactor: Redactor,
        events: EventSink,
        owner: Interruptible,
        author: str = "user",
        listener: RunListener | None = None,
        backpressure: EventQueue | None = None,
    ) -> None:
        self.run_id = run_id
        self.author = author  # who started the run (its principal)
        self.conversation_id = conversation_id
        self.agent_name = agent_name
        self.conversation_log = conversation_log  # the canonical records (``logs`` is structlog)
        self.redactor = redactor
        RunLog.__init__(self)
        # Where events go: a streamed run's queue, or ``run``'s reducer in the caller's task (or
        # a child run's parent). A sink that returns False has lost its consumer. A run whose
        # events reach a stream through another run's (a child's) waits for that stream's
        # consumer: ``backpressure``.
        self._owns_queue = isinstance(events, EventQueue)
        self._queue = events if isinstance(events, EventQueue) else backpressure
        # Objects, not bound methods: a run keeps no method object per seam while it waits.
        # A run without a listener pays nothing for that seam.
        self._sink = events if listener is None else _Listened(events, listener, self.logs)
        self._owner: Interruptible = owner
        self._seq = 0
        # Records that are true but wait for the run's next append, which writes them first (a
        # model response, with what its turn does next: one append per turn instead of two).
        self._pending: tuple[Record, ...] = ()
        #: Whether this run has appended anything so far.
        self.appended = False
        # The bytes of the media parts this run's tools returned, by digest, until their
        # settlements are committed (and kept beside the log): ``keep_media``/``take_media``.
        self._media: dict[str, bytes] | None = None

    @property
    def logs(self) -> RunLog:
        """The run's log lines (structlog; the records are ``conversation_log``'s)."""
        return self

    # ---- events ------------------------------------------------------------------------------

    # One overload per event class: its own fields, by keyword, as the class declares them (the
    # header is emit's to set). ``tests/engine/test_emit.py`` holds them to the classes.

    @overload
    def emit(self, cls: type[RunStarted], /, *, input: str, resumed: bool = ...) -> None: ...

    @overload
    def emit(self, cls: type[TurnStarted], /, *, turn: int, grace: bool = ...) -> None: ...

    @overload
    def emit(self, cls: type[ModelStarted], /, *, turn: int) -> None: ...

    @overload
    def emit(
        self,
        cls: type[ModelRetrying],
        /,
        *,
        turn: int,
        attempt: int,
        error_tag: str,
        message: str,
        delay: float,
        discard: bool,
    ) -> None: ...

    @overload
    def emit(self, cls: type[TextDelta], /, *, turn: int, text: str) -> None: ...

    @overload
    def emit(self, cls: type[ReasoningDelta], /, *, turn: int, text: str) -> None: ...

    @overload
    def emit(
        self,
        cls: type[ToolCallDeclared],
        /,
        *,
        turn: int,
        tool_call_id: str,
        tool_name: str,
        arguments: Any,
    ) -> None: ...

    @overload
    def emit(
        self, cls: type[ToolCallStarted], /, *, turn: int, tool_call_id: str, tool_name: str
    ) -> None: ...

    @overload
    def emit(
        self, cls: type[ToolProgress], /, *, turn: int, tool_call_id: str, tool_name: str, data: Any
    ) -> None: ...

    @overload
    def emit(
        self,
        cls: type[ToolCallSucceeded],
        /,
        *,
        turn: int,
        tool_call_id: str,
        tool_name: str,
        outcome: ToolSuccess,
    ) -> None: ...

    @overload
    def emit(
        self,
        cls: type[ToolCallFailed],
        /,
        *,
        turn: int,
        tool_call_id: str,
        tool_name: str,
        outcome: ToolRejected | ToolInvalidInput | ToolFailure | ToolDefect | ToolUnknownOutcome,
    ) -> None: ...

    @overload
    def emit(
        self,
        cls: type[ApprovalRequested],
        /,
        *,
        turn: int,
        tool_call_id: str,
        tool_name: str,
        request: ApprovalRequest,
    ) -> None: ...

    @overload
    def emit(
        self,
        cls: type[TurnCompleted],
        /,
        *,
        turn: int,
        finish_reason: str,
        usage: UsageTotals,
        model: str | None = ...,
    ) -> None: ...

    @overload
    def emit(
        self, cls: type[BudgetWarning], /, *, dimension: str, used: float, limit: float
    ) -> None: ...

    @overload
    def emit(
        self,
        cls: type[CompactionPerformed],
        /,
        *,
        turn: int,
        kind: str,
        covers_through: int,
        tokens_before: int,
        tokens_after: int,
        started_at: float = ...,
        model: str | None = ...,
        usage: tuple[UsageDelta, ...] = ...,
    ) -> None: ...

    @overload
    def emit(
        self,
        cls: type[SubagentStarted],
        /,
        *,
        turn: int,
        tool_call_id: str,
        tool_name: str,
        child_run_id: str,
        child_conversation_id: str,
        child_agent: str,
        budget: ChildBudget,
    ) -> None: ...

    @overload
    def emit(
        self,
        cls: type[SubagentEvent],
        /,
        *,
        turn: int,
        tool_call_id: str,
        child_run_id: str,
        event: EventBase,
    ) -> None: ...

    @overload
    def emit(
        self,
        cls: type[SubagentCompleted],
        /,
        *,
        turn: int,
        tool_call_id: str,
        child_run_id: str,
        status: Literal["completed", "failed", "interrupted"],
        usage: UsageTotals,
        turns: int,
        tool_calls: int,
    ) -> None: ...

    @overload
    def emit(
        self,
        cls: type[RunCompleted],
        /,
        *,
        text: str,
        output: Any,
        finish_reason: Literal["stop", "budget-exhausted"],
        exhausted: str | None,
        usage: UsageTotals,
        turns: int,
        tool_calls: int,
        model: str | None = ...,
    ) -> RunCompleted: ...

    @overload
    def emit(
        self, cls: type[RunFailed], /, *, error: RunError, usage: UsageTotals
    ) -> RunFailed: ...

    @overload
    def emit(
        self, cls: type[RunInterrupted], /, *, reason: str, usage: UsageTotals
    ) -> RunInterrupted: ...

    @overload
    def emit(
        self,
        cls: type[RunSuspended],
        /,
        *,
        reason: str,
        tool_call_ids: tuple[str, ...] = ...,
        usage: UsageTotals = ...,
    ) -> RunSuspended: ...

    def emit(self, cls: type[E], /, **fields: Any) -> E | None:
        """Number, stamp and hand over the run's next event of class ``cls``; return it if it
        is a terminal event (the caller keeps those), else None.

        ``fields`` are the event's own fields, by keyword (``io.emit(TurnStarted, turn=3)``);
        emit sets the header — ``run_id``, ``conversation_id``, ``agent``, ``seq``, ``at``. The
        overloads above type-check them against the class: a wrong, missing or positional field
        is a type error at the call, as it is a ``TypeError`` at run time whenever the event is
        built.

        An event that nobody would keep is numbered but not built: when the events reach only a
        :class:`~effectagent.engine._handover.RunReducer` (``runtime.run`` without a run
        listener, and no hold going), it takes a non-terminal event's fields instead
        (:meth:`~effectagent.engine._handover.RunReducer.take`). The numbers of the events built
        stay what they would be with every event built.

        Synchronous: handing over never waits, so events are numbered and handed over in one
        atomic step even when tool calls emit concurrently (the sequence is gap-free and in
        order). If the consumer is gone, the ``owner`` run is interrupted. Backpressure is
        separate (see :meth:`wait_for_consumer`).
        """
        seq = self._seq = self._seq + 1
        sink = self._sink
        if type(sink) is RunReducer and cls in TAKEN_EVENTS:
            sink.take(cls, fields)  # what the reducer notes of it, without the event
            return None
        event = cls(
            run_id=self.run_id,
            conversation_id=self.conversation_id,
            agent=self.agent_name,
            seq=seq,
            at=time.time(),
            **fields,
        )
        if sink.feed(event) is False:
            self._owner.interrupt()
        return event

    @property
    def queue(self) -> EventQueue | None:
        """The event queue of the stream this run's events reach (None for ``runtime.run``)."""
        return self._queue

    async def wait_for_consumer(self) -> None:
        """Backpressure: wait while a streamed run's consumer lags more than the buffer holds.

        Called where a run could otherwise produce events without bound (model deltas, tool
        progress, each turn). Cancellation: a checkpoint only when it has to wait.
        """
        queue = self._queue
        if queue is not None and queue.full:
            await queue.wait_for_room()

    def keep_media(self, blobs: Mapping[str, bytes]) -> None:
        """Keep the bytes of media parts a tool returned, by digest, until :meth:`take_media`."""
        if blobs:
            media = self._media
            if media is None:
                media = self._media = {}
            media.update(blobs)

    def take_media(self) -> dict[str, bytes]:
        """The media bytes kept since the last call (by digest); the run keeps them no more."""
        media, self._media = self._media, None
        return {} if media is None else media

    def hold_events(self) -> HeldEvents:
        """Hold back the events emitted from now on — numbered, not handed over — until
        :meth:`end_hold`. No other hold may be going."""
        held = HeldEvents(self._sink, self._seq)
        self._sink = held
        return held

    def end_hold(self, held: HeldEvents, *, hand_over: bool) -> None:
        """End ``held``: events go where they went before. With ``hand_over`` the held events are
        handed over now, in order; without, they are dropped and their numbers given back (the
        next event takes the first of them)."""
        self._sink = held.sink
        if not hand_over:
            self._seq = held.seq
            return
        for event in held.events:
            if held.sink.feed(event) is False:
                self._owner.interrupt()
        held.events.clear()

    def close(self) -> None:
        """No more events: a streamed run's consumer drains what is queued, then stops.

        Also lets go of its ``owner``: the driver and this object would otherwise keep each
        other alive after the run, for the garbage collector.
        """
        self._owner = _NOBODY
        if self._queue is not None and self._owns_queue:
            self._queue.close()

    # ---- records -----------------------------------------------------------------------------

    async def record(self, *records: Record) -> None:
        """Append the pending records (see :meth:`record_later`), then ``records``, atomically.

        Cancellation: all or nothing — if the append is cancelled, the pending records stay
        pending for the next one (every way a run ends appends a record).
        """
        pending = self._pending
        if pending:
            records = pending + records
        await self.conversation_log.append(self.conversation_id, records)
        self._pending = ()
        self.appended = True

    def record_later(self, record: Record) -> None:
        """Have ``record`` appended first by the run's next :meth:`record` (no checkpoint here).

        For records the run's next append may carry: a model response, which its turn's tool
        calls, settlements or ending follow; a turn's preparation, which goes with the turn's
        response (so a process that dies while the model is asked has recorded neither, and its
        resumed run prepares the turn once); the usage of a check's or a summary's model call.
        Every way a run ends appends, so none is lost but with the process. What reads the log
        for the run's prompt (a compaction) calls :meth:`flush` first.
        """
        self._pending += (record,)

    @property
    def pending(self) -> bool:
        """Whether records wait for the run's next append (:meth:`record_later`)."""
        return bool(self._pending)

    async def flush(self) -> None:
        """Append the pending records now, if there are any (see :meth:`record`).

        Cancellation: as :meth:`record`; nothing to do is no checkpoint."""
        if self._pending:
            await self.record()

    # ---- redaction ---------------------------------------------------------------------------

    def redact_text(self, text: str) -> str:
        """Redacted and length-bounded text for events, records, errors and log lines."""
        return bounded(self.redactor.redact_text(text))

    def redact(self, value: Any) -> Any:
        """A JSON value with what the redactor removes replaced."""
        return self.redactor.redact(value)
