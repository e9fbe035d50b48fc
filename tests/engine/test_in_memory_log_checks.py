"""The in-memory Conversation Log, used directly, refuses what the storage backends refuse: a
conversation ID no store keeps, records given as text, an ``after`` that is no int — with
nothing appended (it took them all: a 5,000-character ID, a NUL, records as a string's letters)."""

from __future__ import annotations

import pytest

from effectagent.core import ConversationCreated
from effectagent.engine import InMemoryConversationLog


def _created(conversation_id: str) -> ConversationCreated:
    return ConversationCreated(conversation_id=conversation_id, agent="a", at=1.0)


@pytest.mark.parametrize(
    ("conversation_id", "error"),
    [
        (5, TypeError),
        ("", ValueError),
        ("   ", ValueError),
        ("a\x00b", ValueError),
        ("a\ud800b", ValueError),
        ("c" * 513, ValueError),
        ("é" * 257, ValueError),  # 514 bytes of UTF-8
    ],
)
async def test_a_conversation_id_no_store_keeps_is_refused_with_nothing_appended(
    conversation_id: object, error: type[Exception]
) -> None:
    log = InMemoryConversationLog()
    with pytest.raises(error):
        await log.append(conversation_id, [_created("x")])  # type: ignore[arg-type]
    assert log.conversations() == ()


async def test_the_longest_id_a_run_takes_is_kept() -> None:
    log = InMemoryConversationLog()
    for kept in ("c" * 512, "é" * 256):
        assert await log.append(kept, [_created(kept)]) == 1
    assert len(log.conversations()) == 2


async def test_records_given_as_text_and_an_after_that_is_no_int_are_refused() -> None:
    log = InMemoryConversationLog()
    with pytest.raises(TypeError, match="records must be a sequence of records, got str"):
        await log.append("c", "records")  # type: ignore[arg-type]
    assert log.conversations() == ()
    await log.append("c", [_created("c")])
    with pytest.raises(TypeError, match="after must be an int, got str"):
        await log.entries("c", after="0")  # type: ignore[arg-type]
    assert [entry.seq for entry in await log.entries("c")] == [1]
