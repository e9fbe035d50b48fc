"""What no database can keep — a conversation ID or media digest holding NUL (PostgreSQL's text
cannot) or a lone surrogate (it has no UTF-8 form), a search word holding either — is handled
the same way on SQLite and on PostgreSQL, before anything is read or written: never a raw
``UnicodeEncodeError`` from one engine and a stored row in the other. The log's other
arguments are checked alike on both too."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any, Final

import pytest

from capabilities import postgres_storage, sqlite_storage
from capabilities.storage._database import open_database as open_sqlite
from capabilities.storage._errors import IdNotStorable
from capabilities.storage._log import SqliteConversationLog
from effectagent import Agent, open_runtime
from effectagent.core import ConversationCreated, UserInputRecorded
from effectagent.effect import Layer
from effectagent.engine import ConversationLogError, ConversationLogService
from effectagent.testing import ScriptedModel, Turn
from tests.postgres import drop_schema, fresh_schema, postgres_url

from ..conftest import database as open_database

DATABASES = ["sqlite-memory", "sqlite-file", "postgresql"]

UNSTORABLE = ["a\x00b", "a\ud800", "\udfff"]


def created(conversation_id: str) -> ConversationCreated:
    return ConversationCreated(conversation_id=conversation_id, agent="a", at=1.0)


@pytest.mark.parametrize("database", DATABASES)
@pytest.mark.parametrize("conversation_id", UNSTORABLE, ids=["nul", "surrogate", "low-surrogate"])
async def test_a_conversation_id_no_database_keeps_is_refused_alike(
    database: str, conversation_id: str, tmp_path: Path
) -> None:
    async with open_database(database, tmp_path) as opened:
        log = SqliteConversationLog(opened)
        calls: list[Any] = [
            lambda: log.append(conversation_id, [created(conversation_id)]),
            lambda: log.append(conversation_id, []),
            lambda: log.entries(conversation_id),
            lambda: log.last_seq(conversation_id),
            lambda: log.claim(conversation_id, "run-1"),
            lambda: log.delete_conversations(["fine", conversation_id]),
            lambda: log.put_media(conversation_id, {"d": b"x"}),
        ]
        for call in calls:
            with pytest.raises(IdNotStorable) as caught:
                await call()
            # A ConversationLogError (a run ends StorageFailed) and a ValueError (bad input).
            assert isinstance(caught.value, ConversationLogError)
            assert isinstance(caught.value, ValueError)
            assert caught.value.conversation_id == conversation_id
            assert caught.value.seq is None
            str(caught.value).encode("utf-8")  # printable: the ID is shown escaped
        await log.release(conversation_id, "run-1")  # never raises
        assert await log.conversations() == ()
        with pytest.raises(TypeError, match="conversation_id must be a str"):
            await log.last_seq(5)  # type: ignore[arg-type]


#: IDs past the 512 UTF-8 bytes a run takes: ASCII, two-byte letters, and random hex (which
#: PostgreSQL's index cannot compress: its append failed there as a retryable write failure,
#: while SQLite kept it).
TOO_LONG = ["c" * 513, "\u00e9" * 257, "0123456789abcdef" * 200]


@pytest.mark.parametrize("database", DATABASES)
@pytest.mark.parametrize("conversation_id", TOO_LONG, ids=["ascii", "two-byte", "long"])
async def test_a_conversation_id_longer_than_a_run_takes_is_refused_alike(
    database: str, conversation_id: str, tmp_path: Path
) -> None:
    async with open_database(database, tmp_path) as opened:
        log = SqliteConversationLog(opened)
        calls: list[Any] = [
            lambda: log.append(conversation_id, [created(conversation_id)]),
            lambda: log.entries(conversation_id),
            lambda: log.last_seq(conversation_id),
            lambda: log.claim(conversation_id, "run-1"),
            lambda: log.delete_conversations([conversation_id]),
            lambda: log.put_media(conversation_id, {"d": b"x"}),
        ]
        for call in calls:
            with pytest.raises(IdNotStorable, match="is longer than 512 bytes in UTF-8") as caught:
                await call()
            assert caught.value.too_long
            assert caught.value.is_retryable is False  # bad input: no retry helps
            assert isinstance(caught.value, ConversationLogError | ValueError)
            assert len(str(caught.value)) < 300  # the ID is shown cut, not whole
        assert await log.conversations() == ()
        # 512 bytes exactly is kept, on every engine.
        longest = "é" * 256
        assert await log.append(longest, [created(longest)]) == 1
        assert [e.seq for e in await log.entries(longest)] == [1]


@pytest.mark.parametrize("database", DATABASES)
async def test_a_run_id_longer_than_a_run_takes_is_refused_alike(
    database: str, tmp_path: Path
) -> None:
    async with open_database(database, tmp_path) as opened:
        log = SqliteConversationLog(opened)
        run_id = "r" * 513
        with pytest.raises(IdNotStorable, match=r"^the run ID 'r{64}…' is longer than 512 bytes"):
            await log.claim("c", run_id)
        assert await log.conversations() == ()


def _storage(engine: str, tmp_path: Path, schema: str) -> Layer:
    """The storage layer of ``engine``: an SQLite file, or ``schema`` on the test server."""
    if engine == "sqlite":
        return sqlite_storage(tmp_path / "x.db")
    return postgres_storage(postgres_url(), schema=schema)


@pytest.mark.parametrize("engine", ["sqlite", "postgresql"])
@pytest.mark.parametrize("bad", ["a\x00b", "a\ud800"], ids=["nul", "surrogate"])
@pytest.mark.parametrize("which", ["conversation_id", "run_id"])
async def test_a_run_on_such_an_id_is_refused_at_the_call_on_either_engine(
    engine: str, bad: str, which: str, tmp_path: Path
) -> None:
    """The run refuses it before anything starts (``ValueError`` naming the argument); the log's
    own refusal (``IdNotStorable``, above) stands behind it for callers of the log."""
    agent = Agent("a", "Answer.")
    schema = fresh_schema()
    try:
        storage = _storage(engine, tmp_path, schema)
        layer = ScriptedModel.layer([Turn.text("hi")]) + storage
        async with open_runtime(layer, agents=[agent]) as runtime:
            arguments: dict[str, Any] = (
                {"conversation_id": bad, "create": True} if which == "conversation_id" else {}
            )
            if which == "run_id":
                arguments["run_id"] = bad
            with pytest.raises(ValueError, match=f"^{which} must not hold NUL or a lone surrogate"):
                await runtime.run(agent, "hello", **arguments)
            log = runtime.context[ConversationLogService]
            assert isinstance(log, SqliteConversationLog)
            assert await log.conversations() == ()
    finally:
        drop_schema(schema)


@pytest.mark.parametrize("database", DATABASES)
async def test_entries_takes_an_int_after_alike(database: str, tmp_path: Path) -> None:
    async with open_database(database, tmp_path) as opened:
        log = SqliteConversationLog(opened)
        await log.append("c", [created("c")])
        for after in (None, "0", 1.5, True):
            with pytest.raises(TypeError, match="after must be an int"):
                await log.entries("c", after=after)  # type: ignore[arg-type]
        # Past the largest sequence number either database takes: nothing, on both.
        assert list(await log.entries("c", after=2**70)) == []
        assert [e.seq for e in await log.entries("c", after=-5)] == [1]
        # A limit past the largest integer either database takes: every entry, on both.
        assert [e.seq for e in await log.entries("c", limit=2**70)] == [1]


@pytest.mark.parametrize("database", DATABASES)
async def test_media_that_cannot_be_kept_is_refused_alike(database: str, tmp_path: Path) -> None:
    async with open_database(database, tmp_path) as opened:
        log = SqliteConversationLog(opened)
        bad: list[tuple[Any, type[Exception]]] = [
            ([("d", b"x")], TypeError),  # not a mapping
            ({"d": "text"}, TypeError),  # not bytes: a str would come back as something else
            ({5: b"x"}, TypeError),
            ({"": b"x"}, ValueError),
            ({"d\x00": b"x"}, ValueError),
            ({"d\ud800": b"x"}, ValueError),
            # Kept in a key: PostgreSQL's index refused it (a retryable WriteFailed), SQLite not.
            ({"0123456789abcdef" * 200: b"x"}, ValueError),
        ]
        for blobs, error in bad:
            with pytest.raises(error):
                await log.put_media("c", blobs)
        digest = hashlib.sha256(b"bytes").hexdigest()
        copied: Any = {digest: bytearray(b"bytes")}  # kept as bytes
        await log.put_media("c", copied)
        found = await log.media([digest, "d\x00", "d\ud800", "missing"])
        assert found == {digest: b"bytes"}
        assert type(found[digest]) is bytes


@pytest.mark.parametrize("engine", ["sqlite", "postgresql"])
async def test_nul_and_lone_surrogates_in_search_words_separate_words_alike(
    engine: str, tmp_path: Path
) -> None:
    agent = Agent("a", "Answer.")
    schema = fresh_schema()
    try:
        storage = _storage(engine, tmp_path, schema)
        layer = ScriptedModel.layer([Turn.text("noted")]) + storage
        async with open_runtime(layer, agents=[agent]) as runtime:
            await runtime.run(agent, "the blue heron flies")
            log = runtime.context[ConversationLogService]
            assert isinstance(log, SqliteConversationLog)
            for words in (["blue\x00heron"], ["heron\ud800"], ["\x00"], ["\udc00", "flies"]):
                found = await log.search(words, limit=5)
                if words == ["\x00"]:
                    assert found.said == ()  # no word left: nothing is found
                else:
                    assert [s.text for s in found.said] == ["the blue heron flies"], words
    finally:
        drop_schema(schema)


@pytest.mark.parametrize("database", DATABASES)
@pytest.mark.parametrize("run_id", UNSTORABLE, ids=["nul", "surrogate", "low-surrogate"])
async def test_a_run_id_no_database_keeps_is_refused_alike(
    database: str, run_id: str, tmp_path: Path
) -> None:
    # A plain run's hold of its lane keeps its run ID in a column.
    async with open_database(database, tmp_path) as opened:
        log = SqliteConversationLog(opened)
        said = UserInputRecorded(
            conversation_id="c",
            run_id=run_id,
            input_id="i",
            kind="user",
            text="hello",
            author="ann",
            at=1.0,
        )
        calls: list[Any] = [
            lambda: log.claim("c", run_id),
            lambda: log.append("c", [created("c"), said]),
        ]
        for call in calls:
            with pytest.raises(IdNotStorable) as caught:
                await call()
            assert (caught.value.conversation_id, caught.value.what) == ("c", "run ID")
            assert "run ID" in str(caught.value).encode("utf-8").decode()
        assert await log.conversations() == ()
        with pytest.raises(TypeError, match="run_id must be a str"):
            await log.claim("c", 5)  # type: ignore[arg-type]


_BAD_PATHS: Final = [
    (b"store.db", TypeError, "must be a str or a path, got bytes"),
    ("a\x00b.db", ValueError, "must not hold NUL"),
    ("", ValueError, "must not be empty"),
    (5, TypeError, "must be a str or a path, got int"),
    (None, TypeError, "must be a str or a path, got NoneType"),
]


@pytest.mark.parametrize(("path", "error", "message"), _BAD_PATHS)
def test_a_database_path_that_names_no_file_is_refused_where_the_layer_is_made(
    path: Any, error: type[Exception], message: str
) -> None:
    """Not as the runtime opens, long after (a bare "expected str, bytes or os.PathLike")."""
    with pytest.raises(error, match=message):
        sqlite_storage(path)


@pytest.mark.parametrize(
    ("arguments", "error", "message"),
    [
        ({"pool_size": 0}, ValueError, "^pool_size must be at least 1, got 0$"),
        ({"pool_size": True}, TypeError, "^pool_size must be an int, got bool$"),
        ({"schema": 5}, TypeError, "^schema must be a str, got int$"),
        ({"url": 5}, TypeError, "^url must be a str, got int$"),
    ],
)
def test_postgres_storage_refuses_what_it_cannot_open_with_where_it_is_called(
    arguments: dict[str, Any], error: type[Exception], message: str
) -> None:
    """They were accepted here and refused only as the runtime opened."""
    given = {"url": "postgresql://nowhere.invalid/none", **arguments}
    with pytest.raises(error, match=message):
        postgres_storage(**given)


@pytest.mark.parametrize(("path", "error", "message"), _BAD_PATHS)
async def test_a_database_path_that_names_no_file_is_refused_before_anything_is_made(
    path: Any, error: type[Exception], message: str, tmp_path: Path, monkeypatch: Any
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(error, match=message):
        async with open_sqlite(path):
            pass
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("database", DATABASES)
@pytest.mark.parametrize("input_id", UNSTORABLE, ids=["nul", "surrogate", "low-surrogate"])
async def test_steering_recorded_with_an_input_id_no_database_keeps_is_appended_alike(
    database: str, input_id: str, tmp_path: Path
) -> None:
    # The record is JSON (any text fits); no admitted input has such an ID, so the append
    # marks none delivered — rather than fail on one engine's text column.
    async with open_database(database, tmp_path) as opened:
        log = SqliteConversationLog(opened, fence=lambda conn, conversation_id: None)
        steering = UserInputRecorded(
            conversation_id="c",
            run_id="r",
            input_id=input_id,
            kind="steering",
            text="turn left",
            author="ann",
            at=1.0,
        )
        assert await log.append("c", [created("c"), steering]) == 2
        assert [e.record for e in await log.entries("c")] == [created("c"), steering]
