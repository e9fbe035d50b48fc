"""A run's input with images, documents or audio: checked, recorded by digest, its bytes kept
once per digest beside the log and found again when a later run or a resume projects it.

A run's input is a ``str`` or a sequence of ``str`` and :class:`~effectagent.ai.MediaPart`
values (``["What is in this picture?", ImagePart.from_path("cat.png")]``). Text alone costs
nothing here: :func:`user_content` returns None for a ``str``, and :func:`load_media` looks at
each history record's type and nothing else when none holds media.

The bytes go to the Conversation Log when it is a :class:`MediaStore` (the in-memory log and the
SQLite storage are): ``put_media`` keeps each digest once, for the conversation that is about to
record it, and ``media`` returns those it has. A log that is not one refuses input with media
bytes (a URL part needs no store). The in-memory log keeps the bytes in a :class:`MediaShelf`:
each digest while a conversation it keeps refers to it, counted within its retention.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import Any, Final, Protocol, TypeAlias, final, runtime_checkable

import attrs

from effectagent.ai import (
    DocumentPart,
    MediaPart,
    MediaRef,
    TextContent,
    ToolMessage,
    ToolResultContent,
)
from effectagent.core import (
    LogEntry,
    ToolCallSettled,
    ToolOutcome,
    ToolSuccess,
    UserInputRecorded,
    media_parts_of,
)

from ._seams import ConversationLogError

__all__ = [
    "MediaMissing",
    "MediaNotKept",
    "MediaShelf",
    "MediaStore",
    "UserContent",
    "check_run_input",
    "check_user_input",
    "describe_input",
    "load_media",
    "media_digests",
    "recorded_parts",
    "reference_of",
    "settled_with_media",
    "redacted_content",
    "store_media",
    "user_content",
]

#: The content of a user message that holds media.
UserContent: TypeAlias = tuple[TextContent | MediaPart, ...]


@attrs.frozen
class MediaMissing(ConversationLogError):
    """Record ``seq`` of the conversation refers to media whose bytes the log does not keep: the
    history cannot be sent to a model again, so the run ends ``failed`` (``StorageFailed``)
    before any request."""

    conversation_id: str
    seq: int
    described: str

    def __str__(self) -> str:
        return (
            f"the bytes of {self.described}, which record {self.seq} of conversation "
            f"{self.conversation_id} refers to, are not stored: the conversation cannot be sent "
            "to a model again with it"
        )


@attrs.frozen
class MediaNotKept(ConversationLogError):
    """The conversation log (``log_class``) keeps no media bytes, so input or a tool result
    with media cannot be recorded; nothing was written."""

    conversation_id: str
    seq: int | None
    log_class: str

    def __str__(self) -> str:
        return (
            f"the conversation log ({self.log_class}) of conversation {self.conversation_id} "
            "cannot keep images, documents or audio: use the in-memory log or the SQLite storage"
        )


@runtime_checkable
class MediaStore(Protocol):
    """Where a Conversation Log keeps the bytes of media parts, once per SHA-256 digest."""

    async def put_media(self, conversation_id: str, blobs: Mapping[str, bytes]) -> None:
        """Keep ``blobs`` (digest → bytes), which a record of ``conversation_id`` is about to
        refer to; a digest already kept is not written again. A store may let the bytes go once
        no conversation it keeps refers to them (put for it, or named by its records).

        Cancellation: all or nothing per call, as the log's append."""
        ...

    async def media(self, digests: Collection[str]) -> Mapping[str, bytes]:
        """The bytes of those of ``digests`` that are kept (a missing one is left out).

        Cancellation: a cancellation point; nothing changes either way."""
        ...


def check_user_input(value: object) -> None:
    """Refuse a run input that is neither a str nor a non-empty sequence of str and media parts,
    naming what is wrong (``TypeError``; ``ValueError`` for an empty sequence)."""
    if isinstance(value, str):
        return
    if isinstance(value, bytes | bytearray) or not isinstance(value, Sequence):
        raise TypeError(
            "a run's text must be a str or a sequence of str and media parts (ImagePart, "
            f"DocumentPart, AudioPart), got {type(value).__name__}"
        )
    if not value:
        raise ValueError("a run's input must not be an empty sequence")
    for index, part in enumerate(value):
        if not isinstance(part, str | MediaPart):
            raise TypeError(
                f"a run's input holds str and media parts only; item {index} is "
                f"{type(part).__name__}"
            )


def check_run_input(value: object) -> None:
    """:func:`check_user_input`, and refuse text that is empty or only spaces (``ValueError``):
    a model reads nothing there, and some providers refuse an empty text block."""
    check_user_input(value)
    if isinstance(value, str):
        if not value.strip():
            raise ValueError("a run's text must not be empty or only spaces")
        return
    parts: Sequence[object] = value  # type: ignore[assignment]  # a sequence: checked above
    for index, part in enumerate(parts):
        if isinstance(part, str) and not part.strip():
            raise ValueError(f"a run's input: item {index} is text that is empty or only spaces")


def user_content(value: str | Sequence[str | MediaPart]) -> tuple[str, UserContent | None]:
    """(the input's text, its content when it holds a media part — None for text alone). The
    text is the text parts joined by blank lines."""
    if isinstance(value, str):
        return value, None
    texts = [part for part in value if isinstance(part, str)]
    content = tuple(TextContent(p) if isinstance(p, str) else p for p in value)
    if all(isinstance(p, str) for p in value):
        return "\n\n".join(texts), None
    return "\n\n".join(texts), content


def describe_input(text: str, content: UserContent | None) -> str:
    """How events, spans and logs show the input: its text, then a line per media part — its
    kind, name, size, media type and digest (:meth:`~effectagent.ai.MediaPart.label`)."""
    if content is None:
        return text
    media = [part.label() for part in content if isinstance(part, MediaPart)]
    return "\n".join([text, *media]) if text else "\n".join(media)


def reference_of(part: MediaPart, redact: Any) -> dict[str, Any]:
    """What a record holds of ``part``: its reference, a URL and a name redacted as text."""
    ref = part.reference()
    if "url" in ref:
        ref["url"] = redact(ref["url"])
    if "name" in ref:
        ref["name"] = redact(ref["name"])
    return ref


def recorded_parts(content: UserContent, redact: Any) -> tuple[tuple[str, Any], ...]:
    """The record's ``parts`` of ``content``: redacted text, media by reference."""
    return tuple(
        ("text", redact(part.text))
        if isinstance(part, TextContent)
        else ("media", reference_of(part, redact))
        for part in content
    )


def redacted_content(content: UserContent, redact: Callable[[str], str]) -> UserContent:
    """``content`` as the model reads it and the log keeps it: text parts redacted, and the text
    of a text document too (a new part, of a new digest, when redaction changed it); a part's
    name redacted (providers send it: a document's title, a file name); images, PDFs, audio and
    URLs as they are (a URL is redacted in the record only: the provider fetches it)."""
    out: list[TextContent | MediaPart] = []
    for part in content:
        if isinstance(part, TextContent):
            out.append(TextContent(redact(part.text)))
            continue
        if part.name:
            name = redact(part.name)
            if name != part.name:
                part = _renamed(part, name)
        if part.kind == "document" and not part.url and part.media_type.startswith("text/"):
            text = part.data.decode("utf-8", "replace")
            shown = redact(text)
            if shown != text:
                out.append(_document(shown.encode(), part))
                continue
        out.append(part)
    return tuple(out)


#: The most characters a media part's name may have (``MediaPart`` refuses a longer one).
_NAME_MOST = 1024


def _renamed(part: MediaPart, name: str) -> MediaPart:
    """``part`` under another ``name`` (the same bytes or URL, the same media type): a redacted
    name, cut to what a part's name may be — redaction lengthens a name that holds a secret
    shorter than its marker."""
    name = name[:_NAME_MOST]
    if part.url:
        return type(part)(url=part.url, media_type=part.media_type, name=name)
    return type(part)(part.data, media_type=part.media_type, name=name, max_bytes=part.size + 1)


def _document(data: bytes, like: MediaPart) -> MediaPart:
    return DocumentPart(data, media_type=like.media_type, name=like.name, max_bytes=len(data) + 1)


async def store_media(
    log: object, content: Iterable[TextContent | MediaPart], conversation_id: str
) -> None:
    """Keep the bytes of ``content``'s media parts in ``log`` (by digest).

    Raises :class:`MediaNotKept` (a ``ConversationLogError``: the run ends ``failed`` with
    ``StorageFailed``) when ``log`` cannot keep media. Cancellation: as ``put_media``."""
    blobs = {p.digest: p.data for p in content if isinstance(p, MediaPart) and not p.url}
    if not blobs:
        return
    if not isinstance(log, MediaStore):
        raise MediaNotKept(conversation_id, None, type(log).__name__)
    await log.put_media(conversation_id, blobs)


def media_digests(record: object) -> tuple[str, ...]:
    """The digests of the media ``record`` refers to (a user input's parts, a tool success's
    media), in order; none for any other record. Pure."""
    if type(record) is UserInputRecorded:
        values: Iterable[Any] = (v for k, v in record.parts if k == "media")
    elif type(record) is ToolCallSettled and type(record.outcome) is ToolSuccess:
        values = record.outcome.media
    else:
        return ()
    return tuple(
        v["digest"] for v in values if isinstance(v, Mapping) and isinstance(v.get("digest"), str)
    )


#: What one conversation's hold on a digest costs besides the bytes: the digest string, its
#: count, and the entries of the dicts and sets that keep them (errs high).
SHELF_ENTRY_BYTES: Final = 256


@final
class MediaShelf:
    """Media bytes by digest, each kept while a conversation refers to it. Pure.

    A conversation refers to a digest once bytes were put for it (:meth:`put`, before its record
    is appended, so bytes put by a run that failed before recording them still go with its
    conversation) or once a record of it names the kept digest (:meth:`refer`). Each digest
    keeps a count of the conversations that refer to it; :meth:`drop` (the conversation was
    evicted) lowers the counts and frees the bytes whose count reaches zero. Both :meth:`put`
    and :meth:`refer` return what the conversation is charged: the size of each digest newly
    referred to and :data:`SHELF_ENTRY_BYTES` — so bytes shared by two conversations are
    charged to each (the retention's estimate errs high, never low), and the bytes kept are at
    most the sum of what the kept conversations were charged.
    """

    __slots__ = ("_bytes", "_counts", "_of", "held_bytes")

    def __init__(self) -> None:
        self._bytes: dict[str, bytes] = {}
        self._counts: dict[str, int] = {}
        self._of: dict[str, set[str]] = {}  # conversation -> the digests it refers to
        #: The size of the bytes kept (each digest once).
        self.held_bytes = 0

    def put(self, conversation_id: str, blobs: Mapping[str, bytes]) -> int:
        """Keep ``blobs`` for the conversation; return what it is charged."""
        if not blobs:
            return 0
        kept = self._bytes
        for digest, data in blobs.items():
            if digest not in kept:
                kept[digest] = data
                self.held_bytes += len(data)
        return self.refer(conversation_id, blobs)

    def refer(self, conversation_id: str, digests: Iterable[str]) -> int:
        """The conversation refers to ``digests`` (those not kept are left out); return what
        it is charged for those it did not refer to yet."""
        kept = self._bytes
        mine = self._of.get(conversation_id)
        charged = 0
        for digest in digests:
            data = kept.get(digest)
            if data is None:
                continue
            if mine is None:
                mine = self._of[conversation_id] = set()
            elif digest in mine:
                continue
            mine.add(digest)
            self._counts[digest] = self._counts.get(digest, 0) + 1
            charged += sys.getsizeof(data) + SHELF_ENTRY_BYTES
        return charged

    def drop(self, conversation_id: str) -> None:
        """The conversation is gone: free the bytes no other conversation refers to."""
        counts, kept = self._counts, self._bytes
        for digest in self._of.pop(conversation_id, ()):
            left = counts[digest] - 1
            if left:
                counts[digest] = left
            else:
                del counts[digest]
                self.held_bytes -= len(kept.pop(digest))

    def get(self, digests: Iterable[str]) -> dict[str, bytes]:
        """The kept bytes of ``digests`` (those not kept left out)."""
        kept = self._bytes
        return {digest: kept[digest] for digest in digests if digest in kept}

    @property
    def digests(self) -> frozenset[str]:
        """The digests whose bytes are kept."""
        return frozenset(self._bytes)

    def referred_by(self, conversation_id: str) -> frozenset[str]:
        """The digests the conversation refers to."""
        return frozenset(self._of.get(conversation_id, ()))


def _references(entries: Iterable[LogEntry]) -> dict[str, tuple[LogEntry, MediaRef]]:
    """The media references of ``entries`` by digest (with the first entry holding each)."""
    found: dict[str, tuple[LogEntry, MediaRef]] = {}
    for entry in entries:
        record = entry.record
        values: list[Any]
        if isinstance(record, UserInputRecorded):
            values = [v for k, v in record.parts if k == "media"]
        elif isinstance(record, ToolCallSettled) and isinstance(record.outcome, ToolSuccess):
            values = list(record.outcome.media)
        else:
            continue
        for value in values:
            if isinstance(value, Mapping) and "digest" in value:
                ref = MediaRef.of(value)
                if isinstance(ref, MediaRef):
                    found.setdefault(ref.digest, (entry, ref))
    return found


async def load_media(log: object, entries: Iterable[LogEntry]) -> Mapping[str, bytes] | None:
    """The bytes of the media ``entries`` refer to, by digest — None when they refer to none.

    Raises :class:`MediaMissing` (a ``ConversationLogError``) naming the first record whose
    media bytes the log does not keep. Cancellation: as the store's ``media``."""
    references = _references(entries)
    if not references:
        return None
    kept = await log.media(list(references)) if isinstance(log, MediaStore) else {}
    for digest, (entry, ref) in references.items():
        if digest not in kept:
            record = entry.record
            assert isinstance(record, UserInputRecorded | ToolCallSettled)
            raise MediaMissing(record.conversation_id, entry.seq, ref.describe())
    return kept


async def settled_with_media(io: Any, outcomes: Sequence[ToolOutcome]) -> ToolMessage:
    """The tool message of a batch whose tools returned media: their bytes (``io.take_media``)
    kept in the log's media store first, then each result with its parts.

    Cancellation: as the store's ``put_media``."""
    kept: dict[str, bytes] = io.take_media()
    results: list[ToolResultContent] = []
    for o in outcomes:
        media = media_parts_of(o.media, kept) if isinstance(o, ToolSuccess) and o.media else ()
        results.append(
            ToolResultContent(o.tool_call_id, o.tool_name, o.model_content(), o.is_failure, media)
        )
    parts = [p for r in results for p in r.media]
    await store_media(io.conversation_log, parts, io.conversation_id)
    return ToolMessage(tuple(results))
