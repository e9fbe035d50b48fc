"""One Code Mode pass: the program runs in the executor, its tool calls go through the engine.

Design notes
------------
The handler gets the engine's broker in its call's context (the outer tool declares the selected
tools as ``inner_tools``) and serves the program's host calls from it, one :class:`BrokerHost`
per pass: every call is resolved, decoded with the tool's own schema, authorized, counted against
the run's tool-call budget and checked both ways by the engine — Code Mode adds only the pass's
own bounds (how many calls at once, how large one result may be). A failed call comes back to
the program as the framework's envelope: ``_tag`` is ``ToolFailure``, ``ToolInvalidInput``,
``ToolRejected`` or ``ToolDefect`` and ``message`` says why; a tool's declared error is kept
whole in ``error`` of a ``ToolFailure``.

What the program returns, prints or throws leaves through ``_egress`` (one budget, whole parts);
everything else stays in the pass. Messages about limits are written here from sizes, limits and
names. Text the executor reports (a syntax error, a thrown message it caught itself) is passed on
only while it is short: the executor cuts long text at its own bound, and a cut could keep part of
a secret. What the handler notes in the call's audit metadata is the executor's posture and how
the pass ended — never a value.

An executor failure that is not the program's doing (the executor crashed or cannot run here) is
raised as it is and becomes a ``ToolDefect``; a crash's reason is withheld, since it may hold the
program's raw output.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any, Final, final

import attrs
import trio

from effectagent.ai import ToolBroker, ToolCallContext
from effectagent.effect import JSONValue, checked_encoder, field_meta, trace_span
from sandbox import (
    CodeExecutionError,
    CodeExecutionLimits,
    CodeExecutionRequest,
    CodeExecutor,
    CodeTimeout,
    ExecutorCrashed,
    HostCallFailed,
    HostCallLimitExceeded,
    HostCallOutcome,
    HostCallSucceeded,
    HostCallTooLarge,
    InvalidProgram,
    JSONTooDeep,
    MemoryLimitExceeded,
    OutputLimitExceeded,
    ProgramThrew,
    ResultTooLarge,
    SourceTooLarge,
)

from ._egress import CodeModeOutput, Lines, failure_egress, json_size, success_egress
from ._errors import CodeModeFailed, FailureKind
from ._limits import CodeModeLimits
from ._plan import Namespace, calls
from ._program import Report, read_report, strip_fence, wrap, wrapper_bytes
from ._tracing import inner_call_ended, inner_call_started, pass_ended, pass_started

__all__ = ["FRAMEWORK_TAGS", "BrokerHost", "CodeModeInput", "PassRunner", "framework_envelope"]

#: The outcome tags a failed call rejects with inside the program.
FRAMEWORK_TAGS: Final = frozenset({"ToolFailure", "ToolInvalidInput", "ToolRejected", "ToolDefect"})

# Executor text longer than this may have been cut by the executor (it bounds such text at a few
# thousand characters): it is withheld rather than passed on.
_EXECUTOR_TEXT_CHARS: Final = 1024


@attrs.frozen
class CodeModeInput:
    """The Code Mode tool's parameters: the program's JavaScript source."""

    program: str = attrs.field(
        metadata=field_meta(
            description=(
                "JavaScript: one async arrow function with no parameters, e.g. "
                "`async () => { ... }`, that calls the declared namespaces and returns JSON."
            )
        )
    )


#: How the engine's defect for a result (or a declared error) its tool's type refuses begins;
#: each of its issues ends with the offending value (``…, got 'text'``).
_OUTPUT_VIOLATIONS: Final = ("result violates its schema", "failure violates its schema")
_QUOTED_VALUE: Final = re.compile(r", got [^\n]*")


def framework_envelope(envelope: JSONValue) -> dict[str, JSONValue]:
    """The envelope a failed call rejects with inside the program: the engine's own when it
    carries a framework tag; a tool's declared error (tagged with its own name) becomes a
    ``ToolFailure`` holding it as ``error``."""
    if isinstance(envelope, dict) and isinstance(tag := envelope.get("_tag"), str):
        message = envelope.get("message")
        if tag in FRAMEWORK_TAGS and isinstance(message, str):
            if tag == "ToolDefect" and message.startswith(_OUTPUT_VIOLATIONS):
                # What the tool returned or raised stays in the pass: where and what was
                # expected, not the value the check quotes.
                return {**envelope, "message": _QUOTED_VALUE.sub("", message)}
            return envelope
        text = message if isinstance(message, str) else tag
        return {"_tag": "ToolFailure", "message": text, "error": envelope}
    return {
        "_tag": "ToolDefect",
        "message": "the call ended without an outcome the program can read",
    }


@final
class BrokerHost:
    """The per-pass host: each of the program's calls is an inner call through ``broker``.

    ``methods`` maps each allowed tool name to how the program calls it (``weather.forecast``),
    for messages. At most ``limits.max_concurrent_calls`` calls run at once; a successful result
    larger than ``limits.call_result_bytes`` rejects its call with ``ToolRejected``.
    """

    __slots__ = ("_broker", "_limiter", "_methods", "_result_bytes", "calls")

    def __init__(
        self, broker: ToolBroker, methods: Mapping[str, str], limits: CodeModeLimits
    ) -> None:
        self._broker = broker
        self._methods = methods
        self._limiter = trio.Semaphore(limits.max_concurrent_calls)
        self._result_bytes = limits.call_result_bytes
        self.calls = 0  # how many calls the program made (for the pass's span)

    async def call(self, name: str, argument: JSONValue) -> HostCallOutcome:
        """Call tool ``name`` with ``argument`` through the broker.

        Cancellation: waits for a free slot, then as the broker's call (the executor cancels
        calls still running when the pass ends); ``trio.Cancelled`` propagates.
        """
        self.calls += 1
        with trace_span(f"execute_tool {name}") as span:
            inner_call_started(span, name, self.calls, argument)
            outcome = await self._call(name, argument)
            inner_call_ended(span, outcome)
            return outcome

    async def _call(self, name: str, argument: JSONValue) -> HostCallOutcome:
        async with self._limiter:
            result = await self._broker.call(name, argument)
        if not result.ok:
            return HostCallFailed(framework_envelope(result.value))
        size = json_size(result.value)
        if size > self._result_bytes:
            method = self._methods.get(name, name)
            message = (
                f"the result of {method} is {size} bytes, over the limit of "
                f"{self._result_bytes} bytes for one call"
            )
            return HostCallFailed({"_tag": "ToolRejected", "message": message})
        return HostCallSucceeded(result.value)


@final
class PassRunner:
    """The handler of one Code Mode tool: runs each call's program in a fresh pass of
    ``executor`` (see the module notes)."""

    __slots__ = ("_audit", "_executor", "_limits", "_methods", "_namespaces", "_request_limits")

    def __init__(
        self,
        namespaces: Sequence[Namespace],
        limits: CodeModeLimits,
        executor: CodeExecutor,
    ) -> None:
        self._namespaces = tuple(namespaces)
        self._limits = limits
        self._executor = executor
        self._request_limits: CodeExecutionLimits = limits.executor_limits(
            wrapper_bytes(namespaces, limits.egress_bytes)
        )
        self._methods = calls(namespaces)
        posture = executor.implementation
        self._audit: dict[str, JSONValue] = {
            "executor": posture.name,
            "isolation": posture.isolation.value,
            "security_boundary": posture.is_security_boundary,
        }

    @property
    def request_limits(self) -> CodeExecutionLimits:
        """The executor limits every pass asks for."""
        return self._request_limits

    async def __call__(self, params: CodeModeInput, call: ToolCallContext) -> CodeModeOutput:
        """Run ``params.program``; raises :class:`CodeModeFailed` when it gives no result.

        Cancellation: the pass is abandoned — its workload killed and every resource it holds
        released (by the executor) — and ``trio.Cancelled`` propagates.
        """
        broker = call.broker
        if broker is None:
            raise RuntimeError(
                "a Code Mode handler needs the engine's broker: run it as a tool of an agent"
            )
        for key, value in self._audit.items():
            broker.note(key, value)
        host = BrokerHost(broker, self._methods, self._limits)
        with trace_span(f"code_mode.pass {call.tool_name}") as span:
            pass_started(span, call, self._audit, self._limits, len(self._methods), params.program)
            try:
                output = await self._run(params.program, host)
            except CodeModeFailed as failure:
                broker.note("pass", failure.kind)
                pass_ended(span, failure.kind, host.calls)
                raise
            broker.note("pass", "ok")
            pass_ended(span, "ok", host.calls)
        return output

    async def _run(self, program: str, host: BrokerHost) -> CodeModeOutput:
        limits = self._limits
        source = strip_fence(program)
        if not source:
            # Wrapped as it is, an empty program reads as the wrapper's own syntax error.
            message = (
                "the program is not valid: it is empty; send one async function expression, "
                "such as `async () => { ... }`"
            )
            raise failure_egress("invalid-program", message, Lines(), limits.egress_bytes)
        size = len(source.encode("utf-8", "surrogatepass"))
        if size > limits.source_bytes:
            message = f"the program is {size} bytes, over the limit of {limits.source_bytes} bytes"
            raise failure_egress("source-too-large", message, Lines(), limits.egress_bytes)
        request = CodeExecutionRequest(
            wrap(self._namespaces, source, limits.egress_bytes),
            self._request_limits,
            tuple(self._methods),
        )
        try:
            result = await self._executor.execute(request, host)
        except CodeExecutionError as error:
            raise self._executor_failure(error) from None
        return self._output(read_report(result.value), Lines(result.logs, result.logs_truncated))

    def _output(self, report: Report | None, captured: Lines) -> CodeModeOutput:
        budget = self._limits.egress_bytes
        if report is None:
            reason = (
                "the program ended the function expression early: write exactly one async "
                "arrow function, such as `async () => { ... }`"
            )
            raise failure_egress("invalid-program", reason, captured, budget)
        if report.ending == "invalid":
            message = f"the program is not valid: {report.message}"
            raise failure_egress("invalid-program", message, captured, budget)
        if report.ending == "threw":
            name = report.name
            withheld = (
                f"the program threw {name} (its message is withheld: over the egress budget of "
                f"{budget} bytes)"
            )
            if report.message is None:
                raise failure_egress("threw", withheld, captured, budget)
            message = f"the program threw {name}: {report.message}"
            raise failure_egress("threw", message, captured, budget, withheld=withheld)
        output = success_egress(report.value, captured, budget, _encode_output)
        if isinstance(output, CodeModeFailed):
            raise output
        return output

    def _executor_failure(self, error: CodeExecutionError) -> BaseException:
        """The failure the model reads for ``error`` — with the console lines the program printed
        before it, under the egress budget — or the defect to raise."""
        limits = self._limits
        printed = Lines(error.logs, error.logs_truncated)

        def fail(kind: FailureKind, message: str) -> CodeModeFailed:
            return failure_egress(kind, message, printed, limits.egress_bytes)

        match error:
            case ProgramThrew(name=name, message=message):
                if len(message) > _EXECUTOR_TEXT_CHARS or len(name) > _EXECUTOR_TEXT_CHARS:
                    return fail("threw", "the program threw (its message is withheld)")
                return fail("threw", f"the program threw {name}: {message}")
            case InvalidProgram(reason=reason):
                if len(reason) > _EXECUTOR_TEXT_CHARS:
                    reason = "(the executor's reason is withheld: too long)"
                return fail("invalid-program", f"the program is not valid: {reason}")
            case SourceTooLarge():
                message = f"the program is over the limit of {limits.source_bytes} bytes"
                return fail("source-too-large", message)
            case CodeTimeout(limit="cpu", seconds=seconds):
                return fail("timeout", f"the program used more than {seconds:g} s of CPU")
            case CodeTimeout(seconds=seconds):
                return fail("timeout", f"the program ran for more than {seconds:g} s")
            case MemoryLimitExceeded(limit=limit):
                return fail("memory", f"the program needed more than {limit} bytes of memory")
            case OutputLimitExceeded(limit=limit):
                message = f"the program wrote more than {limit} bytes outside the console"
                return fail("output-too-large", message)
            case ResultTooLarge(size=size):
                message = (
                    f"the program's result is about {max(size - 4, 0)} bytes, over the egress "
                    f"budget of {limits.egress_bytes} bytes: return less — filter, aggregate or "
                    "summarize in the program"
                )
                return fail("result-too-large", message)
            case HostCallLimitExceeded(limit=limit):
                return fail("too-many-calls", f"the program made more than {limit} calls")
            case HostCallTooLarge(name=name, size=size, limit=limit):
                method = self._methods.get(name, "a tool")
                message = f"the input of a call to {method} is {size} bytes, over {limit}"
                return fail("call-too-large", message)
            case JSONTooDeep(side="host", name=name, limit=limit):
                method = self._methods.get(name, "a tool")
                message = f"the result of {method} nests deeper than {limit} levels"
                return fail("too-deep", message)
            case JSONTooDeep(value="argument", name=name, limit=limit):
                method = self._methods.get(name, "a tool")
                message = f"the input of a call to {method} nests deeper than {limit} levels"
                return fail("too-deep", message)
            case JSONTooDeep(limit=limit):
                message = f"the program's result nests deeper than {limit} levels"
                return fail("too-deep", message)
            case ExecutorCrashed():
                return ExecutorCrashed(
                    "the executor's process ended without an outcome (its reason is withheld: "
                    "it may hold the program's output)"
                )
        return error


_encode_output: Any = checked_encoder(CodeModeOutput)
