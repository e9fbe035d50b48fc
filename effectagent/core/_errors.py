"""Why a run failed: tagged errors carried by RunFailed events and records."""

from __future__ import annotations

from typing import Any

import attrs

from effectagent.ai import dollars
from effectagent.effect import TaggedError

__all__ = [
    "ApprovalDenied",
    "BudgetExhausted",
    "EngineDefect",
    "FinalTurnDeclaredTools",
    "ModelFailed",
    "OutputInvalid",
    "RepeatedToolFailure",
    "RunError",
    "StorageFailed",
    "ToolFailedRun",
    "ToolSourceFailed",
]


@attrs.frozen
class RunError(TaggedError):
    """Base of every reason a run fails. ``str()`` of each is a sentence a person can read, with
    its figures rounded (the fields keep the exact values)."""


def figure(dimension: str, value: float) -> str:
    """A budget figure as a person reads it: seconds to one decimal (two significant digits
    below a tenth of a second, which one decimal would show as 0.0 s), a cost in dollars, counts
    as whole numbers."""
    if dimension == "duration":
        if 0 < value < 0.1:
            return f"{value:.2g} s"
        return f"{value:.1f} s"
    if dimension == "cost":  # micro-dollars
        return dollars(int(value))
    return f"{value:.0f}"


@attrs.frozen
class BudgetExhausted(RunError):
    """A budget dimension ran out under ``on_exhaustion="fail"`` — or, under ``"final-answer"``,
    the grace turn itself ran out of time (``dimension="duration"``). ``refused_batch``: the
    calls of a batch refused whole because it would have gone past ``max_tool_calls`` (none of
    them ran; ``used`` counts them, as what the run would have used)."""

    dimension: str
    used: float
    limit: float
    refused_batch: int = 0

    def __str__(self) -> str:
        what = self.dimension.replace("_", " ")
        if self.refused_batch:
            return (
                f"the {what} budget ran out: a batch of {self.refused_batch} calls was refused "
                f"whole, none of it ran (it would have made {figure(self.dimension, self.used)} "
                f"of {figure(self.dimension, self.limit)})"
            )
        return (
            f"the {what} budget ran out: {figure(self.dimension, self.used)} used of "
            f"{figure(self.dimension, self.limit)}"
        )


@attrs.frozen
class ModelFailed(RunError):
    """The model call failed; ``error_tag`` is the AiError's tag, ``message`` what it said (a
    sentence, redacted)."""

    error_tag: str
    message: str

    def __str__(self) -> str:
        return f"the model call failed ({self.error_tag}): {self.message}"


@attrs.frozen
class RepeatedToolFailure(RunError):
    """The same tool failed ``count`` times in a row."""

    tool_name: str
    count: int

    def __str__(self) -> str:
        return f"the tool {self.tool_name} failed {self.count} times in a row"


@attrs.frozen
class FinalTurnDeclaredTools(RunError):
    """The grace turn (tool choice "none") declared tool calls anyway: fail closed."""

    tool_names: tuple[str, ...]

    def __str__(self) -> str:
        names = ", ".join(self.tool_names)
        return f"the final-answer turn asked for tool calls anyway ({names}); none was run"


@attrs.frozen
class OutputInvalid(RunError):
    """The final answer did not decode into the agent's output type."""

    message: str

    def __str__(self) -> str:
        return self.message


@attrs.frozen
class ToolFailedRun(RunError):
    """A tool with ``failure_mode="error"`` failed with a declared error."""

    tool_call_id: str
    tool_name: str
    error: Any

    def __str__(self) -> str:
        error = self.error
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            detail = f"{error.get('_tag', 'error')}: {error['message']}"
        elif isinstance(error, dict) and isinstance(error.get("_tag"), str):
            detail = error["_tag"]
        else:
            detail = "a declared error"
        return f"the tool {self.tool_name} failed and ended the run ({detail})"


@attrs.frozen
class EngineDefect(RunError):
    """Something undeclared broke while the run went (a defect): an exception none of its parts
    declares — raised by the engine, or by a part it was given (a model that raised outside the
    ``AiError`` kinds, a test double whose script ran out or whose cassette diverged, a
    service). ``message`` names the exception and says what it said, redacted."""

    message: str

    def __str__(self) -> str:
        return f"the run failed on an undeclared error (a defect): {self.message}"


@attrs.frozen
class ApprovalDenied(RunError):
    """A tool call whose denial is terminal (``Tool(denial_is_terminal=True)``) was denied or its
    approval timed out: the batch committed, then the run ended."""

    tool_call_id: str
    tool_name: str
    reason: str

    def __str__(self) -> str:
        return f"the call of {self.tool_name} was not approved, which ends the run: {self.reason}"


@attrs.frozen
class StorageFailed(RunError):
    """The run's conversation could not be read or written: a damaged or missing record, one
    written by a newer version, or a write the storage refused (disk full, the store closed) —
    the Conversation Log's ``ConversationLogError``, kept as fields rather than as text.

    ``seq`` is the sequence number of the record at fault, None when no one record is (a refused
    write); ``reason`` is the storage's sentence, which names where and never what a record holds.
    """

    conversation_id: str
    seq: int | None
    reason: str

    def __str__(self) -> str:
        return f"the conversation's storage failed: {self.reason}"


@attrs.frozen
class ToolSourceFailed(RunError):
    """A tool source the agent names (``Agent.tool_sources``) failed as a turn asked it for its
    tools: its ``snapshot()`` raised, or returned something other than a ``ToolSnapshot``.
    ``source`` is the name of its service key; ``reason`` what went wrong (redacted)."""

    source: str
    reason: str

    def __str__(self) -> str:
        return f"the tool source {self.source} failed: {self.reason}"
