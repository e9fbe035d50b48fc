"""The broker: a tool declaring ``inner_tools`` calls them through the engine — resolved,
decoded, authorized, counted against the run's budget, run under the outer call's permit, checked
both ways — with no events or records of their own; the outer settlement carries their counts."""

from __future__ import annotations

from typing import Any

import attrs
import pytest
import trio
import trio.testing

from effectagent import Tool, ToolCallContext, Toolkit, tool
from effectagent.ai import InnerResult
from effectagent.core import (
    ToolCallPrepared,
    ToolCallSettled,
    ToolCallStarted,
    ToolSuccess,
)
from effectagent.effect import Layer, MissingServicesError
from effectagent.engine import AuthorizationDecision, ToolAuthorizationService
from effectagent.testing import Turn

from .helpers import events_of, make_agent, make_policy, records_of, run_script

CANARY = "s3cr3t-inner-canary"


@tool(readonly=True)
async def add(a: int, b: int) -> int:
    """Add two numbers.

    Args:
        a: A number.
        b: Another.
    """
    return a + b


@tool(readonly=True)
async def crash(x: int) -> int:
    """Always crashes.

    Args:
        x: Anything.
    """
    raise RuntimeError(f"password={CANARY}")


@tool(readonly=True)
async def lie(x: int) -> int:
    """Returns the wrong type.

    Args:
        x: Anything.
    """
    return "not an int"  # type: ignore[return-value]


@tool(needs_approval=True)
async def delete(path: str) -> None:
    """Delete a file.

    Args:
        path: Which.
    """


@attrs.frozen
class Script:
    calls: list[Any]


def _program_tool(*inner: Tool[Any, Any]) -> tuple[Tool[Script, Any], list[InnerResult]]:
    """A tool whose handler plays a fixed list of inner calls and returns what came back."""
    results: list[InnerResult] = []

    async def run_program(params: Script, call: ToolCallContext) -> Any:
        assert call.broker is not None
        call.broker.note("executor", "test")
        for name, arguments in params.calls:
            results.append(await call.broker.call(name, arguments))
        return [attrs.asdict(r) for r in results]

    program: Tool[Script, Any] = Tool(
        "program",
        "Runs a program over other tools.",
        parameters=Script,
        readonly=True,
        handler=run_program,
        inner_tools=inner,
    )
    return program, results


async def _run(program: Tool[Any, Any], calls: list[Any], **policy: Any) -> Any:
    agent = make_agent(program, policy=make_policy(**policy))
    return await run_script(
        agent,
        {},
        [Turn.tool_calls(("program", {"calls": calls})), Turn.text("done")],
        extra=Toolkit(*program.inner_tools).handlers(),
        secrets=[CANARY],
    )


async def test_inner_calls_run_through_the_engine_and_leave_only_the_outer_call_in_the_log(
    autojump_clock: trio.testing.MockClock,
) -> None:
    program, results = _program_tool(add)
    ran = await _run(program, [["add", {"a": 1, "b": 2}], ["add", {"a": 3, "b": 4}]])
    assert results == [InnerResult(True, 3), InnerResult(True, 7)]
    assert isinstance(ran.outcome("call_0"), ToolSuccess)
    assert [r.tool_name for r in records_of(ran.log, ToolCallPrepared)] == ["program"]
    (settled,) = records_of(ran.log, ToolCallSettled)
    assert settled.audit == {
        "executor": "test",
        "inner_calls": 2,
        "inner_outcomes": {"success": 2},
        "inner_tools": {"add": 2},
    }
    assert [e.tool_name for e in events_of(ran.events, ToolCallStarted)] == ["program"]


async def test_failed_inner_calls_come_back_as_envelopes_without_internals(
    autojump_clock: trio.testing.MockClock,
) -> None:
    program, results = _program_tool(add, crash, lie, delete)
    ran = await _run(
        program,
        [
            ["add", {"a": "one", "b": 2}],
            ["nope", {}],
            ["crash", {"x": 1}],
            ["lie", {"x": 1}],
            ["delete", {"path": "/etc"}],
        ],
    )
    values: list[Any] = [r.value for r in results]
    tags = [v["_tag"] for v in values]
    assert tags == [
        "ToolInvalidInput",
        "ToolInvalidInput",
        "ToolDefect",
        "ToolDefect",
        "ToolRejected",
    ]
    assert "$.a" in values[0]["message"]
    assert values[2] == {"_tag": "ToolDefect", "message": "the tool crashed (RuntimeError)"}
    assert "result violates its schema" in values[3]["message"]
    assert "approval" in values[4]["message"]
    assert CANARY not in repr(ran.events) + repr(ran.log)
    (settled,) = records_of(ran.log, ToolCallSettled)
    assert settled.audit["inner_outcomes"] == {"defect": 2, "invalid-input": 2, "rejected": 1}


async def test_inner_calls_count_against_the_runs_tool_call_budget(
    autojump_clock: trio.testing.MockClock,
) -> None:
    program, results = _program_tool(add)
    await _run(program, [["add", {"a": i, "b": i}] for i in range(4)], max_tool_calls=3)
    # The outer call took one of three: two inner calls ran, the rest were refused.
    assert [r.ok for r in results] == [True, True, False, False]
    assert results[2].value == {
        "_tag": "ToolRejected",
        "message": "the run's tool-call budget is exhausted",
    }


async def test_inner_calls_are_authorized_for_the_runs_principal(
    autojump_clock: trio.testing.MockClock,
) -> None:
    class NoAdding:
        async def authorize(self, tool: Tool[Any, Any], params: Any, call: ToolCallContext) -> Any:
            return AuthorizationDecision(tool.name != "add", f"not for {call.author}")

    program, results = _program_tool(add)
    agent = make_agent(program)
    await run_script(
        agent,
        {},
        [Turn.tool_calls(("program", {"calls": [["add", {"a": 1, "b": 1}]]})), Turn.text("ok")],
        extra=Toolkit(add).handlers() + Layer.succeed(ToolAuthorizationService, NoAdding()),
    )
    assert results == [
        InnerResult(False, {"_tag": "ToolRejected", "message": "not authorized: not for user"})
    ]


async def test_an_inner_tools_missing_handler_is_named_at_preflight() -> None:
    program, _ = _program_tool(add)
    agent = make_agent(program)
    with pytest.raises(MissingServicesError, match="called by 'program'"):
        await run_script(agent, {}, [Turn.text("never")])


async def test_interrupting_the_run_during_an_inner_call_cancels_it(
    autojump_clock: trio.testing.MockClock,
) -> None:
    cancelled = trio.Event()

    @tool(readonly=True)
    async def wait_forever(x: int) -> int:
        """Never answers.

        Args:
            x: Anything.
        """
        try:
            await trio.sleep(10_000)
        finally:
            cancelled.set()
        return x

    program, results = _program_tool(wait_forever)
    ran = await _run(program, [["wait_forever", {"x": 1}]], max_duration=5.0)
    assert cancelled.is_set()
    assert results == []
    outcome = ran.outcome("call_0")
    assert outcome.kind == "defect"
