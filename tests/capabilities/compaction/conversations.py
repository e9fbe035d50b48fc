"""Generated conversations for the compaction properties: logs as the engine writes them — user
inputs, model responses with batches of tool calls (IDs reused across turns), settlements with
results of every size, run endings, some earlier compactions (valid or not) — ending at a point
where the engine compacts: after a user input, or after a complete batch."""

from __future__ import annotations

import json
from typing import Any

import attrs
from hypothesis import strategies as st

from effectagent.core import (
    ApprovalRequest,
    CompactionCreated,
    ContextAdded,
    ContextItem,
    ConversationCreated,
    LogEntry,
    ModelResponseRecorded,
    Record,
    RunCompletedRecord,
    ToolApprovalRequested,
    ToolCallPrepared,
    ToolCallSettled,
    ToolFailure,
    ToolSuccess,
    UsageDelta,
    UserInputRecorded,
)

CONVERSATION = "conv_1"


@attrs.frozen
class Conversation:
    """A generated log; ``spans`` are the (response seq, last settlement seq) of every batch;
    ``last_messages`` how many messages the newest unit renders (1: a user input, 2: a batch, 3: a
    batch a concurrent run wrote a user input into)."""

    entries: tuple[LogEntry, ...]
    spans: tuple[tuple[int, int], ...]
    last_messages: int


class _Log:
    def __init__(self) -> None:
        self.entries: list[LogEntry] = []

    def add(self, record: Record) -> int:
        seq = len(self.entries) + 1
        self.entries.append(LogEntry(seq, record))
        return seq


def _text(draw: st.DrawFn, largest: int) -> str:
    size = draw(st.integers(0, largest))
    word = draw(st.sampled_from(["alpha", "beta", "gamma", "delta"]))
    return (word + " ") * (size // 6) + word


def _batch(draw: st.DrawFn, log: _Log, run: str, turn: int, spans: list[tuple[int, int]]) -> int:
    """Add a batch of tool calls; return how many messages it renders (its unit's): the call and
    the results, and a concurrent run's input written in between (rendered after the results)."""
    calls = draw(st.integers(1, 3))
    content: list[tuple[str, Any]] = []
    if draw(st.booleans()):
        content.append(("text", _text(draw, 200)))
    for index in range(calls):
        arguments = json.dumps({"q": _text(draw, 60)})
        content.append(
            ("tool-call", {"id": f"call_{index}", "name": "fetch", "arguments": arguments})
        )
    response = log.add(
        ModelResponseRecorded(
            conversation_id=CONVERSATION,
            run_id=run,
            turn=turn,
            content=tuple(content),
            finish_reason="tool-calls",
            usage=UsageDelta(),
            at=0.0,
        )
    )
    for index in range(calls):
        log.add(
            ToolCallPrepared(
                conversation_id=CONVERSATION,
                run_id=run,
                turn=turn,
                tool_call_id=f"call_{index}",
                tool_name="fetch",
                arguments={},
                at=0.0,
            )
        )
        if draw(st.integers(0, 5)) == 0:
            request = ApprovalRequest(
                run, CONVERSATION, "agent", "fetch", f"call_{index}", "", (), "low", {}, 0.0
            )
            log.add(
                ToolApprovalRequested(
                    conversation_id=CONVERSATION, run_id=run, request=request, at=0.0
                )
            )
    last = response
    meanwhile = draw(st.integers(0, 7)) == 0
    if meanwhile:  # a concurrent run of the conversation writes in between
        log.add(
            UserInputRecorded(
                conversation_id=CONVERSATION,
                run_id="run_other",
                input_id="in_other",
                kind="user",
                text="meanwhile",
                author="bo",
                at=0.0,
            )
        )
    for index in range(calls):
        result = _text(draw, 6000)
        outcome = (
            ToolSuccess(f"call_{index}", "fetch", result)
            if draw(st.integers(0, 4))
            else ToolFailure(f"call_{index}", "fetch", {"_tag": "Oops", "message": result[:80]})
        )
        last = log.add(
            ToolCallSettled(
                conversation_id=CONVERSATION,
                run_id=run,
                turn=turn,
                tool_call_id=f"call_{index}",
                tool_name="fetch",
                outcome=outcome,
                at=0.0,
            )
        )
    spans.append((response, last))
    return 3 if meanwhile else 2


@st.composite
def conversations(
    draw: st.DrawFn,
    *,
    max_runs: int = 6,
    earlier_compactions: bool = True,
    input_chars: int = 400,
    summary_chars: int = 0,
) -> Conversation:
    """A conversation (see the module notes): user inputs of up to ``input_chars`` characters;
    earlier summaries of up to ``summary_chars`` (0: a few words, naming what they cover)."""
    log = _Log()
    spans: list[tuple[int, int]] = []
    log.add(ConversationCreated(conversation_id=CONVERSATION, agent="agent", at=0.0))
    runs = draw(st.integers(1, max_runs))
    last_messages = 1
    for number in range(runs):
        run = f"run_{number}"
        log.add(
            UserInputRecorded(
                conversation_id=CONVERSATION,
                run_id=run,
                input_id=f"in_{number}",
                kind="user",
                text=_text(draw, input_chars),
                author="ann",
                at=0.0,
            )
        )
        last_messages = 1
        batches = draw(st.integers(0, 3))
        final = number < runs - 1 or draw(st.booleans())
        for turn in range(1, batches + 1):
            last_messages = _batch(draw, log, run, turn, spans)
        if final:
            answer = (("text", _text(draw, 300)),)
            log.add(
                ModelResponseRecorded(
                    conversation_id=CONVERSATION,
                    run_id=run,
                    turn=batches + 1,
                    content=answer,
                    finish_reason="stop",
                    usage=UsageDelta(),
                    at=0.0,
                )
            )
            log.add(
                RunCompletedRecord(
                    conversation_id=CONVERSATION,
                    run_id=run,
                    output=None,
                    finish_reason="stop",
                    at=0.0,
                )
            )
            if number == runs - 1:  # the engine compacts before a new run's first turn
                log.add(
                    UserInputRecorded(
                        conversation_id=CONVERSATION,
                        run_id="run_next",
                        input_id="in_next",
                        kind="user",
                        text="and now?",
                        author="ann",
                        at=0.0,
                    )
                )
                last_messages = 1
        if earlier_compactions and number < runs - 1 and draw(st.integers(0, 3)) == 0:
            covers = draw(st.integers(0, len(log.entries) + 1))
            kind: Any = draw(st.sampled_from(["summarize", "clear-tool-results"]))
            summary = f"summary through {covers}" if kind == "summarize" else None
            if summary is not None and summary_chars:
                summary += " " + _text(draw, summary_chars)
            log.add(
                CompactionCreated(
                    conversation_id=CONVERSATION,
                    run_id=run,
                    turn=0,
                    kind=kind,
                    covers_through=covers,
                    summary=summary,
                    at=0.0,
                )
            )
    return Conversation(tuple(log.entries), tuple(spans), last_messages)


@st.composite
def interleaved(draw: st.DrawFn) -> Conversation:
    """A log of any shape the records allow, beyond what one engine writes: the batches of
    several runs interleaved (their calls settled in any order, some never), context items, text
    answers, user inputs and earlier compactions anywhere; it ends with a user input."""
    log = _Log()
    log.add(ConversationCreated(conversation_id=CONVERSATION, agent="agent", at=0.0))
    pending: list[tuple[str, int, str, int]] = []  # (run, turn, call ID, response seq)
    spans: dict[tuple[str, int], tuple[int, int]] = {}
    turns: dict[str, int] = {}
    steps = ["input", "context", "calls", "answer", "settle", "settle", "compact"]
    for _ in range(draw(st.integers(2, 30))):
        step = draw(st.sampled_from(steps))
        run = draw(st.sampled_from(["run_a", "run_b", "run_c"]))
        if step == "input":
            text = _text(draw, 1200)
            log.add(
                UserInputRecorded(
                    conversation_id=CONVERSATION,
                    run_id=run,
                    input_id="in",
                    kind="user",
                    text=text,
                    author="ann",
                    at=0.0,
                )
            )
        elif step == "context":
            item = ContextItem(kind="skill", source="notes", text=_text(draw, 1200) + ".")
            log.add(ContextAdded(conversation_id=CONVERSATION, run_id=run, item=item, at=0.0))
        elif step in ("calls", "answer"):
            turn = turns[run] = turns.get(run, 0) + 1
            calls = draw(st.integers(1, 3)) if step == "calls" else 0
            content: list[tuple[str, Any]] = [("text", _text(draw, 600))]
            for index in range(calls):
                arguments = json.dumps({"q": _text(draw, 300)})
                spec = {"id": f"call_{index}", "name": "f", "arguments": arguments}
                content.append(("tool-call", spec))
            seq = log.add(
                ModelResponseRecorded(
                    conversation_id=CONVERSATION,
                    run_id=run,
                    turn=turn,
                    content=tuple(content),
                    finish_reason="tool-calls" if calls else "stop",
                    usage=UsageDelta(),
                    at=0.0,
                )
            )
            pending.extend((run, turn, f"call_{index}", seq) for index in range(calls))
        elif step == "settle" and pending:
            run, turn, call, response = pending.pop(draw(st.integers(0, len(pending) - 1)))
            outcome = ToolSuccess(call, "f", _text(draw, 6000))
            seq = log.add(
                ToolCallSettled(
                    conversation_id=CONVERSATION,
                    run_id=run,
                    turn=turn,
                    tool_call_id=call,
                    tool_name="f",
                    outcome=outcome,
                    at=0.0,
                )
            )
            spans[(run, turn)] = (response, seq)
        elif step == "compact" and len(log.entries) > 2:
            kind: Any = draw(st.sampled_from(["summarize", "clear-tool-results"]))
            log.add(
                CompactionCreated(
                    conversation_id=CONVERSATION,
                    run_id=run,
                    turn=0,
                    kind=kind,
                    covers_through=draw(st.integers(1, len(log.entries))),
                    summary="an earlier summary" if kind == "summarize" else None,
                    at=0.0,
                )
            )
    log.add(
        UserInputRecorded(
            conversation_id=CONVERSATION,
            run_id="run_next",
            input_id="in_next",
            kind="user",
            text="and now?",
            author="ann",
            at=0.0,
        )
    )
    return Conversation(tuple(log.entries), tuple(sorted(spans.values())), 1)
