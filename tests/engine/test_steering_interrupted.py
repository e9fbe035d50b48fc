"""Steering drained at a turn boundary is never lost to an interruption: it was taken from the
inbox, so if the run is interrupted while its record is appended, the record goes with the
run's interruption."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import trio
import trio.testing

from effectagent.ai import ToolCallContext
from effectagent.core import LogEntry, Record, RunFailedRecord, UserInputRecorded
from effectagent.effect import Layer
from effectagent.engine import (
    ConversationLogService,
    InMemoryConversationLog,
    SteeringInboxService,
    open_runtime,
)
from effectagent.testing import Turn

from .helpers import Forecast, Lookup, TrackingModel, forecast_tool, make_agent, records_of
from .test_steering_seam import Inbox


class _SlowSteeringLog:
    """An in-memory log whose append of steering takes a second (storage I/O)."""

    def __init__(self) -> None:
        self.inner = InMemoryConversationLog()

    async def append(self, conversation_id: str, records: Sequence[Record]) -> int:
        if any(isinstance(r, UserInputRecorded) and r.kind == "steering" for r in records):
            await trio.sleep(1)
        return await self.inner.append(conversation_id, records)

    async def entries(self, conversation_id: str, *, after: int = 0) -> Sequence[LogEntry]:
        return await self.inner.entries(conversation_id, after=after)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


async def test_steering_drained_as_the_run_is_interrupted_is_recorded(
    autojump_clock: trio.testing.MockClock,
) -> None:
    inbox = Inbox(["use Celsius"], [])
    tool = forecast_tool()

    async def handle(params: Lookup, call: ToolCallContext) -> Forecast:
        inbox.release_steering = True  # steering arrives while the batch runs
        return Forecast(params.city, 4.0)

    agent = make_agent(tool)
    log = _SlowSteeringLog()
    model = TrackingModel([Turn.tool_calls(("forecast", {"city": "Oslo"})), Turn.text("4 °C")])
    layer = (
        agent.toolkit.handlers({tool: handle})
        + model.layer()
        + Layer.succeed(ConversationLogService, log)
        + Layer.succeed(SteeringInboxService, inbox)
    )
    async with open_runtime(layer, agents=[agent]) as runtime:
        # Interrupted while the drained steering's record is being appended.
        with trio.move_on_after(0.5) as cancel:
            await runtime.run(agent, "Weather?", conversation_id="c", create=True)
        assert cancel.cancelled_caught
        assert runtime.active_runs == 0
        entries = list(await log.entries("c"))
    assert inbox.steering == []  # it was taken from the inbox...
    steering = [r for r in records_of(entries, UserInputRecorded) if r.kind == "steering"]
    assert [r.text for r in steering] == ["use Celsius"]  # ...and is in the log
    (ended,) = records_of(entries, RunFailedRecord)
    assert ended.reason == "interrupted"
    assert entries[-1].record is ended
