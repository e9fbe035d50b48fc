"""Deleting conversations from the SQLite storage takes their media with them (#28 item 4's
gap): the bytes no remaining record refers to are deleted in the same transaction as the
records, bytes another conversation still refers to stay, a conversation with a run going is
refused with nothing deleted, and a session deleted with its conversations does the same."""

from __future__ import annotations

import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from capabilities.durable import DurableQueue
from capabilities.sessions import SessionCreate, SessionStoreError
from capabilities.sessions._sqlite import SqliteSessionStore
from capabilities.storage import (
    Connection,
    ConversationInUse,
    DatabaseService,
    SqliteConversationLog,
    open_database,
)
from capabilities.storage._layers import sqlite_log
from effectagent import Agent, RunResult, open_runtime
from effectagent.ai import ImagePart
from effectagent.core import RunCompletedRecord, UserInputRecorded
from effectagent.effect import Layer
from effectagent.testing import ScriptedModel, Turn
from tests.capabilities.durable.helpers import Stores

PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(200))
SHARED = ImagePart(PNG, name="shared.png")
OWN = ImagePart(PNG + b"own", name="own.png")
AGENT = Agent("looker", "Describe images.")


async def _rows(store: Stores, sql: str) -> list[tuple[object, ...]]:
    def read(conn: Connection) -> list[tuple[object, ...]]:
        return [tuple(row) for row in conn.execute(sql)]

    async with store.open() as database:  # another opening, as another process reads
        found: list[tuple[object, ...]] = await database.read(read)
        return found


async def _media(store: Stores) -> set[object]:
    return {digest for (digest,) in await _rows(store, "SELECT digest FROM media")}


def _database_layer(store: Stores) -> Layer:
    return Layer.scoped(DatabaseService, lambda _: store.open(), name="test_database")


async def _two_conversations(store: Stores) -> tuple[RunResult, RunResult]:
    """Conversation one attaches SHARED and OWN, conversation two SHARED; both searched once
    (so the index holds what was said)."""
    model = ScriptedModel([Turn.text("Two cats."), Turn.text("A cat.")])
    layer = model.as_layer() + sqlite_log().provide_merge(_database_layer(store))
    async with open_runtime(layer, agents=[AGENT]) as runtime:
        one = await runtime.run(AGENT, ["Both of these?", SHARED, OWN])
        two = await runtime.run(AGENT, ["And this?", SHARED])
    assert (one.status, two.status) == ("completed", "completed")
    async with store.open() as database:
        await SqliteConversationLog(database).search(["cat"], limit=10)
    return one, two


async def test_deleting_one_of_two_conversations_sharing_bytes_keeps_them_and_both_removes_them(
    store: Stores,
) -> None:
    one, two = await _two_conversations(store)
    assert await _media(store) == {SHARED.digest, OWN.digest}
    async with store.open() as database:
        log = SqliteConversationLog(database)
        gone = await log.delete_conversations([one.conversation_id])
        assert (gone.conversations, gone.media) == (1, 1)
        assert gone.records > 0
        assert await log.entries(one.conversation_id) == []
        assert await _media(store) == {SHARED.digest}  # two still refers to it
        found = await log.search(["cat"], limit=10)
        assert {m.conversation_id for m in found.said} == {two.conversation_id}
        again = await log.delete_conversations([two.conversation_id])
        assert again.media == 1
    assert await _media(store) == set()
    assert await _rows(store, "SELECT count(*) FROM records") == [(0,)]
    if store.backend == "sqlite":  # its own index table (PostgreSQL's index is on records)
        assert await _rows(store, "SELECT count(*) FROM said") == [(0,)]


async def test_a_record_that_only_quotes_a_digest_does_not_keep_its_bytes(store: Stores) -> None:
    """A later message whose text holds the digest (say, a label pasted back) is not a
    reference: the bytes go with the conversation that referred to them."""
    model = ScriptedModel([Turn.text("A cat."), Turn.text("Noted.")])
    layer = model.as_layer() + sqlite_log().provide_merge(_database_layer(store))
    async with open_runtime(layer, agents=[AGENT]) as runtime:
        seen = await runtime.run(AGENT, ["What is this?", OWN])
        quoted = await runtime.run(AGENT, f"I sent {OWN.digest} earlier.")
    assert (seen.status, quoted.status) == ("completed", "completed")
    async with store.open() as database:
        gone = await SqliteConversationLog(database).delete_conversations([seen.conversation_id])
    assert gone.media == 1
    assert await _media(store) == set()


async def test_a_conversation_with_a_run_going_is_refused_and_nothing_is_deleted(
    store: Stores,
) -> None:
    image = OWN.reference()
    async with store.open() as database:
        log = SqliteConversationLog(database)
        await log.put_media("going", {OWN.digest: OWN.data})
        started = UserInputRecorded(
            conversation_id="going",
            run_id="run-1",
            input_id="in-1",
            kind="user",
            text="look",
            author="ann",
            at=1.0,
            parts=(("text", "look"), ("media", image)),
        )
        await log.append("going", [started])  # the run holds the lane until it ends
        with pytest.raises(ConversationInUse):
            await log.delete_conversations(["going"])
        assert len(await log.entries("going")) == 1
        assert await _media(store) == {OWN.digest}
        ended = RunCompletedRecord(
            conversation_id="going", run_id="run-1", output="ok", finish_reason="stop", at=2.0
        )
        await log.append("going", [ended])
        gone = await log.delete_conversations(["going"])
    assert (gone.records, gone.media) == (2, 1)
    assert await _media(store) == set()


async def test_a_session_deleted_with_its_conversations_takes_their_media(store: Stores) -> None:
    """A session listing conversation one (and another listing conversation two) is deleted
    with its conversations: one's records and its own image go in the transaction that deletes
    the session; the shared image stays (two refers to it); a conversation another session
    lists stays whole."""
    one, two = await _two_conversations(store)
    async with store.open() as database:
        sessions: SqliteSessionStore[dict[str, object]] = SqliteSessionStore(database)
        mine = await sessions.create(
            SessionCreate("mine", {}, conversations=(one.conversation_id, two.conversation_id))
        )
        await sessions.create(SessionCreate("other", {}, conversations=(two.conversation_id,)))
        kept = await sessions.create(SessionCreate("kept", {}, conversations=("never-ran",)))
        await sessions.delete(mine.id, mine.revision, conversations=True)
        log = SqliteConversationLog(database)
        assert await log.entries(one.conversation_id) == []
        assert len(await log.entries(two.conversation_id)) > 0
        assert await _media(store) == {SHARED.digest}
        assert await sessions.get(mine.id) is None
        await sessions.delete(kept.id, kept.revision)  # without: nothing else changes
        assert len(await log.entries(two.conversation_id)) > 0


async def test_a_session_whose_conversation_is_running_is_not_deleted(store: Stores) -> None:
    async with store.open() as database:
        log = SqliteConversationLog(database)
        await log.claim("busy", "run-1")
        sessions: SqliteSessionStore[dict[str, object]] = SqliteSessionStore(database)
        session = await sessions.create(SessionCreate("s", {}, conversations=("busy",)))
        with pytest.raises(SessionStoreError, match="busy"):
            await sessions.delete(session.id, session.revision, conversations=True)
        assert await sessions.get(session.id) is not None  # the same transaction: nothing deleted


async def test_a_conversation_with_a_durable_submission_waiting_is_not_deleted(
    store: Stores,
) -> None:
    """A submission queued for the conversation would write to it: deleting is refused, and
    nothing is deleted."""
    one, _ = await _two_conversations(store)
    async with store.open() as database:
        queue = DurableQueue(database)
        await queue.submit(
            "looker",
            "again",
            conversation_id=one.conversation_id,
            idempotency_key="k1",
            principal="ann",
        )
        log = SqliteConversationLog(database)
        with pytest.raises(ConversationInUse, match="durable submission"):
            await log.delete_conversations([one.conversation_id])
        assert len(await log.entries(one.conversation_id)) > 0
    assert await _media(store) == {SHARED.digest, OWN.digest}


async def test_bytes_a_queued_submission_of_another_conversation_needs_stay(
    store: Stores,
) -> None:
    """Deleting the only conversation whose records name OWN keeps OWN's bytes while a
    submission of another conversation, not yet run, carries OWN: it would start without them.
    (Once it is settled, nothing refers to them: a sweep takes them, see ``test_media_sweep``.)"""
    one, _ = await _two_conversations(store)
    async with store.open() as database:
        queue = DurableQueue(database)
        receipt = await queue.submit(
            "looker",
            ["Again?", OWN],
            conversation_id="elsewhere",
            idempotency_key="k2",
            principal="ann",
        )
        log = SqliteConversationLog(database)
        gone = await log.delete_conversations([one.conversation_id])
        assert gone.media == 0
        assert await _media(store) == {SHARED.digest, OWN.digest}
        settled = await queue.abort(receipt.submission_id, author="ann", reason="not needed")
        assert settled.status == "aborted"


POOL = [ImagePart(PNG + bytes([n]) * n, name=f"p{n}.png") for n in range(5)]


@settings(max_examples=30, deadline=None)
@given(
    media=st.lists(st.lists(st.integers(0, len(POOL) - 1), max_size=3), min_size=1, max_size=5),
    order=st.permutations(range(5)),
)
def test_for_every_deletion_order_the_table_keeps_exactly_the_bytes_still_referred_to(
    media: list[list[int]], order: list[int]
) -> None:
    """For every set of conversations drawing images from a shared pool, deleted one at a time
    in any order: after each deletion the media table holds exactly the digests a remaining
    conversation refers to."""

    async def main() -> None:
        async with open_database(":memory:") as database:
            log = SqliteConversationLog(database)
            for n, chosen in enumerate(media):
                parts = [POOL[i] for i in chosen]
                await log.put_media(f"c{n}", {p.digest: p.data for p in parts})
                started = UserInputRecorded(
                    conversation_id=f"c{n}",
                    run_id=f"r{n}",
                    input_id=f"i{n}",
                    kind="user",
                    text="look",
                    author="ann",
                    at=1.0,
                    parts=(("text", "look"), *(("media", p.reference()) for p in parts)),
                )
                ended = RunCompletedRecord(
                    conversation_id=f"c{n}", run_id=f"r{n}", output="", finish_reason="stop", at=2.0
                )
                await log.append(f"c{n}", [started, ended])
            left = set(range(len(media)))
            for n in (i for i in order if i < len(media)):
                await log.delete_conversations([f"c{n}"])
                left.discard(n)
                kept = await database.read(
                    lambda conn: {d for (d,) in conn.execute("SELECT digest FROM media")}
                )
                assert kept == {POOL[i].digest for c in left for i in media[c]}

    trio.run(main)


@pytest.mark.parametrize(
    ("ids", "message"),
    [
        (
            "abc",
            "^conversation_ids must be a sequence of str \\(a one-item list for one\\), got str$",
        ),
        (b"abc", "^conversation_ids must be a sequence of str .*, got bytes$"),
        (["abc", 3], "^each of conversation_ids must be a str, got int$"),
        (None, "^conversation_ids must be a sequence of str .*, got NoneType$"),
    ],
)
async def test_a_lone_conversation_id_is_refused_and_nothing_is_deleted(
    ids: object, message: str
) -> None:
    """``delete_conversations("abc")`` deleted the conversations 'a', 'b' and 'c' — and kept
    'abc'."""
    async with open_database(":memory:") as database:
        # Fenced (as a durable worker's log is): its appends hold no lane, so deleting may go on.
        log = SqliteConversationLog(database, fence=lambda conn, conversation: None)
        for conversation in ("a", "b", "c", "abc"):
            await log.append(conversation, [_said(conversation)])
        with pytest.raises(TypeError, match=message):
            await log.delete_conversations(ids)  # type: ignore[arg-type]
        assert sorted(await log.conversations()) == ["a", "abc", "b", "c"]
        gone = await log.delete_conversations(("abc",))
        assert gone.conversations == 1
        assert sorted(await log.conversations()) == ["a", "b", "c"]


async def test_a_lone_digest_is_refused_where_digests_go() -> None:
    """As for conversation IDs: a lone digest would be looked up character by character."""
    async with open_database(":memory:") as database:
        log = SqliteConversationLog(database)
        await log.put_media("c", {OWN.digest: OWN.data})
        with pytest.raises(TypeError, match=r"^digests must be a collection of str .*, got str$"):
            await log.media(OWN.digest)  # a str is a Collection[str], to a type checker
        with pytest.raises(TypeError, match=r"^each of digests must be a str, got bytes$"):
            await log.media([OWN.digest.encode()])  # type: ignore[list-item]
        assert await log.media({OWN.digest}) == {OWN.digest: OWN.data}


def _said(conversation: str) -> UserInputRecorded:
    return UserInputRecorded(
        conversation_id=conversation,
        run_id="r",
        input_id="i",
        kind="user",
        text="hello",
        author="ann",
        at=1.0,
    )
