"""Durable submissions with images, documents or audio, as a run's input: admitted with their
bytes in the database's ``media`` table (one transaction), bound to their idempotency key by
digest, run by the worker with the parts, and never joined into a run going (they wait their
turn); a bad input is refused at the call."""

from __future__ import annotations

from typing import Any

import pytest
import trio

from capabilities.durable._model import (
    IdempotencyConflict,
    RetryBudget,
    WorkerOptions,
    payload_digest,
)
from capabilities.durable._queue import DurableQueue
from capabilities.durable._worker import DurableWorker, _joinable
from capabilities.storage import Connection
from capabilities.storage._log import SqliteConversationLog
from effectagent.ai import ImagePart, ModelRequest, TextContent, UserMessage
from effectagent.core import Agent, UserInputRecorded
from effectagent.testing import FunctionModel

from .helpers import Stores, rows

AGENT = Agent("looker", "Describe images.")
FAST = WorkerOptions(poll_interval=0.02, lease=5.0, retry=RetryBudget(max_attempts=3, base=0.01))
PNG = b"\x89PNG\r\n\x1a\n" + b"canary-bytes" + bytes(20)
IMAGE = ImagePart(PNG, name="cat.png")
OTHER = ImagePart(PNG + b"!", name="cat.png")


async def _submit(q: DurableQueue, text: Any, key: str, mode: Any = "queue") -> Any:
    return await q.submit(
        "looker", text, conversation_id="c", idempotency_key=key, principal="p", mode=mode
    )


async def test_a_worker_runs_a_submission_with_its_image_read_back_by_digest(
    store: Stores,
) -> None:
    seen: list[UserMessage] = []

    def respond(request: ModelRequest) -> str:
        seen.append([m for m in request.messages if isinstance(m, UserMessage)][-1])
        return "A cat."

    async with store.open() as db:
        q = DurableQueue(db)
        receipt = await _submit(q, ["What is\n\nthis?", IMAGE, "Briefly."], "k")
        kept = await rows(db, "SELECT data FROM media WHERE digest = ?", IMAGE.digest)
        at_rest = await rows(db, "SELECT input, parts FROM submissions")
        worker = DurableWorker(db, FunctionModel.layer(respond), [AGENT], options=FAST)
        with trio.fail_after(60):
            await worker.run(until_idle=True)
        found = await q.status(receipt.submission_id)
        entries = await SqliteConversationLog(db).entries("c")
    assert kept == [(PNG,)]
    ((text, parts),) = at_rest
    assert text == "What is\n\nthis?\n\nBriefly."
    assert "canary" not in parts
    assert (found.status, found.settlement) == ("completed", "final")
    (user,) = seen
    shown = [p.text if isinstance(p, TextContent) else p for p in user.content]
    assert shown == ["What is\n\nthis?", IMAGE, "Briefly."]
    assert user.media == (IMAGE,)
    (recorded,) = [e.record for e in entries if isinstance(e.record, UserInputRecorded)]
    assert [kind for kind, _ in recorded.parts] == ["text", "media", "text"]
    assert recorded.parts[1][1]["digest"] == IMAGE.digest


async def test_the_idempotency_key_is_bound_to_the_media_by_digest(store: Stores) -> None:
    async with store.open() as db:
        q = DurableQueue(db)
        first = await _submit(q, ["Look:", IMAGE], "k")
        again = await _submit(q, ["Look:", IMAGE], "k")
        with pytest.raises(IdempotencyConflict):
            await _submit(q, ["Look:", OTHER], "k")
        with pytest.raises(IdempotencyConflict):
            await _submit(q, "Look:", "k")  # the same text without the image is another payload
        plain = await _submit(q, ["Just", "text"], "t")  # str parts alone: text, as before
        count = await rows(db, "SELECT count(*) FROM submissions")
        plain_parts = await rows(
            db, "SELECT parts FROM submissions WHERE submission_id = ?", plain.submission_id
        )
    assert again.submission_id == first.submission_id
    assert count == [(2,)]
    assert plain_parts == [(None,)]
    assert payload_digest("a", "t", "queue") == payload_digest("a", "t", "queue", None)


@pytest.mark.parametrize(
    ("given", "error", "message"),
    [
        ([], ValueError, "a run's input must not be an empty sequence"),
        (["hi", 3], TypeError, "a run's input holds str and media parts only; item 1 is int"),
        (b"hi", TypeError, "a run's text must be a str or a sequence of str and media parts"),
        ("", ValueError, "text must not be empty"),
        ("  \n", ValueError, "text must not be empty"),
        (["Look:", IMAGE, " "], ValueError, "text: item 2 is text that is empty or only spaces"),
    ],
)
async def test_a_bad_input_is_refused_at_the_call_and_nothing_is_admitted(
    store: Stores, given: Any, error: type[Exception], message: str
) -> None:
    async with store.open() as db:
        q = DurableQueue(db)
        with pytest.raises(error, match=message):
            await _submit(q, given, "k")
        assert await rows(db, "SELECT count(*) FROM submissions") == [(0,)]


async def test_a_submission_with_media_never_joins_a_run_going_it_waits_its_turn(
    store: Stores,
) -> None:
    async with store.open() as db:
        q = DurableQueue(db)
        head = await _submit(q, "First.", "h")
        text = await _submit(q, "Join me.", "j1", "join")
        await _submit(q, ["And this?", IMAGE], "j2", "join")
        await _submit(q, "Behind it.", "j3", "join")

        def joinable(conn: Connection) -> list[tuple[str, str, str]]:
            return _joinable(conn, "c", head.submission_id)

        found = await db.read(joinable)
    assert found == [(text.submission_id, "p", "Join me.")]
