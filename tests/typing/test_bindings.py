"""The typed API at run time: ``tool.bind(handler)`` and ``toolkit.handlers(*bindings)`` bind
exactly what the mapping form binds (and refuse what it refuses), ``RunResult.output_or_raise``
gives a completed run's output and raises for any other, and ``Agent``'s typed constructor
leaves it the attrs class it was."""

from __future__ import annotations

from typing import Any

import attrs
import pytest
import trio
import trio.testing

from effectagent import Agent, AgentPolicy, Context, Tool, ToolCallContext, Toolkit, open_runtime
from effectagent.ai import AuthenticationFailed, Binding, Handler, ModelRequest
from effectagent.effect._layer import open_layer
from effectagent.engine import RunFailedError
from effectagent.testing import FunctionModel, ScriptedModel, Turn


@attrs.frozen
class Lookup:
    city: str


@attrs.frozen
class Forecast:
    city: str
    high_c: float


async def handle_forecast(params: Lookup, call: ToolCallContext) -> Forecast:
    return Forecast(params.city, 4.0)


async def handle_chilly(params: Lookup, call: ToolCallContext) -> Forecast:
    return Forecast(params.city, -10.0)


def _tools() -> tuple[Tool[Lookup, Forecast], Tool[Lookup, Forecast]]:
    forecast = Tool("forecast", "Today's forecast.", parameters=Lookup, success=Forecast)
    own = Tool(
        "own", "Its own handler.", parameters=Lookup, success=Forecast, handler=handle_chilly
    )
    return forecast, own


def test_bind_pairs_the_tool_with_its_handler() -> None:
    forecast, _ = _tools()
    binding = forecast.bind(handle_forecast)
    assert binding == Binding(forecast, handle_forecast)
    assert (binding.tool, binding.handler) == (forecast, handle_forecast)


def test_bind_refuses_what_is_not_a_handler_naming_the_tool() -> None:
    forecast, _ = _tools()

    def synchronous(params: Lookup, call: ToolCallContext) -> Forecast:
        return Forecast(params.city, 4.0)

    with pytest.raises(TypeError, match=r"^tool 'forecast': the handler .*synchronous must be an"):
        forecast.bind(synchronous)  # type: ignore[arg-type]


async def test_bindings_are_bound_as_a_mapping_would_bind_them() -> None:
    forecast, own = _tools()
    toolkit = Toolkit(forecast, own)
    by_binding = toolkit.handlers(forecast.bind(handle_forecast))
    by_mapping = toolkit.handlers({forecast: handle_forecast})
    for layer in (by_binding, by_mapping):
        assert layer.provides == frozenset(toolkit.handler_keys)
        async with open_layer(layer) as ctx:
            assert ctx[forecast.handler_key] is handle_forecast
            assert ctx[own.handler_key] is handle_chilly  # the tool's own
    async with open_layer(
        toolkit.handlers(forecast.bind(handle_forecast), own.bind(handle_forecast))
    ) as ctx:
        assert ctx[own.handler_key] is handle_forecast  # a binding overrides a tool's own


async def test_bindings_and_mappings_mix_but_never_give_a_tool_two_handlers() -> None:
    forecast, own = _tools()
    toolkit = Toolkit(forecast, own)
    async with open_layer(
        toolkit.handlers(forecast.bind(handle_forecast), {"own": handle_forecast})
    ) as ctx:
        assert ctx[own.handler_key] is handle_forecast
    with pytest.raises(
        ValueError, match=r"^Toolkit.handlers: tool 'forecast' is given two handlers$"
    ):
        toolkit.handlers(forecast.bind(handle_forecast), {"forecast": handle_chilly})
    with pytest.raises(ValueError, match="tool 'forecast' is given two handlers"):
        toolkit.handlers(forecast.bind(handle_forecast), forecast.bind(handle_forecast))
    # One mapping that names a tool twice, by the tool and by its name, in either order.
    by_tool_first: dict[Tool[Any, Any] | str, Handler[Any, Any]] = {
        forecast: handle_forecast,
        "forecast": handle_chilly,
    }
    by_name_first: dict[Tool[Any, Any] | str, Handler[Any, Any]] = {
        "forecast": handle_chilly,
        forecast: handle_forecast,
    }
    for twice in (by_tool_first, by_name_first):
        with pytest.raises(
            ValueError, match=r"^Toolkit.handlers: tool 'forecast' is given two handlers$"
        ):
            toolkit.handlers(twice)


def test_a_binding_is_checked_as_a_mapping_entry_is() -> None:
    forecast, own = _tools()
    with pytest.raises(ValueError, match="is not a tool of this toolkit"):
        Toolkit(forecast).handlers(own.bind(handle_forecast))
    with pytest.raises(
        ValueError, match=r"no handler for tool\(s\): forecast \(give one in the call"
    ):
        Toolkit(forecast, own).handlers(own.bind(handle_forecast))
    made_directly = Binding(forecast, "not a handler")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"^tool 'forecast': the handler must be an async function"):
        Toolkit(forecast).handlers(made_directly)
    with pytest.raises(TypeError, match=r"mapping of tool .* or bindings .* got tuple"):
        Toolkit(forecast).handlers((forecast, handle_forecast))  # type: ignore[arg-type]


async def test_a_factory_may_return_bindings() -> None:
    forecast, own = _tools()
    toolkit = Toolkit(forecast, own)

    async def bindings(ctx: Context) -> list[Binding[Lookup, Forecast]]:
        return [forecast.bind(handle_forecast)]

    async with open_layer(toolkit.handlers_from(bindings)) as ctx:
        assert ctx[forecast.handler_key] is handle_forecast
        assert ctx[own.handler_key] is handle_chilly

    async def stray(ctx: Context) -> list[Any]:
        return [forecast.bind(handle_forecast), handle_forecast]

    with pytest.raises(TypeError, match=r"it returned function .*handle_forecast.* among them"):
        async with open_layer(toolkit.handlers_from(stray)):
            pass  # pragma: no cover

    async def nothing(ctx: Context) -> Any:
        return None  # as before bindings: the tools' own handlers

    with pytest.raises(ValueError, match=r"no handler for tool\(s\): forecast "):
        async with open_layer(toolkit.handlers_from(nothing)):
            pass  # pragma: no cover


# ---- results and agents --------------------------------------------------------------------------


async def test_output_or_raise_is_a_completed_runs_output() -> None:
    weather = Agent("weather", "Answer with a forecast.", output=Forecast)
    greeter = Agent("greeter", "Greet.")
    model = ScriptedModel.layer(
        [Turn.text('{"city": "Oslo", "high_c": 4.5}'), Turn.text("Hello, Ada!")]
    )
    async with open_runtime(model, agents=[weather, greeter]) as runtime:
        result = await runtime.run(weather, "Oslo?")
        greeting = await runtime.run(greeter, "Ada")
    assert result.output_or_raise() == result.output == Forecast("Oslo", 4.5)
    assert greeting.output_or_raise() is None
    assert greeting.text == "Hello, Ada!"


async def test_output_or_raise_raises_for_a_run_that_did_not_complete() -> None:
    weather = Agent("weather", "Answer.", AgentPolicy(output_retries=0), output=Forecast)
    model = ScriptedModel.layer([Turn.text("warm")])  # does not decode: the run fails
    async with open_runtime(model, agents=[weather]) as runtime:
        failed = await runtime.run(weather, "Oslo?")
    assert (failed.status, failed.output) == ("failed", None)
    with pytest.raises(RunFailedError, match="failed: OutputInvalid: the final answer") as caught:
        failed.output_or_raise()
    assert caught.value.result is failed
    assert str(failed.error) in str(caught.value)  # what went wrong, not only its name
    for status in ("interrupted", "suspended"):
        other = attrs.evolve(failed, status=status, error=None)
        with pytest.raises(RunFailedError, match=f"{status}: {status}$"):
            other.output_or_raise()


async def test_the_error_of_a_run_that_did_not_complete_says_what_went_wrong_without_secrets(
    autojump_clock: trio.testing.MockClock,
) -> None:
    canary = "sk-canary-4242-secret"

    def refuse(request: ModelRequest) -> str:
        raise AuthenticationFailed(f"the key {canary} was refused")

    greeter = Agent("greeter", "Greet.")
    async with open_runtime(FunctionModel.layer(refuse), agents=[greeter], secrets=[canary]) as rt:
        failed = await rt.run(greeter, "Ada")
    with pytest.raises(
        RunFailedError, match=r"failed: ModelFailed: .*the key \[REDACTED\] was refused"
    ) as caught:
        failed.raise_for_status()
    assert canary not in str(caught.value)
    assert canary not in repr(caught.value)


def test_an_agent_is_still_the_attrs_class_it_was() -> None:
    toolkit = Toolkit(_tools()[1])
    agent = Agent("weather", "Answer.", AgentPolicy(max_turns=3), toolkit, Forecast)
    assert isinstance(agent, Agent)
    assert type(agent).__name__ == "Agent"
    assert [field.name for field in attrs.fields(Agent)] == [
        "name",
        "instructions",
        "policy",
        "toolkit",
        "output",
        "tool_sources",
        "model",
        "grace_model",
        "summary_model",
        "output_mode",
        "output_validators",
        "input_guardrails",
        "output_guardrails",
        "_sealed",
        "input",
        "input_renderer",
        "services",
        "instructions_per",
        "prepare_context",
    ]
    assert agent == Agent("weather", "Answer.", AgentPolicy(max_turns=3), toolkit, output=Forecast)
    assert hash(agent) == hash(attrs.evolve(agent))
    evolved = attrs.evolve(agent, policy=AgentPolicy(max_turns=5))
    assert (type(evolved), evolved.policy.max_turns, evolved.output) == (Agent, 5, Forecast)
    assert repr(agent).startswith("Agent(name='weather', instructions='Answer.'")
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        agent.name = "other"  # type: ignore[misc]
    with pytest.raises(AttributeError):
        agent.extra = 1  # type: ignore[attr-defined]  # slotted, as before
    with pytest.raises(TypeError, match=r"^Agent\.output must be a type whose JSON Schema"):
        Agent("weather", "Answer.", output=int)
