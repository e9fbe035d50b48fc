"""Named sessions of the ``effectagent`` command, kept in the session store: a name points to the
conversation it continues, and the metadata counts the runs (``{"runs": n}``).

A name the command makes up (``run-YYYYmmdd-HHMMSS``) is claimed when it is chosen
(:func:`new_session`): the session is created at once, empty, under the ID its name gives
(:func:`claim_id`). The store creates a session all or nothing and refuses an ID that is taken
(``SessionExists``), so of two processes choosing a name in the same second only one gets it;
the other takes the next (``-2``). A claimed session that never had a run is deleted again when
the command ends (:meth:`NamedSession.release`). A name given with ``--session`` that has no
session yet is created under the same ID when its first run starts, so two processes starting it
at once share one session (:meth:`NamedSession.started`)."""

from __future__ import annotations

import hashlib
import shlex
from collections.abc import Callable, Sequence
from typing import Any

from capabilities.sessions import (
    Session,
    SessionConflict,
    SessionCreate,
    SessionExists,
    SessionPatch,
    SessionStore,
    SessionStoreError,
)
from effectagent.core import LogEntry, ModelResponseRecorded, UserInputRecorded
from effectagent.engine import ConversationLog
from effectagent.testing import Cassette, cassette_of_log

from ._attach import said

__all__ = [
    "NamedSession",
    "all_sessions",
    "claim_id",
    "export_session",
    "find_session",
    "new_session",
    "runs_of",
    "session_option",
    "turns_of",
]

_PAGE = 500


def session_option(name: str) -> str:
    """``--session NAME`` as a shell reads it back: the name quoted when it holds spaces or
    quotes, joined with ``=`` when it starts with ``-`` (which the parser would take for an
    option) — so the command the chat suggests at its end can be pasted as it is."""
    quoted = shlex.quote(name)
    return f"--session={quoted}" if name.startswith("-") else f"--session {quoted}"


#: The longest session ID the store takes.
_MAX_ID_CHARS = 256


async def all_sessions(store: SessionStore[Any]) -> list[Session[Any]]:
    """Every session in the store, page by page. Cancellation: nothing changes."""
    found: list[Session[Any]] = []
    after: str | None = None
    while True:
        page = await store.list(after=after, limit=_PAGE)
        if not page:
            return found
        found.extend(page)
        after = page[-1].id


async def find_session(store: SessionStore[Any], name: str) -> Session[Any] | None:
    """The most recently updated session called ``name``, if any. Cancellation: nothing
    changes."""
    named = [session for session in await all_sessions(store) if session.name == name]
    return max(named, key=lambda session: session.updated_at, default=None)


def claim_id(name: str) -> str:
    """The ID of the session :func:`new_session` claims for ``name``: the same for every process,
    so that the store's create, which refuses an ID that is taken, lets one of them have it.
    A name too long for an ID as it is (a session ID is at most 256 characters) gives an ID
    made of its SHA-256 digest, as fixed."""
    claimed = f"session_{name}"
    if len(claimed) <= _MAX_ID_CHARS:
        return claimed
    return "session_sha256_" + hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()


async def new_session(store: SessionStore[Any], base: str) -> NamedSession:
    """A new session called ``base``, or ``base-2``, ``base-3``… — the first name no session has
    — claimed at once: created now, empty, under :func:`claim_id` of its name. A name another
    process claimed in the meantime (its create came first) is passed over for the next. Call
    :meth:`NamedSession.release` when the command ends. Cancellation: all or nothing (a name is
    claimed, or none)."""
    taken = {session.name for session in await all_sessions(store)}
    number = 1
    while True:
        name = base if number == 1 else f"{base}-{number}"
        if name not in taken:
            try:
                session = await store.create(
                    SessionCreate(name, {"runs": 0}, (), session_id=claim_id(name))
                )
            except SessionExists:  # claimed since we read the store: the next one
                pass
            else:
                return NamedSession(store, name, session, claimed=True)
        number += 1


def runs_of(session: Session[Any]) -> int | None:
    """The run count kept in the session's metadata (None when it keeps none)."""
    metadata = session.metadata
    runs = metadata.get("runs") if isinstance(metadata, dict) else None
    return runs if isinstance(runs, int) and not isinstance(runs, bool) else None


class NamedSession:
    """One name's session: which conversation it continues, and how runs are recorded.

    ``conversation_id`` is None until the first run of a new session has started. ``claimed``:
    the session was created empty by :func:`new_session` (:meth:`release` deletes it unused).
    """

    def __init__(
        self,
        store: SessionStore[Any],
        name: str,
        session: Session[Any] | None,
        *,
        claimed: bool = False,
    ) -> None:
        self._store = store
        self.name = name
        self._session = session
        self._claimed = claimed

    @staticmethod
    async def open(store: SessionStore[Any], name: str) -> NamedSession:
        """The session called ``name`` with a conversation, the most recently updated (a new one
        when there is none yet). An empty one is not taken over: it is claimed by a command that
        has not run yet (:func:`new_session`), which may delete it when it ends. Cancellation:
        nothing changes."""
        named = [s for s in await all_sessions(store) if s.name == name and s.conversations]
        found = max(named, key=lambda session: session.updated_at, default=None)
        return NamedSession(store, name, found)

    @property
    def resumed(self) -> bool:
        """Whether the session existed before."""
        return self._session is not None and bool(self._session.conversations)

    @property
    def conversation_id(self) -> str | None:
        """The conversation runs continue (the session's latest)."""
        if self._session is None or not self._session.conversations:
            return None
        return self._session.conversations[-1]

    @property
    def runs(self) -> int:
        """How many runs the session has recorded."""
        return (runs_of(self._session) or 0) if self._session is not None else 0

    async def started(self, conversation_id: str) -> None:
        """A run of ``conversation_id`` started: a new session is created pointing to it, under
        :func:`claim_id` of its name — so that two processes starting the same new name at once
        share one session (the later one's conversation is added to it, as ``/new`` adds one)
        rather than making two of that name. Cancellation: all or nothing."""
        while self._session is None:
            try:
                self._session = await self._store.create(
                    SessionCreate(
                        self.name, {"runs": 0}, (conversation_id,), session_id=claim_id(self.name)
                    )
                )
                return
            except SessionExists:  # created (or claimed) by another process since we looked
                self._session = await self._store.get(claim_id(self.name))
        if conversation_id not in self._session.conversations:
            await self._patch(lambda _: SessionPatch(add_conversations=(conversation_id,)))

    def forget(self) -> None:
        """The session is gone from the store (deleted by another process): the next run
        starts as in a new session of this name (:meth:`started` creates it again)."""
        self._session = None
        self._claimed = False

    async def ended(self) -> None:
        """A run ended: count it. Cancellation: all or nothing."""
        if self._session is not None:
            await self._patch(lambda now: SessionPatch(metadata={"runs": (runs_of(now) or 0) + 1}))

    async def release(self) -> None:
        """The command ends: a session :func:`new_session` claimed that never had a run (a chat
        ended before its first message, a run that did not start) is deleted again — unless it
        changed since it was read (another process's run started in it). Nothing for another
        session; a store that fails leaves the empty session. Cancellation: all or nothing."""
        if not self._claimed or self._session is None:
            return
        try:
            latest = await self._store.get(self._session.id)
            if latest is not None and not latest.conversations:
                await self._store.delete(latest.id, latest.revision)
        except SessionStoreError:  # changed, gone, or unavailable: kept as it is
            return

    async def _patch(self, make: Callable[[Session[Any]], SessionPatch[Any]]) -> None:
        """Apply ``make(current session)``, reading again after a conflict (three tries).
        Cancellation: each update is all or nothing."""
        assert self._session is not None
        for _ in range(3):  # another process may write the same session between our reads
            try:
                self._session = await self._store.update(
                    self._session.id, make(self._session), self._session.revision
                )
                return
            except SessionConflict:
                latest = await self._store.get(self._session.id)
                if latest is None:
                    return
                self._session = latest
        raise SessionConflict(self._session.id, self._session.revision, -1)


async def export_session(
    store: SessionStore[Any], log: ConversationLog, name: str, instructions: str
) -> Cassette | None:
    """The cassette of the conversation the session ``name`` continues (its latest), its
    requests rebuilt with ``instructions`` as the system message; None when there is no such
    session or it has no conversation yet. Cancellation: reads only."""
    session = await find_session(store, name)
    if session is None or not session.conversations:
        return None
    entries = await log.entries(session.conversations[-1])
    return cassette_of_log(entries, instructions=instructions)


def turns_of(entries: Sequence[LogEntry]) -> list[tuple[str, str]]:
    """What was said in a conversation, in order: ``("you", text)`` for each of the person's
    inputs (``"you (steering)"`` for steering), ``("assistant", text)`` for each response with
    text. Tool calls and reasoning are left out. Pure."""
    turns: list[tuple[str, str]] = []
    for entry in entries:
        record = entry.record
        if isinstance(record, UserInputRecorded):
            if record.kind == "feedback":  # the engine's word to the model, not the person's
                continue
            who = "you" if record.kind == "user" else f"you ({record.kind})"
            turns.append((who, said(record)))  # media parts as ``[image: cat.png, 12 KiB]``
        elif isinstance(record, ModelResponseRecorded):
            text = "".join(value for kind, value in record.content if kind == "text" and value)
            if text.strip():
                turns.append(("assistant", text))
    return turns
