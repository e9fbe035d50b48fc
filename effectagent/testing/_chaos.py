"""Chaos: faults drawn at random around a cassette or a scripted model, and a checker for what a
user's agent must keep under them.

A :class:`FaultPlan` says what goes wrong: for each model call in order (retries included), a
:class:`ModelFault` or nothing — a rate limit with a retry-after, the model unavailable, the
stream cut after some parts, a malformed event after some parts; for each tool call in the order
handlers start, a :class:`ToolFault` or nothing — slow, hung, a defect. :func:`fault_plans` draws
them (hypothesis), :func:`with_faults` wraps a runtime's Layer so the plan happens, and
:func:`run_chaos` / :func:`run_chaos_sync` run an agent through it on Trio's mock clock and
return a :class:`ChaosReport`, whose :meth:`~ChaosReport.violations` are the invariants that did
not hold:

* every tool call the log prepared settles exactly once, and no call settles twice;
* the run ends with exactly one terminal event, the last one, and one terminal record of the
  same kind (a run that suspends for an approval decision has not ended: its log holds no
  terminal record, and an approval request without a decision for each call it waits for); the
  run's result says the same;
* within its budgets: turns (one grace turn besides), handler runs, and ``max_duration`` on the
  Trio clock — and it ends at all (a run still going long after its ``max_duration`` is cut off
  and reported);
* the log and the events agree: the settlements the events announced are the records' own, call
  for call and outcome for outcome (each announced outcome equal to the logged one, compared as
  :func:`canonical_records` compares records).

A fault that makes the model retry does not use up the wrapped model's exchange: the response
it spoiled is kept and served whole to the retry (a cassette or a script stays in step). A
malformed event is not retryable, so it ends the run with ``ModelFailed`` — as it does in
production. Kill points (a process killed mid-run, then resumed) are not drawn here: a plan acts
within one run (the durable runtime kills its own workers at its crash points, see its guide).
"""

from __future__ import annotations

import functools
import math
from collections import Counter
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import aclosing
from typing import TYPE_CHECKING, Any, Literal, final

import attrs
import trio

from effectagent.ai import (
    AiError,
    LanguageModel,
    LanguageModelService,
    ModelNetworkError,
    ModelRequest,
    ModelResponse,
    ModelUnavailable,
    RateLimited,
    ResponsePart,
    TextDeltaPart,
    Toolkit,
    generate,
    model_name_of,
)
from effectagent.core import (
    TERMINAL_EVENTS,
    Agent,
    AgentPolicy,
    EventBase,
    LogEntry,
    RunCompleted,
    RunCompletedRecord,
    RunFailed,
    RunFailedRecord,
    RunInterrupted,
    RunSuspended,
    ToolApprovalDecided,
    ToolApprovalRequested,
    ToolCallFailed,
    ToolCallPrepared,
    ToolCallSettled,
    ToolCallStarted,
    ToolCallSucceeded,
    TurnStarted,
)
from effectagent.effect import Context, Layer, ServiceKey
from effectagent.engine import RunResult, open_runtime, reduce_events

from ._checks import is_count, is_seconds, need_hypothesis, seconds
from ._harness import SimulatedDefect
from ._same_records import _Normalizer

if TYPE_CHECKING:
    from hypothesis.strategies import SearchStrategy

__all__ = [
    "ChaosReport",
    "FaultPlan",
    "ModelFault",
    "ToolFault",
    "fault_plans",
    "invariant_violations",
    "run_chaos",
    "run_chaos_sync",
    "with_faults",
]

ModelFaultKind = Literal["rate-limit", "unavailable", "cut", "malformed"]
ToolFaultKind = Literal["slow", "hang", "defect"]
#: In the order hypothesis shrinks towards (the first is the simplest).
MODEL_FAULT_KINDS: tuple[ModelFaultKind, ...] = ("rate-limit", "unavailable", "cut", "malformed")
TOOL_FAULT_KINDS: tuple[ToolFaultKind, ...] = ("slow", "hang", "defect")


def _kind_of(kinds: tuple[str, ...]) -> Callable[[object, attrs.Attribute[Any], object], None]:
    def check(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
        if value not in kinds:
            raise ValueError(
                f"{type(instance).__name__}.kind must be one of "
                f"{', '.join(map(repr, kinds))}, got {value!r}"
            )

    return check


def _seconds(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if (
        not isinstance(value, int | float)
        or isinstance(value, bool)
        or not math.isfinite(value)
        or value < 0
    ):
        raise ValueError(
            f"{type(instance).__name__}.{attribute.name} must be a finite number of seconds "
            f"≥ 0, got {value!r}"
        )


def _parts(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if type(value) is not int or value < 0:
        raise ValueError(
            f"{type(instance).__name__}.{attribute.name} must be a whole number ≥ 0, got {value!r}"
        )


@final
@attrs.frozen
class ModelFault:
    """One model call goes wrong: ``kind``, the ``retry_after`` a rate limit states, or how many
    parts of the real response go first (``after_parts``) before a cut or a malformed event.
    A kind not in :data:`MODEL_FAULT_KINDS`, or a negative or non-finite figure, is a
    ``ValueError`` (a misspelt kind would otherwise play some other fault)."""

    kind: ModelFaultKind = attrs.field(validator=_kind_of(MODEL_FAULT_KINDS))
    retry_after: float = attrs.field(default=0.0, validator=_seconds)
    after_parts: int = attrs.field(default=0, validator=_parts)

    def __str__(self) -> str:
        if self.kind == "rate-limit":
            return f"rate limited (retry after {self.retry_after:g} s)"
        if self.kind == "unavailable":
            return "model unavailable"
        what = "stream cut" if self.kind == "cut" else "malformed event"
        return f"{what} after {self.after_parts} part{'' if self.after_parts == 1 else 's'}"


@final
@attrs.frozen
class ToolFault:
    """One tool call goes wrong: ``slow`` (``seconds`` on the Trio clock before the handler
    runs), ``hang`` (never returns: its timeout or the run's deadline ends it), ``defect``
    (raises :class:`~effectagent.testing.SimulatedDefect`). A kind not in
    :data:`TOOL_FAULT_KINDS`, or negative or non-finite ``seconds``, is a ``ValueError``."""

    kind: ToolFaultKind = attrs.field(validator=_kind_of(TOOL_FAULT_KINDS))
    seconds: float = attrs.field(default=0.0, validator=_seconds)

    def __str__(self) -> str:
        return f"slow tool ({self.seconds:g} s)" if self.kind == "slow" else f"tool {self.kind}"


def _faults(field: str, value: object, kind: type[Any], other: type[Any], goes: str) -> None:
    """Raise a TypeError naming the :class:`FaultPlan` ``field`` unless ``value`` is a tuple
    (or list) of ``kind`` or None (a fault of the ``other`` kind ``goes`` elsewhere)."""
    if not isinstance(value, tuple | list):
        raise TypeError(
            f"FaultPlan.{field} must be a tuple (or list) of {kind.__name__} or None, got {value!r}"
        )
    for index, fault in enumerate(value):
        if fault is not None and not isinstance(fault, kind):
            hint = f" ({goes})" if isinstance(fault, other) else ""
            raise TypeError(
                f"FaultPlan.{field}[{index}] must be a {kind.__name__} or None, got {fault!r}{hint}"
            )


def _model_faults(value: Sequence[ModelFault | None]) -> tuple[ModelFault | None, ...]:
    _faults("model", value, ModelFault, ToolFault, "a tool fault goes in tools=")
    return tuple(value)


def _tool_faults(value: Sequence[ToolFault | None]) -> tuple[ToolFault | None, ...]:
    _faults("tools", value, ToolFault, ModelFault, "a model fault goes in model=")
    return tuple(value)


@final
@attrs.frozen
class FaultPlan:
    """What goes wrong in one run: ``model[i]`` for the i-th model call (retries count),
    ``tools[i]`` for the i-th handler to start; None (or past the end) is no fault.

    Each is a tuple (a list is taken as one) of that field's own fault type or None; anything
    else — a :class:`ToolFault` among the model faults, a kind's name instead of a fault — is a
    ``TypeError`` naming the field."""

    model: tuple[ModelFault | None, ...] = attrs.field(default=(), converter=_model_faults)
    tools: tuple[ToolFault | None, ...] = attrs.field(default=(), converter=_tool_faults)

    def __str__(self) -> str:
        items = [f"model call {i + 1}: {f}" for i, f in enumerate(self.model) if f is not None]
        items += [f"tool call {i + 1}: {f}" for i, f in enumerate(self.tools) if f is not None]
        return "; ".join(items) or "no faults"


def fault_plans(
    *,
    model_kinds: Sequence[ModelFaultKind] = MODEL_FAULT_KINDS,
    tool_kinds: Sequence[ToolFaultKind] = TOOL_FAULT_KINDS,
    max_model_calls: int = 6,
    max_tool_calls: int = 6,
    max_retry_after: float = 30.0,
    max_parts: int = 8,
    max_tool_delay: float = 60.0,
) -> SearchStrategy[FaultPlan]:
    """A hypothesis strategy of :class:`FaultPlan`: per model call and per tool call, nothing or
    a fault of the given kinds (empty kinds: no faults there). Plans shrink towards fewer
    faults, earlier calls, the first kind listed, zero seconds and zero parts — so a failing
    property is reported with a minimal fault sequence.

    The kinds are sequences of kind names (a lone string is refused), the seconds finite
    numbers ≥ 0 (drawn in whole seconds up to them), the counts whole numbers ≥ 0: anything
    else is hypothesis' ``InvalidArgument`` when the strategy is made. Without hypothesis
    installed it is a ``ModuleNotFoundError`` saying so."""
    need_hypothesis("fault_plans()")
    from hypothesis import strategies as st
    from hypothesis.errors import InvalidArgument

    for name, kinds, known in (
        ("model_kinds", model_kinds, MODEL_FAULT_KINDS),
        ("tool_kinds", tool_kinds, TOOL_FAULT_KINDS),
    ):
        if isinstance(kinds, str) or not isinstance(kinds, Sequence):
            raise InvalidArgument(
                f"{name} must be a sequence of kinds, not a {type(kinds).__name__}"
            )
        for kind in kinds:
            if kind not in known:
                raise InvalidArgument(
                    f"{name}: unknown kind {kind!r}; use {', '.join(map(repr, known))}"
                )
    for name, bound in (("max_retry_after", max_retry_after), ("max_tool_delay", max_tool_delay)):
        if not is_seconds(bound):
            raise InvalidArgument(f"{name} must be a finite number ≥ 0, got {bound!r}")
    for name, count in (
        ("max_model_calls", max_model_calls),
        ("max_tool_calls", max_tool_calls),
        ("max_parts", max_parts),
    ):
        if not is_count(count) or count < 0:
            raise InvalidArgument(f"{name} must be a whole number ≥ 0, got {count!r}")

    seconds = st.integers(0, int(max_retry_after)).map(float)
    model_fault = st.builds(
        ModelFault,
        st.sampled_from(tuple(model_kinds)),
        retry_after=seconds,
        after_parts=st.integers(0, max_parts),
    ).map(_simplest_model_fault)
    tool_fault = st.builds(
        ToolFault,
        st.sampled_from(tuple(tool_kinds)),
        seconds=st.integers(0, int(max_tool_delay)).map(float),
    ).map(lambda f: f if f.kind == "slow" else ToolFault(f.kind))
    models = (
        st.lists(st.none() | model_fault, max_size=max_model_calls).map(tuple)
        if model_kinds
        else st.just(())
    )
    tools = (
        st.lists(st.none() | tool_fault, max_size=max_tool_calls).map(tuple)
        if tool_kinds
        else st.just(())
    )
    return st.builds(FaultPlan, models, tools)


def _simplest_model_fault(fault: ModelFault) -> ModelFault:
    """Only the fields its kind reads (so equal faults compare equal)."""
    if fault.kind == "rate-limit":
        return ModelFault("rate-limit", retry_after=fault.retry_after)
    if fault.kind == "unavailable":
        return ModelFault("unavailable")
    return ModelFault(fault.kind, after_parts=fault.after_parts)


@final
class ChaoticModel:
    """A model serving ``model``'s responses through the plan's model faults."""

    def __init__(self, model: LanguageModel, faults: Sequence[ModelFault | None]) -> None:
        self._model = model
        self._faults = tuple(faults)
        self._calls = 0
        # A response a fault spoiled: served whole to the next call, its retry. Not matched by
        # the request: a retry's request may differ from the first (a status note's time left).
        self._kept: tuple[list[ResponsePart], AiError | None] | None = None
        self.native_output = bool(getattr(model, "native_output", False))
        self.model_name = model_name_of(model)  # priced as the model it wraps

    async def _whole(self, request: ModelRequest) -> tuple[list[ResponsePart], AiError | None]:
        kept = self._kept
        self._kept = None
        if kept is not None:
            return kept
        parts: list[ResponsePart] = []
        error: AiError | None = None
        async with aclosing(self._model.stream(request)) as stream:  # type: ignore[type-var]
            try:
                async for part in stream:
                    parts.append(part)
            except AiError as exc:
                error = exc
        return parts, error

    async def stream(self, request: ModelRequest) -> AsyncIterator[ResponsePart]:
        """The response, or the planned fault.

        Cancellation: as the wrapped model's stream (a faulted call first reads the whole
        response, cancellable there)."""
        index = self._calls
        self._calls += 1
        fault = self._faults[index] if index < len(self._faults) else None
        if fault is None:
            kept = self._kept
            if kept is not None:
                parts, error = await self._whole(request)
                for part in parts:
                    yield part
                if error is not None:
                    raise error
                return
            async with aclosing(self._model.stream(request)) as stream:  # type: ignore[type-var]
                async for part in stream:
                    yield part
            return
        if fault.kind == "rate-limit":
            raise RateLimited("rate limited (a chaos fault)", retry_after=fault.retry_after)
        if fault.kind == "unavailable":
            raise ModelUnavailable("the model is unavailable (a chaos fault)")
        parts, error = await self._whole(request)
        self._kept = (parts, error)
        for part in parts[: fault.after_parts]:
            yield part
        if fault.kind == "cut":
            raise ModelNetworkError("the stream was cut (a chaos fault)")
        yield TextDeltaPart("chaos-unopened-block", "?")  # a delta for a block never started

    async def generate(self, request: ModelRequest) -> ModelResponse:
        """The whole response, through the faults.

        Cancellation: as :meth:`stream`; the stream is closed on every exit."""
        return await generate(self, request)


def _chaotic_handler(handler: Any, faults: Sequence[ToolFault | None], count: list[int]) -> Any:
    async def chaotic(params: Any, call: Any) -> Any:
        index = count[0]
        count[0] += 1
        fault = faults[index] if index < len(faults) else None
        if fault is not None:
            if fault.kind == "defect":
                raise SimulatedDefect(f"a chaos fault in {call.tool_name}")
            if fault.kind == "hang":
                await trio.sleep_forever()
            await trio.sleep(fault.seconds)
        return await handler(params, call)

    return chaotic


def _check_chaos_arguments(layer: object, plan: object, toolkit: object = None) -> None:
    if not isinstance(layer, Layer):
        raise TypeError(
            f"layer must be a Layer (a model and the handlers), got {type(layer).__name__}"
        )
    if not isinstance(plan, FaultPlan):
        raise TypeError(
            f"plan must be a FaultPlan (FaultPlan(model=..., tools=...)), got {type(plan).__name__}"
        )
    if toolkit is not None and not isinstance(toolkit, Toolkit):
        raise TypeError(f"toolkit must be a Toolkit or None, got {type(toolkit).__name__}")


def with_faults(layer: Layer, plan: FaultPlan, toolkit: Toolkit | None = None) -> Layer:
    """``layer`` with ``plan``'s faults: its LanguageModel wrapped for the model faults, and the
    handlers of ``toolkit``'s tools it provides wrapped for the tool faults. A ``layer`` that
    is not a Layer, a ``plan`` that is not a :class:`FaultPlan` or a ``toolkit`` that is not a
    Toolkit (or None) is a ``TypeError``."""
    _check_chaos_arguments(layer, plan, toolkit)
    model_keys: list[ServiceKey[Any]] = (
        [LanguageModelService] if LanguageModelService in layer.provides else []
    )
    handler_keys: list[ServiceKey[Any]] = [
        k for k in (toolkit.handler_keys if toolkit else ()) if k in layer.provides
    ]
    if not model_keys and plan.model:
        raise ValueError(f"with_faults: the layer {layer.name!r} provides no LanguageModel")
    keys = [*model_keys, *handler_keys]
    if not keys:
        return layer

    async def build(context: Context, _: Any) -> Context:
        count = [0]
        services: dict[Any, Any] = {
            key: _chaotic_handler(context[key], plan.tools, count) for key in handler_keys
        }
        if model_keys:
            services[LanguageModelService] = ChaoticModel(context[LanguageModelService], plan.model)
        return Context(services)

    chaos = Layer.from_build("chaos", provides=keys, requires=keys, build=build)
    return chaos.provide_merge(layer)


def _settlement_key(record: Any) -> tuple[str, int, str]:
    return (record.run_id, record.turn, record.tool_call_id)


def _outcomes_differ(events: Sequence[EventBase], records: Sequence[Any]) -> list[str]:
    """A sentence for each call whose announced outcome is not the one its log record holds,
    compared in canonical form (values as the log keeps them, times left out). Only called when
    the events and the log name the same calls with the same kinds."""
    canonical = _Normalizer().value
    logged: dict[str, list[Any]] = {}
    for record in records:
        if isinstance(record, ToolCallSettled):
            logged.setdefault(record.tool_call_id, []).append(canonical(record.outcome))
    found: list[str] = []
    for event in events:
        if isinstance(event, ToolCallSucceeded | ToolCallFailed):
            said = canonical(event.outcome)
            held = logged.get(event.tool_call_id, [])
            if said in held:
                held.remove(said)
            else:
                found.append(
                    f"the events announced another {event.outcome.kind} outcome for tool call "
                    f"{event.tool_call_id!r} than the log holds"
                )
    return found


def invariant_violations(
    events: Sequence[EventBase],
    records: Sequence[Any],
    *,
    policy: AgentPolicy,
    elapsed: float,
    status: str | None = None,
) -> tuple[str, ...]:
    """The invariants (see the module notes) that one run's ``events``, log ``records``, Trio
    clock time ``elapsed`` and result ``status`` break, each as a sentence. Pure. A ``policy``
    that is not an ``AgentPolicy`` or an ``elapsed`` that is not a finite number of seconds ≥ 0
    is a ``TypeError`` or ``ValueError``."""
    if not isinstance(policy, AgentPolicy):
        raise TypeError(f"policy must be the agent's AgentPolicy, got {type(policy).__name__}")
    seconds("elapsed", elapsed)
    found: list[str] = []
    records = [r.record if isinstance(r, LogEntry) else r for r in records]
    terminals = [e for e in events if isinstance(e, TERMINAL_EVENTS)]
    if len(terminals) != 1:
        found.append(f"the run ended with {len(terminals)} terminal events, not one")
    elif events[-1] is not terminals[0]:
        found.append(f"events went on after the terminal {type(terminals[0]).__name__}")
    ends = [r for r in records if isinstance(r, RunCompletedRecord | RunFailedRecord)]
    if len(terminals) == 1 and isinstance(terminals[0], RunSuspended):
        # A suspended run has not ended: its log holds the requests it waits on, undecided.
        if ends:
            found.append(f"the run suspended but the log holds {len(ends)} terminal records")
        requested = {
            r.request.tool_call_id for r in records if isinstance(r, ToolApprovalRequested)
        }
        decided = {r.tool_call_id for r in records if isinstance(r, ToolApprovalDecided)}
        for call_id in terminals[0].tool_call_ids:
            if call_id not in requested:
                found.append(
                    f"the run suspended for tool call {call_id!r} but the log holds no approval "
                    "request for it"
                )
            elif call_id in decided:
                found.append(
                    f"the run suspended for tool call {call_id!r} but the log holds its decision"
                )
        if status is not None and status != "suspended":
            found.append(f"the result says {status} but the terminal event says suspended")
    elif len(ends) != 1:
        found.append(f"the log holds {len(ends)} terminal records, not one")
    elif len(terminals) == 1:
        event, end = terminals[0], ends[0]
        if isinstance(end, RunCompletedRecord):
            ending: type[EventBase] = RunCompleted
        else:
            ending = RunInterrupted if end.reason == "interrupted" else RunFailed
        agree = type(event) is ending
        if not agree:
            found.append(
                f"the terminal event is {type(event).__name__} but the log ends with "
                f"{type(end).__name__}"
            )
        expected = {RunCompleted: "completed", RunFailed: "failed", RunInterrupted: "interrupted"}
        said = expected.get(type(event))
        if status is not None and said is not None and status != said:
            found.append(f"the result says {status} but the terminal event says {said}")
    prepared = Counter(_settlement_key(r) for r in records if isinstance(r, ToolCallPrepared))
    settled = Counter(_settlement_key(r) for r in records if isinstance(r, ToolCallSettled))
    for key, times in sorted(settled.items()):
        if times > 1:
            found.append(f"tool call {key[2]!r} (turn {key[1]}) settled {times} times")
    for key in sorted(prepared):
        if key not in settled:
            found.append(f"tool call {key[2]!r} (turn {key[1]}) was prepared and never settled")
    announced = [
        (e.tool_call_id, e.outcome.kind)
        for e in events
        if isinstance(e, ToolCallSucceeded | ToolCallFailed)
    ]
    logged = [(r.tool_call_id, r.outcome.kind) for r in records if isinstance(r, ToolCallSettled)]
    if sorted(announced) != sorted(logged):
        found.append(
            f"the events announced the settlements {sorted(announced)} but the log holds "
            f"{sorted(logged)}"
        )
    else:  # the same calls and kinds: each outcome must be the log's own, not only its kind
        found.extend(_outcomes_differ(events, records))
    turns = sum(isinstance(e, TurnStarted) for e in events)
    if turns > policy.max_turns + 1:
        found.append(f"the run took {turns} turns; max_turns is {policy.max_turns} (+1 grace)")
    started = sum(isinstance(e, ToolCallStarted) for e in events)
    if started > policy.max_tool_calls:
        found.append(f"{started} tool calls ran; max_tool_calls is {policy.max_tool_calls}")
    if elapsed > policy.max_duration + 1e-6:
        found.append(
            f"the run took {elapsed:.1f} s on the Trio clock; max_duration is "
            f"{policy.max_duration:g} s"
        )
    return tuple(found)


@final
@attrs.frozen
class ChaosReport:
    """One chaos run: the plan, what the consumer saw (``events``), what the log holds
    (``records``: the conversation's log entries, each a ``LogEntry`` whose ``.record`` is the
    record), the result (None if the run never ended), and the Trio clock time it took."""

    plan: FaultPlan
    policy: AgentPolicy
    events: tuple[EventBase, ...]
    records: tuple[LogEntry, ...]
    result: RunResult[Any] | None
    elapsed: float

    @property
    def status(self) -> str | None:
        """The run's status (None if it never ended)."""
        return None if self.result is None else self.result.status

    @property
    def completed(self) -> bool:
        """Whether the run completed."""
        return self.status == "completed"

    def violations(self) -> tuple[str, ...]:
        """Every invariant this run broke, as sentences (empty: all held)."""
        found = invariant_violations(
            self.events, self.records, policy=self.policy, elapsed=self.elapsed, status=self.status
        )
        if self.result is None:
            found = (f"the run did not end within {self.elapsed:g} s on the Trio clock", *found)
        return found

    def assert_invariants(self) -> None:
        """Raise ``AssertionError`` listing the broken invariants, with the plan."""
        found = self.violations()
        if found:
            lines = "\n".join(f"  - {v}" for v in found)
            raise AssertionError(f"under the faults [{self.plan}]:\n{lines}")


PROMPT = "Go on."


async def _replayed(events: Sequence[EventBase]) -> AsyncIterator[EventBase]:
    for event in events:
        yield event


async def run_chaos(
    agent: Agent[Any],
    layer: Layer,
    plan: FaultPlan,
    *,
    prompt: str = PROMPT,
    secrets: Sequence[str] = (),
) -> ChaosReport:
    """Run ``agent`` on ``prompt`` once with ``layer`` (a model and the handlers: a cassette's
    ``ReplayModel.layer(path, check=False)``, or a scripted model made afresh) under ``plan``'s
    faults, consuming every event, and report it. The run is cut off at twice its
    ``max_duration`` (plus a minute) if it has not ended by then. Use Trio's mock clock
    (:func:`run_chaos_sync` does).

    An ``agent`` that is not an Agent, a ``layer`` that is not a Layer or a ``plan`` that is not
    a :class:`FaultPlan` is a ``TypeError`` before anything runs.

    Cancellation: cancelling the caller interrupts the run (it still writes its end)."""
    if not isinstance(agent, Agent):
        raise TypeError(f"agent must be an Agent, got {type(agent).__name__}")
    _check_chaos_arguments(layer, plan)
    policy = agent.policy
    limit = 2 * policy.max_duration + 60
    events: list[EventBase] = []
    result: RunResult[Any] | None = None
    chaotic = with_faults(layer, plan, agent.toolkit)
    start = trio.current_time()
    async with open_runtime(chaotic, agents=[agent], secrets=secrets) as runtime:
        conversation: str | None = None
        with trio.move_on_after(limit):
            async with runtime.stream(agent, prompt) as stream:
                conversation = stream.conversation_id
                async for event in stream:
                    events.append(event)
            result = await reduce_events(_replayed(events))
        elapsed = trio.current_time() - start
        entries = tuple(await runtime.log.entries(conversation)) if conversation else ()
    return ChaosReport(plan, policy, tuple(events), entries, result, elapsed)


def run_chaos_sync(
    agent: Agent[Any],
    layer: Layer,
    plan: FaultPlan,
    *,
    prompt: str = PROMPT,
    secrets: Sequence[str] = (),
) -> ChaosReport:
    """:func:`run_chaos` in a fresh ``trio.run`` on ``MockClock(autojump_threshold=0)``: slow
    and hung tools, retry-afters and deadlines take no real time."""
    clock = trio.testing.MockClock(autojump_threshold=0)
    run = functools.partial(run_chaos, agent, layer, plan, prompt=prompt, secrets=secrets)
    return trio.run(run, clock=clock)
