"""MCP tools through the real engine: the connection as a ToolSource whose list changes between
turns (never within a batch), arguments checked before they leave, failures and lost calls
settled as the right outcomes, authorization and approval applied per tool."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs
import trio

from capabilities.approval import ApprovalRule, PolicyApproval
from capabilities.authorization import AccessRule, PolicyAuthorization
from capabilities.mcp import McpConnection, McpLimits, StdioServer, connect
from effectagent import Agent, AgentPolicy, Toolkit, open_runtime, tool
from effectagent.ai import ModelRequest, ToolAnnotations
from effectagent.core import (
    ToolFailure,
    ToolInvalidInput,
    ToolRejected,
    ToolSuccess,
    ToolUnknownOutcome,
)
from effectagent.engine import RunResult
from effectagent.testing import FunctionModel, ScriptedModel, Turn

from .conftest import calls

POLICY = AgentPolicy(max_turns=6, max_tool_calls=16, max_duration=120, tool_concurrency=4)


#: Who the demo server says it is, as a result or a failure records it.
DEMO_IDENTITY = {"name": "demo", "version": "1.2.3", "protocol_version": "2025-11-25"}


def agent_of(server: StdioServer) -> Agent:
    return Agent("mcp", "Use the server's tools.", POLICY, tool_sources=(server.key,))


async def run_script(
    connection: McpConnection, agent: Agent, turns: list[Turn], **layers: Any
) -> RunResult:
    layer = connection.layer() + ScriptedModel.layer(turns)
    for extra in layers.values():
        layer = layer + extra
    async with open_runtime(layer, agents=[agent]) as runtime:
        return await runtime.run(agent, "Go.")


async def test_a_tool_call_runs_through_the_engine(demo: StdioServer) -> None:
    agent = agent_of(demo)
    async with connect(demo) as connection:
        result = await run_script(
            connection,
            agent,
            [Turn.tool_calls(("demo_add", {"a": 20, "b": 22})), Turn.text("42")],
        )
    (outcome,) = result.outcomes
    assert isinstance(outcome, ToolSuccess)
    assert outcome.result["structured"] == {"sum": 42}
    assert outcome.result["server"] == {
        "name": "demo",
        "version": "1.2.3",
        "protocol_version": "2025-11-25",
    }


async def test_invalid_arguments_never_reach_the_server(demo: StdioServer, call_log: Path) -> None:
    agent = agent_of(demo)
    async with connect(demo) as connection:
        result = await run_script(
            connection,
            agent,
            [
                Turn.tool_calls(("demo_add", {"a": "twenty", "b": 22}), ("demo_echo", {})),
                Turn.tool_calls(("demo_echo", {"text": "after"})),
                Turn.text("done"),
            ],
        )
    bad_add, bad_echo, echo = result.outcomes
    assert isinstance(bad_add, ToolInvalidInput)
    assert "$.a" in bad_add.message
    assert isinstance(bad_echo, ToolInvalidInput)
    assert "text" in bad_echo.message
    assert isinstance(echo, ToolSuccess)
    # The server received exactly one call: the valid one.
    assert calls(call_log) == [{"name": "echo", "arguments": {"text": "after"}}]


async def test_failures_are_declared_and_a_bad_output_is_a_defect(demo: StdioServer) -> None:
    small = attrs.evolve(demo, limits=McpLimits(call_timeout=20, max_result_bytes=2048))
    agent = agent_of(small)
    async with connect(small) as connection:
        result = await run_script(
            connection,
            agent,
            [
                Turn.tool_calls(
                    ("demo_fail", {"why": "quota"}),
                    ("demo_big", {"size": 10_000}),
                    ("demo_bad_output", {}),
                    ("demo_odd_output", {}),
                ),
                Turn.text("done"),
            ],
        )
    failed, too_big, bad_output, odd_output = result.outcomes
    assert isinstance(failed, ToolFailure)
    assert failed.error == {
        "_tag": "McpToolError",
        "message": "it failed: quota",
        "tool": "demo_fail",
        "code": None,
        "server": DEMO_IDENTITY,
    }
    assert isinstance(too_big, ToolFailure)
    assert too_big.error["_tag"] == "McpResultTooLarge"
    assert too_big.error["server"] == DEMO_IDENTITY
    assert too_big.error["limit"] == 2048
    assert "max_result_bytes" in too_big.error["message"]
    assert bad_output.kind == "defect"
    assert "$.structured.sum" in bad_output.message
    # An output schema that cannot be bound in the envelope is checked by the handler instead.
    assert odd_output.kind == "defect"
    assert "'extra' was unexpected" in odd_output.message


async def test_every_failure_says_which_server_answered(demo: StdioServer) -> None:
    """CAP-009: a result records the server's name, version and protocol — and so does each
    declared failure of a call (the failures carried only the tool's name): a protocol error,
    an error result, and a call to a server the connection lost."""
    agent = agent_of(demo)
    async with connect(demo) as connection:
        result = await run_script(
            connection,
            agent,
            [
                Turn.tool_calls(("demo_refuse", {}), ("demo_fail", {"why": "x"})),
                Turn.tool_calls(("demo_die", {})),
                Turn.tool_calls(("demo_echo", {"text": "after"})),
                Turn.text("done"),
            ],
        )
    refused, failed, died, unavailable = result.outcomes
    assert isinstance(refused, ToolFailure)
    assert refused.error["code"] == -32602
    assert refused.error["server"] == DEMO_IDENTITY
    assert isinstance(failed, ToolFailure)
    assert failed.error["server"] == DEMO_IDENTITY
    assert died.kind == "unknown"
    assert isinstance(unavailable, ToolFailure)
    assert unavailable.error["_tag"] == "McpUnavailable"
    assert unavailable.error["server"] == DEMO_IDENTITY


async def test_a_server_killed_mid_call_is_an_unknown_outcome(demo: StdioServer) -> None:
    agent = agent_of(demo)
    async with connect(demo) as connection:
        result = await run_script(
            connection,
            agent,
            [
                Turn.tool_calls(("demo_die", {})),
                Turn.tool_calls(("demo_echo", {"text": "anyone?"})),
                Turn.text("it is gone"),
            ],
        )
        assert connection.lost is not None
    died, after = result.outcomes
    assert isinstance(died, ToolUnknownOutcome)
    assert "may or may not have run" in died.reason
    # The next call is not sent at all: a declared failure, not another unknown outcome.
    assert isinstance(after, ToolFailure)
    assert after.error["_tag"] == "McpUnavailable"


async def test_a_server_that_never_answers_times_out_as_unknown(demo: StdioServer) -> None:
    impatient = attrs.evolve(demo, limits=McpLimits(connect_timeout=30, call_timeout=1.0))
    agent = agent_of(impatient)
    async with connect(impatient) as connection:
        with trio.fail_after(60):
            result = await run_script(
                connection,
                agent,
                [
                    Turn.tool_calls(("demo_hang", {})),
                    Turn.tool_calls(("demo_echo", {"text": "still there"})),
                    Turn.text("done"),
                ],
            )
    hung, echo = result.outcomes
    assert isinstance(hung, ToolUnknownOutcome)
    assert "within 1.0 s (call_timeout)" in hung.reason
    assert isinstance(echo, ToolSuccess)  # a timeout does not lose the connection


async def test_a_changed_tool_list_reaches_the_next_turn_never_the_batch(
    demo: StdioServer, call_log: Path
) -> None:
    agent = agent_of(demo)

    async with connect(demo) as connection:
        seen: list[set[str]] = []

        async def respond(request: ModelRequest) -> Turn:
            seen.append({tool.name for tool in request.tools})
            turn = len(seen)
            if turn == 1:
                # One batch: the tool is added by the first call; the second names it at once.
                return Turn.tool_calls(("demo_add_tool", {"name": "fresh"}), ("demo_fresh", {}))
            if turn == 2:
                # The server's notification may still be on its way: wait until the connection
                # has adopted the new list, so the *next* turn must offer it.
                with trio.fail_after(20):
                    await connection.wait_version(2)
                return Turn.tool_calls(("demo_echo", {"text": "waiting"}))
            if turn == 3:
                return Turn.tool_calls(("demo_fresh", {}))
            return Turn.text("done")

        model = FunctionModel(respond)
        async with open_runtime(connection.layer() + model.as_layer(), agents=[agent]) as runtime:
            result = await runtime.run(agent, "Add a tool and use it.")
    added, early, _echo, fresh = result.outcomes
    assert isinstance(added, ToolSuccess)
    assert isinstance(early, ToolInvalidInput)  # not in this turn's snapshot
    assert isinstance(fresh, ToolSuccess)
    assert "demo_fresh" not in seen[0]
    assert "demo_fresh" in seen[2]
    assert [c["name"] for c in calls(call_log)] == ["add_tool", "echo", "fresh"]


async def test_a_tool_added_during_a_call_is_offered_on_the_very_next_turn(
    demo: StdioServer, call_log: Path
) -> None:
    """The server announces its changed list during the call that changed it; the call returns
    only once the new list is adopted, so the next turn's snapshot has the new tool — no waiting
    in between. Three times over, so a lucky race cannot pass for the guarantee."""
    agent = agent_of(demo)
    names = ["first", "second", "third"]

    async with connect(demo) as connection:
        seen: list[set[str]] = []

        async def respond(request: ModelRequest) -> Turn:
            seen.append({tool.name for tool in request.tools})
            turn = len(seen)
            if turn == 1:
                return Turn.tool_calls(("demo_add_tool", {"name": names[0]}))
            if turn <= len(names):
                # The tool the previous turn added, and the next one.
                return Turn.tool_calls(
                    (f"demo_{names[turn - 2]}", {}), ("demo_add_tool", {"name": names[turn - 1]})
                )
            if turn == len(names) + 1:
                return Turn.tool_calls((f"demo_{names[-1]}", {}))
            return Turn.text("done")

        model = FunctionModel(respond)
        async with open_runtime(connection.layer() + model.as_layer(), agents=[agent]) as runtime:
            result = await runtime.run(agent, "Add tools and use each at once.")
        assert connection.version == 1 + len(names)
    for turn, name in enumerate(names, start=1):
        assert f"demo_{name}" not in seen[turn - 1]
        assert f"demo_{name}" in seen[turn]  # the very next turn offers it
    assert all(isinstance(outcome, ToolSuccess) for outcome in result.outcomes)
    assert [c["name"] for c in calls(call_log)] == [
        "add_tool",
        "first",
        "add_tool",
        "second",
        "add_tool",
        "third",
    ]


async def test_rules_on_annotations_judge_an_agents_mcp_tools_and_local_tools_alike(
    demo: StdioServer, call_log: Path
) -> None:
    """``ApprovalRule.approve(readonly=True)`` for an agent whose tools come from an MCP server
    and from its own toolkit: each request carries its tool, so the server's hints are judged
    like a local tool's annotations — and a parameter rule reads an MCP call's arguments."""

    @tool(readonly=True, needs_approval=True)
    async def local_notes(topic: str) -> str:
        """Read the local notes.

        Args:
            topic: What about.
        """
        return f"notes on {topic}"

    guarded = attrs.evolve(demo, needs_approval=True)  # every server tool asks
    agent = Agent(
        "mixed",
        "Use every tool.",
        POLICY,
        Toolkit(local_notes),
        tool_sources=(guarded.key,),
    )
    approval = PolicyApproval(
        [
            ApprovalRule.approve(readonly=True, name="reads"),
            ApprovalRule.approve(
                tools="demo_delete_item", when=lambda p: p["id"] == "scratch", name="scratch"
            ),
        ],
        agents=[agent],
    )
    async with connect(guarded) as connection:
        result = await run_script(
            connection,
            agent,
            [
                Turn.tool_calls(
                    ("demo_echo", {"text": "hi"}),
                    ("local_notes", {"topic": "oslo"}),
                    ("demo_delete_item", {"id": "scratch"}),
                    ("demo_delete_item", {"id": "prod"}),
                ),
                Turn.text("done"),
            ],
            approval=approval.layer(),
            handlers=agent.toolkit.handlers(),
        )
    echo, local, scratch, prod = result.outcomes
    assert isinstance(echo, ToolSuccess)
    assert isinstance(local, ToolSuccess)
    assert isinstance(scratch, ToolSuccess)
    assert isinstance(prod, ToolRejected)
    assert prod.reason == "approval denied: no rule matched: the default is to deny"
    assert [(c["name"], c["arguments"]) for c in calls(call_log)] == [
        ("echo", {"text": "hi"}),
        ("delete_item", {"id": "scratch"}),
    ]


async def test_authorization_applies_to_each_mcp_tool(demo: StdioServer, call_log: Path) -> None:
    agent = agent_of(demo)
    authorization = PolicyAuthorization(
        [AccessRule.allow("demo_*"), AccessRule.deny("demo_delete_*", reason="no deleting")]
    )
    async with connect(demo) as connection:
        result = await run_script(
            connection,
            agent,
            [
                Turn.tool_calls(("demo_echo", {"text": "hi"}), ("demo_delete_item", {"id": "7"})),
                Turn.text("done"),
            ],
            authorization=authorization.layer(),
        )
    echo, delete = result.outcomes
    assert isinstance(echo, ToolSuccess)
    assert delete.kind == "rejected"
    assert "no deleting" in delete.reason
    assert [c["name"] for c in calls(call_log)] == ["echo"]


async def test_approval_policies_read_the_mcp_annotations(
    demo: StdioServer, call_log: Path
) -> None:
    def destructive(annotations: ToolAnnotations) -> bool:
        return not annotations.readonly and annotations.destructive

    guarded = attrs.evolve(demo, needs_approval=destructive)
    agent = agent_of(guarded)
    approval = PolicyApproval([ApprovalRule.deny(tools="demo_delete_*", reason="ask a human")])
    async with connect(guarded) as connection:
        tools = {tool.name: tool for tool in connection.tools}
        assert tools["demo_delete_item"].may_need_approval
        assert not tools["demo_echo"].may_need_approval
        result = await run_script(
            connection,
            agent,
            [
                Turn.tool_calls(("demo_echo", {"text": "hi"}), ("demo_delete_item", {"id": "7"})),
                Turn.text("done"),
            ],
            approval=approval.layer(),
        )
    echo, delete = result.outcomes
    assert isinstance(echo, ToolSuccess)
    assert delete.kind == "rejected"
    assert [c["name"] for c in calls(call_log)] == ["echo"]


async def test_a_fixed_toolkit_taken_from_the_connection(demo: StdioServer) -> None:
    async with connect(demo) as connection:
        agent = Agent("fixed", "Use the tools.", POLICY, connection.toolkit())
        model = ScriptedModel.layer(
            [Turn.tool_calls(("demo_echo", {"text": "x"})), Turn.text("ok")]
        )
        async with open_runtime(connection.handlers() + model, agents=[agent]) as runtime:
            result = await runtime.run(agent, "Go.")
    (echo,) = result.outcomes
    assert isinstance(echo, ToolSuccess)
