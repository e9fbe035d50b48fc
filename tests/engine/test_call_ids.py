"""Tool-call IDs are model-written input: a call whose ID the conversation already used (its
history, or an earlier turn of the run) gets a fresh engine identity — the ID with a ``-<n>``
suffix no call of the conversation has — so nothing kept for the earlier call (an approval
decision above all) can be taken for the new one. The record, the settlement and the next request
carry the fresh ID alike: on the assistant's call and on its result."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st

from effectagent.ai import (
    AssistantMessage,
    ModelRequest,
    ModelResponse,
    ToolCallContent,
    ToolCallPart,
    ToolMessage,
    TruncatedToolCall,
    Usage,
)
from effectagent.core import (
    REDACTED,
    ApprovalDecision,
    ApprovalRequest,
    CompactionCreated,
    LogEntry,
    ModelResponseRecorded,
    RunCompleted,
    SecretRedactor,
    ToolApprovalDecided,
    ToolCallSettled,
    ToolRejected,
    ToolSuccess,
)
from effectagent.effect import Layer
from effectagent.engine import CompactionRequest, CompactorService, open_runtime
from effectagent.engine._model_step import _with_fresh_identities, declared_calls
from effectagent.testing import ScriptedModel, Turn

from .helpers import (
    HandlerProbe,
    Lookup,
    ScriptedApproval,
    TrackingModel,
    forecast_tool,
    make_agent,
    make_policy,
    records_of,
    run_events,
    run_script,
    summarize_everything,
)


def _calls_and_results(request: ModelRequest) -> tuple[list[str], list[str]]:
    """The tool-call IDs of a request's assistant messages and of its tool results, in order."""
    calls = [
        part.id
        for message in request.messages
        if isinstance(message, AssistantMessage)
        for part in message.content
        if isinstance(part, ToolCallContent)
    ]
    results = [
        result.id
        for message in request.messages
        if isinstance(message, ToolMessage)
        for result in message.content
    ]
    return calls, results


def _recorded_ids(log: list[LogEntry]) -> list[str]:
    return [
        value["id"]
        for record in records_of(log, ModelResponseRecorded)
        for kind, value in record.content
        if kind == "tool-call"
    ]


async def test_a_kept_approval_never_lets_another_tool_run_under_a_reused_call_id(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The model calls ``forecast`` as ``call_x``, then ``purge`` — same arguments — as ``call_x``
    again. The approver keeps its decisions by call ID ("always, for this call") and approves
    ``forecast`` only. The second call is a new call to it (``call_x-2``), so it decides anew and
    ``purge`` never runs on ``forecast``'s approval."""
    kept: dict[str, ApprovalDecision] = {}

    async def remembering(request: ApprovalRequest) -> ApprovalDecision:
        await trio.lowlevel.checkpoint()
        if request.tool_call_id not in kept:
            approved = request.tool_name == "forecast"
            kept[request.tool_call_id] = ApprovalDecision.for_request(
                request, approved, "always, for this call", "kept"
            )
        return kept[request.tool_call_id]

    approval, probe = ScriptedApproval(remembering), HandlerProbe()
    read, purge = forecast_tool(needs_approval=True), forecast_tool("purge", needs_approval=True)
    ran = await run_script(
        make_agent(read, purge),
        {read: probe.forecast(), purge: probe.forecast()},
        [
            Turn.tool_calls(("forecast", {"city": "Oslo"}, "call_x")),
            Turn.tool_calls(("purge", {"city": "Oslo"}, "call_x")),
            Turn.text("Done."),
        ],
        extra=approval.layer(),
    )
    assert isinstance(ran.terminal, RunCompleted)
    assert probe.calls == [("forecast", Lookup("Oslo"))]
    assert [(r.tool_call_id, r.tool_name) for r in approval.requests] == [
        ("call_x", "forecast"),
        ("call_x-2", "purge"),
    ]
    settled = records_of(ran.log, ToolCallSettled)
    assert [(s.tool_call_id, type(s.outcome)) for s in settled] == [
        ("call_x", ToolSuccess),
        ("call_x-2", ToolRejected),
    ]
    decided = records_of(ran.log, ToolApprovalDecided)
    assert [(d.tool_call_id, d.decision.approved) for d in decided] == [
        ("call_x", True),
        ("call_x-2", False),
    ]
    # The log and the next request agree on the fresh ID, on the call and on its result.
    assert _recorded_ids(ran.log) == ["call_x", "call_x-2"]
    last = ran.model.requests[-1]
    assert _calls_and_results(last) == (["call_x", "call_x-2"], ["call_x", "call_x-2"])


async def test_a_call_id_from_an_earlier_run_of_the_conversation_gets_a_fresh_one(
    autojump_clock: trio.testing.MockClock,
) -> None:
    probe, tool = HandlerProbe(), forecast_tool()
    agent = make_agent(tool)
    model = TrackingModel(
        [
            Turn.tool_calls(("forecast", {"city": "Oslo"}, "call_0")),
            Turn.text("4 °C."),
            Turn.tool_calls(("forecast", {"city": "Rome"}, "call_0")),
            Turn.tool_calls(("forecast", {"city": "Oslo"}, "call_0")),
            Turn.text("17.5 °C, and still 4 °C."),
        ]
    )
    layer = agent.toolkit.handlers({tool: probe.forecast()}) + model.layer()
    async with open_runtime(layer, agents=[agent]) as runtime:
        first = await run_events(runtime, agent, "Oslo?")
        conversation = first[0].conversation_id
        second = await run_events(runtime, agent, "Rome, then Oslo?", conversation_id=conversation)
        log = list(await runtime.log.entries(conversation))
    assert isinstance(second[-1], RunCompleted)
    assert _recorded_ids(log) == ["call_0", "call_0-2", "call_0-3"]
    settled = records_of(log, ToolCallSettled)
    assert [s.tool_call_id for s in settled] == ["call_0", "call_0-2", "call_0-3"]
    assert _calls_and_results(model.requests[-1]) == (
        ["call_0", "call_0-2", "call_0-3"],
        ["call_0", "call_0-2", "call_0-3"],
    )


# ---- the rule, as a pure function ----------------------------------------------------------------

_IDS = st.sampled_from(["a", "b", "a-2", "a-3", "b-2", "secret", "secret-1", REDACTED, "x"])


def _response(ids: list[str], cut_at: set[int]) -> ModelResponse:
    """A response declaring calls of ``ids`` in order, those at ``cut_at`` too large to run (in
    their places, as the reducer keeps them)."""
    content = tuple(
        TruncatedToolCall(i, "f", "{", "too-large", 1)
        if n in cut_at
        else ToolCallPart(i, "f", "{}")
        for n, i in enumerate(ids)
    )
    calls = tuple(c for c in content if isinstance(c, ToolCallPart))
    cut = tuple(c for c in content if isinstance(c, TruncatedToolCall))
    return ModelResponse(content, calls, cut, "tool-calls", Usage())


@given(
    ids=st.lists(_IDS, unique=True, max_size=6),
    used=st.sets(_IDS),
    cut_at=st.sets(st.integers(0, 5), max_size=2),
    redacting=st.booleans(),
)
def test_fresh_identities_are_unique_new_and_keep_every_id_that_can_stay(
    ids: list[str], used: set[str], cut_at: set[int], redacting: bool
) -> None:
    """For every response (IDs unique within it, calls too large to run anywhere among them) and
    every set of used IDs: the final IDs are unique and none was used before; an ID that was not
    used (and not redacted) stays; a fresh one is its ID with a suffix; every call keeps its
    place; and the used set grows by exactly the final IDs."""
    before = set(used)
    redactor = SecretRedactor(["secret"]) if redacting else None
    response = _with_fresh_identities(_response(ids, cut_at), redactor, used)
    final = [c.id for c in declared_calls(response)]
    assert [type(c) for c in declared_calls(response)] == [
        TruncatedToolCall if n in cut_at else ToolCallPart for n in range(len(ids))
    ]
    assert [c.id for c in response.tool_calls] == [
        i for n, i in enumerate(final) if n not in cut_at
    ]
    assert len(final) == len(ids)
    assert len(set(final)) == len(final)
    assert not set(final) & before
    assert used == before | set(final)
    for old, new in zip(ids, final, strict=True):
        changed_by_redaction = redacting and "secret" in old
        if old not in before and not changed_by_redaction:
            assert new == old
        else:
            assert new != old
            assert new.startswith(REDACTED if changed_by_redaction else old)
        assert not (redacting and "secret" in new)
    # The content keeps the calls, in order, with the same IDs as ``tool_calls``.
    assert [c.id for c in response.content if isinstance(c, ToolCallPart)] == [
        c.id for c in response.tool_calls
    ]


@settings(max_examples=40, deadline=None)
@given(turns=st.lists(st.lists(_IDS, unique=True, min_size=1, max_size=3), min_size=1, max_size=4))
def test_for_any_reuse_of_ids_the_log_and_every_request_stay_consistent(
    turns: list[list[str]],
) -> None:
    """However the model reuses IDs across turns, every call of the conversation has its own ID,
    the log's calls and settlements carry the same IDs in the same order, and every request pairs
    each call with exactly one result of the same ID."""
    tool = forecast_tool()
    script = [
        Turn.tool_calls(*[("forecast", {"city": "Oslo"}, call_id) for call_id in ids])
        for ids in turns
    ]
    model = ScriptedModel([*script, Turn.text("Done.")])

    async def main() -> list[LogEntry]:
        probe = HandlerProbe()
        agent = make_agent(tool)
        layer = agent.toolkit.handlers({tool: probe.forecast()}) + model.as_layer()
        async with open_runtime(layer, agents=[agent]) as runtime:
            events = await run_events(runtime, agent, "Go.")
            assert isinstance(events[-1], RunCompleted)
            return list(await runtime.log.entries(events[0].conversation_id))

    log = trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    recorded = _recorded_ids(log)
    assert len(recorded) == sum(map(len, turns)) == len(set(recorded))
    assert [s.tool_call_id for s in records_of(log, ToolCallSettled)] == recorded
    for request in model.requests:
        calls, results = _calls_and_results(request)
        assert calls == results == recorded[: len(calls)]
    # Nothing was used before the first turn: its IDs stay as the model wrote them.
    assert recorded[: len(turns[0])] == turns[0]


def test_a_response_without_calls_is_left_as_it_is() -> None:
    used: set[str] = {"a"}
    response = _response([], set())
    assert _with_fresh_identities(response, None, used) is response
    assert used == {"a"}


@pytest.mark.parametrize("redacting", [False, True])
def test_an_id_used_nowhere_before_is_not_renamed(redacting: bool) -> None:
    used: set[str] = {"b"}
    redactor: Any = SecretRedactor(["secret"]) if redacting else None
    response = _response(["a"], set())
    assert _with_fresh_identities(response, redactor, used) is response
    assert used == {"a", "b"}


@given(
    ids=st.lists(_IDS, unique=True, max_size=6),
    used=st.sets(_IDS),
    cut_at=st.sets(st.integers(0, 5), max_size=2),
)
def test_without_a_redactor_the_ids_are_those_a_redactor_that_changes_nothing_gives(
    ids: list[str], used: set[str], cut_at: set[int]
) -> None:
    """The shortcut taken when nothing is redacted (no redactor, no truncated call, no ID used
    before) gives what the general path gives with a redactor that changes none of these IDs."""
    response = _response(ids, cut_at)
    shortcut_used, general_used = set(used), set(used)
    shortcut = _with_fresh_identities(response, None, shortcut_used)
    general = _with_fresh_identities(response, SecretRedactor(["never-in-an-id"]), general_used)
    assert shortcut_used == general_used
    assert [c.id for c in shortcut.tool_calls] == [c.id for c in general.tool_calls]
    assert [t.id for t in shortcut.truncated_calls] == [t.id for t in general.truncated_calls]


class _SummarizeOnceCallsAreRecorded:
    """A compactor that summarizes the whole log once it records a tool call (not before)."""

    def __init__(self) -> None:
        self.compacted = 0

    async def compact(self, request: CompactionRequest) -> Sequence[CompactionCreated]:
        if self.compacted or not _recorded_ids(list(request.entries)):
            return []
        self.compacted += 1
        return await summarize_everything(request)


async def test_a_call_id_a_compaction_took_out_of_the_prompt_during_the_run_gets_a_fresh_one(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The run's own earlier call is no longer in the prompt once a compaction summarized it; its
    ID is still the conversation's, so the model's reuse of it is renamed."""
    probe, tool = HandlerProbe(), forecast_tool()
    agent = make_agent(tool, policy=make_policy(context_token_limit=20))
    compactor = _SummarizeOnceCallsAreRecorded()
    model = TrackingModel(
        [
            Turn.tool_calls(("forecast", {"city": "Oslo"}, "call_0")),
            Turn.text("Oslo was asked about."),  # the summary
            Turn.tool_calls(("forecast", {"city": "Rome"}, "call_0")),
            Turn.text("Done."),
        ]
    )
    layer = (
        agent.toolkit.handlers({tool: probe.forecast()})
        + model.layer()
        + Layer.succeed(CompactorService, compactor)
    )
    async with open_runtime(layer, agents=[agent]) as runtime:
        events = await run_events(runtime, agent, "Oslo, then Rome, please, with all details.")
        log = list(await runtime.log.entries(events[0].conversation_id))
    assert isinstance(events[-1], RunCompleted)
    assert compactor.compacted == 1
    # The request after the compaction held no call: the model's "call_0" was free by the prompt.
    assert _calls_and_results(model.requests[2]) == ([], [])
    assert _recorded_ids(log) == ["call_0", "call_0-2"]
    assert [s.tool_call_id for s in records_of(log, ToolCallSettled)] == ["call_0", "call_0-2"]


@given(used=st.sets(st.text(max_size=8), max_size=80), asked=st.lists(st.text(max_size=8)))
def test_the_filter_of_used_ids_never_says_a_used_id_is_new(
    used: set[str], asked: list[str]
) -> None:
    """The Bloom filter may say an ID was used when it was not (the exact set is then made);
    never the other way round."""
    from effectagent.engine._model_step import UsedCallIds, id_bits

    filtered = UsedCallIds((), frozenset(used), id_bits(used))
    for call_id in [*used, *asked]:
        if call_id in used:
            assert filtered.bits & id_bits([call_id])  # "may have been used"
    assert filtered.ids() == used
