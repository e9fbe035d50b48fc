"""The record codec, exactly (pure, no I/O; ``make mutate`` runs these against
``capabilities/storage/_codec.py``): what each refusal says, which records deliver a steering
input, how migration steps chain, and what makes a ``RunError`` tag unreadable."""

from __future__ import annotations

import itertools
import json
from typing import Any

import attrs
import pytest

from capabilities.storage._codec import RECORD_SCHEMA_VERSION, RecordCodec, record_types
from capabilities.storage._errors import CorruptRecord, UnknownRecordVersion
from effectagent.core import (
    BudgetExhausted,
    Record,
    RunError,
    RunFailedRecord,
    UserInputRecorded,
)

CODEC = RecordCodec()


def _input(kind: Any) -> UserInputRecorded:
    return UserInputRecorded(
        conversation_id="c", run_id="r", input_id="in_1", kind=kind, text="t", author="a", at=1.0
    )


def _failed(error: RunError) -> RunFailedRecord:
    return RunFailedRecord(conversation_id="c", run_id="r", error=error, reason="x", at=1.0)


@pytest.mark.parametrize(
    ("kind", "delivered"),
    [("steering", "in_1"), ("follow-up", "in_1"), ("user", None), ("feedback", None)],
)
def test_a_steering_or_follow_up_input_is_stored_with_its_input_id(
    kind: str, delivered: str | None
) -> None:
    tag, version, body, input_id = CODEC.encode(_input(kind))
    assert (tag, version, input_id) == ("UserInputRecorded", RECORD_SCHEMA_VERSION, delivered)
    assert json.loads(body)["kind"] == kind
    assert CODEC.decode("c", 1, tag, version, body) == _input(kind)


def test_only_members_of_the_record_union_are_records() -> None:
    types = record_types()
    assert types["UserInputRecorded"] is UserInputRecorded
    assert set(types) == {cls.__name__ for cls in types.values()}
    assert CODEC.is_record(_input("user"))
    assert not CODEC.is_record("text")

    @attrs.frozen
    class UserInputRecorded2:
        pass

    look_alike = attrs.make_class("UserInputRecorded", {})()
    assert not CODEC.is_record(look_alike)
    with pytest.raises(TypeError, match=r"^UserInputRecorded is not a member of the Record union$"):
        CODEC.encode(look_alike)
    assert not CODEC.is_record(UserInputRecorded2())


@pytest.mark.parametrize(
    ("tag", "version", "body"),
    [(1, 1, "{}"), ("UserInputRecorded", True, "{}"), ("UserInputRecorded", 1, b"{}")],
)
def test_a_damaged_row_is_refused_in_words(tag: Any, version: Any, body: Any) -> None:
    with pytest.raises(CorruptRecord) as raised:
        CODEC.decode("conv", 7, tag, version, body)
    assert str(raised.value) == (
        "record 7 of conversation conv is damaged: the type tag, version or body is damaged"
    )


def test_what_does_not_decode_says_why() -> None:
    with pytest.raises(CorruptRecord) as raised:
        CODEC.decode("c", 1, "UserInputRecorded", 1, "{not json")
    assert raised.value.detail == "the body is not JSON"
    with pytest.raises(CorruptRecord) as raised:
        CODEC.decode("c", 1, "UserInputRecorded", 1, "{}")
    assert raised.value.detail == "the body does not match UserInputRecorded version 1"
    deep = '{"conversation_id": ' + "[" * 50_000 + "]" * 50_000 + "}"
    with pytest.raises(CorruptRecord) as raised:
        CODEC.decode("c", 1, "UserInputRecorded", 1, deep)
    assert raised.value.detail == "the body is not JSON"  # the parser's own depth limit


def test_a_body_nested_past_the_recursion_limit_does_not_match() -> None:
    run = next(_RUNS)

    @attrs.frozen
    class Wrapped(RunError):
        tag = f"Wrapped{run}"
        inner: RunError | None

    def nest(data: Any) -> Any:  # a step that makes the error nest past the recursion limit
        error: Any = None
        for _ in range(5_000):
            error = {"_tag": Wrapped.tag, "inner": error}
        return {**data, "error": error}

    codec = RecordCodec(version=2, migrations={("RunFailedRecord", 1): nest})
    body = CODEC.encode(_failed(Wrapped(None)))[2]
    back = codec.decode("c", 1, "RunFailedRecord", 2, body)  # no step to run: read as stored
    assert isinstance(back, RunFailedRecord)
    assert type(back.error) is Wrapped
    with pytest.raises(CorruptRecord) as raised:
        codec.decode("c", 1, "RunFailedRecord", 1, body)
    assert raised.value.detail == "the body does not match RunFailedRecord version 2"


def test_a_version_this_code_does_not_know_is_named() -> None:
    with pytest.raises(UnknownRecordVersion) as raised:
        CODEC.decode("c", 4, "UserInputRecorded", 2, "{}")
    error = raised.value
    assert (error.record_type, error.version, error.supported) == ("UserInputRecorded", 2, 1)
    with pytest.raises(UnknownRecordVersion) as raised:
        CODEC.decode("c", 4, "NoSuchRecord", 1, "{}")
    assert (raised.value.record_type, raised.value.version) == ("NoSuchRecord", 1)


def test_migration_steps_run_in_order_from_the_stored_version() -> None:
    ran: list[int] = []

    def step(n: int) -> Any:
        def lift(body: Any) -> Any:
            ran.append(n)
            return body

        return lift

    codec = RecordCodec(
        version=3,
        migrations={("UserInputRecorded", 1): step(1), ("UserInputRecorded", 2): step(2)},
    )
    assert codec.version == 3
    tag, _, body, _ = CODEC.encode(_input("user"))
    assert codec.decode("c", 1, tag, 1, body) == _input("user")
    assert ran == [1, 2]
    assert codec.decode("c", 1, tag, 2, body) == _input("user")
    assert ran == [1, 2, 2]
    assert codec.decode("c", 1, tag, 3, body) == _input("user")
    assert ran == [1, 2, 2]
    assert codec.encode(_input("user"))[1] == 3


def test_a_failing_migration_is_named_without_its_message() -> None:
    def broken(body: Any) -> Any:
        raise KeyError("the stored secret value")

    codec = RecordCodec(version=2, migrations={("UserInputRecorded", 1): broken})
    with pytest.raises(CorruptRecord) as raised:
        codec.decode("conv", 8, "UserInputRecorded", 1, "{}")
    assert (raised.value.conversation_id, raised.value.seq) == ("conv", 8)
    assert raised.value.detail == "migrating UserInputRecorded from version 1 failed (KeyError)"


def test_a_missing_migration_step_is_a_version_this_code_cannot_read() -> None:
    codec = RecordCodec(version=3, migrations={("UserInputRecorded", 2): lambda body: body})
    with pytest.raises(UnknownRecordVersion) as raised:
        codec.decode("conv", 9, "UserInputRecorded", 1, "{}")
    error = raised.value
    assert (error.conversation_id, error.seq) == ("conv", 9)
    assert (error.record_type, error.version, error.supported) == ("UserInputRecorded", 1, 3)


# The RunError classes these tests define stay subclasses of RunError as long as the codec's
# cache holds them: each gets a tag of its own, so a second run in one process finds it alone.
_RUNS = itertools.count()


def test_a_run_error_tag_two_classes_share_cannot_be_written() -> None:
    shared = f"Twin{next(_RUNS)}"

    @attrs.frozen
    class Twin(RunError):
        tag = shared

    @attrs.frozen
    class OtherTwin(RunError):
        tag = shared

    with pytest.raises(
        TypeError, match=rf"^the RunError tag '{shared}' does not name .*Twin alone$"
    ):
        CODEC.encode(_failed(Twin()))
    with pytest.raises(TypeError, match=r"does not name .*OtherTwin alone$"):
        CODEC.encode(_failed(OtherTwin()))
    body = CODEC.encode(_failed(BudgetExhausted("turns", 1, 1)))[2]
    ambiguous = body.replace('"BudgetExhausted"', f'"{shared}"')
    with pytest.raises(CorruptRecord):
        CODEC.decode("c", 1, "RunFailedRecord", 1, ambiguous)


def test_a_run_error_grandchild_class_is_found_by_its_tag() -> None:
    run = next(_RUNS)

    @attrs.frozen
    class Outer(RunError):
        tag = f"Outer{run}"

    @attrs.frozen
    class Inner(Outer):
        tag = f"Inner{run}"
        depth: int

    back = CODEC.decode("c", 1, *CODEC.encode(_failed(Inner(3)))[:3])
    assert isinstance(back, RunFailedRecord)
    assert type(back.error) is Inner
    assert back.error.depth == 3


@pytest.mark.parametrize(
    "error",
    [
        "not an object",
        {"dimension": "turns"},  # no tag
        {"_tag": 7},
        {"_tag": "NoSuchError"},
        {"_tag": "RunError", "extra": 1},
    ],
)
def test_a_stored_run_error_without_a_known_tag_does_not_decode(error: Any) -> None:
    record: Record = _failed(BudgetExhausted("turns", 1, 1))
    data = json.loads(CODEC.encode(record)[2])
    data["error"] = error
    with pytest.raises(CorruptRecord) as raised:
        CODEC.decode("c", 1, "RunFailedRecord", 1, json.dumps(data))
    assert raised.value.detail == "the body does not match RunFailedRecord version 1"


def test_the_base_run_error_stores_its_tag_alone() -> None:
    body = CODEC.encode(_failed(RunError()))[2]
    assert json.loads(body)["error"] == {"_tag": "RunError"}
    back = CODEC.decode("c", 1, "RunFailedRecord", 1, body)
    assert isinstance(back, RunFailedRecord)
    assert type(back.error) is RunError


def test_a_run_error_class_that_is_not_attrs_itself_is_passed_over() -> None:
    class Plain(RunError):  # not an attrs class itself: never a member of the tagged union
        pass

    codec = RecordCodec()  # its table of tags is made now, with Plain among the subclasses
    back = codec.decode("c", 1, *codec.encode(_failed(BudgetExhausted("turns", 2, 2)))[:3])
    assert isinstance(back, RunFailedRecord)
    assert type(back.error) is BudgetExhausted
    with pytest.raises(TypeError, match=r"^the RunError tag 'Plain' does not name .*Plain alone$"):
        codec.encode(_failed(Plain()))
