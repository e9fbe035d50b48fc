"""Close, reopen and continue a conversation (deployment class P): the next model request is the
projection of the whole log, read back from the file.

Engine tests over SQLite run on Trio's real clock: a ``MockClock`` that jumps whenever every task
is blocked would jump while a task waits for the database's worker thread — straight to the run's
deadline. Nothing here sleeps, so the real clock costs nothing.
"""

from __future__ import annotations

import attrs

from effectagent import Agent, AgentPolicy, Tool, ToolCallContext, Toolkit, open_runtime
from effectagent.ai import SystemMessage, UserMessage
from effectagent.core import (
    BudgetExhausted,
    RunFailedRecord,
    UserInputRecorded,
    project_messages,
)
from effectagent.engine import ConversationLogService
from effectagent.testing import ScriptedModel, Turn
from tests.capabilities.durable.helpers import Stores

from ..records import same


@attrs.frozen
class Lookup:
    city: str


@attrs.frozen
class Forecast:
    city: str
    high_c: float


forecast = Tool("forecast", "Today's high.", parameters=Lookup, success=Forecast, readonly=True)


async def handle(params: Lookup, call: ToolCallContext) -> Forecast:
    return Forecast(params.city, 4.0)


AGENT = Agent(
    "weather",
    "Answer briefly.",
    AgentPolicy(
        max_turns=2, max_tool_calls=4, max_duration=60, tool_concurrency=2, on_exhaustion="fail"
    ),
    Toolkit(forecast),
)


def layer(model: ScriptedModel, store: Stores):  # type: ignore[no-untyped-def]
    return Toolkit(forecast).handlers({forecast: handle}) + model.as_layer() + store.storage()


async def test_a_reopened_conversation_continues_from_its_whole_log(store: Stores) -> None:
    first = ScriptedModel(
        [
            Turn.text("Hi Ann."),
            Turn.tool_calls(("forecast", {"city": "Oslo"})),
            Turn.tool_calls(("forecast", {"city": "Rome"})),  # out of turns: the run fails
        ]
    )
    async with open_runtime(layer(first, store), agents=[AGENT]) as runtime:
        started = await runtime.run(AGENT, "I am Ann.")
        conversation = started.conversation_id
        failed = await runtime.run(AGENT, "Weather in Oslo?", conversation_id=conversation)
        assert failed.status == "failed"
        before = list(await runtime.log.entries(conversation))

    second = ScriptedModel([Turn.text("You are Ann; 4 °C in Oslo.")])
    async with open_runtime(layer(second, store), agents=[AGENT]) as runtime:
        log = runtime.context.require(ConversationLogService)
        assert log is runtime.log
        result = await runtime.run(AGENT, "Who am I, and how warm?", conversation_id=conversation)
        after = list(await runtime.log.entries(conversation))

    assert result.status == "completed"
    failure = next(e.record for e in before if isinstance(e.record, RunFailedRecord))
    assert isinstance(failure.error, BudgetExhausted)  # a RunError subclass read back whole
    # Everything up to and including the new user input, projected, is what the model was sent.
    new_input = next(
        i
        for i, e in enumerate(after)
        if isinstance(e.record, UserInputRecorded) and e.record.text == "Who am I, and how warm?"
    )
    (request,) = second.requests
    assert request.messages == (
        SystemMessage("Answer briefly."),
        *project_messages(after[: new_input + 1]),
    )
    assert request.messages[1] == UserMessage.text("I am Ann.")
    assert [e.seq for e in after] == list(range(1, len(after) + 1))
    # The history read back after the restart is the history written before it.
    assert [e.seq for e in after[: len(before)]] == [e.seq for e in before]
    assert all(same(a.record, b.record) for a, b in zip(after, before, strict=False))
