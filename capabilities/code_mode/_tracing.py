"""Spans of Code Mode, for the effect core's tracing hook (``trace_span``).

Each pass is a span ``code_mode.pass {tool}``, current while the pass runs: the executor's span
(``sandbox.code``) and one span ``execute_tool {tool}`` per call the program makes nest under it,
and what an inner handler traces nests under its call. A pass span says which call it serves (the
pass ID is the call's ID), how its executor isolates, its limits, the program's size (never the
program: the call's own span has it, redacted, when content is recorded), how many calls the
program made and how the pass ended (``effectagent.code_mode.outcome``: ``ok`` or the
:data:`~capabilities.code_mode._errors.FailureKind`). An inner call's span says the tool, that it was an
inner call, and its outcome kind; its arguments and result are content.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from effectagent.ai import ToolCallContext
from effectagent.effect import AttributeValue, JSONValue, SpanHandle
from sandbox import HostCallOutcome, HostCallSucceeded

from ._limits import CodeModeLimits

__all__ = ["inner_call_ended", "inner_call_started", "pass_ended", "pass_started"]

_KINDS: Final = {
    "ToolFailure": "failure",
    "ToolInvalidInput": "invalid-input",
    "ToolRejected": "rejected",
    "ToolDefect": "defect",
}


def pass_started(
    span: SpanHandle,
    call: ToolCallContext,
    audit: Mapping[str, JSONValue],
    limits: CodeModeLimits,
    tools: int,
    program: str,
) -> None:
    """What a pass's span says from its start (nothing computed when it records nothing)."""
    if not span.recording:
        return
    attributes: dict[str, AttributeValue] = {
        "gen_ai.operation.name": "code_mode.pass",
        "gen_ai.tool.name": call.tool_name,
        "gen_ai.tool.call.id": call.tool_call_id,
        "effectagent.code_mode.pass.id": call.tool_call_id,
        "effectagent.code_mode.tools": tools,
        "effectagent.code_mode.program_bytes": len(program.encode("utf-8", "surrogatepass")),
        "effectagent.code_mode.limit.source_bytes": limits.source_bytes,
        "effectagent.code_mode.limit.egress_bytes": limits.egress_bytes,
        "effectagent.code_mode.limit.calls": limits.max_calls,
        "effectagent.code_mode.limit.concurrent_calls": limits.max_concurrent_calls,
        "effectagent.code_mode.limit.wall_clock_s": limits.wall_clock_seconds,
    }
    for key in ("executor", "isolation", "security_boundary"):
        value = audit.get(key)
        if isinstance(value, str | bool):
            attributes[f"effectagent.code_mode.{key}"] = value
    for name, value in attributes.items():
        span.set_attribute(name, value)


def pass_ended(span: SpanHandle, outcome: str, calls: int) -> None:
    """How the pass ended: ``ok`` or the failure kind (the span then fails with it)."""
    span.set_attribute("effectagent.code_mode.inner_calls", calls)
    span.set_attribute("effectagent.code_mode.outcome", outcome)
    if outcome != "ok":
        span.fail(outcome, f"the pass failed: {outcome}")


def inner_call_started(span: SpanHandle, name: str, index: int, argument: JSONValue) -> None:
    """What an inner call's span says from its start; its argument is content."""
    if not span.recording:
        return
    span.set_attribute("gen_ai.operation.name", "execute_tool")
    span.set_attribute("gen_ai.tool.name", name)
    span.set_attribute("effectagent.code_mode.inner", True)
    span.set_attribute("effectagent.code_mode.inner.index", index)
    span.set_content("gen_ai.tool.call.arguments", argument)


def inner_call_ended(span: SpanHandle, outcome: HostCallOutcome) -> None:
    """The inner call's outcome kind (its result or error envelope is content)."""
    if not span.recording:
        return
    if isinstance(outcome, HostCallSucceeded):
        span.set_attribute("effectagent.outcome.kind", "success")
        span.set_content("gen_ai.tool.call.result", outcome.value)
        return
    tag = outcome.envelope.get("_tag")
    kind = _KINDS.get(tag, "failure") if isinstance(tag, str) else "failure"
    span.set_attribute("effectagent.outcome.kind", kind)
    span.fail(kind)
    span.set_content("gen_ai.tool.call.result", outcome.envelope)
