"""Span attributes of sandbox executions, for the effect core's tracing hook (``trace_span``).

A command execution is a span ``sandbox.command {program}``; a code pass a span ``sandbox.code``.
Their attributes say which runner ran it and how isolated (``effectagent.sandbox.*``), with which
limits, and how it ended: ``process.exit.code``, the signal, the limits hit, the resources used.
The program's *name* is an attribute (``process.executable.name``, its last path component); its
arguments are content (``process.command_args``), offered only to a starter that asked for content
(and redacts it). Never the environment, stdin, output, mounts' paths or secrets: only how many
mounts and secret handles there were.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from effectagent.effect import AttributeValue, SpanHandle

from ._posture import SandboxImplementation, Unlimited

if TYPE_CHECKING:
    from ._code import CodeExecutionLimits, CodeExecutionResult
    from ._command import SandboxRequest, SandboxResult

__all__ = ["code_result", "code_started", "command_result", "command_span_name", "command_started"]


def _set(span: SpanHandle, attributes: dict[str, AttributeValue]) -> None:
    for name, value in attributes.items():
        span.set_attribute(name, value)


def _posture(implementation: SandboxImplementation) -> dict[str, AttributeValue]:
    return {
        "effectagent.sandbox.runner": implementation.name,
        "effectagent.sandbox.isolation": implementation.isolation.value,
        "effectagent.sandbox.security_boundary": implementation.is_security_boundary,
    }


def _limit(attributes: dict[str, AttributeValue], name: str, value: float | Unlimited) -> None:
    """A finite limit as an attribute; a lifted one as the flag ``….lifted``."""
    if isinstance(value, str):  # UNLIMITED
        attributes[f"effectagent.sandbox.limit.{name}.lifted"] = True
    else:
        attributes[f"effectagent.sandbox.limit.{name}"] = value


def command_span_name(request: SandboxRequest) -> str:
    """``sandbox.command {program}``: the program's last path component, never its arguments."""
    return f"sandbox.command {os.path.basename(request.command)}"


def command_started(
    span: SpanHandle,
    request: SandboxRequest,
    implementation: SandboxImplementation,
    execution_id: str,
) -> None:
    """What a command's span says from its start (nothing is computed when it records nothing);
    its arguments are offered as content."""
    if not span.recording:
        return
    limits = request.limits
    attributes = _posture(implementation)
    attributes["effectagent.sandbox.operation"] = "command"
    attributes["effectagent.sandbox.execution.id"] = execution_id
    attributes["process.executable.name"] = os.path.basename(request.command)
    attributes["effectagent.sandbox.network"] = request.network
    attributes["effectagent.sandbox.mounts"] = len(request.mounts)
    attributes["effectagent.sandbox.secrets"] = len(request.secrets)
    attributes["effectagent.sandbox.artifact_rules"] = len(request.artifacts)
    attributes["effectagent.sandbox.limit.wall_clock_s"] = limits.wall_clock_seconds
    attributes["effectagent.sandbox.limit.output_bytes"] = limits.output_bytes
    _limit(attributes, "cpu_s", limits.cpu_seconds)
    _limit(attributes, "memory_bytes", limits.memory_bytes)
    _limit(attributes, "max_processes", limits.max_processes)
    _limit(attributes, "file_size_bytes", limits.file_size_bytes)
    _set(span, attributes)
    if request.args:
        span.set_content("process.command_args", list(request.args))


def command_result(span: SpanHandle | None, result: SandboxResult) -> None:
    """How the command ended; the span fails unless it exited 0 within every limit."""
    if span is None or not span.recording:
        return
    if result.exit_code is not None:
        span.set_attribute("process.exit.code", result.exit_code)
    if result.signal is not None:
        span.set_attribute("effectagent.sandbox.signal", result.signal)
    usage = result.usage
    span.set_attribute("effectagent.sandbox.wall_s", usage.wall_seconds)
    if usage.cpu_seconds is not None:
        span.set_attribute("effectagent.sandbox.cpu_s", usage.cpu_seconds)
    if usage.peak_memory_bytes is not None:
        span.set_attribute("effectagent.sandbox.peak_memory_bytes", usage.peak_memory_bytes)
    if usage.peak_processes is not None:
        span.set_attribute("effectagent.sandbox.peak_processes", usage.peak_processes)
    span.set_attribute("effectagent.sandbox.timed_out", result.timed_out)
    span.set_attribute("effectagent.sandbox.output_truncated", result.output_truncated)
    span.set_attribute("effectagent.sandbox.artifacts", len(result.artifacts))
    hit = ",".join(sorted(result.limits_hit))
    if hit:
        span.set_attribute("effectagent.sandbox.limits_hit", hit)
    if result.ok:
        return
    if result.limits_hit:
        span.fail(f"limit:{min(result.limits_hit)}", f"limits hit: {hit}")
    elif result.signal is not None:
        span.fail("signal", f"killed by signal {result.signal}")
    else:
        span.fail("exit_code", f"exited with {result.exit_code}")


def code_started(
    span: SpanHandle, limits: CodeExecutionLimits, implementation: SandboxImplementation
) -> None:
    """What a code pass's span says from its start (never the source)."""
    if not span.recording:
        return
    attributes = _posture(implementation)
    attributes["effectagent.sandbox.operation"] = "code"
    attributes["effectagent.sandbox.limit.wall_clock_s"] = limits.wall_clock_seconds
    attributes["effectagent.sandbox.limit.source_bytes"] = limits.source_bytes
    attributes["effectagent.sandbox.limit.result_bytes"] = limits.result_bytes
    attributes["effectagent.sandbox.limit.output_bytes"] = limits.output_bytes
    attributes["effectagent.sandbox.limit.host_calls"] = limits.max_host_calls
    _limit(attributes, "cpu_s", limits.cpu_seconds)
    _limit(attributes, "memory_bytes", limits.memory_bytes)
    _limit(attributes, "max_processes", limits.max_processes)
    _set(span, attributes)


def code_result(span: SpanHandle, result: CodeExecutionResult) -> None:
    """How a code pass that gave a result went (a failed one raised: its type is the error)."""
    if span.recording:
        span.set_attribute("effectagent.sandbox.host_calls", result.host_calls)
        span.set_attribute("effectagent.sandbox.wall_s", result.duration)
        span.set_attribute("effectagent.sandbox.log_lines", len(result.logs))
        span.set_attribute("effectagent.sandbox.logs_truncated", result.logs_truncated)
