"""The test-controlled approval provider: answers from a script, on the Trio clock.

For tests and property tests (a generated script is plain data: a sequence of :class:`Answer`
values, or a mapping from tool-call ID to answer). Each answer can approve, deny, fail as an
``ApprovalError``, wait first (``delay``, on the Trio clock, so ``MockClock`` makes it instant),
hang until the engine's timeout, or hand back a decision it was given verbatim — e.g. one made
for another call, to check that it is refused (``Answer.replay``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal, TypeAlias, final

import attrs
import trio

from effectagent.core import ApprovalDecision, ApprovalRequest
from effectagent.effect import Layer
from effectagent.engine import ApprovalError, ApprovalService

__all__ = ["Answer", "ApprovalScript", "ScriptedApproval"]


_KINDS = ("approve", "deny", "error", "hang", "replay")


def _kind(_: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if value not in _KINDS:
        raise ValueError(
            f"Answer.kind must be one of {', '.join(map(repr, _KINDS))}, got {value!r}"
        )


def _reason(_: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, str):
        raise TypeError(f"Answer.reason must be a str, got {type(value).__name__}")


def _delay(_: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if type(value) not in (int, float) or not 0 <= value < math.inf:  # type: ignore[operator]
        raise ValueError(f"Answer.delay must be a finite number of seconds >= 0, got {value!r}")


def _decision(answer: Answer, attribute: attrs.Attribute[Any], value: object) -> None:
    if (answer.kind == "replay") != isinstance(value, ApprovalDecision):
        raise TypeError("Answer.decision is an ApprovalDecision for a replay answer, else None")


@attrs.frozen
class Answer:
    """One scripted answer. Build with the static constructors. A kind, reason, delay or
    decision that could not be played is refused here, not when a request arrives."""

    kind: Literal["approve", "deny", "error", "hang", "replay"] = attrs.field(validator=_kind)
    reason: str = attrs.field(default="", validator=_reason)
    delay: float = attrs.field(default=0.0, validator=_delay)
    decision: ApprovalDecision | None = attrs.field(default=None, validator=_decision)

    @staticmethod
    def approve(reason: str = "", *, delay: float = 0.0) -> Answer:
        """Approve (bound to the request), after ``delay`` seconds."""
        return Answer("approve", reason, delay)

    @staticmethod
    def deny(reason: str = "", *, delay: float = 0.0) -> Answer:
        """Deny (bound to the request), after ``delay`` seconds."""
        return Answer("deny", reason, delay)

    @staticmethod
    def error(message: str, *, delay: float = 0.0) -> Answer:
        """Raise ``ApprovalError(message)`` (the engine records a denial)."""
        return Answer("error", message, delay)

    @staticmethod
    def hang() -> Answer:
        """Never answer: wait until cancelled (the engine's timeout denies)."""
        return Answer("hang")

    @staticmethod
    def replay(decision: ApprovalDecision, *, delay: float = 0.0) -> Answer:
        """Return ``decision`` as it is — bound to whatever call it was made for."""
        given: object = decision  # checked: not every caller runs mypy
        if not isinstance(given, ApprovalDecision):
            raise TypeError(f"Answer.replay takes an ApprovalDecision, got {type(given).__name__}")
        return Answer("replay", decision.reason, delay, decision)


#: A script: answers in order, answers by tool-call ID, or a function of the request.
ApprovalScript: TypeAlias = (
    Sequence[Answer] | Mapping[str, Answer] | Callable[[ApprovalRequest], Answer]
)


@final
class ScriptedApproval:
    """Answers approval requests from ``script`` (see the module notes). ``requests`` and
    ``decisions`` record what was asked and answered, in order; a request the script has no
    answer for is an ``ApprovalError`` (a denial) and is kept in ``unanswered``."""

    __slots__ = (
        "_by_id",
        "_by_order",
        "_decide",
        "decided_by",
        "decisions",
        "requests",
        "unanswered",
    )

    def __init__(self, script: ApprovalScript, *, decided_by: str = "scripted") -> None:
        self._by_order: list[Answer] | None = None
        self._by_id: dict[str, Answer] | None = None
        self._decide: Callable[[ApprovalRequest], Answer] | None = None
        if isinstance(script, Mapping):
            self._by_id = dict(script)
            answers = list(self._by_id.values())
        elif callable(script):
            self._decide = script
            answers = []
        elif isinstance(script, Sequence):
            self._by_order = list(script)
            answers = list(self._by_order)
        else:
            raise TypeError("script must be answers, answers by tool-call ID, or a function")
        if isinstance(script, str | bytes):
            raise TypeError("script must be answers, answers by tool-call ID, or a function")
        for answer in answers:
            if not isinstance(answer, Answer):
                raise TypeError(f"a script holds Answer values, got {type(answer).__name__}")
        keys: tuple[object, ...] = tuple(self._by_id or ())  # checked: not every caller runs mypy
        for call_id in keys:
            if not isinstance(call_id, str) or not call_id:
                raise TypeError(
                    f"a script by tool-call ID is keyed by non-empty str IDs, got {call_id!r}"
                )
        given: object = decided_by  # checked: not every caller runs mypy
        if not isinstance(given, str):
            raise TypeError(f"decided_by must be a str, got {type(given).__name__}")
        if not given.strip():
            raise ValueError("decided_by must name who decides, got an empty str")
        self.decided_by = decided_by
        self.requests: list[ApprovalRequest] = []
        self.decisions: list[ApprovalDecision] = []
        self.unanswered: list[ApprovalRequest] = []

    def _next(self, request: ApprovalRequest) -> Answer | None:
        if self._decide is not None:
            answer = self._decide(request)
            if not isinstance(answer, Answer):
                raise ApprovalError(
                    f"the script function answered {type(answer).__name__}, not an Answer"
                )
            return answer
        if self._by_id is not None:
            return self._by_id.pop(request.tool_call_id, None)
        assert self._by_order is not None
        return self._by_order.pop(0) if self._by_order else None

    async def request(self, request: ApprovalRequest) -> ApprovalDecision:
        """The script's answer for ``request``.

        Cancellation: a checkpoint — cancelled there, the request is neither recorded nor
        answered (its answer stays for the next) — then the answer's ``delay`` (or forever, for
        ``hang``): cancelling it ends the wait with no decision recorded here.
        """
        await trio.lowlevel.checkpoint_if_cancelled()
        self.requests.append(request)
        answer = self._next(request)
        if answer is None:
            self.unanswered.append(request)
            raise ApprovalError(f"the script has no answer for {request.tool_call_id!r}")
        await trio.sleep(answer.delay)
        if answer.kind == "hang":
            await trio.sleep_forever()
        if answer.kind == "error":
            raise ApprovalError(answer.reason)
        if answer.kind == "replay":
            assert answer.decision is not None
            decision = answer.decision
        else:
            approved = answer.kind == "approve"
            decision = ApprovalDecision.for_request(
                request, approved, answer.reason, self.decided_by
            )
        self.decisions.append(decision)
        return decision

    def assert_consumed(self) -> None:
        """Raise ``AssertionError`` if answers were left over or a request had none."""
        left = len(self._by_order or ()) + len(self._by_id or {})
        if left or self.unanswered:
            raise AssertionError(
                f"{left} scripted answers left, {len(self.unanswered)} requests unanswered"
            )

    def layer(self) -> Layer:
        """This provider as the engine's ``ApprovalService``."""
        return Layer.succeed(ApprovalService, self, name="ScriptedApproval")
