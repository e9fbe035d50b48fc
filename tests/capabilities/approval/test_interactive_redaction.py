"""What a person answers through ``InteractiveApproval`` is redacted with the runtime's secrets
before anything is told of it: the reason and the name of who decided reach neither the decision
record, nor the engine's log lines, nor the ``ApprovalClosed`` the UIs get."""

from __future__ import annotations

import logging

import attrs
import pytest
import structlog
import trio
import trio.testing
from structlog.testing import capture_logs

from capabilities import in_memory_storage
from capabilities.approval import (
    ApprovalClosed,
    ApprovalOpened,
    ApprovalRule,
    ApprovalUpdate,
    InteractiveApproval,
    PolicyApproval,
)
from effectagent import Agent, AgentPolicy, Tool, ToolCallContext, Toolkit, open_runtime
from effectagent.core import ToolApprovalDecided
from effectagent.testing import ScriptedModel, Turn

SECRET = "CANARY-7f3a9c-SECRET"


@attrs.frozen
class Note:
    note: str


echo = Tool("echo", "Echo a note.", parameters=Note, success=str, needs_approval=True)
agent = Agent(
    "keeper",
    "Keep secrets.",
    AgentPolicy(max_turns=4, max_tool_calls=4, max_duration=600),
    Toolkit(echo),
)


async def _echo(params: Note, call: ToolCallContext) -> str:
    return "ok"


@pytest.mark.parametrize("approved", [True, False])
async def test_a_persons_reason_and_name_are_redacted_everywhere(
    approved: bool, autojump_clock: trio.testing.MockClock
) -> None:
    approval = InteractiveApproval()
    model = ScriptedModel([Turn.tool_calls(("echo", {"note": "n"})), Turn.text("done")])
    layer = agent.toolkit.handlers({echo: _echo}) + model.as_layer() + in_memory_storage()
    updates: list[ApprovalUpdate] = []
    logger = logging.getLogger("effectagent")
    before = logger.level
    logger.setLevel(logging.DEBUG)
    try:
        with capture_logs() as logs:
            async with open_runtime(
                layer + approval.layer(), agents=[agent], secrets=[SECRET]
            ) as runtime:
                async with trio.open_nursery() as nursery:
                    channel = approval.subscribe()

                    async def person() -> None:
                        async for update in channel:
                            updates.append(update)
                            if isinstance(update, ApprovalOpened):
                                approval.answer(
                                    update.approval.approval_id,
                                    approved,
                                    reason=f"because {SECRET}",
                                    by=f"ann {SECRET}",
                                )

                    nursery.start_soon(person)
                    result = await runtime.run(agent, "go")
                    nursery.cancel_scope.cancel()
                log = await runtime.log.entries(result.conversation_id)
    finally:
        logger.setLevel(before)
        structlog.reset_defaults()
    (decided,) = [e.record for e in log if isinstance(e.record, ToolApprovalDecided)]
    assert decided.decision.approved is approved
    assert decided.decision.reason == "because [REDACTED]"
    assert decided.decision.decided_by == "ann [REDACTED]"
    (closed,) = [u for u in updates if isinstance(u, ApprovalClosed)]
    assert closed.reason == "because [REDACTED]"
    seen = [repr(log), repr(updates), repr(logs), repr(result)]
    assert [text for text in seen if SECRET in text] == []


async def test_a_person_a_policy_asks_is_redacted_and_closed_as_its_own_layer_would(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """``PolicyApproval(..., ask=person).layer()`` (the guide's way to ask a person about what
    the rules leave) never built the person's layer: the ``ApprovalClosed`` every UI got held
    the reason as typed, secret and all, and the UIs' channels never ended with the runtime."""
    person = InteractiveApproval()
    policy = PolicyApproval(
        [ApprovalRule.ask()], ask=PolicyApproval([ApprovalRule.ask()], ask=person)
    )
    model = ScriptedModel([Turn.tool_calls(("echo", {"note": "n"})), Turn.text("done")])
    layer = agent.toolkit.handlers({echo: _echo}) + model.as_layer() + policy.layer()
    updates: list[ApprovalUpdate] = []
    channel = person.subscribe()
    async with open_runtime(layer, agents=[agent], secrets=[SECRET]) as runtime:
        async with trio.open_nursery() as nursery:

            async def ui() -> None:
                async for update in channel:
                    updates.append(update)
                    if isinstance(update, ApprovalOpened):
                        person.deny(update.approval.approval_id, f"no: {SECRET}", by="ann")

            nursery.start_soon(ui)
            result = await runtime.run(agent, "go")
            nursery.cancel_scope.cancel()
        log = await runtime.log.entries(result.conversation_id)
    (decided,) = [e.record for e in log if isinstance(e.record, ToolApprovalDecided)]
    assert decided.decision.reason == "no: [REDACTED]"
    (closed,) = [u for u in updates if isinstance(u, ApprovalClosed)]
    assert closed.reason == "no: [REDACTED]"
    assert SECRET not in repr(updates)
    with pytest.raises(trio.EndOfChannel):  # the runtime closed: the UI's channel ended
        channel.receive_nowait()
