"""Bad input to the session API is refused where it is given, the same way by every store: a
``SessionCreate`` or ``SessionPatch`` of the wrong shape when it is built (a ``SessionInvalid``
that is also a ``TypeError`` or ``ValueError``), a ``SessionSchema`` no metadata can have when it
is made, and an ID or name no store could keep (NUL, a lone surrogate) before any store is asked
— never a raw encoding error from one store and a stored session in another."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import attrs
import pytest

from capabilities.sessions import (
    SessionCreate,
    SessionPatch,
    SessionSchema,
    SessionStoreError,
)
from capabilities.sessions._model import SessionInvalid
from capabilities.sessions._sqlite import SqliteSessionStore

from ..conftest import database as open_store
from .test_contract import stores

#: Types erased: these tests hand the classes what their annotations forbid.
Create: Any = SessionCreate
Patch: Any = SessionPatch
Schema: Any = SessionSchema

WRONG_TYPES: list[tuple[str, Any]] = [
    ("a name that is not a str", lambda: Create(5, {})),
    ("a session ID that is not a str", lambda: Create("n", {}, session_id=5)),
    ("conversations of None", lambda: Create("n", {}, None)),
    ("conversations of bytes", lambda: Create("n", {}, b"conv")),
    ("a conversation ID that is not a str", lambda: Create("n", {}, [5])),
    ("a patch's name that is not a str", lambda: Patch(name=5)),
    ("a patch's conversations of bytes", lambda: Patch(add_conversations=b"ab")),
    ("a patch's lone str to remove", lambda: Patch(remove_conversations="conv")),
]

BAD_VALUES: list[tuple[str, Any]] = [
    ("an empty name", lambda: Create("", {})),
    ("a blank name", lambda: Create(" \t", {})),
    ("a name too long", lambda: Create("n" * 257, {})),
    ("a name with NUL", lambda: Create("a\x00b", {})),
    ("a name with a lone surrogate", lambda: Create("a\ud800", {})),
    ("no metadata", lambda: Create("n", None)),
    ("an empty session ID", lambda: Create("n", {}, session_id="")),
    ("a session ID with NUL", lambda: Create("n", {}, session_id="a\x00b")),
    ("a session ID with a lone surrogate", lambda: Create("n", {}, session_id="\udfff")),
    ("an empty conversation ID", lambda: Create("n", {}, [""])),
    ("a blank conversation ID", lambda: Create("n", {}, ["  "])),
    ("a patch's blank name", lambda: Patch(name="  ")),
    ("a patch's empty conversation ID", lambda: Patch(add_conversations=[""])),
    ("a conversation ID past 512 bytes", lambda: Create("n", {}, ["c" * 513])),
    ("a conversation ID of 257 two-byte letters", lambda: Create("n", {}, ["\u00e9" * 257])),
]


@pytest.mark.parametrize(("what", "build"), WRONG_TYPES, ids=[w for w, _ in WRONG_TYPES])
def test_a_value_of_the_wrong_type_is_refused_when_built(what: str, build: Any) -> None:
    with pytest.raises(TypeError) as raised:
        build()
    assert isinstance(raised.value, SessionInvalid)  # a SessionStoreError, as the store's are


@pytest.mark.parametrize(("what", "build"), BAD_VALUES, ids=[w for w, _ in BAD_VALUES])
def test_an_invalid_value_is_refused_when_built(what: str, build: Any) -> None:
    with pytest.raises(ValueError) as raised:
        build()
    assert isinstance(raised.value, SessionInvalid)
    assert "\x00" not in str(raised.value)
    assert "\ud800" not in str(raised.value)


def test_a_schema_no_metadata_can_have_is_refused_when_made() -> None:
    with pytest.raises(TypeError, match="cannot be session metadata"):
        Schema(5)
    with pytest.raises(TypeError, match="cannot be session metadata"):
        Schema(object)
    with pytest.raises(TypeError, match="migrations must be a mapping"):
        Schema(dict, version=2, migrations=[lambda old: old])


async def test_ids_and_names_no_store_could_keep_are_refused_alike_by_every_store(
    kind: str, tmp_path: Path
) -> None:
    async with stores(kind, tmp_path) as make:
        store = make(Schema(dict))
        for session_id in ("a\x00b", "\ud800"):
            with pytest.raises(SessionInvalid):  # not a UnicodeEncodeError, nor "unavailable"
                await store.get(session_id)
            with pytest.raises(SessionInvalid):
                await store.update(session_id, Patch(name="m"), 1)
            with pytest.raises(SessionInvalid):
                await store.delete(session_id, 1)
            with pytest.raises(ValueError, match="after must be a session ID"):
                await store.list(after=session_id)
        session = await store.create(Create("n", {}, ["conv-1"]))
        assert await store.list() == (session,)
        # A conversation ID is kept in the session's JSON: any ID a run takes fits.
        listed = await store.update(session.id, Patch(add_conversations=["c\x00d"]), 1)
        assert (await store.get(session.id)) == listed
        assert listed.conversations == ("conv-1", "c\x00d")


@pytest.mark.parametrize("database", ["sqlite-memory", "sqlite-file", "postgresql"])
async def test_deleting_with_conversations_takes_a_bool_only(database: str, tmp_path: Path) -> None:
    # A truthy value that is not True ("no") would otherwise delete the conversations' history.
    async with open_store(database, tmp_path) as opened:
        store: SqliteSessionStore[Any] = SqliteSessionStore(opened)
        session = await store.create(Create("n", {}, ["conv-1"]))
        for truthy in ("no", 1, None):
            with pytest.raises(TypeError, match="conversations must be a bool"):
                await store.delete(session.id, 1, conversations=truthy)  # type: ignore[arg-type]
        assert await store.get(session.id) == session
        await store.delete(session.id, 1, conversations=False)
        assert await store.get(session.id) is None


def test_every_refusal_is_a_session_store_error() -> None:
    for _, build in WRONG_TYPES + BAD_VALUES:
        with pytest.raises(SessionStoreError):
            build()


async def test_every_argument_a_store_refuses_is_a_session_store_error(
    kind: str, tmp_path: Path
) -> None:
    """Every error of a store is a ``SessionStoreError``: a revision that is not an int, an argument that
    is not a ``SessionCreate``/``SessionPatch``, a ``conversations=`` that is not a bool and a
    page that is not one used to be plain ``TypeError``/``ValueError``s, which a caller catching
    ``SessionStoreError`` missed. They are ``SessionInvalid``s now — still a ``TypeError``
    or a ``ValueError`` — and nothing changed."""
    async with stores(kind, tmp_path) as make:
        store: Any = make(Schema(dict))  # handed what its annotations forbid
        session = await store.create(Create("n", {}, ["conv-1"]))
        wrong_types: list[Callable[[], Awaitable[object]]] = [
            lambda: store.create({"name": "n"}),
            lambda: store.update(session.id, {"name": "m"}, 1),
            lambda: store.update(session.id, Patch(name="m"), "1"),
            lambda: store.update(session.id, Patch(name="m"), True),
            lambda: store.delete(session.id, 1.0),
            lambda: store.delete(session.id, 1, conversations="no"),
            lambda: store.list(limit="5"),
            lambda: store.list(after=5),
        ]
        for refused in wrong_types:
            with pytest.raises(SessionInvalid) as caught:
                await refused()
            assert isinstance(caught.value, TypeError)
        for limit in (0, 1001):
            with pytest.raises(SessionInvalid, match="limit must be from 1 to 1000") as caught:
                await store.list(limit=limit)
            assert isinstance(caught.value, ValueError)
        assert await store.list() == (session,)


async def test_update_refuses_a_bad_patch_or_revision_at_the_call_whether_or_not_the_session_is_there(
    kind: str, tmp_path: Path
) -> None:
    """A patch that is not a ``SessionPatch`` and a revision that is not an int are refused at
    the call (a ``TypeError``) — for a session that does not exist too, which used to answer
    ``SessionNotFound`` (the arguments were checked only once the session was found)."""
    async with stores(kind, tmp_path) as make:
        store: Any = make(Schema(dict))  # handed what its annotations forbid
        refused: list[Callable[[], Awaitable[object]]] = [
            lambda: store.update("missing", {"name": "m"}, 1),
            lambda: store.update("missing", Patch(name="m"), "1"),
            lambda: store.update("missing", Patch(name="m"), None),
            lambda: store.update("missing", Patch(name="m"), 1.0),
        ]
        for call in refused:
            with pytest.raises(SessionInvalid) as caught:
                await call()
            assert isinstance(caught.value, TypeError)
        assert await store.list() == ()


async def test_a_session_lists_any_conversation_a_run_takes(kind: str, tmp_path: Path) -> None:
    """A run takes a conversation ID of up to 512 bytes in UTF-8; a session refused one past
    256 characters, so such a conversation could not be filed under one."""
    longest = ["c" * 512, "\u00e9" * 256, "\U0001f600" * 128]
    async with stores(kind, tmp_path) as make:
        store: Any = make(Schema(dict))
        session = await store.create(Create("n", {}, longest[:1]))
        updated = await store.update(session.id, Patch(add_conversations=longest[1:]), 1)
        assert updated.conversations == tuple(longest)
        assert (await store.get(session.id)).conversations == tuple(longest)


def test_an_async_migration_is_refused_when_the_schema_is_made() -> None:
    """A read calls a migration plainly: an ``async def`` one returned a coroutine, and every
    session of an older version read as damaged (``CorruptSession``)."""

    async def lift(old: dict[str, Any]) -> dict[str, Any]:
        return old

    with pytest.raises(TypeError, match=r"^the migration from version 1 is an async function"):
        Schema(dict, version=2, migrations={1: lift})


def test_an_async_generator_migration_is_refused_naming_the_sessions_metadata() -> None:
    """The check lives in one place (``check_migrations``) for sessions and state slots: an
    async generator function passed it (a read then met an async generator, never the lifted
    JSON), and the message did not say whose migration it was."""

    async def lift(old: dict[str, Any]) -> Any:
        yield old

    with pytest.raises(TypeError) as raised:
        Schema(dict, version=2, migrations={1: lift})
    assert str(raised.value) == (
        "the migration from version 1 is an async function: a migration is a plain function of "
        "the stored JSON, called as it is when an older session's metadata is read"
    )


@attrs.frozen
class _Trip:
    destination: str


async def test_metadata_a_store_refuses_is_a_type_or_value_error(kind: str, tmp_path: Path) -> None:
    """Every refusal of bad input is a ``TypeError`` or a ``ValueError`` as well as a
    ``SessionStoreError``: metadata that does not match the schema's type is a ``TypeError``,
    metadata too large for the schema and a session past its most conversations a
    ``ValueError`` — they were plain ``SessionStoreError``s, which neither caught."""
    async with stores(kind, tmp_path) as make:
        store: Any = make(Schema(_Trip, max_bytes=64))  # handed what its annotations forbid
        number: Any = 5  # a destination that is not a str
        for metadata in ({"destination": "Oslo"}, _Trip(number), "Oslo"):
            with pytest.raises(SessionInvalid, match="does not match its schema") as wrong:
                await store.create(Create("n", metadata))
            assert isinstance(wrong.value, TypeError)
        with pytest.raises(SessionStoreError, match="bytes of JSON") as large:
            await store.create(Create("n", _Trip("x" * 100)))
        assert isinstance(large.value, ValueError)
        session = await store.create(Create("n", _Trip("Oslo"), [f"c{i}" for i in range(1024)]))
        with pytest.raises(SessionInvalid, match="at most 1024 conversations") as many:
            await store.update(session.id, Patch(add_conversations=["one-more"]), 1)
        assert isinstance(many.value, ValueError)
        with pytest.raises(SessionInvalid) as patched:
            await store.update(session.id, Patch(metadata={"destination": "Rome"}), 1)
        assert isinstance(patched.value, TypeError)
        assert await store.list() == (session,)
