"""Media bytes in the SQLite storage (layout 4): kept once per SHA-256 digest in the ``media``
table, read back whole, found again by a later run of the conversation — and a version-3 file is
upgraded in place to have the table."""

from __future__ import annotations

import hashlib
import sqlite3
from pathlib import Path

import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from capabilities.storage import SqliteConversationLog
from capabilities.storage._codec import RecordCodec
from capabilities.storage._database import open_database
from capabilities.storage._layers import sqlite_database, sqlite_log
from capabilities.storage._layout import LAYOUT_VERSION, UPGRADES
from effectagent import Agent, open_runtime
from effectagent.ai import ImagePart, UserMessage
from effectagent.core import StorageFailed, UserInputRecorded
from effectagent.testing import ScriptedModel, Turn

PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(200))


def _digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


@settings(max_examples=30, deadline=None)
@given(blobs=st.lists(st.binary(min_size=1, max_size=64), min_size=1, max_size=6))
def test_for_every_bytes_the_store_returns_them_and_keeps_each_digest_once(
    blobs: list[bytes],
) -> None:
    """For every list of byte strings (repeats included) put in any number of calls: each
    digest's bytes read back equal, and the table holds one row per distinct digest."""

    async def main() -> None:
        async with open_database(":memory:") as database:
            log = SqliteConversationLog(database)
            for data in blobs:  # one call each: a digest put again is not written again
                await log.put_media("c", {_digest(data): data})
            await log.put_media("c", {_digest(data): data for data in blobs})
            wanted = {_digest(data) for data in blobs}
            found = await log.media([*wanted, _digest(b"never put")])
            rows = await database.read(
                lambda conn: conn.execute("SELECT count(*) FROM media").fetchone()[0]
            )
        assert found == {_digest(data): data for data in blobs}
        assert rows == len(wanted)

    trio.run(main)


def test_a_user_input_with_parts_reads_back_equal() -> None:
    codec = RecordCodec()
    record = UserInputRecorded(
        conversation_id="c",
        run_id="r",
        input_id="i",
        kind="user",
        text="What is this?",
        author="ann",
        at=1.0,
        parts=(("text", "What is this?"), ("media", ImagePart(PNG, name="x.png").reference())),
    )
    tag, version, body, _ = codec.encode(record)
    assert PNG.hex() not in body
    assert codec.decode("c", 1, tag, version, body) == record


async def test_two_runs_attaching_the_same_bytes_store_them_once_and_a_later_turn_resends_them(
    tmp_path: Path,
) -> None:
    path = tmp_path / "media.db"
    model = ScriptedModel([Turn.text("A cat."), Turn.text("The same cat."), Turn.text("Yes.")])
    agent = Agent("looker", "Describe images.")
    layer = model.as_layer() + sqlite_log().provide_merge(sqlite_database(path))
    image = ImagePart(PNG, name="cat.png")
    async with open_runtime(layer, agents=[agent]) as runtime:
        first = await runtime.run(agent, ["What is this?", image])
        second = await runtime.run(agent, ["And this?", image])
        assert (first.status, second.status) == ("completed", "completed")
    # A new process: the bytes come from the file, by digest.
    model2 = ScriptedModel([Turn.text("Still a cat.")])
    layer2 = model2.as_layer() + sqlite_log().provide_merge(sqlite_database(path))
    async with open_runtime(layer2, agents=[agent]) as runtime:
        third = await runtime.run(agent, "Sure?", conversation_id=first.conversation_id)
        assert third.status == "completed", third.error
    (request,) = model2.requests
    (sent,) = [m for m in request.messages if isinstance(m, UserMessage) and m.media]
    assert sent.media == (image,)
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("SELECT digest, size FROM media").fetchall() == [(image.digest, 208)]
    finally:
        conn.close()


async def test_bytes_missing_on_replay_refuse_the_run_with_a_sentence(tmp_path: Path) -> None:
    path = tmp_path / "media.db"
    agent = Agent("looker", "Describe images.")
    model = ScriptedModel([Turn.text("A cat.")])
    layer = model.as_layer() + sqlite_log().provide_merge(sqlite_database(path))
    async with open_runtime(layer, agents=[agent]) as runtime:
        first = await runtime.run(agent, ["What is this?", ImagePart(PNG, name="cat.png")])
    conn = sqlite3.connect(path)
    conn.execute("DELETE FROM media")
    conn.commit()
    conn.close()
    model2 = ScriptedModel([Turn.text("?")])
    layer2 = model2.as_layer() + sqlite_log().provide_merge(sqlite_database(path))
    async with open_runtime(layer2, agents=[agent]) as runtime:
        result = await runtime.run(agent, "Sure?", conversation_id=first.conversation_id)
    assert result.status == "failed"
    assert isinstance(result.error, StorageFailed)
    shown = str(result.error)
    assert "the bytes of [image: cat.png, 208 bytes], which record 2 of conversation" in shown
    assert "are not stored" in shown
    assert model2.requests == []


async def test_a_version_3_file_is_upgraded_to_have_the_media_table(tmp_path: Path) -> None:
    path = tmp_path / "v3.db"
    async with open_database(path):
        pass
    conn = sqlite3.connect(path)
    conn.execute("DROP TABLE media")
    conn.execute("ALTER TABLE steering_inputs DROP COLUMN parts")  # layout 5's
    conn.execute("ALTER TABLE submissions DROP COLUMN parts")
    conn.execute("PRAGMA user_version = 3")
    conn.commit()
    conn.close()
    assert LAYOUT_VERSION >= 4
    assert 3 in UPGRADES
    async with open_database(path) as database:
        log = SqliteConversationLog(database)
        await log.put_media("c", {_digest(PNG): PNG})
        assert await log.media([_digest(PNG)]) == {_digest(PNG): PNG}
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == LAYOUT_VERSION
    finally:
        conn.close()
