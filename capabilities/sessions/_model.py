"""Sessions: named records that point to conversations, with versioned metadata.

A session is *not* a conversation's history — the Conversation Log is. It names a piece of work
(``name``), lists the conversations that belong to it, and carries application metadata of a type
the application declares (:class:`SessionSchema`), stored with its schema version and lifted from
older versions on read. Every change is an optimistic compare-and-set: ``update`` names the
revision it read, and a stale revision is a :class:`SessionConflict` (read again, re-apply, retry).
Metadata is never the only record of accepted work: that is what the log is for.
"""

from __future__ import annotations

import builtins
import re
from collections.abc import Iterable, Mapping
from typing import Any, Final, Generic, Protocol, TypeVar, final

import attrs

from effectagent.effect import (
    SchemaDerivationError,
    ServiceKey,
    TaggedError,
    json_schema,
)

from .._rules import ID_BYTES_MOST, storable, too_long_id
from .._versioned import (
    Migration,
    StoredValueCorrupt,
    ValueRejected,
    ValueTooLarge,
    VersionedCodec,
    VersionUnsupported,
)

__all__ = [
    "CorruptSession",
    "DEFAULT_SCHEMA",
    "JSONObject",
    "MAX_CONVERSATIONS",
    "MAX_NAME_CHARS",
    "Session",
    "SessionConflict",
    "SessionCreate",
    "SessionExists",
    "SessionInvalid",
    "SessionInvalidType",
    "SessionInvalidValue",
    "SessionMetadataTooLarge",
    "SessionNotFound",
    "SessionPatch",
    "SessionSchema",
    "SessionStore",
    "SessionStoreError",
    "SessionStoreService",
    "SessionStoreUnavailable",
    "UnknownSessionVersion",
]

M = TypeVar("M")

#: Metadata as a plain JSON object: the default session metadata type.
JSONObject = dict[str, Any]

#: The longest session name.
MAX_NAME_CHARS: Final = 256
#: The most conversations one session points to.
MAX_CONVERSATIONS: Final = 1024
_MAX_ID_CHARS: Final = 256


# ---- errors ---------------------------------------------------------------------------------------


@attrs.frozen
class SessionStoreError(TaggedError):
    """Base of every error of a session store."""


@attrs.frozen
class SessionConflict(SessionStoreError):
    """``update`` named a revision that is no longer current: read the session again."""

    session_id: str
    expected_revision: int
    actual_revision: int
    is_retryable = True

    def __str__(self) -> str:
        return (
            f"session {self.session_id} is at revision {self.actual_revision}, not "
            f"{self.expected_revision}: read it again and retry; nothing was changed"
        )


@attrs.frozen
class SessionNotFound(SessionStoreError):
    """No session has this ID."""

    session_id: str

    def __str__(self) -> str:
        return f"no session has the ID {self.session_id}"


@attrs.frozen
class SessionExists(SessionStoreError):
    """``create`` asked for an ID a session already has."""

    session_id: str

    def __str__(self) -> str:
        return f"a session with the ID {self.session_id} exists already; nothing was stored"


@attrs.frozen
class SessionInvalid(SessionStoreError):
    """The input is not a valid session: ``problem`` says which part (metadata problems give
    the paths of the fields that do not match the schema, never their values)."""

    session_id: str
    problem: str

    def __str__(self) -> str:
        which = "the session" if self.session_id == "?" else f"session {self.session_id}"
        return f"{which} is not valid: {self.problem}"


@attrs.frozen
class SessionInvalidType(SessionInvalid, TypeError):
    """A :class:`SessionInvalid` for a value of the wrong type (also a ``TypeError``): raised
    where the value is given — building a :class:`SessionCreate` or :class:`SessionPatch`, or
    calling the store with an ID that is not a str — and by ``create`` and ``update`` for metadata
    that does not match the schema's type."""

    tag = "SessionInvalid"


@attrs.frozen
class SessionInvalidValue(SessionInvalid, ValueError):
    """A :class:`SessionInvalid` for a value of the right type that is not valid (also a
    ``ValueError``): a blank name, an empty or too long ID."""

    tag = "SessionInvalid"


@attrs.frozen
class SessionMetadataTooLarge(SessionStoreError, ValueError):
    """The metadata's JSON is larger than the schema's ``max_bytes`` (also a ``ValueError``: an
    invalid value, as every refusal of bad input is a ``TypeError`` or a ``ValueError``)."""

    session_id: str
    size: int
    limit: int

    def __str__(self) -> str:
        return (
            f"the metadata of session {self.session_id} is {self.size} bytes of JSON, more "
            f"than its schema's {self.limit}; nothing was stored"
        )


@attrs.frozen
class UnknownSessionVersion(SessionStoreError):
    """Stored metadata has a schema version with no path to the current one: written by a newer
    version of the application, or a migration step is not registered."""

    session_id: str
    version: int
    supported: int

    def __str__(self) -> str:
        return (
            f"the metadata of session {self.session_id} is of version {self.version}, which "
            f"no registered migration lifts to version {self.supported}"
        )


@attrs.frozen
class CorruptSession(SessionStoreError):
    """The stored session does not read back (damaged JSON, a failed migration, a mismatch)."""

    session_id: str
    detail: str

    def __str__(self) -> str:
        return f"session {self.session_id} does not read back: {self.detail}"


@attrs.frozen
class SessionStoreUnavailable(SessionStoreError):
    """The storage under the store failed (closed, disk full, I/O error); nothing was changed.
    ``reason`` is the storage error's tag and message."""

    session_id: str
    reason: str
    is_retryable = True

    def __str__(self) -> str:
        return f"the session store could not be used ({self.reason}); nothing was changed"


# ---- values ---------------------------------------------------------------------------------------


@final
class SessionSchema(Generic[M]):
    """How session metadata is typed and versioned.

    ``type`` is the metadata's type (an attrs class, or :data:`JSONObject`); ``version`` the schema
    version written now; ``migrations[n]`` lifts stored JSON of version ``n`` to ``n + 1``;
    ``max_bytes`` bounds the metadata's stored JSON. Raises ``ValueError`` for a version below 1,
    a migration key that is not a version below ``version`` or a ``max_bytes`` below 2, and
    ``TypeError`` for a type no JSON schema can be derived for or ``migrations`` that is not a
    mapping (or holds a step that is not callable, or an ``async def`` one).
    """

    __slots__ = ("codec",)

    def __init__(
        self,
        type: type[M],
        *,
        version: int = 1,
        migrations: Mapping[int, Migration] | None = None,
        max_bytes: int = 64 * 1024,
    ) -> None:
        try:
            json_schema(type)
        except SchemaDerivationError as exc:
            raise TypeError(f"SessionSchema's type cannot be session metadata: {exc}") from None
        if migrations is not None and not isinstance(migrations, Mapping):
            raise TypeError(
                "migrations must be a mapping from the version each lifts from to its function, "
                f"got {builtins.type(migrations).__name__}"
            )
        #: The pure codec that dumps and loads metadata.
        self.codec: VersionedCodec[M] = VersionedCodec(
            type, version, migrations or {}, max_bytes, what="session's metadata"
        )

    @property
    def version(self) -> int:
        """The schema version metadata is written with."""
        return self.codec.version

    def __repr__(self) -> str:
        return f"SessionSchema({self.codec.tp!r}, version={self.version})"


#: The schema of stores given none: metadata is any JSON object, version 1.
DEFAULT_SCHEMA: SessionSchema[JSONObject] = SessionSchema(JSONObject)


@attrs.frozen
class Session(Generic[M]):
    """A session as stored: ``revision`` counts its writes (1 when created)."""

    id: str
    name: str
    revision: int
    conversations: tuple[str, ...]
    metadata: M
    created_at: float
    updated_at: float


def shown_id(session_id: object) -> str:
    """``session_id`` as an error names it: itself when it is a short, non-blank str, else
    ``"?"``."""
    if isinstance(session_id, str) and session_id.strip() and len(session_id) <= 64:
        return session_id
    return "?"


def _conversation_ids(value: Iterable[str]) -> tuple[str, ...]:
    """``value`` as a tuple of conversation IDs, each checked (a lone str or bytes is refused:
    it would be taken letter by letter)."""
    if isinstance(value, str | bytes | bytearray) or not isinstance(value, Iterable):
        raise SessionInvalidType(
            "?",
            "conversations must be a sequence of conversation IDs (str), "
            f"got {type(value).__name__}",
        )
    return tuple(check_conversation_id(c) for c in value)


def _optional_id(_: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if value is not None:
        check_id(value)


def _create_name(instance: SessionCreate[Any], _: attrs.Attribute[Any], value: object) -> None:
    check_name(shown_id(instance.session_id), value)


def _patch_name(_: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if value is not None:
        check_name("?", value)


def _required(instance: SessionCreate[Any], _: attrs.Attribute[Any], value: object) -> None:
    if value is None:
        raise SessionInvalidValue(
            shown_id(instance.session_id),
            "metadata is required (None means 'unchanged' in a patch)",
        )


@attrs.frozen
class SessionCreate(Generic[M]):
    """What ``create`` needs: a name, metadata, the conversations it starts with, and optionally
    the ID to use (one is made up otherwise).

    Checked as it is made: a value of the wrong type raises :class:`SessionInvalidType` (a
    ``TypeError``) — a lone str for ``conversations`` included — and a blank or too long name,
    an empty or too long ID, or no metadata :class:`SessionInvalidValue` (a ``ValueError``); both
    are :class:`SessionInvalid`. Metadata is checked against the store's schema by ``create``."""

    name: str = attrs.field(validator=_create_name)
    metadata: M = attrs.field(validator=_required)
    conversations: tuple[str, ...] = attrs.field(default=(), converter=_conversation_ids)
    session_id: str | None = attrs.field(default=None, validator=_optional_id)


_KEEP: Final[Any] = None


@attrs.frozen
class SessionPatch(Generic[M]):
    """A change to a session: a new name and/or new metadata (``None``: unchanged — metadata is
    replaced whole, never merged), conversations to add (appended in order, once) and to
    remove. Checked as it is made, as :class:`SessionCreate` is."""

    name: str | None = attrs.field(default=None, validator=_patch_name)
    metadata: M | None = _KEEP
    add_conversations: tuple[str, ...] = attrs.field(default=(), converter=_conversation_ids)
    remove_conversations: tuple[str, ...] = attrs.field(default=(), converter=_conversation_ids)


# ---- the service ----------------------------------------------------------------------------------


class SessionStore(Protocol[M]):
    """Creates, reads and updates sessions (optimistic concurrency on ``revision``)."""

    async def create(self, input: SessionCreate[M]) -> Session[M]:
        """Store a new session (revision 1). Raises :class:`SessionExists`,
        :class:`SessionInvalid`, :class:`SessionMetadataTooLarge`. Cancellation: all or nothing."""
        ...

    async def get(self, session_id: str) -> Session[M] | None:
        """The session, its metadata lifted to the current schema version; None if there is none.
        Raises :class:`UnknownSessionVersion`, :class:`CorruptSession`. Cancellation: nothing
        changes."""
        ...

    async def update(
        self, session_id: str, patch: SessionPatch[M], expected_revision: int
    ) -> Session[M]:
        """Apply ``patch`` if the session is still at ``expected_revision``; return it at its new
        revision. Raises :class:`SessionConflict`, :class:`SessionNotFound`, and what ``create``
        raises for bad input. Cancellation: all or nothing."""
        ...

    async def list(self, *, after: str | None = None, limit: int = 100) -> tuple[Session[M], ...]:
        """At most ``limit`` sessions (1 to 1,000) in the order of their IDs (by code point,
        as Python compares str — on every store), from the first ID greater than ``after`` (None: from the start) — pass the last ID of one page as ``after``
        to get the next; an empty page is the end. Raises what ``get`` raises for a session that
        cannot be read, naming it. Cancellation: nothing changes."""
        ...

    async def delete(
        self, session_id: str, expected_revision: int, *, conversations: bool = False
    ) -> None:
        """Remove the session if it is still at ``expected_revision``. Its conversations are not
        touched (a session points to them; their history stays in the log) — unless
        ``conversations=True``: then those no other session lists are deleted with it, in one
        step, with the media no remaining record refers to; while one of them has a run going,
        nothing is deleted (:class:`SessionStoreUnavailable`). Raises
        :class:`SessionConflict`, :class:`SessionNotFound`. Cancellation: all or nothing."""
        ...


#: The service key of the session store.
SessionStoreService: ServiceKey[SessionStore[Any]] = ServiceKey(
    "capabilities.SessionStore", "named sessions pointing to conversations"
)


# ---- the rules both stores apply (pure) ---------------------------------------------------------


def check_id(session_id: object) -> str:
    """``session_id`` if it is a usable session ID; raises :class:`SessionInvalidType` (not a
    str) or :class:`SessionInvalidValue` (empty, too long, holding NUL or a lone surrogate —
    a store keeps it in a text column) otherwise."""
    problem = (
        f"a session ID is a non-empty string of at most {_MAX_ID_CHARS} characters, "
        "without NUL or lone surrogates"
    )
    if not isinstance(session_id, str):
        raise SessionInvalidType("?", f"{problem}, got {type(session_id).__name__}")
    if not session_id or len(session_id) > _MAX_ID_CHARS or not storable(session_id):
        raise SessionInvalidValue(shown_id(session_id) if storable(session_id) else "?", problem)
    return session_id


def check_conversation_id(conversation_id: object) -> str:
    """``conversation_id`` if a session may list it: any ID a run takes — not blank, at most
    :data:`ID_BYTES_MOST` (512) bytes in UTF-8 (the list is stored as JSON, so any text fits);
    raises :class:`SessionInvalidType` or :class:`SessionInvalidValue` otherwise."""
    problem = f"a conversation ID is a non-empty string of at most {ID_BYTES_MOST} bytes in UTF-8"
    if not isinstance(conversation_id, str):
        raise SessionInvalidType("?", f"{problem}, got {type(conversation_id).__name__}")
    if not conversation_id.strip() or too_long_id(conversation_id):
        raise SessionInvalidValue("?", problem)
    return conversation_id


def check_name(session_id: str, name: object) -> str:
    """``name`` if it is a valid session name; raises :class:`SessionInvalidType` (not a str) or
    :class:`SessionInvalidValue` (blank, too long, holding NUL or a lone surrogate) otherwise."""
    problem = (
        f"the name must be a non-blank string of at most {MAX_NAME_CHARS} chars, "
        "without NUL or lone surrogates"
    )
    if not isinstance(name, str):
        raise SessionInvalidType(session_id, f"{problem}, got {type(name).__name__}")
    if not name.strip() or len(name) > MAX_NAME_CHARS or not storable(name):
        raise SessionInvalidValue(session_id, problem)
    return name


def merge_conversations(
    session_id: str,
    current: tuple[str, ...],
    add: tuple[str, ...] = (),
    remove: tuple[str, ...] = (),
) -> tuple[str, ...]:
    """``current`` without ``remove``, then each of ``add`` not in what is left, in order; raises
    :class:`SessionInvalid` for a bad ID or too many conversations."""
    for conversation_id in (*add, *remove):
        check_conversation_id(conversation_id)
    removed = set(remove)
    merged = [c for c in current if c not in removed]
    seen = set(merged)
    for conversation_id in add:
        if conversation_id not in seen:
            merged.append(conversation_id)
            seen.add(conversation_id)
    if len(merged) > MAX_CONVERSATIONS:
        raise SessionInvalidValue(
            session_id, f"a session points to at most {MAX_CONVERSATIONS} conversations"
        )
    return tuple(merged)


#: A path segment naming a mapping's key (``["sk-…"]``): the key is part of the metadata.
_KEY_SEGMENT: Final = re.compile(r'\["(?:[^"\\]|\\.)*"\]')


def _blind(path: str) -> str:
    """``path`` with every mapping key in it replaced by ``[…]``: an error says where metadata
    went wrong, never what it holds — and a key is as much the metadata's as its items are."""
    return _KEY_SEGMENT.sub("[…]", path)


def dump_metadata(schema: SessionSchema[M], session_id: str, metadata: M) -> str:
    """The stored JSON of ``metadata``; raises :class:`SessionInvalidType` (with the paths that
    do not match) or :class:`SessionMetadataTooLarge`."""
    if metadata is None:
        raise SessionInvalidValue(
            session_id, "metadata is required (None means 'unchanged' in a patch)"
        )
    try:
        return schema.codec.dump(metadata)
    except ValueRejected as exc:
        where = ", ".join(_blind(path) for path in exc.paths[:10]) or "$"
        raise SessionInvalidType(
            session_id, f"the metadata does not match its schema at {where}"
        ) from None
    except ValueTooLarge as exc:
        raise SessionMetadataTooLarge(session_id, exc.size, exc.limit) from None


def load_metadata(schema: SessionSchema[M], session_id: str, version: int, text: str) -> M:
    """Metadata stored with ``version``, lifted to the current version; raises
    :class:`UnknownSessionVersion` or :class:`CorruptSession`."""
    try:
        return schema.codec.load(version, text)
    except VersionUnsupported as exc:
        raise UnknownSessionVersion(session_id, exc.version, exc.current) from None
    except StoredValueCorrupt as exc:
        raise CorruptSession(session_id, _blind(exc.detail)) from None
