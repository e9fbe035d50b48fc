"""What bounds a compaction's summary call: the request fits the limit with the summary's room on
top (however long the earlier summary and the newest covered message), its transcript never
separates a call from its result, and a summary — the model's or a host's — is cut to its bound
(``summary_tokens``, a quarter of the limit, the room the prompt has), marked."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs
import trio
import trio.testing
from hypothesis import given
from hypothesis import strategies as st

from capabilities.compaction import CompactionResult, HostRequest, LogCompactor, source_digest
from capabilities.compaction._planner import ELIDED, Budget, plan_compaction, summary_tokens
from capabilities.compaction._transcript import transcript
from capabilities.compaction._view import LogView
from effectagent import Agent, AgentPolicy, open_runtime
from effectagent.ai import (
    AssistantMessage,
    ContextLengthExceeded,
    Message,
    ModelRequest,
    SystemMessage,
    TextContent,
    UserMessage,
)
from effectagent.core import (
    CompactionCreated,
    CompactionPolicy,
    ConversationCreated,
    LogEntry,
    ModelResponseRecorded,
    RunCompletedRecord,
    UsageDelta,
    UserInputRecorded,
    project_messages,
)
from effectagent.effect import Layer
from effectagent.engine import (
    CompactionRequest,
    ConversationLogService,
    InMemoryConversationLog,
    estimate_tokens,
)
from effectagent.testing import FunctionModel, Turn

from .conversations import Conversation, conversations
from .test_planning import SYSTEM, superadditive

#: What the compactor keeps free in a summary request for the system message the engine adds.
ENGINE_OVERHEAD = 64

HEAD = "Summarize this.\n\n"


def _request(
    entries: Sequence[LogEntry], limit: int, keep: int, summarize: Any, count: Any
) -> CompactionRequest:
    messages = (SYSTEM, *project_messages(entries))
    return CompactionRequest(
        "conv_1",
        "run_next",
        7,
        tuple(entries),
        messages,
        count(messages),
        limit,
        keep,
        "prune-then-summarize",
        summarize,
        count,
    )


def _text(messages: Sequence[Message]) -> str:
    (message,) = messages
    assert isinstance(message, UserMessage)  # one plain-text transcript
    return "".join(part.text for part in message.content)


def assert_calls_next_to_results(text: str) -> None:
    """Each call's line is followed by its result's line, and each result follows its call."""
    lines = text.split("\n")
    for index, line in enumerate(lines):
        if line.startswith("Assistant called fetch("):
            assert lines[index + 1].startswith(("fetch returned: ", "fetch failed: ")), text
        if line.startswith(("fetch returned: ", "fetch failed: ")):
            assert lines[index - 1].startswith("Assistant called fetch("), text


@given(
    conversation=conversations(input_chars=12_000, summary_chars=16_000),
    fraction=st.floats(0.05, 0.95),
    keep=st.integers(0, 3000),
    most=st.integers(1, 4000),
    verbose=st.integers(1, 5000),
    count=st.sampled_from([estimate_tokens, superadditive]),
)
def test_the_summary_request_fits_the_limit_and_the_summary_its_bound(
    conversation: Conversation,
    fraction: float,
    keep: int,
    most: int,
    verbose: int,
    count: Any,
) -> None:
    tokens = count([SYSTEM, *project_messages(conversation.entries)])
    limit = max(1, int(tokens * fraction))
    asked: list[Sequence[Message]] = []

    async def summarize(messages: Sequence[Message], **options: Any) -> str:
        asked.append(messages)
        return "word " * verbose

    request = _request(conversation.entries, limit, keep, summarize, count)
    records = trio.run(LogCompactor(summary_tokens=most).compact, request)

    budget = Budget(limit, keep, max(1, min(most, limit // 4)))
    plan = plan_compaction(LogView(conversation.entries, count), [SYSTEM], budget)
    for messages in asked:  # the request fits, with the summary's room on top
        assert plan is not None
        assert count(messages) + ENGINE_OVERHEAD + plan.summary_room <= limit
        assert_calls_next_to_results(_text(messages))
    for record in records:
        if record.kind == "summarize":
            assert plan is not None
            assert record.summary is not None
            assert summary_tokens(record.summary, count) <= max(plan.summary_room, 0)
            assert record.summary == ELIDED or summary_tokens(record.summary, count) <= most


@given(
    conversation=conversations(input_chars=12_000, summary_chars=16_000),
    budget=st.integers(-10, 6000),
    count=st.sampled_from([estimate_tokens, superadditive]),
)
def test_a_transcript_is_within_its_budget_and_keeps_calls_with_their_results(
    conversation: Conversation, budget: int, count: Any
) -> None:
    messages = project_messages(conversation.entries)
    text = transcript(messages, count, budget, head=HEAD)
    if text:
        assert count([UserMessage.text(HEAD + text)]) <= budget
        assert_calls_next_to_results(text)
    # The shortest newest part and the line saying what was left out take far less than this:
    room = count([UserMessage.text(HEAD)]) + 200
    assert text or budget < room
    whole = transcript(messages, count, 10**9, head=HEAD)
    if count([UserMessage.text(HEAD + whole)]) <= budget:
        assert text == whole  # nothing is cut that fits


def _summary_log(summary: str, newest: str) -> list[LogEntry]:
    """A conversation whose earlier summary is ``summary`` and whose newest covered input is
    ``newest``; a short question comes last."""
    records: list[Any] = [
        ConversationCreated(conversation_id="conv_1", agent="reader", at=0.0),
        UserInputRecorded(
            conversation_id="conv_1",
            run_id="run_0",
            input_id="in_0",
            kind="user",
            text="What is in the report?",
            author="ann",
            at=0.0,
        ),
        ModelResponseRecorded(
            conversation_id="conv_1",
            run_id="run_0",
            turn=1,
            content=(("text", "Page one."),),
            finish_reason="stop",
            usage=UsageDelta(),
            at=0.0,
        ),
        RunCompletedRecord(
            conversation_id="conv_1", run_id="run_0", output=None, finish_reason="stop", at=0.0
        ),
        CompactionCreated(
            conversation_id="conv_1",
            run_id="run_0",
            turn=1,
            kind="summarize",
            covers_through=4,
            summary=summary,
            at=0.0,
        ),
        UserInputRecorded(
            conversation_id="conv_1",
            run_id="run_1",
            input_id="in_1",
            kind="user",
            text=newest,
            author="ann",
            at=0.0,
        ),
        ModelResponseRecorded(
            conversation_id="conv_1",
            run_id="run_1",
            turn=1,
            content=(("text", "Noted."),),
            finish_reason="stop",
            usage=UsageDelta(),
            at=0.0,
        ),
        RunCompletedRecord(
            conversation_id="conv_1", run_id="run_1", output=None, finish_reason="stop", at=0.0
        ),
    ]
    return [LogEntry(seq, record) for seq, record in enumerate(records, start=1)]


def test_an_earlier_summary_too_long_to_fit_is_cut_head_and_tail_with_a_marker() -> None:
    summary = "EARLY " + "the earlier summary goes on " * 400 + " LATE"
    newest = "NEWEST " + "a long message " * 300
    *messages, _answer = project_messages(_summary_log(summary, newest))  # what a plan covers
    budget = 600  # tokens: far less than the summary alone (about 2,800)
    text = transcript(messages, estimate_tokens, budget, head=HEAD)
    assert estimate_tokens([UserMessage.text(HEAD + text)]) <= budget
    assert text.startswith("Summary of what came before:\nEARLY the earlier summary")
    assert "characters left out]…" in text.split("\n\n")[0]  # its middle, marked
    assert "LATE" in text.split("\n\n")[0]  # and its tail kept
    assert "User: NEWEST a long message" in text  # the newest covered message is there too


def test_a_transcript_that_cannot_fit_at_all_is_empty() -> None:
    messages = project_messages(_summary_log("a summary", "a question"))
    assert transcript(messages, estimate_tokens, 12, head=HEAD) == ""
    assert transcript(messages, estimate_tokens, 60, head=HEAD)  # a little more is enough


async def test_through_the_engine_the_summary_request_fits_a_window_equal_to_the_limit(
    autojump_clock: trio.testing.MockClock,
) -> None:
    limit = 1_500
    # An earlier summary as long as the whole window (an older compactor, or an operator's
    # rebuild, wrote it), and a long message after it: the next summary must still fit.
    entries = _summary_log("the earlier summary " * 300, "a long message " * 500)
    log = InMemoryConversationLog()
    await log.append("conv_1", [entry.record for entry in entries])
    requests: list[ModelRequest] = []

    def model(request: ModelRequest) -> Turn:
        requests.append(request)
        tokens = estimate_tokens(request.messages)
        if tokens > limit:  # a provider whose window is the limit
            return Turn.fail(ContextLengthExceeded(f"the prompt has {tokens} tokens", limit))
        if _summary_request(request):
            return Turn.text("word " * 5_000)  # a verbose summarizer
        return Turn.text("Done.")

    agent = Agent(
        "reader",
        "Read.",
        AgentPolicy(context_token_limit=limit, compaction=CompactionPolicy(keep_recent_tokens=50)),
    )
    layer = (
        FunctionModel.layer(model)
        + LogCompactor(summary_tokens=100).layer()
        + Layer.succeed(ConversationLogService, log)
    )
    async with open_runtime(layer, agents=[agent]) as runtime:
        result = await runtime.run(agent, "And now?", conversation_id="conv_1")
        after = list(await runtime.log.entries("conv_1"))
    assert result.status == "completed", result
    assert max(estimate_tokens(r.messages) for r in requests) <= limit
    summary_requests = [r for r in requests if _summary_request(r)]
    assert summary_requests
    for request in summary_requests:  # the summary's bound is the model's output cap
        assert request.max_output_tokens is not None
        assert 1 <= request.max_output_tokens <= 100
        assert estimate_tokens(request.messages) + request.max_output_tokens <= limit
    (record,) = [e.record for e in after[len(entries) :] if isinstance(e.record, CompactionCreated)]
    assert record.summary is not None
    assert record.summary.endswith(" …")  # cut to its bound, marked
    assert summary_tokens(record.summary, estimate_tokens) <= 100


def _summary_request(request: ModelRequest) -> bool:
    """The compactor's request, not a turn of the agent (whose instructions are "Read.")."""
    first = request.messages[0]
    return isinstance(first, SystemMessage) and first.content != "Read."


class Verbose:
    """A host whose summaries run on."""

    async def compaction_for(self, request: HostRequest) -> CompactionResult:
        await trio.lowlevel.checkpoint()
        return CompactionResult(
            request.covers_from,
            request.covers_through,
            "HOST " + "and on " * 5_000,
            source_digest(request.entries),
            "host/1",
            (),
        )


def test_a_verbose_summary_from_the_model_or_a_host_is_cut_to_summary_tokens() -> None:
    entries = _summary_log("a summary", "a long message " * 2_000)
    asked: list[Sequence[Message]] = []

    async def summarize(messages: Sequence[Message], **options: Any) -> str:
        asked.append(messages)
        return "MODEL " + "and so on " * 5_000  # about 12,500 tokens

    for host in (None, Verbose()):
        asked.clear()

        request = _request(entries, 20_000, 0, summarize, estimate_tokens)
        request = attrs.evolve(request, estimated_tokens=30_000)  # the provider counted more
        (record,) = trio.run(LogCompactor(summary_tokens=100, host=host).compact, request)
        assert record.summary is not None
        assert record.summary.startswith("HOST" if host else "MODEL")
        assert record.summary.endswith(" …")
        assert 90 <= summary_tokens(record.summary, estimate_tokens) <= 100
        assert bool(asked) is (host is None)


def test_summary_tokens_counts_the_text_alone() -> None:
    assert summary_tokens("", estimate_tokens) == 0
    assert summary_tokens("x" * 400, estimate_tokens) == 100


def test_a_transcript_that_fits_whole_leaves_nothing_out_though_its_parts_sum_to_more() -> None:
    # Counted one by one, each part pays a message's framing: twenty short exchanges sum to
    # more than the one message they make together. The sum is a guess; the exact count decides.
    messages: list[Message] = []
    for n in range(20):
        messages.append(UserMessage.text(f"question {n}"))
        messages.append(AssistantMessage((TextContent(f"answer {n}"),)))
    whole = transcript(messages, estimate_tokens, 10**9, head=HEAD)
    budget = estimate_tokens([UserMessage.text(HEAD + whole)])
    parts = sum(estimate_tokens([UserMessage.text(line)]) for line in whole.split("\n\n"))
    assert parts > budget  # what made the oldest parts be left out
    assert transcript(messages, estimate_tokens, budget, head=HEAD) == whole
    # Less room: as few parts as that needs are left out, the newest kept.
    fewer = budget - 40
    cut = transcript(messages, estimate_tokens, fewer, head=HEAD)
    assert estimate_tokens([UserMessage.text(HEAD + cut)]) <= fewer
    assert cut.startswith("[")
    assert cut.endswith("Assistant: answer 19")
    left_out = int(cut[1 : cut.index(" ")])
    one_fewer = f"[{left_out - 1} earlier parts of the conversation left out]\n\n" + "\n\n".join(
        whole.split("\n\n")[left_out - 1 :]
    )
    assert estimate_tokens([UserMessage.text(HEAD + one_fewer)]) > fewer
