"""Joined input: submissions a worker hands to the run going in their conversation, through the
engine's steering seam.

:class:`JoinInbox` is the worker's ``SteeringInboxService``. It passes everything to the inbox it
wraps (ordinary steering and follow-ups, which work as without it) and adds, at the front of what
the run takes, the submissions the worker handed it for that conversation (:meth:`give`): at the
run's next safe point (``drain_steering``) or when the run would stop (``take_follow_ups``), each
becomes a ``UserInputRecorded`` of kind steering whose ``input_id`` is the submission's ID and
whose author is its principal — so the log alone says it was absorbed, and by which run. Text is
redacted with the runtime's redaction, as the wrapped inbox does.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Sequence
from typing import final

import trio

from effectagent.engine import RunEnding, RunInfo, SteeringInbox, SteeringInput

__all__ = ["JoinInbox"]


def _unchanged(text: str) -> str:
    return text


@final
class JoinInbox:
    """The worker's steering seam (see the module notes)."""

    __slots__ = ("_given", "_inner", "_redact", "_running")

    def __init__(self, inner: SteeringInbox | None = None) -> None:
        self._inner = inner
        # conversation -> (submission ID, principal, text), in FIFO order, not yet taken
        self._given: dict[str, list[tuple[str, str, str]]] = {}
        # conversation -> run ID of the run going
        self._running: dict[str, str] = {}
        self._redact: Callable[[str], str] = _unchanged

    def wrap(self, inner: SteeringInbox | None) -> None:
        """Pass ordinary steering and follow-ups to ``inner`` (the runtime's own inbox)."""
        self._inner = inner

    def running(self, conversation_id: str) -> bool:
        """Whether a run of the conversation is going (and may take input)."""
        return conversation_id in self._running

    def give(self, conversation_id: str, submission_id: str, principal: str, text: str) -> None:
        """Hand a submission to the run going in ``conversation_id`` (taken at its next safe
        point, or when it would stop)."""
        self._given.setdefault(conversation_id, []).append((submission_id, principal, text))

    def pending(self, conversation_id: str) -> tuple[str, ...]:
        """The IDs of the submissions handed to the run going in ``conversation_id`` and not yet
        taken by it, in FIFO order. (A submission's status is ``"joining"`` from the moment the
        worker records the handover, a moment before it is here.)"""
        return tuple(given[0] for given in self._given.get(conversation_id, ()))

    def withdraw(self, conversation_id: str) -> list[str]:
        """Take back what was given to the conversation and not taken (the run ended); return
        the submission IDs."""
        return [given[0] for given in self._given.pop(conversation_id, [])]

    def drop(self, conversation_id: str, submission_ids: Collection[str]) -> None:
        """Take back the submissions ``submission_ids`` given to the conversation and not taken
        (they were aborted): the run never takes them."""
        given = self._given.get(conversation_id)
        if not given:
            return
        kept = [item for item in given if item[0] not in submission_ids]
        if kept:
            self._given[conversation_id] = kept
        else:
            del self._given[conversation_id]

    def _take(self, conversation_id: str) -> list[SteeringInput]:
        given = self._given.pop(conversation_id, None)
        if not given:
            return []
        now = time.time()
        return [
            SteeringInput(submission_id, "steering", self._redact(text), principal, now)
            for submission_id, principal, text in given
        ]

    async def run_started(self, run: RunInfo) -> None:
        """A run of ``run.conversation_id`` is going. Does not yield unless the wrapped inbox
        does."""
        self._running[run.conversation_id] = run.run_id
        self._redact = run.redact_text
        if self._inner is not None:
            await self._inner.run_started(run)

    async def run_ended(self, run: RunInfo, ending: RunEnding) -> None:
        """That run is over; what was given and not taken stays for the worker to withdraw.

        Cancellation: as the wrapped inbox's (the engine calls it shielded)."""
        if self._running.get(run.conversation_id) == run.run_id:
            del self._running[run.conversation_id]
        if self._inner is not None:
            await self._inner.run_ended(run, ending)
        else:
            await trio.lowlevel.checkpoint()

    def drain_steering(self, conversation_id: str) -> Sequence[SteeringInput]:
        """The joined submissions first, then the wrapped inbox's steering. Never blocks."""
        taken = self._take(conversation_id)
        if self._inner is not None:
            taken.extend(self._inner.drain_steering(conversation_id))
        return taken

    def take_follow_ups(self, conversation_id: str) -> Sequence[SteeringInput]:
        """The joined submissions first, then the wrapped inbox's follow-ups. Never blocks."""
        taken = self._take(conversation_id)
        if self._inner is not None:
            taken.extend(self._inner.take_follow_ups(conversation_id))
        return taken
