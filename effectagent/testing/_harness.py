"""Run one tool batch through the real engine and report what settled — the way to property-test
a toolkit's scheduling.

Design notes
------------
:func:`run_batch` builds a fresh runtime whose :class:`ScriptedModel` declares exactly the batch in
its first turn and answers in its second (an empty batch declares nothing: its one turn answers),
then runs it with ``open_runtime`` + ``runtime.stream`` (or ``runtime.run``) — the same code path
production uses, nothing mocked below the model. Every handler is wrapped: the wrapper notes when
it starts and ends on the Trio clock, whether the input it got was decoded (an instance of the
tool's attrs parameters type, or schema-valid JSON for a dynamic tool), how many handlers run at
once, and then plays the call's generated ``latency`` and ``behaviour``; a ``"success"`` call runs
the real handler.

What the report calls *outcomes* comes from the canonical log (``ToolCallSettled`` records, in the
order they were committed), not from events: that order is the one the spec promises (CAP-005).

Time is the Trio clock: run under ``trio.testing.MockClock(autojump_threshold=0)`` (pytest-trio's
``autojump_clock`` fixture, or :func:`run_batch_sync`) and a batch with seconds of latency runs in
milliseconds.
"""

from __future__ import annotations

import functools
import math
import typing
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Any, Literal, final

import attrs
import jsonschema
import trio
import trio.testing

from effectagent.ai import (
    Handler,
    LanguageModelService,
    ModelRequest,
    Tool,
    ToolCallContext,
    Toolkit,
    ToolMessage,
)
from effectagent.core import (
    Agent,
    AgentPolicy,
    EventBase,
    Record,
    ToolCallFailed,
    ToolCallPrepared,
    ToolCallSettled,
    ToolCallSucceeded,
    ToolOutcome,
)
from effectagent.effect import Layer, SchemaError
from effectagent.engine import RunResult, open_runtime, reduce_events

from ._checks import seconds, whole
from ._scripted import ScriptedModel, Turn
from ._strategies import PROBE_HANDLERS, PROBE_TOOLKIT, BatchSpec, CallSpec, ProbeFailed

__all__ = [
    "BatchReport",
    "HandlerTrace",
    "SimulatedDefect",
    "run_batch",
    "run_batch_sync",
]

CONVERSATION_ID = "conv_batch_harness"
PROMPT = "Call the tools, then answer."

Ending = Literal["returned", "raised", "cancelled"]


class SimulatedDefect(Exception):
    """What a ``"defect"`` call's handler raises: an undeclared error, so a ToolDefect."""


@attrs.frozen
class HandlerTrace:
    """One handler invocation, on the Trio clock relative to the start of :func:`run_batch`.

    ``ending`` is None only for a handler that never ended (a leak). ``decoded`` is False when the
    handler received something other than decoded parameters.
    """

    tool_call_id: str
    tool_name: str
    started_at: float
    finished_at: float | None
    ending: Ending | None
    decoded: bool


@final
class _Trace:
    __slots__ = ("call_id", "decoded", "ending", "finished_at", "started_at", "tool_name")

    def __init__(self, call_id: str, tool_name: str, started_at: float, decoded: bool) -> None:
        self.call_id = call_id
        self.tool_name = tool_name
        self.started_at = started_at
        self.decoded = decoded
        self.finished_at: float | None = None
        self.ending: Ending | None = None

    def freeze(self) -> HandlerTrace:
        return HandlerTrace(
            self.call_id,
            self.tool_name,
            self.started_at,
            self.finished_at,
            self.ending,
            self.decoded,
        )


@final
class _Tracker:
    __slots__ = ("live", "max_live", "origin", "traces")

    def __init__(self, origin: float) -> None:
        self.origin = origin
        self.live = 0
        self.max_live = 0
        self.traces: list[_Trace] = []

    def enter(self, call: ToolCallContext, decoded: bool) -> _Trace:
        trace = _Trace(call.tool_call_id, call.tool_name, self._now(), decoded)
        self.traces.append(trace)
        self.live += 1
        self.max_live = max(self.max_live, self.live)
        return trace

    def leave(self, trace: _Trace, ending: Ending) -> None:
        trace.finished_at = self._now()
        trace.ending = ending
        self.live -= 1

    def _now(self) -> float:
        return trio.current_time() - self.origin


@attrs.frozen
class BatchReport:
    """What happened when one :class:`BatchSpec` ran through the engine.

    ``events`` are the run's events as a consumer saw them (empty in ``"run"`` mode); ``result`` is
    the run's :class:`RunResult` (in ``"stream"`` mode, the reduction of ``events``; None when
    the consumer was cancelled in ``"run"`` mode) — a ``RunResult[None]``: the harness's agent
    has no output type, its answer is ``result.text``. ``records`` is the conversation's canonical
    log. ``max_concurrency`` is the most handlers that ever ran at once; ``live_handlers`` is how
    many were still running after the run ended (anything but 0 is a leak); ``permits_in_use`` is
    what the run's semaphore still held after it ended (``"stream"`` mode only). ``requests`` are
    the model requests the engine sent. ``cancelled`` is whether the consumer's cancellation took
    effect, and ``live_at_cancel`` how many handlers were running at that instant.
    """

    batch: BatchSpec
    tool_concurrency: int
    mode: Literal["stream", "run"]
    events: tuple[EventBase, ...]
    result: RunResult[None] | None
    records: tuple[Record, ...]
    traces: tuple[HandlerTrace, ...]
    max_concurrency: int
    live_handlers: int
    permits_in_use: int | None
    requests: tuple[ModelRequest, ...]
    cancelled: bool
    live_at_cancel: int | None

    @property
    def settlements(self) -> tuple[ToolCallSettled, ...]:
        """The ``ToolCallSettled`` records, in log (commit) order."""
        return tuple(r for r in self.records if isinstance(r, ToolCallSettled))

    @property
    def outcomes(self) -> tuple[ToolOutcome, ...]:
        """Every settled outcome, in commit order — declaration order if the engine is right."""
        return tuple(r.outcome for r in self.settlements)

    @property
    def settled_ids(self) -> tuple[str, ...]:
        """Tool-call IDs of the ``ToolCallSettled`` records, in commit order."""
        return tuple(r.tool_call_id for r in self.settlements)

    @property
    def prepared_ids(self) -> tuple[str, ...]:
        """Tool-call IDs of the ``ToolCallPrepared`` records, in log order."""
        return tuple(r.tool_call_id for r in self.records if isinstance(r, ToolCallPrepared))

    @property
    def completion_order(self) -> tuple[str, ...]:
        """Tool-call IDs in the order their outcome events were emitted (settle order)."""
        return tuple(
            e.tool_call_id for e in self.events if isinstance(e, ToolCallSucceeded | ToolCallFailed)
        )

    @property
    def status(self) -> str | None:
        """``result.status`` — completed, failed, interrupted, suspended — or None."""
        return self.result.status if self.result is not None else None

    @property
    def undecoded(self) -> tuple[str, ...]:
        """IDs of calls whose handler received undecoded input (empty if the engine is right)."""
        return tuple(t.tool_call_id for t in self.traces if not t.decoded)

    @property
    def results_seen_by_model(self) -> tuple[str, ...] | None:
        """Tool-call IDs of the tool results in the model request after the batch, in prompt
        order; None when the engine never asked the model again. An empty batch owes the model
        no results and its response is the answer: () once the model was asked at all."""
        if not self.batch.calls:
            return () if self.requests else None
        if len(self.requests) < 2:
            return None
        messages = self.requests[1].messages
        results = [m for m in messages if isinstance(m, ToolMessage)]
        return tuple(part.id for part in results[-1].content) if results else ()

    def outcome(self, tool_call_id: str) -> ToolOutcome:
        """The settled outcome of ``tool_call_id``; raises KeyError if it never settled."""
        for settlement in self.settlements:
            if settlement.tool_call_id == tool_call_id:
                return settlement.outcome
        raise KeyError(tool_call_id)

    def unexpected(self) -> tuple[tuple[CallSpec, ToolOutcome | None], ...]:
        """Calls whose settled kind is not their :attr:`CallSpec.expected_kind` (or that never
        settled). Meaningful for a run that was not interrupted."""
        settled = {s.tool_call_id: s.outcome for s in self.settlements}
        wrong = []
        for call in self.batch.calls:
            outcome = settled.get(call.tool_call_id)
            if outcome is None or outcome.kind != call.expected_kind:
                wrong.append((call, outcome))
        return tuple(wrong)


def _decoded_check(tool: Tool[Any, Any]) -> Callable[[Any, CallSpec | None], bool]:
    parameters = tool.parameters
    if parameters is not None:
        # A TypedDict decodes to a plain dict (isinstance refuses a TypedDict), dict[str, T] too.
        kind = (
            dict if typing.is_typeddict(parameters) else typing.get_origin(parameters) or parameters
        )
        return lambda params, spec: isinstance(params, kind)
    validator = jsonschema.Draft202012Validator(dict(tool.parameters_schema))

    def dynamic(params: Any, spec: CallSpec | None) -> bool:
        if isinstance(params, bytes) or (spec is not None and params == spec.arguments):
            return False  # the raw argument text itself
        return bool(validator.is_valid(params))

    return dynamic


async def _behave(
    tool: Tool[Any, Any],
    base: Handler | None,
    spec: CallSpec | None,
    params: Any,
    call: ToolCallContext,
) -> Any:
    if spec is not None:
        if spec.latency:
            await trio.sleep(spec.latency)
        if spec.behaviour == "declared-failure":
            raise spec.failure or ProbeFailed(f"generated failure of {call.tool_call_id}")
        if spec.behaviour == "defect":
            raise SimulatedDefect(f"generated defect in {call.tool_call_id}")
        if spec.behaviour == "hang":
            await trio.sleep_forever()
    if base is None:
        raise SimulatedDefect(f"no handler was given for tool {tool.name!r}")
    return await base(params, call)


def _instrument(
    tool: Tool[Any, Any],
    base: Handler | None,
    calls: Mapping[str, CallSpec],
    tracker: _Tracker,
) -> Handler:
    is_decoded = _decoded_check(tool)

    async def handler(params: Any, call: ToolCallContext) -> Any:
        spec = calls.get(call.tool_call_id)
        trace = tracker.enter(call, is_decoded(params, spec))
        ending: Ending = "raised"
        try:
            value = await _behave(tool, base, spec, params, call)
            ending = "returned"
            return value
        except trio.Cancelled:
            ending = "cancelled"
            raise
        finally:
            tracker.leave(trace, ending)

    return handler


def _base_handlers(
    kit: Toolkit, handlers: Mapping[Tool[Any, Any] | str, Handler] | None
) -> dict[str, Handler]:
    bases: dict[str, Handler] = {}
    for tool in kit:
        if PROBE_TOOLKIT.get(tool.name) is tool:
            bases[tool.name] = PROBE_HANDLERS[tool.name]
        elif tool.handler is not None:  # bound with the tool (Tool(handler=...), @tool)
            bases[tool.name] = tool.handler
    given: object = handlers  # checked at run time too: not every caller runs mypy
    if given is not None and not isinstance(given, Mapping):
        raise TypeError(
            "handlers= takes a mapping of tools (or their names) to handlers, got "
            f"{type(given).__name__}"
        )
    for key, handler in (handlers or {}).items():
        if not isinstance(key, str | Tool):
            raise TypeError(f"handlers= keys are tools or their names, got {key!r:.60}")
        if not callable(handler):
            raise TypeError(
                f"handlers= gives {key!r:.60} a {type(handler).__name__}, not a handler "
                "(an async function of the parameters and the call)"
            )
        name = key if isinstance(key, str) else key.name
        held = kit.get(name)
        if held is None or (not isinstance(key, str) and held is not key):
            raise ValueError(f"handlers= names {key!r}, which is not a tool of the toolkit")
        try:
            held.bind(handler)  # what Toolkit.handlers refuses: not async, not (params, call)
        except TypeError as exc:
            raise TypeError(f"handlers= gives a handler the engine refuses: {exc}") from None
        bases[name] = handler
    return bases


def _check_validity(kit: Toolkit, call: CallSpec) -> None:
    """``call.valid`` as the tool's own decoder says — a hand-made spec may say otherwise, and
    its expected outcome would then blame the engine for what the spec got wrong."""
    tool = kit.get(call.tool_name)
    if tool is None:
        return  # a valid call to a tool the toolkit lacks is refused by the caller
    try:
        tool.decode_arguments(call.arguments)
    except SchemaError as exc:
        if call.valid:
            raise ValueError(
                f"{call.tool_call_id}: marked valid, but its arguments do not decode for "
                f"{call.tool_name!r} ({exc}); give valid=False to expect invalid-input"
            ) from None
        return
    if not call.valid:
        raise ValueError(
            f"{call.tool_call_id}: marked invalid, but its arguments decode for "
            f"{call.tool_name!r}; give valid=True, or arguments the tool rejects"
        )


def _check_batch(
    kit: Toolkit, batch: BatchSpec, bases: Mapping[str, Handler], *, cancels: bool
) -> None:
    for call in batch.calls:
        _check_validity(kit, call)
    for call in batch.valid_calls:
        tool = kit.get(call.tool_name)
        if tool is None:
            raise ValueError(f"{call.tool_call_id}: valid call to {call.tool_name!r}, not a tool")
        if call.behaviour == "success" and call.tool_name not in bases:
            raise ValueError(
                f"{call.tool_call_id}: a 'success' call runs the real handler; pass "
                f"handlers={{{call.tool_name!r}: ...}}"
            )
        if (
            call.behaviour == "declared-failure"
            and call.failure is None
            and PROBE_TOOLKIT.get(tool.name) is not tool
        ):
            raise ValueError(f"{call.tool_call_id}: a 'declared-failure' call needs failure=")
        if (
            call.behaviour == "declared-failure"
            and call.failure is not None
            and not isinstance(call.failure, tool.failure)
        ):
            # The engine settles an undeclared error as a defect: expecting "failure" would blame it.
            declared = ", ".join(cls.__name__ for cls in tool.failure) or "none"
            raise ValueError(
                f"{call.tool_call_id}: its failure {type(call.failure).__name__} is not an error "
                f"tool {tool.name!r} declares (its failures: {declared}), so it would settle as "
                "a defect; give one of them, or behaviour='defect'"
            )
        if call.behaviour == "hang" and tool.timeout is None and not cancels:
            raise ValueError(
                f"{call.tool_call_id}: tool {tool.name!r} has no timeout, so a 'hang' call would "
                "never end; give the tool a timeout or cancel the run (cancel_at=)"
            )


@final
class _CancelAfterSteps(trio.abc.Instrument):
    """Cancels the consumer's scope once tasks other than the consumer (if given) took ``steps``
    steps."""

    def __init__(
        self, steps: int, scope: trio.CancelScope, consumer: trio.lowlevel.Task | None
    ) -> None:
        self._remaining = steps
        self._scope = scope
        self._consumer = consumer

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        if task is self._consumer or self._remaining <= 0:
            return
        self._remaining -= 1
        if self._remaining == 0:
            self._scope.cancel()


async def _aiter(events: Sequence[EventBase]) -> AsyncIterator[EventBase]:
    for event in events:
        yield event


async def run_batch(
    batch: BatchSpec,
    *,
    tool_concurrency: int,
    toolkit: Toolkit | None = None,
    handlers: Mapping[Tool[Any, Any] | str, Handler] | None = None,
    mode: Literal["stream", "run"] = "stream",
    cancel_at: float | None = None,
    cancel_after_steps: int | None = None,
    model_part_delay: float = 0.0,
    services: Layer | None = None,
    max_duration: float = 3600.0,
    answer: str = "done",
) -> BatchReport:
    """Run ``batch`` through a fresh runtime — one turn declaring it, one turn answering
    ``answer`` — with ``tool_concurrency`` permits, and report what settled. An empty batch is
    a response that declares no tool calls, which is the answer: its one turn answers
    ``answer`` (and the report's ``results_seen_by_model`` is ``()``).

    ``toolkit`` defaults to ``batch.toolkit``. ``handlers`` (by tool or name) are the real handlers
    a ``"success"`` call runs; the probe tools bring their own. ``services`` is merged into the
    layer (e.g. an approval service your tools need). ``mode`` picks ``runtime.stream`` (the
    consumer sees every event) or ``runtime.run``.

    To test interruption, ``cancel_at`` cancels the consumer's scope that many seconds after the
    start (Trio clock); ``cancel_after_steps`` cancels it once the run's tasks have taken that many
    scheduler steps (one step runs a task from one checkpoint to the next, so sweeping it reaches
    every point of the run, including those where no time passes; in ``"run"`` mode the run is
    driven by the calling task itself, so its steps count too). In ``"stream"`` mode the
    consumer then keeps draining the stream, so ``events`` ends with the run's terminal event.

    A hang needs the tool's ``timeout`` unless you cancel; the policy is generous otherwise (the run
    is bounded by ``max_duration``). Raises ValueError for a batch the toolkit cannot run (a
    call whose ``valid`` the tool's decoder contradicts among them, or a ``"declared-failure"``
    call whose ``failure`` the tool does not declare), and a
    TypeError or ValueError, before anything runs, for a ``batch`` that is not a
    :class:`BatchSpec`, a ``cancel_after_steps`` that is not a whole number ≥ 1, a
    ``cancel_at`` or ``model_part_delay`` that is not a finite number of seconds ≥ 0, an
    ``answer`` that is not a string, a ``toolkit`` that is not a Toolkit, ``services`` that are
    not a Layer, or ``handlers`` that are not a mapping of tools (or names) to handlers
    ``Toolkit.handlers`` would take (async functions of ``(params, call)``); a
    ``tool_concurrency`` or ``max_duration`` the agent's policy refuses is its ``TypeError`` or
    ``ValueError``, before anything runs too.

    Cancellation: cancelling the caller interrupts the run (it ends with RunInterrupted, no task
    left running) and ``trio.Cancelled`` propagates; no report is returned.
    """
    if not isinstance(batch, BatchSpec):
        raise TypeError(
            f"run_batch needs a BatchSpec, got {type(batch).__name__} (make one: BatchSpec([...]))"
        )
    kit = batch.toolkit if toolkit is None else toolkit
    if not isinstance(kit, Toolkit):
        raise TypeError(f"toolkit must be a Toolkit (Toolkit(*tools)), got {type(kit).__name__}")
    if services is not None and not isinstance(services, Layer):
        raise TypeError(f"services must be a Layer, got {type(services).__name__}")
    if mode not in ("stream", "run"):
        raise ValueError(f"mode must be 'stream' or 'run', got {mode!r}")
    if cancel_after_steps is not None:
        whole("cancel_after_steps", cancel_after_steps, minimum=1)
    if cancel_at is not None:
        seconds("cancel_at", cancel_at)
    seconds("model_part_delay", model_part_delay)
    if not isinstance(answer, str):
        raise TypeError(f"answer must be a str, got {answer!r}")
    bases = _base_handlers(kit, handlers)
    cancels = cancel_at is not None or cancel_after_steps is not None
    _check_batch(kit, batch, bases, cancels=cancels)
    tracker = _Tracker(trio.current_time())
    calls = {call.tool_call_id: call for call in batch.calls}
    bound: dict[Tool[Any, Any] | str, Handler] = {
        tool: _instrument(tool, bases.get(tool.name), calls, tracker) for tool in kit
    }
    declaring = Turn.tool_calls(*((c.tool_name, c.arguments, c.tool_call_id) for c in batch.calls))
    # A response declaring no tool calls is the answer: an empty batch's one turn answers.
    script = [declaring, Turn.text(answer)] if batch.calls else [Turn.text(answer)]
    model = ScriptedModel(script, part_delay=model_part_delay)
    layer = kit.handlers(bound) + Layer.succeed(LanguageModelService, model, name="ScriptedModel")
    if services is not None:
        layer = layer + services
    policy = AgentPolicy(
        max_turns=8,
        max_tool_calls=10 * len(batch) + 10,
        max_duration=max_duration,
        tool_concurrency=tool_concurrency,
        repeated_failure_limit=len(batch) + 10,
    )
    agent = Agent("batch-harness", instructions=PROMPT, policy=policy, toolkit=kit)
    consumer = trio.CancelScope(
        deadline=tracker.origin + cancel_at if cancel_at is not None else math.inf
    )
    stepper = (
        None
        if cancel_after_steps is None
        # ``runtime.run`` drives the run in this very task, so in "run" mode every step counts.
        else _CancelAfterSteps(
            cancel_after_steps,
            consumer,
            trio.lowlevel.current_task() if mode == "stream" else None,
        )
    )
    events: list[EventBase] = []
    result: RunResult[None] | None = None
    permits_in_use: int | None = None
    cancelled = False
    live_at_cancel: int | None = None

    async with open_runtime(layer, agents=[agent]) as runtime:
        if stepper is not None:
            trio.lowlevel.add_instrument(stepper)
        try:
            if mode == "stream":
                stream = runtime.stream(agent, PROMPT, conversation_id=CONVERSATION_ID, create=True)
                async with stream:
                    with consumer:
                        async for event in stream:
                            events.append(event)
                    if consumer.cancelled_caught:
                        cancelled, live_at_cancel = True, tracker.live
                        events.extend([event async for event in stream])
                permits_in_use = stream.permits_in_use
                if events:
                    result = await reduce_events(_aiter(events))
            else:
                with consumer:
                    result = await runtime.run(
                        agent, PROMPT, conversation_id=CONVERSATION_ID, create=True
                    )
                if consumer.cancelled_caught:
                    cancelled, live_at_cancel = True, tracker.live
        finally:
            if stepper is not None:
                trio.lowlevel.remove_instrument(stepper)
        # Read before the runtime closes: closing it cancels whatever the run left behind, so a
        # handler still running after the run ended would look like none.
        live_after = tracker.live
        entries = await runtime.log.entries(CONVERSATION_ID)

    return BatchReport(
        batch=batch,
        tool_concurrency=tool_concurrency,
        mode=mode,
        events=tuple(events),
        result=result,
        records=tuple(entry.record for entry in entries),
        traces=tuple(trace.freeze() for trace in tracker.traces),
        max_concurrency=tracker.max_live,
        live_handlers=live_after,
        permits_in_use=permits_in_use,
        requests=tuple(model.requests),
        cancelled=cancelled,
        live_at_cancel=live_at_cancel,
    )


def run_batch_sync(
    batch: BatchSpec,
    *,
    tool_concurrency: int,
    toolkit: Toolkit | None = None,
    handlers: Mapping[Tool[Any, Any] | str, Handler] | None = None,
    mode: Literal["stream", "run"] = "stream",
    cancel_at: float | None = None,
    cancel_after_steps: int | None = None,
    model_part_delay: float = 0.0,
    services: Layer | None = None,
    max_duration: float = 3600.0,
    answer: str = "done",
) -> BatchReport:
    """:func:`run_batch` in a fresh ``trio.run`` on ``MockClock(autojump_threshold=0)`` — for
    plain (non-async) tests and ``@given`` without pytest-trio. Takes the same keyword options."""
    clock = trio.testing.MockClock(autojump_threshold=0)
    run = functools.partial(
        run_batch,
        batch,
        tool_concurrency=tool_concurrency,
        toolkit=toolkit,
        handlers=handlers,
        mode=mode,
        cancel_at=cancel_at,
        cancel_after_steps=cancel_after_steps,
        model_part_delay=model_part_delay,
        services=services,
        max_duration=max_duration,
        answer=answer,
    )
    return trio.run(run, clock=clock)
