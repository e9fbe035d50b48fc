"""Named sessions of the ``effectagent`` command, kept in the session store: a name points to the
conversation it continues, and the metadata counts the runs (``{"runs": n}``)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from capabilities.sessions import (
    Session,
    SessionConflict,
    SessionCreate,
    SessionPatch,
    SessionStore,
)
from effectagent.core import LogEntry, ModelResponseRecorded, UserInputRecorded
from effectagent.engine import ConversationLog
from effectagent.testing import Cassette, cassette_of_log

from ._attach import said

__all__ = [
    "NamedSession",
    "all_sessions",
    "export_session",
    "find_session",
    "runs_of",
    "turns_of",
]

_PAGE = 500


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


def runs_of(session: Session[Any]) -> int | None:
    """The run count kept in the session's metadata (None when it keeps none)."""
    metadata = session.metadata
    runs = metadata.get("runs") if isinstance(metadata, dict) else None
    return runs if isinstance(runs, int) and not isinstance(runs, bool) else None


class NamedSession:
    """One name's session: which conversation it continues, and how runs are recorded.

    ``conversation_id`` is None until the first run of a new session has started.
    """

    def __init__(self, store: SessionStore[Any], name: str, session: Session[Any] | None) -> None:
        self._store = store
        self.name = name
        self._session = session

    @staticmethod
    async def open(store: SessionStore[Any], name: str) -> NamedSession:
        """The session called ``name`` (a new one when there is none yet). Cancellation:
        nothing changes."""
        return NamedSession(store, name, await find_session(store, name))

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
        """A run of ``conversation_id`` started: a new session is created pointing to it.
        Cancellation: all or nothing."""
        if self._session is None:
            self._session = await self._store.create(
                SessionCreate(self.name, {"runs": 0}, (conversation_id,))
            )
        elif conversation_id not in self._session.conversations:
            await self._patch(lambda _: SessionPatch(add_conversations=(conversation_id,)))

    async def ended(self) -> None:
        """A run ended: count it. Cancellation: all or nothing."""
        if self._session is not None:
            await self._patch(lambda now: SessionPatch(metadata={"runs": (runs_of(now) or 0) + 1}))

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
