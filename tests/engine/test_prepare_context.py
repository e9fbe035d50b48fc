"""A context hook per turn (``Agent(prepare_context=fn)``, #29 item 3) and the run-status note
(``AgentPolicy(status_note=True)``).

Invariants: the hook runs once per turn, at its safe point, before the request is built; what it
adds is recorded (``ContextAdded``) and stays in the prompt from then on, within its bounds
(:data:`MAX_PREPARED_ITEMS` items, :data:`MAX_PREPARED_BYTES` bytes, refused beyond: never cut
silently); a prompt it gives is sent by that turn's request only and never recorded; a failing
hook ends the run typed, without the secret. The status note ends every request when asked,
derived from the budget and never recorded. An agent with neither pays nothing: its turns go
straight to the request (no ``PrepareTurn``)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio
import trio.testing
from hypothesis import given
from hypothesis import strategies as st

from effectagent import Agent, AgentPolicy, Toolkit
from effectagent.ai import AssistantMessage, ModelRequest, SystemMessage, TextContent, UserMessage
from effectagent.core import (
    MAX_PREPARED_BYTES,
    MAX_PREPARED_ITEMS,
    REDACTED,
    ContextAdded,
    ContextItem,
    PrepareContextFailed,
    PreparedContext,
    RunFailedRecord,
    SecretRedactor,
    TurnContext,
)
from effectagent.engine import open_runtime
from effectagent.engine._authoring import check_prepared, status_note
from effectagent.engine._machine import (
    PrepareTurn,
    RequestModel,
    RunConfig,
    StartTurn,
    TurnDue,
    TurnPrepared,
    start,
    step,
)
from effectagent.testing import ReplayModel, ScriptedModel, Turn, record

from .helpers import Forecast, Lookup, forecast_tool, make_policy

CANARY = "sk-canary-1b2c3"


def user_texts(request: ModelRequest) -> list[str]:
    return [
        part.text
        for message in request.messages
        if isinstance(message, UserMessage)
        for part in message.content
        if isinstance(part, TextContent)
    ]


async def forecast(params: Lookup, call: Any) -> Forecast:
    return Forecast(params.city, 4.0)


async def run_agent(
    agent: Agent, turns: list[Turn], **options: Any
) -> tuple[Any, ScriptedModel, list[Any]]:
    model = ScriptedModel(turns)
    layer = model.as_layer()
    tool = agent.toolkit.get("forecast")
    if tool is not None:
        layer = agent.toolkit.handlers({tool: forecast}) + layer
    async with open_runtime(layer, agents=[agent], **options) as runtime:
        result = await runtime.run(agent, "How warm is Oslo?")
        log = list(await runtime.log.entries(result.conversation_id))
    return result, model, log


def two_turns() -> list[Turn]:
    return [Turn.tool_calls(("forecast", {"city": "Oslo"})), Turn.text("4 degrees.")]


def note(turn: int) -> ContextItem:
    return ContextItem(kind="memory", source=f"note-{turn}", text=f"Remembered at turn {turn}.")


async def test_items_the_hook_adds_are_recorded_and_stay_in_the_prompt() -> None:
    seen: list[TurnContext[Any]] = []

    async def prepare(context: TurnContext[Any]) -> PreparedContext:
        seen.append(context)
        return PreparedContext(items=[note(context.turn)])

    agent = Agent(
        "weather", "Answer.", make_policy(), Toolkit(forecast_tool()), prepare_context=prepare
    )
    result, model, log = await run_agent(agent, two_turns())
    assert result.status == "completed"
    assert [(c.turn, c.grace, c.input) for c in seen] == [
        (1, False, "How warm is Oslo?"),
        (2, False, "How warm is Oslo?"),
    ]
    # what the hook saw: the projected prompt, system first
    assert isinstance(seen[0].messages[0], SystemMessage)
    first, second = (user_texts(r) for r in model.requests)
    assert first[-1] == note(1).as_message_text()
    assert note(1).as_message_text() in second
    assert second[-1] == note(2).as_message_text()
    assert second.count(note(1).as_message_text()) == 1
    added = [e.record.item for e in log if isinstance(e.record, ContextAdded)]
    assert added == [note(1), note(2)]


async def test_a_turn_prepared_by_a_process_that_died_while_the_model_was_asked_is_prepared_once(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A turn's preparation is recorded with its response: the process dying while the model
    is asked (the likeliest moment, the longest wait) leaves neither, so the resumed run
    prepares that turn again and its items are in the log and the prompt once."""
    from effectagent.testing import FunctionModel

    from .crash import DyingLog, log_layer

    async def prepare(context: TurnContext[Any]) -> PreparedContext:
        return PreparedContext(items=[note(context.turn)])

    agent = Agent(
        "weather", "Answer.", make_policy(), Toolkit(forecast_tool()), prepare_context=prepare
    )
    tool = agent.toolkit.get("forecast")
    assert tool is not None
    dying = DyingLog()
    requests: list[ModelRequest] = []

    def respond(request: ModelRequest) -> Turn:
        requests.append(request)
        if len(requests) == 1:
            return Turn.tool_calls(("forecast", {"city": "Oslo"}))
        if len(requests) == 2:  # turn 2 is being asked: the process dies here
            dying.die()
            return Turn.hanging()
        return Turn.text("4 degrees.")

    model = FunctionModel(respond)
    handlers = agent.toolkit.handlers({tool: forecast})
    async with open_runtime(handlers + model.as_layer() + dying.layer(), agents=[agent]) as rt:
        with trio.move_on_after(60):
            await rt.run(agent, "How warm is Oslo?", conversation_id="c", create=True, run_id="r")
    written = [e.record for e in await dying.log.entries("c")]
    assert [r.item for r in written if isinstance(r, ContextAdded)] == [note(1)]
    async with open_runtime(
        handlers + model.as_layer() + log_layer(dying.log), agents=[agent]
    ) as rt:
        resumed = await rt.resume(agent, conversation_id="c", run_id="r")
    assert resumed.status == "completed"
    log = [e.record for e in await dying.log.entries("c")]
    assert [r.item for r in log if isinstance(r, ContextAdded)] == [note(1), note(2)]
    last = user_texts(requests[-1])
    assert last.count(note(2).as_message_text()) == 1
    assert last.count(note(1).as_message_text()) == 1


async def test_a_prompt_the_hook_gives_is_sent_for_its_turn_only_and_never_recorded() -> None:
    async def prepare(context: TurnContext[Any]) -> PreparedContext | None:
        if context.turn == 1:  # the first turn sees a trimmed prompt: system and a note only
            return PreparedContext(
                prompt=(context.messages[0], UserMessage.text("Only this, please.")),
                items=[note(1)],
            )
        return None

    agent = Agent(
        "weather", "Answer.", make_policy(), Toolkit(forecast_tool()), prepare_context=prepare
    )
    result, model, log = await run_agent(agent, two_turns())
    assert result.status == "completed"
    first, second = (user_texts(r) for r in model.requests)
    assert first == ["Only this, please.", note(1).as_message_text()]
    assert second[:2] == ["How warm is Oslo?", note(1).as_message_text()]
    assert "Only this, please." not in repr(log)
    assert any(isinstance(m, AssistantMessage) for m in model.requests[1].messages)


async def test_a_secret_in_a_context_item_or_a_hooks_prompt_is_redacted() -> None:
    async def prepare(context: TurnContext[Any]) -> PreparedContext:
        prompt = (SystemMessage(f"Key {CANARY}."), UserMessage.text(f"Use {CANARY}."))
        items = [ContextItem(kind="doc", source="vault", text=CANARY)]
        return PreparedContext(items=items, prompt=prompt)

    agent = Agent("weather", "Answer.", prepare_context=prepare)
    result, model, log = await run_agent(agent, [Turn.text("ok")], secrets=[CANARY])
    assert result.status == "completed"
    assert user_texts(model.requests[0]) == [
        f"Use {REDACTED}.",
        f"[Context: doc vault]\n{REDACTED}",
    ]
    assert CANARY not in repr(model.requests[0])
    assert CANARY not in repr(log)


@pytest.mark.parametrize(
    ("returns", "message"),
    [
        (RuntimeError(f"index down: {CANARY}"), r"raised RuntimeError: index down: \[REDACTED\]"),
        ("some text", r"returned str, not a PreparedContext or None"),
        (
            PreparedContext(items=[note(i) for i in range(MAX_PREPARED_ITEMS + 1)]),
            r"returned 17 context items, more than the 16 a turn may add",
        ),
        (
            PreparedContext(
                items=[ContextItem(kind="doc", source="big", text="x" * MAX_PREPARED_BYTES)]
            ),
            r"hold 65,5\d\d bytes of text, more than the 65,536 a turn may add",
        ),
    ],
    ids=["raises", "wrong type", "too many items", "too many bytes"],
)
async def test_a_hook_that_fails_or_exceeds_its_bounds_fails_the_run_typed(
    returns: object, message: str
) -> None:
    async def prepare(context: TurnContext[Any]) -> Any:
        if isinstance(returns, Exception):
            raise returns
        return returns

    agent = Agent("weather", "Answer.", prepare_context=prepare)
    result, model, log = await run_agent(agent, [], secrets=[CANARY])
    assert result.status == "failed"
    assert isinstance(result.error, PrepareContextFailed)
    assert re.search(message, str(result.error)), str(result.error)
    assert model.requests == []
    assert not [e for e in log if isinstance(e.record, ContextAdded)]
    assert CANARY not in repr(log)


async def test_the_grace_turn_is_prepared_too() -> None:
    grace: list[bool] = []

    async def prepare(context: TurnContext[Any]) -> None:
        grace.append(context.grace)

    agent = Agent(
        "weather",
        "Answer.",
        make_policy(max_turns=1),
        Toolkit(forecast_tool()),
        prepare_context=prepare,
    )
    result, _, _ = await run_agent(agent, two_turns())
    assert result.status == "completed"
    assert grace == [False, True]


# ---- the status note --------------------------------------------------------------------------------


async def test_the_status_note_ends_every_request_and_is_never_recorded() -> None:
    agent = Agent(
        "weather",
        "Answer.",
        make_policy(status_note=True, token_budget=10_000),
        Toolkit(forecast_tool()),
    )
    result, model, log = await run_agent(agent, two_turns())
    assert result.status == "completed"
    first, second = (user_texts(r)[-1] for r in model.requests)
    assert first.startswith("[Run status: turn 1 of at most 8; ")
    assert "0 of 16 tool calls used" in first
    assert "of 10,000 tokens used" in first
    assert second.startswith("[Run status: turn 2 of at most 8; ")
    assert "1 of 16 tool calls used" in second
    assert "[Run status" not in repr(log)


async def test_without_the_policy_asking_no_request_carries_a_note() -> None:
    agent = Agent("weather", "Answer.", make_policy(), Toolkit(forecast_tool()))
    _, model, _ = await run_agent(agent, two_turns())
    assert all("[Run status" not in text for r in model.requests for text in user_texts(r))


def test_the_note_says_what_is_used_of_each_limit_rounded() -> None:
    policy = AgentPolicy(
        max_turns=20, max_tool_calls=64, max_duration=600, token_budget=5000, cost_budget="1.5"
    )
    text = status_note(
        policy, turn=3, turns=3, tool_calls=5, tokens=1234, cost_micros=4200, elapsed=42.4
    )
    assert text == (
        "[Run status: turn 3 of at most 20; 5 of 64 tool calls used; 1,234 of 5,000 tokens "
        "used; $0.0042 of $1.50 spent; 558 s of 600 s left.]"
    )
    children = status_note(
        policy, turn=3, turns=7, tool_calls=5, tokens=1, cost_micros=0, elapsed=0
    )
    assert children.startswith("[Run status: turn 3 of at most 20 (7 used with subagents' turns);")
    grace = status_note(
        policy, turn=21, turns=21, tool_calls=5, tokens=1, cost_micros=0, elapsed=700, grace=True
    )
    assert "the last: the budget ran out, tools are off" in grace
    assert "0 s of 600 s left" in grace


# ---- the machine: no hook, no preparation ----------------------------------------------------------


def machine_config(prepares: bool) -> RunConfig:
    return RunConfig(
        policy=AgentPolicy(max_turns=4),
        output=None,
        compactor=False,
        follow_ups=False,
        redactor=SecretRedactor(()),
        count_tokens=len,
        prepares=prepares,
    )


SYSTEM = SystemMessage("Answer.")
USER = UserMessage.text("Hi.")


def test_a_turn_without_a_hook_goes_straight_to_its_request() -> None:
    state = start(machine_config(False), (SYSTEM, USER), 0.0)
    _, commands = step(state, TurnDue(0.0))
    assert commands == (StartTurn(1, False), RequestModel(False))


def test_a_prepared_turn_replaces_the_instructions_and_adds_the_context_then_asks() -> None:
    state = start(machine_config(True), (SYSTEM, USER), 0.0)
    state, commands = step(state, TurnDue(0.0))
    assert commands == (StartTurn(1, False), PrepareTurn(1, False))
    added = UserMessage.text("[Context: memory m]\nx")
    system = SystemMessage("Computed.")
    state, commands = step(state, TurnPrepared(system, (added,)))
    assert commands == (RequestModel(False),)
    assert state.messages == (system, USER, added)
    failed, commands = step(start(machine_config(True), (SYSTEM, USER), 0.0), TurnDue(0.0))
    ended, commands = step(failed, TurnPrepared(failure=PrepareContextFailed("it raised")))
    assert ended.phase == "ended"
    assert type(commands[0]).__name__ == "Fail"


# ---- the bound, for every hook's answer --------------------------------------------------------------

ITEMS = st.lists(
    st.builds(
        ContextItem,
        kind=st.just("doc"),
        source=st.text("abc", min_size=1, max_size=3),
        text=st.text(min_size=1, max_size=9000).filter(str.strip),
    ),
    max_size=MAX_PREPARED_ITEMS + 3,
)


@given(items=ITEMS)
def test_what_a_hook_adds_is_accepted_exactly_within_its_bounds(items: list[ContextItem]) -> None:
    checked = check_prepared(PreparedContext(items=items))
    size = sum(len(item.as_message_text().encode("utf-8", "surrogatepass")) for item in items)
    within = len(items) <= MAX_PREPARED_ITEMS and size <= MAX_PREPARED_BYTES
    assert isinstance(checked, PreparedContext) == within
    if isinstance(checked, PreparedContext):
        assert len(checked.items) <= MAX_PREPARED_ITEMS
        assert checked.items == tuple(items)  # accepted whole, never cut
    else:
        assert "more than the" in checked


def test_a_prepared_context_checks_its_fields() -> None:
    with pytest.raises(TypeError, match="must hold ContextItem values"):
        PreparedContext(items=["text"])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="must not be empty"):
        PreparedContext(prompt=())
    assert attrs.evolve(PreparedContext()).items == ()


async def test_cancelling_a_run_while_its_hook_awaits_interrupts_it(
    autojump_clock: trio.testing.MockClock,
) -> None:
    entered = trio.Event()

    async def prepare(context: TurnContext[Any]) -> None:
        entered.set()
        await trio.sleep_forever()

    agent = Agent("weather", "Answer.", prepare_context=prepare)
    model = ScriptedModel([])
    async with open_runtime(model.as_layer(), agents=[agent]) as runtime:
        with trio.move_on_after(5):
            await runtime.run(agent, "How warm?", conversation_id="c", create=True)
        log = list(await runtime.log.entries("c"))
    assert entered.is_set()
    assert model.requests == []
    last = log[-1].record
    assert isinstance(last, RunFailedRecord)
    assert (last.reason, last.error) == ("interrupted", None)


async def test_a_recorded_run_with_the_note_replays_when_its_time_is_ignored(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    """The note's time left differs from run to run (here: the replay starts 100 s later on the
    mock clock, and a turn takes time), so a cassette replay compares it only with the time
    ignored — the pattern the engine guide gives."""
    agent = Agent("weather", "Answer.", make_policy(status_note=True), Toolkit(forecast_tool()))
    path = tmp_path / "run.jsonl"
    slow = [
        Turn.tool_calls(("forecast", {"city": "Oslo"}), delay=7.0),
        Turn.text("4 degrees.", delay=3.0),
    ]
    layer = record(ScriptedModel(slow).as_layer(), path)
    handlers = agent.toolkit.handlers({"forecast": forecast})
    async with open_runtime(handlers + layer, agents=[agent]) as runtime:
        assert (await runtime.run(agent, "How warm?")).status == "completed"
    await trio.sleep(100)
    # compared as is, the second request's note differs (the replay raises as it closes)
    with pytest.raises(BaseExceptionGroup) as closing:
        async with open_runtime(handlers + ReplayModel.layer(path), agents=[agent]) as runtime:
            failed = await runtime.run(agent, "How warm?")
    assert failed.status == "failed"
    assert "s left" in str(closing.value.exceptions[0])
    replay = ReplayModel.layer(path, ignore=[TIME_LEFT])
    async with open_runtime(handlers + replay, agents=[agent]) as runtime:
        assert (await runtime.run(agent, "How warm?")).status == "completed"


TIME_LEFT = re.compile(r"[\d,]+ s of [\d,]+ s left")
