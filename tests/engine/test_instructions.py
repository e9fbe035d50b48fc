"""Computed instructions (``Agent(instructions=fn)``, #29 item 2): an async function of the
run's context (input, IDs, principal, the services the agent declares) returns the instructions,
once per run or before every turn; what it returned is recorded (``InstructionsRecorded``: before
the first request, and again only when a per-turn evaluation changes it), redacted, bounded; a
function that fails ends the run with ``InstructionsFailed``; preflight names a declared service
the runtime lacks; a resumed run sends its recorded instructions again."""

from __future__ import annotations

import re
from typing import Any

import attrs
import pytest
import trio
import trio.testing

from effectagent import Agent, Toolkit
from effectagent.ai import ModelRequest, SystemMessage, Tool
from effectagent.core import (
    MAX_INSTRUCTIONS_BYTES,
    REDACTED,
    ApprovalRequest,
    InstructionsContext,
    InstructionsFailed,
    InstructionsRecorded,
    RunFailed,
    ToolApprovalRequested,
    approval_decided,
)
from effectagent.effect import Layer, MissingServicesError, ServiceKey
from effectagent.engine import (
    ApprovalService,
    ApprovalSuspended,
    ConversationLogService,
    InMemoryConversationLog,
    open_runtime,
)
from effectagent.testing import ScriptedModel, Turn

from .helpers import Forecast, Lookup, forecast_tool, make_policy, summarize_everything

CLOCK = ServiceKey[list[str]]("test clock")
CANARY = "sk-canary-7f3a9"


@attrs.frozen
class Query:
    city: str


def system_text(request: ModelRequest) -> str:
    system = request.messages[0]
    assert isinstance(system, SystemMessage)
    return system.content


def instructions_of(entries: list[Any]) -> list[InstructionsRecorded]:
    return [e.record for e in entries if isinstance(e.record, InstructionsRecorded)]


async def forecast(params: Lookup, call: Any) -> Forecast:
    return Forecast(params.city, 4.0)


def two_turns() -> list[Turn]:
    return [Turn.tool_calls(("forecast", {"city": "Oslo"})), Turn.text("4 degrees.")]


async def run_agent(
    agent: Agent, turns: list[Turn], run_input: Any = "How warm?", **options: Any
) -> tuple[Any, ScriptedModel, list[Any]]:
    model = ScriptedModel(turns)
    tool = agent.toolkit.get("forecast")
    layer = model.as_layer()
    if tool is not None:
        layer = agent.toolkit.handlers({tool: forecast}) + layer
    layer = layer + Layer.succeed(CLOCK, ["09:00", "09:05", "09:10"])
    async with open_runtime(layer, agents=[agent], **options) as runtime:
        result = await runtime.run(agent, run_input, author="ada")
        log = list(await runtime.log.entries(result.conversation_id))
    return result, model, log


async def test_per_run_instructions_are_computed_once_recorded_once_and_sent_every_turn() -> None:
    contexts: list[InstructionsContext[Query]] = []

    async def instructions(context: InstructionsContext[Query]) -> str:
        contexts.append(context)
        return f"Answer about {context.input.city} as of {context.service(CLOCK)[0]}."

    agent = Agent(
        "weather",
        instructions,
        make_policy(),
        Toolkit(forecast_tool()),
        input=Query,
        services=[CLOCK],
    )
    result, model, log = await run_agent(agent, two_turns(), Query("Oslo"))
    assert result.status == "completed"
    assert len(contexts) == 1
    (context,) = contexts
    assert (context.input, context.author, context.turn) == (Query("Oslo"), "ada", 1)
    assert (context.run_id, context.conversation_id) == (result.run_id, result.conversation_id)
    texts = [system_text(request) for request in model.requests]
    assert texts == ["Answer about Oslo as of 09:00."] * 2
    (recorded,) = instructions_of(log)
    assert (recorded.turn, recorded.text) == (1, "Answer about Oslo as of 09:00.")


async def test_per_turn_instructions_are_recorded_only_when_they_change() -> None:
    turns_seen: list[int] = []

    async def instructions(context: InstructionsContext[str]) -> str:
        turns_seen.append(context.turn)
        return "Be brief." if context.turn < 3 else "Be briefer."

    tool = forecast_tool()
    agent = Agent("weather", instructions, make_policy(), Toolkit(tool), instructions_per="turn")
    turns = [
        Turn.tool_calls(("forecast", {"city": "Oslo"})),
        Turn.tool_calls(("forecast", {"city": "Rome"})),
        Turn.text("Done."),
    ]
    result, model, log = await run_agent(agent, turns)
    assert result.status == "completed"
    assert turns_seen == [1, 2, 3]
    assert [system_text(r) for r in model.requests] == ["Be brief.", "Be brief.", "Be briefer."]
    assert [(r.turn, r.text) for r in instructions_of(log)] == [
        (1, "Be brief."),
        (3, "Be briefer."),
    ]


async def test_instructions_holding_a_secret_are_redacted_in_the_request_and_the_record() -> None:
    async def instructions(context: InstructionsContext[str]) -> str:
        return f"The key is {CANARY}."

    agent = Agent("weather", instructions)
    result, model, log = await run_agent(agent, [Turn.text("ok")], secrets=[CANARY])
    assert result.status == "completed"
    assert system_text(model.requests[0]) == f"The key is {REDACTED}."
    (recorded,) = instructions_of(log)
    assert CANARY not in recorded.text


@pytest.mark.parametrize(
    ("returns", "message"),
    [
        (ValueError(f"vault said {CANARY}"), r"raised ValueError: vault said \[REDACTED\]"),
        (42, r"returned int, not a str"),
        (
            "x" * (MAX_INSTRUCTIONS_BYTES + 1),
            r"returned 262,145 bytes of text, more than the 262,144",
        ),
    ],
    ids=["raises", "no str", "too large"],
)
async def test_instructions_that_cannot_be_used_fail_the_run_typed_without_secrets(
    returns: object, message: str
) -> None:
    async def instructions(context: InstructionsContext[str]) -> str:
        if isinstance(returns, Exception):
            raise returns
        return returns  # type: ignore[return-value]

    agent = Agent("weather", instructions)
    model = ScriptedModel([])
    async with open_runtime(model.as_layer(), agents=[agent], secrets=[CANARY]) as runtime:
        async with runtime.stream(agent, "How warm?") as events:
            seen = [event async for event in events]
        log = list(await runtime.log.entries(seen[0].conversation_id))
    failed = seen[-1]
    assert isinstance(failed, RunFailed)
    assert isinstance(failed.error, InstructionsFailed)
    assert CANARY not in repr(seen)
    assert CANARY not in repr(log)
    assert re.search(message, str(failed.error)), str(failed.error)
    assert str(failed.error).startswith("the agent's instructions could not be computed: ")
    assert model.requests == []  # no request without its instructions
    assert type(log[-1].record).__name__ == "RunFailedRecord"


async def test_preflight_names_a_declared_service_the_runtime_lacks() -> None:
    async def instructions(context: InstructionsContext[str]) -> str:
        return "x"

    agent = Agent("weather", instructions, services=[CLOCK])
    with pytest.raises(MissingServicesError, match="test clock") as caught:
        async with open_runtime(ScriptedModel([]).as_layer(), agents=[agent]):
            pass
    assert "declared in Agent.services" in str(caught.value)
    async with open_runtime(ScriptedModel([]).as_layer()) as runtime:
        with pytest.raises(MissingServicesError, match="test clock"):
            await runtime.run(agent, "How warm?")


async def test_a_service_not_declared_is_a_key_error_naming_it() -> None:
    other = ServiceKey[str]("undeclared thing")

    async def instructions(context: InstructionsContext[str]) -> str:
        return context.service(other)

    agent = Agent("weather", instructions, services=[CLOCK])
    result, _, _ = await run_agent(agent, [])
    assert isinstance(result.error, InstructionsFailed)
    assert "undeclared thing" in str(result.error)
    assert "not among the agent's declared services" in str(result.error)


async def test_cancelling_a_run_while_its_instructions_are_computed_interrupts_it(
    autojump_clock: trio.testing.MockClock,
) -> None:
    entered = trio.Event()

    async def instructions(context: InstructionsContext[str]) -> str:
        entered.set()
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    agent = Agent("weather", instructions)
    model = ScriptedModel([])
    async with open_runtime(model.as_layer(), agents=[agent]) as runtime:
        with trio.move_on_after(5):
            await runtime.run(agent, "How warm?", conversation_id="c", create=True)
        log = list(await runtime.log.entries("c"))
    assert entered.is_set()
    assert model.requests == []
    last = log[-1].record
    assert (type(last).__name__, last.reason) == ("RunFailedRecord", "interrupted")  # type: ignore[union-attr]


def test_instructions_per_turn_needs_a_function() -> None:
    with pytest.raises(ValueError, match="instructions_per='turn' needs instructions that are a"):
        Agent("weather", "Fixed.", instructions_per="turn")
    with pytest.raises(TypeError, match=r"Agent\.services must hold ServiceKeys"):
        Agent("weather", "Fixed.", services=["clock"])  # type: ignore[list-item]
    for wrong in (1, None, ["run"]):  # the wrong type: a TypeError, as the Agent says
        with pytest.raises(
            TypeError, match=r"Agent\.instructions_per must be 'run' or 'turn', got"
        ):
            Agent("weather", "Fixed.", instructions_per=wrong)  # type: ignore[arg-type]
    with pytest.raises(
        ValueError, match=r"Agent\.instructions_per must be 'run' or 'turn', got 'x'"
    ):
        Agent("weather", "Fixed.", instructions_per="x")  # type: ignore[arg-type]


async def test_a_resumed_run_sends_its_recorded_instructions_without_computing_them_again() -> None:
    """A run that stopped after its first turn (here: suspended for an approval decision) is
    resumed by a fresh runtime: its instructions come from the record, not the function."""
    calls: list[int] = []

    async def instructions(context: InstructionsContext[Query]) -> str:
        calls.append(context.turn)
        return f"About {context.input.city}, call {len(calls)}."

    tool = Tool(
        "forecast",
        "Today's forecast.",
        parameters=Lookup,
        success=Forecast,
        needs_approval=True,
    )

    class Later:
        suspends = True

        async def request(self, request: ApprovalRequest) -> ApprovalSuspended:
            await trio.lowlevel.checkpoint()
            return ApprovalSuspended("a person decides")

    agent = Agent("weather", instructions, make_policy(), Toolkit(tool), input=Query)
    model = ScriptedModel(two_turns())
    log = InMemoryConversationLog()
    layer = (
        agent.toolkit.handlers({tool: forecast})
        + model.as_layer()
        + Layer.succeed(ApprovalService, Later())
        + Layer.succeed(ConversationLogService, log)
    )
    async with open_runtime(layer, agents=[agent]) as runtime:
        first = await runtime.run(agent, Query("Oslo"))
    assert first.status == "suspended"
    entries = list(await log.entries(first.conversation_id))
    (requested,) = [e.record for e in entries if isinstance(e.record, ToolApprovalRequested)]
    await log.append(
        first.conversation_id,
        [approval_decided(requested, approved=True, decided_by="ada", at=0.0)],
    )
    async with open_runtime(layer, agents=[agent]) as runtime:
        resumed = await runtime.resume(
            agent, conversation_id=first.conversation_id, run_id=first.run_id
        )
    assert resumed.status == "completed"
    assert calls == [1]  # computed once, for the first execution only
    assert [system_text(r) for r in model.requests] == ["About Oslo, call 1."] * 2


async def test_a_prompt_compacted_mid_run_keeps_the_computed_instructions(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Compaction projects the prompt anew from the log, with the run's system message: that is
    the computed instructions once they were computed (not the agent's placeholder)."""
    from effectagent.core import CompactionCreated
    from effectagent.engine import CompactionRequest, CompactorService

    seen: list[str] = []

    class SummarizeEverything:
        async def compact(self, request: CompactionRequest) -> list[CompactionCreated]:
            seen.append(system_text_of(request.messages))
            return await summarize_everything(request)

    async def instructions(context: InstructionsContext[str]) -> str:
        return "Computed for this run."

    async def long_forecast(params: Lookup, call: Any) -> Forecast:
        return Forecast(params.city * 200, 4.0)

    tool = forecast_tool()
    agent = Agent("weather", instructions, make_policy(context_token_limit=200), Toolkit(tool))
    model = ScriptedModel(
        [
            Turn.tool_calls(("forecast", {"city": "Oslo"})),
            Turn.text("THE SUMMARY"),
            Turn.text("4 degrees."),
        ]
    )
    layer = (
        agent.toolkit.handlers({tool: long_forecast})
        + model.as_layer()
        + Layer.succeed(CompactorService, SummarizeEverything())
    )
    async with open_runtime(layer, agents=[agent]) as runtime:
        result = await runtime.run(agent, "How warm?")
    assert result.status == "completed", result.error
    assert seen == ["Computed for this run."]
    assert system_text(model.requests[-1]) == "Computed for this run."
    assert "THE SUMMARY" in repr(model.requests[-1].messages)


def system_text_of(messages: Any) -> str:
    system = messages[0]
    assert isinstance(system, SystemMessage)
    return system.content
