"""Compaction as properties over generated conversations, without Trio's engine: the view is the
core's projection cut into units; a compaction never splits a call from its result, never edits the
log, brings the prompt under the limit whenever that is possible and keeps the newest unit; a failed
or cancelled summary changes nothing; rebuilding from the log gives the same projection."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs
import pytest
import trio
import trio.testing
from hypothesis import given
from hypothesis import strategies as st

from capabilities.compaction import LogCompactor, compaction_artifacts, rebuild_compactions
from capabilities.compaction._planner import ELIDED, fit_summary, summary_message
from capabilities.compaction._view import LogView
from capabilities.storage._codec import RecordCodec
from effectagent.ai import (
    AssistantMessage,
    Message,
    ModelUnavailable,
    SystemMessage,
    ToolCallContent,
    ToolMessage,
)
from effectagent.core import CompactionCreated, LogEntry, ToolCallSettled, project_messages
from effectagent.engine import CompactionRequest, estimate_tokens

from .conversations import Conversation, conversations, interleaved

SYSTEM = SystemMessage("You are careful. " * 10)


def superadditive(messages: Sequence[Message]) -> int:
    """A counter whose whole is more than the sum of its parts (as framing between messages can
    be): planning by sums alone would undercount."""
    return estimate_tokens(messages) + 3 * len(messages) ** 2


def _request(
    conversation: Conversation,
    limit: int,
    keep: int,
    summarize: Any,
    strategy: Any = "prune-then-summarize",
    count: Any = estimate_tokens,
) -> CompactionRequest:
    messages = (SYSTEM, *project_messages(conversation.entries))
    return CompactionRequest(
        "conv_1",
        "run_next",
        7,
        conversation.entries,
        messages,
        count(messages),
        limit,
        keep,
        strategy,
        summarize,
        count,
    )


def _appended(entries: Sequence[LogEntry], records: Sequence[CompactionCreated]) -> list[LogEntry]:
    last = entries[-1].seq
    return [*entries, *(LogEntry(last + i, r) for i, r in enumerate(records, start=1))]


def assert_calls_stay_with_results(messages: Sequence[Message]) -> None:
    """Every tool message follows the assistant message whose calls it answers, in order, and
    every call is answered."""
    for index, message in enumerate(messages):
        calls = (
            [p.id for p in message.content if isinstance(p, ToolCallContent)]
            if isinstance(message, AssistantMessage)
            else []
        )
        if calls:
            answer = messages[index + 1]
            assert isinstance(answer, ToolMessage)
            assert [r.id for r in answer.content] == calls
        if isinstance(message, ToolMessage):
            before = messages[index - 1]
            assert isinstance(before, AssistantMessage)


@given(conversation=conversations())
def test_the_view_is_the_projection_cut_where_no_batch_is_split(conversation: Conversation) -> None:
    view = LogView(conversation.entries, estimate_tokens)
    assert view.messages() == project_messages(conversation.entries)
    firsts = [u.first for u in view.units]
    assert firsts == sorted(firsts)
    for unit, after in zip(view.units, view.units[1:], strict=False):
        assert unit.last < after.first
    for response, last in conversation.spans:
        if response <= view.summary_through:
            continue
        (home,) = [u for u in view.units if u.first <= response <= u.last]
        assert home.last >= last  # every settlement of the batch is in the response's unit


@given(conversation=conversations(), data=st.data())
def test_a_summary_that_would_split_a_batch_is_ignored_by_the_view_and_the_projection(
    conversation: Conversation, data: st.DataObject
) -> None:
    entries = list(conversation.entries)
    spans = [(r, last) for r, last in conversation.spans if r < last]
    if not spans:
        return
    response, last = data.draw(st.sampled_from(spans))
    through = data.draw(st.integers(response, last - 1))
    cut = CompactionCreated(
        conversation_id=entries[0].record.conversation_id,
        run_id="run_cut",
        turn=1,
        kind="summarize",
        covers_through=through,
        summary="a summary that cuts a batch",
        at=0.0,
    )
    with_cut = [*entries, LogEntry(entries[-1].seq + 1, cut)]
    view = LogView(with_cut, estimate_tokens)
    assert view.messages() == project_messages(with_cut) == project_messages(entries)
    assert view.summary_through == LogView(entries, estimate_tokens).summary_through


def _summarizer(text: str) -> Any:
    async def summarize(messages: Sequence[Message], **options: Any) -> str:
        await trio.lowlevel.checkpoint()
        return text

    return summarize


@given(
    conversation=conversations(),
    fraction=st.floats(0.05, 0.95),
    keep=st.integers(0, 3000),
    summary_words=st.integers(1, 3000),
    strategy=st.sampled_from(["prune-then-summarize", "prune-only"]),
    count=st.sampled_from([estimate_tokens, superadditive]),
)
def test_a_compaction_fits_the_limit_whenever_it_can_and_splits_nothing(
    conversation: Conversation,
    fraction: float,
    keep: int,
    summary_words: int,
    strategy: Any,
    count: Any,
) -> None:
    before = project_messages(conversation.entries)
    tokens_before = count([SYSTEM, *before])
    limit = max(1, int(tokens_before * fraction))
    encoded = [RecordCodec().encode(e.record) for e in conversation.entries]
    summarize = _summarizer("word " * summary_words)
    request = _request(conversation, limit, keep, summarize, strategy, count)

    records = trio.run(LogCompactor().compact, request)

    assert [RecordCodec().encode(e.record) for e in conversation.entries] == encoded  # untouched
    assert len(records) <= 1
    after = project_messages(_appended(conversation.entries, records))
    assert_calls_stay_with_results(after)
    tokens_after = count([SYSTEM, *after])
    for record in records:
        assert (record.conversation_id, record.run_id, record.turn) == ("conv_1", "run_next", 7)
        assert not any(r < record.covers_through < s for r, s in conversation.spans)
        assert tokens_after < tokens_before
    newest = before[-conversation.last_messages :]
    assert after[-conversation.last_messages :] == newest  # the newest unit is never covered
    smallest = count([SYSTEM, summary_message("…"), *newest])
    if strategy == "prune-then-summarize" and smallest <= limit:
        assert tokens_after <= limit


@given(
    conversation=interleaved(),
    fractions=st.lists(st.floats(0.05, 0.95), min_size=1, max_size=3),
    keep=st.integers(0, 3000),
    strategy=st.sampled_from(["prune-then-summarize", "prune-only"]),
)
def test_on_any_shape_of_log_repeated_compactions_split_nothing_and_each_applies(
    conversation: Conversation, fractions: list[float], keep: int, strategy: Any
) -> None:
    """Batches of several runs interleaved, calls settled in any order or never, context items,
    earlier compactions anywhere: a summary never covers a call and not its result, and every
    record proposed is one the projection applies (it makes the prompt smaller), round after
    round."""
    entries = list(conversation.entries)
    for fraction in fractions:
        before = estimate_tokens([SYSTEM, *project_messages(entries)])
        request = _request(
            attrs.evolve(conversation, entries=tuple(entries)),
            max(1, int(before * fraction)),
            keep,
            _summarizer("a summary of it all"),
            strategy,
        )
        records = trio.run(LogCompactor().compact, request)
        for record in records:
            if record.kind == "summarize":
                assert not any(r <= record.covers_through < s for r, s in conversation.spans)
            entries = _appended(entries, [record])
            assert_calls_stay_with_results(project_messages(entries))
            assert estimate_tokens([SYSTEM, *project_messages(entries)]) < before
        if not records:
            break


@given(conversation=conversations(), fraction=st.floats(0.05, 0.95), keep=st.integers(0, 3000))
def test_the_newest_keep_recent_tokens_stay_verbatim_whenever_they_fit(
    conversation: Conversation, fraction: float, keep: int
) -> None:
    """The smallest tail of units holding ``keep`` tokens is kept as it is whenever the prompt
    fits the limit with it, the shortest summary and the summary's room."""
    before = estimate_tokens([SYSTEM, *project_messages(conversation.entries)])
    limit = max(1, int(before * fraction))
    units = LogView(conversation.entries, estimate_tokens).units
    tail: list[Message] = []
    start, tokens = len(units), 0
    while start > 1 and tokens < keep:
        start -= 1
        tokens += units[start].tokens
        tail[:0] = units[start].messages
    room = estimate_tokens([SYSTEM]) + estimate_tokens([summary_message(ELIDED)])
    if tokens < keep or tokens + room + max(1, min(2048, limit // 4)) > limit:
        return
    request = _request(conversation, limit, keep, _summarizer("word " * 3000))
    records = trio.run(LogCompactor().compact, request)
    after = project_messages(_appended(conversation.entries, records))
    assert after[len(after) - len(tail) :] == tail


@given(conversation=conversations(), keep=st.integers(0, 3000), cancel=st.booleans())
def test_a_failed_or_cancelled_summary_changes_nothing(
    conversation: Conversation, keep: int, cancel: bool
) -> None:
    async def failing(messages: Sequence[Message], **options: Any) -> str:
        await trio.lowlevel.checkpoint()
        if cancel:
            await trio.sleep_forever()
        raise ModelUnavailable("the model is down")

    tokens = estimate_tokens([SYSTEM, *project_messages(conversation.entries)])
    request = _request(conversation, max(1, tokens // 10), keep, failing)

    async def attempt() -> Sequence[CompactionCreated] | None:
        with trio.move_on_after(1) as scope:
            return await LogCompactor().compact(request)
        assert scope.cancelled_caught
        return None

    records = trio.run(attempt, clock=trio.testing.MockClock(autojump_threshold=0))
    asked: list[Sequence[Message]] = []

    async def working(messages: Sequence[Message], **options: Any) -> str:
        asked.append(messages)
        return "a summary"

    planned = trio.run(LogCompactor().compact, attrs.evolve(request, summarize=working))
    if asked:
        # The plan needed the summary: failed, nothing; cancelled, nothing either (it raised).
        assert records is None if cancel else records == ()
    else:
        # A prune needs no model call, nor does a summary with no request that fits (the
        # marker): nothing could fail.
        assert records is not None
        assert [attrs.evolve(r, at=0.0) for r in records] == [
            attrs.evolve(r, at=0.0) for r in planned
        ]


@given(conversation=conversations(earlier_compactions=False), rounds=st.integers(1, 3))
def test_rebuilding_compactions_from_the_log_gives_the_same_projection(
    conversation: Conversation, rounds: int
) -> None:
    entries = list(conversation.entries)
    for n in range(rounds):  # compact a few times, as turns would
        tokens = estimate_tokens([SYSTEM, *project_messages(entries)])
        request = _request(
            Conversation(tuple(entries), conversation.spans, conversation.last_messages),
            max(1, tokens // 2),
            200,
            _summarizer(f"summary {n}"),
        )
        entries = _appended(entries, trio.run(LogCompactor().compact, request))
    artifacts = compaction_artifacts(entries)
    stripped = [e for e in entries if not isinstance(e.record, CompactionCreated)]
    rebuilt = rebuild_compactions(stripped, artifacts, run_id="operator")
    assert project_messages(_appended(stripped, rebuilt)) == project_messages(entries)
    assert all(r.run_id == "operator" for r in rebuilt)


def test_the_newest_tokens_are_kept_verbatim_and_the_rest_summarized() -> None:
    from .conversations import CONVERSATION  # noqa: F401  (the generated conversation's ID)

    entries = _long_log(turns=10, result_chars=4000, question_chars=3000)
    messages = project_messages(entries)
    last_three = messages[-9:]  # three turns: user, assistant+calls, results each
    keep = estimate_tokens(last_three) - 5
    limit = estimate_tokens([SYSTEM, *last_three]) + 400
    seen: list[Sequence[Message]] = []

    async def summarize(covered: Sequence[Message], **options: Any) -> str:
        await trio.lowlevel.checkpoint()
        seen.append(covered)
        return "the earlier turns, summarized"

    request = CompactionRequest(
        "conv",
        "run",
        11,
        tuple(entries),
        (SYSTEM, *messages),
        estimate_tokens([SYSTEM, *messages]),
        limit,
        keep,
        "prune-then-summarize",
        summarize,
        estimate_tokens,
    )
    (record,) = trio.run(LogCompactor(summary_tokens=300).compact, request)
    assert record.kind == "summarize"
    after = project_messages(_appended(entries, [record]))
    assert after[1:] == last_three
    assert after[0] == summary_message("the earlier turns, summarized")
    (transcript,) = seen
    (text,) = [part.text for message in transcript for part in message.content]  # type: ignore[union-attr]
    assert "turn 6 question" in text  # the covered turns went into the summary request
    assert "turn 8 question" not in text  # the kept ones did not


def test_pruning_alone_is_used_when_it_is_enough() -> None:
    entries = _long_log(turns=6, result_chars=8000)
    messages = project_messages(entries)
    limit = estimate_tokens([SYSTEM, *messages]) // 2

    async def no_summary(covered: Sequence[Message], **options: Any) -> str:
        raise AssertionError("pruning was enough: no summary call")

    request = CompactionRequest(
        "conv",
        "run",
        7,
        tuple(entries),
        (SYSTEM, *messages),
        limit * 2,
        limit,
        2500,
        "prune-then-summarize",
        no_summary,
        estimate_tokens,
    )
    (record,) = trio.run(LogCompactor().compact, request)
    assert record.kind == "clear-tool-results"
    after = project_messages(_appended(entries, [record]))
    assert estimate_tokens([SYSTEM, *after]) <= limit
    assert after[-3:] == messages[-3:]  # the newest results are kept
    cleared = [r for m in after if isinstance(m, ToolMessage) for r in m.content]
    assert cleared[0].result == {
        "_tag": "ResultCleared",
        "message": "older tool result removed to save context",
    }


def test_a_summary_with_no_room_left_is_cut_to_the_marker_never_to_nothing() -> None:
    def characters(messages: Sequence[Message]) -> int:  # a counter exact to the character
        return sum(len(getattr(part, "text", "")) for m in messages for part in m.content)

    kept = [SystemMessage("kept " * 40)]
    room = characters([SYSTEM, summary_message(ELIDED), *kept])
    assert fit_summary("a long summary " * 50, [SYSTEM], kept, room, characters) == ELIDED
    assert fit_summary("a long summary", [SYSTEM], kept, room + 4, characters) == "a l …"
    assert fit_summary("short", [SYSTEM], kept, room + 50, characters) == "short"


def _summary_request(entries: list[LogEntry], summarize: Any) -> CompactionRequest:
    messages = project_messages(entries)
    tokens = estimate_tokens([SYSTEM, *messages])
    return CompactionRequest(
        "conv",
        "run",
        7,
        tuple(entries),
        (SYSTEM, *messages),
        tokens,
        max(1, tokens // 2),
        200,
        "prune-then-summarize",
        summarize,
        estimate_tokens,
    )


def test_every_summary_record_can_be_exported_and_rebuilt_even_at_the_smallest_limit() -> None:
    entries = _long_log(turns=6, result_chars=300, question_chars=200)
    for divisor in (2, 3, 5, 8, 13, 40):  # from roomy to nothing left for the summary's text
        request = attrs.evolve(
            _summary_request(entries, _summarizer("what happened " * 100)),
            context_token_limit=max(1, request_tokens(entries) // divisor),
        )
        records = trio.run(LogCompactor().compact, request)
        for record in records:
            assert record.summary is not None
            assert record.summary.strip()
        log = _appended(entries, records)
        stripped = [e for e in log if not isinstance(e.record, CompactionCreated)]
        rebuilt = rebuild_compactions(stripped, compaction_artifacts(log), run_id="operator")
        assert project_messages(_appended(stripped, rebuilt)) == project_messages(log)


def request_tokens(entries: list[LogEntry]) -> int:
    return estimate_tokens([SYSTEM, *project_messages(entries)])


def test_an_empty_summary_is_a_failed_summary_and_appends_nothing() -> None:
    entries = _long_log(turns=6, result_chars=300, question_chars=200)
    assert trio.run(LogCompactor().compact, _summary_request(entries, _summarizer("  \n"))) == ()


def _long_log(turns: int, result_chars: int, question_chars: int = 0) -> list[LogEntry]:
    from effectagent.core import ModelResponseRecorded, ToolSuccess, UsageDelta, UserInputRecorded

    entries: list[LogEntry] = []

    def add(record: Any) -> None:
        entries.append(LogEntry(len(entries) + 1, record))

    for turn in range(1, turns + 1):
        run = "run"
        add(
            UserInputRecorded(
                conversation_id="conv",
                run_id=run,
                input_id=f"i{turn}",
                kind="user",
                text=f"turn {turn} question " + "q" * question_chars,
                author="ann",
                at=0.0,
            )
        )
        call = {"id": "call_0", "name": "fetch", "arguments": '{"q": "x"}'}
        add(
            ModelResponseRecorded(
                conversation_id="conv",
                run_id=run,
                turn=turn,
                content=(("tool-call", call),),
                finish_reason="tool-calls",
                usage=UsageDelta(),
                at=0.0,
            )
        )
        result = ToolSuccess("call_0", "fetch", f"turn {turn} " + "r" * result_chars)
        add(
            ToolCallSettled(
                conversation_id="conv",
                run_id=run,
                turn=turn,
                tool_call_id="call_0",
                tool_name="fetch",
                outcome=result,
                at=0.0,
            )
        )
    return entries


@pytest.mark.parametrize(
    ("estimated", "counted", "limit", "expected"),
    [
        (1000, 1000, 800, 800),  # the provider agrees with the counter
        (1200, 1000, 1000, 800),  # a fixed overhead of 200 (tool schemas): 1000 - 200
        (2000, 1000, 1000, 500),  # twice the tokens: too much for an overhead, a ratio
        (1400, 1000, 1000, 600),  # 400 more: an overhead (1000 - 400) or a ratio (714): the safer
        (900, 1000, 1000, 1111),  # the counter overcounts: scaled by the provider's figure
    ],
)
def test_the_limit_is_restated_in_the_counters_units(
    estimated: int, counted: int, limit: int, expected: int
) -> None:
    from capabilities.compaction._compactor import calibrated_limit

    assert calibrated_limit(estimated, counted, limit) == expected
