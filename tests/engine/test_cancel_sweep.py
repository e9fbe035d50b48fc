"""A run cancelled at every point a seam reaches — each part the model streams, before and after
each append to the log — over a turn with a tool batch (one call that raises as it is
cancelled), steering that arrives meanwhile, and a second turn: the caller gets
``trio.Cancelled`` unless the run had already completed, the run ends once (one terminal
record, last), every prepared call is settled, steering taken from the inbox is recorded, no
task is left and the conversation is free for the next run."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Any

import pytest
import trio
import trio.testing

from effectagent.ai import LanguageModelService, ModelRequest, ModelResponse, ResponsePart, generate
from effectagent.core import (
    LogEntry,
    Record,
    RunCompletedRecord,
    RunFailedRecord,
    ToolCallPrepared,
    ToolCallSettled,
    UserInputRecorded,
)
from effectagent.effect import Layer
from effectagent.engine import (
    ConversationLogService,
    InMemoryConversationLog,
    RunResult,
    SteeringInboxService,
    open_runtime,
)
from effectagent.testing import ScriptedModel, Turn

from .helpers import Forecast, Lookup, descendant_tasks, forecast_tool, make_agent, records_of
from .test_steering_seam import Inbox


class _Cancels:
    """Cancels ``scope`` at the ``at``-th tick of kind ``kind``."""

    def __init__(self, kind: str, at: int) -> None:
        self.kind = kind
        self.left = at
        self.scope = trio.CancelScope()

    def tick(self, kind: str) -> None:
        if kind == self.kind:
            self.left -= 1
            if self.left == 0:
                self.scope.cancel()


class _Model:
    def __init__(self, cancels: _Cancels, turns: Sequence[Turn]) -> None:
        self.cancels = cancels
        self.inner = ScriptedModel(turns)

    def stream(self, request: ModelRequest) -> AsyncIterator[ResponsePart]:
        return self._stream(request)

    async def _stream(self, request: ModelRequest) -> AsyncIterator[ResponsePart]:
        async for part in self.inner.stream(request):
            self.cancels.tick("part")
            yield part

    async def generate(self, request: ModelRequest) -> ModelResponse:
        return await generate(self, request)


class _Log:
    def __init__(self, cancels: _Cancels) -> None:
        self.cancels = cancels
        self.inner = InMemoryConversationLog()

    async def append(self, conversation_id: str, records: Sequence[Record]) -> int:
        self.cancels.tick("append-before")
        await trio.lowlevel.checkpoint()
        seq = await self.inner.append(conversation_id, records)
        self.cancels.tick("append-after")
        return seq

    async def entries(self, conversation_id: str, *, after: int = 0) -> Sequence[LogEntry]:
        return await self.inner.entries(conversation_id, after=after)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


async def _cancelled_at(kind: str, at: int) -> bool:
    """Run the scenario cancelled at the ``at``-th tick of ``kind``; check it; return whether
    the cancellation came before the run completed."""
    cancels = _Cancels(kind, at)
    inbox = Inbox(["use Celsius"], [])
    tool, touchy = forecast_tool(), forecast_tool("touchy")

    async def forecast(params: Lookup, call: object) -> Forecast:
        inbox.release_steering = True  # steering arrives while the batch runs
        await trio.sleep(1)
        return Forecast(params.city, 4.0)

    async def raises_when_cancelled(params: Lookup, call: object) -> Forecast:
        try:
            await trio.sleep(1)
        except trio.Cancelled:
            raise ConnectionError("closed") from None
        return Forecast(params.city, 17.5)

    agent = make_agent(tool, touchy)
    turns = [
        Turn.tool_calls(("forecast", {"city": "Oslo"}), ("touchy", {"city": "Rome"})),
        Turn.text("Oslo 4, Rome 17.5", chunk=4),
        Turn.text("Again."),
    ]
    log = _Log(cancels)
    layer = (
        agent.toolkit.handlers({tool: forecast, touchy: raises_when_cancelled})
        + Layer.succeed(LanguageModelService, _Model(cancels, turns))
        + Layer.succeed(ConversationLogService, log)
        + Layer.succeed(SteeringInboxService, inbox)
    )
    async with open_runtime(layer, agents=[agent]) as runtime:
        result: RunResult | None = None
        with cancels.scope:
            result = await runtime.run(agent, "Weather?", conversation_id="c", create=True)
        assert runtime.active_runs == 0
        assert descendant_tasks(trio.lowlevel.current_task()) == []
        log_entries = list(await log.entries("c"))
        records = [entry.record for entry in log_entries]
        terminals = [r for r in records if isinstance(r, RunCompletedRecord | RunFailedRecord)]
        assert len(terminals) == 1, terminals
        assert terminals[0] is records[-1]
        before = cancels.scope.cancel_called and not isinstance(terminals[0], RunCompletedRecord)
        if cancels.scope.cancel_called:
            if result is not None:  # the cancellation came after the run had completed
                assert result.status == "completed"
                assert isinstance(terminals[0], RunCompletedRecord)
            else:
                assert cancels.scope.cancelled_caught
                assert isinstance(terminals[0], RunFailedRecord)
                assert terminals[0].reason == "interrupted"
        prepared = {r.tool_call_id for r in records_of(log_entries, ToolCallPrepared)}
        settled = [r.tool_call_id for r in records_of(log_entries, ToolCallSettled)]
        assert len(settled) == len(set(settled))
        assert prepared <= set(settled)
        if inbox.steering == [] and inbox.release_steering:  # taken: it must be in the log
            steering = [
                r for r in records_of(log_entries, UserInputRecorded) if r.kind == "steering"
            ]
            assert [r.text for r in steering] == ["use Celsius"]
        cancels.kind = ""  # the next run is not cancelled
        again = await runtime.run(agent, "Again?", conversation_id="c")
        assert again.status == "completed"
    return before


@pytest.mark.parametrize("kind", ["part", "append-before", "append-after"])
async def test_a_run_cancelled_at_every_seam_point_ends_well(
    kind: str, autojump_clock: trio.testing.MockClock
) -> None:
    at = 1
    while await _cancelled_at(kind, at):
        at += 1
    assert at > 2  # the sweep reached into the run
