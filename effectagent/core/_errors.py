"""Why a run failed: tagged errors carried by RunFailed events and records."""

from __future__ import annotations

from typing import Any

import attrs

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
    "ToolFailedRun",
]


@attrs.frozen
class RunError(TaggedError):
    """Base of every reason a run fails."""


@attrs.frozen
class BudgetExhausted(RunError):
    """A budget dimension ran out under ``on_exhaustion="fail"``."""

    dimension: str
    used: float
    limit: float


@attrs.frozen
class ModelFailed(RunError):
    """The model call failed; ``error_tag`` is the AiError's tag."""

    error_tag: str
    message: str


@attrs.frozen
class RepeatedToolFailure(RunError):
    """The same tool failed ``count`` times in a row."""

    tool_name: str
    count: int


@attrs.frozen
class FinalTurnDeclaredTools(RunError):
    """The grace turn (tool choice "none") declared tool calls anyway: fail closed."""

    tool_names: tuple[str, ...]


@attrs.frozen
class OutputInvalid(RunError):
    """The final answer did not decode into the agent's output type."""

    message: str


@attrs.frozen
class ToolFailedRun(RunError):
    """A tool with ``failure_mode="error"`` failed with a declared error."""

    tool_call_id: str
    tool_name: str
    error: Any


@attrs.frozen
class EngineDefect(RunError):
    """Something undeclared broke inside the engine (a bug). ``message`` is redacted."""

    message: str


@attrs.frozen
class ApprovalDenied(RunError):
    """A tool call whose denial is terminal (``Tool(denial_is_terminal=True)``) was denied or its
    approval timed out: the batch committed, then the run ended."""

    tool_call_id: str
    tool_name: str
    reason: str
