"""The inbox of every conversation: the public steering API and the engine's steering seam.

One object plays both parts. Applications call :meth:`ConversationInbox.steer` and
:meth:`~ConversationInbox.follow_up` (through :data:`SteeringService`); the engine — which finds
the same object under ``SteeringInboxService`` — tells it when runs start and end, drains
steering at the start of each turn and takes follow-ups when the agent would stop. The decisions
are :class:`Admissions` (pure); this module adds the journal (persistence) and the waiting.

Text is redacted as it is admitted, with the runtime's redaction (a run of the conversation is
going, and its ``RunInfo`` carries it): a registered secret never reaches the journal, not even
while the input waits to be delivered; the log and the model see the same redacted text. The
author is redacted the same way (the receipt, the status and the record give the redacted one).

Input may hold images, documents or audio, as a run's input does (``["Use this one:",
ImagePart.from_path("cat.png")]``): it waits in memory with its parts, and the run that takes it
keeps their bytes in the log's media store and records them by digest, so a later turn, run or
resume sends them again. Input with media for a run another process is running waits in the
journal with its parts by digest, its bytes put in the database's ``media`` table in the same
transaction as its admission; the process running the run reads them back when it adopts it.

**Across processes** (the SQLite journal, which processes share): input for a conversation whose
run goes in another process — its lane is held there — is admitted into the journal under that
run's lane (:meth:`~._journal.SqliteJournal.admit_elsewhere`), with the same checks but
``"run-ending"``, which only the running process knows. No wake-up crosses processes, so a
process running runs looks for such input as each run starts and every :data:`POLL_INTERVAL`
seconds while it has a run going, and adopts what it finds into the run's FIFO: it reaches the run at the first turn that
starts after that — within a poll interval and a turn of its admission. Input that arrives once the
run is ending, or that the run never reaches, expires when the run lets its lane go. Its text
reaches the run as the journal's text column keeps it: NUL (PostgreSQL's text cannot hold it)
and lone surrogates (no UTF-8 form) as U+FFFD — input for a run here is taken from memory,
whole. Such input is
redacted by the process that admits it with its runtime's redaction (the ``RedactorService``
``open_runtime`` provides its layers: the secrets it was given, or the layer's own Redactor) —
and again, with the run's, by the process that delivers it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Final, final

import attrs
import trio

from effectagent.ai import MediaPart
from effectagent.engine import RunEnding, RunInfo, SteeringInput

from .._ids import new_id
from .._logging import log_warning
from .._rules import ID_BYTES_MOST, storable, too_long_id
from ..storage import StorageError
from ._admission import Admissions, Closing, Entry
from ._journal import AdmissionJournal, SqliteJournal
from ._model import InputKind, InputReceipt, InputStatus, SteeringLimits

__all__ = ["POLL_INTERVAL", "ConversationInbox"]

#: How often, in seconds, a process with a run going looks for input other processes admitted
#: for it (see the module notes).
POLL_INTERVAL: Final = 0.2


def _unchanged(text: str) -> str:
    return text


def _check(conversation_id: object, author: object) -> None:
    """Refuse a conversation ID or author a run refuses (naming it, never quoting it): not a
    str (``TypeError``), blank, holding NUL or a lone surrogate (no store keeps them), or
    longer than :data:`ID_BYTES_MOST` bytes in UTF-8 (an indexed column; ``ValueError``)."""
    for name, value in (("conversation_id", conversation_id), ("author", author)):
        if not isinstance(value, str):
            raise TypeError(f"{name} must be a str, got {type(value).__name__}")
        if not value.strip():
            raise ValueError(f"{name} must not be empty or blank")
        if not storable(value):  # as a run refuses such a conversation ID: no store keeps it
            raise ValueError(f"{name} must not hold NUL or a lone surrogate")
        if too_long_id(value):
            raise ValueError(f"{name} must be at most {ID_BYTES_MOST} bytes in UTF-8")


@final
class ConversationInbox:
    """Steering and follow-ups for every conversation (see ``capabilities.steering``)."""

    __slots__ = (
        "_admissions",
        "_changed",
        "_closed",
        "_poll_ended",
        "_poll_scope",
        "_polling",
        "_redact_text",
        "journal",
    )

    def __init__(
        self,
        journal: AdmissionJournal,
        limits: SteeringLimits | None = None,
        *,
        redact_text: Callable[[str], str] | None = None,
    ) -> None:
        self.journal = journal
        self._admissions = Admissions(limits)
        # Set (and replaced) whenever a reserved admission is committed or abandoned.
        self._changed = trio.Event()
        # The runtime's redaction, as the first run told it; until then ``redact_text`` (the
        # context's Redactor), which only input for another process's run can need.
        self._redact_text: Callable[[str], str] = redact_text or _unchanged
        self._polling = False
        # The poll's cancel scope and end, while one runs; once closed, no poll starts.
        self._poll_scope: trio.CancelScope | None = None
        self._poll_ended: trio.Event | None = None
        self._closed = False

    @property
    def limits(self) -> SteeringLimits:
        """The admission limits."""
        return self._admissions.limits

    # ---- submitting ---------------------------------------------------------------------------

    async def steer(
        self, conversation_id: str, text: str | Sequence[str | MediaPart], *, author: str
    ) -> InputReceipt:
        """Submit steering to the run going in ``conversation_id``: accepted only while it is
        going and has not produced its final answer; it then enters before the run's next model
        request (the response and tool batch in flight finish normally). With a durable journal
        the admission is persisted before the receipt is returned.

        ``text`` is a str, or — as a run's input — a sequence of str and media parts
        (``ImagePart``, ``DocumentPart``, ``AudioPart``): the run records the parts by digest,
        their bytes kept once in the log's media store, and a model that cannot take one
        refuses that turn's request (``MediaNotSupported``).

        Raises ``TypeError``/``ValueError`` for arguments of the wrong type, an empty or blank
        conversation ID or author (or one holding NUL or a lone surrogate, which no store
        keeps), or an empty sequence (the errors a run's input meets), and
        the storage's error if a durable journal could not persist it (then nothing was
        admitted); a rejection is not an exception but the receipt's ``rejection``.

        Cancellation: all or nothing — if it raises ``Cancelled``, the input was not admitted;
        if it returns, the receipt is the truth (a persisting admission is waited for).
        """
        return await self._submit("steering", conversation_id, text, author)

    async def follow_up(
        self, conversation_id: str, text: str | Sequence[str | MediaPart], *, author: str
    ) -> InputReceipt:
        """Submit a follow-up for the run going in ``conversation_id``: it enters only when the
        agent would otherwise stop, through the same admission as steering (same checks, same
        FIFO, same receipt). Raises and cancels as :meth:`steer`."""
        return await self._submit("follow-up", conversation_id, text, author)

    async def _submit(
        self, kind: InputKind, conversation_id: str, text: object, author: str
    ) -> InputReceipt:
        _check(conversation_id, author)
        # Checked as a run's input, and redacted (a run going here set ``_redact_text``) — its
        # author too: it is stored with the input, in the journal and in the log.
        redact = self._redact_text
        item = SteeringInput.of(
            new_id("input"), kind, text, redact(author), time.time(), redact=redact
        )
        await trio.lowlevel.checkpoint_if_cancelled()
        decided = self._admissions.admit(conversation_id, item)
        if decided == "no-active-run" and isinstance(self.journal, SqliteJournal):
            return await self._submit_elsewhere(conversation_id, item)
        if isinstance(decided, str):
            await trio.lowlevel.cancel_shielded_checkpoint()
            return InputReceipt(
                item.input_id, conversation_id, kind, item.author, item.at, "rejected", decided
            )
        # The room left for input other processes admitted for the run and not adopted yet: the
        # queue is the conversation's, whoever admits (a journal in memory has none).
        room = self.limits.max_pending - self._admissions.queued(conversation_id)
        try:
            position = await self.journal.admitted(
                decided, room=room, known=self._admissions.known()
            )
        except BaseException:
            self._admissions.abandon(item.input_id)
            self._signal()
            raise
        if position == "queue-full":
            self._admissions.abandon(item.input_id)
            self._signal()
            await trio.lowlevel.cancel_shielded_checkpoint()
            return InputReceipt(
                item.input_id, conversation_id, kind, item.author, item.at, "rejected", "queue-full"
            )
        if not self._admissions.deliverable(item.input_id) and await self._withdraw(decided):
            # The run stopped (or began its grace turn) while the admission was written: no run
            # will take it, so it is refused as if it had come a moment later.
            await trio.lowlevel.cancel_shielded_checkpoint()
            return InputReceipt(
                item.input_id, conversation_id, kind, item.author, item.at, "rejected", "run-ending"
            )
        self._admissions.commit(item.input_id, position)
        self._signal()
        # Admitted: yield once (a journal in memory did not), and never raise from here on.
        await trio.lowlevel.cancel_shielded_checkpoint()
        return InputReceipt(
            item.input_id,
            conversation_id,
            kind,
            item.author,
            item.at,
            "accepted",
            None,
            decided.position,
            self.journal.durable,
        )

    async def _submit_elsewhere(self, conversation_id: str, item: SteeringInput) -> InputReceipt:
        """No run of the conversation goes here: admit ``item`` for the run another process is
        running, if one is (see the module notes). Cancellation: all or nothing."""
        assert isinstance(self.journal, SqliteJournal)
        decided = await self.journal.admit_elsewhere(
            conversation_id, item, self.limits, redact=self._redact_text
        )
        base = (item.input_id, conversation_id, item.kind, item.author, item.at)
        if isinstance(decided, str):
            await trio.lowlevel.cancel_shielded_checkpoint()  # not admitted: never raise now
            return InputReceipt(*base, "rejected", decided)
        if self._admissions.active_runs(conversation_id):
            # A run of the conversation started here while this was written (the lane it was
            # admitted under may be that run's): adopt it now, not a poll interval later.
            with trio.CancelScope(shield=True):
                try:
                    await self._adopt_for((conversation_id,))
                except StorageError as exc:
                    log_warning("looking for steering failed", error=type(exc).__name__)
        else:
            await trio.lowlevel.cancel_shielded_checkpoint()  # admitted: never raise now
        return InputReceipt(*base, "accepted", None, decided, True)

    async def _withdraw(self, entry: Entry) -> bool:
        """Take back the persisted admission of ``entry``, which no run will take; whether it
        was (if the journal fails, it stays admitted: it expires with its run). Never raises.

        Cancellation: shielded (the admission is already written)."""
        with trio.CancelScope(shield=True):
            try:
                await self.journal.withdraw(entry)
            except Exception as exc:
                log_warning(
                    "taking back an admission failed",
                    input_id=entry.input.input_id,
                    error=type(exc).__name__,
                )
                return False
        self._admissions.abandon(entry.input.input_id)
        self._signal()
        return True

    def _signal(self) -> None:
        changed, self._changed = self._changed, trio.Event()
        changed.set()

    async def status(self, input_id: str) -> InputStatus | None:
        """What became of an accepted input: queued, delivered (with the sequence number of its
        canonical record) or expired (with why). None for an ID never accepted here (or, in memory,
        one whose conversation the log has since evicted).

        Cancellation: nothing changes."""
        if not isinstance(input_id, str):
            raise TypeError(f"input_id must be a str, got {type(input_id).__name__}")
        if not storable(input_id):  # no input has such an ID (and no database takes it)
            await trio.lowlevel.checkpoint()
            return None
        return await self.journal.status(input_id)

    # ---- the engine's seam --------------------------------------------------------------------

    async def run_started(self, run: RunInfo) -> None:
        """A run of ``run.conversation_id`` is going: steering is accepted from now on (and, with
        the SQLite journal, looked for in it: see the module notes). With the SQLite journal,
        what was admitted under the run's lane before it was told to start — from the moment
        its lane was claimed, through the path for another process's run — is adopted now,
        before its first turn (the poll would find it only after an interval the run may not
        last). Never raises (a failed look is logged; the poll looks again).

        Cancellation: with the SQLite journal, a checkpoint (the run's own); else it does not
        yield."""
        self._admissions.run_started(run.conversation_id, run.run_id)
        self._redact_text = run.redact_text  # the runtime's (one runtime builds this inbox)
        if not isinstance(self.journal, SqliteJournal):
            return
        if not self._polling and not self._closed:
            self._polling = True
            self._poll_scope, self._poll_ended = trio.CancelScope(), trio.Event()
            trio.lowlevel.spawn_system_task(
                self._poll_while_running,
                self._poll_scope,
                self._poll_ended,
                name="effectagent steering",
            )
        try:
            await self._adopt_for((run.conversation_id,))
        except StorageError as exc:
            log_warning("looking for steering failed", error=type(exc).__name__)

    async def run_ended(self, run: RunInfo, ending: RunEnding) -> None:
        """That run is over. When it was the conversation's last, inputs it never took expire and
        those it took are confirmed against the log. Never raises (failures are logged).

        Cancellation: the engine calls it shielded; it waits for admissions still being
        persisted (each is one group-committed write)."""
        closing = self._admissions.run_ended(run.conversation_id, run.run_id)
        if closing is not None and closing.entries:
            await self._settle(closing, ending)
        # (The run's lane is the log's to let go: ``SqliteConversationLog.run_ended``.)

    async def adopt_waiting(self) -> int:
        """Adopt, now, the input other processes admitted for the runs going here (what the
        runs' poll does every :data:`POLL_INTERVAL` seconds); return how many. Nothing with a
        journal in memory.

        Cancellation: a checkpoint; what was read before it is not adopted (the next poll does).
        """
        return await self._adopt_for(self._admissions.active_conversations())

    async def _adopt_for(self, conversations: Sequence[str]) -> int:
        """:meth:`adopt_waiting` for ``conversations`` alone."""
        journal = self.journal
        if not isinstance(journal, SqliteJournal) or not conversations:
            await trio.lowlevel.checkpoint()
            return 0
        found = await journal.waiting(conversations, skip=self._admissions.known())
        redact = self._redact_text
        adopted = 0
        for conversation_id, inputs in found.items():
            for item, position in inputs:
                redacted = attrs.evolve(item, text=redact(item.text))
                if self._admissions.adopt(conversation_id, redacted, position) is not None:
                    adopted += 1
        return adopted

    async def _poll_while_running(self, scope: trio.CancelScope, ended: trio.Event) -> None:
        """While runs go here, adopt what other processes admitted for them, every
        :data:`POLL_INTERVAL` seconds, until :meth:`aclose` cancels ``scope``; ``ended`` is set
        when it is over. (A system task: it never raises but ``Cancelled``.)"""
        try:
            with scope:
                while True:
                    await trio.sleep(POLL_INTERVAL)
                    if not self._admissions.active_conversations():
                        return
                    await self.adopt_waiting()
        except StorageError:
            return  # the database closed (or fails): the runs going end with it
        except Exception as exc:
            log_warning("looking for steering failed", error=type(exc).__name__)
        finally:
            self._polling = False
            ended.set()

    async def aclose(self) -> None:
        """Stop looking for input other processes admit, and wait until the poll has ended: no
        task of the inbox outlives the layer that built it. Idempotent.

        Cancellation: shielded (the layer's teardown calls it; the poll ends at once)."""
        self._closed = True
        if self._poll_scope is not None:
            self._poll_scope.cancel()
        ended = self._poll_ended
        if ended is not None:
            with trio.CancelScope(shield=True):
                await ended.wait()
        else:
            await trio.lowlevel.cancel_shielded_checkpoint()

    async def _settle(self, closing: Closing, ending: RunEnding) -> None:
        while not closing.ready:
            await self._changed.wait()
        taken, queued = closing.taken, closing.queued
        reason = f"the run {ending} before it took the input"
        try:
            await self.journal.settle(closing.conversation_id, taken, queued, reason)
        except Exception as exc:
            log_warning(
                "steering settlement failed",
                conversation_id=closing.conversation_id,
                error=type(exc).__name__,
            )
            return
        if queued:
            log_warning(
                "steering expired",
                conversation_id=closing.conversation_id,
                inputs=[entry.input.input_id for entry in queued],
                ending=ending,
            )

    def drain_steering(self, conversation_id: str) -> Sequence[SteeringInput]:
        """Take the accepted steering of the conversation, in admission order. Never blocks."""
        return self._admissions.drain_steering(conversation_id)

    def take_follow_ups(self, conversation_id: str) -> Sequence[SteeringInput]:
        """The agent would stop: take every accepted input still waiting, in admission order.
        Nothing: the run is ending, and later submissions are rejected ("run-ending")."""
        return self._admissions.take_follow_ups(conversation_id)
