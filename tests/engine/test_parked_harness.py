"""The parked-runs benchmark's own checks: every run it starts parks in the handler and completes
with the answer — counted from each conversation's log, so a run that ended any other way fails
the script rather than being measured."""

from __future__ import annotations

import pytest
import trio

from benchmarks import parked
from effectagent.core import ConversationCreated, Record, RunCompletedRecord, RunFailedRecord
from effectagent.engine import InMemoryConversationLog


def test_a_small_measurement_parks_and_completes_every_run() -> None:
    figures = trio.run(parked.measure, 25)
    assert figures.runs == 25


async def test_only_a_conversation_that_ends_with_the_answer_counts() -> None:
    log = InMemoryConversationLog()
    ends: dict[str, Record] = {
        "answered": RunCompletedRecord(
            conversation_id="answered", run_id="r", output=parked.ANSWER, finish_reason="stop", at=1
        ),
        "other": RunCompletedRecord(
            conversation_id="other", run_id="r", output="no", finish_reason="stop", at=1
        ),
        "failed": RunFailedRecord(
            conversation_id="failed", run_id="r", error=None, reason="down", at=1
        ),
    }
    for conversation_id, end in ends.items():
        created = ConversationCreated(conversation_id=conversation_id, agent="parked", at=0)
        await log.append(conversation_id, [created, end])
    created = ConversationCreated(conversation_id="unended", agent="parked", at=0)
    await log.append("unended", [created])
    assert await parked._answered(log) == 1


def test_a_run_that_does_not_answer_fails_the_script(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(parked, "ANSWER", "an answer no run gives")
    with pytest.raises(AssertionError, match="every run must do both"):
        trio.run(parked.measure, 5)
