"""The projection after runs that ended without an answer (#25 item 3), for any history: the
prompt the next run sends is valid for every provider family — roles alternate, every tool call
has its result — and each run cut off is told to the model as such, once."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from effectagent.ai import AssistantMessage, SystemMessage, TextContent, UserMessage
from effectagent.core import (
    LogEntry,
    ModelFailed,
    ModelResponseRecorded,
    Record,
    RunCompletedRecord,
    RunFailedRecord,
    ToolCallPrepared,
    ToolCallSettled,
    ToolSuccess,
    UsageDelta,
    UserInputRecorded,
    cut_off_note,
    project_messages,
)

from .provider_rules import problems

CONV = "conv"

#: One turn of a run before its answer: a batch of n calls, settled or not, with or without text.
TURN = st.tuples(st.just("batch"), st.integers(1, 3), st.booleans(), st.booleans())
#: How a run ends: with an answer, interrupted or failed (with or without partial text).
ENDING = st.sampled_from(["answer", "interrupted", "failed", "failed-with-text"])
RUN = st.tuples(st.lists(TURN, max_size=3), ENDING)


class Log:
    def __init__(self) -> None:
        self.records: list[Record] = []
        self.calls = 0

    def add(self, *records: Record) -> None:
        self.records.extend(records)

    def response(self, run: str, turn: int, text: str, calls: int) -> list[str]:
        ids = []
        content: list[tuple[str, Any]] = [("text", text)] if text else []
        for _ in range(calls):
            self.calls += 1
            ids.append(f"call_{self.calls}")
            content.append(("tool-call", {"id": ids[-1], "name": "t", "arguments": json.dumps({})}))
        self.add(
            ModelResponseRecorded(
                conversation_id=CONV,
                run_id=run,
                turn=turn,
                content=tuple(content),
                finish_reason="tool-calls" if calls else "stop",
                usage=UsageDelta(),
                at=0.0,
            )
        )
        return ids


def build(runs: list[tuple[list[Any], str]]) -> tuple[list[LogEntry], int]:
    """The log of ``runs``, and how many of them ended without an answer."""
    log = Log()
    cut = 0
    for number, (turns, ending) in enumerate(runs):
        run = f"run_{number}"
        log.add(
            UserInputRecorded(
                conversation_id=CONV,
                run_id=run,
                input_id=f"in_{number}",
                kind="user",
                text=f"question {number}",
                author="ann",
                at=0.0,
            )
        )
        stopped = False
        for turn, (_, calls, settled, with_text) in enumerate(turns, 1):
            ids = log.response(run, turn, "let me look" if with_text else "", calls)
            for call in ids:
                log.add(
                    ToolCallPrepared(
                        conversation_id=CONV,
                        run_id=run,
                        turn=turn,
                        tool_call_id=call,
                        tool_name="t",
                        arguments={},
                        at=0.0,
                    )
                )
            if not settled:  # the run stops here, its batch not committed
                ending = "interrupted" if ending == "answer" else ending
                stopped = True
                break
            log.add(
                *[
                    ToolCallSettled(
                        conversation_id=CONV,
                        run_id=run,
                        turn=turn,
                        tool_call_id=call,
                        tool_name="t",
                        outcome=ToolSuccess(call, "t", "ok"),
                        at=0.0,
                    )
                    for call in ids
                ]
            )
        if ending == "answer":
            log.response(run, len(turns) + 1, f"answer {number}", 0)
            log.add(
                RunCompletedRecord(
                    conversation_id=CONV, run_id=run, output="x", finish_reason="stop", at=0.0
                )
            )
            continue
        cut += 1
        if ending == "failed-with-text" and not stopped:
            log.response(run, len(turns) + 1, "not JSON", 0)
        error = None if ending == "interrupted" else ModelFailed("AuthenticationFailed", "no")
        reason = "interrupted" if error is None else error.tag
        log.add(
            RunFailedRecord(conversation_id=CONV, run_id=run, error=error, reason=reason, at=0.0)
        )
    return [LogEntry(seq, r) for seq, r in enumerate(log.records, 1)], cut


@given(runs=st.lists(RUN, min_size=1, max_size=4))
def test_the_next_prompt_after_any_history_is_valid_for_every_provider(
    runs: list[tuple[list[Any], str]],
) -> None:
    entries, cut = build(runs)
    history = project_messages(entries)
    prompt = (SystemMessage("Answer."), *history, UserMessage.text("next question"))
    assert problems(prompt) == {}
    notes = [
        part.text
        for message in history
        if isinstance(message, AssistantMessage)
        for part in message.content
        if isinstance(part, TextContent) and part.text.startswith("[This answer was cut off")
    ]
    assert len(notes) == cut


def test_the_note_says_why_the_run_ended() -> None:
    interrupted = RunFailedRecord(
        conversation_id=CONV, run_id="r", error=None, reason="interrupted", at=0.0
    )
    failed = RunFailedRecord(
        conversation_id=CONV,
        run_id="r",
        error=ModelFailed("AuthenticationFailed", "no"),
        reason="ModelFailed",
        at=0.0,
    )
    assert cut_off_note(interrupted) == (
        "[This answer was cut off: the run was interrupted before it finished.]"
    )
    assert cut_off_note(failed) == (
        "[This answer was cut off: the run failed (ModelFailed) before it finished.]"
    )


def test_a_partial_answer_is_kept_and_the_note_joins_it() -> None:
    entries, _ = build([([], "failed-with-text")])
    (user, assistant) = project_messages(entries)
    assert user == UserMessage.text("question 0")
    assert assistant == AssistantMessage(
        (
            TextContent("not JSON"),
            TextContent(
                "[This answer was cut off: the run failed (ModelFailed) before it finished.]"
            ),
        )
    )
