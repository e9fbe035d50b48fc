"""The steering seam (spec §4): accepted steering becomes canonical before the next model request;
follow-ups are admitted only when the agent would otherwise stop; FIFO per conversation."""

from __future__ import annotations

from collections.abc import Sequence

import trio
import trio.testing

from effectagent.ai import ToolCallContext, UserMessage
from effectagent.core import RunCompleted, UserInputRecorded
from effectagent.effect import Layer
from effectagent.engine import RunEnding, RunInfo, SteeringInboxService, SteeringInput
from effectagent.testing import Turn

from .helpers import Forecast, Lookup, forecast_tool, make_agent, records_of, run_script


class Inbox:
    """A test inbox: steering queued up front, follow-ups handed out once."""

    def __init__(self, steering: list[str], follow_ups: list[str]) -> None:
        self.steering = [
            SteeringInput(f"s{i}", "steering", t, "op", 0.0) for i, t in enumerate(steering)
        ]
        self.follow_ups = [
            SteeringInput(f"f{i}", "follow-up", t, "op", 0.0) for i, t in enumerate(follow_ups)
        ]
        self.release_steering = False
        self.active: list[str] = []
        self.ended: list[str] = []

    def drain_steering(self, conversation_id: str) -> Sequence[SteeringInput]:
        if not self.release_steering:
            return ()
        taken, self.steering = self.steering, []
        return taken

    def take_follow_ups(self, conversation_id: str) -> Sequence[SteeringInput]:
        taken, self.follow_ups = self.follow_ups, []
        return taken

    async def run_started(self, run: RunInfo) -> None:
        self.active.append(run.run_id)

    async def run_ended(self, run: RunInfo, ending: RunEnding) -> None:
        self.active.remove(run.run_id)
        self.ended.append(ending)


def user_texts(request_messages: Sequence[object]) -> list[str]:
    return [m.content[0].text for m in request_messages if isinstance(m, UserMessage)]


async def test_steering_enters_before_the_next_request_in_fifo_order(
    autojump_clock: trio.testing.MockClock,
) -> None:
    inbox = Inbox(["use Celsius", "be brief"], [])
    tool = forecast_tool()

    async def handle(params: Lookup, call: ToolCallContext) -> Forecast:
        inbox.release_steering = True  # steering arrives while the batch runs
        return Forecast(params.city, 4.0)

    ran = await run_script(
        make_agent(tool),
        {tool: handle},
        [Turn.tool_calls(("forecast", {"city": "Oslo"})), Turn.text("4 °C")],
        extra=Layer.succeed(SteeringInboxService, inbox),
    )
    assert isinstance(ran.events[-1], RunCompleted)
    first, second = ran.model.requests
    assert "use Celsius" not in user_texts(first.messages)
    assert user_texts(second.messages)[-2:] == ["use Celsius", "be brief"]
    steering = [r for r in records_of(ran.log, UserInputRecorded) if r.kind == "steering"]
    assert [r.text for r in steering] == ["use Celsius", "be brief"]


async def test_follow_ups_are_admitted_only_when_the_agent_would_stop(
    autojump_clock: trio.testing.MockClock,
) -> None:
    inbox = Inbox([], ["and tomorrow?"])
    ran = await run_script(
        make_agent(),
        {},
        [Turn.text("today: 4 °C"), Turn.text("tomorrow: 6 °C")],
        extra=Layer.succeed(SteeringInboxService, inbox),
    )
    final = ran.events[-1]
    assert isinstance(final, RunCompleted)
    assert final.text == "tomorrow: 6 °C"
    assert user_texts(ran.model.requests[1].messages)[-1] == "and tomorrow?"
    kinds = [r.kind for r in records_of(ran.log, UserInputRecorded)]
    assert kinds == ["user", "follow-up"]


async def test_the_inbox_knows_when_a_run_of_its_conversation_is_active(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Steering is accepted only while a run is active: the engine tells the inbox when each run
    starts and how it ended."""
    inbox = Inbox([], [])
    seen_active: list[list[str]] = []
    tool = forecast_tool()

    async def handle(params: Lookup, call: ToolCallContext) -> Forecast:
        seen_active.append(list(inbox.active))
        return Forecast(params.city, 4.0)

    ran = await run_script(
        make_agent(tool),
        {tool: handle},
        [Turn.tool_calls(("forecast", {"city": "Oslo"})), Turn.text("4 °C")],
        extra=Layer.succeed(SteeringInboxService, inbox),
    )
    assert seen_active == [[ran.terminal.run_id]]
    assert inbox.active == []
    assert inbox.ended == ["completed"]
