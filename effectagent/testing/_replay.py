"""ReplayModel: a LanguageModel serving a cassette's responses in order, with no network, that
checks each request it receives against the recorded one.

A request that differs — another tool set, another prompt, a tool result missing or extra, a
request the recording never had — is a :class:`CassetteDivergence`, an ``AssertionError`` whose
message names the first differing message and field with both values, like a failing snapshot
test. It is raised from the model's stream (so the run fails, its ``EngineDefect`` quoting it)
and raised again when the runtime's block is left, so the test fails with the diff itself. Runs
that end while exchanges are left unplayed are a divergence too, reported at that point.

Matching is exact by default; ``ignore=`` leaves out paths and text patterns (see
:class:`~effectagent.testing._diff.Ignore`), and request fields the cassette says it does not
know (``unchecked`` in its header: an exported cassette has no tool set) are never compared.
"""

from __future__ import annotations

import functools
import re
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, final

import attrs
import trio

from effectagent.ai import (
    LanguageModelService,
    ModelRequest,
    ModelResponse,
    ResponsePart,
    generate,
)
from effectagent.core import Redactor
from effectagent.effect import Context, Layer

from ._cassette import Cassette, Exchange, decode_error, encode_request
from ._checks import seconds
from ._diff import MISSING, Difference, Ignore, first_difference, render_path, show_value
from ._record import redactor_of

__all__ = ["CassetteDivergence", "RecordedDefect", "ReplayModel"]


class CassetteDivergence(AssertionError):
    """A run asked the replayed model something the cassette does not hold. ``exchange`` is the
    request's number (from 1); ``path`` the first differing field (None when the run asked more
    or fewer times than recorded); ``recorded`` and ``received`` the values there."""

    def __init__(
        self,
        message: str,
        *,
        exchange: int,
        path: str | None = None,
        recorded: Any = None,
        received: Any = None,
    ) -> None:
        super().__init__(message)
        self.exchange = exchange
        self.path = path
        self.recorded = recorded
        self.received = received


class RecordedDefect(RuntimeError):
    """Replays an exchange whose model raised something other than a model error: raised as a
    subclass named as the recorded exception's class, so the run's ``EngineDefect`` reads the
    same."""


@functools.cache
def _defect_class(name: str) -> type[RecordedDefect]:
    return type(name if name.isidentifier() else "RecordedDefect", (RecordedDefect,), {})


def _defect(error: Mapping[str, Any]) -> RecordedDefect:
    return _defect_class(str(error.get("_tag", "RecordedDefect")))(str(error.get("message", "")))


def _ordinal(number: int) -> str:
    if 10 <= number % 100 <= 20:
        return f"{number}th"
    return f"{number}{ {1: 'st', 2: 'nd', 3: 'rd'}.get(number % 10, 'th') }"


def _side(recorded: Any, received: Any, index: int) -> Any:
    """The message at ``index`` on whichever side has it."""
    for request in (recorded, received):
        messages = request.get("messages", [])
        if index < len(messages):
            return messages[index]
    return {}


def _tool_names(request: Any) -> list[str]:
    tools = request.get("tools", [])
    if not isinstance(tools, list):
        return []
    return [t["name"] for t in tools if isinstance(t, dict) and isinstance(t.get("name"), str)]


def _tool_names_differ(recorded: Any, received: Any) -> str:
    """How the names of the tools offered differ: the same tools in another order, or the tools
    offered then and not now (and now and not then)."""
    then, now = _tool_names(recorded), _tool_names(received)
    gone = [f"tool {n!r} was offered then, not now" for n in then if n not in now]
    new = [f"tool {n!r} is offered now, not then" for n in now if n not in then]
    if gone or new:
        return "; ".join(gone + new)
    order = ", ".join(map(repr, now))
    return f"the same tools in another order ({order}; recorded: {', '.join(map(repr, then))})"


def _headline(difference: Difference, recorded: Any, received: Any) -> str:
    path = difference.path
    lacks = difference.received is MISSING
    extra = difference.recorded is MISSING
    if not path:
        return "the request differs"
    if path[0] == "tools" and len(path) > 1 and isinstance(path[1], int):
        side = recorded if lacks or not extra else received
        tools = side.get("tools", [])
        tool = tools[path[1]] if path[1] < len(tools) else None
        name = tool.get("name") if isinstance(tool, dict) else None
        if len(path) == 2 and lacks:
            return f"the tools offered differ: tool {name!r} was offered then, not now"
        if len(path) == 2 and extra:
            return f"the tools offered differ: tool {name!r} is offered now, not then"
        if path[2:] == ("name",):
            return f"the tools offered differ: {_tool_names_differ(recorded, received)}"
        return f"the tools offered differ: tool {name!r} has another {render_path(path[2:3])}"
    if path[0] == "messages" and len(path) > 1 and isinstance(path[1], int):
        message = _side(recorded, received, path[1])
        role = message.get("role", "?") if isinstance(message, dict) else "?"
        where = f"the {_ordinal(path[1] + 1)} message ({role})"
        if len(path) == 2:
            return f"{where} is {'missing' if lacks else 'one more than recorded'}"
        if role == "system":
            return "the system prompt differs"
        result = difference.recorded if lacks else difference.received
        if role == "tool" and len(path) == 4 and path[2] == "content" and isinstance(result, dict):
            call = f"{result.get('name')!r} call {result.get('id')!r}"
            if lacks:
                return f"a tool result is missing: the result of the {call}"
            if extra:
                return f"an extra tool result: the result of the {call}"
        return f"{where} differs"
    return f"the request's {render_path(path[:1])} differs"


def divergence_message(
    number: int, where: str, difference: Difference, recorded: Any, received: Any, ignore: Ignore
) -> str:
    """The message of a :class:`CassetteDivergence` at request ``number``."""
    path = difference.path
    lines = [
        f"request {number} diverges from exchange {number} of {where}: "
        f"{_headline(difference, recorded, received)}",
    ]
    if path[:1] == ("messages",) and len(path) > 1 and isinstance(path[1], int):
        message = _side(recorded, received, path[1])
        role = message.get("role", "?") if isinstance(message, dict) else "?"
        field = render_path(path[2:]) if len(path) > 2 else "(the whole message)"
        lines.append(f"  message: messages[{path[1]}] ({role}); field: {field}")
    else:
        lines.append(f"  field: {render_path(path)}")
    lines.append(f"  recorded: {show_value(difference.recorded, difference.received)}")
    lines.append(f"  received: {show_value(difference.received, difference.recorded)}")
    if ignore.rules:
        lines.append(f"  (ignoring: {', '.join(ignore.rules)})")
    return "\n".join(lines)


@final
class ReplayModel:
    """A LanguageModel playing a cassette (see the module notes).

    ``requests`` holds every request received, ``served`` how many exchanges were played, and
    ``divergence`` the first divergence, if any. ``check=False`` serves the responses in order
    without comparing requests (chaos runs change what a run sends); ``secrets``/``redactor``
    redact each received request as the recording was redacted before it is compared;
    ``part_delay`` waits that long on the Trio clock before each part (a finite number of
    seconds ≥ 0; anything else is refused when the model or its layer is made).
    """

    def __init__(
        self,
        cassette: Cassette | str | Path,
        *,
        ignore: Iterable[str | re.Pattern[str]] | Ignore = (),
        check: bool = True,
        secrets: Sequence[str] = (),
        redactor: Redactor | None = None,
        part_delay: float = 0.0,
    ) -> None:
        part_delay = seconds("part_delay", part_delay)  # before the cassette is read
        if not isinstance(cassette, Cassette | str | Path):
            raise TypeError(
                f"ReplayModel takes a Cassette or a cassette's path, got {type(cassette).__name__}"
            )
        if not isinstance(check, bool):
            raise TypeError(f"check must be a bool, got {type(check).__name__} {check!r:.40}")
        self._redactor = redactor_of(secrets, redactor)  # before the cassette is read, too
        self.where = "the cassette" if isinstance(cassette, Cassette) else str(cassette)
        self.cassette = cassette if isinstance(cassette, Cassette) else Cassette.read(cassette)
        self._ignore = Ignore.of(ignore)
        self._check = check
        self._part_delay = part_delay
        self.requests: list[ModelRequest] = []
        self.served = 0
        self.divergence: CassetteDivergence | None = None
        #: Read by the engine: whether the recorded model took the output schema natively.
        self.native_output = bool(self.cassette.model.get("native_output", False))
        #: Read by the engine: the name the recorded model's price is found by (the header's
        #: ``model_name`` when the recording wrote one, else the model layer's name).
        header = self.cassette.model
        named = header["model_name"] if "model_name" in header else header.get("name")
        self.model_name: str | None = named if isinstance(named, str) else None

    @staticmethod
    def layer(
        cassette: Cassette | str | Path,
        *,
        ignore: Iterable[str | re.Pattern[str]] = (),
        check: bool = True,
        secrets: Sequence[str] = (),
        redactor: Redactor | None = None,
        part_delay: float = 0.0,
    ) -> Layer:
        """A Layer providing a fresh ReplayModel of ``cassette`` (options as for the class) each
        time it is built; the file is read now, so a missing or malformed cassette fails here.
        Leaving the runtime's block raises the replay's :class:`CassetteDivergence`, if there
        was one."""
        options: dict[str, Any] = {
            "ignore": Ignore.of(ignore),
            "check": check,
            # Taken once: every fresh model of the layer redacts with the same secrets.
            "secrets": secrets if isinstance(secrets, str | bytes) else tuple(secrets),
            "redactor": redactor,
            "part_delay": part_delay,
        }
        first = ReplayModel(cassette, **options)  # read and checked now, not at build time
        read, where = first.cassette, first.where

        def fresh() -> ReplayModel:
            model = ReplayModel(read, **options)
            model.where = where
            return model

        return _layer_of(fresh)

    def as_layer(self) -> Layer:
        """This model as the LanguageModel service; leaving the runtime's block raises its
        divergence, if any."""
        return _layer_of(lambda: self)

    def check(self) -> None:
        """Raise the divergence, if any — also when runs asked for fewer exchanges than the
        cassette holds (unless made with ``check=False``)."""
        if self.divergence is not None:
            raise self.divergence
        total = len(self.cassette.exchanges)
        if self._check and self.served < total:
            left = self.cassette.exchanges[self.served]
            last = left.request.get("messages", [{}])[-1:] or [{}]
            times = "1 time" if self.served == 1 else f"{self.served} times"
            raise CassetteDivergence(
                f"the runs asked the model {times}, but {self.where} holds {total} exchanges: "
                f"exchange {left.number} was never asked for\n"
                f"  its request's last message: {show_value(last[0])}",
                exchange=left.number,
            )

    def _diverged(self, error: CassetteDivergence) -> CassetteDivergence:
        if self.divergence is None:
            self.divergence = error
        return error

    def _compare(self, number: int, exchange: Exchange, request: ModelRequest) -> None:
        received = encode_request(request)
        if self._redactor.active:
            received = self._redactor.redact(received)
        recorded = dict(exchange.request)
        for name in self.cassette.unchecked:
            recorded.pop(name, None)
            received.pop(name, None)
        difference = first_difference(recorded, received, self._ignore)
        if difference is not None:
            message = divergence_message(
                number, self.where, difference, recorded, received, self._ignore
            )
            raise self._diverged(
                CassetteDivergence(
                    message,
                    exchange=number,
                    path=render_path(difference.path),
                    recorded=None if difference.recorded is MISSING else difference.recorded,
                    received=None if difference.received is MISSING else difference.received,
                )
            )

    async def stream(self, request: ModelRequest) -> AsyncIterator[ResponsePart]:
        """Serve the next exchange's parts (after comparing ``request`` with the recorded one),
        then its recorded error, if it had one; a ``"cut"`` exchange waits, after its parts,
        until it is closed.

        Cancellation: cancellable where it waits (``part_delay``, a cut exchange's wait); parts
        without a delay are handed over without yielding to the scheduler.
        """
        self.requests.append(request)
        number = len(self.requests)
        if self.divergence is not None:
            raise self.divergence
        exchanges = self.cassette.exchanges
        if number > len(exchanges):
            held = "1 exchange" if len(exchanges) == 1 else f"{len(exchanges)} exchanges"
            last = request.messages[-1:] if request.messages else ()
            shown = show_value(encode_request(attrs.evolve(request, messages=last))["messages"])
            raise self._diverged(
                CassetteDivergence(
                    f"request {number} diverges from {self.where}: the run asked the model a "
                    f"{_ordinal(number)} time, but the cassette holds {held} — the run went on "
                    f"where the recording had ended\n  the request's last message: {shown}",
                    exchange=number,
                )
            )
        exchange = exchanges[number - 1]
        if self._check:
            self._compare(number, exchange, request)
        self.served += 1
        delay = self._part_delay
        for part in exchange.parts:
            if delay:
                await trio.sleep(delay)
            yield part
        if exchange.end == "error" and exchange.error is not None:
            raise decode_error(exchange.error)
        if exchange.end == "defect" and exchange.error is not None:
            raise _defect(exchange.error)
        if exchange.end == "cut":
            await trio.sleep_forever()

    async def generate(self, request: ModelRequest) -> ModelResponse:
        """The next exchange as one response.

        Cancellation: as :meth:`stream`; the stream is closed on every exit."""
        return await generate(self, request)


def _layer_of(make: Any) -> Layer:
    @asynccontextmanager
    async def serving(_: Context) -> AsyncIterator[ReplayModel]:
        model: ReplayModel = make()
        yield model
        model.check()

    return Layer.scoped(LanguageModelService, serving, name="ReplayModel")
