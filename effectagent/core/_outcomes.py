"""The six outcomes of a tool call. Exactly one settles each declared call.

Every outcome carries the stable tool-call ID and the tool name, and knows what the model is shown
(:meth:`model_content`) — already redacted and bounded by the engine.
"""

from __future__ import annotations

from typing import Any, Literal, TypeAlias

import attrs

from effectagent.effect import SchemaIssue, _fast_init

__all__ = [
    "ToolDefect",
    "ToolFailure",
    "ToolInvalidInput",
    "ToolOutcome",
    "ToolRejected",
    "ToolSuccess",
    "ToolUnknownOutcome",
]


@_fast_init
@attrs.frozen(slots=True)
class ToolSuccess:
    """The handler returned a value of its declared success type; ``result`` is its encoding.
    ``media``: the images, documents or audio it returned (a success type with media parts in
    it), by reference — ``MediaPart.reference()``, never the bytes — each standing in ``result``
    as its description."""

    tool_call_id: str
    tool_name: str
    result: Any
    kind: Literal["success"] = "success"
    media: tuple[Any, ...] = ()
    is_failure = False

    def model_content(self) -> Any:
        """What the model sees."""
        return self.result


@_fast_init
@attrs.frozen(slots=True)
class ToolRejected:
    """Authorization or approval denied execution (or a budget stopped it); it never ran.

    ``terminal`` marks an approval denial that ends the run (the tool declared
    ``denial_is_terminal``): the batch still commits, then the run fails with ``ApprovalDenied``.
    """

    tool_call_id: str
    tool_name: str
    reason: str
    terminal: bool = False
    kind: Literal["rejected"] = "rejected"
    is_failure = True

    def model_content(self) -> Any:
        """What the model sees."""
        return {"_tag": "ToolRejected", "message": self.reason}


@_fast_init
@attrs.frozen(slots=True)
class ToolInvalidInput:
    """The arguments did not decode (or the tool is unknown, or the arguments were truncated).

    ``issues`` are the decoder's findings as data — where (``$.items[2].qty``) and what, each
    redacted — and ``message`` says the same in words (what the model is shown).
    """

    tool_call_id: str
    tool_name: str
    message: str
    issues: tuple[SchemaIssue, ...] = ()
    kind: Literal["invalid-input"] = "invalid-input"
    is_failure = True

    def model_content(self) -> Any:
        """What the model sees."""
        return {"_tag": "ToolInvalidInput", "message": self.message}


@_fast_init
@attrs.frozen(slots=True)
class ToolFailure:
    """The handler failed with a declared error; ``error`` is its encoded envelope (``_tag``…)."""

    tool_call_id: str
    tool_name: str
    error: Any
    kind: Literal["failure"] = "failure"
    is_failure = True

    def model_content(self) -> Any:
        """What the model sees."""
        return self.error


@_fast_init
@attrs.frozen(slots=True)
class ToolDefect:
    """The handler crashed, was interrupted unexpectedly, timed out, or broke its output schema."""

    tool_call_id: str
    tool_name: str
    message: str
    kind: Literal["defect"] = "defect"
    is_failure = True

    def model_content(self) -> Any:
        """What the model sees: the defect's message (redacted and bounded by the engine) — what
        was raised or broken, never a traceback."""
        return {"_tag": "ToolDefect", "message": self.message}


@_fast_init
@attrs.frozen(slots=True)
class ToolUnknownOutcome:
    """A call whose side effect may or may not have happened: its handler raised
    ``effectagent.ai.OutcomeUnknown`` (a remote server went away after the request may have been
    sent, or stopped answering) — or its run was resumed from its records (``Runtime.resume``)
    with the call prepared and never settled, and its tool is neither idempotent nor bound with a
    reconcile function that could tell (or that function said it cannot tell)."""

    tool_call_id: str
    tool_name: str
    reason: str
    kind: Literal["unknown"] = "unknown"
    is_failure = True

    def model_content(self) -> Any:
        """What the model sees."""
        return {"_tag": "ToolUnknownOutcome", "message": self.reason}


#: The one outcome a declared tool call settles with.
ToolOutcome: TypeAlias = (
    ToolSuccess | ToolRejected | ToolInvalidInput | ToolFailure | ToolDefect | ToolUnknownOutcome
)
