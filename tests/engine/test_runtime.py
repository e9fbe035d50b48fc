"""The runtime: no global state (two coexist), opened inside the caller's task tree, closing it
interrupts its runs and releases its layers; ``run`` reduces ``stream`` (RUN-001); conversations
continue from the log; output schemas; event and record invariants."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any, cast

import attrs
import pytest
import trio
import trio.testing

from effectagent.ai import (
    AssistantMessage,
    AuthenticationFailed,
    FinishPart,
    LanguageModelService,
    ModelRequest,
    SystemMessage,
    TextContent,
    TextDeltaPart,
    TextStartPart,
    ToolCallContext,
    ToolMessage,
    UserMessage,
)
from effectagent.core import (
    ConversationCreated,
    EventBase,
    LogEntry,
    ModelFailed,
    OutputInvalid,
    RunCompleted,
    RunCompletedRecord,
    RunFailed,
    RunFailedRecord,
    RunInterrupted,
    ToolCallDeclared,
    ToolCallFailed,
    ToolCallStarted,
    ToolCallSucceeded,
    TurnStarted,
)
from effectagent.effect import Context, Layer, ServiceKey
from effectagent.engine import RunResult, open_runtime, reduce_events
from effectagent.testing import Turn

from .helpers import (
    Forecast,
    HandlerProbe,
    Lookup,
    TrackingModel,
    assert_well_formed,
    collect,
    descendant_tasks,
    entries,
    events_of,
    forecast_tool,
    make_agent,
    make_policy,
    records_of,
    run_events,
)


def _weather_turns(city: str) -> list[Turn]:
    return [Turn.tool_calls(("forecast", {"city": city})), Turn.text(f"{city} is mild.")]


# ---- no global state ---------------------------------------------------------------------------


async def test_two_runtimes_coexist_independently(autojump_clock: trio.testing.MockClock) -> None:
    tool_a, tool_b = forecast_tool(), forecast_tool()
    agent_a, agent_b = make_agent(tool_a), make_agent(tool_b)
    probe_a, probe_b = HandlerProbe(), HandlerProbe()
    model_a, model_b = TrackingModel(_weather_turns("Oslo")), TrackingModel(_weather_turns("Rome"))
    layer_a = agent_a.toolkit.handlers({tool_a: probe_a.forecast()}) + model_a.layer()
    layer_b = agent_b.toolkit.handlers({tool_b: probe_b.forecast()}) + model_b.layer()
    results: dict[str, RunResult] = {}
    async with (
        open_runtime(layer_a, agents=[agent_a]) as runtime_a,
        open_runtime(layer_b, agents=[agent_b]) as runtime_b,
    ):

        async def run(key: str, runtime: Any, agent: Any) -> None:
            results[key] = await runtime.run(agent, "Weather?")

        async with trio.open_nursery() as nursery:
            nursery.start_soon(run, "a", runtime_a, agent_a)
            nursery.start_soon(run, "b", runtime_b, agent_b)
        assert runtime_a.log is not runtime_b.log
        assert runtime_a.log.conversations() == (results["a"].conversation_id,)  # type: ignore[attr-defined]
        assert runtime_b.log.conversations() == (results["b"].conversation_id,)  # type: ignore[attr-defined]
    assert results["a"].text == "Oslo is mild."
    assert results["b"].text == "Rome is mild."
    assert probe_a.calls == [("forecast", Lookup("Oslo"))]
    assert probe_b.calls == [("forecast", Lookup("Rome"))]
    assert len(model_a.requests) == len(model_b.requests) == 2


async def test_runs_live_in_the_callers_task_tree(autojump_clock: trio.testing.MockClock) -> None:
    seen: list[trio.lowlevel.Task] = []

    def record_task(request: ModelRequest) -> None:
        seen.append(trio.lowlevel.current_task())

    model = TrackingModel([Turn.text("Hello.").with_inspection(record_task)])
    agent = make_agent()
    caller = trio.lowlevel.current_task()
    async with open_runtime(model.layer(), agents=[agent]) as runtime:
        result = await runtime.run(agent, "Hi")
        assert runtime.active_runs == 0
    assert result.status == "completed"
    (run_task,) = seen
    ancestors = []
    task: trio.lowlevel.Task | None = run_task
    while task is not None:
        ancestors.append(task)
        nursery = task.parent_nursery
        task = nursery.parent_task if nursery is not None else None
    assert caller in ancestors
    assert descendant_tasks(caller) == []  # nothing outlives the runtime


async def test_a_closed_runtime_refuses_new_runs(autojump_clock: trio.testing.MockClock) -> None:
    agent = make_agent()
    async with open_runtime(TrackingModel().layer(), agents=[agent]) as runtime:
        pass
    with pytest.raises(RuntimeError, match="closed"):
        runtime.stream(agent, "Hi")


async def test_run_checks_its_arguments_as_it_is_called_and_does_nothing_until_awaited(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """``runtime.run`` returns the run's coroutine: a wrong argument is raised by the call
    itself; a coroutine never awaited claims nothing (the conversation is free for the next)."""
    agent = make_agent()
    async with open_runtime(
        TrackingModel([Turn.text("Hello.")]).layer(), agents=[agent]
    ) as runtime:
        with pytest.raises(TypeError):
            runtime.run(agent, 42)  # type: ignore[unused-coroutine]  # the call raises
        unawaited = runtime.run(agent, "Hi", conversation_id="c", create=True)
        unawaited.close()
        result = await runtime.run(agent, "Hi", conversation_id="c", create=True)
    assert result.status == "completed"
    assert result.conversation_id == "c"
    assert result.text == "Hello."


# ---- closing the runtime -----------------------------------------------------------------------

Database: ServiceKey[list[str]] = ServiceKey("test.Database")


@pytest.mark.parametrize("mode", ["stream", "run"])
async def test_closing_the_runtime_interrupts_runs_then_releases_every_layer(
    autojump_clock: trio.testing.MockClock, mode: str
) -> None:
    """Streamed runs are tasks of the runtime; ``run`` runs in its caller's task — here a task
    outside the runtime's block. Either way closing interrupts the run and waits for it to write
    its interruption before any layer is torn down."""
    journal: list[str] = []
    tool = forecast_tool()
    agent = make_agent(tool)
    model = TrackingModel([Turn.tool_calls(("forecast", {"city": "Oslo"}))])
    started = trio.Event()

    @asynccontextmanager
    async def open_model(ctx: Context) -> AsyncIterator[TrackingModel]:
        journal.append("model up")
        try:
            yield model
        finally:
            journal.append("model down")

    @asynccontextmanager
    async def open_database(ctx: Context) -> AsyncIterator[list[str]]:
        journal.append("db up")
        try:
            yield journal
        finally:
            journal.append("db down")

    async def handlers(ctx: Context) -> Any:
        db = ctx[Database]

        async def handle(params: Lookup, call: ToolCallContext) -> Forecast:
            started.set()
            try:
                await trio.sleep_forever()
            finally:
                db.append("handler stopped")
            raise AssertionError("unreachable")  # pragma: no cover

        return {tool: handle}

    database = Layer.scoped(Database, open_database)
    layer = Layer.scoped(LanguageModelService, open_model) + agent.toolkit.handlers_from(
        handlers, requires=[Database]
    ).provide(database)
    events: list[EventBase] = []
    results: list[RunResult] = []

    async def consume(stream: Any) -> None:
        async with stream:
            async for event in stream:
                events.append(event)

    async def run(runtime: Any) -> None:
        results.append(await runtime.run(agent, "Weather?", conversation_id="c-run", create=True))
        journal.append("run returned")

    async with trio.open_nursery() as nursery:
        async with open_runtime(layer, agents=[agent]) as runtime:
            assert journal == ["model up", "db up"]
            if mode == "stream":
                nursery.start_soon(consume, runtime.stream(agent, "Weather?"))
            else:
                nursery.start_soon(run, runtime)
            await started.wait()
            assert runtime.active_runs == 1
            log = runtime.log
        journal.append("closed")
    ended = ["handler stopped"] + (["run returned"] if mode == "run" else [])
    assert journal == ["model up", "db up", *ended, "db down", "model down", "closed"]
    if mode == "stream":
        terminal = assert_well_formed(events)
        assert isinstance(terminal, RunInterrupted)
        conversation_id = terminal.conversation_id
    else:
        (result,) = results
        assert result.status == "interrupted"
        conversation_id = "c-run"
    (record,) = records_of(list(await log.entries(conversation_id)), RunFailedRecord)
    assert record.reason == "interrupted"
    assert runtime.active_runs == 0
    assert model.all_streams_closed()


# ---- RUN-001 -----------------------------------------------------------------------------------


async def _aiter(events: list[EventBase]) -> AsyncIterator[EventBase]:
    for event in events:
        yield event


def _comparable(result: RunResult) -> dict[str, Any]:
    fields = attrs.asdict(result, recurse=False)
    del fields["run_id"], fields["conversation_id"]
    # Outcomes arrive in completion order, which the scheduler may vary between two runs.
    fields["outcomes"] = sorted(result.outcomes, key=lambda o: o.tool_call_id)
    return fields


async def test_run_reduces_the_very_stream_that_stream_yields(
    autojump_clock: trio.testing.MockClock,
) -> None:
    probe, tool = HandlerProbe(), forecast_tool()
    agent = make_agent(tool)
    script = [
        Turn.tool_calls(("forecast", {"city": "Oslo"}), ("forecast", {"city": "Atlantis"})),
        Turn.text("Oslo is 4.", reasoning="Oslo known, Atlantis not."),
    ]
    model = TrackingModel([*script, *script])
    layer = agent.toolkit.handlers({tool: probe.forecast()}) + model.layer()
    async with open_runtime(layer, agents=[agent]) as runtime:
        streamed = await run_events(runtime, agent, "Weather?")
        ran = await runtime.run(agent, "Weather?")
    reduced = await reduce_events(_aiter(streamed))
    assert reduced.status == ran.status == "completed"
    assert _comparable(reduced) == _comparable(ran)
    assert ran.events == len(streamed)
    assert sorted(o.kind for o in ran.outcomes) == ["failure", "success"]
    assert ran.text == "Oslo is 4."
    assert ran.raise_for_status() is ran


async def test_a_failed_run_result_raises_for_status(
    autojump_clock: trio.testing.MockClock,
) -> None:
    model = TrackingModel([Turn.fail(AuthenticationFailed("bad key"))])
    agent = make_agent()
    async with open_runtime(model.layer(), agents=[agent]) as runtime:
        result = await runtime.run(agent, "Hi")
    assert result.status == "failed"
    assert isinstance(result.error, ModelFailed)
    with pytest.raises(Exception, match="failed: ModelFailed"):
        result.raise_for_status()


# ---- conversations -----------------------------------------------------------------------------


async def test_continuing_a_conversation_projects_its_history(
    autojump_clock: trio.testing.MockClock,
) -> None:
    probe, tool = HandlerProbe(), forecast_tool()
    agent = make_agent(tool)
    model = TrackingModel(
        [
            Turn.text("Hi Ann."),
            Turn.tool_calls(("forecast", {"city": "Oslo"})),
            Turn.text("4 degrees, Ann."),
            Turn.text("A stranger."),
        ]
    )
    layer = agent.toolkit.handlers({tool: probe.forecast()}) + model.layer()
    async with open_runtime(layer, agents=[agent]) as runtime:
        first = await runtime.run(agent, "I am Ann.")
        second = await runtime.run(agent, "Weather?", conversation_id=first.conversation_id)
        other = await runtime.run(agent, "Who am I?")
        log = await entries(runtime, first.conversation_id)
    assert second.conversation_id == first.conversation_id
    assert other.conversation_id != first.conversation_id
    continued = model.requests[1].messages
    assert continued == (
        SystemMessage("Answer with today's high."),
        UserMessage.text("I am Ann."),
        AssistantMessage((TextContent("Hi Ann."),)),
        UserMessage.text("Weather?"),
    )
    after_tools = model.requests[2].messages
    assert after_tools[:4] == continued
    assert isinstance(after_tools[-1], ToolMessage)
    assert model.requests[3].messages == (
        SystemMessage("Answer with today's high."),
        UserMessage.text("Who am I?"),
    )
    assert len(records_of(log, ConversationCreated)) == 1
    assert len(records_of(log, RunCompletedRecord)) == 2
    assert [e.seq for e in log] == list(range(1, len(log) + 1))


# ---- output schema -----------------------------------------------------------------------------


@attrs.frozen
class Answer:
    city: str
    high_c: float


async def _run_with_output(text: str) -> tuple[list[EventBase], list[LogEntry]]:
    agent = make_agent(output=Answer, policy=make_policy(output_retries=0))
    model = TrackingModel([Turn.text(text)])
    async with open_runtime(model.layer(), agents=[agent]) as runtime:
        events = await run_events(runtime, agent, "Structured, please.")
        log = await entries(runtime, events[0].conversation_id)
    return events, log


async def test_output_type_decodes_the_final_answer(autojump_clock: trio.testing.MockClock) -> None:
    events, log = await _run_with_output('{"city": "Oslo", "high_c": 4.5}')
    terminal = assert_well_formed(events)
    assert isinstance(terminal, RunCompleted)
    assert terminal.output == Answer("Oslo", 4.5)
    (record,) = records_of(log, RunCompletedRecord)
    assert record.output == {"city": "Oslo", "high_c": 4.5}


@pytest.mark.parametrize(
    ("text", "expected"),
    [("It is warm.", "invalid JSON"), ('{"city": 3, "high_c": 1}', "$.city")],
)
async def test_an_answer_that_does_not_decode_fails_the_run(
    autojump_clock: trio.testing.MockClock, text: str, expected: str
) -> None:
    events, log = await _run_with_output(text)
    terminal = assert_well_formed(events)
    assert isinstance(terminal, RunFailed)
    assert isinstance(terminal.error, OutputInvalid)
    assert expected in terminal.error.message
    assert records_of(log, RunCompletedRecord) == []
    (record,) = records_of(log, RunFailedRecord)
    assert record.reason == "OutputInvalid"


# ---- event and record invariants ---------------------------------------------------------------

_SCENARIOS: dict[str, Callable[[], list[Turn]]] = {
    "completed": lambda: _weather_turns("Oslo"),
    "model error": lambda: [Turn.fail(AuthenticationFailed("no"), after=[TextStartPart("t")])],
    "malformed stream": lambda: [Turn.raw(TextDeltaPart("t", "x"), FinishPart("stop"))],
    "unscripted turn": lambda: [Turn.tool_calls(("forecast", {"city": "Oslo"}))],
}


@pytest.mark.parametrize("scenario", list(_SCENARIOS))
async def test_exactly_one_terminal_event_and_gap_free_sequence(
    autojump_clock: trio.testing.MockClock, scenario: str
) -> None:
    probe, tool = HandlerProbe(), forecast_tool()
    agent = make_agent(tool)
    model = TrackingModel(_SCENARIOS[scenario]())
    layer = agent.toolkit.handlers({tool: probe.forecast()}) + model.layer()
    async with open_runtime(layer, agents=[agent]) as runtime:
        async with runtime.stream(agent, "Weather?") as stream:
            events = await collect(stream)
        log = await entries(runtime, stream.conversation_id)
    terminal = assert_well_formed(events)
    assert terminal.run_id == stream.run_id
    assert terminal.conversation_id == stream.conversation_id
    assert all(e.agent == "weather" for e in events)
    expected = RunCompleted if scenario == "completed" else RunFailed
    assert isinstance(terminal, expected)
    # Exactly one terminal record, too.
    assert len(records_of(log, RunCompletedRecord)) + len(records_of(log, RunFailedRecord)) == 1
    assert model.all_streams_closed()


async def test_events_carry_turn_and_tool_call_identity(
    autojump_clock: trio.testing.MockClock,
) -> None:
    probe, tool = HandlerProbe(), forecast_tool()
    agent = make_agent(tool)
    model = TrackingModel(
        [
            Turn.tool_calls(
                ("forecast", {"city": "Oslo"}, "id-a"), ("forecast", {"city": "X"}, "id-b")
            ),
            Turn.text("Done."),
        ]
    )
    layer = agent.toolkit.handlers({tool: probe.forecast()}) + model.layer()
    async with (
        open_runtime(layer, agents=[agent]) as runtime,
        runtime.stream(agent, "Weather?") as stream,
    ):
        events = await collect(stream)
    assert {(e.run_id, e.conversation_id) for e in events} == {
        (stream.run_id, stream.conversation_id)
    }
    assert [e.turn for e in events_of(events, TurnStarted)] == [1, 2]
    declared = events_of(events, ToolCallDeclared)
    assert [(d.tool_call_id, d.arguments, d.turn) for d in declared] == [
        ("id-a", {"city": "Oslo"}, 1),
        ("id-b", {"city": "X"}, 1),
    ]
    assert sorted(e.tool_call_id for e in events_of(events, ToolCallStarted)) == ["id-a", "id-b"]
    assert [e.tool_call_id for e in events_of(events, ToolCallSucceeded)] == ["id-a"]
    assert [e.tool_call_id for e in events_of(events, ToolCallFailed)] == ["id-b"]
    assert sorted(c.tool_call_id for c in probe.contexts) == ["id-a", "id-b"]
    assert {(c.run_id, c.conversation_id, c.agent_name) for c in probe.contexts} == {
        (stream.run_id, stream.conversation_id, "weather")
    }


def _foreign_values(value: object, path: str = "$") -> list[str]:
    """Paths of everything in a record that is neither JSON nor one of our own values (the
    core's records and outcomes, the effect core's schema issues) — no provider SDK type."""
    if value is None or isinstance(value, str | int | float | bool):
        return []
    if isinstance(value, list | tuple):
        return [p for i, item in enumerate(value) for p in _foreign_values(item, f"{path}[{i}]")]
    if isinstance(value, dict):
        found = [f"{path} key {k!r}" for k in value if not isinstance(k, str)]
        return found + [p for k, v in value.items() for p in _foreign_values(v, f"{path}.{k}")]
    if attrs.has(type(value)) and type(value).__module__.startswith(
        ("effectagent.core.", "effectagent.effect.")
    ):
        return [
            p
            for field in attrs.fields(cast(Any, type(value)))
            for p in _foreign_values(getattr(value, field.name), f"{path}.{field.name}")
        ]
    return [f"{path}: {type(value).__module__}.{type(value).__qualname__}"]


async def test_records_are_gap_free_and_hold_only_our_values(
    autojump_clock: trio.testing.MockClock,
) -> None:
    probe, tool = HandlerProbe(), forecast_tool(failure_mode="return")
    agent = make_agent(tool, output=Answer)
    model = TrackingModel(
        [
            Turn.tool_calls(
                ("forecast", {"city": "Oslo"}),
                ("forecast", {"city": "Atlantis"}),
                ("forecast", '{"city": "Ro'),
                text="Checking.",
            ),
            Turn.text('{"city": "Oslo", "high_c": 4.0}', reasoning="Oslo is known."),
            Turn.tool_calls(("forecast", {"city": "Rome"}), truncate_last=True),
            Turn.text('{"city": "Rome", "high_c": 17.5}'),
        ]
    )
    layer = agent.toolkit.handlers({tool: probe.forecast()}) + model.layer()
    async with open_runtime(layer, agents=[agent]) as runtime:
        first = await runtime.run(agent, "Oslo?")
        await runtime.run(agent, "Rome?", conversation_id=first.conversation_id)
        log = await entries(runtime, first.conversation_id)
    assert [e.seq for e in log] == list(range(1, len(log) + 1))
    assert len(log) > 10
    for entry in log:
        assert _foreign_values(entry.record) == [], entry


@attrs.frozen(slots=True)
class _AdapterTextDelta(TextDeltaPart):
    """An adapter's own subclass of a part class (e.g. carrying provider detail)."""

    provider_index: int = 0


async def test_a_subclass_of_a_part_class_is_treated_as_that_part(
    autojump_clock: trio.testing.MockClock,
) -> None:
    from effectagent.ai import TextEndPart, Usage
    from effectagent.core import TextDelta as TextDeltaEvent

    model = TrackingModel(
        [
            Turn.raw(
                TextStartPart("t"),
                _AdapterTextDelta("t", "Hello, ", provider_index=0),
                _AdapterTextDelta("t", "world.", provider_index=1),
                TextEndPart("t"),
                FinishPart("stop", Usage.of(3, 2)),
            )
        ]
    )
    agent = make_agent()
    async with open_runtime(model.layer(), agents=[agent]) as runtime:
        events = await run_events(runtime, agent, "Hi")
    deltas = [e.text for e in events if isinstance(e, TextDeltaEvent)]
    assert deltas == ["Hello, ", "world."]
    assert cast(RunCompleted, assert_well_formed(events)).text == "Hello, world."


@pytest.mark.parametrize("secrets", [(), ("sk-canary-55c1",)], ids=["nothing-redacted", "redacted"])
async def test_every_request_is_the_projection_of_the_log_written_so_far(
    autojump_clock: trio.testing.MockClock, secrets: tuple[str, ...]
) -> None:
    """The prompt the engine keeps as it goes (reusing parsed arguments when redaction changes
    nothing) is exactly what the one pure projection gives from the log at each request."""
    from effectagent.core import ModelResponseRecorded, project_messages

    from .helpers import run_script

    probe, tool = HandlerProbe(), forecast_tool()
    agent = make_agent(tool)
    city = f"Oslo {secrets[0]}" if secrets else "Oslo"
    ran = await run_script(
        agent,
        {tool: probe.forecast()},
        [
            Turn.tool_calls(
                ("forecast", {"city": city}), ("forecast", {"town": 1}), text="Let me look."
            ),
            Turn.tool_calls(("forecast", {"city": "Rome"})),
            Turn.text("Mild in both.", reasoning="Both answered."),
        ],
        secrets=secrets,
    )
    responses = [i for i, e in enumerate(ran.log) if isinstance(e.record, ModelResponseRecorded)]
    assert len(responses) == len(ran.model.requests) == 3
    for request, before in zip(ran.model.requests, responses, strict=True):
        expected = (SystemMessage(str(agent.instructions)), *project_messages(ran.log[:before]))
        assert request.messages == expected


async def test_a_run_that_never_waits_still_lets_other_tasks_run_every_turn(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A scripted model and handlers that never wait need no I/O at all: the run still yields to
    the scheduler once in every turn (after a batch that left its nursery, that exit was the
    yield), so a task beside it gets a scheduler pass per turn while the run goes on."""
    tool = forecast_tool()
    agent = make_agent(tool)
    ticks = 0

    async def handle(params: Lookup, call: ToolCallContext) -> Forecast:
        return Forecast(params.city, 1.0)

    model = TrackingModel(
        [
            Turn.tool_calls(("forecast", {"city": "Oslo"})),
            Turn.tool_calls(("forecast", {"city": "Oslo"}), ("forecast", {"city": "Rome"}, "c2")),
            Turn.tool_calls(("forecast", {"city": "Oslo"})),
            Turn.tool_calls(("forecast", {"city": "Oslo"})),
            Turn.text("done"),
        ]
    )
    layer = agent.toolkit.handlers({tool: handle}) + model.layer()

    async def neighbour() -> None:
        nonlocal ticks
        while True:
            await trio.lowlevel.checkpoint()
            ticks += 1

    async with open_runtime(layer, agents=[agent]) as runtime, trio.open_nursery() as nursery:
        nursery.start_soon(neighbour)
        await trio.lowlevel.checkpoint()  # let the neighbour start
        start = ticks
        result = await runtime.run(agent, "go")
        nursery.cancel_scope.cancel()
    assert result.status == "completed"
    # Five turns, five yields; each gives the neighbour a pass — but the run may take the pass
    # after its last yield first, end, and cancel the neighbour before it counts that one.
    assert ticks - start >= 4
