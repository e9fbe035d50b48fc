"""Records as stored: a tagged union over the record classes with a schema version — every record
type reads back exactly; what cannot be read back is a typed error naming where, never what."""

from __future__ import annotations

import json
from typing import Any, get_args

import attrs
import pytest
from hypothesis import given

from capabilities.storage._codec import RECORD_SCHEMA_VERSION, RecordCodec
from capabilities.storage._errors import CorruptRecord, UnknownRecordVersion
from effectagent.core import (
    BudgetExhausted,
    Record,
    RunError,
    RunFailedRecord,
    ToolCallSettled,
    ToolSuccess,
)

from ..records import RECORDS, RUN_ERRORS, same

CODEC = RecordCodec()


def test_every_record_type_and_every_run_error_is_generated() -> None:
    """The round-trip property below covers the whole union (the strategy is derived from it)."""
    assert len(get_args(Record)) >= 11
    assert {cls.__name__ for cls in RUN_ERRORS} >= {"BudgetExhausted", "EngineDefect", "RunError"}


@given(record=RECORDS)
def test_every_record_reads_back_equal_with_its_tag_and_version(record: Any) -> None:
    """Invariant: decode(encode(r)) == r for every canonical record (exception-valued fields:
    same type, same fields); the stored tag is the record's class, the version the current one,
    and the body is plain ASCII JSON (a lone surrogate in user text survives SQLite)."""
    tag, version, body, _ = CODEC.encode(record)
    assert tag == type(record).__name__
    assert version == RECORD_SCHEMA_VERSION
    assert body.isascii()
    json.loads(body)
    back = CODEC.decode("conv", 7, tag, version, body)
    assert same(back, record), (back, record)
    if not isinstance(getattr(record, "error", None), BaseException):
        assert back == record


def test_a_run_error_keeps_its_subclass_and_fields() -> None:
    """Encoding a field declared ``RunError`` by its declared class would drop the subclass: the
    stored form carries the error's tag."""
    record = RunFailedRecord(
        conversation_id="c",
        run_id="r",
        error=BudgetExhausted("turns", 3.0, 3.0),
        reason="BudgetExhausted",
        at=1.0,
    )
    _, _, body, _ = CODEC.encode(record)
    assert json.loads(body)["error"] == {
        "_tag": "BudgetExhausted",
        "dimension": "turns",
        "used": 3.0,
        "limit": 3.0,
    }  # (its refused_batch at its default, 0, is not stored)
    back = CODEC.decode("c", 1, *CODEC.encode(record)[:3])
    assert isinstance(back, RunFailedRecord)
    assert type(back.error) is BudgetExhausted
    assert attrs.astuple(back.error) == ("turns", 3.0, 3.0, 0)
    refused = attrs.evolve(record, error=BudgetExhausted("tool_calls", 3.0, 2.0, 3))
    _, _, body, _ = CODEC.encode(refused)
    assert json.loads(body)["error"]["refused_batch"] == 3
    again = CODEC.decode("c", 1, *CODEC.encode(refused)[:3])
    assert isinstance(again, RunFailedRecord)
    assert isinstance(again.error, BudgetExhausted)
    assert attrs.astuple(again.error) == ("tool_calls", 3.0, 2.0, 3)


def test_the_base_run_error_reads_back_too() -> None:
    record = RunFailedRecord(
        conversation_id="c", run_id="r", error=RunError(), reason="RunError", at=1.0
    )
    back = CODEC.decode("c", 1, *CODEC.encode(record)[:3])
    assert isinstance(back, RunFailedRecord)
    assert type(back.error) is RunError


def test_a_run_error_defined_later_is_found_by_its_tag() -> None:
    @attrs.frozen
    class QuotaGone(RunError):
        tenant: str

    record = RunFailedRecord(
        conversation_id="c", run_id="r", error=QuotaGone("acme"), reason="QuotaGone", at=1.0
    )
    back = CODEC.decode("c", 1, *CODEC.encode(record)[:3])
    assert isinstance(back, RunFailedRecord)
    assert type(back.error) is QuotaGone
    assert back.error.tenant == "acme"


SETTLED = ToolCallSettled(
    conversation_id="c",
    run_id="r",
    turn=1,
    tool_call_id="t1",
    tool_name="ping",
    outcome=ToolSuccess("t1", "ping", {"n": 1}),
    at=2.0,
)


@pytest.mark.parametrize(
    ("tag", "version", "body", "error", "detail"),
    [
        ("ToolCallSettled", 1, "{not json", CorruptRecord, "not JSON"),
        ("ToolCallSettled", 1, "NaN", CorruptRecord, "not JSON"),
        ("ToolCallSettled", 1, '{"conversation_id": "c"}', CorruptRecord, "does not match"),
        ("ToolCallSettled", 1, "[" * 100_000 + "]" * 100_000, CorruptRecord, ""),
        ("ToolCallSettled", "1", "{}", CorruptRecord, "damaged"),
        ("ToolCallSettled", 0, "{}", CorruptRecord, "damaged"),
        ("ToolCallSettled", 2, "{}", UnknownRecordVersion, ""),
        ("RecordFromTheFuture", 1, "{}", UnknownRecordVersion, ""),
    ],
)
def test_what_does_not_read_back_is_a_typed_error_naming_conversation_and_seq(
    tag: Any, version: Any, body: str, error: type[Exception], detail: str
) -> None:
    with pytest.raises(error) as raised:
        CODEC.decode("conv-9", 42, tag, version, body)
    assert raised.value.conversation_id == "conv-9"  # type: ignore[attr-defined]
    assert raised.value.seq == 42  # type: ignore[attr-defined]
    assert detail in str(raised.value)


def test_an_error_never_quotes_the_stored_value() -> None:
    secret = "hunter2-the-users-own-words"
    body = json.dumps(
        {**json.loads(CODEC.encode(SETTLED)[2]), "turn": secret}  # a string where an int goes
    )
    with pytest.raises(CorruptRecord) as raised:
        CODEC.decode("c", 3, "ToolCallSettled", 1, body)
    assert secret not in str(raised.value)
    assert secret not in repr(raised.value)


def test_older_versions_are_lifted_by_registered_steps() -> None:
    """A record written at version 1 by an older layout reads through the steps to version 2."""

    def add_nothing(body: Any) -> Any:
        return body

    codec = RecordCodec(version=2, migrations={("ToolCallSettled", 1): add_nothing})
    tag, _, body, _ = CODEC.encode(SETTLED)
    assert codec.decode("c", 1, tag, 1, body) == SETTLED
    with pytest.raises(UnknownRecordVersion):  # no step registered for this type
        codec.decode("c", 1, "ConversationCreated", 1, "{}")
