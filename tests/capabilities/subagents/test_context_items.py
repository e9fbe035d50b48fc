"""What a delegation's ``context`` function returns: a sequence of ContextItem, checked before
the child starts (a lone item is not split or taken as 'not iterable')."""

from __future__ import annotations

from typing import Any

import attrs
import pytest

from capabilities.subagents import delegate
from effectagent.ai import Tool, ToolCallContext, Toolkit
from effectagent.core import (
    Agent,
    AgentPolicy,
    ChildBudget,
    ContextAdded,
    ContextItem,
    SubagentStarted,
    ToolCallSettled,
    ToolDefect,
    ToolSuccess,
)
from effectagent.engine import open_runtime, run_child
from effectagent.testing import ScriptedModel, Turn

NOTE = ContextItem(kind="note", source="runbook", text="Restart the pool first.")


@attrs.frozen
class Question:
    service: str


async def _ask(context: Any, prompt: Any = None) -> tuple[ToolCallSettled, list[Any], list[Any]]:
    """The lead delegates once; the settled call, the lead's events and the child's records."""
    child = Agent("helper", "Answer briefly.")
    delegation = delegate(
        child,
        name="ask",
        description="Ask the helper.",
        parameters=Question,
        context=context,
        prompt=prompt,
    )
    lead = Agent("lead", "Lead.", toolkit=Toolkit(delegation.tool), policy=AgentPolicy(max_turns=5))
    model = ScriptedModel(
        [Turn.tool_calls(("ask", {"service": "api"})), Turn.text("ok"), Turn.text("done")]
    )
    async with open_runtime(model.as_layer() + delegation.layer(), agents=[lead]) as runtime:
        async with runtime.stream(lead, "Why?") as stream:
            events = [event async for event in stream]
        log = await runtime.log.entries(events[0].conversation_id)
        (settled,) = [e.record for e in log if isinstance(e.record, ToolCallSettled)]
        child_records: list[Any] = []
        if settled.audit and "subagent" in settled.audit:
            conversation = settled.audit["subagent"]["conversation_id"]
            child_records = [e.record for e in await runtime.log.entries(conversation)]
    return settled, events, child_records


async def test_the_items_a_context_function_returns_are_recorded_in_the_child() -> None:
    settled, _, child_records = await _ask(lambda q: (NOTE,))
    assert isinstance(settled.outcome, ToolSuccess)
    assert [r.item for r in child_records if isinstance(r, ContextAdded)] == [NOTE]


@pytest.mark.parametrize(
    ("returned", "message"),
    [
        (NOTE, "must return a sequence of ContextItem, not a ContextItem (a one-item list"),
        ("Restart the pool first.", "must return a sequence of ContextItem, not a str"),
        (None, "must return a sequence of ContextItem, not a NoneType"),
        ([NOTE, "more"], "must return ContextItem values, got str"),
    ],
    ids=["lone-item", "str", "none", "mixed"],
)
async def test_a_context_that_is_not_a_sequence_of_items_is_a_defect_before_the_child_starts(
    returned: Any, message: str
) -> None:
    """A lone ContextItem failed with "'ContextItem' object is not iterable", None with
    "'NoneType' object is not iterable": neither said what the context function should return."""
    settled, events, child_records = await _ask(lambda q: returned)
    outcome = settled.outcome
    assert isinstance(outcome, ToolDefect)
    assert message in outcome.message
    assert not [e for e in events if isinstance(e, SubagentStarted)]
    assert child_records == []


@pytest.mark.parametrize(
    ("argument", "message"),
    [
        ({"context": NOTE}, "context must be a sequence of ContextItem (a one-item list for one)"),
        ({"context": None}, "context must be a sequence of ContextItem (a one-item list for one)"),
        ({"context": iter([NOTE])}, "context must be a sequence of ContextItem"),
        ({"nested": "yes"}, "nested must be a bool, got str"),
    ],
    ids=["lone-item", "none", "iterator", "nested"],
)
async def test_run_child_names_a_context_or_nested_it_cannot_take(
    argument: dict[str, Any], message: str
) -> None:
    """``run_child(context=NOTE)`` failed with "'ContextItem' object is not iterable" (naming no
    argument), and ``nested="yes"`` was taken as true; each is refused, naming the argument,
    before anything runs — as ``runtime.run(context=...)`` refuses them."""
    child = Agent("helper", "Answer briefly.")
    raised: list[str] = []

    async def handler(params: Question, call: ToolCallContext) -> str:
        with pytest.raises(TypeError) as info:
            await run_child(call, child, "Why?", budget=ChildBudget(), **argument)
        raised.append(str(info.value))
        return "refused"

    tool = Tool("ask", "Ask.", parameters=Question, success=str)
    lead = Agent("lead", "Lead.", toolkit=Toolkit(tool), policy=AgentPolicy(max_turns=5))
    model = ScriptedModel([Turn.tool_calls(("ask", {"service": "api"})), Turn.text("done")])
    layer = model.as_layer() + Toolkit(tool).handlers({tool: handler})
    async with (
        open_runtime(layer, agents=[lead]) as runtime,
        runtime.stream(lead, "Why?") as stream,
    ):
        events = [event async for event in stream]
    assert len(raised) == 1
    assert message in raised[0]
    assert not [e for e in events if isinstance(e, SubagentStarted)]


@pytest.mark.parametrize("returned", ["", "  \n"], ids=["empty", "spaces"])
async def test_a_prompt_that_returns_no_text_is_a_defect_naming_the_prompt(returned: str) -> None:
    """The guide: a prompt that returns no text settles the call as a ToolDefect saying which
    function was wrong. It said "run_child's text must not be empty", naming neither."""
    settled, events, child_records = await _ask(None, prompt=lambda q: returned)
    outcome = settled.outcome
    assert isinstance(outcome, ToolDefect)
    assert "the prompt of a delegation returned an empty text" in outcome.message
    assert not [e for e in events if isinstance(e, SubagentStarted)]
    assert child_records == []


@attrs.frozen
class Forecast:
    city: str
    days: int


@pytest.mark.parametrize(
    "prompt",
    [
        lambda q: Forecast(q.service, 3),
        lambda q: {"city": q.service, "days": 3},
        lambda q: f'{{"city": "{q.service}", "days": 3}}',
    ],
    ids=["value", "dict", "json-text"],
)
async def test_a_prompt_gives_a_typed_child_its_input_as_run_child_takes_it(prompt: Any) -> None:
    """A child with ``Agent(input=...)`` takes a value of its input type (or a dict, or JSON
    text), as ``run_child`` does. A prompt returning the value was refused as "not str"."""
    child = Agent(
        "forecaster",
        "Forecast.",
        input=Forecast,
        input_renderer=lambda f: f"{f.city}, the next {f.days} days",
    )
    delegation = delegate(child, name="ask", description="Ask.", parameters=Question, prompt=prompt)
    lead = Agent("lead", "Lead.", toolkit=Toolkit(delegation.tool), policy=AgentPolicy(max_turns=5))
    model = ScriptedModel(
        [Turn.tool_calls(("ask", {"service": "Oslo"})), Turn.text("Cold."), Turn.text("done")]
    )
    async with open_runtime(model.as_layer() + delegation.layer(), agents=[lead]) as runtime:
        result = await runtime.run(lead, "Weather?")
    (outcome,) = result.outcomes
    assert isinstance(outcome, ToolSuccess)
    assert outcome.result == "Cold."
    read = model.requests[1].messages[-1]
    assert "Oslo, the next 3 days" in str(read)
