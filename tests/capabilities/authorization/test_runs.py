"""Tool authorization through the real engine: one toolkit, callers with different rights; an
authorizer that fails refuses the call without telling the model why."""

from __future__ import annotations

import logging
from typing import Any

import attrs
import pytest
import trio
import trio.testing

from capabilities.authorization import AccessRule, PolicyAuthorization
from effectagent import Agent, AgentPolicy, Tool, ToolCallContext, Toolkit, open_runtime
from effectagent.ai import ToolMessage
from effectagent.core import REDACTED, ToolRejected, ToolSuccess
from effectagent.effect import Layer
from effectagent.engine import ToolAuthorizationService
from effectagent.testing import ScriptedModel, Turn
from tests.engine.helpers import engine_logs


@attrs.frozen
class Path:
    path: str


read = Tool("read_file", "Read a file.", parameters=Path, success=str, readonly=True)
delete = Tool("delete_file", "Delete a file.", parameters=Path, success=str)
AGENT = Agent(
    "files",
    "Manage files.",
    AgentPolicy(max_turns=4, max_tool_calls=8, max_duration=60, tool_concurrency=2),
    Toolkit(read, delete),
)
ran: list[tuple[str, str]] = []


async def _handle(params: Path, call: ToolCallContext) -> str:
    ran.append((call.tool_name, call.author))
    return f"{call.tool_name} {params.path}"


async def _run_as(author: str, authorization: PolicyAuthorization) -> tuple[list[object], str]:
    model = ScriptedModel(
        [
            Turn.tool_calls(("read_file", {"path": "/a"}), ("delete_file", {"path": "/a"})),
            Turn.text("done"),
        ]
    )
    layer = AGENT.toolkit.handlers({read: _handle, delete: _handle}) + model.as_layer()
    async with open_runtime(layer + authorization.layer(), agents=[AGENT]) as runtime:
        result = await runtime.run(AGENT, "Tidy up.", author=author)
    (tool_message,) = [m for m in model.requests[1].messages if isinstance(m, ToolMessage)]
    return list(result.outcomes), repr(tool_message)


async def test_each_principal_gets_the_tools_its_rules_allow(
    autojump_clock: trio.testing.MockClock,
) -> None:
    authorization = PolicyAuthorization(
        [
            AccessRule.allow("read_*"),
            AccessRule.allow("*", principals="admin:*"),
            AccessRule.deny("delete_*", principals="guest", reason="guests cannot delete files"),
        ]
    )
    ran.clear()
    outcomes, shown = await _run_as("admin:ann", authorization)
    assert [type(o) for o in outcomes] == [ToolSuccess, ToolSuccess]
    assert ran == [("read_file", "admin:ann"), ("delete_file", "admin:ann")]

    ran.clear()
    outcomes, shown = await _run_as("guest", authorization)
    assert isinstance(outcomes[0], ToolSuccess)
    refused = outcomes[1]
    assert isinstance(refused, ToolRejected)
    assert refused.reason == "not authorized: guests cannot delete files"
    assert "guests cannot delete files" in shown  # the model reads why
    assert ran == [("read_file", "guest")]

    ran.clear()
    outcomes, _ = await _run_as("bob", authorization)  # allowed by no rule: the default denies
    assert isinstance(outcomes[1], ToolRejected)
    assert (
        outcomes[1].reason
        == "not authorized: the tool 'delete_file' is not available to this caller"
    )
    assert ran == [("read_file", "bob")]


async def test_a_call_the_caller_may_not_make_is_refused_before_anyone_is_asked_to_approve_it(
    autojump_clock: trio.testing.MockClock,
) -> None:
    from capabilities.approval import Answer, ScriptedApproval
    from effectagent.core import ToolApprovalRequested

    gated = Tool("wipe_disk", "Wipe a disk.", parameters=Path, success=str, needs_approval=True)
    agent = Agent(
        "ops",
        "Operate.",
        AgentPolicy(max_turns=4, max_tool_calls=8, max_duration=60, tool_concurrency=2),
        Toolkit(gated),
    )
    approver = ScriptedApproval(lambda request: Answer.approve())
    authorization = PolicyAuthorization([AccessRule.allow("*", principals="admin:*")])
    model = ScriptedModel(
        [Turn.tool_calls(("wipe_disk", {"path": "/dev/sda"})), Turn.text("done")] * 2
    )
    layer = (
        agent.toolkit.handlers({gated: _handle})
        + model.as_layer()
        + approver.layer()
        + authorization.layer()
    )
    ran.clear()
    async with open_runtime(layer, agents=[agent]) as runtime:
        refused = await runtime.run(agent, "Wipe it.", author="guest")
        allowed = await runtime.run(agent, "Wipe it.", author="admin:ann")
        guest_log = await runtime.log.entries(refused.conversation_id)
        admin_log = await runtime.log.entries(allowed.conversation_id)
    assert isinstance(refused.outcomes[0], ToolRejected)
    assert not any(isinstance(e.record, ToolApprovalRequested) for e in guest_log)
    assert [r.tool_call_id for r in approver.requests] == [allowed.outcomes[0].tool_call_id]
    assert any(isinstance(e.record, ToolApprovalRequested) for e in admin_log)
    assert ran == [("wipe_disk", "admin:ann")]


CANARY = "hunter2"


class _CrashingAuthorization:
    """An authorizer whose backend fails: what it raises names a secret."""

    async def authorize(self, tool: Tool[Any, Any], params: Any, call: ToolCallContext) -> Any:
        await trio.lowlevel.checkpoint()
        raise RuntimeError(f"db password {CANARY}")


class _SilentAuthorization:
    """An authorizer that answers with no decision at all."""

    async def authorize(self, tool: Tool[Any, Any], params: Any, call: ToolCallContext) -> Any:
        await trio.lowlevel.checkpoint()
        return None


@pytest.mark.parametrize(
    ("authorizer", "error", "detail"),
    [
        (_CrashingAuthorization(), "RuntimeError", f"RuntimeError: db password {REDACTED}"),
        (_SilentAuthorization(), "TypeError", "answered with NoneType, not a decision"),
    ],
)
async def test_a_failing_authorizer_refuses_the_call_with_a_neutral_reason(
    autojump_clock: trio.testing.MockClock, authorizer: Any, error: str, detail: str
) -> None:
    """Fail closed: the call is refused, the model reads a neutral sentence, and what was raised
    goes to the run's log (redacted) — never to the model, an event or a record."""
    model = ScriptedModel(
        [Turn.tool_calls(("read_file", {"path": "/a"})), Turn.text("could not read it")]
    )
    layer = AGENT.toolkit.handlers({read: _handle, delete: _handle}) + model.as_layer()
    layer = layer + Layer.succeed(ToolAuthorizationService, authorizer)
    ran.clear()
    with engine_logs(logging.WARNING) as logs:
        async with open_runtime(layer, agents=[AGENT], secrets=[CANARY]) as runtime:
            result = await runtime.run(AGENT, "Read /a.")
            log = await runtime.log.entries(result.conversation_id)
    (refused,) = result.outcomes
    assert isinstance(refused, ToolRejected)
    assert refused.reason == (
        "not authorized: the authorization service failed; the call was not run"
    )
    assert result.status == "completed"  # the model read the refusal and answered
    assert ran == []
    shown = repr(model.requests[1].messages)
    assert refused.reason in shown
    for seen in (shown, repr(log), repr(result)):
        assert "db password" not in seen
        assert "NoneType" not in seen
        assert CANARY not in seen
    (line,) = [line for line in logs if line["event"] == "authorization service failed"]
    assert (line["error"], line["tool_call_id"]) == (error, refused.tool_call_id)
    assert detail in line["detail"]
    assert CANARY not in repr(logs)
