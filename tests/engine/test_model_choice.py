"""A model per agent, per run and per turn (#28 item 1), and preflight of every model an agent can
reach (item 2). Over the loopback wire format where the question is which model *receives* the
request; over scripted models where it is which one the engine chose."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence

import attrs
import pytest
import trio

from capabilities.storage._codec import RecordCodec
from capabilities.subagents import delegate
from effectagent import Agent, AgentPolicy, Toolkit, open_runtime
from effectagent.ai import LanguageModelService, ModelKey, Usage
from effectagent.core import (
    CompactionCreated,
    CompactionPerformed,
    EventBase,
    ModelResponseRecorded,
    RunCompleted,
    TurnCompleted,
    UsageDelta,
)
from effectagent.effect import Layer, MissingServicesError
from effectagent.engine import (
    CompactionRequest,
    CompactorService,
    ConversationLogService,
    InMemoryConversationLog,
    MissingModels,
    RunResult,
    reduce_events,
)
from effectagent.providers import model_layer
from effectagent.testing import ScriptedModel, Turn
from tests.providers.replay import Reply, start_server
from tests.providers.wire import ChatWire

from .helpers import (
    HandlerProbe,
    entries,
    events_of,
    forecast_tool,
    make_agent,
    make_policy,
    records_of,
    run_events,
    summarize_everything,
)
from .test_resume_fold import prepared, response, resume, settled, started

KEY = "sk-test-canary-model-choice"


@pytest.fixture(autouse=True)
def _environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_ORG_ID", "OPENAI_PROJECT_ID"):
        monkeypatch.delenv(name, raising=False)


def answer(model: str, text: str) -> Reply:
    return Reply.sse(ChatWire(model).text(text, usage=ChatWire(model).usage(11, 3)))


async def test_the_agents_model_string_is_the_one_that_receives_the_request(
    nursery: trio.Nursery, monkeypatch: pytest.MonkeyPatch
) -> None:
    default, named = await start_server(nursery), await start_server(nursery)
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    monkeypatch.setenv("OPENAI_BASE_URL", f"{named.url}/v1")
    default.script(answer("big", "from the runtime's model"))
    named.script(answer("gpt-4.1-mini", "from the agent's model"))
    plain = Agent("plain", "Answer.")
    small = Agent("small", "Answer.", model="openai-chat:gpt-4.1-mini")
    layer = model_layer("openai-compatible:big", base_url=f"{default.url}/v1")
    async with open_runtime(layer, agents=[plain, small]) as runtime:
        mine = await runtime.run(small, "hi")
        theirs = await runtime.run(plain, "hi")
        records = [e.record for e in await entries(runtime, mine.conversation_id)]
    assert mine.text == "from the agent's model"
    assert theirs.text == "from the runtime's model"
    assert [r.json()["model"] for r in named.requests] == ["gpt-4.1-mini"]
    assert [r.json()["model"] for r in default.requests] == ["big"]
    (response,) = [r for r in records if isinstance(r, ModelResponseRecorded)]
    assert response.model == "openai-chat:gpt-4.1-mini"
    assert mine.usage_by_model["openai-chat:gpt-4.1-mini"].input_tokens == 11


async def test_a_model_key_and_a_runs_own_model_receive_the_request(nursery: trio.Nursery) -> None:
    default, cheap_server = await start_server(nursery), await start_server(nursery)
    cheap = ModelKey("cheap")
    default.script(answer("big", "big one"))
    cheap_server.script(answer("small", "small one"), answer("small", "small again"))
    keyed = Agent("keyed", "Answer.", model=cheap)
    plain = Agent("plain", "Answer.")
    layer = model_layer("openai-compatible:big", base_url=f"{default.url}/v1") + cheap.layer(
        model_layer("openai-compatible:small", base_url=f"{cheap_server.url}/v1")
    )
    async with open_runtime(layer, agents=[keyed, plain]) as runtime:
        assert (await runtime.run(keyed, "hi")).text == "small one"
        overridden = await runtime.run(plain, "hi", model=cheap)  # the run names its model
        assert overridden.text == "small again"
        assert (await runtime.run(plain, "hi")).text == "big one"  # the agent's own again
    assert [r.json()["model"] for r in cheap_server.requests] == ["small", "small"]
    assert [r.json()["model"] for r in default.requests] == ["big"]
    assert list(overridden.usage_by_model) == ["cheap"]


async def test_without_a_named_model_nothing_changes() -> None:
    model = ScriptedModel([Turn.text("hello")])
    agent = Agent("plain", "Answer.")
    async with open_runtime(model.as_layer(), agents=[agent]) as runtime:
        result = await runtime.run(agent, "hi")
        records = [e.record for e in await entries(runtime, result.conversation_id)]
    (response,) = [r for r in records if isinstance(r, ModelResponseRecorded)]
    assert response.model is None
    assert list(result.usage_by_model) == [None]


async def test_every_turn_and_the_end_report_one_models_usage_broken_down_by_that_model() -> None:
    """A run of one model: each TurnCompleted and the terminal event carry the running usage
    and its breakdown, that model's totals (the run keeps no breakdown while it runs)."""
    usage = Usage.of(10, 3)
    model = ScriptedModel(
        [
            Turn.tool_calls(("forecast", {"city": "Oslo"}), usage=usage),
            Turn.text("Mild.", usage=usage),
        ]
    )
    tool = forecast_tool()
    agent = make_agent(tool)
    layer = agent.toolkit.handlers({tool: HandlerProbe().forecast()}) + model.as_layer()
    async with open_runtime(layer, agents=[agent]) as runtime:
        events = await run_events(runtime, agent, "Oslo?")
    end = events[-1]
    assert isinstance(end, RunCompleted)
    reports = [e.usage for e in events if isinstance(e, TurnCompleted)] + [end.usage]
    # The final turn completes too, before the run's end: both report the run's totals.
    assert [(u.input_tokens, u.model_calls) for u in reports] == [(10, 1), (20, 2), (20, 2)]
    for reported in reports:
        ((name, totals),) = reported.by_model
        assert name is None  # the runtime's own model
        assert (totals.input_tokens, totals.model_calls) == (
            reported.input_tokens,
            reported.model_calls,
        )


async def test_an_agent_that_names_every_model_needs_no_runtime_model() -> None:
    own = ModelKey("own")
    agent = Agent("named", "Answer.", model=own)
    layer = own.layer(ScriptedModel([Turn.text("fine")]))
    async with open_runtime(layer, agents=[agent]) as runtime:
        assert (await runtime.run(agent, "hi")).text == "fine"


async def test_the_grace_turn_asks_the_grace_model(
    autojump_clock: trio.testing.MockClock,
) -> None:
    tool = forecast_tool()
    main, grace = ModelKey("main"), ModelKey("grace")
    main_model = ScriptedModel([Turn.tool_calls(("forecast", {"city": "Oslo"}))])
    grace_model = ScriptedModel([Turn.text("It is 4 °C.")])
    agent = Agent(
        "weather",
        "Answer.",
        make_policy(max_turns=1),
        Toolkit(tool),
        model=main,
        grace_model=grace,
    )
    handlers = Toolkit(tool).handlers(tool.bind(HandlerProbe().forecast()))
    layer = handlers + main.layer(main_model) + grace.layer(grace_model)
    async with open_runtime(layer, agents=[agent]) as runtime:
        events = await run_events(runtime, agent, "Oslo?")
    turns = events_of(events, TurnCompleted)
    assert [(t.turn, t.model) for t in turns] == [(1, "main"), (2, "grace")]
    assert len(main_model.requests) == 1
    assert len(grace_model.requests) == 1
    assert grace_model.requests[0].tool_choice == "none"


class SummarizeEverything:
    """A compactor that summarizes the whole log so far with the engine's summary call."""

    async def compact(self, request: CompactionRequest) -> Sequence[CompactionCreated]:
        return await summarize_everything(request)


async def test_the_summary_call_asks_the_summary_model_and_its_usage_is_its_own(
    autojump_clock: trio.testing.MockClock,
) -> None:
    summarizer = ModelKey("summarizer")
    summaries = ScriptedModel([Turn.text("THE SUMMARY", usage=Usage.of(40, 5))])
    model = ScriptedModel(
        [
            Turn.text("first answer " * 40, usage=Usage.of(30, 60)),
            Turn.text("second", usage=Usage.of(20, 2)),
        ]
    )
    agent = Agent(
        "talker", "Answer.", make_policy(context_token_limit=50), summary_model=summarizer
    )
    layer = (
        Layer.succeed(CompactorService, SummarizeEverything())
        + model.as_layer()
        + summarizer.layer(summaries)
    )
    async with open_runtime(layer, agents=[agent]) as runtime:
        first = await runtime.run(agent, "hello " * 20)
        events = await run_events(runtime, agent, "and?", conversation_id=first.conversation_id)
    (compaction,) = events_of(events, CompactionPerformed)
    assert compaction.model == "summarizer"
    assert len(summaries.requests) == 1
    assert len(model.requests) == 2
    result = await _reduced(events)
    assert result.usage.input_tokens == 60  # 40 + 20
    by_model = {name: totals.input_tokens for name, totals in result.usage_by_model.items()}
    assert by_model == {"summarizer": 40, None: 20}


async def _reduced(events: Sequence[EventBase]) -> RunResult:
    async def replayed() -> AsyncIterator[EventBase]:
        for event in events:
            yield event

    return await reduce_events(replayed())


@attrs.frozen
class Question:
    text: str


async def test_a_subagent_runs_on_its_own_model_and_its_usage_is_kept_by_model() -> None:
    child_key = ModelKey("child")
    child = Agent("helper", "Help.", model=child_key)
    ask = delegate(child, name="ask", description="Ask the helper.", parameters=Question)
    parent = Agent("lead", "Delegate.", toolkit=Toolkit(ask.tool))
    parent_model = ScriptedModel(
        [
            Turn.tool_calls(("ask", {"text": "what?"}), usage=Usage.of(10, 1)),
            Turn.text("done", usage=Usage.of(12, 1)),
        ]
    )
    child_model = ScriptedModel([Turn.text("helped", usage=Usage.of(7, 2))])
    layer = ask.layer() + parent_model.as_layer() + child_key.layer(child_model)
    async with open_runtime(layer, agents=[parent]) as runtime:
        result = await runtime.run(parent, "go")
    assert result.text == "done"
    assert len(child_model.requests) == 1
    totals = {name: (t.input_tokens, t.model_calls) for name, t in result.usage_by_model.items()}
    assert totals == {None: (22, 2), "child": (7, 1)}


# ---- preflight ----------------------------------------------------------------------------------


async def test_a_missing_model_key_is_named_in_a_sentence_before_anything_is_built() -> None:
    cheap = ModelKey("cheap")
    agent = Agent("writer", "Write.", model=cheap)
    built = []

    async def build(_: object) -> ScriptedModel:
        built.append(True)
        return ScriptedModel()

    with pytest.raises(MissingModels) as caught:
        async with open_runtime(Layer.effect(LanguageModelService, build), agents=[agent]):
            pass
    assert str(caught.value) == (
        "Agent 'writer' runs on the model 'cheap' (a ModelKey), which no layer provides: add its "
        "layer (ModelKey.layer) to the runtime's."
    )
    assert isinstance(caught.value, MissingServicesError)
    assert built == []


async def test_a_missing_model_and_other_missing_services_are_named_in_one_error() -> None:
    """It named the model alone; the handler, the approval service and the compactor came out
    one fix later, each."""
    rm = forecast_tool("rm", needs_approval=True)
    agent = Agent(
        "a", "x", AgentPolicy(context_token_limit=10_000), Toolkit(rm), model=ModelKey("m")
    )
    expected_keys = {
        "model m",
        "tool handler 'rm'",
        "effectagent.Approval",
        "effectagent.Compactor",
    }
    with pytest.raises(MissingModels) as opening:
        async with open_runtime(Toolkit().handlers(), agents=[agent]):
            pass
    message = str(opening.value)
    assert message.startswith("Agent 'a' runs on the model 'm' (a ModelKey), which no layer")
    assert "\nAlso 3 required service(s) not provided:\n" in message
    assert {key.name for key in opening.value.keys} == expected_keys
    # A runtime opened without the agent checks it the same way at its first run.
    async with open_runtime(ScriptedModel().as_layer()) as runtime:
        with pytest.raises(MissingModels) as running:
            await runtime.run(agent, "Go.")
    assert {key.name for key in running.value.keys} == expected_keys


async def test_every_model_a_run_can_reach_is_checked_before_it_records_anything() -> None:
    summarizer, helper = ModelKey("summarizer"), ModelKey("helper")
    child = Agent("helper", "Help.", model=helper)
    ask = delegate(child, name="ask", description="Ask the helper.", parameters=Question)
    parent = Agent(
        "lead",
        "Delegate.",
        toolkit=Toolkit(ask.tool),
        grace_model="openai:gpt-4.1-mini",
        summary_model=summarizer,
    )
    log = InMemoryConversationLog()
    model = ScriptedModel()
    layer = model.as_layer() + ask.layer() + Layer.succeed(ConversationLogService, log)
    async with open_runtime(layer) as runtime:
        with pytest.raises(MissingModels) as caught:
            await runtime.run(parent, "go", conversation_id="c1", create=True)
        assert list(await log.entries("c1")) == []  # nothing recorded
    assert model.requests == []
    message = str(caught.value)
    assert message == (
        "Agent 'lead' runs its grace turn on the model 'openai:gpt-4.1-mini', which this runtime "
        "has not opened: open_runtime opens the model strings of the agents and of the models= it "
        "is given. "
        "Agent 'lead' summarizes for compaction with the model 'summarizer' (a ModelKey), which no "
        "layer provides: add its layer (ModelKey.layer) to the runtime's. "
        "Agent 'helper' (run by tool 'ask' of agent 'lead') runs on the model 'helper' (a "
        "ModelKey), which no layer provides: add its layer (ModelKey.layer) to the runtime's."
    )


async def test_a_runs_model_string_must_have_been_opened() -> None:
    agent = Agent("plain", "Answer.")
    async with open_runtime(ScriptedModel().as_layer(), agents=[agent]) as runtime:
        with pytest.raises(MissingModels, match=r"runs on the model 'openai:gpt-4\.1-mini', which"):
            await runtime.run(agent, "hi", model="openai:gpt-4.1-mini")
        with pytest.raises(ValueError, match="model must be a model string such as"):
            await runtime.run(agent, "hi", model="gpt-4.1-mini")


async def test_a_string_opened_by_models_serves_a_runs_model(
    nursery: trio.Nursery, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = await start_server(nursery)
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    monkeypatch.setenv("OPENAI_BASE_URL", f"{server.url}/v1")
    server.script(answer("gpt-4.1-mini", "opened"))
    agent = Agent("plain", "Answer.")
    layer = ScriptedModel().as_layer()
    async with open_runtime(layer, agents=[agent], models=["openai-chat:gpt-4.1-mini"]) as rt:
        result = await rt.run(agent, "hi", model="openai-chat:gpt-4.1-mini")
    assert result.text == "opened"
    assert list(result.usage_by_model) == ["openai-chat:gpt-4.1-mini"]


async def test_an_unknown_provider_or_a_missing_key_fails_as_the_runtime_opens() -> None:
    with pytest.raises(ValueError, match="unknown model string 'mistral:7b'"):
        async with open_runtime(ScriptedModel().as_layer(), models=["mistral:7b"]):
            pass
    with pytest.raises(TypeError, match="a sequence of model strings, not one string"):
        async with open_runtime(ScriptedModel().as_layer(), models="openai:gpt-4.1"):
            pass
    agent = Agent("plain", "Answer.", model="openai:gpt-4.1")
    with pytest.raises(Exception, match="OPENAI_API_KEY"):
        async with open_runtime(ScriptedModel().as_layer(), agents=[agent]):
            pass


def test_an_agents_model_is_checked_as_it_is_made() -> None:
    with pytest.raises(TypeError, match=r"Agent\.model must be a model string such as"):
        Agent("a", "b", model=3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"Agent\.grace_model must be a model string such as"):
        Agent("a", "b", grace_model="gpt-4.1")
    with pytest.raises(ValueError, match="a ModelKey's name must not be empty"):
        ModelKey(" ")
    with pytest.raises(TypeError, match="takes a Layer that provides the LanguageModelService"):
        ModelKey("x").layer(Layer.succeed(CompactorService, SummarizeEverything()))
    assert AgentPolicy() == Agent("a", "b", model=ModelKey("k")).policy


# ---- records ------------------------------------------------------------------------------------


def test_records_written_before_models_were_named_still_read_and_new_ones_round_trip() -> None:
    codec = RecordCodec()
    record = ModelResponseRecorded(
        conversation_id="c",
        run_id="r",
        turn=1,
        content=(("text", "hi"),),
        finish_reason="stop",
        usage=UsageDelta(3, 1),
        at=1.0,
        model="openai:gpt-4.1",
    )
    tag, version, body, _ = codec.encode(record)
    assert codec.decode("c", 1, tag, version, body) == record
    old = attrs.evolve(record, model=None)
    old_body = body.replace(',"model":"openai:gpt-4.1"', "").replace(
        '"model":"openai:gpt-4.1",', ""
    )
    assert "model" not in old_body.replace("openai", "")
    assert codec.decode("c", 1, tag, version, old_body) == old


async def test_records_say_which_model_answered_each_turn() -> None:
    a, b = ModelKey("a"), ModelKey("b")
    agent = Agent("two", "Answer.", model=a)
    layer = a.layer(ScriptedModel([Turn.text("one")])) + b.layer(ScriptedModel([Turn.text("two")]))
    async with open_runtime(layer, agents=[agent]) as runtime:
        first = await runtime.run(agent, "hi")
        await runtime.run(agent, "again", conversation_id=first.conversation_id, model=b)
        records = records_of(await entries(runtime, first.conversation_id), ModelResponseRecorded)
    assert [r.model for r in records] == ["a", "b"]


async def test_cancelling_a_run_on_a_named_model_interrupts_it(
    autojump_clock: trio.testing.MockClock,
) -> None:
    own = ModelKey("own")
    model = ScriptedModel([Turn.hanging()])
    agent = Agent("waiting", "Answer.", model=own)
    async with open_runtime(own.layer(model), agents=[agent]) as runtime:
        with trio.move_on_after(5) as scope:
            await runtime.run(agent, "hi")
        assert scope.cancelled_caught
        assert runtime.active_runs == 0


def test_a_resumed_run_counts_each_models_usage_again_from_its_records() -> None:
    records = [
        *started(),
        attrs.evolve(response(1, "c1", tokens=5), model="a"),
        prepared(1, "c1"),
        settled(1, "c1"),
        attrs.evolve(response(2, "c2", tokens=7), model="b"),
    ]
    usage = resume(records).state.budget.totals
    by_model = {name: (t.input_tokens, t.model_calls) for name, t in usage.by_model}
    assert by_model == {"a": (5, 1), "b": (7, 1)}
