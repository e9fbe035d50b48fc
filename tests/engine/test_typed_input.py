"""A typed run input (``Agent(input=T)``, #29 item 1): ``runtime.run(agent, T(...))`` checks the
input against ``T`` before anything is recorded, the model reads it rendered (JSON, or the
agent's ``input_renderer``), and the input record keeps the rendered text and the JSON value.

Invariants: for every value of the input type, the model reads JSON that decodes back to it and
the record's value decodes back to it; a value that does not fit is refused with an error naming
the field, and nothing is written (no conversation, no record); an agent without ``input=`` runs
on its text as before."""

from __future__ import annotations

import json
from typing import Any, TypedDict

import attrs
import pytest
import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st

from effectagent import Agent, AgentPolicy, Toolkit
from effectagent.ai import ModelRequest, TextContent, UserMessage
from effectagent.core import ChildBudget, RunStarted, UserInputRecorded
from effectagent.effect import decode, decode_json, field_meta
from effectagent.engine import open_runtime, run_child
from effectagent.testing import ScriptedModel, Turn

from .helpers import forecast_tool


@attrs.frozen
class Window:
    start: int
    end: int


@attrs.frozen
class Query:
    city: str
    days: int = attrs.field(metadata=field_meta(ge=1, le=14))
    units: str = "metric"
    windows: tuple[Window, ...] = ()


def last_user_text(request: ModelRequest) -> str:
    (message,) = [m for m in request.messages if isinstance(m, UserMessage)][-1:]
    (part,) = message.content
    assert isinstance(part, TextContent)
    return part.text


def inputs_of(entries: list[Any]) -> list[UserInputRecorded]:
    return [e.record for e in entries if isinstance(e.record, UserInputRecorded)]


FORECASTER = Agent("forecaster", "Forecast the weather.", input=Query)


async def test_the_model_reads_the_input_as_json_and_the_record_keeps_text_and_value() -> None:
    model = ScriptedModel([Turn.text("Cold.")])
    async with open_runtime(model.as_layer(), agents=[FORECASTER]) as runtime:
        result = await runtime.run(FORECASTER, Query("Oslo", 3, windows=(Window(1, 2),)))
        log = list(await runtime.log.entries(result.conversation_id))
    assert result.status == "completed"
    sent = last_user_text(model.requests[0])
    expected = {"city": "Oslo", "days": 3, "units": "metric", "windows": [{"start": 1, "end": 2}]}
    assert json.loads(sent) == expected
    (record,) = inputs_of(log)
    assert (record.text, record.value) == (sent, expected)


async def test_a_renderer_decides_what_the_model_reads() -> None:
    agent = Agent(
        "forecaster",
        "Forecast.",
        input=Query,
        input_renderer=lambda q: f"{q.city} for {q.days} days",
    )
    model = ScriptedModel([Turn.text("Cold.")])
    async with open_runtime(model.as_layer(), agents=[agent]) as runtime:
        result = await runtime.run(agent, Query("Oslo", 3))
        log = list(await runtime.log.entries(result.conversation_id))
    assert last_user_text(model.requests[0]) == "Oslo for 3 days"
    (record,) = inputs_of(log)
    assert record.text == "Oslo for 3 days"
    assert record.value == {"city": "Oslo", "days": 3, "units": "metric", "windows": []}


@pytest.mark.parametrize(
    "given_input",
    [{"city": "Oslo", "days": 3}, '{"city": "Oslo", "days": 3}'],
    ids=["a JSON value", "JSON text"],
)
async def test_json_of_the_input_type_is_decoded_into_it(given_input: Any) -> None:
    model = ScriptedModel([Turn.text("Cold.")])
    async with open_runtime(model.as_layer(), agents=[FORECASTER]) as runtime:
        result = await runtime.run(FORECASTER, given_input)
    assert result.status == "completed"
    assert decode_json(Query, last_user_text(model.requests[0])) == Query("Oslo", 3)


@pytest.mark.parametrize(
    ("bad", "error", "message"),
    [
        (Query("Oslo", 30), ValueError, r"does not match Query: \$\.days: .*14"),
        ({"city": "Oslo", "days": "three"}, ValueError, r"\$\.days: expected an integer"),
        ({"days": 3}, ValueError, r"does not match Query: \$\.city"),
        ("Oslo, please", ValueError, r"does not match Query: \$: .*JSON"),
        (Window(1, 2), ValueError, r"does not match Query"),
        (3.5, ValueError, r"does not match Query"),
    ],
    ids=["a constraint", "a field's type", "a missing field", "text", "another type", "a number"],
)
async def test_an_input_that_does_not_fit_is_refused_naming_the_field_and_nothing_is_written(
    bad: Any, error: type[Exception], message: str
) -> None:
    model = ScriptedModel([])
    async with open_runtime(model.as_layer(), agents=[FORECASTER]) as runtime:
        with pytest.raises(error, match=message):
            await runtime.run(FORECASTER, bad, conversation_id="c1", create=True)
        with pytest.raises(error, match=message):
            runtime.stream(FORECASTER, bad, conversation_id="c1", create=True)
        assert list(await runtime.log.entries("c1")) == []
        assert runtime.active_runs == 0
    assert model.requests == []


async def test_a_renderer_that_returns_no_str_is_refused_before_anything_is_written() -> None:
    agent = Agent("forecaster", "Forecast.", input=Query, input_renderer=lambda q: q.days)  # type: ignore[arg-type, return-value]
    async with open_runtime(ScriptedModel([]).as_layer(), agents=[agent]) as runtime:
        with pytest.raises(TypeError, match="input_renderer must return a str, returned int"):
            await runtime.run(agent, Query("Oslo", 3), conversation_id="c1", create=True)
        assert list(await runtime.log.entries("c1")) == []


async def test_an_agent_without_an_input_type_runs_on_its_text_as_before() -> None:
    agent = Agent("plain", "Answer.")
    model = ScriptedModel([Turn.text("Hi.")])
    async with open_runtime(model.as_layer(), agents=[agent]) as runtime:
        result = await runtime.run(agent, text='{"city": "Oslo"}')  # the keyword still works
        log = list(await runtime.log.entries(result.conversation_id))
    assert last_user_text(model.requests[0]) == '{"city": "Oslo"}'
    (record,) = inputs_of(log)
    assert (record.text, record.value) == ('{"city": "Oslo"}', None)


def test_agent_input_must_be_a_type_with_an_object_schema() -> None:
    with pytest.raises(
        TypeError, match=r"Agent\.input must be a type whose JSON Schema is an object"
    ):
        Agent("a", "b", input=int)
    with pytest.raises(ValueError, match=r"Agent\.input_renderer needs Agent\.input"):
        Agent("a", "b", input_renderer=str)


async def test_a_stream_checks_and_renders_the_input_as_run_does() -> None:
    model = ScriptedModel([Turn.text("Cold.")])
    async with (
        open_runtime(model.as_layer(), agents=[FORECASTER]) as runtime,
        runtime.stream(FORECASTER, Query("Lima", 2)) as events,
    ):
        seen = [event async for event in events]
    started = seen[0]
    assert decode_json(Query, last_user_text(model.requests[0])) == Query("Lima", 2)
    assert isinstance(started, RunStarted)
    assert json.loads(started.input) == {
        "city": "Lima",
        "days": 2,
        "units": "metric",
        "windows": [],
    }


async def test_a_subagent_with_a_typed_input_is_handed_its_json() -> None:
    """``run_child`` (what a delegation tool calls) decodes the JSON it is handed into the child
    agent's input type, and refuses what does not fit before the child starts."""
    tool = forecast_tool()
    child = Agent("child", "Forecast.", input=Query)
    seen: list[str] = []

    async def delegate(params: Any, call: Any) -> Any:
        # JSON from elsewhere (mypy holds a typed caller to a Query, as it does ``runtime.run``).
        wrong: Any = {"city": "Oslo", "days": 0}
        with pytest.raises(ValueError, match=r"\$\.days"):
            await run_child(call, child, wrong, budget=ChildBudget())
        given: Any = {"city": params.city, "days": 2}
        ran = await run_child(call, child, given, budget=ChildBudget())
        seen.append(ran.status)
        return {"city": params.city, "high_c": 1.0}

    parent = Agent("parent", "Delegate.", AgentPolicy(), Toolkit(tool))
    model = ScriptedModel(
        [Turn.tool_calls(("forecast", {"city": "Oslo"})), Turn.text("Child."), Turn.text("Done.")]
    )
    layer = parent.toolkit.handlers({tool: delegate}) + model.as_layer()
    async with open_runtime(layer, agents=[parent]) as runtime:
        result = await runtime.run(parent, "Go.")
    assert (result.status, seen) == ("completed", ["completed"])
    assert decode_json(Query, last_user_text(model.requests[1])) == Query("Oslo", 2)


async def test_a_subagent_given_blank_text_is_refused_before_it_starts() -> None:
    tool = forecast_tool()
    child = Agent("child", "Forecast.")
    refused: list[str] = []

    async def delegate(params: Any, call: Any) -> Any:
        for text in ("", "  \n"):
            with pytest.raises(ValueError, match="run_child's text must not be empty") as caught:
                await run_child(call, child, text, budget=ChildBudget())
            refused.append(str(caught.value))
        return {"city": params.city, "high_c": 1.0}

    parent = Agent("parent", "Delegate.", AgentPolicy(), Toolkit(tool))
    model = ScriptedModel([Turn.tool_calls(("forecast", {"city": "Oslo"})), Turn.text("Done.")])
    layer = parent.toolkit.handlers({tool: delegate}) + model.as_layer()
    async with open_runtime(layer, agents=[parent]) as runtime:
        result = await runtime.run(parent, "Go.")
    assert (result.status, len(refused), len(model.requests)) == ("completed", 2, 2)


# ---- properties ------------------------------------------------------------------------------------

WINDOWS = st.builds(Window, st.integers(-5, 5), st.integers(-5, 5))
QUERIES = st.builds(
    Query,
    st.text(max_size=12),
    st.integers(1, 14),
    st.sampled_from(["metric", "imperial"]),
    st.lists(WINDOWS, max_size=3).map(tuple),
)


@settings(max_examples=40, deadline=None)
@given(query=QUERIES)
def test_for_every_input_the_model_reads_json_that_decodes_back_to_it(query: Query) -> None:
    async def main() -> tuple[str, Any]:
        model = ScriptedModel([Turn.text("ok")])
        async with open_runtime(model.as_layer(), agents=[FORECASTER]) as runtime:
            result = await runtime.run(FORECASTER, query)
            (record,) = inputs_of(list(await runtime.log.entries(result.conversation_id)))
        return last_user_text(model.requests[0]), record.value

    sent, value = trio.run(main)
    assert decode_json(Query, sent) == query
    assert decode(Query, value) == query


@settings(max_examples=40, deadline=None)
@given(
    data=st.fixed_dictionaries(
        {"city": st.one_of(st.text(max_size=5), st.integers())},
        optional={"days": st.one_of(st.integers(-3, 20), st.text(max_size=3), st.none())},
    )
)
def test_for_every_input_refused_nothing_is_recorded(data: dict[str, Any]) -> None:
    fits = (
        isinstance(data["city"], str)
        and isinstance(data.get("days"), int)
        and 1 <= data["days"] <= 14
    )

    agent: Agent = FORECASTER  # any input: the dicts are JSON of Query

    async def main() -> tuple[bool, int]:
        model = ScriptedModel([Turn.text("ok")])
        async with open_runtime(model.as_layer(), agents=[FORECASTER]) as runtime:
            try:
                await runtime.run(agent, data, conversation_id="c", create=True)
            except ValueError:
                return False, len(list(await runtime.log.entries("c")))
            return True, len(list(await runtime.log.entries("c")))

    ran, records = trio.run(main)
    assert ran == fits
    assert (records > 0) == fits


class Place(TypedDict):
    city: str
    country: str


async def test_a_typed_dict_input_is_given_as_its_dict() -> None:
    agent = Agent("placer", "Place it.", input=Place)
    model = ScriptedModel([Turn.text("Norway.")])
    async with open_runtime(model.as_layer(), agents=[agent]) as runtime:
        await runtime.run(agent, Place(city="Oslo", country="NO"))
        with pytest.raises(ValueError, match=r"does not match Place: \$\.country"):
            await runtime.run(agent, {"city": "Oslo"})  # type: ignore[misc]
    assert json.loads(last_user_text(model.requests[0])) == {"city": "Oslo", "country": "NO"}


async def test_a_secret_in_a_typed_input_reaches_neither_the_record_nor_the_model() -> None:
    canary = "sk-canary-input-42"
    model = ScriptedModel([Turn.text("Cold.")])
    async with open_runtime(model.as_layer(), agents=[FORECASTER], secrets=[canary]) as runtime:
        result = await runtime.run(FORECASTER, Query(f"Oslo {canary}", 3))
        log = list(await runtime.log.entries(result.conversation_id))
    (record,) = inputs_of(log)
    assert canary not in repr(record)
    assert record.value["city"] == "Oslo [REDACTED]"
    assert canary not in repr(model.requests[0])


async def test_a_recorded_input_that_no_longer_fits_refuses_the_resume_before_it_starts() -> None:
    """The agent's input type changed since the run was recorded: resuming it raises at once,
    naming the field, and writes nothing."""
    from effectagent.core import ApprovalRequest, ToolApprovalRequested
    from effectagent.effect import Layer
    from effectagent.engine import (
        ApprovalService,
        ApprovalSuspended,
        ConversationLogService,
        InMemoryConversationLog,
    )

    @attrs.frozen
    class Renamed:
        town: str
        days: int

    class Later:
        suspends = True

        async def request(self, request: ApprovalRequest) -> ApprovalSuspended:
            await trio.lowlevel.checkpoint()
            return ApprovalSuspended("later")

    async def never(params: Any, call: Any) -> Any:
        raise AssertionError("the call waits for its approval")

    tool = forecast_tool(needs_approval=True)
    before = Agent("forecaster", "Forecast.", AgentPolicy(), Toolkit(tool), input=Query)
    after = Agent("forecaster", "Forecast.", AgentPolicy(), Toolkit(tool), input=Renamed)
    log = InMemoryConversationLog()
    layer = (
        before.toolkit.handlers({tool: never})
        + ScriptedModel([Turn.tool_calls(("forecast", {"city": "Oslo"}))]).as_layer()
        + Layer.succeed(ApprovalService, Later())
        + Layer.succeed(ConversationLogService, log)
    )
    async with open_runtime(layer, agents=[before]) as runtime:
        first = await runtime.run(before, Query("Oslo", 3))
        assert first.status == "suspended"
        count = len(list(await log.entries(first.conversation_id)))
        with pytest.raises(
            ValueError, match=r"(?s)recorded input does not match Renamed .*\$\.town"
        ):
            await runtime.resume(after, conversation_id=first.conversation_id, run_id=first.run_id)
        entries = list(await log.entries(first.conversation_id))
    assert len(entries) == count
    assert isinstance(entries[-1].record, ToolApprovalRequested)  # where it waits, still


@attrs.frozen
class Count:
    n: int


CANARY = "canary-7Zq91xK"


@pytest.mark.parametrize("given", [{"n": CANARY}, json.dumps({"n": CANARY})])
async def test_a_refused_input_never_shows_a_secret_in_its_error(
    given: object, autojump_clock: trio.testing.MockClock
) -> None:
    """The error quotes what was given: the runtime's redactor goes over it, as over a tool
    call's refused arguments."""
    agent: Any = Agent("typed", "Count.", input=Count)  # the given value is wrong on purpose
    layer = ScriptedModel.layer([Turn.text("ok")])
    async with open_runtime(layer, agents=[agent], secrets=[CANARY]) as runtime:
        with pytest.raises(ValueError, match="does not match Count") as caught:
            await runtime.run(agent, given)
        assert CANARY not in str(caught.value)
        with pytest.raises(ValueError, match="does not match Count") as caught:
            runtime.stream(agent, given)
        assert CANARY not in str(caught.value)
