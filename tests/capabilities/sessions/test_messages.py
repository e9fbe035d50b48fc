"""What a session store raises reads as a sentence that names the session and says what to do —
never as a dump of the error's fields, and never with what the metadata holds."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from capabilities.sessions import (
    SessionConflict,
    SessionCreate,
    SessionExists,
    SessionNotFound,
    SessionPatch,
    SessionSchema,
    SessionStore,
    SessionStoreError,
)
from capabilities.sessions._memory import InMemorySessionStore
from capabilities.sessions._model import SessionMetadataTooLarge, SessionStoreUnavailable
from capabilities.sessions._sqlite import SqliteSessionStore

from ..conftest import database as open_store
from .test_contract import stores

SECRET = "the-metadata-is-private"


async def failures(store: SessionStore[Any]) -> list[SessionStoreError]:
    """One error of each kind a caller meets, from ``store``."""
    caught: list[SessionStoreError] = []
    session = await store.create(SessionCreate("n", {"note": SECRET}, session_id="s-1"))
    attempts: list[Any] = [
        lambda: store.create(SessionCreate("n", {"note": SECRET}, session_id="s-1")),
        lambda: store.update("s-1", SessionPatch(name="m"), session.revision + 1),
        lambda: store.update("s-2", SessionPatch(name="m"), 1),
        lambda: store.delete("s-1", 7),
    ]
    for attempt in attempts:
        with pytest.raises(SessionStoreError) as error:
            await attempt()
        caught.append(error.value)
    return caught


def check_sentence(error: SessionStoreError, *words: str) -> None:
    text = str(error)
    assert not text.startswith(type(error).__name__ + "("), text
    assert error.tag not in text, text
    assert SECRET not in text
    for word in words:
        assert word in text, text


async def test_every_error_of_a_store_reads_as_a_sentence(kind: str, tmp_path: Path) -> None:
    if kind == "memory":
        caught = await failures(InMemorySessionStore())
    else:
        async with open_store(kind, tmp_path) as database:
            caught = await failures(SqliteSessionStore(database))
    exists, conflict, missing, stale = caught
    assert isinstance(exists, SessionExists)
    check_sentence(exists, "s-1", "exists already")
    assert isinstance(conflict, SessionConflict)
    check_sentence(conflict, "s-1", "revision 1", "not 2", "read it again")
    assert isinstance(missing, SessionNotFound)
    check_sentence(missing, "s-2")
    assert isinstance(stale, SessionConflict)
    check_sentence(stale, "s-1", "not 7")


async def test_oversized_invalid_and_unavailable_read_as_sentences(tmp_path: Path) -> None:
    store: SqliteSessionStore[Any]
    async with open_store("sqlite-file", tmp_path) as database:
        store = SqliteSessionStore(database, SessionSchema(dict[str, Any], max_bytes=16))
        with pytest.raises(SessionMetadataTooLarge) as large:
            await store.create(SessionCreate("n", {"note": SECRET}, session_id="s-1"))
        check_sentence(large.value, "s-1", "bytes", "16")
        with pytest.raises(SessionStoreError) as invalid:
            SessionCreate(" ", {"note": SECRET})
        check_sentence(invalid.value, "not valid", "name")
    with pytest.raises(SessionStoreUnavailable) as closed:
        await store.get("s-1")
    check_sentence(closed.value, "closed")


async def test_an_error_says_where_metadata_went_wrong_never_what_its_keys_are(
    kind: str, tmp_path: Path
) -> None:
    """A mapping's keys are the metadata's: a wrong value under a secret key is refused, and the
    path in the error — or in stored metadata that no longer reads — shows the key as ``[…]``
    (it was quoted: ``$["sk-live-…"]``)."""
    canary = "sk-live-canary-4242"
    counts: SessionSchema[dict[str, int]] = SessionSchema(dict[str, int])
    names: SessionSchema[dict[str, str]] = SessionSchema(dict[str, str])
    async with stores(kind, tmp_path) as made:
        wrong: Any = {canary: "not a number"}
        with pytest.raises(SessionStoreError) as refused:
            await made(counts).create(SessionCreate("n", wrong, session_id="s-1"))
        assert "at $[…]" in str(refused.value)
        assert canary not in repr(refused.value)
        await made(names).create(SessionCreate("n", {canary: "x"}, session_id="s-2"))
        with pytest.raises(SessionStoreError) as corrupt:
            await made(counts).get("s-2")  # the same sessions, now read as another type
        assert "[…]" in str(corrupt.value)
        assert canary not in repr(corrupt.value)
