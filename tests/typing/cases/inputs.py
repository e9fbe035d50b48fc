"""An ``Agent(input=Query)`` takes a ``Query``: mypy follows the input type from the agent to
``runtime.run``, ``runtime.stream`` and ``run_sync`` (a str is refused), to the context its
instructions function and its ``prepare_context`` hook are given, and to its renderer; an agent
without ``input=`` takes its text, and a bare ``Agent`` (or ``Agent[Forecast]``) annotation takes
an agent of any input type."""

from __future__ import annotations

from typing import Any, assert_type

import attrs

from effectagent import Agent, Layer, RunResult, Runtime, run_sync
from effectagent.core import DefaultInput, InstructionsContext, PreparedContext, TurnContext


@attrs.frozen
class Query:
    city: str
    days: int


@attrs.frozen
class Forecast:
    city: str
    high_c: float


async def instructions(context: InstructionsContext[Query]) -> str:
    assert_type(context.input, Query)
    return f"Forecast {context.input.days} days for {context.input.city}."


async def prepare(context: TurnContext[Query]) -> PreparedContext | None:
    assert_type(context.input.city, str)
    return None


def render(query: Query) -> str:
    return f"{query.city}, {query.days} days"


forecaster = Agent(
    "forecaster", instructions, output=Forecast, input=Query, prepare_context=prepare
)
assert_type(forecaster, Agent[Forecast, Query])
assert_type(forecaster.input, type[Query] | None)
rendered = Agent("rendered", "Forecast.", input=Query, input_renderer=render)
assert_type(rendered, Agent[None, Query])
greeter = Agent("greeter", "Greet whoever writes.")
assert_type(greeter, Agent[None, DefaultInput])


def any_forecaster(agent: Agent[Forecast]) -> None:  # any input type
    assert_type(agent, Agent[Forecast, Any])


def any_agent(agent: Agent) -> None:
    assert_type(agent, Agent[Any, Any])


any_forecaster(forecaster)
any_agent(forecaster)
any_agent(greeter)


async def runs(runtime: Runtime, agent: Agent) -> None:
    result = await runtime.run(forecaster, Query("Oslo", 3))
    assert_type(result, RunResult[Forecast])
    async with runtime.stream(forecaster, Query("Lima", 1)) as events:
        print(events)
    await runtime.run(greeter, "Ada")
    await runtime.run(greeter, ["Ada", "and Grace"])  # a list is checked against DefaultInput
    await runtime.run(agent, "anything")  # a bare Agent: any input
    await runtime.run(agent, Query("Oslo", 1))


async def misuses(runtime: Runtime) -> None:
    # E: Argument 1 to "run" of "Runtime" has incompatible type "Agent[Forecast, Query]"
    await runtime.run(forecaster, "How warm is Oslo?")
    # E: Argument 1 to "stream" of "Runtime" has incompatible type "Agent[Forecast, Query]"
    runtime.stream(forecaster, "How warm is Oslo?")
    # E: Cannot infer value of type parameter "I" of "run" of "Runtime"
    await runtime.run(greeter, Query("Oslo", 3))


async def wrong_context(context: InstructionsContext[str]) -> str:
    return context.input


# E: Argument 2 to "Agent" has incompatible type
mismatched = Agent("mismatched", wrong_context, input=Query)
# E: Argument "input_renderer" to "Agent" has incompatible type
misrendered = Agent("misrendered", "Forecast.", input=Forecast, input_renderer=render)


def synchronously(layer: Layer) -> None:
    result = run_sync(forecaster, Query("Oslo", 3), layer=layer)
    assert_type(result, RunResult[Forecast])
    # E: Argument 1 to "run_sync" has incompatible type "Agent[Forecast, Query]"
    run_sync(forecaster, "Oslo", layer=layer)
    print(mismatched, misrendered)


async def any_input(context: InstructionsContext[object]) -> str:  # fits an agent of any input
    return f"Answer {context.author}."


general = Agent("general", any_input, input=Query)
assert_type(general, Agent[None, Query])
