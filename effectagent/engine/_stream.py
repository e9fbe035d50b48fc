"""A run's events as the caller reads them: :class:`RunStream`, made by ``Runtime.stream``."""

from __future__ import annotations

from collections.abc import AsyncIterator
from types import TracebackType
from typing import TYPE_CHECKING, Any, Generic, Literal, final

import trio
from typing_extensions import TypeVar

from effectagent.core import TERMINAL_EVENTS, Event, ModelRetrying, TextDelta, TurnStarted

from ._driver import RunDriver
from ._handover import EventQueue

if TYPE_CHECKING:
    from ._runtime import Runtime

__all__ = ["Intent", "RunStream"]

#: The output type of a run's agent (``Agent[O]``), carried to its stream and its result.
OutputT = TypeVar("OutputT", covariant=True, default=Any)

#: What a run does with its conversation: start a new one with a fresh ID, continue one with
#: history, or create one under the caller's ID — or what ``resume`` does: continue a run.
Intent = Literal["new", "continue", "create", "resume"]


@final
class RunStream(Generic[OutputT]):
    """The events of one run, used as ``async with runtime.stream(...) as events:`` then
    ``async for event in events``.

    The run starts when the block is entered, as a task of the runtime. Events wait in a buffer of
    ``EVENT_BUFFER`` events (a turn may overshoot it by one tool batch); when it is full the run
    waits for the consumer. Leaving the block — at the end, by ``break``, by an exception —
    interrupts the run if it is still going and waits (shielded, briefly) until it has written its
    interruption, so no run outlives its consumer. Iterating a stream outside its block raises
    ``RuntimeError`` before anything starts: a plain ``async for`` that is left early would leave
    the run going unseen.

    Cancellation: if the consuming task is cancelled while waiting for an event, the run is
    interrupted.
    """

    __slots__ = (
        "_driver",
        "_entered",
        "_intent",
        "_queue",
        "_runtime",
        "_started",
        "_terminal_seen",
    )

    def __init__(
        self, runtime: Runtime, driver: RunDriver, queue: EventQueue, intent: Intent
    ) -> None:
        self._runtime = runtime
        self._driver = driver
        self._intent = intent
        self._queue = queue
        self._started = False
        self._entered = False
        self._terminal_seen = False

    @property
    def run_id(self) -> str:
        """This run's ID."""
        return self._driver.run_id

    @property
    def conversation_id(self) -> str:
        """The conversation this run belongs to."""
        return self._driver.conversation_id

    def interrupt(self) -> None:
        """Interrupt the run (it ends with RunInterrupted). Does not wait."""
        self._driver.interrupt()

    @property
    def permits_in_use(self) -> int:
        """How many of the run's ``tool_concurrency`` permits its tool calls hold right now
        (0 before its first batch and after the run ended — anything else then is a leak)."""
        return self._driver.permits_in_use

    async def stream_text(self) -> AsyncIterator[str]:
        """The answer's text as it streams, each item the *whole* text so far of the current model
        response (the other events are read and dropped) — redraw it, do not append it.

        Use inside the block: ``async with runtime.stream(...) as events: async for text in
        events.stream_text()``. The text starts over (the next item is shorter, or empty) when a
        new turn starts — text the model wrote before asking for tools is not the answer — and
        when a model call that had streamed text fails and is retried (``ModelRetrying`` with
        ``discard``): what that attempt showed never ends up in the answer, so a consumer that
        shows the latest item never shows it for longer than it streamed. The last item is the
        answer, ``RunResult.text``. (Each item is a new string: for very long answers read the
        ``TextDelta`` events, with their ``ModelRetrying`` discards, instead.)

        Cancellation: as iterating the events.
        """
        pieces: list[str] = []
        async for event in self:
            if isinstance(event, TextDelta):
                pieces.append(event.text)
                yield "".join(pieces)
            elif pieces and (
                isinstance(event, TurnStarted)
                or (isinstance(event, ModelRetrying) and event.discard)
            ):
                pieces.clear()
                yield ""

    async def __aenter__(self) -> RunStream[OutputT]:
        """Start the run. Raises :class:`ConversationBusy`, :class:`UnknownConversation` or
        :class:`ConversationExists` before it starts (nothing is written then).

        Cancellation: a cancellation point while a continued conversation's history is read
        (the run then never starts)."""
        if self._entered:
            raise RuntimeError("a run stream can be entered once")
        self._entered = True
        await self._runtime._start(self._driver, self._intent)
        self._started = True
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Interrupt the run if it is still going and wait until it has ended.

        Cancellation: waits shielded — interruption is prompt by construction.
        """
        if self._started and not self._driver.finished:
            self._driver.interrupt()
            with trio.CancelScope(shield=True):
                await self._driver.wait_done()
        self._queue.detach()

    def __aiter__(self) -> RunStream[OutputT]:
        if not self._entered:
            raise RuntimeError(
                "iterate a run's events inside its block: "
                "'async with runtime.stream(agent, text) as events: async for event in events' "
                "(leaving the block interrupts the run; a bare 'async for' left early would not)"
            )
        return self

    async def __anext__(self) -> Event:
        # Typed as the union of the run events, so that a ``match`` or an ``isinstance`` chain
        # over them narrows (and mypy can check one is exhaustive); each event a run emits is one.
        if self._terminal_seen:
            raise StopAsyncIteration
        try:
            event = await self._queue.get()
        except trio.Cancelled:
            self._driver.interrupt()
            raise
        if event is None:
            raise StopAsyncIteration
        if isinstance(event, TERMINAL_EVENTS):
            self._terminal_seen = True
        return event  # type: ignore[return-value]  # the queue holds the run's events only
