"""An ``Agent[O]`` runs to a ``RunResult[O]``: mypy follows the output type from the agent to the
result — through ``runtime.run``, ``runtime.stream`` and ``reduce_events``, and ``run_sync`` —
and an agent without one is an ``Agent[None]`` whose answer is ``text``. A child run of it
(``run_child``) ends in a ``ChildRunResult[O]``, and takes the agent's input as ``runtime.run``
does: a str, or the value of its ``input=`` type."""

from __future__ import annotations

from typing import Any, assert_type

import attrs

from effectagent import (
    Agent,
    AgentPolicy,
    ChildBudget,
    Layer,
    RunResult,
    Runtime,
    ToolCallContext,
    run_sync,
)
from effectagent.core import DefaultInput
from effectagent.engine import ChildRunResult, RunStream, reduce_events, run_child


@attrs.frozen
class Forecast:
    city: str
    high_c: float


@attrs.frozen
class Query:
    city: str


weather = Agent("weather", "Answer with today's forecast.", output=Forecast)
assert_type(weather, Agent[Forecast, DefaultInput])
assert_type(weather.output, type[Forecast] | None)
assert_type(
    Agent("weather", "Forecast.", AgentPolicy(max_turns=4), output=Forecast),
    Agent[Forecast, DefaultInput],
)
assert_type(attrs.evolve(weather, policy=AgentPolicy(max_turns=4)), Agent[Forecast, DefaultInput])
greeter = Agent("greeter", "Greet whoever writes.")
assert_type(greeter, Agent[None, DefaultInput])
assert_type(Agent("greeter", "Greet.", output=None), Agent[None, DefaultInput])


def any_agent(agent: Agent) -> None:  # a bare Agent takes an agent of any output type
    assert_type(agent, Agent[Any, Any])


any_agent(weather)
any_agent(greeter)


async def runs(runtime: Runtime) -> None:
    result = await runtime.run(weather, "How warm is Oslo?")
    assert_type(result, RunResult[Forecast])
    assert_type(result.output, Forecast | None)  # None when the run did not complete
    assert_type(result.output_or_raise(), Forecast)
    assert_type(result.raise_for_status(), RunResult[Forecast])
    if result.output is not None:
        assert_type(result.output.high_c, float)
    high: float = result.output_or_raise().high_c
    greeting = await runtime.run(greeter, "Ada")
    assert_type(greeting, RunResult[None])
    assert_type(greeting.output, None)
    assert_type(greeting.text, str)
    async with runtime.stream(weather, "And in Lima?") as events:
        assert_type(events, RunStream[Forecast])
        assert_type(await reduce_events(events), RunResult[Forecast])
    print(high)


async def misuses(runtime: Runtime) -> None:
    result = await runtime.run(weather, "How warm is Oslo?")
    # E: Item "None" of "Forecast | None" has no attribute "high_c"  [union-attr]
    high = result.output.high_c
    # E: Incompatible types in assignment (expression has type "str", variable has type "int")  [assignment]
    city: int = result.output_or_raise().city
    # E: Incompatible types in assignment (expression has type "Forecast", variable has type "str")  [assignment]
    text: str = result.output_or_raise()
    greeting = await runtime.run(greeter, "Ada")
    # E: "None" has no attribute "city"  [attr-defined]
    name = greeting.output_or_raise().city
    print(high, city, text, name)


def synchronously(layer: Layer) -> None:
    result = run_sync(weather, "How warm is Oslo?", layer=layer)
    assert_type(result, RunResult[Forecast])
    # E: Incompatible types in assignment (expression has type "Forecast", variable has type "str")  [assignment]
    name: str = result.output_or_raise()
    print(name)


async def delegating(call: ToolCallContext, agent: Agent) -> str:
    child = await run_child(call, weather, "How warm is Oslo?", budget=ChildBudget())
    assert_type(child, ChildRunResult[Forecast])
    assert_type(child.output, Forecast | None)  # None when the child did not complete
    if child.output is not None:
        assert_type(child.output.high_c, float)
    greeting = await run_child(call, greeter, "Ada", budget=ChildBudget())
    assert_type(greeting.output, None)
    anyone = await run_child(call, agent, "Ada", budget=ChildBudget())  # a bare Agent: any output
    assert_type(anyone, ChildRunResult[Any])
    # E: Item "None" of "Forecast | None" has no attribute "high_c"  [union-attr]
    high = child.output.high_c
    # E: Incompatible types in assignment (expression has type "None", variable has type "str")  [assignment]
    text: str = greeting.output
    return f"{high} {text} {greeting.text}"


async def delegating_typed_input(call: ToolCallContext, agent: Agent) -> None:
    asked = Agent("asked", "Forecast the city asked.", output=Forecast, input=Query)
    child = await run_child(call, asked, Query("Oslo"), budget=ChildBudget())
    assert_type(child, ChildRunResult[Forecast])
    await run_child(call, agent, Query("Oslo"), budget=ChildBudget())  # a bare Agent: any input
    # E: Argument 2 to "run_child" has incompatible type "Agent[Forecast, Query]"
    await run_child(call, asked, "How warm is Oslo?", budget=ChildBudget())
    # E: Cannot infer value of type parameter "I" of "run_child"
    await run_child(call, greeter, Query("Oslo"), budget=ChildBudget())
