"""A structured answer as it streams: ``runtime.stream_output(agent, text)`` — the partially
filled value as the JSON arrives, then the final, validated output.

Each :class:`OutputUpdate` holds ``partial``, the JSON value the answer's text so far stands for
(``engine._partial_json``: every completed field exactly as the final answer has it, the one
arriving as far as it goes, a number cut short left out) — a ``dict`` for an object — and, on
the last update only, ``output``: the answer decoded, validated and accepted by the agent's
checks (``final`` is then True). Partial values are not validated (a field may still be
missing, and the model may yet be asked again): show them, act on the final one.

The text restarts — and so do the partial values (the next is ``{}``) — when a new turn starts
(text before tool calls is not the answer; an answer sent back for a retry is not either) or a
model call that had streamed is retried. In the tool output mode the answer is a tool call's
arguments, which are not streamed as events: only the final update comes.
"""

from __future__ import annotations

from types import TracebackType
from typing import Any, Generic, cast, final

import attrs
import trio
from typing_extensions import TypeVar

from effectagent.core import ModelRetrying, Redactor, RunCompleted, TextDelta, TurnStarted

from ._handover import RunReducer, RunResult
from ._partial_json import INCOMPLETE, UNPARSABLE, parse_partial
from ._stream import RunStream

__all__ = ["OutputStream", "OutputUpdate", "partial_of"]

OutputT = TypeVar("OutputT", covariant=True, default=Any)


@final
@attrs.frozen
class OutputUpdate(Generic[OutputT]):
    """One step of a streamed answer: ``partial`` (the JSON value so far, not validated), and on
    the last update ``output`` (the validated answer) with ``final`` True."""

    partial: Any
    output: OutputT | None = None
    final: bool = False


def partial_of(text: str) -> Any:
    """The partial JSON value of an answer's text so far (a Markdown code fence the model opened
    is skipped), or ``INCOMPLETE`` / ``UNPARSABLE`` (see ``_partial_json``)."""
    body = text.lstrip()
    if body.startswith("```"):
        newline = body.find("\n")
        if newline == -1:
            return INCOMPLETE
        body = body[newline + 1 :].rstrip().rstrip("`")
    return parse_partial(body)


def _inside_string(text: str) -> bool:
    """Whether the JSON prefix ``text`` ends inside a string: after an odd number of quotes
    that no backslash escapes (outside strings, JSON has no backslash)."""
    inside = False
    at = text.find('"')
    while at != -1:
        start = at
        while start and text[start - 1] == "\\":
            start -= 1
        if not (inside and (at - start) % 2):  # an escaped quote does not close the string
            inside = not inside
        at = text.find('"', at + 1)
    return inside


def _cut_last(value: Any, redactor: Redactor) -> Any:
    """``value`` with its last string (the one arriving) cut before the end that could still
    grow into a secret."""
    if isinstance(value, str):
        return value[: len(value) - redactor.partial_secret_suffix(value)]
    if isinstance(value, dict) and value:
        last = next(reversed(value))
        return {**value, last: _cut_last(value[last], redactor)}
    if isinstance(value, list) and value:
        return [*value[:-1], _cut_last(value[-1], redactor)]
    return value


def redacted_partial(partial: Any, text: str, redactor: Redactor) -> Any:
    """``partial`` (the value of the JSON prefix ``text``) as the consumer may see it.

    The text's deltas are redacted as written, with a possible secret's start held back; a
    secret spelled with JSON escapes (``\\u0043...``) appears only once decoded. So a text with
    an escape has its value redacted as JSON, and the string still arriving cut before what could
    still grow into a secret. A text without a backslash is returned as it is, at no cost.
    """
    if "\\" not in text:
        return partial
    value = redactor.redact(partial)
    return _cut_last(value, redactor) if _inside_string(text) else value


@final
class OutputStream(Generic[OutputT]):
    """The updates of one run's structured answer, used as ``async with
    runtime.stream_output(agent, text) as updates: async for update in updates`` (see the module
    notes). Entering and leaving the block are those of the run's :class:`RunStream` (leaving it
    interrupts the run if it is still going); :attr:`result` is the run's result once the
    updates ended.

    ``redactor`` (the runtime's, given by ``runtime.stream_output``) redacts the partial values
    of an answer that spells a secret with JSON escapes, which its text's deltas show as written
    (see :func:`redacted_partial`).

    Cancellation: as iterating the run's events (a cancelled consumer interrupts the run).
    """

    __slots__ = ("_done", "_events", "_parsing", "_pieces", "_redactor", "_reducer", "_shown")

    def __init__(self, events: RunStream[OutputT], *, redactor: Redactor | None = None) -> None:
        self._events = events
        self._redactor = redactor
        self._reducer = RunReducer()
        self._pieces: list[str] = []  # the current response's text
        self._shown: Any = INCOMPLETE  # the last partial value given
        self._parsing = True  # False once the text is not JSON (until it restarts)
        self._done = False

    @property
    def events(self) -> RunStream[OutputT]:
        """The run's event stream (its ID, ``interrupt``)."""
        return self._events

    @property
    def result(self) -> RunResult[OutputT]:
        """The run's result, once the updates ended or the block was left (``RuntimeError``
        before): completed with the output of the final update, or how it ended otherwise
        (``"interrupted"`` for a loop left early)."""
        if self._reducer.terminal is None:  # not "the run produced no events": it is going
            raise RuntimeError(
                "the run has not ended yet: read the result once the updates ended or the "
                "'async with' block was left"
            )
        return cast("RunResult[OutputT]", self._reducer.result())

    async def __aenter__(self) -> OutputStream[OutputT]:
        """Start the run (as ``RunStream.__aenter__``, raising what it raises).

        Cancellation: as ``RunStream.__aenter__`` (the run then never starts)."""
        await self._events.__aenter__()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Interrupt the run if it is still going and wait until it has ended; the events not
        read yet (a loop left by ``break``) are reduced, so :attr:`result` says how it ended.

        Cancellation: waits shielded, as ``RunStream.aclose``."""
        events = self._events
        if self._reducer.terminal is None:  # left before the run's end: read it to the end
            events.interrupt()
            with trio.CancelScope(shield=True):
                async for event in events:
                    self._reducer.feed(event)
        await events.__aexit__(exc_type, exc, tb)

    def __aiter__(self) -> OutputStream[OutputT]:
        self._events.__aiter__()  # outside the block: RuntimeError, as for the events
        return self

    async def __anext__(self) -> OutputUpdate[OutputT]:
        """The next update (``StopAsyncIteration`` after the final one, or when the run ended
        without an answer).

        Cancellation: a cancellation point while waiting for events; cancelled, the run is
        interrupted (as iterating its events)."""
        if self._done:
            raise StopAsyncIteration
        events = self._events
        while True:
            event = await events.__anext__()  # StopAsyncIteration at the end: ours too
            self._reducer.feed(event)
            update = self._update(event)
            if update is not None:
                return update

    def _update(self, event: Any) -> OutputUpdate[OutputT] | None:
        """What ``event`` changes of the answer: an update to give, or None."""
        pieces = self._pieces
        if isinstance(event, TextDelta):
            pieces.append(event.text)
            if not self._parsing:
                return None
            text = "".join(pieces)
            partial = partial_of(text)
            if partial is UNPARSABLE:
                self._parsing = False  # not JSON (prose): the answer is decoded strictly
                return None
            if partial is not INCOMPLETE and self._redactor is not None:
                partial = redacted_partial(partial, text, self._redactor)
            if partial is not INCOMPLETE and partial != self._shown:
                self._shown = partial
                return OutputUpdate(partial)
            return None
        if isinstance(event, TurnStarted) or (isinstance(event, ModelRetrying) and event.discard):
            pieces.clear()
            self._parsing = True
            if self._shown is not INCOMPLETE:
                self._shown = INCOMPLETE
                return OutputUpdate({})
            return None
        if isinstance(event, RunCompleted):
            self._done = True
            text = "".join(pieces)
            final = partial_of(text) if pieces else INCOMPLETE
            if final is INCOMPLETE or final is UNPARSABLE:
                final = None if self._shown is INCOMPLETE else self._shown
            elif self._redactor is not None:
                final = redacted_partial(final, text, self._redactor)
            return OutputUpdate(final, event.output, True)
        return None
