"""A session as both stores keep it — metadata as versioned JSON text — and the pure rules that
create and patch one (validation, the revision check). Pure: no I/O."""

from __future__ import annotations

from typing import Any, TypeVar

import attrs

from .._ids import new_id
from .._rules import storable
from ._model import (
    Session,
    SessionConflict,
    SessionCreate,
    SessionInvalidType,
    SessionInvalidValue,
    SessionNotFound,
    SessionPatch,
    SessionSchema,
    check_id,
    check_name,
    dump_metadata,
    load_metadata,
    merge_conversations,
    shown_id,
)

__all__ = [
    "MAX_PAGE",
    "StoredSession",
    "check_delete",
    "check_flag",
    "check_page",
    "check_revision",
    "check_update",
    "create_row",
    "patch_row",
]

M = TypeVar("M")


@attrs.frozen
class StoredSession:
    """One stored session: what a row of either store holds."""

    id: str
    name: str
    revision: int
    conversations: tuple[str, ...]
    version: int
    metadata: str
    created_at: float
    updated_at: float

    def session(self, schema: SessionSchema[M]) -> Session[M]:
        """The session, its metadata decoded (and lifted to the current version)."""
        metadata = load_metadata(schema, self.id, self.version, self.metadata)
        return Session(
            self.id,
            self.name,
            self.revision,
            self.conversations,
            metadata,
            self.created_at,
            self.updated_at,
        )


def create_row(schema: SessionSchema[Any], input: SessionCreate[Any], now: float) -> StoredSession:
    """The row of a new session (revision 1), after checking every part of ``input``."""
    if not isinstance(input, SessionCreate):
        raise SessionInvalidType("?", f"create takes a SessionCreate, got {type(input).__name__}")
    session_id = check_id(input.session_id) if input.session_id is not None else new_id("session")
    name = check_name(session_id, input.name)
    conversations = merge_conversations(session_id, (), input.conversations)
    text = dump_metadata(schema, session_id, input.metadata)
    return StoredSession(session_id, name, 1, conversations, schema.version, text, now, now)


def patch_row(
    schema: SessionSchema[Any],
    current: StoredSession,
    patch: SessionPatch[Any],
    expected_revision: int,
    now: float,
) -> tuple[StoredSession, Session[Any]]:
    """The row after ``patch``, and the session it reads as — or :class:`SessionConflict` if
    ``current`` is not at ``expected_revision``. Everything that can fail fails here, before the
    caller writes anything (the metadata kept is decoded too, so a session that cannot be read
    is not updated)."""
    check_update(current.id, patch, expected_revision)
    if current.revision != expected_revision:
        raise SessionConflict(current.id, expected_revision, current.revision)
    name = current.name if patch.name is None else check_name(current.id, patch.name)
    conversations = merge_conversations(
        current.id, current.conversations, patch.add_conversations, patch.remove_conversations
    )
    if patch.metadata is None:
        version, text = current.version, current.metadata
        metadata = load_metadata(schema, current.id, version, text)
    else:
        version, text = schema.version, dump_metadata(schema, current.id, patch.metadata)
        # Read back from what is stored: the caller's object (a dict, say) is not shared.
        metadata = load_metadata(schema, current.id, version, text)
    row = StoredSession(
        current.id,
        name,
        current.revision + 1,
        conversations,
        version,
        text,
        current.created_at,
        now,
    )
    session = Session(
        row.id, name, row.revision, conversations, metadata, row.created_at, row.updated_at
    )
    return row, session


def check_update(session_id: str, patch: object, expected_revision: object) -> None:
    """``update``'s patch and revision, checked at the call — before the session is looked up,
    so a patch that is not a :class:`SessionPatch` or a revision that is not an int is
    refused (:class:`SessionInvalidType`, a ``TypeError``) whether or not the session exists."""
    if not isinstance(patch, SessionPatch):
        raise SessionInvalidType(
            shown_id(session_id), f"update takes a SessionPatch, got {type(patch).__name__}"
        )
    check_revision(shown_id(session_id), expected_revision)


def check_revision(session_id: str, expected_revision: object) -> int:
    """``expected_revision`` if it is an int (a bool is not); raises :class:`SessionInvalidType`
    (a ``TypeError``) otherwise."""
    if type(expected_revision) is not int:
        raise SessionInvalidType(
            session_id, f"expected_revision must be an int, got {type(expected_revision).__name__}"
        )
    return expected_revision


def check_flag(session_id: object, conversations: object) -> bool:
    """``delete``'s ``conversations=`` if it is a bool (a truthy str would delete history);
    raises :class:`SessionInvalidType` (a ``TypeError``) otherwise."""
    if type(conversations) is not bool:
        raise SessionInvalidType(
            shown_id(session_id),
            f"conversations must be a bool, got {type(conversations).__name__}",
        )
    return conversations


#: The most sessions one ``list`` call returns.
MAX_PAGE = 1_000


def check_page(after: object, limit: object) -> tuple[str | None, int]:
    """``list``'s arguments, checked: a session ID or None (one no store could keep — holding NUL
    or a lone surrogate — is refused with :class:`SessionInvalidValue`), and a limit from 1 to
    ``MAX_PAGE``."""
    if after is not None and not isinstance(after, str):
        raise SessionInvalidType(
            "?", f"after must be a session ID (str) or None, got {type(after).__name__}"
        )
    if after is not None and not storable(after):  # no session has such an ID
        raise SessionInvalidValue("?", "after must be a session ID: without NUL or lone surrogates")
    if type(limit) is not int:
        raise SessionInvalidType("?", f"limit must be an int, got {type(limit).__name__}")
    if not 1 <= limit <= MAX_PAGE:
        raise SessionInvalidValue("?", f"limit must be from 1 to {MAX_PAGE}, got {limit}")
    return after, limit


def check_delete(current: StoredSession | None, session_id: str, expected_revision: object) -> None:
    """Whether ``current`` may be deleted at ``expected_revision``: raises
    :class:`SessionNotFound` or :class:`SessionConflict` if not (and
    :class:`SessionInvalidType` for a revision that is not an int)."""
    revision = check_revision(shown_id(session_id), expected_revision)
    if current is None:
        raise SessionNotFound(session_id)
    if current.revision != revision:
        raise SessionConflict(current.id, revision, current.revision)
