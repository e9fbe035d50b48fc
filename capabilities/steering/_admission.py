"""Admission and per-conversation FIFO of steering and follow-ups, as a pure object.

Every submission is decided here (:meth:`Admissions.admit`) and becomes an :class:`Entry`:
*reserved* while its admission is being persisted, *queued* once persisted (deliverable), *taken*
once handed to a run. A reserved entry holds its FIFO place: nothing behind it of the same way of
entering is handed out before it.

Invariants (tested in ``tests/capabilities/steering/test_admission.py`` without Trio):

* an input is accepted only while a run of its conversation is going and not ending, only if it
  is non-empty, within the size limit and the queue has room;
* every accepted entry is handed to a run at most once, and — once its conversation has no run
  left — is either taken (for the store to confirm) or expired; none disappears;
* steering is handed out in admission order, follow-ups too, and a run that would stop takes
  every queued input (steering first came first) in admission order — the order of the
  positions their receipts give: a store that persisted an admission at another position than
  the one reserved (a database transaction run again) moves it there;
* ``drain_steering`` never hands out a follow-up; ``take_follow_ups`` returning nothing means the
  run is ending: later submissions are rejected with ``"run-ending"``.

Input admitted by another process for the run going here (``capabilities.steering``: persisted
with a position the database gave it) is **adopted** (:meth:`Admissions.adopt`) as a queued
entry, once, in its place: after every entry persisted with a smaller position, before the
others and before any still being persisted (those get larger positions when they are). An
ending run adopts nothing more.
"""

from __future__ import annotations

from typing import Literal, final

import attrs

from effectagent.engine import SteeringInput

from ._model import InputKind, Rejection, SteeringLimits

__all__ = ["Admissions", "Closing", "Entry"]

EntryState = Literal["reserved", "queued", "taken", "abandoned"]


@final
@attrs.define(eq=False)
class Entry:
    """An admitted input and where it is."""

    input: SteeringInput
    conversation_id: str
    position: int
    state: EntryState = "reserved"
    # Set once its conversation had no run left: it belongs to the runs that ended.
    orphaned: bool = False


def _position(entry: Entry) -> int:
    return entry.position


@final
class _Conversation:
    __slots__ = ("active", "known", "next_position", "queue", "stopping", "taken")

    def __init__(self) -> None:
        self.active: set[str] = set()
        self.stopping = 0  # runs that would stop and found nothing to take: they are ending
        self.queue: list[Entry] = []  # reserved and queued entries, in admission order
        self.taken: list[Entry] = []
        self.next_position = 1
        self.known: set[str] = set()  # the IDs of every input admitted or adopted here


@attrs.frozen
class Closing:
    """The entries of a conversation whose last run ended: once :attr:`ready`, those still
    queued expire and those taken are confirmed (delivered, or expired if never recorded)."""

    conversation_id: str
    entries: tuple[Entry, ...]

    @property
    def ready(self) -> bool:
        """No entry is still being persisted."""
        return all(entry.state != "reserved" for entry in self.entries)

    @property
    def queued(self) -> tuple[Entry, ...]:
        """Accepted, never handed to a run: they expire."""
        return tuple(e for e in self.entries if e.state == "queued")

    @property
    def taken(self) -> tuple[Entry, ...]:
        """Handed to a run: delivered if the run recorded them."""
        return tuple(e for e in self.entries if e.state == "taken")


@final
class Admissions:
    """Admission decisions and the FIFO queues of every conversation with a run going. Pure."""

    __slots__ = ("_conversations", "_reserved", "limits")

    def __init__(self, limits: SteeringLimits | None = None) -> None:
        self.limits = limits or SteeringLimits()
        self._conversations: dict[str, _Conversation] = {}
        self._reserved: dict[str, Entry] = {}

    # ---- runs ---------------------------------------------------------------------------------

    def run_started(self, conversation_id: str, run_id: str) -> None:
        """A run of the conversation is going."""
        conversation = self._conversations.get(conversation_id)
        if conversation is None:
            conversation = self._conversations[conversation_id] = _Conversation()
        conversation.active.add(run_id)

    def run_ended(self, conversation_id: str, run_id: str) -> Closing | None:
        """A run ended. If it was the conversation's last, every entry left is handed back as a
        :class:`Closing` (and the conversation starts afresh with its next run)."""
        conversation = self._conversations.get(conversation_id)
        if conversation is None or run_id not in conversation.active:
            return None
        conversation.active.discard(run_id)
        if conversation.stopping:
            conversation.stopping -= 1
        if conversation.active:
            return None
        del self._conversations[conversation_id]
        entries = (*conversation.queue, *conversation.taken)
        for entry in entries:
            entry.orphaned = True
        return Closing(conversation_id, entries)

    def active_runs(self, conversation_id: str) -> int:
        """How many runs of the conversation are going."""
        conversation = self._conversations.get(conversation_id)
        return 0 if conversation is None else len(conversation.active)

    # ---- admission ----------------------------------------------------------------------------

    def admit(self, conversation_id: str, input: SteeringInput) -> Entry | Rejection:
        """Decide on ``input``: a reserved :class:`Entry` holding its FIFO place, or why not."""
        if input.content is None and not input.text.strip():  # media alone is not empty
            return "empty"
        if len(input.text) > self.limits.max_chars:
            return "too-large"
        conversation = self._conversations.get(conversation_id)
        if conversation is None or not conversation.active:
            return "no-active-run"
        if len(conversation.active) <= conversation.stopping:
            return "run-ending"
        if len(conversation.queue) >= self.limits.max_pending:
            return "queue-full"
        entry = Entry(input, conversation_id, conversation.next_position)
        conversation.next_position += 1
        conversation.queue.append(entry)
        conversation.known.add(input.input_id)
        self._reserved[input.input_id] = entry
        return entry

    def commit(self, input_id: str, position: int | None = None) -> Entry:
        """Its admission is persisted (at ``position``, when the store gave it one): the entry is
        queued (deliverable, unless orphaned)."""
        entry = self._reserved.pop(input_id)
        entry.state = "queued"
        if position is not None and position != entry.position:
            entry.position = position
            conversation = self._conversations.get(entry.conversation_id)
            if conversation is not None and not entry.orphaned:
                conversation.next_position = max(conversation.next_position, position + 1)
                # The store's order is the FIFO's: an admission persisted again (a database
                # that retried it) comes after those persisted before it, as its position says.
                conversation.queue.sort(key=_position)
        return entry

    def adopt(self, conversation_id: str, input: SteeringInput, position: int) -> Entry | None:
        """Input another process admitted (persisted at ``position``) for the run going here:
        a queued entry in its FIFO place — or None when it is known here already, or no run of
        the conversation is going that could take it (none, or it is ending)."""
        conversation = self._conversations.get(conversation_id)
        if (
            conversation is None
            or input.input_id in conversation.known
            or len(conversation.active) <= conversation.stopping
        ):
            return None
        entry = Entry(input, conversation_id, position, "queued")
        queue = conversation.queue
        at = 0
        while at < len(queue) and queue[at].state == "queued" and queue[at].position < position:
            at += 1
        queue.insert(at, entry)
        conversation.known.add(input.input_id)
        conversation.next_position = max(conversation.next_position, position + 1)
        return entry

    def known(self) -> frozenset[str]:
        """The IDs of the inputs admitted or adopted for the runs going (adopting one of them
        again would do nothing)."""
        return frozenset(i for c in self._conversations.values() for i in c.known)

    def active_conversations(self) -> tuple[str, ...]:
        """The conversations with a run going here."""
        return tuple(self._conversations)

    def deliverable(self, input_id: str) -> bool:
        """Whether a run can still take the reserved entry ``input_id``: a run of its
        conversation is going and not ending. (Not once the run it was admitted for stopped or
        began its grace turn while the admission was being persisted: no run takes it then.)"""
        entry = self._reserved[input_id]
        if entry.orphaned:
            return False
        conversation = self._conversations.get(entry.conversation_id)
        return conversation is not None and len(conversation.active) > conversation.stopping

    def abandon(self, input_id: str) -> None:
        """Its admission was not persisted (the submitter was cancelled, storage failed)."""
        entry = self._reserved.pop(input_id)
        entry.state = "abandoned"
        conversation = self._conversations.get(entry.conversation_id)
        if conversation is not None and not entry.orphaned:
            conversation.queue.remove(entry)

    # ---- delivery -----------------------------------------------------------------------------

    def drain_steering(self, conversation_id: str) -> list[SteeringInput]:
        """Take the queued steering, in admission order, up to the first still being persisted."""
        conversation = self._conversations.get(conversation_id)
        if conversation is None or not conversation.queue:
            return []
        taken: list[Entry] = []
        kept: list[Entry] = []
        blocked = False
        for entry in conversation.queue:
            if entry.input.kind == "steering" and not blocked:
                if entry.state == "reserved":
                    blocked = True
                else:
                    taken.append(entry)
                    continue
            kept.append(entry)
        return self._hand_out(conversation, taken, kept)

    def take_follow_ups(self, conversation_id: str) -> list[SteeringInput]:
        """The run would stop: take every queued input (steering and follow-ups), in admission
        order, up to the first still being persisted. Nothing to take: the run is ending."""
        conversation = self._conversations.get(conversation_id)
        if conversation is None:
            return []
        queue = conversation.queue
        count = 0
        while count < len(queue) and queue[count].state == "queued":
            count += 1
        if not count:
            if len(conversation.active) > conversation.stopping:
                conversation.stopping += 1
            return []
        return self._hand_out(conversation, queue[:count], queue[count:])

    @staticmethod
    def _hand_out(
        conversation: _Conversation, taken: list[Entry], kept: list[Entry]
    ) -> list[SteeringInput]:
        conversation.queue = kept
        for entry in taken:
            entry.state = "taken"
        conversation.taken.extend(taken)
        return [entry.input for entry in taken]

    def queued(self, conversation_id: str, kind: InputKind | None = None) -> int:
        """Entries waiting in the conversation (of ``kind``, or all)."""
        conversation = self._conversations.get(conversation_id)
        if conversation is None:
            return 0
        return sum(1 for e in conversation.queue if kind is None or e.input.kind == kind)
