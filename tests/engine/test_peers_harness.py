"""The peers benchmark's own logic: effectagent's driver does each scenario's work (the model
requests and tool calls it asks for, the answer), and the figures are computed per round."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import pytest
import trio

from benchmarks._peers import _protocol
from benchmarks._peers._protocol import ANSWER, SCENARIOS, Counts, DriverError, Scenario
from benchmarks._peers.drive_effectagent import offline_model, session
from benchmarks.peers import Sample, row_of
from effectagent.ai import FinishPart, ModelRequest, ResponsePart, ToolCallPart, UserMessage


@pytest.mark.parametrize("key", sorted(SCENARIOS))
def test_effectagents_driver_does_exactly_the_scenarios_work(key: str) -> None:
    """A batch of runs makes the scenario's model requests and tool calls, no more and no fewer,
    and every run answers (the batch would raise otherwise)."""
    scenario = SCENARIOS[key]
    figures = trio.run(_protocol._batch, session, scenario, 3)
    assert figures["wall_us"] > 0
    assert (Counts.model_requests, Counts.tool_calls) == (
        3 * scenario.model_requests,
        3 * scenario.tool_calls,
    )


def test_a_driver_that_skips_work_is_refused() -> None:
    """The check is real: a run that skips the scenario's tool calls fails the batch."""

    @asynccontextmanager
    async def skipping(scenario: Scenario) -> AsyncIterator[Callable[[], Awaitable[str]]]:
        async def run_once() -> str:
            Counts.model_requests += 1
            return ANSWER

        yield run_once

    with pytest.raises(DriverError, match="tool calls"):
        trio.run(_protocol._batch, skipping, SCENARIOS["c"], 2)


def test_each_ratio_is_taken_within_a_round() -> None:
    """The lead is the median over the rounds of the faster peer's time over ours, each from the
    same round — a slow round for everyone changes no ratio."""
    scenario = SCENARIOS["a"]
    series = {
        "ours": [Sample(10.0, 10.0), Sample(20.0, 20.0), Sample(10.0, 10.0)],
        "peer1": [Sample(100.0, 90.0), Sample(200.0, 180.0), Sample(300.0, 270.0)],
        "peer2": [Sample(150.0, 140.0), Sample(180.0, 160.0), Sample(250.0, 240.0)],
    }
    row = row_of(scenario, series, "ours")
    # Per round: min(100, 150)/10 = 10, min(200, 180)/20 = 9, min(300, 250)/10 = 25.
    assert row.lead == 10.0
    assert row.us == {"ours": 10.0, "peer1": 200.0, "peer2": 180.0}
    assert row.to_fastest["ours"] == 1.0
    assert row.spread == 15.0  # per round: 15, 10, 30


def test_effectagents_model_declares_each_call_whole_as_the_peers_models_do() -> None:
    """The peers' offline models answer with whole tool calls (nothing streamed); so does
    effectagent's: a tool turn is the calls' declarations and the finish, no argument deltas."""

    async def parts() -> list[ResponsePart]:
        model = offline_model(SCENARIOS["c"])
        return [part async for part in model.stream(ModelRequest((UserMessage.text("Go."),)))]

    played = trio.run(parts)
    assert [type(p) for p in played] == [ToolCallPart] * 10 + [FinishPart]
