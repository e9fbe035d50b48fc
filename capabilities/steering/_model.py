"""Steering and follow-up: input submitted to a conversation while a run is going.

* **Steering** enters the run at its next safe point — the start of its next turn, before the next
  model request; the model response and tool batch in flight finish normally. It is accepted only
  while a run of the conversation is going.
* A **follow-up** enters only when the agent would otherwise stop (it answered without calling a
  tool): instead of ending, the run takes another turn with it.

Both go through one admission path: checked (not empty, not too large, a run going and not
already ending, room in the conversation's queue), given an ID, a timestamp, the author and a FIFO
position, persisted when the store is durable, and answered with an :class:`InputReceipt` saying
whether it was accepted and, if not, why (:data:`Rejection`). An accepted input ends either
**delivered** — canonical as a ``UserInputRecorded`` of its kind, at a sequence number — or
**expired**, when the run ended before reaching a point where it could take it (it failed, was
interrupted, ran out of budget, or the process ended). Nothing accepted is dropped silently:
:meth:`ConversationInbox.status` tells which.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final, Literal, Protocol

import attrs

from effectagent.ai import MediaPart
from effectagent.effect import ServiceKey

__all__ = [
    "InputKind",
    "InputReceipt",
    "InputState",
    "InputStatus",
    "Rejection",
    "Steering",
    "SteeringLimits",
    "SteeringService",
]

#: Which way an input enters: at the next safe point, or only when the agent would stop.
InputKind = Literal["steering", "follow-up"]

#: Why an input was not accepted: it was empty or larger than the limit, no run of the
#: conversation is going, the run going has already produced its final answer, or the
#: conversation already has as many inputs waiting as the limit allows.
Rejection = Literal["empty", "too-large", "no-active-run", "run-ending", "queue-full"]

#: Where an accepted input is: waiting, canonical in the log, or expired undelivered.
InputState = Literal["queued", "delivered", "expired"]

_DEFAULT_MAX_CHARS: Final = 32_000
_DEFAULT_MAX_PENDING: Final = 64


@attrs.frozen
class SteeringLimits:
    """Admission limits: the longest input text, and how many inputs may wait per conversation."""

    max_chars: int = _DEFAULT_MAX_CHARS
    max_pending: int = _DEFAULT_MAX_PENDING

    def __attrs_post_init__(self) -> None:
        if type(self.max_chars) is not int or self.max_chars < 1:
            raise ValueError("max_chars must be a positive int")
        if type(self.max_pending) is not int or self.max_pending < 1:
            raise ValueError("max_pending must be a positive int")


@attrs.frozen
class InputReceipt:
    """The answer to one submission: its identity, and whether it was admitted.

    ``position`` is its place in the conversation's FIFO (accepted inputs only); ``durable`` says
    the admission was persisted before this receipt was returned.
    """

    input_id: str
    conversation_id: str
    kind: InputKind
    author: str
    at: float
    admission: Literal["accepted", "rejected"]
    rejection: Rejection | None = None
    position: int | None = None
    durable: bool = False

    @property
    def accepted(self) -> bool:
        """Whether the input was admitted."""
        return self.admission == "accepted"


@attrs.frozen
class InputStatus:
    """What became of an accepted input: ``seq`` of its canonical record once delivered;
    ``reason`` once expired."""

    input_id: str
    conversation_id: str
    kind: InputKind
    author: str
    at: float
    state: InputState
    seq: int | None = None
    reason: str = ""


class Steering(Protocol):
    """Submits steering and follow-ups to conversations and says what became of them."""

    async def steer(
        self, conversation_id: str, text: str | Sequence[str | MediaPart], *, author: str
    ) -> InputReceipt:
        """Steer the run going in ``conversation_id`` (see the module notes): ``text`` is a str
        or a sequence of str and media parts, as a run's input. Cancellation: all or nothing —
        raising means not admitted, returning means the receipt is the truth."""
        ...

    async def follow_up(
        self, conversation_id: str, text: str | Sequence[str | MediaPart], *, author: str
    ) -> InputReceipt:
        """Queue a follow-up for when that run would stop (see the module notes). Cancellation:
        as :meth:`steer`."""
        ...

    async def status(self, input_id: str) -> InputStatus | None:
        """What became of an accepted input (None for an ID never accepted here, or — in memory
        — one whose conversation the log has since evicted). Cancellation: nothing changes."""
        ...


#: The service key of the public steering API (the same object fills the engine's
#: ``SteeringInboxService``).
SteeringService: ServiceKey[Steering] = ServiceKey(
    "capabilities.Steering", "submits steering and follow-ups to running conversations"
)
