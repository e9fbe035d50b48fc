"""The compactor through the real engine: a 200-turn conversation with large tool results stays
under the limit on every request; a canary secret reaches no summary, record, event or log line;
the SQLite log is byte-for-byte unchanged by compaction; host artifacts are used when they verify
and refused when their digest does not match; a failed or interrupted summary leaves no trace."""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import attrs
import pytest
import structlog
import trio
import trio.testing
from structlog.testing import capture_logs

from capabilities import sqlite_storage
from capabilities.compaction import (
    CompactionResult,
    HostRequest,
    LogCompactor,
    RetainedFact,
    source_digest,
)
from effectagent import Agent, AgentPolicy, Tool, ToolCallContext, Toolkit, open_runtime
from effectagent.ai import ModelRequest, ModelUnavailable, ToolMessage, Usage, UserMessage
from effectagent.core import (
    CompactionCreated,
    CompactionPerformed,
    CompactionPolicy,
    ModelResponseRecorded,
    ModelUsageRecorded,
    RunCompleted,
    RunFailedRecord,
    ToolCallSettled,
    TurnStarted,
)
from effectagent.engine import LOGGER_NAME, estimate_tokens
from effectagent.testing import FunctionModel, Turn


@attrs.frozen
class Page:
    n: int


fetch = Tool("fetch", "Fetch page n.", parameters=Page, success=str, readonly=True)


def _agent(limit: int | None, keep: int = 1500, turns: int = 400) -> Agent:
    return Agent(
        "reader",
        "Read pages and report.",
        AgentPolicy(
            max_turns=turns,
            max_tool_calls=turns,
            max_duration=1e9,
            tool_concurrency=1,
            context_token_limit=limit,
            compaction=CompactionPolicy(keep_recent_tokens=keep),
        ),
        Toolkit(fetch),
    )


def _is_summary_request(request: ModelRequest) -> bool:
    return not request.tools


@attrs.define
class Reader:
    """A model that fetches ``pages`` pages one turn at a time, then answers — and summarizes
    when asked; it reports the tokens it was sent, as a provider does."""

    pages: int
    summary: str = "Read pages so far; keep going."
    fail_summaries: bool = False
    hang_summaries: bool = False
    requests: list[ModelRequest] = attrs.field(factory=list)

    def __call__(self, request: ModelRequest) -> Turn:
        self.requests.append(request)
        tokens = estimate_tokens(request.messages)
        if _is_summary_request(request):
            if self.fail_summaries:
                return Turn.fail(ModelUnavailable("the summarizer is down"))
            if self.hang_summaries:
                return Turn.hanging()
            return Turn.text(self.summary, usage=Usage.of(tokens, 20))
        fetched = sum(len(m.content) for m in request.messages if isinstance(m, ToolMessage))
        done = sum(1 for r in self.requests if not _is_summary_request(r))
        if done > self.pages:
            return Turn.text("All pages read.", usage=Usage.of(tokens, 5))
        return Turn.tool_calls(("fetch", {"n": done}), usage=Usage.of(tokens, 10 + fetched % 3))


async def _page(params: Page, call: ToolCallContext) -> str:
    return f"page {params.n}: " + "lorem ipsum " * 250  # ~3 KB a result


async def test_a_200_turn_conversation_stays_under_the_limit_on_every_request(
    autojump_clock: trio.testing.MockClock,
) -> None:
    limit = 6_000
    agent = _agent(limit)
    reader = Reader(pages=210)
    layer = agent.toolkit.handlers({fetch: _page}) + FunctionModel(reader).as_layer()
    async with open_runtime(layer + LogCompactor().layer(), agents=[agent]) as runtime:
        async with runtime.stream(agent, "Read every page.") as stream:
            events = [event async for event in stream]
        log = list(await runtime.log.entries(events[-1].conversation_id))

    last = events[-1]
    assert isinstance(last, RunCompleted)
    assert last.text == "All pages read."
    turns = [e for e in events if isinstance(e, TurnStarted)]
    assert len(turns) >= 200
    sizes = [estimate_tokens(r.messages) for r in reader.requests]
    assert max(sizes) <= limit  # every request — the summary requests too
    kinds = {r.kind for e in log if isinstance(r := e.record, CompactionCreated)}
    assert kinds == {"clear-tool-results", "summarize"}
    performed = [e for e in events if isinstance(e, CompactionPerformed)]
    assert all(p.tokens_after < p.tokens_before for p in performed)
    # The log keeps every page, whatever the prompt showed.
    assert len([e for e in log if isinstance(e.record, ModelResponseRecorded)]) == len(
        [r for r in reader.requests if not _is_summary_request(r)]
    )
    # ... and every summary call's usage: the records hold every token the run counted (what a
    # run resumed from them counts again).
    summaries = [r for e in log if isinstance(r := e.record, ModelUsageRecorded)]
    assert [r.purpose for r in summaries] == ["compaction"] * len(
        [r for r in reader.requests if _is_summary_request(r)]
    )
    recorded = sum(
        r.usage.input_tokens
        for e in log
        if isinstance(r := e.record, (ModelResponseRecorded, ModelUsageRecorded))
    )
    assert recorded == last.usage.input_tokens


@contextmanager
def _logs() -> Iterator[list[Any]]:
    logger = logging.getLogger(LOGGER_NAME)
    before = logger.level
    logger.setLevel(logging.DEBUG)
    try:
        with capture_logs() as logs:
            yield logs
    finally:
        logger.setLevel(before)
        structlog.reset_defaults()


CANARY = "sk-canary-7f3a9c1e5b"


class LeakyHost:
    """A host whose summaries carry the canary (a careless summarizer)."""

    def __init__(self) -> None:
        self.asked: list[HostRequest] = []

    async def compaction_for(self, request: HostRequest) -> CompactionResult:
        await trio.lowlevel.checkpoint()
        self.asked.append(request)
        return CompactionResult(
            request.covers_from,
            request.covers_through,
            f"The user's key is {CANARY}.",
            source_digest(request.entries),
            "leaky/1",
            (RetainedFact(f"key {CANARY}", (request.covers_through,)),),
        )


async def test_a_canary_secret_never_reaches_a_summary_record_event_or_log_line(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async def leaky_page(params: Page, call: ToolCallContext) -> str:
        return f"page {params.n} holds {CANARY} " + "x" * 2000

    for host in (None, LeakyHost()):
        reader = Reader(pages=60, summary=f"Summary: the key is {CANARY}.")
        agent = _agent(2_500, keep=600)
        layer = agent.toolkit.handlers({fetch: leaky_page}) + FunctionModel(reader).as_layer()
        compactor = LogCompactor(host=host)
        with _logs() as lines:
            async with open_runtime(
                layer + compactor.layer(), agents=[agent], secrets=[CANARY]
            ) as runtime:
                async with runtime.stream(agent, "Read.") as stream:
                    events = [event async for event in stream]
                log = list(await runtime.log.entries(events[-1].conversation_id))
        summaries = [r.summary for e in log if isinstance(r := e.record, CompactionCreated)]
        assert any(s and "[REDACTED]" in s for s in summaries), summaries
        assert CANARY not in repr(log)
        assert CANARY not in repr(events)
        assert CANARY not in repr(lines)
        later = [r for r in reader.requests[1:] if not _is_summary_request(r)]
        assert CANARY not in repr([r.messages for r in later])
        assert host is None or host.asked


async def test_compaction_leaves_the_sqlite_log_byte_for_byte_unchanged(tmp_path: Path) -> None:
    path = tmp_path / "conversations.db"
    before_agent, after_agent = _agent(None), _agent(3_000, keep=500)

    async def run(agent: Agent, pages: int, conversation: str | None) -> str:
        layer = agent.toolkit.handlers({fetch: _page}) + FunctionModel(Reader(pages)).as_layer()
        layer = layer + LogCompactor().layer() + sqlite_storage(path)
        async with open_runtime(layer, agents=[agent]) as runtime:
            result = await runtime.run(agent, "Read.", conversation_id=conversation)
        return result.conversation_id

    conversation = await run(before_agent, 6, None)
    before = _rows(path, conversation)
    await run(after_agent, 3, conversation)
    after = _rows(path, conversation)
    assert after[: len(before)] == before  # every row as it was, byte for byte
    added = [row[1] for row in after[len(before) :]]
    assert "CompactionCreated" in added


def _rows(path: Path, conversation: str) -> list[tuple[int, str, int, bytes]]:
    with sqlite3.connect(path) as connection:
        rows = connection.execute(
            "SELECT seq, type, version, CAST(body AS BLOB) FROM records"
            " WHERE conversation_id = ? ORDER BY seq",
            (conversation,),
        ).fetchall()
    return [(seq, kind, version, bytes(body)) for seq, kind, version, body in rows]


class Host:
    """A host that summarizes itself; ``tamper`` makes its digest wrong."""

    def __init__(self, *, tamper: bool) -> None:
        self.tamper = tamper

    async def compaction_for(self, request: HostRequest) -> CompactionResult:
        await trio.lowlevel.checkpoint()
        entries = request.entries
        if self.tamper:  # the host summarized a log missing one result
            (dropped, *_) = [e for e in entries if isinstance(e.record, ToolCallSettled)]
            entries = tuple(e for e in entries if e is not dropped)
        return CompactionResult(
            request.covers_from,
            request.covers_through,
            "HOST SUMMARY of the pages read",
            source_digest(entries),
            "host/2",
            (RetainedFact("page 0 was first", (request.covers_from,)),),
            token_estimate=12,
        )


async def test_a_host_artifact_is_used_when_it_verifies_and_refused_when_its_digest_does_not_match(
    autojump_clock: trio.testing.MockClock,
) -> None:
    for tamper in (False, True):
        reader = Reader(pages=60, summary="MODEL SUMMARY")
        agent = _agent(2_500, keep=600)
        compactor = LogCompactor(host=Host(tamper=tamper), versions={"host/2"})
        layer = agent.toolkit.handlers({fetch: _page}) + FunctionModel(reader).as_layer()
        async with open_runtime(layer + compactor.layer(), agents=[agent]) as runtime:
            result = await runtime.run(agent, "Read.")
            log = list(await runtime.log.entries(result.conversation_id))
        summaries = [
            r.summary
            for e in log
            if isinstance(r := e.record, CompactionCreated) and r.summary is not None
        ]
        assert summaries
        if tamper:
            assert all(s == "MODEL SUMMARY" for s in summaries)
            assert {r.reason for r in compactor.refusals} == {"digest"}
            assert any(_is_summary_request(r) for r in reader.requests)
        else:
            assert all(s.startswith("HOST SUMMARY") for s in summaries)
            assert "Facts to keep:\n- page 0 was first" in summaries[0]
            assert compactor.refusals == []
            assert not any(_is_summary_request(r) for r in reader.requests)


class BrokenHost:
    """A host that fails: raises (a summary service that is down), or answers what is not an
    artifact."""

    def __init__(self, answer: Any) -> None:
        self.answer = answer
        self.asked = 0

    async def compaction_for(self, request: HostRequest) -> Any:
        self.asked += 1
        await trio.lowlevel.checkpoint()
        if isinstance(self.answer, BaseException):
            raise self.answer
        return self.answer


@pytest.mark.parametrize(
    "answer",
    [ConnectionError("summary service down: hunter2"), "a summary as a bare str", {"summary": 1}],
    ids=["raises", "answers-a-str", "answers-a-dict"],
)
async def test_a_host_that_fails_costs_its_summary_never_the_run(
    autojump_clock: trio.testing.MockClock, answer: Any
) -> None:
    reader = Reader(pages=60, summary="MODEL SUMMARY")
    agent = _agent(2_500, keep=600)
    host = BrokenHost(answer)
    compactor = LogCompactor(host=host)
    layer = agent.toolkit.handlers({fetch: _page}) + FunctionModel(reader).as_layer()
    with _logs() as lines:
        async with open_runtime(layer + compactor.layer(), agents=[agent]) as runtime:
            result = await runtime.run(agent, "Read.")
            log = list(await runtime.log.entries(result.conversation_id))
    assert result.status == "completed"
    assert host.asked >= 1
    summaries = [
        r.summary
        for e in log
        if isinstance(r := e.record, CompactionCreated) and r.kind == "summarize"
    ]
    assert summaries
    assert all(s == "MODEL SUMMARY" for s in summaries)  # the model summarized
    failed = [line for line in lines if line["event"] == "compaction host failed"]
    assert len(failed) == host.asked
    assert failed[0]["error"] in ("ConnectionError", f"answered {type(answer).__name__}")
    assert "hunter2" not in repr(lines)  # the error's type, never its message


def test_an_empty_accepted_version_is_refused() -> None:
    for versions in ([""], ("host/2", "  ")):
        with pytest.raises(ValueError, match="each of versions must name a compactor version"):
            LogCompactor(versions=versions)


async def test_a_failed_summary_leaves_no_trace_and_the_run_goes_on(
    autojump_clock: trio.testing.MockClock,
) -> None:
    reader = Reader(pages=60, fail_summaries=True)
    agent = _agent(2_500, keep=600)
    layer = agent.toolkit.handlers({fetch: _page}) + FunctionModel(reader).as_layer()
    with _logs() as lines:
        async with open_runtime(layer + LogCompactor().layer(), agents=[agent]) as runtime:
            result = await runtime.run(agent, "Read.")
            log = list(await runtime.log.entries(result.conversation_id))
    assert result.status == "completed"
    assert any(_is_summary_request(r) for r in reader.requests)
    assert not any(
        isinstance(e.record, CompactionCreated) and e.record.kind == "summarize" for e in log
    )
    assert any(line["event"] == "compaction summary failed" for line in lines)


async def test_an_interrupted_summary_leaves_no_trace(
    autojump_clock: trio.testing.MockClock,
) -> None:
    reader = Reader(pages=60, hang_summaries=True)
    agent = _agent(2_500, keep=600)
    layer = agent.toolkit.handlers({fetch: _page}) + FunctionModel(reader).as_layer()
    async with open_runtime(layer + LogCompactor().layer(), agents=[agent]) as runtime:
        events: list[Any] = []
        with trio.move_on_after(1_000):  # the summary never comes: the caller gives up
            async with runtime.stream(agent, "Read.") as stream:
                async for event in stream:
                    events.append(event)
        log = list(await runtime.log.entries(events[0].conversation_id))
    summary_requests = [r for r in reader.requests if _is_summary_request(r)]
    assert len(summary_requests) == 1  # it was summarizing when interrupted
    (transcript,) = summary_requests[0].messages[1:]
    assert isinstance(transcript, UserMessage)  # one plain-text transcript, whatever the provider
    assert isinstance(log[-1].record, RunFailedRecord)  # the run ended, interrupted
    assert log[-1].record.reason == "interrupted"
    assert not any(
        isinstance(e.record, CompactionCreated) and e.record.kind == "summarize" for e in log
    )


class VersionedHost:
    """A host whose artifacts never verify (a wrong digest), under a version of its choosing."""

    def __init__(self, version: str) -> None:
        self.version = version

    async def compaction_for(self, request: HostRequest) -> CompactionResult:
        await trio.lowlevel.checkpoint()
        return CompactionResult(
            request.covers_from, request.covers_through, "HOST SUMMARY", "0" * 64, self.version
        )


@pytest.mark.parametrize("configured", [None, {"host/2"}], ids=["any-version", "host/2-only"])
async def test_a_refused_artifacts_version_is_logged_only_when_it_is_a_configured_one(
    autojump_clock: trio.testing.MockClock, configured: set[str] | None
) -> None:
    for version, shown in ((f"host-{CANARY}", None), ("host/2", "host/2")):
        reader = Reader(pages=60, summary="MODEL SUMMARY")
        agent = _agent(2_500, keep=600)
        compactor = LogCompactor(host=VersionedHost(version), versions=configured)
        layer = agent.toolkit.handlers({fetch: _page}) + FunctionModel(reader).as_layer()
        with _logs() as lines:
            async with open_runtime(layer + compactor.layer(), agents=[agent]) as runtime:
                result = await runtime.run(agent, "Read.")
        assert result.status == "completed"
        refused = [line for line in lines if line["event"] == "compaction artifact refused"]
        assert refused
        assert CANARY not in repr(lines)  # the host's text is not logged
        expected = shown if configured is not None else None
        assert {line["version"] for line in refused} == {expected}
