"""A model stream that raises an ordinary exception as it is cancelled (an HTTP client reporting
its closed connection) must not turn the run's cancellation into a failure: a cancelled caller
gets ``trio.Cancelled`` with the interruption written, a runtime close ends the run
"interrupted", and a run whose deadline passed is exhausted — never an ``EngineDefect``."""

from __future__ import annotations

from collections.abc import AsyncIterator

import trio
import trio.testing

from effectagent.ai import (
    LanguageModelService,
    ModelRequest,
    ModelResponse,
    ResponsePart,
    TextDeltaPart,
    TextStartPart,
    generate,
)
from effectagent.core import EngineDefect, RunFailedRecord
from effectagent.effect import Layer
from effectagent.engine import RunResult, open_runtime
from effectagent.testing import Turn

from .helpers import TrackingModel, descendant_tasks, entries, make_agent, make_policy, records_of


class _RaisesWhenCancelled:
    """A model whose ``raising_call``-th stream shows a delta, then waits, and raises
    ``ConnectionError`` when it is cancelled; its other calls answer as ``then`` scripts them."""

    def __init__(self, *then: Turn, raising_call: int = 1) -> None:
        self.calls = 0
        self.then = TrackingModel(then)
        self.raising_call = raising_call

    def stream(self, request: ModelRequest) -> AsyncIterator[ResponsePart]:
        self.calls += 1
        if self.calls != self.raising_call:
            return self.then.stream(request)
        return self._raising()

    async def _raising(self) -> AsyncIterator[ResponsePart]:
        yield TextStartPart("t")
        yield TextDeltaPart("t", "Let me think")
        try:
            await trio.sleep_forever()
        except trio.Cancelled:
            raise ConnectionError("connection closed while reading") from None

    async def generate(self, request: ModelRequest) -> ModelResponse:
        return await generate(self, request)

    def layer(self) -> Layer:
        return Layer.succeed(LanguageModelService, self, name="RaisesWhenCancelled")


async def test_a_cancelled_caller_gets_cancelled_when_the_model_raises_as_it_is_cancelled(
    autojump_clock: trio.testing.MockClock,
) -> None:
    agent = make_agent()
    model = _RaisesWhenCancelled()
    async with open_runtime(model.layer(), agents=[agent]) as runtime:
        returned: RunResult | None = None
        with trio.move_on_after(1) as cancel:
            returned = await runtime.run(agent, "Think.", conversation_id="c", create=True)
        assert cancel.cancelled_caught  # trio.Cancelled reached the caller
        assert returned is None
        assert runtime.active_runs == 0
        assert descendant_tasks(trio.lowlevel.current_task()) == []
        log = await entries(runtime, "c")
    (record,) = records_of(log, RunFailedRecord)
    assert record.reason == "interrupted"
    assert record.error is None


async def test_a_runtime_close_ends_the_run_interrupted_when_the_model_raises_as_it_is_cancelled(
    autojump_clock: trio.testing.MockClock,
) -> None:
    agent = make_agent()
    model = _RaisesWhenCancelled()
    results: list[RunResult] = []
    async with open_runtime(model.layer(), agents=[agent]) as runtime:
        async with trio.open_nursery() as nursery:

            async def run() -> None:
                results.append(await runtime.run(agent, "Think.", conversation_id="c", create=True))

            nursery.start_soon(run)
            await trio.sleep(1)
            await runtime.aclose()
        log = await entries(runtime, "c")
    (result,) = results
    assert result.status == "interrupted"
    (record,) = records_of(log, RunFailedRecord)
    assert record.reason == "interrupted"


async def test_a_deadline_exhausts_the_run_when_the_model_raises_as_it_is_cancelled(
    autojump_clock: trio.testing.MockClock,
) -> None:
    agent = make_agent(policy=make_policy(max_duration=10.0))
    model = _RaisesWhenCancelled(Turn.text("Out of time: here is what I have."))
    async with open_runtime(model.layer(), agents=[agent]) as runtime:
        result = await runtime.run(agent, "Think.")
    assert not isinstance(result.error, EngineDefect)
    assert model.calls == 2  # the grace turn asked the model again
    assert result.status == "completed"


async def test_a_caller_cancelled_in_the_grace_turn_gets_cancelled_when_the_model_raises(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # The turns' deadline is 9 s (max_duration less the 1 s grace reserve); the grace turn's
    # model call is the one that raises as it is cancelled, at 9.5 s.
    agent = make_agent(policy=make_policy(max_duration=10.0))
    model = _RaisesWhenCancelled(Turn.hanging(), raising_call=2)
    async with open_runtime(model.layer(), agents=[agent]) as runtime:
        returned: RunResult | None = None
        with trio.move_on_after(9.5) as cancel:
            returned = await runtime.run(agent, "Think.", conversation_id="c", create=True)
        assert cancel.cancelled_caught
        assert returned is None
        assert model.calls == 2
        log = await entries(runtime, "c")
    (record,) = records_of(log, RunFailedRecord)
    assert record.reason == "interrupted"
