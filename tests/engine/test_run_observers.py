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
    # The audit was never told the run started (the ledger's refusal came first): it hears no end.
    assert journal == [
        "ledger started weather by user",
        "ledger ended failed",
    ]


async def test_an_observer_cancelled_in_its_start_hears_the_end_and_later_ones_hear_nothing(
    autojump_clock: trio.testing.MockClock,
) -> None:
    journal: list[str] = []

    class Slow(Recorder):
        async def run_started(self, run: RunInfo) -> None:
            await super().run_started(run)
            await trio.sleep_forever()

    agent = make_agent()
    observers = Layer.succeed(Ledger, Slow(journal, "ledger")) + Layer.succeed(
        Audit, Recorder(journal, "audit")
    )
    layer = TrackingModel([Turn.text("never")]).layer() + observe_runs(Ledger, Audit).provide_merge(
        observers
    )
    async with open_runtime(layer, agents=[agent]) as runtime:
        with trio.move_on_after(10):
            await runtime.run(agent, "Hi")
    assert journal == ["ledger started weather by user", "ledger ended interrupted"]


async def test_observe_runs_names_a_missing_observer_at_preflight() -> None:
    with pytest.raises(MissingServicesError, match=r"test\.Audit"):
        async with open_runtime(TrackingModel().layer() + observe_runs(Audit)):
            pass


async def test_observe_runs_refuses_a_service_that_is_not_an_observer() -> None:
    layer = TrackingModel().layer() + observe_runs(Audit).provide(Layer.succeed(Audit, object()))
    with pytest.raises(TypeError, match="not a RunObserver"):
        async with open_runtime(layer):
            pass


def test_observe_runs_refuses_a_key_given_twice() -> None:
    """Each observer is told once per run: a key given twice would tell it twice."""
    with pytest.raises(
        ValueError, match=r"observe_runs: ServiceKey\('test\.Audit'\) is given twice"
    ):
        observe_runs(Ledger, Audit, Audit)


@pytest.mark.parametrize(
    ("keys", "message"),
    [
        (("test.Audit",), "observe_runs takes ServiceKeys, got str"),
        ((Ledger, 5), "observe_runs takes ServiceKeys, got int"),
        (([Ledger, Audit],), "observe_runs takes ServiceKeys, got list"),
    ],
)
def test_observe_runs_takes_service_keys(keys: tuple[Any, ...], message: str) -> None:
    with pytest.raises(TypeError, match=message):
        observe_runs(*keys)
