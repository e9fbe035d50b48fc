"""Steering and follow-ups with images, documents or audio, as a run's input: checked at the
call, sent to the model at the run's next turn, recorded by digest with their bytes kept in the
log's media store (so a resume sends them again), and refused by a model that cannot take them."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from functools import partial
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio

from capabilities import in_memory_storage, sqlite_storage
from capabilities.steering import SteeringService
from capabilities.steering import _inbox as inbox_module
from capabilities.steering._inbox import ConversationInbox
from capabilities.steering._journal import SqliteJournal
from capabilities.storage._database import open_database
from effectagent import Agent, AgentPolicy, Tool, ToolCallContext, Toolkit, open_runtime
from effectagent.ai import (
    DocumentPart,
    ImagePart,
    ModelRequest,
    ResponsePart,
    UserMessage,
)
from effectagent.core import ModelFailed, SecretRedactor, UserInputRecorded
from effectagent.effect import Layer
from effectagent.engine import ConversationLogService, InMemoryConversationLog
from effectagent.providers import MediaSupport
from effectagent.providers._media import media_problem, refused
from effectagent.testing import ScriptedModel, Turn

PNG = b"\x89PNG\r\n\x1a\n" + b"canary-bytes" + bytes(20)
IMAGE = ImagePart(PNG, name="cat.png")
SECRET = "sk-steer-media-canary-0123456789"


@attrs.frozen
class Nothing:
    """No arguments."""


look = Tool("look", "Look around.", parameters=Nothing, success=str)
TOOLKIT = Toolkit(look)
AGENT = Agent("looker", "Describe images.", AgentPolicy(max_turns=10), TOOLKIT)


def _layer(model: Any, submit: Any, storage: Layer | None = None) -> tuple[Layer, dict[str, Any]]:
    """The agent's tool submits (``submit(steering, conversation_id)``) while its call goes."""
    seen: dict[str, Any] = {}

    async def handle(_: Nothing, call: ToolCallContext) -> str:
        seen["receipt"] = await submit(seen["steering"], call.conversation_id)
        return "looked"

    layer = (TOOLKIT.handlers({look: handle}) + model.as_layer()).provide_merge(
        storage or in_memory_storage()
    )
    return layer, seen


def _users(request: ModelRequest) -> list[UserMessage]:
    return [m for m in request.messages if isinstance(m, UserMessage)]


@pytest.mark.parametrize("kind", ["steering", "follow-up"])
async def test_steered_media_reach_the_models_next_request_and_are_recorded_by_digest(
    kind: str,
) -> None:
    async def submit(steering: Any, conversation_id: str) -> Any:
        how = steering.steer if kind == "steering" else steering.follow_up
        return await how(conversation_id, ["And this one?", IMAGE], author="ann")

    answers = (
        [Turn.text("A cat.")] if kind == "steering" else [Turn.text("Looked."), Turn.text("A cat.")]
    )
    model = ScriptedModel([Turn.tool_calls(("look", {})), *answers])
    layer, seen = _layer(model, submit)
    async with open_runtime(layer, agents=[AGENT]) as runtime:
        seen["steering"] = runtime.context[SteeringService]
        result = await runtime.run(AGENT, "Look.")
        entries = list(await runtime.log.entries(result.conversation_id))
        kept = await runtime.log.media([IMAGE.digest])  # type: ignore[attr-defined]
        status = await seen["steering"].status(seen["receipt"].input_id)
    assert result.status == "completed", result.error
    assert seen["receipt"].accepted
    # Steering enters at the next turn (the 2nd request); a follow-up once the agent would stop.
    at = 1 if kind == "steering" else 2
    assert [IMAGE in _users(r)[-1].media for r in model.requests] == [
        i == at for i in range(at + 1)
    ]
    assert _users(model.requests[at])[-1].content[0].text == "And this one?"
    ((seq, record),) = [
        (e.seq, e.record)
        for e in entries
        if isinstance(e.record, UserInputRecorded) and e.record.kind == kind
    ]
    assert record.text == "And this one?"
    assert record.parts == (("text", "And this one?"), ("media", IMAGE.reference()))
    assert "canary" not in repr(record)
    assert kept == {IMAGE.digest: PNG}
    assert status is not None
    assert (status.state, status.seq) == ("delivered", seq)


async def test_media_alone_is_admitted_and_a_text_document_is_redacted_before_the_model() -> None:
    notes = DocumentPart(f"the key is {SECRET}\n".encode(), name="notes.txt")

    async def submit(steering: Any, conversation_id: str) -> Any:
        return [
            await steering.steer(conversation_id, [IMAGE], author="ann"),
            await steering.steer(conversation_id, [f"Read {SECRET}", notes], author="ann"),
        ]

    model = ScriptedModel([Turn.tool_calls(("look", {})), Turn.text("Read.")])
    layer, seen = _layer(model, submit)
    async with open_runtime(layer, agents=[AGENT], secrets=[SECRET]) as runtime:
        seen["steering"] = runtime.context[SteeringService]
        result = await runtime.run(AGENT, "Look.")
        entries = list(await runtime.log.entries(result.conversation_id))
    assert result.status == "completed", result.error
    assert [r.accepted for r in seen["receipt"]] == [True, True]
    image_only, with_notes = _users(model.requests[1])[-2:]
    assert image_only.media == (IMAGE,)
    (sent,) = with_notes.media
    assert SECRET not in sent.data.decode()
    assert SECRET not in with_notes.content[0].text
    assert SECRET not in repr(entries)


@pytest.mark.parametrize(
    ("given", "error", "message"),
    [
        ([], ValueError, "a run's input must not be an empty sequence"),
        (["hi", 3], TypeError, "a run's input holds str and media parts only; item 1 is int"),
        (b"hi", TypeError, "a run's text must be a str or a sequence of str and media parts"),
    ],
)
async def test_a_bad_input_is_refused_at_the_call_and_nothing_is_admitted(
    given: Any, error: type[Exception], message: str
) -> None:
    async def submit(steering: Any, conversation_id: str) -> Any:
        with pytest.raises(error, match=message):
            await steering.steer(conversation_id, given, author="ann")
        return await steering.steer(conversation_id, "Still here.", author="ann")

    model = ScriptedModel([Turn.tool_calls(("look", {})), Turn.text("Done.")])
    layer, seen = _layer(model, submit)
    async with open_runtime(layer, agents=[AGENT]) as runtime:
        seen["steering"] = runtime.context[SteeringService]
        result = await runtime.run(AGENT, "Look.")
        entries = list(await runtime.log.entries(result.conversation_id))
    assert result.status == "completed", result.error
    assert seen["receipt"].position == 1  # the refused input took no place in the FIFO
    steered = [
        e.record
        for e in entries
        if isinstance(e.record, UserInputRecorded) and e.record.kind == "steering"
    ]
    assert [r.text for r in steered] == ["Still here."]


@attrs.define
class TextOnly:
    """A scripted model that takes text only, refusing as the providers do before anything is
    sent (``media_problem``)."""

    inner: ScriptedModel

    def stream(self, request: ModelRequest) -> AsyncIterator[ResponsePart]:
        problem = media_problem(request.messages, MediaSupport.of(), "Scripted", "text-only")
        if problem is not None:
            return refused(problem)
        return self.inner.stream(request)

    async def generate(self, request: ModelRequest) -> Any:  # pragma: no cover - not called
        return await self.inner.generate(request)

    def as_layer(self) -> Layer:
        from effectagent.ai import LanguageModelService

        return Layer.succeed(LanguageModelService, self, name="TextOnly")


async def test_a_model_that_takes_text_only_refuses_the_turn_the_steered_image_reaches() -> None:
    async def submit(steering: Any, conversation_id: str) -> Any:
        return await steering.steer(conversation_id, ["And this?", IMAGE], author="ann")

    inner = ScriptedModel([Turn.tool_calls(("look", {})), Turn.text("never sent")])
    layer, seen = _layer(TextOnly(inner), submit)
    async with open_runtime(layer, agents=[AGENT]) as runtime:
        seen["steering"] = runtime.context[SteeringService]
        result = await runtime.run(AGENT, "Look.")
    assert seen["receipt"].accepted
    assert result.status == "failed"
    assert isinstance(result.error, ModelFailed)
    assert result.error.error_tag == "MediaNotSupported"
    assert "does not take image input (it takes text only)" in str(result.error)
    assert inner.consumed == 1  # the turn with the image was never sent


async def test_a_resumed_run_sends_the_steered_image_again_read_back_by_digest() -> None:
    """A run cut off right after its steering was recorded (a copy of the log up to there, the
    bytes with it) is resumed in a fresh runtime: its next request carries the image."""

    async def submit(steering: Any, conversation_id: str) -> Any:
        return await steering.steer(conversation_id, ["And this one?", IMAGE], author="ann")

    model = ScriptedModel([Turn.tool_calls(("look", {})), Turn.text("A cat.")])
    layer, seen = _layer(model, submit)
    async with open_runtime(layer, agents=[AGENT]) as runtime:
        seen["steering"] = runtime.context[SteeringService]
        done = await runtime.run(AGENT, "Look.")
        entries = list(await runtime.log.entries(done.conversation_id))
        kept = await runtime.log.media([IMAGE.digest])  # type: ignore[attr-defined]
    (cut,) = [
        i
        for i, e in enumerate(entries)
        if isinstance(e.record, UserInputRecorded) and e.record.kind == "steering"
    ]
    copy = InMemoryConversationLog()
    await copy.append(done.conversation_id, [e.record for e in entries[: cut + 1]])
    await copy.put_media(done.conversation_id, kept)
    again = ScriptedModel([Turn.text("Still a cat.")])

    async def never(_: Nothing, call: ToolCallContext) -> str:  # pragma: no cover - not called
        return "looked"

    handlers = TOOLKIT.handlers({look: never})
    layer = handlers + again.as_layer() + Layer.succeed(ConversationLogService, copy)
    async with open_runtime(layer, agents=[AGENT]) as runtime:
        resumed = await runtime.resume(
            AGENT, conversation_id=done.conversation_id, run_id=done.run_id
        )
    assert resumed.status == "completed", resumed.error
    (request,) = again.requests
    assert _users(request)[-1].media == (IMAGE,)


async def test_on_sqlite_steered_media_are_kept_in_the_database_and_sent(tmp_path: Path) -> None:
    async def submit(steering: Any, conversation_id: str) -> Any:
        return await steering.steer(conversation_id, ["And this one?", IMAGE], author="ann")

    model = ScriptedModel([Turn.tool_calls(("look", {})), Turn.text("A cat.")])
    layer, seen = _layer(model, submit, sqlite_storage(tmp_path / "m.db"))
    async with open_runtime(layer, agents=[AGENT]) as runtime:
        seen["steering"] = runtime.context[SteeringService]
        result = await runtime.run(AGENT, "Look.")
        nobody = await seen["steering"].steer("elsewhere", [IMAGE], author="ann")
    assert result.status == "completed", result.error
    assert seen["receipt"].durable
    assert nobody.rejection == "no-active-run"
    assert _users(model.requests[1])[-1].media == (IMAGE,)
    async with open_runtime(sqlite_storage(tmp_path / "m.db")) as reader:
        assert await reader.log.media([IMAGE.digest]) == {IMAGE.digest: PNG}  # type: ignore[attr-defined]


async def test_media_for_a_run_going_in_another_runtime_wait_in_the_database_and_reach_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Input with media for a run another runtime (or process) on the database is running is
    admitted with its parts by digest and its bytes in the ``media`` table, in one transaction
    (the name redacted at rest); the runtime running the run adopts it with its bytes, and the
    model gets the image at the next turn."""
    monkeypatch.setattr(inbox_module, "POLL_INTERVAL", 1e9)  # adopted when the test says so
    path = tmp_path / "shared.db"
    parked, go = trio.Event(), trio.Event()
    secret_name = ImagePart(PNG, name=f"{SECRET}.png")
    redactor = SecretRedactor([SECRET])

    async def park(_: Nothing, call: ToolCallContext) -> str:
        parked.set()
        await go.wait()
        return "looked"

    model = ScriptedModel([Turn.tool_calls(("look", {})), Turn.text("A cat.")])
    running_layer = (TOOLKIT.handlers({look: park}) + model.as_layer()).provide_merge(
        sqlite_storage(path)
    )
    results: list[Any] = []
    async with (
        open_runtime(running_layer, agents=[AGENT], secrets=[SECRET]) as running,
        open_database(path) as database,
        trio.open_nursery() as nursery,
    ):

        async def run() -> None:
            results.append(await running.run(AGENT, "Look.", conversation_id="c", create=True))

        nursery.start_soon(run)
        await parked.wait()
        here = running.context[SteeringService]
        assert isinstance(here, ConversationInbox)
        # Another process's inbox on the file, with the redaction it knows.
        there = ConversationInbox(SqliteJournal(database), redact_text=redactor.redact_text)
        receipt = await there.steer("c", [f"And this? {SECRET}", secret_name], author="bo")
        conn = sqlite3.connect(path)  # what waits at rest
        row = conn.execute(
            "SELECT text, parts FROM steering_inputs WHERE input_id = ?", (receipt.input_id,)
        ).fetchone()
        kept = conn.execute("SELECT data FROM media WHERE digest = ?", (IMAGE.digest,)).fetchone()
        conn.close()
        assert await here.adopt_waiting() == 1
        assert await here.adopt_waiting() == 0  # adopted once
        go.set()
    assert (receipt.accepted, receipt.durable) == (True, True)
    assert SECRET not in repr(row)
    assert kept == (PNG,)
    (result,) = results
    assert result.status == "completed", result.error
    (image,) = _users(model.requests[1])[-1].media
    assert image.data == PNG
    assert _users(model.requests[1])[-1].content[0].text == "And this? [REDACTED]"
    async with open_runtime(sqlite_storage(path)) as reader:
        entries = await reader.log.entries("c")
    (steered,) = [
        e.record
        for e in entries
        if isinstance(e.record, UserInputRecorded) and e.record.kind == "steering"
    ]
    assert [kind for kind, _ in steered.parts] == ["text", "media"]
    assert steered.parts[1][1]["digest"] == IMAGE.digest
    assert SECRET not in repr(entries)


async def test_input_whose_bytes_are_gone_is_left_to_expire_not_delivered_without_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(inbox_module, "POLL_INTERVAL", 1e9)
    path = tmp_path / "shared.db"
    parked, go = trio.Event(), trio.Event()

    async def park(_: Nothing, call: ToolCallContext) -> str:
        parked.set()
        await go.wait()
        return "looked"

    model = ScriptedModel([Turn.tool_calls(("look", {})), Turn.text("Done.")])
    running_layer = (TOOLKIT.handlers({look: park}) + model.as_layer()).provide_merge(
        sqlite_storage(path)
    )
    async with (
        open_runtime(running_layer, agents=[AGENT]) as running,
        open_runtime(sqlite_storage(path)) as other,
        trio.open_nursery() as nursery,
    ):
        nursery.start_soon(partial(running.run, AGENT, "Look.", conversation_id="c", create=True))
        await parked.wait()
        here, there = running.context[SteeringService], other.context[SteeringService]
        assert isinstance(here, ConversationInbox)
        receipt = await there.steer("c", ["And this?", IMAGE], author="bo")
        conn = sqlite3.connect(path)
        conn.execute("DELETE FROM media")
        conn.commit()
        conn.close()
        assert await here.adopt_waiting() == 0
        go.set()
    async with open_runtime(sqlite_storage(path)) as reader:
        status = await reader.context[SteeringService].status(receipt.input_id)
    assert receipt.accepted
    assert status is not None
    assert status.state == "expired"
    assert all(IMAGE not in _users(r)[-1].media for r in model.requests)
