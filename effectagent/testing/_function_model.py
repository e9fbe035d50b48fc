"""FunctionModel: a test model whose every response is computed from the request it answers.

A :class:`~effectagent.testing.ScriptedModel` plays one script in order, whoever asks: two runs
sharing it take turns from the same list, so under concurrency a run can get another run's turn.
A FunctionModel has no script position at all — ``fn(request)`` decides each response from the
request alone (its messages, tools, output schema), so any number of concurrent runs each get the
answer meant for them.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import aclosing
from typing import TypeAlias, final

from effectagent.ai import (
    LanguageModelService,
    ModelRequest,
    ModelResponse,
    ResponsePart,
    generate,
)
from effectagent.effect import Layer

from ._checks import seconds
from ._scripted import Turn, play

__all__ = ["FunctionModel", "Respond"]

#: What ``fn`` may return: a :class:`Turn`, its parts, or a plain text answer.
Reply: TypeAlias = Turn | Sequence[ResponsePart] | str
#: A function from the request to the reply, plain or async.
Respond: TypeAlias = Callable[[ModelRequest], Reply | Awaitable[Reply]]


@final
class FunctionModel:
    """A LanguageModel answering each request with ``fn(request)`` (see the module notes).

    ``fn`` returns a :class:`Turn` (anything a scripted turn can do: tool calls, reasoning,
    errors, delays, hangs), a sequence of response parts, or a string (a text answer). ``requests``
    holds every request received, in arrival order. ``part_delay`` (the Trio-clock wait before
    each part) must be a finite number of seconds ≥ 0. An ``fn`` that is not callable with the
    request alone is a ``TypeError`` here, not a failed run later.
    """

    def __init__(self, fn: Respond, *, part_delay: float = 0.0) -> None:
        if not callable(fn):
            raise TypeError(f"FunctionModel needs a callable, got {type(fn).__name__}")
        if not _takes_one(fn):
            raise TypeError(
                "FunctionModel needs a function of the request, fn(request), but "
                f"{getattr(fn, '__qualname__', None) or type(fn).__name__} takes "
                f"{inspect.signature(fn)}"
            )
        self._fn = fn
        self._part_delay = seconds("part_delay", part_delay)
        self.requests: list[ModelRequest] = []

    @staticmethod
    def layer(fn: Respond, *, part_delay: float = 0.0) -> Layer:
        """A fresh FunctionModel as the LanguageModel service."""
        return FunctionModel(fn, part_delay=part_delay).as_layer()

    def as_layer(self) -> Layer:
        """This model as the LanguageModel service (keep the model to read its ``requests``)."""
        return Layer.succeed(LanguageModelService, self, name="FunctionModel")

    async def stream(self, request: ModelRequest) -> AsyncIterator[ResponsePart]:
        """Stream the reply ``fn`` gives for ``request``.

        Cancellation: cancellable while an async ``fn`` runs and wherever the turn waits.
        """
        self.requests.append(request)
        reply = self._fn(request)
        if type(reply) is not Turn and inspect.isawaitable(reply):
            reply = await reply
        turn = _as_turn(reply)
        if _plain(turn) and not self._part_delay:
            # Nothing to wait for or inspect: the parts as they are, without a second generator.
            for part in turn.parts:
                yield part
            return
        # The inner generator is closed with this one (a cancelled run closes this stream).
        async with aclosing(play(turn, request, self._part_delay)) as parts:
            async for part in parts:
                yield part

    async def generate(self, request: ModelRequest) -> ModelResponse:
        """The reply as one response.

        Cancellation: as :meth:`stream` — the request is recorded and a plain ``fn`` called as
        the call starts; a reply with nothing to wait for is returned without a checkpoint, even
        to a caller already cancelled.
        """
        return await generate(self, request)


def _takes_one(fn: Callable[..., object]) -> bool:
    """Whether ``fn`` can be called with one positional argument; a callable whose signature
    cannot be read (some builtins) is given the benefit of the doubt."""
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        return True
    try:
        signature.bind(None)
    except TypeError:
        return False
    return True


def _plain(turn: Turn) -> bool:
    """Whether ``play`` would hand over ``turn``'s parts exactly as they are and end there."""
    return (
        turn.inspect is None
        and not turn.delay
        and not turn.counts_input
        and turn.error is None
        and not turn.hang
    )


def _as_turn(reply: object) -> Turn:
    if isinstance(reply, Turn):
        return reply
    if isinstance(reply, str):
        return Turn.text(reply)
    if isinstance(reply, Sequence):
        return Turn.raw(*reply)
    raise TypeError(
        f"a FunctionModel's function must return a Turn, response parts or a string, "
        f"got {type(reply).__name__}"
    )
