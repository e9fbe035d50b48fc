"""The in-memory log's retention counts and frees media bytes (#28 item 4's gap): each
conversation that refers to a digest is charged its size, and the bytes go when the last kept
conversation referring to them is evicted — so many conversations with images coming and going
under a small retention hold no more than the cap, and a digest a kept conversation still
refers to stays readable."""

from __future__ import annotations

import gc
import hashlib
import tracemalloc
from typing import Any

import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from effectagent import Agent, Layer, open_runtime
from effectagent.ai import ImagePart
from effectagent.core import RunCompletedRecord, UserInputRecorded
from effectagent.engine import ConversationLogService, InMemoryConversationLog, LogRetention
from effectagent.engine._media import SHELF_ENTRY_BYTES, MediaShelf
from effectagent.testing import FunctionModel

#: Distinct byte strings of different sizes, a pool conversations draw their media from (so
#: some share a digest).
POOL = [bytes([n]) * (500 + 300 * n) for n in range(8)]


def _digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _reference(data: bytes) -> dict[str, object]:
    return {
        "kind": "image",
        "media_type": "image/png",
        "name": "",
        "size": len(data),
        "digest": _digest(data),
    }


def _input(conversation_id: str, run_id: str, blobs: list[bytes]) -> UserInputRecorded:
    return UserInputRecorded(
        conversation_id=conversation_id,
        run_id=run_id,
        input_id=f"input-{run_id}",
        kind="user",
        text="look",
        author="user",
        at=0.0,
        parts=(("text", "look"), *(("media", _reference(data)) for data in blobs)),
    )


def _ended(conversation_id: str, run_id: str) -> RunCompletedRecord:
    return RunCompletedRecord(
        conversation_id=conversation_id, run_id=run_id, output="ok", finish_reason="stop", at=0.0
    )


# ---- the shelf, pure ---------------------------------------------------------------------------

operations = st.lists(
    st.tuples(
        st.sampled_from(["put", "refer", "drop"]),
        st.integers(0, 4),  # the conversation
        st.sets(st.integers(0, len(POOL) - 1), max_size=3),  # the digests (pool indices)
    ),
    max_size=40,
)


@settings(max_examples=200, deadline=None)
@given(steps=operations)
def test_for_every_sequence_the_shelf_keeps_exactly_the_digests_referred_to(
    steps: list[tuple[str, int, set[int]]],
) -> None:
    """For every sequence of puts, references and drops: the bytes kept are those of the
    digests some conversation refers to — each readable, the rest freed — their size is
    counted once, and a conversation is charged each digest once, for the bytes and an entry."""
    shelf = MediaShelf()
    refers: dict[int, set[int]] = {}  # the model: conversation -> pool indices
    for action, conversation, chosen in steps:
        name = f"c{conversation}"
        if action == "drop":
            shelf.drop(name)
            refers.pop(conversation, None)
            continue
        kept_before = {i for mine in refers.values() for i in mine}
        if action == "put":
            new = chosen - refers.get(conversation, set())
            charged = shelf.put(name, {_digest(POOL[i]): POOL[i] for i in chosen})
        else:  # a record naming digests: only the kept ones count
            new = (chosen & kept_before) - refers.get(conversation, set())
            charged = shelf.refer(name, [_digest(POOL[i]) for i in chosen])
        assert charged == sum(len(POOL[i]) + 33 + SHELF_ENTRY_BYTES for i in new)
        if new:
            refers.setdefault(conversation, set()).update(new)
        kept = {i for mine in refers.values() for i in mine}
        assert shelf.digests == {_digest(POOL[i]) for i in kept}
        assert shelf.held_bytes == sum(len(POOL[i]) for i in kept)
        assert shelf.get([_digest(data) for data in POOL]) == {
            _digest(POOL[i]): POOL[i] for i in kept
        }


# ---- the log ----------------------------------------------------------------------------------

conversations = st.lists(
    st.lists(st.integers(0, len(POOL) - 1), min_size=1, max_size=3), min_size=1, max_size=30
)


@settings(max_examples=60, deadline=None)
@given(
    media=conversations,
    max_bytes=st.integers(4_000, 20_000),
    max_conversations=st.integers(1, 6),
)
def test_for_every_sequence_of_conversations_the_media_kept_stays_within_the_cap(
    media: list[list[int]], max_bytes: int, max_conversations: int
) -> None:
    """For every sequence of conversations with images coming and going (bytes put, the input
    recorded, the run ended) under a small retention: once no run is going, the records and
    media together are within ``max_bytes`` (the media bytes held are counted in it), and every
    digest a kept conversation refers to reads back — a digest only evicted conversations
    referred to is gone."""

    async def main() -> None:
        log = InMemoryConversationLog(
            LogRetention(max_bytes=max_bytes, max_conversations=max_conversations)
        )
        for n, chosen in enumerate(media):
            conversation, run = f"c{n}", f"r{n}"
            blobs = [POOL[i] for i in chosen]
            log.hold(conversation)  # the runtime's claim, before the bytes are put
            await log.put_media(conversation, {_digest(data): data for data in blobs})
            await log.append(conversation, [_input(conversation, run, blobs)])
            await log.append(conversation, [_ended(conversation, run)])
            log.release(conversation)
            kept = set(log.conversations())
            assert log.retained_bytes <= max_bytes or not kept
            assert log.media_bytes <= log.retained_bytes
            wanted = {_digest(POOL[i]) for c in kept for i in media[int(c[1:])]}
            assert log.media_digests == wanted
            assert set(await log.media(wanted)) == wanted

    trio.run(main)


async def test_bytes_a_kept_conversation_shares_stay_when_another_is_evicted() -> None:
    """Two conversations share an image; the first is evicted, its own image goes, the shared
    one stays readable until the second goes too."""
    shared, own = POOL[3], POOL[5]
    log = InMemoryConversationLog(LogRetention(max_conversations=2))
    for name, blobs in [("a", [shared, own]), ("b", [shared])]:
        await log.put_media(name, {_digest(data): data for data in blobs})
        await log.append(name, [_input(name, f"run-{name}", blobs), _ended(name, f"run-{name}")])
    assert log.media_digests == {_digest(shared), _digest(own)}
    await log.append("c", [_ended("c", "run-c")])  # a third conversation: "a" goes
    assert log.evicted("a")
    assert log.media_digests == {_digest(shared)}
    assert await log.media([_digest(shared)]) == {_digest(shared): shared}
    assert log.media_bytes == len(shared)
    await log.append("d", [_ended("d", "run-d")])  # "b" goes: nothing refers to the image
    assert log.evicted("b")
    assert log.media_digests == frozenset()
    assert log.media_bytes == 0


async def test_bytes_put_for_a_run_that_never_recorded_them_go_with_its_conversation() -> None:
    """A run that put its image and failed before recording it: the bytes are its
    conversation's, so they go when that conversation is evicted (no leak)."""
    log = InMemoryConversationLog(LogRetention(max_conversations=1))
    await log.put_media("lost", {_digest(POOL[7]): POOL[7]})
    assert log.retained_bytes > len(POOL[7])
    await log.append("next", [_ended("next", "run-next")])
    assert log.media_digests == frozenset()
    assert log.retained_bytes < len(POOL[7])


async def test_a_record_naming_kept_bytes_holds_them_for_its_conversation() -> None:
    """A conversation whose record names bytes another conversation put (copied history) holds
    them too: evicting the one that put them keeps them."""
    log = InMemoryConversationLog(LogRetention(max_conversations=2))
    image = POOL[2]
    await log.put_media("first", {_digest(image): image})
    await log.append("first", [_input("first", "r1", [image]), _ended("first", "r1")])
    await log.append("copy", [_input("copy", "r2", [image]), _ended("copy", "r2")])
    await log.append("third", [_ended("third", "r3")])  # "first" goes
    assert log.evicted("first")
    assert await log.media([_digest(image)]) == {_digest(image): image}


async def test_a_long_lived_runtime_with_images_stays_flat_at_a_small_cap() -> None:
    """Through the runtime: 300 runs, each with a new 20 KB image, under a 256 KiB retention —
    the media kept stay under the cap and what is still allocated after the last run does not
    grow with the runs (tracemalloc: it would be ~6 MB if the bytes were kept)."""
    log = InMemoryConversationLog(LogRetention(max_bytes=256 * 1024, max_conversations=1_000))
    model = FunctionModel(lambda request: "ok")
    layer = model.as_layer() + Layer.succeed(ConversationLogService, log)
    agent = Agent("looker", "Describe.")
    png = b"\x89PNG\r\n\x1a\n"

    async def run(runtime: Any, n: int) -> None:
        image = ImagePart(png + n.to_bytes(4, "big") * 5_000, name="shot.png")
        result = await runtime.run(agent, ["what is this?", image])
        assert result.status == "completed", result.error
        model.requests.clear()  # the test model's bookkeeping, not the runtime's

    async with open_runtime(layer, agents=[agent]) as runtime:
        for n in range(50):  # warm up: the cap is reached
            await run(runtime, n)
        gc.collect()
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            for n in range(50, 300):
                await run(runtime, n)
                assert log.media_bytes <= log.retained_bytes <= 256 * 1024
            gc.collect()
            grown = tracemalloc.get_traced_memory()[0] - before
        finally:
            tracemalloc.stop()
    assert grown < 1_000_000, grown
