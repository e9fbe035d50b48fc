"""Persistent agent state (CAP-012): typed slots, revisions, and four write classes.

State is not history. The Conversation Log says what happened in a conversation; agent state is
what an agent keeps between runs — preferences learnt, a cursor into a mailbox, the ID of a
calendar event it created. It is kept apart (its own table, its own store) and it is not one
untyped key-value bag: every value lives in a :class:`StateSlot`, which names its type (checked on
write, decoded strictly on read), its schema version and the migrations from older versions.

A cell is ``(slot, key)``. Its ``revision`` counts the writes to it (0: never written) and every
write names the revision it read (optimistic concurrency: a stale one is :class:`StateConflict`).
A write must say which of the four classes it is — the parameter has no default:

* :class:`RunLocal` — scratch state of one run: seen by that run's reads only, discarded when the
  run settles, however it ends. Never stored.
* :class:`WithRecord` — committed together with a canonical ``AgentStateWritten`` record in the
  conversation's log: both or neither (one SQLite transaction).
* :class:`Compensatable` — the run did something outside (created a calendar event) and records
  it; if the run does not complete (fails or is interrupted), the ``compensate`` function it
  registered runs, and the cell goes back to what it was before the run wrote it. Until the run
  settles the cell reads as ``"pending"``.
* :class:`Uncertain` — the run did something outside whose outcome it cannot tell (a timeout):
  the value is stored as ``"uncertain"`` with the reason, and the next run sees it (read, or
  :meth:`AgentStateStore.unsettled`) and reconciles by writing a committed value.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final, Generic, Literal, Protocol, TypeAlias, TypeVar, final

import attrs

from effectagent.ai import ToolCallContext
from effectagent.effect import (
    SchemaDerivationError,
    ServiceKey,
    TaggedError,
    is_async_callable,
    json_schema,
)
from effectagent.engine import RunEnding, RunInfo

from .._rules import ID_BYTES_MOST, storable, too_long_id
from .._versioned import Migration, VersionedCodec

__all__ = [
    "AgentState",
    "AgentStateError",
    "AgentStateService",
    "Compensatable",
    "CorruptState",
    "MAX_KEY_CHARS",
    "RunLocal",
    "RunNotObserved",
    "StateConflict",
    "StateSlot",
    "StateStatus",
    "StateUnavailable",
    "StateValueInvalid",
    "StateValueTooLarge",
    "StateView",
    "StateWritten",
    "UnknownStateVersion",
    "Uncertain",
    "UnsettledState",
    "WithRecord",
    "WriteClass",
]

T = TypeVar("T")

#: The longest key of a cell.
MAX_KEY_CHARS: Final = 256

#: How a cell stands: never written (or restored to nothing), committed, written by a run that has
#: not settled yet (compensatable), uncertain, or a run-local value seen by its run only.
StateStatus = Literal["absent", "committed", "pending", "uncertain", "run-local"]


def _identifier(_: object, attribute: attrs.Attribute[Any], value: object) -> None:
    # The bounds a run's IDs have: a longer one names no conversation or run, and the log
    # would refuse it only at the write (on either engine).
    if not isinstance(value, str):
        raise TypeError(f"{attribute.name} must be a str, got {type(value).__name__}")
    if not value or not storable(value):
        raise ValueError(
            f"{attribute.name} must be a non-empty str without a NUL or a lone surrogate"
        )
    if too_long_id(value):
        raise ValueError(f"{attribute.name} must be at most {ID_BYTES_MOST} bytes in UTF-8")


def _compensation(_: object, attribute: attrs.Attribute[Any], value: object) -> None:
    # A plain function would fail only when a failed run awaits it — its external effect then
    # stays undone: refused where it is given (see ``is_async_callable``).
    if not is_async_callable(value):
        raise TypeError(
            f"{attribute.name} must be an async function of no arguments, "
            f"got {type(value).__name__}"
        )


def _reason(_: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, str):
        raise TypeError(f"{attribute.name} must be a str, got {type(value).__name__}")
    if not value.strip():
        raise ValueError(f"{attribute.name} must say why the outcome is unknown, got an empty str")
    if not storable(value):  # a store would fail it (or PostgreSQL's text) only at the write
        raise ValueError(
            f"{attribute.name} cannot hold a NUL or a lone surrogate (no store keeps it)"
        )


# ---- errors ---------------------------------------------------------------------------------------


def _cell(slot: str, key: str) -> str:
    """A cell as an error names it: its slot and key (a key the store refused shows as ``?``:
    only its slot)."""
    return f"slot {slot!r}" if key == "?" else f"slot {slot!r}, key {key!r}"


@attrs.frozen
class AgentStateError(TaggedError):
    """Base of every error of the agent state store. ``str()`` of each is a sentence naming the
    cell (its slot and key) — never what a value holds."""


@attrs.frozen
class StateConflict(AgentStateError):
    """The write named a revision that is no longer current: read again, decide again."""

    slot: str
    key: str
    expected_revision: int
    actual_revision: int
    is_retryable = True

    def __str__(self) -> str:
        return (
            f"the state of {_cell(self.slot, self.key)} is at revision {self.actual_revision}, "
            f"not {self.expected_revision}: read it again and decide again; nothing was written"
        )


@attrs.frozen
class StateValueInvalid(AgentStateError):
    """The value (or the key) is not valid for the slot: ``problem`` gives the paths of the parts
    that do not match the slot's type, never the values (a mapping's keys are the value's too:
    a path shows each as ``[…]``)."""

    slot: str
    key: str
    problem: str

    def __str__(self) -> str:
        return f"invalid state for {_cell(self.slot, self.key)}: {self.problem}"


@attrs.frozen
class StateValueTooLarge(AgentStateError):
    """The value's JSON is larger than the slot's ``max_bytes``."""

    slot: str
    key: str
    size: int
    limit: int

    def __str__(self) -> str:
        return (
            f"the value for {_cell(self.slot, self.key)} is {self.size} bytes of JSON, more "
            f"than the slot's {self.limit}; nothing was written"
        )


@attrs.frozen
class UnknownStateVersion(AgentStateError):
    """The stored value has a schema version with no path to the slot's current one (written by
    a newer application, or a migration step is missing)."""

    slot: str
    key: str
    version: int
    supported: int

    def __str__(self) -> str:
        return (
            f"the value of {_cell(self.slot, self.key)} is of version {self.version}, which no "
            f"registered migration lifts to version {self.supported}"
        )


@attrs.frozen
class CorruptState(AgentStateError):
    """The stored value does not read back (damaged JSON, a failed migration, a mismatch)."""

    slot: str
    key: str
    detail: str

    def __str__(self) -> str:
        return f"the value of {_cell(self.slot, self.key)} does not read back: {self.detail}"


@attrs.frozen
class RunNotObserved(AgentStateError):
    """A run-local or compensatable write for a run the store was not told of (or that already
    settled). The store learns of runs as a run observer: compose
    ``observe_runs(AgentStateService)`` into the runtime's layer."""

    run_id: str

    def __str__(self) -> str:
        return (
            f"run {self.run_id} is not a run the agent state store was told of, or it has "
            "settled: compose observe_runs(AgentStateService) into the runtime's layer; nothing "
            "was written"
        )


@attrs.frozen
class StateUnavailable(AgentStateError):
    """The storage under the store failed (closed, disk full, I/O error); nothing was written.
    ``reason`` is the storage error's sentence. ``slot`` and ``key`` are ``"*"`` when no one
    cell was asked for (``unsettled``)."""

    slot: str
    key: str
    reason: str
    is_retryable = True

    def __str__(self) -> str:
        which = "" if self.slot == "*" else f" for {_cell(self.slot, self.key)}"
        return f"the agent state store could not be used{which} ({self.reason}); nothing changed"


# ---- slots and views ------------------------------------------------------------------------------


@final
class StateSlot(Generic[T]):
    """A named, typed place for agent state: ``StateSlot("preferences", Preferences)``.

    ``name`` identifies the slot in storage (keep it stable); ``type`` is the values' type (an
    attrs class, usually: checked all the way down on write, decoded strictly on read);
    ``version`` is the schema version written now and ``migrations[n]`` lifts stored JSON of
    version ``n`` to ``n + 1``; ``max_bytes`` bounds a value's stored JSON. ``None`` is never a
    value: it is how an absent cell reads. Raises ``ValueError`` for a name no store can keep
    (empty, too long, holding a NUL or a lone surrogate) and ``TypeError`` for a type whose values
    have no JSON form or a migration that is an ``async def`` function (it is called plainly).
    """

    __slots__ = ("codec", "name")

    def __init__(
        self,
        name: str,
        type: type[T],
        *,
        version: int = 1,
        migrations: Mapping[int, Migration] | None = None,
        max_bytes: int = 64 * 1024,
    ) -> None:
        given: object = name  # checked at run time too: not every caller runs mypy
        if not isinstance(given, str) or not given or len(given) > MAX_KEY_CHARS:
            raise ValueError(f"a slot name is a non-empty str of at most {MAX_KEY_CHARS} chars")
        if not storable(given):
            raise ValueError(
                "a slot name cannot hold a NUL or a lone surrogate (no store keeps it)"
            )
        try:
            json_schema(type)
        except SchemaDerivationError as exc:
            raise TypeError(
                f"the values of slot {name!r} cannot be stored as JSON: {exc}"
            ) from None
        self.name = name
        #: The pure codec that dumps and loads this slot's values.
        self.codec: VersionedCodec[T] = VersionedCodec(
            type, version, migrations or {}, max_bytes, what=f"value of slot {name!r}"
        )

    @property
    def version(self) -> int:
        """The schema version values are written with."""
        return self.codec.version

    def __repr__(self) -> str:
        return f"StateSlot({self.name!r}, {self.codec.tp!r}, version={self.version})"


@attrs.frozen
class StateView(Generic[T]):
    """A cell as read: its value (None when absent), revision, status, and who wrote it why."""

    slot: str
    key: str
    value: T | None
    revision: int
    status: StateStatus
    run_id: str = ""
    reason: str = ""
    updated_at: float = 0.0


@attrs.frozen
class StateWritten:
    """The receipt of a write: the cell's new revision and status, and — for a write committed
    with its record — that record's sequence number in the conversation."""

    slot: str
    key: str
    revision: int
    status: StateStatus
    seq: int | None = None


@attrs.frozen
class UnsettledState:
    """A cell that is not plainly committed — uncertain, or pending on a run — without its value
    (read it through its slot)."""

    slot: str
    key: str
    revision: int
    status: StateStatus
    run_id: str
    reason: str
    updated_at: float


# ---- write classes --------------------------------------------------------------------------------


@attrs.frozen
class RunLocal:
    """Scratch state of run ``run_id``: only its reads see it; discarded when it settles."""

    run_id: str = attrs.field(validator=_identifier)

    @staticmethod
    def of(call: ToolCallContext) -> RunLocal:
        """For the run of the tool call ``call``."""
        return RunLocal(call.run_id)


@attrs.frozen
class WithRecord:
    """Committed together with an ``AgentStateWritten`` record in ``conversation_id``'s log."""

    conversation_id: str = attrs.field(validator=_identifier)
    run_id: str = attrs.field(validator=_identifier)

    @staticmethod
    def of(call: ToolCallContext) -> WithRecord:
        """In the conversation and run of the tool call ``call``."""
        return WithRecord(call.conversation_id, call.run_id)


@attrs.frozen
class Compensatable:
    """An external effect of run ``run_id``, undone by ``compensate`` if the run does not
    complete (then the cell returns to what it was before the run wrote it)."""

    run_id: str = attrs.field(validator=_identifier)
    compensate: Callable[[], Awaitable[None]] = attrs.field(validator=_compensation)

    @staticmethod
    def of(call: ToolCallContext, compensate: Callable[[], Awaitable[None]]) -> Compensatable:
        """For the run of the tool call ``call``."""
        return Compensatable(call.run_id, compensate)


@attrs.frozen
class Uncertain:
    """An external effect of run ``run_id`` whose outcome is unknown: stored as uncertain with
    ``reason``, for the next run to see and reconcile."""

    run_id: str = attrs.field(validator=_identifier)
    reason: str = attrs.field(validator=_reason)

    @staticmethod
    def of(call: ToolCallContext, reason: str) -> Uncertain:
        """For the run of the tool call ``call``."""
        return Uncertain(call.run_id, reason)


#: The class of a state write: the caller must choose one.
WriteClass: TypeAlias = RunLocal | WithRecord | Compensatable | Uncertain


# ---- the service ----------------------------------------------------------------------------------


class AgentState(Protocol):
    """Typed, revisioned agent state; a run observer (it learns when runs start and settle)."""

    async def read(
        self, slot: StateSlot[T], key: str, *, run_id: str | None = None
    ) -> StateView[T]:
        """The cell ``(slot, key)`` — with ``run_id``, as that run sees it (its run-local value
        first). Cancellation: nothing changes."""
        ...

    async def write(
        self,
        slot: StateSlot[T],
        key: str,
        value: T,
        *,
        expected_revision: int,
        write: WriteClass,
    ) -> StateWritten:
        """Write ``value`` if the cell is still at ``expected_revision``. Cancellation: all or
        nothing."""
        ...

    async def unsettled(self) -> tuple[UnsettledState, ...]:
        """Every cell that is uncertain or pending. Cancellation: nothing changes."""
        ...

    async def run_started(self, run: RunInfo) -> None:
        """Run ``run`` is going: its run-local and compensatable writes are accepted.
        Cancellation: the run's own (see ``RunObserver``)."""
        ...

    async def run_ended(self, run: RunInfo, ending: RunEnding) -> None:
        """Run ``run`` settled: drop its run-local values; commit its pending writes if it
        completed, else run their compensations; a suspended run keeps both until it continues
        and ends. Cancellation: called shielded by the engine."""
        ...


#: The service key of the agent state store (compose ``observe_runs(AgentStateService)`` too).
AgentStateService: ServiceKey[AgentState] = ServiceKey(
    "capabilities.AgentState", "typed, revisioned agent state apart from history"
)
