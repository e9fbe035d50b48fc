"""A handler bound to a ``Tool[P, S]`` must be ``async (P, ToolCallContext) -> S`` (or a
``returns`` ``Result[S, E]``), however it is bound: ``tool.bind``, ``Tool(handler=...)``, a
``handlers_from`` factory; ``@tool`` types its tool from the function's return annotation."""

from __future__ import annotations

from typing import Any, assert_type

import attrs
from returns.result import Failure, Result, Success

from effectagent import Context, TaggedError, Tool, ToolCallContext, Toolkit, tool
from effectagent.ai import Binding, Handler, Reconcile, Reconciled


@attrs.frozen
class Lookup:
    city: str


@attrs.frozen
class Forecast:
    city: str
    high_c: float


@attrs.frozen
class UnknownCity(TaggedError):
    city: str


forecast = Tool(
    "forecast", "Today's forecast.", parameters=Lookup, success=Forecast, failure=UnknownCity
)
assert_type(forecast, Tool[Lookup, Forecast])
assert_type(forecast.decode_arguments('{"city": "Oslo"}'), Lookup)
assert_type(Tool.dynamic("raw", "Raw.", {"type": "object"}), Tool[dict[str, Any], Any])
assert_type(
    Tool.dynamic("raw", "Raw.", {"type": "object"}, readonly=True, timeout=5.0),
    Tool[dict[str, Any], Any],
)
# E: Unexpected keyword argument "read_only" for "dynamic" of "Tool"; did you mean "readonly"?  [call-arg]
Tool.dynamic("raw", "Raw.", {"type": "object"}, read_only=True)
# E: Argument "timeout" to "dynamic" of "Tool" has incompatible type "str"; expected "float | None"  [arg-type]
Tool.dynamic("raw", "Raw.", {"type": "object"}, timeout="5")
# What a tool does not give is Any: no annotation needed for a tool without ``success=``.
delete = Tool("delete", "Delete a city.", parameters=Lookup, needs_approval=True)
assert_type(delete, Tool[Lookup, Any])
anything = Tool("anything", "Takes anything.")
assert_type(anything, Tool[Any, Any])


# ---- handlers that fit ---------------------------------------------------------------------------


async def handle_forecast(params: Lookup, call: ToolCallContext) -> Forecast:
    return Forecast(params.city, 4.0)


async def handle_as_result(params: Lookup, call: ToolCallContext) -> Result[Forecast, UnknownCity]:
    if params.city == "Atlantis":
        return Failure(UnknownCity(params.city))
    return Success(Forecast(params.city, 4.0))


async def handle_anything(params: object, call: ToolCallContext) -> Forecast:
    return Forecast(str(params), 0.0)  # takes any parameters: fits every tool that returns Forecast


assert_type(forecast.bind(handle_forecast), Binding[Lookup, Forecast])
forecast.bind(handle_as_result)
forecast.bind(handle_anything)
typed: Tool[Lookup, Forecast] = Tool("forecast", "F.", parameters=Lookup, handler=handle_forecast)
assert_type(
    Tool("forecast", "F.", parameters=Lookup, success=Forecast, handler=handle_as_result),
    Tool[Lookup, Forecast],
)
assert_type(
    Tool("forecast", "F.", parameters=Lookup, success=Forecast, handler=handle_forecast),
    Tool[Lookup, Forecast],
)
toolkit = Toolkit(forecast)
toolkit.handlers(forecast.bind(handle_forecast))
toolkit.handlers({forecast: handle_forecast})  # a mapping: accepted, for tools known at run time
any_handler: Handler = handle_forecast  # a bare Handler is a handler of any tool
exact_handler: Handler[Lookup, Forecast] = handle_as_result


async def bindings(ctx: Context) -> list[Binding[Lookup, Forecast]]:
    return [forecast.bind(handle_forecast)]


toolkit.handlers_from(bindings)


# ---- handlers that do not fit: rejected wherever they are bound ---------------------------------


async def handle_int(params: int, call: ToolCallContext) -> str:
    return str(params)


async def handle_text(params: Lookup, call: ToolCallContext) -> str:
    return params.city


async def handle_text_result(params: Lookup, call: ToolCallContext) -> Result[str, UnknownCity]:
    return Success(params.city)


async def handle_without_context(params: Lookup) -> Forecast:
    return Forecast(params.city, 4.0)


def handle_synchronously(params: Lookup, call: ToolCallContext) -> Forecast:
    return Forecast(params.city, 4.0)


# E: Argument 1 to "bind" of "Tool" has incompatible type "Callable[[int, ToolCallContext], Coroutine[Any, Any, str]]"; expected "Callable[[Lookup, ToolCallContext], Awaitable[Forecast | Result[Forecast, Any]]]"  [arg-type]
forecast.bind(handle_int)
# E: Argument 1 to "bind" of "Tool" has incompatible type "Callable[[Lookup, ToolCallContext], Coroutine[Any, Any, str]]"
forecast.bind(handle_text)
# E: Argument 1 to "bind" of "Tool" has incompatible type "Callable[[Lookup, ToolCallContext], Coroutine[Any, Any, Result[str, UnknownCity]]]"
forecast.bind(handle_text_result)
# E: Argument 1 to "bind" of "Tool" has incompatible type "Callable[[Lookup], Coroutine[Any, Any, Forecast]]"
forecast.bind(handle_without_context)
# E: Argument 1 to "bind" of "Tool" has incompatible type "Callable[[Lookup, ToolCallContext], Forecast]"
forecast.bind(handle_synchronously)
# E: Argument "handler" to "Tool" has incompatible type "Callable[[int, ToolCallContext], Coroutine[Any, Any, str]]"; expected "Callable[[Lookup, ToolCallContext], Awaitable[Forecast | Result[Forecast, Any]]] | None"  [arg-type]
Tool("forecast", "F.", parameters=Lookup, success=Forecast, handler=handle_int)
# E: Argument "handler" to "Tool" has incompatible type "Callable[[Lookup, ToolCallContext], Coroutine[Any, Any, str]]"
Tool("forecast", "F.", parameters=Lookup, success=Forecast, handler=handle_text)
# E: Argument "handler" to "Tool" has incompatible type "Callable[[Lookup, ToolCallContext], Coroutine[Any, Any, str]]"
wrong: Tool[Lookup, Forecast] = Tool("forecast", "F.", handler=handle_text)
# E: Incompatible types in assignment (expression has type "Callable[[Lookup, ToolCallContext], Coroutine[Any, Any, str]]", variable has type "Callable[[Lookup, ToolCallContext], Awaitable[Forecast | Result[Forecast, Any]]]")
exact_wrong: Handler[Lookup, Forecast] = handle_text
# E: Argument 2 to "Binding" has incompatible type "Callable[[int, ToolCallContext], Coroutine[Any, Any, str]]"
Binding(forecast, handle_int)


async def wrong_bindings(ctx: Context) -> list[Binding[Lookup, Forecast]]:
    # E: Argument 1 to "bind" of "Tool" has incompatible type
    return [forecast.bind(handle_text)]


# ---- what a tool's other functions receive: its decoded parameters -------------------------------

Tool("guarded", "G.", parameters=Lookup, needs_approval=lambda params, call: params.city == "Oslo")
Tool("listed", "L.", parameters=Lookup, targets=lambda params: [f"city:{params.city}"])
# E: "Lookup" has no attribute "zone"  [attr-defined]
Tool("guarded", "G.", parameters=Lookup, needs_approval=lambda params, call: params.zone == "")
# E: Argument 1 to "requires_approval" of "Tool" has incompatible type "str"; expected "Lookup"  [arg-type]
forecast.requires_approval("Oslo", ToolCallContext("call_1", "forecast"))
# E: Argument 1 to "bind" of "Tool" has incompatible type "Callable[[int, ToolCallContext], Coroutine[Any, Any, str]]"; expected "Callable[[Lookup, ToolCallContext], Awaitable[Any | Result[Any, Any]]]"
delete.bind(handle_int)


# ---- @tool: the tool's success type is the function's -------------------------------------------


@tool
async def today(city: str) -> Forecast:
    """Today's forecast.

    Args:
        city: The city.
    """
    return Forecast(city, 4.0)


@tool(readonly=True, errors=UnknownCity)
async def checked(city: str) -> Result[Forecast, UnknownCity]:
    """Today's forecast, or UnknownCity.

    Args:
        city: The city.
    """
    return Success(Forecast(city, 4.0))


@tool(inner_tools=[forecast])
async def outer(city: str) -> str:
    """Asks forecast through its broker.

    Args:
        city: The city.
    """
    return city


assert_type(outer, Tool[Any, str])


@tool
async def note(text: str) -> None:
    """Take a note.

    Args:
        text: The note.
    """


assert_type(today, Tool[Any, Forecast])
assert_type(checked, Tool[Any, Forecast])
assert_type(note, Tool[Any, None])
today.bind(handle_forecast)
# E: Argument 1 to "bind" of "Tool" has incompatible type "Callable[[Lookup, ToolCallContext], Coroutine[Any, Any, str]]"; expected "Callable[[Any, ToolCallContext], Awaitable[Forecast | Result[Forecast, Any]]]"
today.bind(handle_text)


# ---- reconcile: asked whether a call that may have run took effect, typed by its tool ------------


async def reconcile_forecast(params: Lookup, call: ToolCallContext) -> Reconciled[Forecast]:
    if params.city == "Oslo":
        return Reconciled.done(Forecast(params.city, 4.0))
    if params.city == "Atlantis":
        return Reconciled.unknown("no station answers")
    return Reconciled.not_done()


async def reconcile_text(params: Lookup, call: ToolCallContext) -> Reconciled[str]:
    return Reconciled.done(params.city)


async def reconcile_int(params: int, call: ToolCallContext) -> Reconciled[Forecast]:
    return Reconciled.not_done()


async def reconcile_wrongly(params: Lookup, call: ToolCallContext) -> Reconciled[Forecast]:
    # E: Argument 1 to "done" of "Reconciled" has incompatible type "str"; expected "Forecast"
    return Reconciled.done("4 degrees")


assert_type(forecast.bind(handle_forecast, reconcile=reconcile_forecast), Binding[Lookup, Forecast])
Tool("forecast", "F.", parameters=Lookup, handler=handle_forecast, reconcile=reconcile_forecast)
exact_reconcile: Reconcile[Lookup, Forecast] = reconcile_forecast
# E: Argument "reconcile" to "bind" of "Tool" has incompatible type "Callable[[Lookup, ToolCallContext], Coroutine[Any, Any, Reconciled[str]]]"
forecast.bind(handle_forecast, reconcile=reconcile_text)
# E: Argument "reconcile" to "bind" of "Tool" has incompatible type "Callable[[int, ToolCallContext], Coroutine[Any, Any, Reconciled[Forecast]]]"
forecast.bind(handle_forecast, reconcile=reconcile_int)
Tool(
    "forecast",
    "F.",
    parameters=Lookup,
    success=Forecast,
    handler=handle_forecast,
    # E: Argument "reconcile" to "Tool" has incompatible type "Callable[[Lookup, ToolCallContext], Coroutine[Any, Any, Reconciled[str]]]"
    reconcile=reconcile_text,
)


# ---- durable steps: the result's type is the step function's, or the one given to decode into ---


async def steps(call: ToolCallContext) -> None:
    async def place() -> Forecast:
        return Forecast("Oslo", 4.0)

    async def count() -> int:
        return 1

    assert_type(await call.step("place", 1, place, type=Forecast), Forecast)
    assert_type(await call.step("count", 1, count), int)
    # E: Argument "type" to "step" of "ToolCallContext" has incompatible type "type[str]"
    wrong: Forecast = await call.step("place", 1, place, type=str)
    print(wrong)
