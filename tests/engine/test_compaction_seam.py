"""The engine's compaction seam (RUN-026, CAP-007): above ``context_token_limit`` the engine asks the
Compactor at the pre-turn seam, appends what it returns, and projects the next request from the log —
the canonical records before it are untouched."""

from __future__ import annotations

from collections.abc import Sequence

import trio

from effectagent.ai import LanguageModelService
from effectagent.core import (
    CompactionCreated,
    CompactionPerformed,
    ModelResponseRecorded,
    UserInputRecorded,
)
from effectagent.effect import Layer
from effectagent.engine import CompactionRequest, CompactorService, open_runtime
from effectagent.testing import ScriptedModel, Turn

from .helpers import (
    events_of,
    make_agent,
    make_policy,
    records_of,
    run_events,
    summarize_everything,
)


class SummarizeEverything:
    """A compactor that summarizes the whole log so far with the engine's metered model call."""

    def __init__(self) -> None:
        self.requests: list[CompactionRequest] = []

    async def compact(self, request: CompactionRequest) -> Sequence[CompactionCreated]:
        self.requests.append(request)
        return await summarize_everything(request)


async def test_over_the_limit_the_compactor_runs_and_the_next_request_sees_the_summary(
    autojump_clock: trio.testing.MockClock,
) -> None:
    compactor = SummarizeEverything()
    model = ScriptedModel(
        [Turn.text("first answer " * 40), Turn.text("THE SUMMARY"), Turn.text("second answer")]
    )
    agent = make_agent(policy=make_policy(context_token_limit=50))
    layer = Layer.succeed(CompactorService, compactor) + Layer.succeed(LanguageModelService, model)
    async with open_runtime(layer, agents=[agent]) as runtime:
        first = await runtime.run(agent, "hello " * 20)
        assert compactor.requests == []  # the first request fits
        events = await run_events(runtime, agent, "and now?", conversation_id=first.conversation_id)
        log = list(await runtime.log.entries(first.conversation_id))

    assert len(compactor.requests) == 1
    performed = events_of(events, CompactionPerformed)
    assert len(performed) == 1
    assert performed[0].kind == "summarize"
    assert performed[0].tokens_after < performed[0].tokens_before
    # The summary call was metered and went to the model; the answer request saw only the summary
    # and what came after it.
    last_request = model.requests[-1]
    rendered = repr(last_request.messages)
    assert "THE SUMMARY" in rendered
    assert "first answer" not in rendered
    # Nothing was rewritten: the covered records are all still in the log, unchanged.
    assert [r.text for r in records_of(log, UserInputRecorded)][:2] == ["hello " * 20, "and now?"]
    assert "first answer" in records_of(log, ModelResponseRecorded)[0].content[0][1]
    assert len(records_of(log, CompactionCreated)) == 1
    model.assert_consumed()


async def test_a_context_the_model_refuses_as_too_long_is_compacted_and_asked_again(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """ContextLengthExceeded is typed so compaction can react: the engine compacts once, whatever
    its own estimate said, and asks again with the shorter prompt."""
    from effectagent.ai import ContextLengthExceeded
    from effectagent.core import ModelRetrying, RunCompleted

    compactor = SummarizeEverything()
    model = ScriptedModel(
        [
            Turn.text("a long first answer"),
            Turn.fail(ContextLengthExceeded("too long for me", limit=100)),
            Turn.text("THE SUMMARY"),
            Turn.text("short answer"),
        ]
    )
    agent = make_agent(policy=make_policy(context_token_limit=100_000))  # the estimate fits
    layer = Layer.succeed(CompactorService, compactor) + Layer.succeed(LanguageModelService, model)
    async with open_runtime(layer, agents=[agent]) as runtime:
        first = await runtime.run(agent, "hello")
        events = await run_events(runtime, agent, "again", conversation_id=first.conversation_id)
    assert isinstance(events[-1], RunCompleted)
    assert events[-1].text == "short answer"
    assert [e.error_tag for e in events_of(events, ModelRetrying)] == ["ContextLengthExceeded"]
    assert len(events_of(events, CompactionPerformed)) == 1
    assert "THE SUMMARY" in repr(model.requests[-1].messages)
    model.assert_consumed()


async def test_a_prepared_turn_whose_context_is_refused_is_compacted_with_its_items(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A turn's preparation is recorded with its response — but a compaction after the model
    refused the turn's context reads the log: the prepared items are written first, so the
    summary covers them and nothing the turn was given goes missing from the prompt."""
    from effectagent.ai import ContextLengthExceeded
    from effectagent.core import ContextAdded, ContextItem, PreparedContext, RunCompleted

    item = ContextItem(kind="memory", source="notes", text="The user lives in Oslo.")

    async def prepare(context: object) -> PreparedContext:
        return PreparedContext(items=[item])

    compactor = SummarizeEverything()
    model = ScriptedModel(
        [
            Turn.fail(ContextLengthExceeded("too long for me", limit=100)),
            Turn.text("THE SUMMARY"),
            Turn.text("short answer"),
        ]
    )
    agent = make_agent(policy=make_policy(context_token_limit=100_000), prepare_context=prepare)
    layer = Layer.succeed(CompactorService, compactor) + Layer.succeed(LanguageModelService, model)
    async with open_runtime(layer, agents=[agent]) as runtime:
        events = await run_events(runtime, agent, "hello")
        log = list(await runtime.log.entries(events[-1].conversation_id))
    assert isinstance(events[-1], RunCompleted)
    assert item.text in repr(model.requests[1].messages)  # the summary request saw the item
    kinds = [type(e.record).__name__ for e in log]
    assert kinds.index("ContextAdded") < kinds.index("CompactionCreated")
    (compaction,) = compactor.requests
    assert any(isinstance(e.record, ContextAdded) for e in compaction.entries)
    model.assert_consumed()


async def test_the_live_context_the_provider_reported_triggers_compaction(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The trigger is the live-context figure: the input tokens the provider reported for the
    last request, plus the count of what was added since — not a character estimate alone (by
    which this tiny prompt would never be compacted)."""
    from effectagent.ai import Usage

    from .helpers import HandlerProbe, forecast_tool

    compactor = SummarizeEverything()
    tool = forecast_tool()
    model = ScriptedModel(
        [
            Turn.tool_calls(("forecast", {"city": "Oslo"}), usage=Usage.of(90_000, 10)),
            Turn.text("THE SUMMARY"),
            Turn.text("after"),
        ]
    )
    agent = make_agent(tool, policy=make_policy(context_token_limit=50_000))
    layer = (
        agent.toolkit.handlers({tool: HandlerProbe().forecast()})
        + Layer.succeed(CompactorService, compactor)
        + Layer.succeed(LanguageModelService, model)
    )
    async with open_runtime(layer, agents=[agent]) as runtime:
        result = await runtime.run(agent, "hello")
    assert result.text == "after"
    (request,) = compactor.requests
    assert request.turn == 2
    assert request.estimated_tokens > 90_000  # the report, plus the tool result added since
    assert request.count_tokens(request.messages) < 1_000  # what the estimate alone would say
    model.assert_consumed()


class CountingCounter:
    """A TokenCounter that says every message is 1,000 tokens."""

    def __init__(self) -> None:
        self.calls = 0

    def count(self, messages: Sequence[object]) -> int:
        self.calls += 1
        return 1_000 * len(messages)


async def test_a_token_counter_service_replaces_the_estimate(
    autojump_clock: trio.testing.MockClock,
) -> None:
    from effectagent.engine import TokenCounterService

    compactor, counter = SummarizeEverything(), CountingCounter()
    model = ScriptedModel([Turn.text("THE SUMMARY"), Turn.text("fine")])
    agent = make_agent(policy=make_policy(context_token_limit=1_500))
    layer = (
        Layer.succeed(CompactorService, compactor)
        + Layer.succeed(LanguageModelService, model)
        + Layer.succeed(TokenCounterService, counter)
    )
    async with open_runtime(layer, agents=[agent]) as runtime:
        await runtime.run(agent, "hello")
    (request,) = compactor.requests
    assert request.estimated_tokens == 2_000  # system + user message, as the counter counts
    assert request.count_tokens([object(), object(), object()]) == 3_000  # type: ignore[list-item]
    assert counter.calls >= 1


class RecordingCounter:
    """A TokenCounter that remembers every message it was asked to count."""

    def __init__(self) -> None:
        self.counted: list[object] = []

    def count(self, messages: Sequence[object]) -> int:
        self.counted.extend(messages)
        return 10 * len(messages)


async def test_each_turn_counts_only_what_it_added_and_the_sum_is_the_live_context(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """With no usage reported, the live context is the prompt counted once and then each message
    as it is added — a turn does not recount the whole prompt (the check stays O(added))."""
    from effectagent.ai import Usage
    from effectagent.engine import TokenCounterService

    from .helpers import HandlerProbe, forecast_tool

    compactor, counter = SummarizeEverything(), RecordingCounter()
    tool = forecast_tool()
    unreported = Usage.of(0, 5)  # a provider that reports no input tokens
    turns = [Turn.tool_calls(("forecast", {"city": "Oslo"}), usage=unreported) for _ in range(6)]
    model = ScriptedModel([*turns, Turn.text("THE SUMMARY"), Turn.text("done")])
    # system + user, then 2 messages a turn (call, result): 2 + 2 * 6 = 14 messages; limit 135
    agent = make_agent(tool, policy=make_policy(context_token_limit=135, max_turns=10))
    layer = (
        agent.toolkit.handlers({tool: HandlerProbe().forecast()})
        + Layer.succeed(CompactorService, compactor)
        + Layer.succeed(LanguageModelService, model)
        + Layer.succeed(TokenCounterService, counter)
    )
    async with open_runtime(layer, agents=[agent]) as runtime:
        result = await runtime.run(agent, "hello")
    assert result.text == "done"
    (request,) = compactor.requests
    assert request.turn == 7
    assert request.estimated_tokens == 140 == request.count_tokens(request.messages)
    before_compaction = counter.counted[: len(request.messages)]
    assert [id(m) for m in before_compaction] == [id(m) for m in request.messages]  # each once
    model.assert_consumed()
