"""One run per conversation at a time in a runtime: a second run of a conversation whose run is
going is refused before it starts (``ConversationBusy``), with nothing written; other
conversations run alongside, and the conversation is free again once its run ended."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from effectagent.ai import ModelRequest, ToolCallContext, UserMessage
from effectagent.engine import ConversationBusy, open_runtime
from effectagent.testing import FunctionModel, ScriptedModel, Turn

from .helpers import HandlerProbe, forecast_tool, make_agent


async def test_a_second_run_of_a_busy_conversation_is_refused_and_nothing_is_written(
    autojump_clock: trio.testing.MockClock,
) -> None:
    probe, tool = HandlerProbe(), forecast_tool()
    gate = trio.Event()

    held: list[str] = []  # the conversation whose tool waits for the gate

    async def waits(params: object, call: ToolCallContext) -> object:
        if call.conversation_id in held:
            await gate.wait()
        return await probe.forecast()(params, call)

    def answer(request: ModelRequest) -> Turn:
        if isinstance(request.messages[-1], UserMessage):  # a new question: look it up
            return Turn.tool_calls(("forecast", {"city": "Oslo"}))
        return Turn.text("4 °C")

    agent = make_agent(tool)
    layer = agent.toolkit.handlers({tool: waits}) + FunctionModel(answer).as_layer()
    async with open_runtime(layer, agents=[agent]) as runtime:
        first = await runtime.run(agent, "warm?")  # the conversation exists
        conversation = first.conversation_id
        held.append(conversation)  # its next run's tool waits until the test opens the gate
        before = len(await runtime.log.entries(conversation))
        async with trio.open_nursery() as nursery:
            nursery.start_soon(lambda: runtime.run(agent, "again?", conversation_id=conversation))
            await trio.testing.wait_all_tasks_blocked()  # that run waits in its tool
            written = len(await runtime.log.entries(conversation))
            with pytest.raises(ConversationBusy, match=repr(conversation)):
                await runtime.run(agent, "and now?", conversation_id=conversation)
            with pytest.raises(ConversationBusy):
                async with runtime.stream(agent, "and now?", conversation_id=conversation):
                    pass
            other = await runtime.run(agent, "elsewhere?")  # other conversations are free
            assert (other.status, other.finish_reason, other.text) == ("completed", "stop", "4 °C")
            assert len(await runtime.log.entries(conversation)) == written  # nothing of the refused
            gate.set()
        after = await runtime.run(agent, "once more?", conversation_id=conversation)
    assert written > before
    assert (after.status, after.finish_reason) == ("completed", "stop")
    assert trio.current_time() < 1  # nothing waited for a budget to run out


async def test_the_conversation_is_free_again_after_a_failed_or_interrupted_run(
    autojump_clock: trio.testing.MockClock,
) -> None:
    from effectagent.ai import AuthenticationFailed

    agent = make_agent()
    model = ScriptedModel(
        [
            Turn.text("one"),
            Turn.fail(AuthenticationFailed("bad key")),
            Turn.hanging(),
            Turn.text("ok"),
        ]
    )
    async with open_runtime(model.as_layer(), agents=[agent]) as runtime:
        first = await runtime.run(agent, "a")
        conversation = first.conversation_id
        failed = await runtime.run(agent, "b", conversation_id=conversation)
        with trio.move_on_after(5):
            await runtime.run(agent, "c", conversation_id=conversation)
        last = await runtime.run(agent, "d", conversation_id=conversation)
    assert failed.status == "failed"
    assert last.text == "ok"
