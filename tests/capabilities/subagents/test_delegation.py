"""Subagents (CAP-011): declared delegation tools running attached child runs.

The model here is a FunctionModel routed by agent and conversation: each request is answered from
the script of the agent its system message names, keyed by the conversation's first user message
(so parallel children of one agent each get their own script), at the position of the number of
assistant messages so far. No script position is shared, so concurrency cannot mix answers up.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import attrs
import pytest
import trio
import trio.testing
from hypothesis import given
from hypothesis import strategies as st

from capabilities.subagents import Delegation, delegate
from effectagent.ai import (
    AiError,
    AssistantMessage,
    ModelRequest,
    Tool,
    ToolCallContext,
    Toolkit,
    Usage,
    UserMessage,
)
from effectagent.core import (
    Agent,
    AgentPolicy,
    ChildBudget,
    ContextItem,
    EventBase,
    ModelFailed,
    RunCompleted,
    RunInterrupted,
    SubagentCompleted,
    SubagentEvent,
    SubagentStarted,
    ToolCallFailed,
    ToolCallSettled,
    ToolCallSucceeded,
    ToolFailure,
    ToolSuccess,
    UserInputRecorded,
)
from effectagent.effect import Layer, MissingServicesError
from effectagent.engine import ChildRunRefused, open_runtime, run_child
from effectagent.testing import FunctionModel, Turn

USAGE = Usage.of(100, 10)


@attrs.frozen
class Question:
    topic: str


@attrs.frozen
class Finding:
    topic: str
    summary: str


@attrs.frozen
class Query:
    q: str


def search_tool() -> Tool[Query, str]:
    return Tool("search", "Search the notes.", parameters=Query, success=str, readonly=True)


async def search(params: Query, call: ToolCallContext) -> str:
    return f"notes about {params.q}"


def routed(scripts: Mapping[str, Callable[[str, int], Turn]]) -> FunctionModel:
    """A model answering each agent (by its instructions) from ``scripts[instructions](first user
    text, assistant messages so far)``."""

    def respond(request: ModelRequest) -> Turn:
        system = request.messages[0].content
        assert isinstance(system, str)
        first = next(m for m in request.messages if isinstance(m, UserMessage))
        text = "".join(getattr(part, "text", "") for part in first.content)
        step = sum(isinstance(m, AssistantMessage) for m in request.messages)
        for instructions, script in scripts.items():
            if system.startswith(instructions):
                return script(text, step)
        raise AssertionError(f"no script for {system!r}")

    return FunctionModel(respond)


def researcher(**policy: Any) -> Agent:
    return Agent(
        "researcher",
        "Research the topic you are given.",
        toolkit=Toolkit(SEARCH),
        output=Finding,
        policy=AgentPolicy(**policy) if policy else AgentPolicy(),
    )


SEARCH = search_tool()


def calls_then_answer(*calls: tuple[Any, ...], answer: str) -> Callable[[str, int], Turn]:
    """A lead's script: ``calls`` in its first turn, then ``answer``."""

    def script(text: str, step: int) -> Turn:
        if step == 0:
            return Turn.tool_calls(*calls, usage=USAGE)
        return Turn.text(answer, usage=USAGE)

    return script


def research_script(text: str, step: int) -> Turn:
    if step == 0:
        return Turn.tool_calls(("search", {"q": "cache"}), usage=USAGE)
    return Turn.text('{"topic": "cache", "summary": "the cache is cold"}', usage=USAGE)


def lead(*tools: Tool[Any, Any], **policy: Any) -> Agent:
    return Agent(
        "lead",
        "Lead the investigation.",
        toolkit=Toolkit(*tools),
        policy=AgentPolicy(**policy) if policy else AgentPolicy(),
    )


def handlers(*pairs: tuple[Tool[Any, Any], Any]) -> Layer:
    layer: Layer | None = None
    for tool, handler in pairs:
        one = Toolkit(tool).handlers({tool: handler})
        layer = one if layer is None else layer + one
    assert layer is not None
    return layer


def with_search(model: FunctionModel, delegation: Delegation[Any]) -> Layer:
    """The layer of a lead with the search tool and ``delegation``: the model, the search
    handler, the delegation's handler."""
    return model.as_layer() + handlers((SEARCH, search)) + delegation.layer()


async def collect(runtime: Any, agent: Agent, text: str) -> list[EventBase]:
    events: list[EventBase] = []
    async with runtime.stream(agent, text) as stream:
        async for event in stream:
            events.append(event)
    return events


async def test_a_delegation_runs_the_child_and_its_typed_answer_is_the_tool_result(
    autojump_clock: trio.testing.MockClock,
) -> None:
    research = delegate(
        researcher(),
        name="research",
        description="Research a topic.",
        parameters=Question,
        prompt=lambda p: f"Find out about {p.topic}.",
        context=lambda p: [ContextItem(kind="note", source="lead", text=f"Only {p.topic}.")],
        budget=ChildBudget(turns=3, tool_calls=2),
    )
    parent = lead(research.tool, SEARCH)

    lead_script = calls_then_answer(
        ("research", {"topic": "cache"}, "call_r"), answer="The cache is cold."
    )

    model = routed({"Lead": lead_script, "Research": research_script})
    layer = with_search(model, research)
    async with open_runtime(layer, agents=[parent]) as runtime:
        events = await collect(runtime, parent, "Why is it slow?")
        log = runtime.log

        terminal = events[-1]
        assert isinstance(terminal, RunCompleted)
        # The child's answer, decoded into its output type, is the parent call's success.
        (success,) = [
            e.outcome
            for e in events
            if isinstance(e, ToolCallSucceeded) and e.tool_call_id == "call_r"
        ]
        assert isinstance(success, ToolSuccess)
        assert success.result == {"topic": "cache", "summary": "the cache is cold"}

        started = [e for e in events if isinstance(e, SubagentStarted)]
        completed = [e for e in events if isinstance(e, SubagentCompleted)]
        inner = [e for e in events if isinstance(e, SubagentEvent)]
        assert len(started) == len(completed) == 1
        assert started[0].child_agent == "researcher"
        assert started[0].budget == ChildBudget(3, 2, None, 570.0)  # until the lead's turns stop
        assert completed[0].status == "completed"
        assert (completed[0].turns, completed[0].tool_calls) == (2, 1)
        # Every child event reached the parent's stream, between started and completed, in order.
        kinds = [type(e.event).__name__ for e in inner]
        assert kinds[0] == "RunStarted"
        assert kinds[-1] == "RunCompleted"
        assert [e.event.seq for e in inner] == list(range(1, len(inner) + 1))
        assert {e.event.run_id for e in inner} == {started[0].child_run_id}
        assert events.index(started[0]) < events.index(inner[0])
        assert events.index(inner[-1]) < events.index(completed[0])

        # The child's conversation holds only what the parent passed: the context, then the text.
        child_entries = await log.entries(started[0].child_conversation_id)
        inputs = [e.record for e in child_entries if isinstance(e.record, UserInputRecorded)]
        assert [i.text for i in inputs] == ["Find out about cache."]
        first = model.requests[1]  # the child's first request
        assert [type(m).__name__ for m in first.messages] == [
            "SystemMessage",
            "UserMessage",
            "UserMessage",
        ]
        assert "Why is it slow?" not in str(first.messages)
        # The parent's settlement record names the child's run and conversation.
        parent_entries = await log.entries(terminal.conversation_id)
        (settlement,) = [
            e.record
            for e in parent_entries
            if isinstance(e.record, ToolCallSettled) and e.record.tool_call_id == "call_r"
        ]
        audit = settlement.audit["subagent"]
        assert audit["run_id"] == started[0].child_run_id
        assert audit["conversation_id"] == started[0].child_conversation_id
        assert audit["status"] == "completed"


async def test_child_usage_rolls_up_into_the_parents_totals() -> None:
    research = delegate(researcher(), name="research", description="Research.", parameters=Question)
    parent = lead(research.tool, SEARCH)

    def lead_script(text: str, step: int) -> Turn:
        if step == 0:
            return Turn.tool_calls(("research", {"topic": "a"}), usage=Usage.of(7, 3))
        return Turn.text("done", usage=Usage.of(11, 5, cache_read=4))

    def child_script(text: str, step: int) -> Turn:
        if step == 0:
            return Turn.tool_calls(("search", {"q": "a"}), usage=Usage.of(20, 2, cache_write=6))
        return Turn.text('{"topic": "a", "summary": "s"}', usage=Usage.of(30, 4))

    model = routed({"Lead": lead_script, "Research": child_script})
    layer = with_search(model, research)
    async with open_runtime(layer, agents=[parent]) as runtime:
        result = await runtime.run(parent, "go")
    usage = result.usage
    assert (usage.input_tokens, usage.output_tokens) == (7 + 11 + 20 + 30, 3 + 5 + 2 + 4)
    assert (usage.cache_read_input_tokens, usage.cache_write_input_tokens) == (4, 6)
    assert usage.model_calls == 4
    # The live-context figures stay the parent's own (its last request).
    assert (usage.last_input_tokens, usage.last_output_tokens) == (11, 5)


async def test_the_child_gets_at_most_what_the_parent_has_left_and_unused_budget_returns() -> None:
    research = delegate(
        researcher(),
        name="research",
        description="Research.",
        parameters=Question,
        budget=ChildBudget(turns=10, tool_calls=10),
    )
    # The parent: 7 turns, 5 tool calls. Turn 1 delegates (1 call used): the child may have
    # 7 - 1 = 6 turns and 5 - 1 = 4 tool calls. It uses 2 turns and 1 call; the rest returns,
    # so turn 2's delegation may have 7 - 2 - 2 = 3 turns and 5 - 2 - 1 = 2 calls. After it,
    # 2 + 4 = 6 turns are used: the third turn answers within the budget.
    parent = lead(research.tool, SEARCH, max_turns=7, max_tool_calls=5)

    def lead_script(text: str, step: int) -> Turn:
        if step < 2:
            return Turn.tool_calls(("research", {"topic": f"t{step}"}), usage=USAGE)
        return Turn.text("done", usage=USAGE)

    model = routed({"Lead": lead_script, "Research": research_script})
    layer = with_search(model, research)
    async with open_runtime(layer, agents=[parent]) as runtime:
        events = await collect(runtime, parent, "go")
    grants = [
        (e.budget.turns, e.budget.tool_calls) for e in events if isinstance(e, SubagentStarted)
    ]
    assert grants == [(6, 4), (3, 2)]
    terminal = events[-1]
    assert isinstance(terminal, RunCompleted)
    assert terminal.finish_reason == "stop"


async def test_a_child_cannot_exceed_its_grant() -> None:
    research = delegate(
        researcher(),
        name="research",
        description="Research.",
        parameters=Question,
        budget=ChildBudget(turns=2, tool_calls=1),
    )
    parent = lead(research.tool, SEARCH)

    def greedy(text: str, step: int) -> Turn:
        return Turn.tool_calls(("search", {"q": str(step)}), ("search", {"q": "x"}), usage=USAGE)

    lead_script = calls_then_answer(("research", {"topic": "t"}), answer="done")

    model = routed({"Lead": lead_script, "Research": greedy})
    layer = with_search(model, research)
    async with open_runtime(layer, agents=[parent]) as runtime:
        events = await collect(runtime, parent, "go")
    (completed,) = [e for e in events if isinstance(e, SubagentCompleted)]
    # Its batch of two asked for more than its one call: none of it ran (a whole batch or none).
    assert completed.tool_calls == 0
    assert completed.turns <= 2  # its grace turn is one of the two turns it was granted
    assert completed.status == "failed"  # its grace turn declared tools: it failed closed
    (failure,) = [e.outcome for e in events if isinstance(e, ToolCallFailed)]
    assert isinstance(failure, ToolFailure)
    assert failure.error["_tag"] == "SubagentFailed"
    assert failure.error["reason"] == "failed"


async def test_a_failing_child_is_a_typed_outcome_the_parent_model_reads() -> None:
    research = delegate(researcher(), name="research", description="R.", parameters=Question)
    parent = lead(research.tool, SEARCH)

    lead_script = calls_then_answer(("research", {"topic": "t"}), answer="the researcher failed")

    def broken(text: str, step: int) -> Turn:
        return Turn.fail(AiError("the provider is down"))

    model = routed({"Lead": lead_script, "Research": broken})
    layer = with_search(model, research)
    async with open_runtime(layer, agents=[parent]) as runtime:
        result = await runtime.run(parent, "go")
    assert result.status == "completed"
    (outcome,) = result.outcomes
    assert isinstance(outcome, ToolFailure)
    assert outcome.error["_tag"] == "SubagentFailed"
    assert outcome.error["reason"] == "failed"
    assert outcome.error["error"] == ModelFailed.tag
    # The parent's model got the failure as the call's result.
    last = model.requests[-1].messages[-1]
    assert "SubagentFailed" in str(last)


async def test_a_child_with_a_tool_the_parent_lacks_is_refused_and_nothing_runs() -> None:
    research = delegate(researcher(), name="research", description="R.", parameters=Question)
    parent = lead(research.tool)  # no search tool: the child's tools are not a subset

    lead_script = calls_then_answer(("research", {"topic": "t"}), answer="ok")

    model = routed({"Lead": lead_script, "Research": research_script})
    layer = with_search(model, research)
    async with open_runtime(layer, agents=[parent]) as runtime:
        result = await runtime.run(parent, "go")
    (outcome,) = result.outcomes
    assert isinstance(outcome, ToolFailure)
    assert outcome.error["reason"] == "refused"
    assert "search" in outcome.error["message"]
    assert len(model.requests) == 2  # the parent's two turns; the child never asked the model


def test_nested_delegation_must_be_declared() -> None:
    inner = delegate(researcher(), name="research", description="R.", parameters=Question)
    middle = Agent("middle", "Delegate.", toolkit=Toolkit(inner.tool, SEARCH))
    with pytest.raises(ValueError, match="nested=True"):
        delegate(middle, name="coordinate", description="C.", parameters=Question)
    declared = delegate(
        middle, name="coordinate", description="C.", parameters=Question, nested=True
    )
    assert declared.nested


async def test_a_child_not_allowed_to_delegate_is_refused_at_run_time_too() -> None:
    # A child's tool that starts a child run itself (not a delegation tool, so construction
    # cannot see it): the engine refuses it, because the delegation did not declare nesting.
    grandchild = Agent("grandchild", "Answer.")
    sneaky = Tool("sneaky", "Delegate behind the scenes.", parameters=Query, success=str)
    refused: list[str] = []

    async def sneaky_handler(params: Query, call: ToolCallContext) -> str:
        try:
            await run_child(call, grandchild, "hello", budget=ChildBudget())
        except ChildRunRefused as exc:
            refused.append(exc.reason)
            return "refused"
        return "ran"

    middle = Agent("middle", "Middle agent.", toolkit=Toolkit(sneaky))
    coordinate = delegate(middle, name="coordinate", description="C.", parameters=Question)
    parent = lead(coordinate.tool, sneaky)

    lead_script = calls_then_answer(("coordinate", {"topic": "t"}), answer="ok")

    def middle_script(text: str, step: int) -> Turn:
        if step == 0:
            return Turn.tool_calls(("sneaky", {"q": "x"}), usage=USAGE)
        return Turn.text("middle done", usage=USAGE)

    model = routed(
        {"Lead": lead_script, "Middle": middle_script, "Answer": lambda t, s: Turn.text("hi")}
    )
    layer = model.as_layer() + handlers((sneaky, sneaky_handler)) + coordinate.layer()
    async with open_runtime(layer, agents=[parent]) as runtime:
        result = await runtime.run(parent, "go")
    assert result.status == "completed"
    assert len(refused) == 1
    assert "not allowed to delegate" in refused[0]


async def test_interrupting_the_parent_interrupts_the_child_and_leaves_no_task(
    autojump_clock: trio.testing.MockClock,
) -> None:
    research = delegate(researcher(), name="research", description="R.", parameters=Question)
    parent = lead(research.tool, SEARCH)

    def lead_script(text: str, step: int) -> Turn:
        return Turn.tool_calls(("research", {"topic": "t"}), usage=USAGE)

    model = routed({"Lead": lead_script, "Research": lambda t, s: Turn.hanging()})
    layer = with_search(model, research)
    tasks_before = _task_count()
    events: list[EventBase] = []
    async with open_runtime(layer, agents=[parent]) as runtime:
        async with runtime.stream(parent, "go") as stream:
            async for event in stream:
                events.append(event)
                inner = event.event if isinstance(event, SubagentEvent) else None
                if inner is not None and type(inner).__name__ == "ModelStarted":
                    stream.interrupt()
        child_id = next(e for e in events if isinstance(e, SubagentStarted)).child_conversation_id
        child_entries = await runtime.log.entries(child_id)
        assert runtime.active_runs == 0
    assert isinstance(events[-1], RunInterrupted)
    child_terminal = [e.event for e in events if isinstance(e, SubagentEvent)][-1]
    assert isinstance(child_terminal, RunInterrupted)
    (completed,) = [e for e in events if isinstance(e, SubagentCompleted)]
    assert completed.status == "interrupted"
    # The child wrote its interruption to its own conversation.
    assert type(child_entries[-1].record).__name__ == "RunFailedRecord"
    assert _task_count() == tasks_before


async def test_parallel_delegations_run_concurrently_and_each_gets_its_own_answer(
    autojump_clock: trio.testing.MockClock,
) -> None:
    slow = Tool("slow_search", "Search slowly.", parameters=Query, success=str, readonly=True)

    async def slow_search(params: Query, call: ToolCallContext) -> str:
        await trio.sleep(1.0)
        return f"found {params.q}"

    child = Agent("researcher", "Research the topic.", toolkit=Toolkit(slow), output=Finding)
    research = delegate(
        child,
        name="research",
        description="R.",
        parameters=Question,
        prompt=lambda p: p.topic,
        budget=ChildBudget(turns=2, tool_calls=1),
    )
    parent = lead(research.tool, slow, tool_concurrency=4)

    def lead_script(text: str, step: int) -> Turn:
        if step == 0:
            return Turn.tool_calls(
                ("research", {"topic": "alpha"}, "c1"),
                ("research", {"topic": "beta"}, "c2"),
                ("research", {"topic": "gamma"}, "c3"),
                usage=USAGE,
            )
        return Turn.text("all done", usage=USAGE)

    def child_script(text: str, step: int) -> Turn:
        if step == 0:
            return Turn.tool_calls(("slow_search", {"q": text}), usage=USAGE)
        return Turn.text(f'{{"topic": "{text}", "summary": "{text} ok"}}', usage=USAGE)

    model = routed({"Lead": lead_script, "Research": child_script})
    layer = model.as_layer() + handlers((slow, slow_search)) + research.layer()
    start = trio.current_time()
    async with open_runtime(layer, agents=[parent]) as runtime:
        result = await runtime.run(parent, "go")
    assert trio.current_time() - start == pytest.approx(1.0)
    answers = [o.result["topic"] for o in result.outcomes if isinstance(o, ToolSuccess)]
    assert answers == ["alpha", "beta", "gamma"]  # declaration order, each its own


async def test_a_missing_child_service_is_named_at_preflight() -> None:
    research = delegate(researcher(), name="research", description="R.", parameters=Question)
    parent = lead(research.tool, SEARCH)
    model = routed({})
    with pytest.raises(MissingServicesError, match="search"):
        # The search handler is not provided: the child needs it.
        async with open_runtime(model.as_layer() + research.layer(), agents=[parent]):
            pass


async def test_run_child_outside_a_runtime_call_is_refused() -> None:
    with pytest.raises(ChildRunRefused, match="inside a tool call"):
        await run_child(ToolCallContext("id", "t"), researcher(), "x", budget=ChildBudget())


async def test_a_secret_in_the_child_never_reaches_the_parents_events() -> None:
    canary = "sk-canary-7f3a9c1e5b"
    leaky = Tool("leaky", "Leak.", parameters=Query, success=str, readonly=True)

    async def leak(params: Query, call: ToolCallContext) -> str:
        await call.progress({"token": canary})
        return f"the key is {canary}"

    child = Agent("researcher", "Research the topic.", toolkit=Toolkit(leaky))
    research = delegate(child, name="research", description="R.", parameters=Question)
    parent = lead(research.tool, leaky)

    lead_script = calls_then_answer(("research", {"topic": canary}), answer="ok")

    def child_script(text: str, step: int) -> Turn:
        if step == 0:
            return Turn.tool_calls(("leaky", {"q": canary}), usage=USAGE)
        return Turn.text(f"found {canary}", usage=USAGE)

    model = routed({"Lead": lead_script, "Research": child_script})
    layer = model.as_layer() + handlers((leaky, leak)) + research.layer()
    async with open_runtime(layer, agents=[parent], secrets=[canary]) as runtime:
        events = await collect(runtime, parent, "go")
        entries = await runtime.log.entries(events[-1].conversation_id)
        child_id = next(e for e in events if isinstance(e, SubagentStarted)).child_conversation_id
        entries = [*entries, *await runtime.log.entries(child_id)]
    assert canary not in repr(events)
    assert canary not in repr(entries)


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"budget": {"turns": 1}}, TypeError),
        ({"nested": "yes"}, TypeError),
        ({"prompt": "text"}, TypeError),
        ({"context": [1]}, TypeError),
    ],
)
def test_bad_arguments_are_named(kwargs: dict[str, Any], error: type[Exception]) -> None:
    with pytest.raises(error, match=next(iter(kwargs))):
        delegate(researcher(), name="r", description="R.", parameters=Question, **kwargs)


def test_child_budget_values_are_checked() -> None:
    with pytest.raises(ValueError, match=r"ChildBudget\.turns"):
        ChildBudget(turns=0)
    with pytest.raises(TypeError, match=r"ChildBudget\.tokens"):
        ChildBudget(tokens=1.5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"ChildBudget\.duration"):
        ChildBudget(duration=0)


def _task_count() -> int:
    def count(task: trio.lowlevel.Task) -> int:
        return 1 + sum(count(t) for n in task.child_nurseries for t in n.child_tasks)

    root = trio.lowlevel.current_root_task()
    assert root is not None
    return count(root)


async def test_the_childrens_turns_count_against_the_parents_budget() -> None:
    research = delegate(researcher(), name="research", description="R.", parameters=Question)
    # 6 turns: two parent turns that each delegate (2 child turns each) use all six.
    parent = lead(research.tool, SEARCH, max_turns=6, max_tool_calls=10)

    def lead_script(text: str, step: int) -> Turn:
        if step < 2:
            return Turn.tool_calls(("research", {"topic": f"t{step}"}), usage=USAGE)
        return Turn.text("answer within what is left", usage=USAGE)

    model = routed({"Lead": lead_script, "Research": research_script})
    layer = with_search(model, research)
    async with open_runtime(layer, agents=[parent]) as runtime:
        result = await runtime.run(parent, "go")
    assert result.status == "completed"
    assert (result.finish_reason, result.exhausted) == ("budget-exhausted", "turns")


async def test_the_delegation_tools_timeout_interrupts_the_child(
    autojump_clock: trio.testing.MockClock,
) -> None:
    research = delegate(
        researcher(), name="research", description="R.", parameters=Question, timeout=5.0
    )
    parent = lead(research.tool, SEARCH)

    lead_script = calls_then_answer(
        ("research", {"topic": "t"}), answer="the researcher took too long"
    )

    model = routed({"Lead": lead_script, "Research": lambda t, s: Turn.hanging()})
    layer = with_search(model, research)
    async with open_runtime(layer, agents=[parent]) as runtime:
        events = await collect(runtime, parent, "go")
        child_id = next(e for e in events if isinstance(e, SubagentStarted)).child_conversation_id
        child_entries = await runtime.log.entries(child_id)
    assert isinstance(events[-1], RunCompleted)  # the parent goes on
    (completed,) = [e for e in events if isinstance(e, SubagentCompleted)]
    assert completed.status == "interrupted"
    (settled,) = [e for e in events if isinstance(e, ToolCallFailed)]
    assert settled.outcome.kind == "defect"
    assert "timed out after 5.0 s" in str(settled.outcome)
    assert type(child_entries[-1].record).__name__ == "RunFailedRecord"


@given(
    latencies=st.lists(st.integers(0, 5), min_size=1, max_size=5),
    concurrency=st.integers(1, 4),
)
def test_for_every_completion_order_children_commit_in_declaration_order(
    latencies: list[int], concurrency: int
) -> None:
    """Parallel delegations finishing in any order: each call gets its own child's answer, the
    batch commits in the model's order, and the usage of every child is in the parent's total."""
    slow = Tool("slow_search", "Search slowly.", parameters=Query, success=str, readonly=True)

    async def slow_search(params: Query, call: ToolCallContext) -> str:
        await trio.sleep(latencies[int(params.q)])
        return params.q

    child = Agent("researcher", "Research the topic.", toolkit=Toolkit(slow), output=Finding)
    research = delegate(
        child, name="research", description="R.", parameters=Question, prompt=lambda p: p.topic
    )
    parent = lead(research.tool, slow, tool_concurrency=concurrency, max_tool_calls=64)
    calls = [("research", {"topic": str(i)}, f"c{i}") for i in range(len(latencies))]

    lead_script = calls_then_answer(*calls, answer="done")

    def child_script(text: str, step: int) -> Turn:
        if step == 0:
            return Turn.tool_calls(("slow_search", {"q": text}), usage=USAGE)
        return Turn.text(f'{{"topic": "{text}", "summary": "s"}}', usage=USAGE)

    model = routed({"Lead": lead_script, "Research": child_script})
    layer = model.as_layer() + handlers((slow, slow_search)) + research.layer()

    async def main() -> Any:
        async with open_runtime(layer, agents=[parent]) as runtime:
            return await runtime.run(parent, "go")

    result = trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    assert result.status == "completed"
    topics = [o.result["topic"] for o in result.outcomes if isinstance(o, ToolSuccess)]
    assert topics == [str(i) for i in range(len(latencies))]
    # Two model calls of the parent and two of each child, each reporting USAGE.
    assert result.usage.model_calls == 2 + 2 * len(latencies)
    assert result.usage.input_tokens == USAGE.input.total * (2 + 2 * len(latencies))


async def test_a_child_without_tools_needs_none_of_the_parents_tool_calls() -> None:
    # The delegation call uses the parent's only tool call; the child has no tools, so it
    # needs none and still runs.
    helper = Agent("helper", "Answer briefly.")
    ask = delegate(helper, name="ask", description="Ask the helper.", parameters=Query)
    parent = lead(ask.tool, max_tool_calls=1)

    lead_script = calls_then_answer(("ask", {"q": "2+2?"}), answer="It is 4.")

    model = routed({"Lead": lead_script, "Answer": lambda t, s: Turn.text("4", usage=USAGE)})
    async with open_runtime(model.as_layer() + ask.layer(), agents=[parent]) as runtime:
        events = await collect(runtime, parent, "go")
    (started,) = [e for e in events if isinstance(e, SubagentStarted)]
    assert started.budget.tool_calls == 0
    (outcome,) = [e.outcome for e in events if isinstance(e, ToolCallSucceeded)]
    assert isinstance(outcome, ToolSuccess)
    assert outcome.result == "4"


async def test_a_refusal_reads_as_one_sentence() -> None:
    research = delegate(
        researcher(),
        name="research",
        description="R.",
        parameters=Question,
        budget=ChildBudget(tool_calls=0),
    )
    parent = lead(research.tool, SEARCH)

    lead_script = calls_then_answer(("research", {"topic": "t"}), answer="ok")

    model = routed({"Lead": lead_script, "Research": research_script})
    layer = with_search(model, research)
    async with open_runtime(layer, agents=[parent]) as runtime:
        result = await runtime.run(parent, "go")
    (outcome,) = result.outcomes
    assert isinstance(outcome, ToolFailure)
    assert outcome.error["message"] == (
        "subagent 'researcher' could not start: the subagent has tools but its budget gives it "
        "no tool calls"
    )
