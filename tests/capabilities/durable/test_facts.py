"""What a run's records say about a suspension, which no record marks: the facts the classifier
decides from (``FactsFolder``) and the crash point an append crosses (``crossed_by``). Pure."""

from __future__ import annotations

import json
from typing import Any

import attrs

from capabilities.durable._facts import FactsFolder
from capabilities.durable._failpoints import crossed_by
from effectagent.core import (
    ApprovalRequest,
    LogEntry,
    ModelResponseRecorded,
    Record,
    ToolApprovalRequested,
    ToolCallPrepared,
    UsageDelta,
    UserInputRecorded,
    approval_decided,
)

CONV, RUN = "c", "r"


def _response(*calls: str) -> ModelResponseRecorded:
    content: list[tuple[str, Any]] = [
        ("tool-call", {"id": call, "name": "pay", "arguments": json.dumps({})}) for call in calls
    ]
    return ModelResponseRecorded(
        conversation_id=CONV,
        run_id=RUN,
        turn=1,
        content=tuple(content),
        finish_reason="tool-calls",
        usage=UsageDelta(1, 1),
        at=0.0,
    )


def _requested(call: str) -> ToolApprovalRequested:
    request = ApprovalRequest(
        run_id=RUN,
        conversation_id=CONV,
        agent="payer",
        tool_name="pay",
        tool_call_id=call,
        summary="Pay",
        targets=(),
        risk="high",
        input_preview={},
        expires_at=0.0,
        arguments_digest="d",
    )
    return ToolApprovalRequested(conversation_id=CONV, run_id=RUN, request=request, at=0.0)


def _prepared(call: str) -> ToolCallPrepared:
    return ToolCallPrepared(
        conversation_id=CONV,
        run_id=RUN,
        turn=1,
        tool_call_id=call,
        tool_name="pay",
        arguments={},
        at=0.0,
    )


_INPUT = UserInputRecorded(
    conversation_id=CONV,
    run_id=RUN,
    input_id="in",
    kind="user",
    text="pay",
    author="ann",
    at=0.0,
)


def _fold(records: list[Record]) -> FactsFolder:
    folder = FactsFolder(RUN)
    for seq, record in enumerate(records, 1):
        folder.add(LogEntry(seq, record))
    return folder


def test_a_batch_whose_requests_wait_is_a_suspension_until_its_calls_are_prepared() -> None:
    asked: list[Record] = [_INPUT, _response("a", "b"), _requested("a"), _requested("b")]
    folder = _fold(asked)
    assert folder.facts().suspended
    assert folder.pending_decisions == ("a", "b")
    decided = approval_decided(_requested("a"), approved=True, decided_by="ann", at=1.0)
    folder = _fold([*asked, decided])
    assert folder.facts().suspended  # a decision does not end it
    assert (folder.pending_decisions, folder.facts().undecided) == (("b",), 1)
    folder = _fold([*asked, decided, _prepared("a")])
    assert not folder.facts().suspended  # the batch went on
    assert folder.pending_decisions == ()


def test_a_batch_without_requests_is_no_suspension() -> None:
    folder = _fold([_INPUT, _response("a")])
    assert not folder.facts().suspended
    assert folder.pending_decisions == ()


def test_an_append_leaving_a_request_undecided_crosses_after_suspend() -> None:
    request = _requested("a")
    decided = approval_decided(request, approved=False, decided_by="rules", at=0.0)
    assert crossed_by([request]) == "after-suspend"
    assert crossed_by([_response("a"), request]) == "after-suspend"
    assert crossed_by([request, _requested("b"), decided]) == "after-suspend"
    # Every request decided in the append that carries it: nothing suspends there.
    assert crossed_by([request, decided]) is None
    assert crossed_by([_response("a"), request, decided]) == "after-model-response"


def test_a_legacy_suspension_record_an_older_version_wrote_changes_nothing() -> None:
    """Logs written before suspensions left no record hold a ``RunSuspendedRecord`` after the
    requests: it still reads (a member of ``Record``) and the facts are the same without it."""
    from effectagent.core._records import RunSuspendedRecord

    legacy = RunSuspendedRecord(
        conversation_id=CONV, run_id=RUN, turn=1, tool_call_ids=("a",), reason="wait", at=0.0
    )
    asked: list[Record] = [_INPUT, _response("a"), _requested("a")]
    with_legacy = _fold([*asked, legacy]).facts()
    assert attrs.evolve(with_legacy, records=3) == _fold(asked).facts()  # one record more
    assert _fold([*asked, legacy]).pending_decisions == ("a",)
