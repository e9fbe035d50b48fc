"""Steering with media on the engine alone (a test inbox): the input's parts are redacted by the
machine as a run's input is, and a log that keeps no media bytes ends the run ``failed`` with
``StorageFailed`` before the input is recorded or any request carries it."""

from __future__ import annotations

from collections.abc import Sequence

from effectagent import Agent, open_runtime
from effectagent.ai import DocumentPart, ImagePart, TextContent, UserMessage
from effectagent.core import LogEntry, Record, StorageFailed, UserInputRecorded
from effectagent.effect import Layer
from effectagent.engine import (
    ConversationLogService,
    InMemoryConversationLog,
    RunEnding,
    RunInfo,
    SteeringInboxService,
    SteeringInput,
)
from effectagent.engine._machine import _admitted
from effectagent.testing import ScriptedModel, Turn

IMAGE = ImagePart(b"\x89PNG\r\n\x1a\n" + b"canary-bytes" + bytes(20), name="cat.png")
SECRET = "sk-steer-canary-0123456789abcdef"


class FollowUpInbox:
    """Hands ``items`` over as follow-ups once, when the agent would first stop."""

    def __init__(self, *items: SteeringInput) -> None:
        self.items = list(items)

    def drain_steering(self, conversation_id: str) -> Sequence[SteeringInput]:
        return ()

    def take_follow_ups(self, conversation_id: str) -> Sequence[SteeringInput]:
        taken, self.items = self.items, []
        return taken

    async def run_started(self, run: RunInfo) -> None:
        pass

    async def run_ended(self, run: RunInfo, ending: RunEnding) -> None:
        pass


class TextOnlyLog:
    """A Conversation Log that keeps records but no media bytes."""

    def __init__(self) -> None:
        self.inner = InMemoryConversationLog()

    async def append(self, conversation_id: str, records: Sequence[Record]) -> int:
        return await self.inner.append(conversation_id, records)

    async def entries(self, conversation_id: str, *, after: int = 0) -> Sequence[LogEntry]:
        return await self.inner.entries(conversation_id, after=after)


async def test_a_log_that_keeps_no_media_ends_the_run_before_it_records_or_sends_them() -> None:
    log = TextOnlyLog()
    item = SteeringInput.of("in_1", "follow-up", ["And this?", IMAGE], "ann", 0.0)
    model = ScriptedModel([Turn.text("Hello."), Turn.text("never sent")])
    agent = Agent("looker", "Describe images.")
    layer = (
        model.as_layer()
        + Layer.succeed(ConversationLogService, log)
        + Layer.succeed(SteeringInboxService, FollowUpInbox(item))
    )
    async with open_runtime(layer, agents=[agent]) as runtime:
        result = await runtime.run(agent, "Hi.")
    assert result.status == "failed"
    assert isinstance(result.error, StorageFailed)
    assert "cannot keep images, documents or audio" in str(result.error)
    assert model.consumed == 1
    entries = await log.entries(result.conversation_id)
    assert [e.record.kind for e in entries if isinstance(e.record, UserInputRecorded)] == ["user"]


def test_the_machine_redacts_the_text_parts_and_text_documents_of_admitted_input() -> None:
    notes = DocumentPart(f"key {SECRET}\n".encode(), name="notes.txt")
    plain = SteeringInput("in_0", "steering", f"just {SECRET}", "ann", 0.0)
    media = SteeringInput.of("in_1", "steering", [f"see {SECRET}", notes, IMAGE], "ann", 0.0)
    record, messages = _admitted(lambda text: text.replace(SECRET, "[REDACTED]"), (plain, media))
    assert record.texts == ("just [REDACTED]", "see [REDACTED]")
    assert record.contents[0] is None
    text, document, image = messages[1].content
    assert text == TextContent("see [REDACTED]")
    assert isinstance(document, DocumentPart)
    assert document.data == b"key [REDACTED]\n"
    assert image == IMAGE
    assert messages[0] == UserMessage.text("just [REDACTED]")
    assert record.contents[1] == messages[1].content
    # Text alone everywhere: nothing beside the texts (the common case costs nothing more).
    assert _admitted(str, (plain,))[0].contents == ()
