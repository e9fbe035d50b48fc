"""Shared pieces of the Code Mode suites: a few readonly tools, an agent whose only tool is a
Code Mode tool, and a run of one program through the real engine with a scripted model.

End-to-end runs take a real Deno executor. Most suites give each test a bare bubblewrap-isolated
``DenoCodeExecutor`` through ``executor="service"`` (construction is cheap once the host was
probed; each pass spawns its workload cold and releases it before ``execute`` returns), tracked by
the sandbox suite's :class:`~tests.sandbox.test_code_fixtures.WorkloadTracker`, which proves from
the executor's public ownership view that nothing of any pass is left.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs
import trio

from capabilities.code_mode import CodeMode
from effectagent import Agent, AgentPolicy, TaggedError, Toolkit, tool
from effectagent.ai import ModelRequest, ToolMessage
from effectagent.core import EventBase, LogEntry, ToolCallSettled, ToolOutcome
from effectagent.effect import Layer
from effectagent.engine import open_runtime
from effectagent.testing import ScriptedModel, Turn
from sandbox import CodeExecutorService, DenoCodeExecutor

HIGHS = {"Oslo": 4.0, "Rome": 17.5, "Lima": 19.0, "Cairo": 31.5, "Nuuk": -3.0}

#: A marker every forecast carries in a field no program here returns: it must never leave a pass.
STATION = "station-intermediate-7f3a"


@attrs.frozen
class UnknownCity(TaggedError):
    """No forecast for this city."""

    city: str


@attrs.frozen
class Forecast:
    """Today's forecast."""

    city: str
    high_c: float
    station: str
    hourly: list[float]


@tool(readonly=True, errors=(UnknownCity,))
async def forecast(city: str) -> Forecast:
    """Today's forecast for a city, with the hourly temperatures.

    Args:
        city: The city's name, e.g. "Oslo".
    """
    await trio.lowlevel.checkpoint()
    if city not in HIGHS:
        raise UnknownCity(city)
    high = HIGHS[city]
    return Forecast(city, high, STATION, [high - 5 + hour / 4 for hour in range(24)])


@tool(readonly=True)
async def to_fahrenheit(celsius: float) -> float:
    """Convert a temperature from °C to °F.

    Args:
        celsius: The temperature in °C.
    """
    return celsius * 9 / 5 + 32


@tool(readonly=True)
async def add(a: int, b: int) -> int:
    """Add two whole numbers.

    Args:
        a: A number.
        b: Another.
    """
    return a + b


def policy(**overrides: Any) -> AgentPolicy:
    """A roomy policy; override what a test is about."""
    fields: dict[str, Any] = {
        "max_turns": 4,
        "max_tool_calls": 32,
        "max_duration": 60.0,
        "tool_concurrency": 4,
    }
    fields.update(overrides)
    return AgentPolicy(**fields)


@attrs.frozen
class Ran:
    """What one run of one program left behind."""

    events: Sequence[EventBase]
    log: list[LogEntry]
    model: ScriptedModel

    @property
    def settled(self) -> ToolCallSettled:
        """The one settlement of the run (the Code Mode call)."""
        (settled,) = [e.record for e in self.log if isinstance(e.record, ToolCallSettled)]
        return settled

    @property
    def outcome(self) -> ToolOutcome:
        """The Code Mode call's committed outcome."""
        return self.settled.outcome

    @property
    def shown(self) -> Any:
        """The Code Mode call's result as the model was shown it in its next request."""
        request: ModelRequest = self.model.requests[-1]
        (result,) = [
            content.result
            for message in request.messages
            if isinstance(message, ToolMessage)
            for content in message.content
        ]
        return result

    def everything(self) -> str:
        """Every event, record and model request of the run, as text (to search for leaks)."""
        return repr(self.events) + repr(self.log) + repr(self.model.requests)


def agent_for(code: CodeMode, **overrides: Any) -> Agent:
    """An agent whose only tool is ``code.tool``."""
    return Agent("coder", "Answer with a program.", policy(**overrides), Toolkit(code.tool))


async def run_program(
    code: CodeMode,
    program: str,
    *,
    executor: DenoCodeExecutor | None = None,
    extra: Layer | None = None,
    secrets: Sequence[str] = (),
    **overrides: Any,
) -> Ran:
    """Run ``program`` as the model's one call of ``code.tool``, then a closing answer.

    ``executor`` is provided as the ``CodeExecutorService`` (for ``executor="service"`` tools);
    the selected tools' handlers are their own (``@tool``). ``overrides`` adjust the policy.
    """
    model = ScriptedModel(
        [Turn.tool_calls((code.tool.name, {"program": program})), Turn.text("done")]
    )
    agent = agent_for(code, **overrides)
    handler = code.layer
    if executor is not None:
        handler = handler.provide(Layer.succeed(CodeExecutorService, executor))
    layer = Toolkit(*code.tools).handlers() + handler + model.as_layer()
    if extra is not None:
        layer = layer + extra
    async with open_runtime(layer, agents=[agent], secrets=secrets) as runtime:
        async with runtime.stream(agent, "Go.") as stream:
            events = [event async for event in stream]
        log = list(await runtime.log.entries(events[0].conversation_id))
    return Ran(events, log, model)
