"""Preflight (CAP-001/CAP-002): a runtime that lacks a service an agent needs fails when it is built
(or when the run is asked for), naming every missing service and who needs it — and nothing is
constructed first."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
import trio
import trio.testing

from effectagent.ai import LanguageModelService, ToolCallContext
from effectagent.core import CompactionCreated
from effectagent.effect import Context, Layer, MissingServicesError, ServiceKey
from effectagent.engine import CompactionRequest, CompactorService, open_runtime
from effectagent.testing import Turn

from .helpers import (
    Forecast,
    HandlerProbe,
    Lookup,
    TrackingModel,
    forecast_tool,
    make_agent,
    make_policy,
)

Database: ServiceKey[str] = ServiceKey("test.Database")


class _Journal:
    """Records construction and release of a scoped layer."""

    def __init__(self) -> None:
        self.entries: list[str] = []

    def layer(self, key: ServiceKey[Any], value: Any, name: str) -> Layer:
        @asynccontextmanager
        async def manage(ctx: Context) -> AsyncIterator[Any]:
            self.entries.append(f"{name} up")
            try:
                yield value
            finally:
                self.entries.append(f"{name} down")

        return Layer.scoped(key, manage, name=name)


class _NoCompaction:
    async def compact(self, request: CompactionRequest) -> list[CompactionCreated]:
        await trio.lowlevel.checkpoint()
        return []


def _needy_agent() -> Any:
    tool = forecast_tool()
    return tool, make_agent(tool, policy=make_policy(context_token_limit=50_000))


def _lines(error: MissingServicesError) -> dict[str, str]:
    return {m.key.name: m.required_by for m in error.missing}


async def test_every_missing_service_is_named_with_who_needs_it() -> None:
    tool, agent = _needy_agent()
    journal = _Journal()
    layer = journal.layer(Database, "db", "database")
    with pytest.raises(MissingServicesError) as caught:
        async with open_runtime(layer, agents=[agent]):
            pass  # pragma: no cover
    error = caught.value
    assert error.keys == frozenset({LanguageModelService, tool.handler_key, CompactorService})
    lines = _lines(error)
    assert lines["effectagent.LanguageModel"] == "agent 'weather'"
    assert lines[tool.handler_key.name] == "agent 'weather' (tool 'forecast')"
    assert "context_token_limit" in lines["effectagent.Compactor"]
    message = str(error)
    assert "3 required service(s) not provided" in message
    for name in ("effectagent.LanguageModel", "tool handler 'forecast'", "effectagent.Compactor"):
        assert name in message
    assert journal.entries == []  # nothing was constructed


async def test_a_key_needed_by_two_agents_is_reported_once() -> None:
    first, second = make_agent(name="first"), make_agent(name="second")
    with pytest.raises(MissingServicesError) as caught:
        async with open_runtime(Layer.context(Context.empty()), agents=[first, second]):
            pass  # pragma: no cover
    assert [m.key for m in caught.value.missing] == [LanguageModelService]


async def test_a_layers_own_missing_requirement_is_found_before_building() -> None:
    tool = forecast_tool()
    agent = make_agent(tool)
    journal = _Journal()

    async def handlers(ctx: Context) -> Any:
        async def handle(params: Lookup, call: ToolCallContext) -> Forecast:
            return Forecast(ctx[Database], 1.0)  # pragma: no cover

        return {tool: handle}

    layer = journal.layer(LanguageModelService, TrackingModel(), "model") + (
        agent.toolkit.handlers_from(handlers, requires=[Database])
    )
    with pytest.raises(MissingServicesError) as caught:
        async with open_runtime(layer, agents=[agent]):
            pass  # pragma: no cover
    assert _lines(caught.value) == {"test.Database": "layer 'handlers[forecast]'"}
    assert journal.entries == []


async def test_missing_services_fail_at_stream_before_any_run_starts(
    autojump_clock: trio.testing.MockClock,
) -> None:
    tool, agent = _needy_agent()
    journal = _Journal()
    model = TrackingModel([Turn.text("never")])
    async with open_runtime(journal.layer(LanguageModelService, model, "model")) as runtime:
        with pytest.raises(MissingServicesError) as caught:
            runtime.stream(agent, "Weather?")
        assert caught.value.keys == frozenset({tool.handler_key, CompactorService})
        assert runtime.active_runs == 0
    assert model.requests == []
    assert journal.entries == ["model up", "model down"]


async def test_a_complete_runtime_builds_each_layer_once_and_releases_it(
    autojump_clock: trio.testing.MockClock,
) -> None:
    tool, agent = _needy_agent()
    journal = _Journal()
    model = TrackingModel([Turn.tool_calls(("forecast", {"city": "Oslo"})), Turn.text("Done.")])
    layer = (
        journal.layer(LanguageModelService, model, "model")
        + journal.layer(CompactorService, _NoCompaction(), "compactor")
        + agent.toolkit.handlers({tool: HandlerProbe().forecast()})
    )
    async with open_runtime(layer, agents=[agent]) as runtime:
        assert journal.entries == ["model up", "compactor up"]
        result = await runtime.run(agent, "Weather?")
    assert result.status == "completed"
    assert journal.entries == ["model up", "compactor up", "compactor down", "model down"]
