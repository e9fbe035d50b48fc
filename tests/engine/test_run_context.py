"""Context a host gives a run (``runtime.run(..., context=[ContextItem(...)])``, e.g. an activated
skill): recorded as ``ContextAdded`` before the user's input (CAP-008: what was loaded, and which
version, is in the run's canonical records), read by the model from then on, redacted."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from effectagent.ai import TextContent, UserMessage
from effectagent.core import (
    REDACTED,
    ContextAdded,
    ContextItem,
    ConversationCreated,
    UserInputRecorded,
)
from effectagent.engine import open_runtime
from effectagent.testing import ScriptedModel, Turn

from .helpers import make_agent

SKILL = ContextItem(
    kind="skill",
    source="pdf-forms",
    text="Fill forms field by field.",
    version="1.2.0",
    digest="sha256:abc",
)


def texts(request: object) -> list[str]:
    return [
        part.text
        for message in request.messages  # type: ignore[attr-defined]
        if isinstance(message, UserMessage)
        for part in message.content
        if isinstance(part, TextContent)
    ]


async def test_context_is_recorded_before_the_input_and_read_by_the_model(
    autojump_clock: trio.testing.MockClock,
) -> None:
    model = ScriptedModel([Turn.text("Filled."), Turn.text("Still filled.")])
    agent = make_agent()
    async with open_runtime(model.as_layer(), agents=[agent], secrets=["hunter2"]) as runtime:
        secret = ContextItem(
            kind="skill", source="vault", text="The key is hunter2.", version="0.1.0"
        )
        first = await runtime.run(agent, "Fill the form.", context=[SKILL, secret])
        await runtime.run(agent, "And again.", conversation_id=first.conversation_id)
        log = await runtime.log.entries(first.conversation_id)
    kinds = [type(entry.record) for entry in log[:4]]
    assert kinds == [ConversationCreated, ContextAdded, ContextAdded, UserInputRecorded]
    added = [e.record for e in log if isinstance(e.record, ContextAdded)]
    assert [(a.item.source, a.item.version, a.item.digest) for a in added] == [
        ("pdf-forms", "1.2.0", "sha256:abc"),
        ("vault", "0.1.0", ""),
    ]
    assert added[0].run_id == first.run_id
    assert added[1].item.text == f"The key is {REDACTED}."
    first_request, second_request = model.requests
    assert texts(first_request) == [
        "[Context: skill pdf-forms 1.2.0]\nFill forms field by field.",
        f"[Context: skill vault 0.1.0]\nThe key is {REDACTED}.",
        "Fill the form.",
    ]
    assert texts(second_request)[:2] == texts(first_request)[:2]  # part of the conversation
    assert "hunter2" not in repr(log) + repr(model.requests)


async def test_bad_context_is_refused_before_the_run_starts() -> None:
    agent = make_agent()
    async with open_runtime(ScriptedModel.layer([]), agents=[agent]) as runtime:
        with pytest.raises(TypeError, match="context must hold ContextItem values, got str"):
            await runtime.run(agent, "x", context=["some text"])  # type: ignore[list-item]
        with pytest.raises(TypeError, match="context must be a sequence of ContextItem"):
            runtime.stream(agent, "x", context=SKILL)  # type: ignore[call-overload]
    with pytest.raises(ValueError, match=r"ContextItem\.text must not be empty"):
        ContextItem(kind="skill", source="empty", text=" ")
    with pytest.raises(TypeError, match=r"ContextItem\.version must be a str"):
        ContextItem(kind="skill", source="x", text="text", version=1)  # type: ignore[arg-type]
