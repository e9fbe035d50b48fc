"""A ``ServiceKey[T]`` keeps its service's type: a Layer (``succeed``, ``effect``, ``scoped``) or a
Context (``of``, ``add``) takes a ``T`` for it and nothing else, and what a Context gives back for
it — ``ctx[key]``, ``get``, ``require``, an instructions function's ``service`` — is a ``T``. A
tool's ``handler_key`` is the key of its handler, typed as ``bind`` types it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Protocol, assert_type

import attrs

from effectagent import Context, Layer, ServiceKey, Tool, ToolCallContext
from effectagent.core import InstructionsContext


class Clock(Protocol):
    def now(self) -> float: ...


class WallClock:
    def now(self) -> float:
        return 0.0


class Calendar:
    def today(self) -> str:
        return "2026-12-05"


CLOCK: ServiceKey[Clock] = ServiceKey("clock", "what time it is")

assert_type(Layer.succeed(CLOCK, WallClock()), Layer)
# E: Cannot infer value of type parameter "T" of "succeed" of "Layer"
Layer.succeed(CLOCK, Calendar())


async def wall_clock(context: Context) -> WallClock:
    return WallClock()


async def calendar(context: Context) -> Calendar:
    return Calendar()


@asynccontextmanager
async def opened_clock(context: Context) -> AsyncIterator[WallClock]:
    yield WallClock()


@asynccontextmanager
async def opened_calendar(context: Context) -> AsyncIterator[Calendar]:
    yield Calendar()


Layer.effect(CLOCK, wall_clock)
Layer.scoped(CLOCK, opened_clock, requires=[CLOCK])
# E: Argument 2 to "effect" of "Layer" has incompatible type "Callable[[Context], Coroutine[Any, Any, Calendar]]"; expected "Callable[[Context], Awaitable[Clock]]"
Layer.effect(CLOCK, calendar)
# E: Argument 2 to "scoped" of "Layer" has incompatible type "Callable[[Context], _AsyncGeneratorContextManager[Calendar, None]]"
Layer.scoped(CLOCK, opened_calendar)

context = Context.of(CLOCK, WallClock())
assert_type(context[CLOCK], Clock)
assert_type(context.get(CLOCK), Clock | None)
assert_type(context.get(CLOCK, 0.0), Clock | float)
assert_type(context.require(CLOCK), Clock)
# E: Cannot infer value of type parameter "T" of "of" of "Context"
Context.of(CLOCK, Calendar())
# E: Cannot infer value of type parameter "T" of "add" of "Context"
context.add(CLOCK, Calendar())
# E: "Clock" has no attribute "today"  [attr-defined]
context[CLOCK].today()


async def instructions(context: InstructionsContext[str]) -> str:
    assert_type(context.service(CLOCK), Clock)
    return f"It is {context.service(CLOCK).now()}."


# ---- a tool's handler is a service too: its key takes only a handler of the tool's types ------


@attrs.frozen
class Lookup:
    city: str


async def handle_lookup(params: Lookup, call: ToolCallContext) -> float:
    return 4.0


async def handle_text(params: Lookup, call: ToolCallContext) -> str:
    return params.city


lookup = Tool("lookup", "Look a city up.", parameters=Lookup, success=float)
Layer.succeed(lookup.handler_key, handle_lookup)
# E: Cannot infer value of type parameter "T" of "succeed" of "Layer"
Layer.succeed(lookup.handler_key, handle_text)
