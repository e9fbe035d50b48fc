"""Run observers: the services told when a run starts and how it ended (the steering inbox first,
then those of ``observe_runs``) — each run that started is told its end once, whatever the end."""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.testing

from effectagent.ai import AuthenticationFailed
from effectagent.core import EngineDefect, RunFailed
from effectagent.effect import Layer, MissingServicesError, ServiceKey
from effectagent.engine import RunEnding, RunInfo, observe_runs, open_runtime
from effectagent.testing import Turn

from .helpers import TrackingModel, make_agent, run_events

Ledger = ServiceKey[Any]("test.Ledger")
Audit = ServiceKey[Any]("test.Audit")


class Recorder:
    def __init__(self, journal: list[str], name: str, fail_start: bool = False) -> None:
        self.journal = journal
        self.name = name
        self.fail_start = fail_start

    async def run_started(self, run: RunInfo) -> None:
        self.journal.append(f"{self.name} started {run.agent} by {run.author}")
        if self.fail_start:
            raise RuntimeError("no room")

    async def run_ended(self, run: RunInfo, ending: RunEnding) -> None:
        self.journal.append(f"{self.name} ended {ending}")


def _layer(model: TrackingModel, journal: list[str], **fail: bool) -> Layer:
    observers = Layer.succeed(
        Ledger, Recorder(journal, "ledger", fail.get("ledger", False))
    ) + Layer.succeed(Audit, Recorder(journal, "audit"))
    # observe_runs needs the observers built first: provide_merge keeps them in the result too.
    return model.layer() + observe_runs(Ledger, Audit).provide_merge(observers)


@pytest.mark.parametrize(
    ("turns", "ending"),
    [
        ([Turn.text("fine")], "completed"),
        ([Turn.fail(AuthenticationFailed("bad key"))], "failed"),
        ([Turn.hanging()], "interrupted"),
    ],
)
async def test_every_observer_hears_each_start_and_end_once_in_order(
    autojump_clock: trio.testing.MockClock, turns: list[Turn], ending: str
) -> None:
    journal: list[str] = []
    agent = make_agent()
    model = TrackingModel(turns)
    async with open_runtime(_layer(model, journal), agents=[agent]) as runtime:
        with trio.move_on_after(10):
            await runtime.run(agent, "Hi", author="ada")
    assert journal == [
        "ledger started weather by ada",
        "audit started weather by ada",
        f"ledger ended {ending}",
        f"audit ended {ending}",
    ]


async def test_an_observer_refusing_the_start_fails_the_run_before_the_model_is_asked(
    autojump_clock: trio.testing.MockClock,
) -> None:
    journal: list[str] = []
    agent = make_agent()
    model = TrackingModel([Turn.text("never")])
    async with open_runtime(_layer(model, journal, ledger=True), agents=[agent]) as runtime:
        events = await run_events(runtime, agent, "Hi")
    terminal = events[-1]
    assert isinstance(terminal, RunFailed)
    assert isinstance(terminal.error, EngineDefect)
    assert "no room" in terminal.error.message
    assert model.requests == []
    assert journal == [
        "ledger started weather by user",
        "ledger ended failed",
        "audit ended failed",
    ]


async def test_observe_runs_names_a_missing_observer_at_preflight() -> None:
    with pytest.raises(MissingServicesError, match=r"test\.Audit"):
        async with open_runtime(TrackingModel().layer() + observe_runs(Audit)):
            pass


async def test_observe_runs_refuses_a_service_that_is_not_an_observer() -> None:
    layer = TrackingModel().layer() + observe_runs(Audit).provide(Layer.succeed(Audit, object()))
    with pytest.raises(TypeError, match="not a RunObserver"):
        async with open_runtime(layer):
            pass
