"""A run's input with media on the engine alone (the scripted model): checked at the call, the
model given the parts, events showing descriptions only, and a log that keeps no media bytes
refusing such input with a storage failure that names it, before any request."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from effectagent import Agent, open_runtime
from effectagent.ai import DocumentPart, ImagePart, TextContent, UserMessage
from effectagent.core import LogEntry, Record, RunStarted, StorageFailed
from effectagent.effect import Layer
from effectagent.engine import ConversationLogService, InMemoryConversationLog
from effectagent.testing import ScriptedModel, Turn

PNG = b"\x89PNG\r\n\x1a\n" + b"canary-bytes" + bytes(20)
IMAGE = ImagePart(PNG, name="cat.png")


class TextOnlyLog:
    """A Conversation Log that keeps records but no media bytes."""

    def __init__(self) -> None:
        self.inner = InMemoryConversationLog()

    async def append(self, conversation_id: str, records: Sequence[Record]) -> int:
        return await self.inner.append(conversation_id, records)

    async def entries(self, conversation_id: str, *, after: int = 0) -> Sequence[LogEntry]:
        return await self.inner.entries(conversation_id, after=after)


async def test_the_model_gets_the_parts_and_events_show_only_descriptions() -> None:
    model = ScriptedModel([Turn.text("A cat.")])
    agent = Agent("looker", "Describe images.")
    events: list[Any] = []
    async with (
        open_runtime(model.as_layer(), agents=[agent]) as runtime,
        runtime.stream(agent, ["What is this?", IMAGE]) as stream,
    ):
        events = [event async for event in stream]
    (request,) = model.requests
    (user,) = [m for m in request.messages if isinstance(m, UserMessage)]
    assert user.media == (IMAGE,)
    (started,) = [e for e in events if isinstance(e, RunStarted)]
    digest = IMAGE.digest.removeprefix("sha256:")[:12]
    assert started.input == f"What is this?\n[image: cat.png, 40 bytes, image/png, sha256:{digest}]"
    assert all("canary" not in repr(e) for e in events)


@pytest.mark.parametrize(
    ("given", "error", "message"),
    [
        ([], ValueError, "a run's input must not be an empty sequence"),
        (["hi", 3], TypeError, "a run's input holds str and media parts only; item 1 is int"),
        (b"hi", TypeError, "a run's text must be a str or a sequence of str and media parts"),
        ("", ValueError, "a run's text must not be empty or only spaces"),
        (" \n\t", ValueError, "a run's text must not be empty or only spaces"),
        ([""], ValueError, "a run's input: item 0 is text that is empty or only spaces"),
        ([IMAGE, "  "], ValueError, "a run's input: item 1 is text that is empty or only spaces"),
    ],
)
async def test_a_bad_input_is_refused_at_the_call(
    given: Any, error: type[Exception], message: str
) -> None:
    model = ScriptedModel([])
    agent = Agent("looker", "Describe images.")
    async with open_runtime(model.as_layer(), agents=[agent]) as runtime:
        with pytest.raises(error, match=message):
            await runtime.run(agent, given)
    assert model.requests == []


async def test_a_log_that_keeps_no_media_refuses_it_before_any_request() -> None:
    log = TextOnlyLog()
    model = ScriptedModel([Turn.text("Hi.")])
    agent = Agent("looker", "Describe images.")
    layer = model.as_layer() + Layer.succeed(ConversationLogService, log)
    async with open_runtime(layer, agents=[agent]) as runtime:
        result = await runtime.run(agent, ["What is this?", IMAGE])
        plain = await runtime.run(agent, "Text alone works.")
    assert result.status == "failed"
    assert isinstance(result.error, StorageFailed)
    assert "(TextOnlyLog) of conversation" in str(result.error)
    assert "cannot keep images, documents or audio" in str(result.error)
    assert plain.status == "completed"
    assert len(model.requests) == 1


def test_a_summary_transcript_reads_a_media_part_as_its_description() -> None:
    from capabilities.compaction._transcript import transcript

    message = UserMessage((TextContent("What is this?"), IMAGE))
    shown = transcript([message], lambda messages: 1, 1000)
    assert "User: What is this?[image: cat.png, 40 bytes]" in shown
    assert "canary" not in shown


async def test_a_text_document_is_redacted_like_text_before_the_model_and_the_log_see_it() -> None:
    secret = "sk-canary-0123456789abcdef"
    notes = DocumentPart(f"the key is {secret}\n".encode(), name="notes.txt")
    model = ScriptedModel([Turn.text("Noted.")])
    log = InMemoryConversationLog()
    agent = Agent("reader", "Read.")
    layer = model.as_layer() + Layer.succeed(ConversationLogService, log)
    async with open_runtime(layer, agents=[agent], secrets=[secret]) as runtime:
        result = await runtime.run(agent, [f"Read this, {secret}", notes])
    assert result.status == "completed", result.error
    (request,) = model.requests
    (user,) = [m for m in request.messages if isinstance(m, UserMessage)]
    (sent,) = user.media
    assert secret not in sent.data.decode()
    assert secret not in user.content[0].text
    assert sent.digest != notes.digest
    assert log.media_digests == {sent.digest}


async def test_a_resumed_run_sends_its_inputs_media_again_read_back_by_digest() -> None:
    """A run cut off after its input was recorded (a copy of the log up to there, the bytes with
    it) is resumed in a fresh runtime: its request carries the same image."""
    first = ScriptedModel([Turn.text("A cat.")])
    agent = Agent("looker", "Describe images.")
    log = InMemoryConversationLog()
    layer = first.as_layer() + Layer.succeed(ConversationLogService, log)
    async with open_runtime(layer, agents=[agent]) as runtime:
        done = await runtime.run(agent, ["What is this?", IMAGE])
    entries = list(await log.entries(done.conversation_id))
    (cut,) = [i for i, e in enumerate(entries) if type(e.record).__name__ == "UserInputRecorded"]
    copy = InMemoryConversationLog()
    await copy.append(done.conversation_id, [e.record for e in entries[: cut + 1]])
    await copy.put_media(done.conversation_id, await log.media([IMAGE.digest]))
    again = ScriptedModel([Turn.text("Still a cat.")])
    layer = again.as_layer() + Layer.succeed(ConversationLogService, copy)
    async with open_runtime(layer, agents=[agent]) as runtime:
        resumed = await runtime.resume(
            agent, conversation_id=done.conversation_id, run_id=done.run_id
        )
    assert resumed.status == "completed", resumed.error
    (request,) = again.requests
    (user,) = [m for m in request.messages if isinstance(m, UserMessage)]
    assert user.media == (IMAGE,)
