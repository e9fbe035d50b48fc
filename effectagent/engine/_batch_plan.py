"""Phase 1 of a tool batch — pure: what the model declared, and what becomes of each call before
anything runs.

Each declared call is resolved in the toolkit and its arguments decoded with the tool's schema
(text up to ``ResponseLimits.max_tool_argument_bytes``, and no deeper or wider than the tools'
argument limits). A call cut off by the length limit, with arguments too large to keep, naming an
unknown tool, or with arguments that do not decode is settled here, as ``ToolInvalidInput``; the
rest are runnable. No I/O, no Trio: the driver admits
runnable calls against the tool-call budget and hands the plan to the batch.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final, final

import attrs

from effectagent.ai import DEFAULT_ARGUMENT_LIMITS, Tool, Toolkit, TruncatedToolCall
from effectagent.core import (
    ApprovalDenied,
    Redactor,
    RunError,
    ToolFailedRun,
    ToolFailure,
    ToolInvalidInput,
    ToolOutcome,
    ToolRejected,
    ToolResultBounds,
    bounded_json,
    bounded_parsed,
)
from effectagent.effect import SchemaError, SchemaIssue, SchemaLimits, _fast_init

from ._model_step import ModelStep, declared_calls, oversized_message

__all__ = [
    "BUDGET_SPENT",
    "BatchPlan",
    "DeclaredCall",
    "EarlyOutcome",
    "PlannedCall",
    "plan_batch",
    "run_error",
]

_PREVIEW_BOUNDS = ToolResultBounds(max_bytes=2048)

#: Why a call of a batch refused whole (past the tool-call budget) was not run.
BUDGET_SPENT = "the batch would go past the run's tool-call budget, so none of its calls was run"


@final
class PlannedCall:
    """A runnable call: resolved, decoded, at its place in the model's declaration order."""

    __slots__ = ("arguments", "id", "index", "name", "params", "tool")

    def __init__(
        self,
        *,
        index: int,
        call_id: str,
        name: str,
        tool: Tool[Any, Any],
        params: Any,
        arguments: Any,
    ) -> None:
        self.index = index
        self.id = call_id
        self.name = name
        self.tool = tool
        self.params = params  # decoded, for the handler
        self.arguments = arguments  # shown (redacted) JSON value, for records and approval


@_fast_init
@attrs.frozen(slots=True)
class DeclaredCall:
    """A call as the model declared it: its ID, its tool's name, a bounded preview of its
    arguments (shown, redacted)."""

    id: str
    name: str
    preview: Any


@_fast_init
@attrs.frozen(slots=True)
class EarlyOutcome:
    """A call settled before anything ran (phase 1), at its place in declaration order."""

    index: int
    outcome: ToolOutcome


@final
class BatchPlan:
    """Every declared call of one response, in declaration order, and what phase 1 decided."""

    __slots__ = ("declared", "early", "runnable")

    def __init__(
        self,
        *,
        declared: list[DeclaredCall],
        early: list[EarlyOutcome],
        runnable: list[PlannedCall],
    ) -> None:
        self.declared = declared
        self.early = early  # calls settled in phase 1, in declaration order
        self.runnable = runnable  # in declaration order

    def __len__(self) -> int:
        return len(self.declared)


def plan_batch(step: ModelStep, toolkit: Toolkit, redactor: Redactor) -> BatchPlan:
    """Resolve and decode every call of ``step``'s response (see the module notes). Pure."""
    response = step.response
    shown_arguments = step.arguments
    redacting = step.redacting
    declared: list[DeclaredCall] = []
    early: list[EarlyOutcome] = []
    runnable: list[PlannedCall] = []
    argument_limit = step.limits.max_tool_argument_bytes
    limits = _argument_limits(argument_limit)
    for index, call in enumerate(declared_calls(response)):
        if isinstance(call, TruncatedToolCall):  # it never runs, and keeps its place
            declared.append(DeclaredCall(call.id, call.name, ""))
            if call.reason == "too-large":
                why = oversized_message(call.size, argument_limit)
            else:
                why = _CUT_OFF
            early.append(EarlyOutcome(index, ToolInvalidInput(call.id, call.name, why)))
            continue
        call_id, name, raw = call.id, call.name, call.arguments
        shown = shown_arguments[call_id]
        if redacting:
            preview = bounded_json(shown, _PREVIEW_BOUNDS)
        else:  # nothing redacted: ``shown`` is what parsing ``raw`` gave
            preview = bounded_parsed(shown, raw, _PREVIEW_BOUNDS)
        declared.append(DeclaredCall(call_id, name, preview))
        tool = toolkit.get(name)
        if tool is None:
            available = ", ".join(toolkit.names) or "none"
            message = f"unknown tool {name!r} (available: {available})"
            early.append(EarlyOutcome(index, ToolInvalidInput(call_id, name, message)))
            continue
        try:
            params = tool.decode_arguments(raw, limits=limits)
        except SchemaError as exc:
            message = redactor.redact_text(str(exc))
            issues = tuple(
                SchemaIssue(redactor.redact_text(i.path), redactor.redact_text(i.message))
                for i in exc.issues
            )
            early.append(EarlyOutcome(index, ToolInvalidInput(call_id, name, message, issues)))
        else:
            runnable.append(
                PlannedCall(
                    index=index,
                    call_id=call_id,
                    name=name,
                    tool=tool,
                    params=params,
                    arguments=shown,
                )
            )
    # Kept while the batch runs (many runs may be parked at once): lists of their exact size (a
    # list grown by appends keeps room for more), and no empty list of early outcomes of its own.
    return BatchPlan(
        declared=declared[:], early=early[:] if early else _NO_EARLY, runnable=runnable[:]
    )


#: What the model is told of a call the output length limit cut off.
_CUT_OFF: Final = "the arguments were cut off by the output length limit; the call was not executed"

#: The early outcomes of a plan without any (shared: never appended to — a plan's lists are read).
_NO_EARLY: list[EarlyOutcome] = []


def _argument_limits(max_bytes: int) -> SchemaLimits:
    """The tools' argument limits, taking text up to ``max_bytes`` (the response's argument
    limit: what the reducer let through, the decoder takes)."""
    if max_bytes == DEFAULT_ARGUMENT_LIMITS.max_bytes:
        return DEFAULT_ARGUMENT_LIMITS
    return attrs.evolve(DEFAULT_ARGUMENT_LIMITS, max_bytes=max_bytes)


def run_error(outcomes: Sequence[ToolOutcome], toolkit: Toolkit) -> RunError | None:
    """The first outcome, in declaration order, that ends the run: a declared failure of a tool
    with ``failure_mode="error"``, or a terminal approval denial."""
    for outcome in outcomes:
        if isinstance(outcome, ToolFailure):
            tool = toolkit.get(outcome.tool_name)
            if tool is not None and tool.failure_mode == "error":
                return ToolFailedRun(outcome.tool_call_id, outcome.tool_name, outcome.error)
        elif isinstance(outcome, ToolRejected) and outcome.terminal:
            return ApprovalDenied(outcome.tool_call_id, outcome.tool_name, outcome.reason)
    return None
