"""The in-memory Conversation Log (deployment class E): append-only, gap-free sequence numbers,
and bounded — a long-lived runtime must not grow with the number of conversations it served.

Retention (:class:`LogRetention`): the log keeps at most ``max_conversations`` conversations and
about ``max_bytes`` of records and media bytes. Past either cap it evicts whole conversations,
the least recently used idle one first (used: appended to, read, or its run ended). A
conversation with a run going is *held* and never evicted: from the runtime's claim of it until
the run is released, and — which covers child runs too — from the append of a run's input
record (``UserInputRecorded`` of kind ``"user"``) to the append of that run's terminal record
(every run writes one; a run that never did would keep its conversation). So once no
conversation is held, the log is within both caps; while runs are going it may exceed them by
what those runs hold.

Media bytes (images, documents, audio: ``put_media``) are kept once per digest in a
:class:`~effectagent.engine._media.MediaShelf`, and each conversation that refers to a digest —
bytes put for it, or a record of it naming them — is charged their size. An evicted
conversation lets go of its digests, and the bytes no kept conversation refers to any more are
freed with it; so the media bytes kept are never more than what the kept conversations were
charged, and a digest a kept conversation refers to stays readable.

An evicted conversation's records are gone; the log remembers the IDs of the last
``remember_evicted`` evictions, so continuing one is :class:`~effectagent.engine.ConversationEvicted`
(an ``UnknownConversation`` that says why) rather than a plain unknown conversation.
``LogRetention.keep_everything()`` turns retention off (tests, short scripts).

The pure bookkeeping — sizes, holds, least-recently-used order, tombstones — is
:class:`RetentionLedger`, tested without Trio in ``tests/memory/test_retention.py``.
"""

from __future__ import annotations

import operator
import sys
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import Any, Final, cast, final

import attrs
import trio

from effectagent.core import (
    AgentStateWritten,
    CompactionCreated,
    ContextAdded,
    ConversationCreated,
    LogEntry,
    ModelResponseRecorded,
    Record,
    RunCompletedRecord,
    RunFailedRecord,
    ToolCallPrepared,
    ToolCallSettled,
    ToolSuccess,
    UserInputRecorded,
)

from ._media import MediaShelf, media_digests
from ._run_arguments import check_id

__all__ = [
    "InMemoryConversationLog",
    "LogRetention",
    "RetentionLedger",
    "estimate_bytes",
    "record_bytes",
]

_MIB: Final = 1024 * 1024
#: What a ledger call that evicts nothing returns (shared: callers only read it).
_NONE_EVICTED: Final[list[str]] = []


def _check_remembered(_: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if type(value) is not int or value < 0:
        raise ValueError(f"LogRetention.remember_evicted must be an int ≥ 0, got {value!r}")


def _check_cap(_: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if value is not None and (type(value) is not int or value < 1):
        raise ValueError(
            f"LogRetention.{attribute.name} must be a positive int or None, got {value!r}"
        )


@final
@attrs.frozen(kw_only=True)
class LogRetention:
    """How much the in-memory Conversation Log keeps (see the module notes).

    ``max_conversations`` caps the conversations kept, ``max_bytes`` the estimated size of their
    records (:func:`record_bytes`: about what the objects take in memory); None lifts a
    cap. ``remember_evicted`` is how many evicted conversation IDs are remembered to say
    "evicted" (about 100 bytes each); older evictions read as unknown conversations.
    """

    max_conversations: int | None = attrs.field(default=1_000, validator=_check_cap)
    max_bytes: int | None = attrs.field(default=64 * _MIB, validator=_check_cap)
    remember_evicted: int = attrs.field(default=1_000, validator=_check_remembered)

    @staticmethod
    def keep_everything() -> LogRetention:
        """No cap: every conversation is kept for the log's lifetime (tests, short scripts)."""
        return LogRetention(max_conversations=None, max_bytes=None, remember_evicted=0)

    @property
    def bounded(self) -> bool:
        """Whether any cap applies."""
        return self.max_conversations is not None or self.max_bytes is not None


@final
class RetentionLedger:
    """Sizes, holds and least-recently-used order of the conversations of a log. Pure.

    Invariants (``tests/memory/test_retention.py``): a held conversation is never evicted; each
    call that may evict leaves the ledger within both caps unless only held conversations are
    left over them; among idle conversations the least recently used goes first; an evicted
    conversation is remembered (up to ``remember_evicted``) until it is created again.
    """

    __slots__ = ("_evicted", "_holds", "_idle", "_sizes", "limits", "total_bytes")

    def __init__(self, limits: LogRetention | None = None) -> None:
        self.limits = limits or LogRetention()
        self._sizes: dict[str, int] = {}  # every kept conversation, with its estimated bytes
        self._idle: dict[str, None] = {}  # the kept conversations not held, least recent first
        self._holds: dict[str, int] = {}  # conversation -> holds (kept or not yet created)
        self._evicted: dict[str, None] = {}  # remembered evictions, oldest first
        self.total_bytes = 0

    @property
    def conversations(self) -> int:
        """How many conversations are kept."""
        return len(self._sizes)

    def kept(self, conversation_id: str) -> bool:
        """Whether the conversation is kept."""
        return conversation_id in self._sizes

    def held(self, conversation_id: str) -> bool:
        """Whether the conversation is held (never evicted while it is)."""
        return conversation_id in self._holds

    def size(self, conversation_id: str) -> int:
        """The conversation's estimated bytes (0 if not kept)."""
        return self._sizes.get(conversation_id, 0)

    def was_evicted(self, conversation_id: str) -> bool:
        """Whether the conversation was evicted (and is remembered as such)."""
        return conversation_id in self._evicted

    def grew(self, conversation_id: str, size: int) -> list[str]:
        """The conversation (created now if it was not kept) grew by ``size`` bytes and was
        used; return the conversations this evicts, in eviction order."""
        sizes = self._sizes
        if conversation_id in sizes:
            sizes[conversation_id] += size
        else:
            sizes[conversation_id] = size
            self._evicted.pop(conversation_id, None)  # created anew under that ID
        self.total_bytes += size
        if conversation_id not in self._holds:
            self._idle.pop(conversation_id, None)
            self._idle[conversation_id] = None
        return self._evict()

    def used(self, conversation_id: str) -> None:
        """The conversation was read: it becomes the most recently used."""
        idle = self._idle
        if conversation_id in idle:
            del idle[conversation_id]
            idle[conversation_id] = None

    def hold(self, conversation_id: str) -> None:
        """A run of the conversation is going (it need not exist yet): never evict it until each
        hold is released."""
        holds = self._holds
        holds[conversation_id] = holds.get(conversation_id, 0) + 1
        self._idle.pop(conversation_id, None)

    def release(self, conversation_id: str) -> list[str]:
        """One hold of the conversation ended; when it was the last, the conversation becomes the
        most recently used idle one. Return the conversations this evicts."""
        holds = self._holds
        count = holds.get(conversation_id, 0)
        if count > 1:
            holds[conversation_id] = count - 1
            return []
        if count == 0:
            return []
        del holds[conversation_id]
        if conversation_id in self._sizes:
            self._idle[conversation_id] = None
        return self._evict()

    def forget(self, conversation_id: str) -> bool:
        """The conversation was deleted (not evicted: it is not remembered as such); return
        whether it was kept. A held one is refused (``ValueError``): a run of it is going."""
        if conversation_id in self._holds:
            raise ValueError(f"conversation {conversation_id!r} has a run going")
        size = self._sizes.pop(conversation_id, None)
        if size is None:
            return False
        self._idle.pop(conversation_id, None)
        self.total_bytes -= size
        return True

    def over(self) -> bool:
        """Whether the kept conversations exceed a cap."""
        limits = self.limits
        return (
            limits.max_conversations is not None and len(self._sizes) > limits.max_conversations
        ) or (limits.max_bytes is not None and self.total_bytes > limits.max_bytes)

    def _evict(self) -> list[str]:
        if not self.over():  # most calls: nothing to evict, and no list made for it
            return _NONE_EVICTED
        evicted: list[str] = []
        idle = self._idle
        while idle and self.over():
            conversation_id = next(iter(idle))
            del idle[conversation_id]
            self.total_bytes -= self._sizes.pop(conversation_id)
            self._remember(conversation_id)
            evicted.append(conversation_id)
        return evicted

    def _remember(self, conversation_id: str) -> None:
        keep = self.limits.remember_evicted
        if not keep:
            return
        remembered = self._evicted
        remembered[conversation_id] = None
        if len(remembered) > keep:
            del remembered[next(iter(remembered))]


#: How to read the fields of the classes :func:`estimate_bytes` walks into, by class: a getter
#: and whether it returns a tuple of them (more than one field) or the one field's value.
_FIELDS: dict[type, tuple[Callable[[object], object], bool] | None] = {}
#: The size of values of a fixed size (None and booleans are shared: they take nothing).
_FIXED: Final[dict[type, int]] = {
    int: sys.getsizeof(1 << 20),
    float: sys.getsizeof(0.5),
    bool: 0,
    type(None): 0,
}
_STR_HEADER: Final = sys.getsizeof("")
#: The most objects one estimate walks.
_MAX_OBJECTS: Final = 200_000


def _fields_of(cls: type) -> tuple[Callable[[object], object], bool] | None:
    if cls in _FIELDS:
        return _FIELDS[cls]
    if attrs.has(cls):
        names = tuple(field.name for field in attrs.fields(cls))
    else:
        fields = getattr(cls, "__dataclass_fields__", None)
        names = tuple(fields) if isinstance(fields, dict) else ()
    found = (operator.attrgetter(*names), len(names) > 1) if names else None
    _FIELDS[cls] = found
    return found


def estimate_bytes(value: object) -> int:
    """About how many bytes ``value`` and what it holds take in memory: ``sys.getsizeof`` of
    every object reached through tuples, lists, sets, dicts and attrs or dataclass fields (an
    ASCII string as its length and header, a number as its usual size). An object reached twice
    counts twice, so the estimate errs high; past ``_MAX_OBJECTS`` objects (a cycle, say) the
    walk stops. Pure."""
    getsizeof = sys.getsizeof
    fixed = _FIXED
    size = 0
    budget = _MAX_OBJECTS
    stack: list[object] = [value]
    pop, push, extend = stack.pop, stack.append, stack.extend
    while stack and budget:
        budget -= 1
        item = pop()
        cls = type(item)
        if cls is str:
            text = cast("str", item)
            size += _STR_HEADER + len(text) if text.isascii() else getsizeof(text)
            continue
        known = fixed.get(cls)
        if known is not None:
            size += known
            continue
        size += getsizeof(item)
        if cls is tuple or cls is list or cls is frozenset or cls is set:
            extend(cast("Iterable[object]", item))
        elif cls is dict:
            mapping = cast("dict[object, object]", item)
            extend(mapping.keys())
            extend(mapping.values())
        else:
            fields = _FIELDS[cls] if cls in _FIELDS else _fields_of(cls)
            if fields is not None:
                getter, many = fields
                if many:
                    extend(cast("tuple[object, ...]", getter(item)))
                else:
                    push(getter(item))
    return size


#: What a record takes besides its payload: the object, its timestamp, its share of the IDs and
#: names it holds (each run's records share theirs) — measured with tracemalloc on the records
#: of short runs, where this part is most of what they take.
RECORD_BYTES: Final = 300


def _text_bytes(text: str | None) -> int:
    if text is None:
        return 0
    return _STR_HEADER + len(text) if text.isascii() else sys.getsizeof(text)


#: How deep :func:`_value_bytes` follows dicts and lists itself before handing the rest of a
#: value to :func:`estimate_bytes` (whose walk needs no recursion).
_SHALLOW: Final = 4


def _value_bytes(value: object, depth: int = _SHALLOW) -> int:
    """:func:`estimate_bytes` of ``value``, for the small JSON values records hold (a tool call's
    part, its arguments, its result) without the general walk's bookkeeping: strings and numbers
    counted in place, dicts and lists of them followed a few levels down. Pure."""
    cls = type(value)
    if cls is str:
        return _text_bytes(value)  # type: ignore[arg-type]  # its class is str
    known = _FIXED.get(cls)
    if known is not None:
        return known
    if not depth or (cls is not dict and cls is not list):
        return estimate_bytes(value)
    getsizeof = sys.getsizeof
    fixed = _FIXED
    size = getsizeof(value)
    items: Iterable[object]
    if cls is dict:
        mapping: dict[object, object] = value  # type: ignore[assignment]  # its class is dict
        for key in mapping:  # keys in place: most are short ASCII names
            if type(key) is str and key.isascii():
                size += _STR_HEADER + len(key)
            else:
                size += _key_bytes(key)
        items = mapping.values()
    else:
        items = value  # type: ignore[assignment]  # its class is list
    for item in items:
        kind = type(item)
        if kind is str:
            text: str = item  # type: ignore[assignment]  # its class is str
            size += _STR_HEADER + len(text) if text.isascii() else getsizeof(text)
        else:
            known = fixed.get(kind)
            size += _value_bytes(item, depth - 1) if known is None else known
    return size


def _key_bytes(key: object) -> int:
    if type(key) is str:
        return _STR_HEADER + len(key) if key.isascii() else sys.getsizeof(key)
    return estimate_bytes(key)


def record_bytes(record: Record) -> int:
    """About how many bytes ``record`` takes in memory: :data:`RECORD_BYTES` and what its payload
    takes (text, content, arguments, result, output, summary — walked by :func:`estimate_bytes`).
    It walks only the parts that vary, so it costs a few attribute reads for a small record;
    a record type it does not know is walked whole. Pure."""
    sizer = _SIZERS.get(type(record))
    return estimate_bytes(record) if sizer is None else sizer(record)


def _response_bytes(record: ModelResponseRecorded) -> int:
    size = RECORD_BYTES
    for part in record.content:
        size += _PART_BYTES + _value_bytes(part[1])
    return size


def _input_bytes(record: UserInputRecorded) -> int:
    return RECORD_BYTES + _text_bytes(record.text)


def _prepared_bytes(record: ToolCallPrepared) -> int:
    return RECORD_BYTES + _value_bytes(record.arguments)


def _settled_bytes(record: ToolCallSettled) -> int:
    audit = record.audit
    outcome = record.outcome
    return (
        RECORD_BYTES
        + (
            _SUCCESS_BYTES + _value_bytes(outcome.result)
            if type(outcome) is ToolSuccess
            else estimate_bytes(outcome)
        )
        + (0 if audit is None else estimate_bytes(audit))
    )


def _completed_bytes(record: RunCompletedRecord) -> int:
    return RECORD_BYTES + _value_bytes(record.output)


def _compaction_bytes(record: CompactionCreated) -> int:
    return RECORD_BYTES + _text_bytes(record.summary)


def _context_bytes(record: ContextAdded) -> int:
    return RECORD_BYTES + estimate_bytes(record.item)


def _fixed_bytes(record: object) -> int:
    return RECORD_BYTES  # IDs, names, numbers


#: How :func:`record_bytes` sizes each kind of record it knows (the rest are rare — approvals,
#: failures — and walked whole): one lookup instead of a test per kind.
_SIZERS: Final[dict[type, Callable[[Any], int]]] = {
    ModelResponseRecorded: _response_bytes,
    UserInputRecorded: _input_bytes,
    ToolCallPrepared: _prepared_bytes,
    ToolCallSettled: _settled_bytes,
    RunCompletedRecord: _completed_bytes,
    CompactionCreated: _compaction_bytes,
    ContextAdded: _context_bytes,
    ConversationCreated: _fixed_bytes,
    AgentStateWritten: _fixed_bytes,
}


_PART_BYTES: Final = sys.getsizeof((None, None))
#: A success outcome besides its result: the object (its IDs and names are the record's).
_SUCCESS_BYTES: Final = 72
_ENDINGS: Final = (RunCompletedRecord, RunFailedRecord)


@final
class InMemoryConversationLog:
    """Holds conversations' records in process memory, within ``retention`` (see the module
    notes; default :class:`LogRetention`). Nothing survives the process.

    A record's sequence number is its position in its conversation (1-based), so the log keeps
    the records alone and pairs them with their numbers when they are read.
    """

    __slots__ = ("_listeners", "_logs", "_running", "_shelf", "ledger")

    def __init__(self, retention: LogRetention | None = None) -> None:
        if retention is not None and not isinstance(retention, LogRetention):
            raise TypeError(f"retention must be a LogRetention, got {type(retention).__name__}")
        self._logs: dict[str, list[Record]] = {}
        self.ledger = RetentionLedger(retention)
        # The runs whose input is recorded and whose terminal record is not yet: run -> conversation.
        self._running: dict[str, str] = {}
        self._listeners: list[Callable[[str], None]] = []
        # The bytes of the media parts the records refer to, once per SHA-256 digest, each while
        # a kept conversation refers to it (freed with the last one evicted).
        self._shelf = MediaShelf()

    async def put_media(self, conversation_id: str, blobs: Mapping[str, bytes]) -> None:
        """Keep media bytes by digest (each digest once) for the conversation about to record
        them: they count in its size (each conversation referring to a digest is charged its
        size) and are freed when no kept conversation refers to them. May evict idle
        conversations, as an append does.

        Cancellation: a cancellation point before anything is kept."""
        await trio.lowlevel.checkpoint_if_cancelled()
        charged = self._shelf.put(conversation_id, blobs)
        if charged and self.ledger.limits.bounded:
            self._drop(self.ledger.grew(conversation_id, charged))

    async def media(self, digests: Collection[str]) -> Mapping[str, bytes]:
        """The kept bytes of ``digests`` (missing ones left out). Cancellation: a cancellation
        point; nothing changes."""
        await trio.lowlevel.checkpoint_if_cancelled()
        return self._shelf.get(digests)

    @property
    def media_digests(self) -> frozenset[str]:
        """The digests whose bytes are kept."""
        return self._shelf.digests

    @property
    def media_bytes(self) -> int:
        """The size of the media bytes kept (each digest once)."""
        return self._shelf.held_bytes

    @property
    def retention(self) -> LogRetention:
        """What the log keeps."""
        return self.ledger.limits

    @property
    def retained_bytes(self) -> int:
        """The estimated bytes of the records kept and of the media they refer to."""
        return self.ledger.total_bytes

    async def append(self, conversation_id: str, records: Sequence[Record]) -> int:
        """Append atomically; return the sequence number of the last record appended. May evict
        idle conversations, least recently used first (see the module notes).

        Cancellation: a cancellation point *before* anything is appended (raises ``Cancelled`` if
        the caller's scope is cancelled); it does not yield to the scheduler — there is no I/O to
        wait for, and the engine yields once per turn itself."""
        # Half of Trio's checkpoint pair, on purpose: see the docstring.
        await trio.lowlevel.checkpoint_if_cancelled()
        return self.append_nowait(conversation_id, records)

    def append_nowait(self, conversation_id: str, records: Sequence[Record]) -> int:
        """Append without a checkpoint; return the last sequence number. A conversation ID no
        store keeps (not a str, blank, holding NUL or a lone surrogate, over 512 bytes of UTF-8)
        is refused as a run refuses it (``TypeError``/``ValueError``), and so are ``records``
        that are a str or bytes — nothing appended."""
        given: object = records  # not every caller runs mypy
        if isinstance(given, str | bytes | bytearray):
            raise TypeError(f"records must be a sequence of records, got {type(given).__name__}")
        log = self._logs.get(conversation_id)
        if log is None:  # a new conversation: its ID is checked once, here
            check_id("conversation_id", conversation_id)
            log = self._logs[conversation_id] = []
        log.extend(records)
        count = len(log)
        ledger = self.ledger
        if not ledger.limits.bounded:
            return count
        running = self._running
        ended: list[str] = []
        size = 0
        shelf = self._shelf
        for record in records:
            if type(record) is UserInputRecorded:
                if record.kind == "user" and record.run_id not in running:
                    running[record.run_id] = conversation_id
                    ledger.hold(conversation_id)
                if record.parts:
                    size += shelf.refer(conversation_id, media_digests(record))
            elif type(record) is ToolCallSettled:
                outcome = record.outcome
                if type(outcome) is ToolSuccess and outcome.media:
                    size += shelf.refer(conversation_id, media_digests(record))
            elif isinstance(record, _ENDINGS):
                ended.append(record.run_id)
            size += record_bytes(record)
        evicted = ledger.grew(conversation_id, size)
        if evicted:
            self._drop(evicted)
        for run_id in ended:
            held = running.pop(run_id, None)
            if held is not None and (evicted := ledger.release(held)):
                self._drop(evicted)
        return count

    async def entries(self, conversation_id: str, *, after: int = 0) -> Sequence[LogEntry]:
        """Entries with ``seq > after`` (none for an evicted conversation). Cancellation: a
        cancellation point (no scheduler yield); nothing changes."""
        await trio.lowlevel.checkpoint_if_cancelled()  # half the pair: nothing to wait for
        if type(after) is not int:
            raise TypeError(f"after must be an int, got {type(after).__name__}")
        start = max(after, 0)
        records = self._logs.get(conversation_id)
        if records is None:
            return ()
        self.ledger.used(conversation_id)
        return tuple(LogEntry(seq, record) for seq, record in enumerate(records[start:], start + 1))

    def conversations(self) -> tuple[str, ...]:
        """The IDs of the conversations kept."""
        return tuple(self._logs)

    def has(self, conversation_id: str) -> bool:
        """Whether the log keeps records of the conversation."""
        return conversation_id in self._logs

    def evicted(self, conversation_id: str) -> bool:
        """Whether the conversation was evicted by retention (and is still remembered so)."""
        return self.ledger.was_evicted(conversation_id)

    def hold(self, conversation_id: str) -> None:
        """A run of the conversation is going: keep it until :meth:`release` (the runtime calls
        both). Holds count: each needs its release."""
        self.ledger.hold(conversation_id)

    def release(self, conversation_id: str) -> None:
        """End one :meth:`hold`; may evict idle conversations."""
        self._drop(self.ledger.release(conversation_id))

    def delete_conversations(self, conversation_ids: Iterable[str]) -> tuple[str, ...]:
        """Delete the conversations' records, and the media bytes no record left refers to;
        return the IDs of those the log kept. All or none: while a run of one of them is going,
        nothing is deleted (``ValueError`` naming it). What keeps something per conversation
        (:meth:`on_evicted`) forgets it as for an eviction. Never blocks."""
        ids = tuple(dict.fromkeys(conversation_ids))
        for conversation_id in ids:
            if not isinstance(conversation_id, str):
                raise TypeError(
                    f"conversation IDs must be str, got {type(conversation_id).__name__}"
                )
            if self.ledger.held(conversation_id):
                raise ValueError(
                    f"conversation {conversation_id!r} has a run going: nothing was deleted"
                )
        deleted = [c for c in ids if self.ledger.forget(c) or c in self._logs]
        self._drop(deleted)
        return tuple(deleted)

    def on_evicted(self, listener: Callable[[str], None]) -> None:
        """Call ``listener(conversation_id)`` for every conversation evicted from now on (a
        capability keeping something per conversation forgets it with the log). A listener must
        not raise."""
        self._listeners.append(listener)

    def _drop(self, evicted: list[str]) -> None:
        shelf = self._shelf
        for conversation_id in evicted:
            # A conversation may be kept for media put before its first record.
            self._logs.pop(conversation_id, None)
            shelf.drop(conversation_id)
            for listener in self._listeners:
                listener(conversation_id)
