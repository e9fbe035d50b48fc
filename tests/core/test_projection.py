"""The log → prompt projection (CAP-007, RUN-005, RUN-026): compaction adds records and the projection
folds them; nothing in the log is ever edited or deleted."""

from __future__ import annotations

from typing import Any

import attrs
from hypothesis import given
from hypothesis import strategies as st

from effectagent.ai import AssistantMessage, ToolMessage, UserMessage
from effectagent.core import (
    CompactionCreated,
    LogEntry,
    ModelResponseRecorded,
    Record,
    ToolCallSettled,
    ToolSuccess,
    UsageDelta,
    UserInputRecorded,
    project_messages,
)

CONV, RUN = "conv_1", "run_1"


def user(text: str) -> UserInputRecorded:
    return UserInputRecorded(
        conversation_id=CONV,
        run_id=RUN,
        input_id=f"in_{text}",
        kind="user",
        text=text,
        author="user",
        at=0.0,
    )


def answer(text: str, *calls: tuple[str, str], turn: int = 1) -> ModelResponseRecorded:
    content: list[tuple[str, Any]] = [("text", text)]
    content += [("tool-call", {"id": i, "name": n, "arguments": "{}"}) for i, n in calls]
    return ModelResponseRecorded(
        conversation_id=CONV,
        run_id=RUN,
        turn=turn,
        content=tuple(content),
        finish_reason="stop",
        usage=UsageDelta(),
        at=0.0,
    )


def settled(call_id: str, result: Any, *, turn: int = 1) -> ToolCallSettled:
    return ToolCallSettled(
        conversation_id=CONV,
        run_id=RUN,
        turn=turn,
        tool_call_id=call_id,
        tool_name="t",
        outcome=ToolSuccess(call_id, "t", result),
        at=0.0,
    )


def log(*records: Record) -> list[LogEntry]:
    return [LogEntry(i + 1, r) for i, r in enumerate(records)]


def texts(messages: list[Any]) -> list[str]:
    out: list[str] = []
    for m in messages:
        if isinstance(m, UserMessage | AssistantMessage):
            out.extend(getattr(p, "text", f"call:{getattr(p, 'id', '')}") for p in m.content)
        elif isinstance(m, ToolMessage):
            out.extend(f"result:{p.id}={p.result}" for p in m.content)
    return out


def test_history_projects_in_order_with_complete_batches() -> None:
    entries = log(user("hi"), answer("", ("c1", "t")), settled("c1", 1), answer("done"))
    assert texts(project_messages(entries)) == ["hi", "call:c1", "result:c1=1", "done"]


def test_a_tool_call_id_reused_in_a_later_turn_keeps_each_result_with_its_own_call() -> None:
    entries = log(
        user("hi"),
        answer("", ("c1", "t"), turn=1),
        settled("c1", "first", turn=1),
        answer("", ("c1", "t"), turn=2),
        settled("c1", "second", turn=2),
        answer("done", turn=3),
    )
    assert texts(project_messages(entries)) == [
        "hi",
        "call:c1",
        "result:c1=first",
        "call:c1",
        "result:c1=second",
        "done",
    ]
    # And the later call's batch is not complete just because an earlier c1 was settled.
    unsettled = log(user("hi"), answer("", ("c1", "t"), turn=1), settled("c1", 1, turn=1))
    pending = [*unsettled, LogEntry(4, answer("", ("c1", "t"), turn=2))]
    assert texts(project_messages(pending)) == ["hi", "call:c1", "result:c1=1"]


def test_a_batch_without_every_settlement_is_left_out_whole() -> None:
    entries = log(user("hi"), answer("thinking", ("c1", "t"), ("c2", "t")), settled("c1", 1))
    projected = texts(project_messages(entries))
    assert projected == ["hi", "thinking"]  # text kept, no call and no orphan result


def test_summarize_replaces_the_covered_prefix_and_keeps_the_rest() -> None:
    base: list[Record] = [user("one"), answer("two"), user("three")]
    entries = log(
        *base,
        CompactionCreated(
            conversation_id=CONV,
            run_id=RUN,
            turn=2,
            kind="summarize",
            covers_through=2,
            summary="S",
            at=0.0,
        ),
    )
    projected = texts(project_messages(entries))
    assert projected[0].endswith("S")
    assert projected[1:] == ["three"]


def test_clearing_tool_results_replaces_them_with_a_marker() -> None:
    base: list[Record] = [user("q"), answer("", ("c1", "t")), settled("c1", "big"), answer("a")]
    entries = log(
        *base,
        CompactionCreated(
            conversation_id=CONV,
            run_id=RUN,
            turn=2,
            kind="clear-tool-results",
            covers_through=3,
            summary=None,
            at=0.0,
        ),
    )
    projected = texts(project_messages(entries))
    assert "result:c1=big" not in projected
    assert any(t.startswith("result:c1=") and "ResultCleared" in t for t in projected)


def test_an_invalid_range_is_ignored_fail_safe() -> None:
    base: list[Record] = [user("one"), answer("two")]
    beyond = CompactionCreated(
        conversation_id=CONV,
        run_id=RUN,
        turn=2,
        kind="summarize",
        covers_through=99,
        summary="S",
        at=0.0,
    )
    assert texts(project_messages(log(*base, beyond))) == ["one", "two"]


def test_a_summary_whose_range_cuts_a_batch_is_ignored_fail_safe() -> None:
    base: list[Record] = [
        user("q"),
        answer("", ("c1", "t"), ("c2", "t")),
        settled("c1", "r1"),
        settled("c2", "r2"),
        answer("a"),
    ]
    whole = texts(project_messages(log(*base)))
    for through in (2, 3):  # after the calls, before (some of) their results
        cut = CompactionCreated(
            conversation_id=CONV,
            run_id=RUN,
            turn=2,
            kind="summarize",
            covers_through=through,
            summary="S",
            at=0.0,
        )
        assert texts(project_messages(log(*base, cut))) == whole, through
    after = attrs.evolve(cut, covers_through=4)  # the whole batch: a valid cut, applied
    assert texts(project_messages(log(*base, after)))[1:] == ["a"]


@given(st.lists(st.sampled_from(["user", "answer", "summarize", "clear"]), max_size=20))
def test_projection_never_changes_the_log(kinds: list[str]) -> None:
    records: list[Record] = []
    for i, kind in enumerate(kinds):
        if kind == "user":
            records.append(user(str(i)))
        elif kind == "answer":
            records.append(answer(str(i)))
        else:
            covers = max(1, len(records) // 2)
            if kind == "summarize":
                records.append(
                    CompactionCreated(
                        conversation_id=CONV,
                        run_id=RUN,
                        turn=i,
                        kind="summarize",
                        covers_through=covers,
                        summary="S",
                        at=0.0,
                    )
                )
            else:
                records.append(
                    CompactionCreated(
                        conversation_id=CONV,
                        run_id=RUN,
                        turn=i,
                        kind="clear-tool-results",
                        covers_through=covers,
                        summary=None,
                        at=0.0,
                    )
                )
    entries = log(*records)
    snapshot = [attrs.evolve(e) for e in entries]
    project_messages(entries)
    assert entries == snapshot
