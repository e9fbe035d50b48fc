"""Tools that change while a conversation goes on (``Agent.tool_sources``): the engine takes one
snapshot per source at the start of every turn and uses it for that turn's request and batch — a
change reaches the next turn, never a batch in flight."""

from __future__ import annotations

import logging
from typing import Any

import pytest
import trio
import trio.testing

from effectagent.ai import Tool, ToolCallContext, ToolSnapshot, ToolSource
from effectagent.core import (
    RunFailedRecord,
    SecretRedactor,
    ToolCallSettled,
    ToolInvalidInput,
    ToolSourceFailed,
    ToolSuccess,
)
from effectagent.effect import Layer, MissingServicesError, ServiceKey
from effectagent.engine import open_runtime
from effectagent.engine._output import SourceSecrets
from effectagent.testing import ScriptedModel, Turn

from .helpers import (
    Forecast,
    HandlerProbe,
    Lookup,
    engine_logs,
    forecast_tool,
    make_agent,
    records_of,
    run_events,
)


class SwitchingSource:
    """A tool source whose offer a test (or a handler) replaces, as a server's list_changed."""

    def __init__(self, snapshot: ToolSnapshot) -> None:
        self.current = snapshot
        self.asked = 0

    def snapshot(self) -> ToolSnapshot:
        self.asked += 1
        return self.current


SOURCE: ServiceKey[ToolSource] = ServiceKey("tests.SwitchingSource")


def offered(request: Any) -> list[str]:
    return [descriptor.name for descriptor in request.tools]


async def test_a_change_reaches_the_next_turn_never_the_batch_in_flight(
    autojump_clock: trio.testing.MockClock,
) -> None:
    old, new = forecast_tool("old_forecast"), forecast_tool("new_forecast")
    probe = HandlerProbe()
    source = SwitchingSource(ToolSnapshot((old,), {"old_forecast": probe.forecast()}))

    async def old_then_switch(params: Lookup, call: ToolCallContext) -> Forecast:
        # The server changes its tools while this call runs: the batch keeps what it started with.
        source.current = ToolSnapshot((new,), {"new_forecast": probe.forecast()})
        await trio.lowlevel.checkpoint()
        return Forecast(params.city, 4.0)

    source.current = ToolSnapshot((old,), {"old_forecast": old_then_switch})
    model = ScriptedModel(
        [
            Turn.tool_calls(
                ("old_forecast", {"city": "Oslo"}, "call_a"),
                ("old_forecast", {"city": "Oslo"}, "call_b"),
            ),
            Turn.tool_calls(
                ("new_forecast", {"city": "Oslo"}, "call_c"),
                ("old_forecast", {"city": "Oslo"}, "call_d"),
            ),
            Turn.text("done"),
        ]
    )
    agent = make_agent(tool_sources=[SOURCE])
    layer = model.as_layer() + Layer.succeed(SOURCE, source)
    async with open_runtime(layer, agents=[agent]) as runtime:
        events = await run_events(runtime, agent, "Forecast, please.")
        log = await runtime.log.entries(events[0].conversation_id)
    outcomes = {r.tool_call_id: r.outcome for r in records_of(log, ToolCallSettled)}
    assert isinstance(outcomes["call_a"], ToolSuccess)
    assert isinstance(outcomes["call_b"], ToolSuccess)  # the batch kept its snapshot
    assert isinstance(outcomes["call_c"], ToolSuccess)  # the new tool, from the next turn on
    assert isinstance(outcomes["call_d"], ToolInvalidInput)  # the old one is gone
    assert [offered(r) for r in model.requests] == [
        ["old_forecast"],
        ["new_forecast"],
        ["new_forecast"],
    ]
    assert source.asked == 3  # once per turn
    assert probe.calls == [("new_forecast", Lookup("Oslo"))]


async def test_a_source_tool_whose_name_is_taken_is_left_out_with_a_warning(
    autojump_clock: trio.testing.MockClock,
) -> None:
    own = forecast_tool()
    impostor = forecast_tool()  # same name, another tool
    extra = Tool.dynamic("extra", "An extra tool.", {"type": "object"}, readonly=True)
    probe, other = HandlerProbe(), HandlerProbe()

    async def answer(params: Any, call: ToolCallContext) -> str:
        return "extra"

    source = SwitchingSource(
        ToolSnapshot((impostor, extra), {"forecast": other.forecast(), "extra": answer})
    )
    model = ScriptedModel(
        [
            Turn.tool_calls(("forecast", {"city": "Oslo"}), ("extra", {}, "call_1")),
            Turn.text("done"),
        ]
    )
    agent = make_agent(own, tool_sources=(SOURCE,))
    layer = agent.toolkit.handlers({own: probe.forecast()}) + model.as_layer()
    with engine_logs(logging.WARNING) as logs:
        async with open_runtime(layer + Layer.succeed(SOURCE, source), agents=[agent]) as runtime:
            result = await runtime.run(agent, "Forecast, please.")
    assert [o.kind for o in result.outcomes] == ["success", "success"]
    assert offered(model.requests[0]) == ["forecast", "extra"]
    assert probe.calls == [("forecast", Lookup("Oslo"))]  # the agent's own tool ran
    assert other.calls == []
    assert any(
        log["event"] == "tool source tool left out: name taken" and log["tool"] == "forecast"
        for log in logs
    )


SECRET = "CANARY-s3cr3t-9f2"


async def test_a_source_tool_that_would_tell_the_model_a_secret_is_left_out_with_a_warning(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # A toolkit tool like it is refused at preflight; a source's tools are known turn by turn.
    leaky = Tool.dynamic("leaky", f"Uses the key {SECRET}.", {"type": "object"}, readonly=True)
    schema = {"type": "object", "properties": {"key": {"const": SECRET}}}
    leaky_schema = Tool.dynamic("leaky_schema", "Keyed.", schema, readonly=True)
    fine = Tool.dynamic("fine", "A fine tool.", {"type": "object"}, readonly=True)

    async def answer(params: Any, call: ToolCallContext) -> str:
        return "fine"

    handlers = {"leaky": answer, "leaky_schema": answer, "fine": answer}
    source = SwitchingSource(ToolSnapshot((leaky, leaky_schema, fine), handlers))
    model = ScriptedModel([Turn.tool_calls(("fine", {})), Turn.text("done")])
    agent = make_agent(tool_sources=(SOURCE,))
    layer = model.as_layer() + Layer.succeed(SOURCE, source)
    with engine_logs(logging.WARNING) as logs:
        async with open_runtime(layer, agents=[agent], secrets=[SECRET]) as runtime:
            result = await runtime.run(agent, "Go.")
    assert [o.kind for o in result.outcomes] == ["success"]
    assert offered(model.requests[0]) == ["fine"]
    assert SECRET not in repr(model.requests)
    left_out = [log["tool"] for log in logs if "it holds a secret" in log["event"]]
    assert left_out == ["leaky", "leaky_schema"]


class FailingSource:
    """A source whose server went away (or that answers with something else)."""

    def __init__(self, answer: object) -> None:
        self.answer = answer

    def snapshot(self) -> ToolSnapshot:
        if isinstance(self.answer, BaseException):
            raise self.answer
        return self.answer  # type: ignore[return-value]  # what a broken source returns


@pytest.mark.parametrize(
    ("answer", "reason"),
    [
        (ConnectionError(f"server gone, token {SECRET}"), "ConnectionError: server gone, token "),
        ({"tools": []}, "it returned dict, not a ToolSnapshot"),
    ],
)
async def test_a_source_that_fails_ends_the_run_naming_it_not_as_an_engine_defect(
    answer: object, reason: str, autojump_clock: trio.testing.MockClock
) -> None:
    """It was ``EngineDefect: the engine failed unexpectedly (a bug)``, naming no source."""
    model = ScriptedModel([Turn.text("never asked")])
    agent = make_agent(tool_sources=(SOURCE,))
    layer = model.as_layer() + Layer.succeed(SOURCE, FailingSource(answer))
    async with open_runtime(layer, agents=[agent], secrets=[SECRET]) as runtime:
        result = await runtime.run(agent, "Go.")
        log = await runtime.log.entries(result.conversation_id)
    error = result.error
    assert isinstance(error, ToolSourceFailed)
    assert error.source == "tests.SwitchingSource"
    assert error.reason.startswith(reason)
    assert str(error).startswith("the tool source tests.SwitchingSource failed: ")
    assert SECRET not in repr(error)
    assert SECRET not in repr(log)
    assert model.requests == []  # the turn never asked the model
    (failed,) = records_of(log, RunFailedRecord)
    assert failed.error == error


async def _unused(params: Any, call: ToolCallContext) -> str:  # pragma: no cover - not called
    return ""


def test_a_snapshots_tools_are_checked_for_secrets_once_not_in_every_run() -> None:
    """Checking every source tool's schema took about 0.5 ms a run for 50 tools, in every run;
    a source hands out the same snapshot until its tools change."""
    checked: list[object] = []

    class Counting:
        def __init__(self, inner: SecretRedactor) -> None:
            self.inner = inner

        def redact(self, value: Any) -> Any:
            checked.append(value)
            return self.inner.redact(value)

        def __getattr__(self, name: str) -> Any:
            return getattr(self.inner, name)

    leaky = Tool.dynamic("leaky", f"Uses the key {SECRET}.", {"type": "object"}, readonly=True)
    fine = Tool.dynamic("fine", "A fine tool.", {"type": "object"}, readonly=True)
    secrets = SourceSecrets(Counting(SecretRedactor([SECRET])))
    handlers = {"leaky": _unused, "fine": _unused}
    snapshot = ToolSnapshot((leaky, fine), handlers)
    assert secrets.holding(0, snapshot) == {"leaky"}
    assert secrets.holding(0, snapshot) == {"leaky"}
    assert len(checked) == 2  # one check a tool, for the first of the two runs
    relisted = ToolSnapshot((fine,), {"fine": _unused})
    assert secrets.holding(0, relisted) == frozenset()  # a new listing is checked
    assert len(checked) == 3


async def test_a_missing_source_is_named_at_preflight() -> None:
    agent = make_agent(tool_sources=[SOURCE])
    with pytest.raises(MissingServicesError, match="tool source"):
        async with open_runtime(ScriptedModel.layer([Turn.text("x")]), agents=[agent]):
            pass


def test_bad_snapshots_and_agents_are_refused_when_built() -> None:
    tool = forecast_tool()

    async def handler(params: Any, call: ToolCallContext) -> Any:
        return None

    with pytest.raises(ValueError, match="no handler for: forecast"):
        ToolSnapshot((tool,), {})
    with pytest.raises(ValueError, match="more than once: forecast"):
        ToolSnapshot((tool, forecast_tool()), {"forecast": handler})
    with pytest.raises(TypeError, match="tuple of Tool"):
        ToolSnapshot([tool], {"forecast": handler})  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"Agent\.tool_sources must hold ServiceKeys"):
        make_agent(tool_sources=["a source"])
    with pytest.raises(TypeError, match=r"Agent\.tool_sources must be a list or tuple"):
        make_agent(tool_sources=SOURCE)
    with pytest.raises(TypeError, match=r"Agent\.tool_sources must be a list or tuple"):
        make_agent(tool_sources={SOURCE})  # a set has no order to decide collisions by
    with pytest.raises(ValueError, match="more than once"):
        make_agent(tool_sources=[SOURCE, SOURCE])
