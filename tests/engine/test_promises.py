"""Promises a user reads in the guides and docstrings, each checked where it was once broken:
continuing and creating conversations are different intents; ``stream_text`` never leaves a
discarded attempt's text as the answer; ``max_duration`` bounds the whole run, grace turn
included; the grace turn's prompt is compacted like any other; an answer that misses the output
type is described as output; run errors read as sentences."""

from __future__ import annotations

from typing import Any

import attrs
import pytest
import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st

from effectagent.ai import (
    ModelNetworkError,
    ModelUnavailable,
    ProviderError,
    RateLimited,
    TextDeltaPart,
    TextStartPart,
    Toolkit,
    tool,
)
from effectagent.core import (
    Agent,
    AgentPolicy,
    BudgetExhausted,
    EngineDefect,
    FinalTurnDeclaredTools,
    ModelFailed,
    OutputInvalid,
    RepeatedToolFailure,
    RunCompleted,
    RunFailed,
    ToolFailedRun,
    UserInputRecorded,
)
from effectagent.engine import ConversationExists, UnknownConversation, open_runtime
from effectagent.testing import ScriptedModel, Turn

from .helpers import (
    HandlerProbe,
    TrackingModel,
    assert_well_formed,
    forecast_tool,
    make_agent,
    make_policy,
    run_events,
)

# ---- continuing and creating ---------------------------------------------------------------------


async def test_continuing_an_unknown_conversation_is_a_typed_error_and_writes_nothing(
    autojump_clock: trio.testing.MockClock,
) -> None:
    agent = make_agent()
    model = ScriptedModel([Turn.text("never")])
    async with open_runtime(model.as_layer(), agents=[agent]) as runtime:
        with pytest.raises(UnknownConversation, match="create=True") as raised:
            await runtime.run(agent, "hi", conversation_id="nonexistent")
        assert raised.value.conversation_id == "nonexistent"
        with pytest.raises(UnknownConversation):
            async with runtime.stream(agent, "hi", conversation_id="nonexistent"):
                pytest.fail("the block must not be entered")
        assert await runtime.log.entries("nonexistent") == ()
        assert runtime.active_runs == 0
    assert model.consumed == 0


async def test_create_starts_a_conversation_under_the_callers_id_once(
    autojump_clock: trio.testing.MockClock,
) -> None:
    agent = make_agent()
    model = ScriptedModel([Turn.text("one"), Turn.text("two"), Turn.text("three")])
    async with open_runtime(model.as_layer(), agents=[agent]) as runtime:
        first = await runtime.run(agent, "hi", conversation_id="chosen", create=True)
        assert (first.status, first.conversation_id) == ("completed", "chosen")
        with pytest.raises(ConversationExists):
            await runtime.run(agent, "again", conversation_id="chosen", create=True)
        async with runtime.stream(agent, "go on", conversation_id="chosen") as events:
            texts = [text async for text in events.stream_text()]
        assert texts[-1] == "two"
        user_inputs = [
            entry.record.text
            for entry in await runtime.log.entries("chosen")
            if isinstance(entry.record, UserInputRecorded)
        ]
        assert user_inputs == ["hi", "go on"]
    with pytest.raises(ValueError, match="create=True needs"):
        await runtime.run(agent, "x", create=True)


async def test_a_refused_open_leaves_the_conversation_free(
    autojump_clock: trio.testing.MockClock,
) -> None:
    agent = make_agent()
    model = ScriptedModel([Turn.text("made"), Turn.text("continued")])
    async with open_runtime(model.as_layer(), agents=[agent]) as runtime:
        with pytest.raises(UnknownConversation):
            await runtime.run(agent, "hi", conversation_id="c")
        made = await runtime.run(agent, "hi", conversation_id="c", create=True)
        again = await runtime.run(agent, "more", conversation_id="c")
    assert (made.text, again.text) == ("made", "continued")


# ---- stream_text ----------------------------------------------------------------------------------


async def test_stream_text_never_ends_on_a_discarded_attempt(
    autojump_clock: trio.testing.MockClock,
) -> None:
    broken = Turn.fail(
        ModelUnavailable("overloaded"),
        after=[TextStartPart("t"), TextDeltaPart("t", "Partial answer ")],
    )
    agent = make_agent()
    model = ScriptedModel([broken, Turn.text("Hello Oslo.", chunk=3)])
    async with (
        open_runtime(model.as_layer(), agents=[agent]) as runtime,
        runtime.stream(agent, "hi") as events,
    ):
        texts = [text async for text in events.stream_text()]
    assert texts[0] == "Partial answer "
    restart = texts.index("")
    assert all("Partial" not in text for text in texts[restart:])
    assert texts[-1] == "Hello Oslo."
    assert texts[restart + 1 :] == ["Hel", "Hello ", "Hello Osl", "Hello Oslo."]


@settings(max_examples=30, deadline=None)
@given(
    script=st.lists(
        st.sampled_from(["tools", "discarded", "kept-failure"]), min_size=0, max_size=4
    ),
    answer=st.text(min_size=1, max_size=30),
)
def test_the_last_text_stream_text_gives_is_the_answer(script: list[str], answer: str) -> None:
    """For every mix of tool turns, retried attempts that had streamed text and retried attempts
    that had not, the last item of ``stream_text`` is ``RunCompleted.text``."""
    tool = forecast_tool()
    turns: list[Turn] = []
    for kind in script:
        if kind == "tools":
            turns.append(Turn.tool_calls(("forecast", {"city": "Oslo"}), text="Let me look. "))
        elif kind == "discarded":
            turns.append(
                Turn.fail(
                    ModelNetworkError("reset"),
                    after=[TextStartPart("t"), TextDeltaPart("t", "abandoned")],
                )
            )
        else:
            turns.append(Turn.fail(RateLimited("slow", retry_after=1.0)))
    turns.append(Turn.text(answer, chunk=2))
    agent = make_agent(tool, policy=make_policy(model_retry=_many_retries()))
    probe = HandlerProbe()

    async def main() -> tuple[list[str], Any]:
        layer = agent.toolkit.handlers({tool: probe.forecast()}) + ScriptedModel.layer(turns)
        async with (
            open_runtime(layer, agents=[agent]) as runtime,
            runtime.stream(agent, "hi") as events,
        ):
            return [item async for item in events.stream_text()], None

    texts, _ = trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    assert texts, "an answer streamed text"
    assert texts[-1] == answer
    assert "abandoned" not in texts[-1]


def _many_retries() -> Any:
    from effectagent.core import RetryPolicy

    return RetryPolicy(attempts=10, initial_delay=0.1, max_delay=0.5)


# ---- max_duration is the whole run ------------------------------------------------------------


async def test_a_dead_model_ends_the_run_within_max_duration_grace_turn_included(
    autojump_clock: trio.testing.MockClock,
) -> None:
    agent = make_agent(policy=make_policy(max_duration=1, grace_turn_duration=30))
    model = TrackingModel([Turn.hanging(), Turn.hanging()])
    start = trio.current_time()
    async with open_runtime(model.layer(), agents=[agent]) as runtime:
        events = await run_events(runtime, agent, "hi")
    elapsed = trio.current_time() - start
    terminal = assert_well_formed(events)
    assert isinstance(terminal, RunFailed)
    assert isinstance(terminal.error, BudgetExhausted)
    assert terminal.error.dimension == "duration"
    assert elapsed <= 1.0
    assert elapsed == pytest.approx(1.0)
    # What the error says was used is what the run took, the grace turn included.
    assert terminal.error.used == pytest.approx(1.0)
    assert terminal.error.limit == 1
    assert len(model.requests) == 2  # the turn, then the grace turn in the reserve


async def test_a_grace_turn_started_by_a_count_never_runs_past_max_duration(
    autojump_clock: trio.testing.MockClock,
) -> None:
    tool = forecast_tool()
    probe = HandlerProbe()
    agent = make_agent(
        tool, policy=make_policy(max_turns=1, max_duration=10, grace_turn_duration=30)
    )
    model = TrackingModel([Turn.tool_calls(("forecast", {"city": "Oslo"})), Turn.hanging()])
    start = trio.current_time()
    layer = agent.toolkit.handlers({tool: probe.forecast()}) + model.layer()
    async with open_runtime(layer, agents=[agent]) as runtime:
        events = await run_events(runtime, agent, "hi")
    terminal = assert_well_formed(events)
    assert isinstance(terminal, RunFailed)
    assert isinstance(terminal.error, BudgetExhausted)
    assert terminal.error.dimension == "turns"
    assert trio.current_time() - start == pytest.approx(10)


def test_the_grace_reserve_is_a_tenth_of_the_duration_at_most() -> None:
    assert make_policy(max_duration=600).grace_reserve == 30
    assert make_policy(max_duration=100).grace_reserve == 10
    assert make_policy(max_duration=600, grace_turn_duration=5).grace_reserve == 5
    assert make_policy(max_duration=600, on_exhaustion="fail").grace_reserve == 0


# ---- the grace turn is compacted like any other --------------------------------------------------


async def test_the_grace_turns_prompt_is_compacted_when_over_the_limit(
    autojump_clock: trio.testing.MockClock,
) -> None:
    from effectagent.engine import CompactionRequest, CompactorService

    seen: list[int] = []

    class Shrinking:
        """Records which turn asked; compacts nothing."""

        async def compact(self, request: CompactionRequest) -> Any:
            seen.append(request.turn)
            return ()

    tool = forecast_tool()
    probe = HandlerProbe()
    agent = make_agent(tool, policy=make_policy(max_turns=1, context_token_limit=50))
    model = TrackingModel(
        [Turn.tool_calls(("forecast", {"city": "Oslo" * 100})), Turn.text("final")]
    )
    from effectagent.effect import Layer

    layer = (
        agent.toolkit.handlers({tool: probe.forecast()})
        + model.layer()
        + Layer.succeed(CompactorService, Shrinking())
    )
    async with open_runtime(layer, agents=[agent]) as runtime:
        events = await run_events(runtime, agent, "hi")
    terminal = assert_well_formed(events)
    assert isinstance(terminal, RunCompleted)
    assert terminal.finish_reason == "budget-exhausted"
    assert seen == [2], "the compactor was asked before the grace turn's request"


# ---- messages --------------------------------------------------------------------------------------


@attrs.frozen
class Verdict:
    high: float


async def test_an_answer_that_misses_the_output_type_is_described_as_output(
    autojump_clock: trio.testing.MockClock,
) -> None:
    agent = Agent(
        "judge",
        "Answer in JSON.",
        make_policy(output_retries=1),
        output=Verdict,
    )
    model = TrackingModel([Turn.text('{"high": "hot"}'), Turn.text('{"high": "hotter"}')])
    async with open_runtime(model.layer(), agents=[agent]) as runtime:
        result = await runtime.run(agent, "verdict?")
    assert isinstance(result.error, OutputInvalid)
    message = str(result.error)
    assert message.startswith("the final answer does not match the output type Verdict")
    assert "$.high" in message
    assert "input" not in message
    feedback = model.requests[1].messages[-1]
    assert "input" not in repr(feedback)


def test_run_errors_read_as_sentences_with_rounded_figures() -> None:
    exhausted = BudgetExhausted("duration", 5.005364324999391, 5.0)
    assert str(exhausted) == "the duration budget ran out: 5.0 s used of 5.0 s"
    assert str(BudgetExhausted("duration", 0.0012, 0.001)) == (
        "the duration budget ran out: 0.0012 s used of 0.001 s"  # not "0.0 s used of 0.0 s"
    )
    assert str(BudgetExhausted("tool_calls", 17, 16)) == (
        "the tool calls budget ran out: 17 used of 16"
    )
    limited = RateLimited("the provider is rate limiting", retry_after=30.0)
    failed = ModelFailed(limited.tag, str(limited))
    assert str(failed) == (
        "the model call failed (RateLimited): the provider is rate limiting (retry after 30 s)"
    )
    assert str(ModelUnavailable("overloaded")) == "overloaded"
    assert str(ProviderError("bad gateway", status=502)) == "bad gateway (HTTP 502)"
    assert str(RepeatedToolFailure("forecast", 3)) == "the tool forecast failed 3 times in a row"
    assert "forecast" in str(FinalTurnDeclaredTools(("forecast",)))
    assert str(EngineDefect("KeyError: 'x'")) == (
        "the run failed on an undeclared error (a defect): KeyError: 'x'"
    )
    declared = ToolFailedRun("c1", "forecast", {"_tag": "UnknownCity", "message": "no Atlantis"})
    assert str(declared) == (
        "the tool forecast failed and ended the run (UnknownCity: no Atlantis)"
    )
    for error in (exhausted, failed, declared):
        assert "=" not in str(error), "no repr"


async def test_a_failed_model_call_carries_a_sentence_not_a_repr(
    autojump_clock: trio.testing.MockClock,
) -> None:
    agent = make_agent(policy=make_policy(model_retry=_no_retry()))
    model = TrackingModel([Turn.fail(RateLimited("too many requests", retry_after=30.0))])
    async with open_runtime(model.layer(), agents=[agent]) as runtime:
        result = await runtime.run(agent, "hi")
    assert isinstance(result.error, ModelFailed)
    assert result.error.message == "too many requests (retry after 30 s)"
    assert "RateLimited(" not in result.error.message


def _no_retry() -> Any:
    from effectagent.core import RetryPolicy

    return RetryPolicy(attempts=1)


async def test_a_batch_refused_whole_for_the_call_budget_fails_saying_none_of_it_ran(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Under ``on_exhaustion="fail"`` a batch of 3 calls past ``max_tool_calls=2`` ran none of
    them, yet the error read "3 used of 2"."""
    ran: list[int] = []

    @tool
    async def ping(n: int) -> int:
        """Ping.

        Args:
            n: Any number.
        """
        ran.append(n)
        return n

    policy = AgentPolicy(max_tool_calls=2, on_exhaustion="fail")
    agent = Agent("pinger", "Ping.", policy, Toolkit(ping))
    model = ScriptedModel([Turn.tool_calls(*[("ping", {"n": i}) for i in range(3)])])
    async with open_runtime(agent.toolkit.handlers() + model.as_layer(), agents=[agent]) as rt:
        result = await rt.run(agent, "go")
    assert ran == []
    assert isinstance(result.error, BudgetExhausted)
    assert result.error.refused_batch == 3
    assert str(result.error) == (
        "the tool calls budget ran out: a batch of 3 calls was refused whole, none of it ran "
        "(it would have made 3 of 2)"
    )
