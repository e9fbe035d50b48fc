"""The run listener that turns run events into OpenTelemetry spans.

**The tree.** Each run is a span ``invoke_agent {agent}``, a child of the span that was current
where the run was started (``runtime.run`` / ``runtime.stream``: the ``RunStarted`` event is
emitted in the caller's context). Under it, a span ``turn`` per turn; under each turn, a span
``chat`` per model call (one per attempt: a retried call ends with an error and the next attempt
is a new span), a span ``execute_tool {tool}`` per tool call and a span ``approval {tool}`` per
approval request (a ``chat`` span, a call to the model's provider, is of kind client; these others
internal). A compaction is a span ``compaction {kind}`` (from the event's ``started_at`` to
its time) under the span of the turn it precedes, or under the run span when that turn has not
started yet; a budget warning is an event on the run span; tool progress an event on the tool
span.

**Subagents.** A child run (``capabilities.subagents``, ``run_child``) reaches the listener with
its own events, under its own run ID: its ``invoke_agent`` span is made a child of the span of
the tool call that started it — explicitly, from the parent's ``SubagentStarted``, whatever span
is current in the handler — and says so (``effectagent.subagent``, ``effectagent.parent.run.id``,
``effectagent.parent.tool_call.id``); the call's span names the child (``effectagent.subagent.*``:
agent, run ID, status, turns, tool calls). The ``SubagentEvent`` wrappers in the parent's stream
make no span: the child's events are seen once, as its own.

**Work inside a call.** While a tool handler runs, the layer's span starter is installed for the
effect core's tracing hook (``effectagent.effect.trace_span``): sandboxed commands and code
passes, Code Mode passes and their inner calls, MCP requests get spans of their own under the
call's (see ``_hooks``).

**When each span ends.** A run span with the run's terminal event. A turn span at its
``TurnCompleted``, with the finish reason of the turn's response as its
``gen_ai.response.finish_reasons`` (every turn the model answered has one, the final turn too; a
turn the run's end cut short ends with the terminal event). A ``chat``
span when the response is complete — the turn's first ``ToolCallDeclared``, its
``TurnCompleted`` or the terminal event, whichever comes first; its token usage is only known at
``TurnCompleted`` (or the terminal event), so it is ended then, with the earlier end time. A tool
span from ``ToolCallStarted`` to the call's settlement; a call that settles without ever running
(rejected, invalid input, denied) gets a span from its declaration to its settlement. An approval
span from ``ApprovalRequested`` to the call's start (approved) or settlement (refused). Every span
is ended on every exit: the terminal event ends whatever of the run is still open, with an error
status unless the run completed (or was suspended).

**What spans carry.** The GenAI semantic-convention names where they exist
(``gen_ai.operation.name``, ``gen_ai.agent.name``, ``gen_ai.conversation.id``,
``gen_ai.tool.name``, ``gen_ai.tool.call.id``, ``gen_ai.usage.*``, ``error.type``) and ours under
``effectagent.``: the version of this mapping, run and conversation IDs, turn, outcome kind,
retry count, failure category. Every span carries ``gen_ai.operation.name`` (``invoke_agent``,
``turn``, ``chat``, ``execute_tool``, ``approval``, ``compaction``), ``gen_ai.conversation.id`` and
``effectagent.run.id``; the run span also the agent, the version and the run's totals. Usage on a ``chat`` span is what the run recorded since the
previous turn completed (or, in a run resumed from its records, since the turn it finished from
them), less a compaction's summary calls — each of those is a ``chat`` span of its own under its
``compaction`` span (``CompactionPerformed.usage``), spanning the compaction — and less a
subagent's usage (``SubagentCompleted.usage``), which is on the child's own spans. Strings are cut to ``max_attribute_length``; events per span are capped. Model text
(``gen_ai.input.messages`` / ``gen_ai.output.messages``), tool arguments and results
(``gen_ai.tool.call.arguments`` / ``gen_ai.tool.call.result``) and a tool's declared error are
added only with ``include_content=True``, cut to ``max_content_length``. Everything comes from the
events, which the engine redacted; nothing else of a run is read.

**Failures.** A failed span has ``error.type`` — the failure's category: a tool outcome's kind, a
run error's or a model error's tag, ``interrupted`` — and an error status. The status's
description is that category again, or this module's own fixed wording ("the run ended before
this did"); a failure's *message* (a tool's defect, a provider's error, a run error) is content —
it may quote what a tool was given or raised — and describes the status only with
``include_content=True``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, MutableMapping
from contextlib import AbstractContextManager
from types import TracebackType
from typing import Any, final

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from effectagent.core import (
    ApprovalRequested,
    BudgetWarning,
    CompactionPerformed,
    EventBase,
    ModelRetrying,
    ModelStarted,
    Redactor,
    RunCompleted,
    RunFailed,
    RunInterrupted,
    RunStarted,
    RunSuspended,
    SubagentCompleted,
    SubagentStarted,
    TextDelta,
    ToolCallDeclared,
    ToolCallFailed,
    ToolCallStarted,
    ToolCallSucceeded,
    ToolOutcome,
    ToolProgress,
    TurnCompleted,
    TurnStarted,
    UsageTotals,
)
from effectagent.effect import AttributeValue, Layer, use_span_starter
from effectagent.engine import RunListenerService

from ._hooks import HookStarter
from ._logs import add_trace_ids, span_ids

__all__ = ["TELEMETRY_VERSION", "Telemetry"]

#: The version of this event-to-span mapping (span attribute ``effectagent.operation.version``).
TELEMETRY_VERSION = "effectagent-telemetry/1"

_SCOPE = "capabilities.telemetry"
_NO_USAGE = UsageTotals()
_ENDED_BY_RUN = "the run ended before this did"
_REMEMBERED_RUNS = 256


def _ns(at: float) -> int:
    return int(at * 1e9)


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: max(limit - 1, 0)] + "…"


def _json(value: Any, limit: int) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    return _cut(text, limit)


class _Run:
    """The open spans of one run (mutable; touched only by the run's own event hand-over)."""

    __slots__ = (
        "approvals",
        "conversation_id",
        "declared",
        "events",
        "model",
        "model_attempt",
        "model_end",
        "output",
        "parent",
        "run_id",
        "span",
        "starter",
        "tools",
        "turn",
        "turn_span",
        "usage",
    )

    def __init__(
        self, span: Span, parent: trace.SpanContext, run_id: str, conversation_id: str
    ) -> None:
        self.span = span
        self.parent = parent
        self.run_id = run_id  # both cut to the attribute bound, once
        self.conversation_id = conversation_id
        self.turn = 0
        self.turn_span: Span | None = None
        self.model: Span | None = None
        self.model_end: int | None = None
        self.model_attempt = 0
        self.tools: dict[str, Span] = {}
        self.approvals: dict[str, Span] = {}
        self.declared: dict[str, tuple[int, Any]] = {}
        self.usage = _NO_USAGE
        self.output: list[str] = []
        self.events: dict[int, int] = {}
        self.starter: HookStarter | None = None  # made at the run's first tool call


@final
class _CallContext:
    """Makes a tool call's span current in the call's context while its handler runs, with the
    run's span starter installed for the effect core's tracing hook."""

    __slots__ = ("_hooks", "_span", "_token")

    def __init__(self, span: Span | None, starter: HookStarter | None) -> None:
        self._span = span
        self._hooks = None if starter is None else use_span_starter(starter)
        self._token: object = None

    def __enter__(self) -> object:
        if self._span is not None:
            self._token = otel_context.attach(trace.set_span_in_context(self._span))
            if self._hooks is not None:
                self._hooks.__enter__()
        return self._span

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self._token is not None:
            if self._hooks is not None:
                self._hooks.__exit__(None, None, None)
            otel_context.detach(self._token)  # type: ignore[arg-type]
            self._token = None


@final
class Telemetry:
    """OpenTelemetry spans for every run of a runtime (see the module notes): the engine's
    ``RunListenerService`` (:meth:`layer`).

    ``tracer_provider`` is where spans go (None: the global provider, as configured when a span is
    made). ``include_content`` adds model text, tool arguments and results to the spans (off by
    default; still bounded and redacted). ``redactor`` (e.g. ``SecretRedactor`` of the secrets
    given to ``open_runtime``) redacts the content offered by what runs inside a handler — command
    arguments, an inner call's arguments, a resource URI — which the engine has not seen: such
    content is kept only with ``include_content`` *and* a redactor; with a redactor, the names
    and string attributes of those spans (a command's program name, an MCP server's identity)
    are redacted too, content kept or not. ``max_attribute_length`` bounds every other string
    attribute, ``max_content_length`` each content attribute, ``max_span_events`` the events a
    span takes (progress reports, compactions, budget warnings). ``request_model``, when given, is
    reported as ``gen_ai.request.model`` on model spans (the events do not name the model); a blank
    one is refused (``ValueError``), as is one that is not a str (``TypeError``).

    ``on_event`` runs in the task that emits each event, without waiting; it keeps the open spans
    of each run until the run's terminal event. The spans are ended with the events' own
    timestamps. One instance serves the runtimes of one Trio run (it is not locked for threads).
    """

    __slots__ = (
        "_children",
        "_ended",
        "_handlers",
        "_redact",
        "_runs",
        "_scrub",
        "_starter",
        "_tracer",
        "include_content",
        "max_attribute_length",
        "max_content_length",
        "max_span_events",
        "request_model",
    )

    def __init__(
        self,
        *,
        tracer_provider: trace.TracerProvider | None = None,
        include_content: bool = False,
        max_attribute_length: int = 256,
        max_content_length: int = 4096,
        max_span_events: int = 64,
        request_model: str | None = None,
        redactor: Redactor | None = None,
    ) -> None:
        for name, value in (
            ("max_attribute_length", max_attribute_length),
            ("max_content_length", max_content_length),
            ("max_span_events", max_span_events),
        ):
            if type(value) is not int or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        if type(include_content) is not bool:
            raise TypeError(f"include_content must be a bool, got {type(include_content).__name__}")
        if tracer_provider is not None and not isinstance(tracer_provider, trace.TracerProvider):
            raise TypeError(
                f"tracer_provider must be an OpenTelemetry TracerProvider, "
                f"got {type(tracer_provider).__name__}"
            )
        model: object = request_model
        if model is not None and not isinstance(model, str):
            raise TypeError(f"request_model must be a model's name (a str) or None, got {model!r}")
        if isinstance(model, str) and not model.strip():
            raise ValueError(
                f"request_model must be a model's name (a non-blank str), got {model!r}"
            )
        self.include_content = include_content
        self.max_attribute_length = max_attribute_length
        self.max_content_length = max_content_length
        self.max_span_events = max_span_events
        self.request_model = request_model
        if redactor is not None and not callable(getattr(redactor, "redact_text", None)):
            raise TypeError(f"redactor must be a Redactor, got {type(redactor).__name__}")
        self._tracer = trace.get_tracer(_SCOPE, TELEMETRY_VERSION, tracer_provider=tracer_provider)
        self._redact = redactor.redact_text if include_content and redactor is not None else None
        self._scrub = redactor.redact_text if redactor is not None else None
        self._starter = self._hook_starter({})
        self._runs: dict[str, _Run] = {}
        # Child runs announced by their parent (SubagentStarted) whose own RunStarted is to come:
        # child run ID -> the parent run and the ID of the call that starts it.
        self._children: dict[str, tuple[_Run, str]] = {}
        # The run spans of the runs that ended last, for the lines a run logs after its end.
        self._ended: dict[str, tuple[str, str]] = {}
        handlers: dict[type[EventBase], Callable[[Any], None]] = {
            RunStarted: self._run_started,
            TurnStarted: self._turn_started,
            ModelStarted: self._model_started,
            ModelRetrying: self._model_retrying,
            ToolCallDeclared: self._tool_declared,
            ToolCallStarted: self._tool_started,
            ToolProgress: self._tool_progress,
            ToolCallSucceeded: self._tool_settled,
            ToolCallFailed: self._tool_settled,
            ApprovalRequested: self._approval_requested,
            TurnCompleted: self._turn_completed,
            BudgetWarning: self._budget_warning,
            CompactionPerformed: self._compaction,
            SubagentStarted: self._subagent_started,
            SubagentCompleted: self._subagent_completed,
            RunCompleted: self._run_ended,
            RunFailed: self._run_ended,
            RunInterrupted: self._run_ended,
            RunSuspended: self._run_ended,
        }
        if include_content:  # otherwise a text delta costs one failed dictionary lookup
            handlers[TextDelta] = self._text
        self._handlers = handlers

    def layer(self) -> Layer:
        """This listener as the engine's ``RunListenerService``."""
        return Layer.succeed(RunListenerService, self, name="Telemetry")

    def activate(self) -> AbstractContextManager[None]:
        """A context manager installing this layer's span starter in the current context (for
        the effect core's tracing hook) while its block runs: what a sandbox, a code executor or an
        MCP connection does there gets spans, under the current span — for work done outside a
        run's tool calls (inside them, the layer installs it by itself). Enter and leave it in
        one task."""
        return use_span_starter(self._starter)

    def _hook_starter(self, base: dict[str, AttributeValue]) -> HookStarter:
        base["effectagent.operation.version"] = TELEMETRY_VERSION
        return HookStarter(
            self._tracer,
            base,
            self.max_attribute_length,
            self.max_content_length,
            self._redact,
            self._scrub,
        )

    @property
    def open_runs(self) -> int:
        """How many runs have spans open now (0 once every run has ended)."""
        return len(self._runs)

    # ---- the RunListener protocol --------------------------------------------------------------

    def on_event(self, event: EventBase) -> None:
        """Update the spans of ``event``'s run. Never waits; an event of a run this listener did
        not see start is ignored. If updating fails (the tracer raised), every span of the run
        still open is ended with an error status, the run is forgotten, and the error is raised
        for the engine to log (it then stops calling this listener for the run)."""
        handler = self._handlers.get(type(event))
        if handler is not None:
            try:
                handler(event)
            except Exception:
                # The engine logs this and stops telling us about the run: end what it has open.
                self._abandon(event.run_id)
                raise

    def call_context(self, run_id: str, tool_call_id: str) -> AbstractContextManager[object]:
        """A context manager making the call's span current (attached to the OpenTelemetry context
        of the call's task, detached on exit) — spans the handler makes nest under it — with the
        run's span starter installed for the effect core's tracing hook, so what the handler runs
        (a sandboxed command, a Code Mode pass, an MCP request) gets spans of its own. Entering
        it gives the span (None for a call it has no span for; nothing is installed then)."""
        run = self._runs.get(run_id)
        if run is None:
            return _CallContext(None, None)
        starter = run.starter
        if starter is None:
            run.starter = starter = self._hook_starter(
                {"gen_ai.conversation.id": run.conversation_id, "effectagent.run.id": run.run_id}
            )
        return _CallContext(run.tools.get(tool_call_id), starter)

    # ---- logs ------------------------------------------------------------------------------------

    def log_processor(
        self, logger: Any, method_name: str, event_dict: MutableMapping[str, Any]
    ) -> MutableMapping[str, Any]:
        """A structlog processor adding ``trace_id`` and ``span_id``: inside a tool handler, the
        current span (the call's, or one the handler made); on a line of a run (bound with
        ``run_id``, as the engine's are) outside its calls, the run's open turn span or run span
        (its run span for a while after it ended: the last runs' are kept); otherwise the
        current span, if any. Fields already set are kept."""
        if "trace_id" in event_dict:
            return event_dict
        run_id = event_dict.get("run_id")
        if not isinstance(run_id, str):
            return add_trace_ids(logger, method_name, event_dict)
        run = self._runs.get(run_id)
        if run is None and (ended := self._ended.get(run_id)) is not None:
            event_dict["trace_id"], event_dict["span_id"] = ended
            return event_dict
        if run is not None and (own := run.span.get_span_context()).is_valid:
            current = trace.get_current_span().get_span_context()
            inside = (
                current.is_valid
                and current.trace_id == own.trace_id
                and current.span_id != run.parent.span_id
            )
            if not inside:
                span = run.turn_span or run.span
                event_dict["trace_id"], event_dict["span_id"] = span_ids(span.get_span_context())
                return event_dict
        return add_trace_ids(logger, method_name, event_dict)

    # ---- helpers ---------------------------------------------------------------------------------

    def _abandon(self, run_id: str) -> None:
        run = self._runs.pop(run_id, None)
        if run is None:
            return
        spans = [*run.approvals.values(), *run.tools.values(), run.model, run.turn_span, run.span]
        for span in spans:
            if span is None:
                continue
            try:
                span.set_status(Status(StatusCode.ERROR, "telemetry failed for this run"))
                span.end()
            except Exception:  # each span is ended if it can be: go on with the next
                continue

    def _start(
        self,
        name: str,
        parent: Span,
        at: float,
        attributes: dict[str, Any],
        kind: SpanKind = SpanKind.INTERNAL,
    ) -> Span:
        return self._tracer.start_span(
            _cut(name, self.max_attribute_length),
            context=trace.set_span_in_context(parent),
            kind=kind,
            attributes=attributes,
            start_time=_ns(at),
        )

    def _base(self, operation: str, run: _Run) -> dict[str, Any]:
        """The attributes every span under a run starts with (the run span has more)."""
        return {
            "gen_ai.operation.name": operation,
            "gen_ai.conversation.id": run.conversation_id,
            "effectagent.run.id": run.run_id,
        }

    def _add_event(
        self, run: _Run, span: Span, name: str, at: float, attributes: dict[str, Any]
    ) -> None:
        key = id(span)
        count = run.events.get(key, 0)
        if count < self.max_span_events:
            run.events[key] = count + 1
            span.add_event(name, attributes, _ns(at))

    def _fail(
        self, span: Span, category: str, description: str = "", *, fixed: bool = False
    ) -> None:
        """``error.type`` (the category: a failure kind, an error's tag) and an error status.

        The status describes the failure with ``description`` — a message of the run, the model
        or a tool, already redacted by the engine — only with ``include_content``; otherwise with
        the category alone, as a message may hold what content-off promises never to export.
        A ``fixed`` description is this module's own wording, never anyone's message."""
        limit = self.max_attribute_length
        span.set_attribute("error.type", _cut(category, limit))
        span.set_attribute("effectagent.failure.category", _cut(category, limit))
        shown = description if description and (fixed or self.include_content) else category
        span.set_status(Status(StatusCode.ERROR, _cut(shown, limit)))

    def _usage(self, span: Span, usage: UsageTotals) -> None:
        span.set_attributes(
            {
                "gen_ai.usage.input_tokens": usage.input_tokens,
                "gen_ai.usage.output_tokens": usage.output_tokens,
                "gen_ai.usage.cache_read.input_tokens": usage.cache_read_input_tokens,
                "gen_ai.usage.cache_creation.input_tokens": usage.cache_write_input_tokens,
                "effectagent.usage.reasoning_tokens": usage.reasoning_tokens,
            }
        )
        # The cost only when every call had a price: never a made-up figure.
        if usage.unpriced_calls:
            span.set_attribute("effectagent.usage.unpriced_calls", usage.unpriced_calls)
        else:
            span.set_attribute("effectagent.usage.cost_micros", usage.cost_micros)

    def _response_done(self, run: _Run, at: float) -> None:
        if run.model is not None and run.model_end is None:
            run.model_end = _ns(at)

    def _end_model(self, run: _Run, at: float, usage: UsageTotals | None) -> None:
        span = run.model
        if span is None:
            # A turn with no model call of this execution (one a resumed run finishes from its
            # records): its totals are the baseline of the next call's usage.
            if usage is not None:
                run.usage = usage
            return
        if usage is not None:
            before = run.usage
            self._usage(
                span,
                UsageTotals(
                    usage.input_tokens - before.input_tokens,
                    usage.output_tokens - before.output_tokens,
                    usage.cache_read_input_tokens - before.cache_read_input_tokens,
                    usage.cache_write_input_tokens - before.cache_write_input_tokens,
                    usage.reasoning_tokens - before.reasoning_tokens,
                    cost_micros=usage.cost_micros - before.cost_micros,
                    unpriced_calls=usage.unpriced_calls - before.unpriced_calls,
                ),
            )
            run.usage = usage
        if self.include_content and run.output:
            text = _cut("".join(run.output), self.max_content_length)
            message = [{"role": "assistant", "parts": [{"type": "text", "content": text}]}]
            span.set_attribute("gen_ai.output.messages", _json(message, self.max_content_length))
        run.output.clear()
        span.end(run.model_end if run.model_end is not None else _ns(at))
        run.model = None
        run.model_end = None

    def _outcome(self, span: Span, outcome: ToolOutcome) -> None:
        span.set_attribute("effectagent.outcome.kind", outcome.kind)
        if outcome.kind == "success":
            if self.include_content:
                result = _json(getattr(outcome, "result", None), self.max_content_length)
                span.set_attribute("gen_ai.tool.call.result", result)
            return
        reason = getattr(outcome, "reason", None) or getattr(outcome, "message", None)
        self._fail(span, outcome.kind, reason if isinstance(reason, str) else "")
        if self.include_content and outcome.kind == "failure":
            error = _json(getattr(outcome, "error", None), self.max_content_length)
            span.set_attribute("gen_ai.tool.call.result", error)

    # ---- events ----------------------------------------------------------------------------------

    def _run_started(self, event: RunStarted) -> None:
        limit = self.max_attribute_length
        run_id, conversation_id = _cut(event.run_id, limit), _cut(event.conversation_id, limit)
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": _cut(event.agent, limit),
            "gen_ai.conversation.id": conversation_id,
            "effectagent.operation.version": TELEMETRY_VERSION,
            "effectagent.run.id": run_id,
            "effectagent.conversation.id": conversation_id,
        }
        if self.include_content:
            text = _cut(event.input, self.max_content_length)
            message = [{"role": "user", "parts": [{"type": "text", "content": text}]}]
            attributes["gen_ai.input.messages"] = _json(message, self.max_content_length)
        caller = otel_context.get_current()
        child = self._children.pop(event.run_id, None)
        if child is not None:  # a subagent: under the call that started it, whatever is current
            parent_run, call_id = child
            attributes["effectagent.subagent"] = True
            attributes["effectagent.parent.run.id"] = parent_run.run_id
            attributes["effectagent.parent.tool_call.id"] = _cut(call_id, limit)
            call_span = parent_run.tools.get(call_id)
            if call_span is not None:
                caller = trace.set_span_in_context(call_span, caller)
        span = self._tracer.start_span(
            _cut(f"invoke_agent {event.agent}", self.max_attribute_length),
            context=caller,
            kind=SpanKind.INTERNAL,
            attributes=attributes,
            start_time=_ns(event.at),
        )
        parent = trace.get_current_span(caller).get_span_context()
        self._runs[event.run_id] = _Run(span, parent, run_id, conversation_id)

    def _turn_started(self, event: TurnStarted) -> None:
        run = self._runs.get(event.run_id)
        if run is None:
            return
        # The previous turn never completed (the run's time ran out while its batch ran): its
        # model call and its span end here, and the new turn's first call is not a retry.
        self._response_done(run, event.at)
        self._end_model(run, event.at, None)
        run.model_attempt = 0
        if run.turn_span is not None:
            run.events.pop(id(run.turn_span), None)
            run.turn_span.end(_ns(event.at))
        run.turn = event.turn
        attributes = self._base("turn", run)
        attributes["effectagent.turn"] = event.turn
        attributes["effectagent.turn.grace"] = event.grace
        run.turn_span = self._start("turn", run.span, event.at, attributes)

    def _model_started(self, event: ModelStarted) -> None:
        run = self._runs.get(event.run_id)
        if run is None:
            return
        self._end_model(run, event.at, None)
        run.model_attempt += 1
        attributes = self._base("chat", run)
        attributes["effectagent.turn"] = event.turn
        attributes["effectagent.model.retries"] = run.model_attempt - 1
        name = "chat"
        if self.request_model is not None:
            model = _cut(self.request_model, self.max_attribute_length)
            attributes["gen_ai.request.model"] = model
            name = f"chat {model}"
        # A call to a model provider: a client span, as the GenAI conventions have it.
        run.model = self._start(
            name, run.turn_span or run.span, event.at, attributes, SpanKind.CLIENT
        )

    def _model_retrying(self, event: ModelRetrying) -> None:
        run = self._runs.get(event.run_id)
        if run is None or run.model is None:
            return
        run.model.set_attribute("effectagent.model.retry_delay_s", event.delay)
        self._fail(run.model, event.error_tag, f"{event.error_tag}: {event.message}")
        run.output.clear()  # a failed attempt's text was provisional
        self._end_model(run, event.at, None)

    def _text(self, event: TextDelta) -> None:
        run = self._runs.get(event.run_id)
        if run is None:
            return
        if sum(map(len, run.output)) < self.max_content_length:
            run.output.append(event.text)

    def _tool_declared(self, event: ToolCallDeclared) -> None:
        run = self._runs.get(event.run_id)
        if run is None:
            return
        self._response_done(run, event.at)
        run.declared[event.tool_call_id] = (
            _ns(event.at),
            event.arguments if self.include_content else None,
        )

    def _tool_attributes(
        self, event: ToolCallStarted | ToolCallSucceeded | ToolCallFailed, run: _Run
    ) -> dict[str, Any]:
        limit = self.max_attribute_length
        attributes = self._base("execute_tool", run)
        attributes["gen_ai.tool.name"] = _cut(event.tool_name, limit)
        attributes["gen_ai.tool.call.id"] = _cut(event.tool_call_id, limit)
        attributes["effectagent.turn"] = event.turn
        declared = run.declared.get(event.tool_call_id)
        if self.include_content and declared is not None and declared[1] is not None:
            arguments = _json(declared[1], self.max_content_length)
            attributes["gen_ai.tool.call.arguments"] = arguments
        return attributes

    def _tool_span(
        self, event: ToolCallStarted | ToolCallSucceeded | ToolCallFailed, run: _Run, at: float
    ) -> Span:
        return self._start(
            f"execute_tool {event.tool_name}",
            run.turn_span or run.span,
            at,
            self._tool_attributes(event, run),
        )

    def _settle_approval(self, run: _Run, call_id: str, decision: str, at: float) -> None:
        """End the call's approval span: "approved" (it starts), "rejected" (denied, timed out)
        or, with an error status, the kind of outcome that settled it undecided."""
        span = run.approvals.pop(call_id, None)
        if span is not None:
            span.set_attribute("effectagent.approval.decision", decision)
            if decision not in ("approved", "rejected"):
                self._fail(span, decision, "settled without a decision", fixed=True)
            span.end(_ns(at))

    def _tool_started(self, event: ToolCallStarted) -> None:
        run = self._runs.get(event.run_id)
        if run is None:
            return
        self._settle_approval(run, event.tool_call_id, "approved", event.at)
        run.tools[event.tool_call_id] = self._tool_span(event, run, event.at)

    def _tool_progress(self, event: ToolProgress) -> None:
        run = self._runs.get(event.run_id)
        span = None if run is None else run.tools.get(event.tool_call_id)
        if run is None or span is None:
            return
        attributes: dict[str, Any] = {}
        if self.include_content:
            attributes["effectagent.tool.progress"] = _json(event.data, self.max_content_length)
        self._add_event(run, span, "effectagent.tool.progress", event.at, attributes)

    def _tool_settled(self, event: ToolCallSucceeded | ToolCallFailed) -> None:
        run = self._runs.get(event.run_id)
        if run is None:
            return
        call_id = event.tool_call_id
        self._settle_approval(run, call_id, event.outcome.kind, event.at)
        span = run.tools.pop(call_id, None)
        declared = run.declared.pop(call_id, None)
        if span is None:  # it never ran: its span covers the wait from its declaration
            start = event.at if declared is None else declared[0] / 1e9
            span = self._tool_span(event, run, start)
        self._outcome(span, event.outcome)
        run.events.pop(id(span), None)
        span.end(_ns(event.at))

    def _approval_requested(self, event: ApprovalRequested) -> None:
        run = self._runs.get(event.run_id)
        if run is None:
            return
        limit = self.max_attribute_length
        request = event.request
        attributes = self._base("approval", run)
        attributes["gen_ai.tool.name"] = _cut(event.tool_name, limit)
        attributes["gen_ai.tool.call.id"] = _cut(event.tool_call_id, limit)
        attributes["effectagent.turn"] = event.turn
        attributes["effectagent.approval.risk"] = _cut(str(request.risk), limit)
        attributes["effectagent.approval.denial_is_terminal"] = request.denial_is_terminal
        if self.include_content:
            content = self.max_content_length
            attributes["effectagent.approval.summary"] = _cut(request.summary, content)
            attributes["effectagent.approval.input_preview"] = _json(request.input_preview, content)
        run.approvals[event.tool_call_id] = self._start(
            f"approval {event.tool_name}", run.turn_span or run.span, event.at, attributes
        )

    def _turn_completed(self, event: TurnCompleted) -> None:
        run = self._runs.get(event.run_id)
        if run is None:
            return
        self._response_done(run, event.at)
        self._end_model(run, event.at, event.usage)
        span = run.turn_span
        if span is not None:
            # A fixed word of the engine's, as the run's own: never cut.
            span.set_attribute("gen_ai.response.finish_reasons", (event.finish_reason,))
            run.events.pop(id(span), None)
            span.end(_ns(event.at))
            run.turn_span = None
        run.model_attempt = 0

    def _budget_warning(self, event: BudgetWarning) -> None:
        run = self._runs.get(event.run_id)
        if run is None:
            return
        attributes = {
            "effectagent.budget.dimension": _cut(event.dimension, self.max_attribute_length),
            "effectagent.budget.used": float(event.used),
            "effectagent.budget.limit": float(event.limit),
        }
        self._add_event(run, run.span, "effectagent.budget.warning", event.at, attributes)

    def _compaction(self, event: CompactionPerformed) -> None:
        run = self._runs.get(event.run_id)
        if run is None:
            return
        parent = run.turn_span if run.turn_span is not None and run.turn == event.turn else run.span
        kind = _cut(event.kind, self.max_attribute_length)
        attributes = self._base("compaction", run)
        attributes["effectagent.turn"] = event.turn
        attributes["effectagent.compaction.kind"] = kind
        attributes["effectagent.compaction.covers_through"] = event.covers_through
        attributes["effectagent.compaction.tokens_before"] = event.tokens_before
        attributes["effectagent.compaction.tokens_after"] = event.tokens_after
        started = event.started_at if 0 < event.started_at <= event.at else event.at
        span = self._start(f"compaction {kind}", parent, started, attributes)
        for delta in event.usage:  # each summary call: a chat span of its own, in the compaction
            chat = self._base("chat", run)
            chat["effectagent.turn"] = event.turn
            name = "chat"
            if event.model is not None:
                model = _cut(event.model, self.max_attribute_length)
                chat["gen_ai.request.model"] = model
                name = f"chat {model}"
            summary = self._start(name, span, started, chat, SpanKind.CLIENT)
            own = _NO_USAGE.add(delta)
            self._usage(summary, own)
            summary.end(_ns(event.at))
            # Counted by the run before its next turn completes: not that turn's chat span's.
            run.usage = run.usage.add(delta)
        span.end(_ns(event.at))

    def _subagent_started(self, event: SubagentStarted) -> None:
        run = self._runs.get(event.run_id)
        if run is None:
            return
        self._children[event.child_run_id] = (run, event.tool_call_id)
        span = run.tools.get(event.tool_call_id)
        if span is not None:
            limit = self.max_attribute_length
            span.set_attribute("effectagent.subagent.agent", _cut(event.child_agent, limit))
            span.set_attribute("effectagent.subagent.run.id", _cut(event.child_run_id, limit))

    def _subagent_completed(self, event: SubagentCompleted) -> None:
        self._children.pop(event.child_run_id, None)  # a child that never started
        run = self._runs.get(event.run_id)
        if run is not None:
            # The run's totals include the child's usage from now on: it is on the child's own
            # chat spans, not on the parent's next one.
            run.usage = run.usage.including(event.usage)
        span = None if run is None else run.tools.get(event.tool_call_id)
        if span is not None:
            span.set_attribute("effectagent.subagent.status", event.status)
            span.set_attribute("effectagent.subagent.turns", event.turns)
            span.set_attribute("effectagent.subagent.tool_calls", event.tool_calls)

    def _run_ended(self, event: RunCompleted | RunFailed | RunInterrupted | RunSuspended) -> None:
        run = self._runs.pop(event.run_id, None)
        if run is None:
            return
        at = event.at
        limit = self.max_attribute_length
        span = run.span
        category, description = "", ""
        match event:
            case RunCompleted():
                outcome = "completed"
                span.set_attribute("effectagent.run.finish_reason", event.finish_reason)
                span.set_attribute("effectagent.run.turns", event.turns)
                span.set_attribute("effectagent.run.tool_calls", event.tool_calls)
                if event.exhausted is not None:
                    span.set_attribute("effectagent.run.exhausted", _cut(event.exhausted, limit))
                if self.include_content:
                    text = _cut(event.text, self.max_content_length)
                    answer = [{"role": "assistant", "parts": [{"type": "text", "content": text}]}]
                    output = _json(answer, self.max_content_length)
                    span.set_attribute("gen_ai.output.messages", output)
            case RunFailed():
                outcome, category = "failed", event.error.tag
                reason = getattr(event.error, "message", None)
                description = f"{category}: {reason}" if isinstance(reason, str) else ""
            case RunInterrupted():
                outcome = category = "interrupted"
                description = f"interrupted: {event.reason}"
            case RunSuspended():
                outcome = "suspended"
                for call_id in event.tool_call_ids:  # the approvals the run now waits for
                    waiting = run.approvals.get(call_id)
                    if waiting is not None:
                        waiting.set_attribute("effectagent.approval.decision", "suspended")
                if self.include_content:
                    reason = _cut(event.reason, self.max_content_length)
                    span.set_attribute("effectagent.run.suspended_reason", reason)
        span.set_attribute("effectagent.outcome.kind", outcome)
        if category:
            self._fail(span, category, description)
            if run.model is not None and run.model_end is None:  # the response never completed
                self._fail(run.model, category, description)
        usage = getattr(event, "usage", None)
        self._response_done(run, at)
        self._end_model(run, at, usage)
        for call_id, open_span in [*run.approvals.items(), *run.tools.items()]:
            if category:
                self._fail(open_span, category, _ENDED_BY_RUN, fixed=True)
            open_span.set_attribute("gen_ai.tool.call.id", _cut(call_id, limit))
            open_span.end(_ns(at))
        run.approvals.clear()
        run.tools.clear()
        if run.turn_span is not None:
            if category:
                self._fail(run.turn_span, category, _ENDED_BY_RUN, fixed=True)
            run.turn_span.end(_ns(at))
            run.turn_span = None
        if usage is not None:
            self._usage(span, usage)
        span.end(_ns(at))
        if (own := span.get_span_context()).is_valid:  # a non-recording provider's are not
            ended = self._ended
            ended[event.run_id] = span_ids(own)
            if len(ended) > _REMEMBERED_RUNS:
                del ended[next(iter(ended))]
