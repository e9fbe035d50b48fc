"""Where a run's events go: a stream consumer's queue, or ``run``'s reducer in the run's own task.

A run hands each event to one sink, synchronously (``RunIO.emit`` never waits), so events are
numbered and handed over in one atomic step even when tool tasks emit concurrently.

* ``runtime.stream`` — the sink is an :class:`EventQueue` read by the consumer's task. The producer
  applies backpressure where a run can produce events without bound (model deltas, tool progress,
  and once per turn): there it waits while the queue holds more than its limit. Elsewhere a turn
  adds a bounded number of events (those of one batch), so the queue overshoots its limit by at
  most one batch.
* ``runtime.run`` — the sink is :meth:`RunReducer.feed`: the same events, reduced by the same
  reducer ``reduce_events`` applies to a stream (RUN-001), without a task or a queue in between.
"""

from __future__ import annotations

from collections import deque
from collections.abc import AsyncIterator, Mapping
from operator import itemgetter
from typing import TYPE_CHECKING, Any, Final, Generic, Literal, cast, final, get_args, overload

import attrs
import trio
from typing_extensions import TypeVar

from effectagent.core import (
    Event,
    EventBase,
    RunCompleted,
    RunError,
    RunFailed,
    RunInterrupted,
    RunSuspended,
    ToolCallDeclared,
    ToolCallFailed,
    ToolCallSucceeded,
    ToolOutcome,
    UsageTotals,
)
from effectagent.effect import _fast_init

if TYPE_CHECKING:
    from ._stream import RunStream

__all__ = ["EventQueue", "RunFailedError", "RunReducer", "RunResult", "reduce_events"]

# Built once (a ``X | Y`` union in ``isinstance`` would be built for every event).
_SETTLED_EVENTS = (ToolCallSucceeded, ToolCallFailed)
_first = itemgetter(0)
# The terminal event classes, which the reducer keeps (the only events it keeps).
_TERMINAL_EVENTS = (RunCompleted, RunFailed, RunInterrupted, RunSuspended)
_TERMINAL = frozenset(_TERMINAL_EVENTS)
# The event classes the reducer only counts: every kind of event but the three it reads (exact
# classes; an event of a subclass takes the full path). A tuple, not a set display: mypy joins
# keyword-only event classes in a set into a constructor type they do not all fit.
_COUNTED_ONLY = frozenset(get_args(Event)).difference((ToolCallDeclared, *_SETTLED_EVENTS))
#: The event classes whose fields a :class:`RunReducer` takes without the event
#: (:meth:`RunReducer.take`): every kind of event but the terminal ones, which it keeps.
TAKEN_EVENTS: Final = frozenset(get_args(Event)).difference(_TERMINAL)

#: The output type of the run's agent (``Agent[O]``): a bare ``RunResult`` is ``RunResult[Any]``.
OutputT = TypeVar("OutputT", covariant=True, default=Any)
T = TypeVar("T")


class RunFailedError(Exception):
    """Raised by :meth:`RunResult.raise_for_status` and :meth:`RunResult.output_or_raise` for a
    run that did not complete; its message names the run's error and says what went wrong (as
    ``str(result.error)`` does: redacted like the run's events), and ``result`` is the run's
    result."""

    def __init__(self, result: RunResult[Any]) -> None:
        error = result.error
        detail = f"{error.tag}: {error}" if error is not None else result.status
        super().__init__(f"run {result.run_id} {result.status}: {detail}")
        self.result = result


@_fast_init
@attrs.frozen
class RunResult(Generic[OutputT]):
    """The reduction of a run's event stream.

    ``runtime.run`` on an ``Agent[O]`` gives a ``RunResult[O]``: ``output`` is the final answer
    decoded into the agent's output type — an ``O`` whenever the run completed — and None when
    it did not. An agent without an output type is an ``Agent[None]``: its answer is ``text``,
    and ``output`` is always None. :meth:`output_or_raise` is the output of a completed run, typed
    ``O``.
    """

    run_id: str
    conversation_id: str
    status: Literal["completed", "failed", "interrupted", "suspended"]
    text: str
    output: OutputT | None
    finish_reason: str | None
    exhausted: str | None
    error: RunError | None
    usage: UsageTotals
    outcomes: tuple[ToolOutcome, ...]
    events: int
    #: What each model's calls used — the turns', compaction summaries' and the subagents' — by
    #: the name the records give it (``ModelResponseRecorded.model``; None: the runtime's own
    #: model): ``usage.by_model`` as a mapping.
    usage_by_model: Mapping[str | None, UsageTotals] = attrs.Factory(dict)

    def raise_for_status(self) -> RunResult[OutputT]:
        """Return self if completed, else raise :class:`RunFailedError`."""
        if self.status != "completed":
            raise RunFailedError(self)
        return self

    def output_or_raise(self) -> OutputT:
        """The output of a completed run (None for an agent without an output type); raises
        :class:`RunFailedError` for a run that did not complete."""
        if self.status != "completed":
            raise RunFailedError(self)
        # Completed: the answer decoded into the agent's output type, or None for Agent[None].
        return cast(OutputT, self.output)


@final
class RunReducer:
    """Reduces a run's events, one at a time, to its :class:`RunResult`. Pure; no Trio."""

    __slots__ = ("_declared", "_settled", "count", "terminal")

    def __init__(self) -> None:
        # The calls in declaration order, and the settlements in completion order: ordered by
        # declaration only in ``result`` (a list now is less to keep while calls run; the
        # settlements' list is made with the first).
        self._declared: list[tuple[int, str]] = []
        self._settled: list[tuple[tuple[int, str], ToolOutcome]] | None = None
        self.count = 0
        #: The run's terminal event, once fed (no other event is kept).
        self.terminal: RunCompleted | RunFailed | RunInterrupted | RunSuspended | None = None

    def take(self, kind: type[EventBase], fields: Mapping[str, Any]) -> None:
        """Take the run's next event, of class ``kind`` (one of :data:`TAKEN_EVENTS`, exactly),
        by its own fields — what :meth:`feed` would note of the event, without the event: a run
        whose events reach only this reducer does not build the ones it would not keep."""
        self.count += 1
        if kind is ToolCallDeclared:
            self._declared.append((fields["turn"], fields["tool_call_id"]))
        elif kind is ToolCallSucceeded or kind is ToolCallFailed:
            settled = self._settled
            if settled is None:
                settled = self._settled = []
            settled.append(((fields["turn"], fields["tool_call_id"]), fields["outcome"]))

    def feed(self, event: EventBase) -> None:
        """Take the run's next event."""
        self.count += 1
        kind = type(event)
        if kind in _COUNTED_ONLY:  # most events: nothing more to note
            if kind in _TERMINAL:
                self.terminal = cast(
                    "RunCompleted | RunFailed | RunInterrupted | RunSuspended", event
                )
            return
        if isinstance(event, ToolCallDeclared):
            self._declared.append((event.turn, event.tool_call_id))
        elif isinstance(event, _SETTLED_EVENTS):
            settled = self._settled
            if settled is None:
                settled = self._settled = []
            settled.append(((event.turn, event.tool_call_id), event.outcome))
        elif isinstance(event, _TERMINAL_EVENTS):  # of a subclass
            self.terminal = event

    def _outcomes(self) -> tuple[ToolOutcome, ...]:
        """The settled calls' outcomes in declaration order (a call settled but never declared
        after every declared one, in completion order)."""
        settled = self._settled
        if not settled:
            return ()
        order: dict[tuple[int, str], int] = {}
        for index, key in enumerate(self._declared):
            order.setdefault(key, index)
        last = len(self._declared)
        ranked = sorted([(order.get(key, last), outcome) for key, outcome in settled], key=_first)
        return tuple([outcome for _, outcome in ranked])

    def result(self) -> RunResult[Any]:
        """The result; outcomes in declaration (commit) order, not completion order. (The
        reducer does not know the agent's output type: ``runtime.run`` says it.)

        Raises RuntimeError if no terminal event was fed.
        """
        last = self.terminal
        if last is None:
            # Not a wrong type of argument: the stream is incomplete.
            raise RuntimeError(
                "the run produced no events"
                if not self.count
                else f"the run's stream ended without a terminal event (after {self.count} events)"
            )
        outcomes = self._outcomes()
        status: Literal["completed", "failed", "interrupted", "suspended"]
        text, output, finish_reason, exhausted, error = "", None, None, None, None
        if isinstance(last, RunCompleted):
            status, usage = "completed", last.usage
            text, output, finish_reason, exhausted = (
                last.text,
                last.output,
                last.finish_reason,
                last.exhausted,
            )
        elif isinstance(last, RunFailed):
            status, usage, error = "failed", last.usage, last.error
        elif isinstance(last, RunInterrupted):
            status, usage = "interrupted", last.usage
        else:
            status, usage = "suspended", last.usage
        return RunResult(
            last.run_id,
            last.conversation_id,
            status,
            text,
            output,
            finish_reason,
            exhausted,
            error,
            usage,
            outcomes,
            self.count,
            dict(usage.by_model),
        )


@overload
async def reduce_events(events: RunStream[T]) -> RunResult[T]: ...
@overload
async def reduce_events(events: AsyncIterator[EventBase]) -> RunResult[Any]: ...
async def reduce_events(events: AsyncIterator[EventBase]) -> RunResult[Any]:
    """Reduce a run's event stream to its :class:`RunResult` (what ``runtime.run`` returns):
    of a ``runtime.stream`` of an ``Agent[O]``, a ``RunResult[O]``.

    Cancellation: as ``events``' own iteration (it adds no checkpoint of its own).
    """
    reducer = RunReducer()
    async for event in events:
        reducer.feed(event)
    return reducer.result()


@final
class EventQueue:
    """The events of one streamed run, from the run's task to the consumer's.

    ``put`` never blocks; the producer calls :meth:`wait_for_room` where it could otherwise add
    events without bound. ``close`` (producer: no more events) and ``detach`` (consumer: gone) end
    the hand-over from either side.
    """

    __slots__ = ("_consumer", "_items", "_limit", "_producer", "closed", "detached")

    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError(f"the event buffer limit must be at least 1, got {limit}")
        self._items: deque[EventBase] = deque()
        self._limit = limit
        # Parked at most one task on each side: the consumer waiting for an event, the producer
        # waiting for room.
        self._consumer = trio.lowlevel.ParkingLot()
        self._producer = trio.lowlevel.ParkingLot()
        self.closed = False
        self.detached = False

    def __len__(self) -> int:
        return len(self._items)

    def feed(self, event: EventBase) -> bool:
        """Queue ``event`` for the consumer; False if the consumer has gone (nothing queued).
        (The queue is the run's event sink: ``engine._io.EventSink``.)"""
        if self.detached:
            return False
        self._items.append(event)
        if self._consumer:
            self._consumer.unpark_all()
        return True

    @property
    def full(self) -> bool:
        """More events wait than the limit allows (the producer should wait for room)."""
        return len(self._items) > self._limit and not self.detached

    async def wait_for_room(self) -> None:
        """Wait until the consumer has taken enough that the queue is within its limit, or left.

        Cancellation: a checkpoint only when it has to wait; cancellable while waiting.
        """
        while self.full:
            await self._producer.park()

    def close(self) -> None:
        """The producer will put no more events; the consumer drains what is queued."""
        self.closed = True
        self._consumer.unpark_all()

    def detach(self) -> None:
        """The consumer is gone: drop what is queued, refuse more, release a waiting producer."""
        self.detached = True
        self._items.clear()
        self._producer.unpark_all()

    async def get(self) -> EventBase | None:
        """The next event, waiting for one if needed; None once closed and drained.

        Cancellation: a cancellation point; it yields to the scheduler only when it has to wait.
        """
        # Half of Trio's checkpoint pair when an event is ready: the cancellation point, without
        # the scheduler pass. A consumer draining a full queue would otherwise pay a scheduler pass
        # per event; the producer yields once per turn, which keeps the two tasks fair.
        await trio.lowlevel.checkpoint_if_cancelled()
        items = self._items
        while not items:
            if self.closed or self.detached:
                return None
            await self._consumer.park()
        event = items.popleft()
        if self._producer and len(items) <= self._limit:
            self._producer.unpark_all()
        return event
