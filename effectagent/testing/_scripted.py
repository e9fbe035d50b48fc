"""ScriptedModel: a LanguageModel that plays per-turn scripts — the deterministic model for tests,
benchmarks and the demo. It streams real deltas, can fail, hang or wait on the Trio clock (so it works
under ``MockClock``), records every request it received, and reports a script that ran out or was
left unconsumed.

Everything it will wait on or play is checked when it is made — a delay that is negative, NaN or
infinite, a turn that is not a :class:`Turn`, a part that is not a response part — so a mistake in
a script fails where it is written, not as an ``EngineDefect`` of the run that plays it.
"""

from __future__ import annotations

import json
import typing
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterable, Sequence
from contextlib import asynccontextmanager
from typing import Any, final

import attrs
import trio

from effectagent.ai import (
    FinishPart,
    FinishReason,
    InputTokens,
    LanguageModelService,
    ModelRequest,
    ModelResponse,
    ReasoningDeltaPart,
    ReasoningEndPart,
    ReasoningStartPart,
    ResponsePart,
    TextDeltaPart,
    TextEndPart,
    TextStartPart,
    ToolCallPart,
    ToolParamsDeltaPart,
    ToolParamsEndPart,
    ToolParamsStartPart,
    Usage,
    generate,
)
from effectagent.effect import Context, Layer
from effectagent.engine import estimate_tokens

from ._checks import seconds, whole

__all__ = ["ScriptExhausted", "ScriptedModel", "Turn", "UnconsumedScript"]


class ScriptExhausted(AssertionError):
    """The engine asked for more turns than were scripted. Raised from the model's stream, so
    the run fails with an ``EngineDefect`` quoting it; :meth:`ScriptedModel.check` (and a layer
    made with ``check=True``, when the runtime's block is left) raises it again."""


class UnconsumedScript(AssertionError):
    """Scripted turns were left over when the test asserted consumption
    (:meth:`ScriptedModel.assert_consumed`, :meth:`ScriptedModel.check`, or a layer made with
    ``check=True`` when the runtime's block is left)."""


def _chunks(text: str, size: int) -> list[str]:
    if size <= 0 or len(text) <= size:
        return [text] if text else []
    return [text[i : i + size] for i in range(0, len(text), size)]


def _check_delay(instance: object, attribute: attrs.Attribute[float], value: object) -> None:
    seconds(f"Turn.{attribute.name}", value)


def _check_parts(
    instance: object, attribute: attrs.Attribute[tuple[ResponsePart, ...]], value: object
) -> None:
    if not isinstance(value, tuple):
        raise TypeError(f"Turn.parts must be a tuple of response parts, got {value!r}")
    for index, part in enumerate(value):
        if not isinstance(part, ResponsePart):
            raise TypeError(
                f"Turn.parts[{index}] must be a response part (TextDeltaPart, FinishPart, …), "
                f"got {part!r}"
            )


def _check_flag(instance: object, attribute: attrs.Attribute[bool], value: object) -> None:
    if not isinstance(value, bool):
        raise TypeError(f"Turn.{attribute.name} must be a bool, got {value!r:.60}")


def _check_error(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if value is not None and not isinstance(value, Exception):
        hint = f" (give an instance: {value.__name__}(...))" if isinstance(value, type) else ""
        raise TypeError(
            f"Turn.error must be an exception to raise — a model error (AiError) or, to script "
            f"a defect, any other Exception — got {value!r:.60}{hint}"
        )


def _check_inspect(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if value is not None and not callable(value):
        raise TypeError(
            f"Turn.inspect must be a function of the request, got {type(value).__name__}"
        )


@attrs.frozen
class Turn:
    """One scripted model response. Build with the static constructors.

    A ``delay`` that is not a finite number of seconds ≥ 0 (or is a bool) is refused — a
    ``TypeError`` or ``ValueError`` — and so is a part that is not a response part, an
    ``error`` that is not an exception instance, an ``inspect`` that is not callable and a flag
    that is not a bool."""

    parts: tuple[ResponsePart, ...] = attrs.field(default=(), validator=_check_parts)
    delay: float = attrs.field(default=0.0, validator=_check_delay)
    hang: bool = attrs.field(default=False, validator=_check_flag)
    error: Exception | None = attrs.field(default=None, validator=_check_error)
    error_after_parts: bool = attrs.field(default=False, validator=_check_flag)
    inspect: Callable[[ModelRequest], None] | None = attrs.field(
        default=None, validator=_check_inspect
    )
    #: Report the request's own size as the input tokens (the token counter's estimate of its
    #: messages), as a provider would — set by :meth:`text` and :meth:`tool_calls` when no
    #: ``usage`` is given, so an agent's context limit and token budgets see a prompt that grows.
    counts_input: bool = attrs.field(default=False, validator=_check_flag)

    @staticmethod
    def text(
        text: str,
        *,
        usage: Usage | None = None,
        chunk: int = 16,
        reasoning: str = "",
        finish: FinishReason = "stop",
        delay: float = 0.0,
    ) -> Turn:
        """Stream ``text`` in ``chunk``-character deltas (after optional reasoning), then finish.

        ``text`` and ``reasoning`` must be strs, ``chunk`` a whole number ≥ 1 and ``finish`` a
        finish reason: anything else is a ``TypeError`` or ``ValueError`` here."""
        _check_text("Turn.text: text", text)
        _check_text("Turn.text: reasoning", reasoning)
        if finish not in _FINISH_REASONS:
            raise ValueError(
                f"Turn.text: finish must be one of {', '.join(_FINISH_REASONS)}, got {finish!r:.40}"
            )
        whole("Turn.text: chunk", chunk, minimum=1)
        _check_usage("Turn.text", usage)
        parts: list[ResponsePart] = []
        if reasoning:
            parts.append(ReasoningStartPart("r0"))
            parts.extend(ReasoningDeltaPart("r0", c) for c in _chunks(reasoning, chunk))
            parts.append(ReasoningEndPart("r0"))
        parts.append(TextStartPart("t0"))
        parts.extend(TextDeltaPart("t0", c) for c in _chunks(text, chunk))
        parts.append(TextEndPart("t0"))
        parts.append(FinishPart(finish, usage or Usage.of(0, max(1, len(text) // 4))))
        return Turn(tuple(parts), delay=delay, counts_input=usage is None)

    @staticmethod
    def tool_calls(
        *calls: tuple[str, Any] | tuple[str, Any, str],
        text: str = "",
        usage: Usage | None = None,
        chunk: int = 32,
        delay: float = 0.0,
        truncate_last: bool = False,
    ) -> Turn:
        """Declare tool calls ``(name, arguments[, id])``; arguments may be a JSON value or raw
        JSON text. ``truncate_last`` cuts the last call's arguments and finishes with "length".

        Each call must be a tuple of a name (str), its arguments and optionally its ID (str);
        arguments given as a value must be JSON (no NaN or infinities: write raw text to script
        arguments that are not JSON). Anything else is a ``TypeError`` or ``ValueError`` here."""
        _check_text("Turn.tool_calls: text", text)
        whole("Turn.tool_calls: chunk", chunk, minimum=1)
        if not isinstance(truncate_last, bool):
            raise TypeError(f"Turn.tool_calls: truncate_last must be a bool, got {truncate_last!r}")
        _check_usage("Turn.tool_calls", usage)
        parts: list[ResponsePart] = []
        if text:
            parts.extend((TextStartPart("t0"), TextDeltaPart("t0", text), TextEndPart("t0")))
        for index, call in enumerate(calls):
            name, arguments, call_id = _call(index, call)
            raw = arguments if isinstance(arguments, str) else _arguments_json(index, arguments)
            last = index == len(calls) - 1
            parts.append(ToolParamsStartPart(call_id, name))
            if truncate_last and last:
                parts.extend(
                    ToolParamsDeltaPart(call_id, c) for c in _chunks(raw[: len(raw) // 2], chunk)
                )
                break
            parts.extend(ToolParamsDeltaPart(call_id, c) for c in _chunks(raw, chunk))
            parts.append(ToolParamsEndPart(call_id))
            parts.append(ToolCallPart(call_id, name, raw))
        reason: FinishReason = "length" if truncate_last else "tool-calls"
        parts.append(FinishPart(reason, usage or Usage.of(0, 10 * max(1, len(calls)))))
        return Turn(tuple(parts), delay=delay, counts_input=usage is None)

    @staticmethod
    def raw(*parts: ResponsePart, delay: float = 0.0) -> Turn:
        """Exactly these parts (use to test malformed streams)."""
        return Turn(tuple(parts), delay=delay)

    @staticmethod
    def fail(error: Exception, *, after: Sequence[ResponsePart] = (), delay: float = 0.0) -> Turn:
        """Stream ``after`` parts, then raise ``error`` — a model error, or any other exception
        to script a model that crashes (an instance: anything else is a ``TypeError`` here)."""
        return Turn(tuple(after), delay=delay, error=error, error_after_parts=True)

    @staticmethod
    def hanging(*, after: Sequence[ResponsePart] = ()) -> Turn:
        """Stream ``after`` parts, then wait forever (until cancelled)."""
        return Turn(tuple(after), hang=True)

    def with_inspection(self, inspect: Callable[[ModelRequest], None]) -> Turn:
        """Call ``inspect(request)`` when this turn is played (assert on what the engine sent)."""
        return attrs.evolve(self, inspect=inspect)


#: The reasons a turn may finish with (``effectagent.ai.FinishReason``).
_FINISH_REASONS: tuple[str, ...] = typing.get_args(FinishReason)


def _check_text(what: str, value: object) -> None:
    if not isinstance(value, str):
        raise TypeError(f"{what} must be a str, got {type(value).__name__} {value!r:.60}")


def _check_usage(what: str, value: object) -> None:
    if value is not None and not isinstance(value, Usage):
        raise TypeError(f"{what}: usage must be a Usage (Usage.of(...)) or None, got {value!r:.60}")


def _call(index: int, call: object) -> tuple[str, Any, str]:
    """A scripted call ``(name, arguments[, id])`` as its three parts; a TypeError naming the
    call for anything else (a lone name, a list, an ID or name that is not a str)."""
    where = f"Turn.tool_calls: call {index}"
    if not isinstance(call, tuple) or len(call) not in (2, 3):
        raise TypeError(
            f"{where} must be a tuple (name, arguments) or (name, arguments, id), got {call!r:.80}"
        )
    name = call[0]
    call_id = call[2] if len(call) == 3 else f"call_{index}"
    if not isinstance(name, str):
        raise TypeError(f"{where}: the tool name must be a str, got {name!r:.60}")
    if not isinstance(call_id, str):
        raise TypeError(f"{where}: the call ID must be a str, got {call_id!r:.60}")
    return name, call[1], call_id


#: json.dumps' own output, refusing NaN and infinities (one encoder: dumps with an option builds
#: a new one for every call).
_ARGUMENTS = json.JSONEncoder(allow_nan=False)


def _arguments_json(index: int, arguments: object) -> str:
    """``arguments`` as JSON text; a ValueError or TypeError naming the call for a value that is
    not JSON (NaN, an infinity, an object json cannot write)."""
    try:
        return _ARGUMENTS.encode(arguments)
    except ValueError:
        raise ValueError(
            f"Turn.tool_calls: call {index}'s arguments hold NaN or an infinity, which JSON does "
            "not have; give raw text to script arguments that are not JSON"
        ) from None
    except TypeError as exc:
        raise TypeError(f"Turn.tool_calls: call {index}'s arguments are not JSON: {exc}") from None


def _script(turns: object) -> list[Turn]:
    """``turns`` as a list, each a :class:`Turn`; else a TypeError saying what was given."""
    wanted = "turns must be an iterable of Turn values"
    if isinstance(turns, str | bytes):
        kind = type(turns).__name__
        raise TypeError(f"{wanted}, not a lone {kind} (Turn.text(...) makes a text answer)")
    if isinstance(turns, Turn):
        raise TypeError(f"{wanted}, got a lone Turn: pass [turn]")
    if not isinstance(turns, Iterable):
        raise TypeError(f"{wanted}, got {type(turns).__name__}")
    script = list(turns)
    for index, turn in enumerate(script):
        if not isinstance(turn, Turn):
            hint = " (Turn.text(...) makes a text answer)" if isinstance(turn, str) else ""
            raise TypeError(f"turns[{index}] must be a Turn, got {turn!r}{hint}")
    return script


@final
class ScriptedModel:
    """A LanguageModel playing ``turns`` in order; ``repeat`` plays the last turn forever.

    ``turns`` must be :class:`Turn` values (a lone string or a lone Turn is a ``TypeError``) and
    ``part_delay`` — the Trio-clock wait before each part — a finite number of seconds ≥ 0.
    """

    def __init__(
        self, turns: Iterable[Turn] = (), *, repeat: bool = False, part_delay: float = 0.0
    ) -> None:
        if not isinstance(repeat, bool):
            raise TypeError(f"repeat must be a bool, got {repeat!r}")
        self._turns = _script(turns)
        if repeat and not self._turns:
            raise ValueError("repeat=True plays the last turn forever: give at least one turn")
        self._next = 0
        self._repeat = repeat
        self._part_delay = seconds("part_delay", part_delay)
        self._exhausted: ScriptExhausted | None = None
        self.requests: list[ModelRequest] = []

    @staticmethod
    def layer(
        turns: Iterable[Turn] = (),
        *,
        check: bool = False,
        repeat: bool = False,
        part_delay: float = 0.0,
    ) -> Layer:
        """A new ScriptedModel, made now, as the LanguageModel service (``check`` as for
        :meth:`as_layer`). It is one model: every runtime built from this layer plays the same
        script on from where the last one left it — make a layer for each runtime that should
        start from the first turn. To read the requests it receives, make the model yourself and
        use :meth:`as_layer`."""
        return ScriptedModel(turns, repeat=repeat, part_delay=part_delay).as_layer(check=check)

    def extend(self, turns: Iterable[Turn]) -> None:
        """Append more turns to the script."""
        self._turns.extend(_script(turns))

    @property
    def consumed(self) -> int:
        """Turns played so far."""
        return self._next

    @property
    def unconsumed(self) -> tuple[Turn, ...]:
        """Turns not yet played."""
        return tuple(self._turns[self._next :])

    def assert_consumed(self) -> None:
        """Raise :class:`UnconsumedScript` if scripted turns were never played."""
        if self._next < len(self._turns) and not self._repeat:
            left = len(self._turns) - self._next
            raise UnconsumedScript(f"{left} scripted turn(s) were never requested by the engine")

    def check(self) -> None:
        """Raise the :class:`ScriptExhausted` if the engine ever asked for more turns than were
        scripted (even if turns were added since), else :class:`UnconsumedScript` if scripted
        turns were never played (never with ``repeat``)."""
        if self._exhausted is not None:
            raise self._exhausted
        self.assert_consumed()

    def _take(self) -> Turn:
        if self._next < len(self._turns):
            turn = self._turns[self._next]
            self._next += 1
            return turn
        if self._repeat and self._turns:
            return self._turns[-1]
        exhausted = ScriptExhausted(
            f"the engine requested turn {self._next + 1} but only {len(self._turns)} were scripted"
        )
        if self._exhausted is None:
            self._exhausted = exhausted
        raise exhausted

    def stream(self, request: ModelRequest) -> AsyncIterator[ResponsePart]:
        """Play the next turn (raises :class:`ScriptExhausted` at once if there is none).

        Cancellation: cancellable wherever the script waits (``delay``, ``part_delay``, hangs);
        parts without a delay are handed over without yielding to the scheduler.
        """
        self.requests.append(request)
        # The turn's own generator is the stream: nothing wraps it, so nothing else needs closing.
        return play(self._take(), request, self._part_delay)

    def as_layer(self, *, check: bool = False) -> Layer:
        """This model as the LanguageModel service (keep the model to read its ``requests``).

        With ``check``, leaving the runtime's block without an error runs :meth:`check`: a
        script that ran out, or was left with turns unplayed, fails there — inside the
        ``ExceptionGroup`` a scope's teardown raises."""
        if not isinstance(check, bool):
            raise TypeError(f"check must be a bool, got {type(check).__name__} {check!r:.40}")
        if not check:
            return Layer.succeed(LanguageModelService, self, name="ScriptedModel")

        @asynccontextmanager
        async def serving(_: Context) -> AsyncIterator[ScriptedModel]:
            yield self
            self.check()

        return Layer.scoped(LanguageModelService, serving, name="ScriptedModel")

    async def generate(self, request: ModelRequest) -> ModelResponse:
        """The next turn as one response.

        Cancellation: as :meth:`stream` — the turn is taken as the call starts, and a cancelled
        call does not give it back; a turn with nothing to wait for is answered without a
        checkpoint, even to a caller already cancelled.
        """
        return await generate(self, request)


def _with_input(usage: Usage, request: ModelRequest) -> Usage:
    """``usage`` with the request's estimated size as its (uncached) input tokens."""
    tokens = estimate_tokens(request.messages)
    return attrs.evolve(usage, input=InputTokens(total=tokens, uncached=tokens))


async def play(
    turn: Turn, request: ModelRequest, part_delay: float = 0.0
) -> AsyncGenerator[ResponsePart, None]:
    """Stream ``turn``'s parts for ``request``, as a scripted model does: its ``inspect``, its
    ``delay``, ``part_delay`` before each part, then its error or its hang.

    Cancellation: cancellable wherever the turn waits; parts without a delay are handed over
    without yielding to the scheduler.
    """
    if turn.inspect is not None:
        turn.inspect(request)
    if turn.delay:
        await trio.sleep(turn.delay)
    counts_input = turn.counts_input
    for part in turn.parts:
        if part_delay:
            await trio.sleep(part_delay)
        if counts_input and type(part) is FinishPart:
            part = FinishPart(part.reason, _with_input(part.usage, request))
        yield part
    if turn.error is not None:
        raise turn.error
    if turn.hang:
        await trio.sleep_forever()
