"""Shared toolkits, models and probes for the engine tests (outcomes, budgets, runtime, ...)."""

from __future__ import annotations

import logging
from collections.abc import (
    AsyncIterator,
    Awaitable,
    Callable,
    Iterable,
    Iterator,
    Mapping,
    MutableMapping,
    Sequence,
)
from contextlib import contextmanager
from typing import Any, TypeVar

import attrs
import structlog
import trio
from structlog.testing import capture_logs

from effectagent.ai import (
    LanguageModelService,
    ModelRequest,
    ModelResponse,
    ResponsePart,
    Tool,
    ToolCallContext,
    Toolkit,
    ToolMessage,
    ToolResultContent,
    generate,
)
from effectagent.core import (
    TERMINAL_EVENTS,
    Agent,
    AgentPolicy,
    ApprovalDecision,
    ApprovalRequest,
    CompactionCreated,
    EventBase,
    LogEntry,
    ToolCallSettled,
    ToolOutcome,
)
from effectagent.effect import Layer, TaggedError
from effectagent.engine import (
    LOGGER_NAME,
    ApprovalService,
    CompactionRequest,
    Runtime,
    open_runtime,
)
from effectagent.testing import ScriptedModel, Turn

E = TypeVar("E")

HIGHS = {"Oslo": 4.0, "Rome": 17.5}


@attrs.frozen
class Lookup:
    city: str


@attrs.frozen
class Forecast:
    city: str
    high_c: float


@attrs.frozen
class UnknownCity(TaggedError):
    city: str


def forecast_tool(name: str = "forecast", **options: Any) -> Tool[Lookup, Forecast]:
    """A fresh forecast tool (each test gets its own handler key)."""
    options.setdefault("failure", UnknownCity)
    return Tool(
        name,
        "Today's forecast for a city.",
        parameters=Lookup,
        success=Forecast,
        **options,
    )


def make_policy(**overrides: Any) -> AgentPolicy:
    """A roomy policy; override what the test is about."""
    fields: dict[str, Any] = {
        "max_turns": 8,
        "max_tool_calls": 16,
        "max_duration": 600.0,
        "tool_concurrency": 4,
    }
    fields.update(overrides)
    return AgentPolicy(**fields)


def make_agent(*tools: Tool[Any, Any], name: str = "weather", **kwargs: Any) -> Agent:
    """An agent over ``tools`` with :func:`make_policy` unless ``policy`` is given."""
    policy = kwargs.pop("policy", None) or make_policy()
    return Agent(name, "Answer with today's high.", policy, Toolkit(*tools), **kwargs)


class HandlerProbe:
    """Instruments handlers: who was called with what, how many run now, how many ever finished."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []
        self.contexts: list[ToolCallContext] = []
        self.active = 0
        self.peak = 0
        self.finished = 0
        self.cancelled = 0
        self.started = trio.Event()

    def wrap(
        self, handler: Callable[[Any, ToolCallContext], Awaitable[Any]]
    ) -> Callable[[Any, ToolCallContext], Awaitable[Any]]:
        """``handler`` with bookkeeping around every call (try/finally, so cancellation counts)."""

        async def probed(params: Any, call: ToolCallContext) -> Any:
            self.calls.append((call.tool_name, params))
            self.contexts.append(call)
            self.active += 1
            self.peak = max(self.peak, self.active)
            self.started.set()
            try:
                return await handler(params, call)
            except trio.Cancelled:
                self.cancelled += 1
                raise
            finally:
                self.active -= 1
                self.finished += 1

        return probed

    def forecast(self) -> Callable[[Any, ToolCallContext], Awaitable[Any]]:
        """A probed forecast handler: known cities succeed, others fail with UnknownCity."""

        async def handle(params: Lookup, call: ToolCallContext) -> Forecast:
            await trio.lowlevel.checkpoint()
            if params.city not in HIGHS:
                raise UnknownCity(params.city)
            return Forecast(params.city, HIGHS[params.city])

        return self.wrap(handle)

    def hanging(self) -> Callable[[Any, ToolCallContext], Awaitable[Any]]:
        """A probed handler that never returns (until cancelled)."""

        async def handle(params: Any, call: ToolCallContext) -> Any:
            await trio.sleep_forever()

        return self.wrap(handle)


class TrackingModel:
    """A LanguageModel delegating to a :class:`ScriptedModel`, keeping every stream it handed out
    (the ScriptedModel's own async generators) so a test can check they were closed."""

    def __init__(self, turns: Iterable[Turn] = (), **options: Any) -> None:
        self.inner = ScriptedModel(turns, **options)
        self.streams: list[Any] = []

    @property
    def requests(self) -> list[ModelRequest]:
        """Every request the model received, in order."""
        return self.inner.requests

    def stream(self, request: ModelRequest) -> AsyncIterator[ResponsePart]:
        agen = self.inner.stream(request)
        self.streams.append(agen)
        return agen

    async def generate(self, request: ModelRequest) -> ModelResponse:
        return await generate(self, request)

    def all_streams_closed(self) -> bool:
        """True when every stream handed out has finished or been closed."""
        return all(getattr(agen, "ag_frame", None) is None for agen in self.streams)

    def layer(self) -> Layer:
        """This model as the LanguageModel service."""
        return Layer.succeed(LanguageModelService, self, name="TrackingModel")


Decide = Callable[[ApprovalRequest], Awaitable[ApprovalDecision]]


class ScriptedApproval:
    """A test-controlled Approval service: ``decide`` answers each request; all are recorded."""

    def __init__(self, decide: Decide) -> None:
        self._decide = decide
        self.requests: list[ApprovalRequest] = []

    @staticmethod
    def answering(approved: bool, reason: str = "") -> ScriptedApproval:
        """Approve (or deny) everything at once."""

        async def decide(request: ApprovalRequest) -> ApprovalDecision:
            await trio.lowlevel.checkpoint()
            return ApprovalDecision(approved, reason, "test")

        return ScriptedApproval(decide)

    async def request(self, request: ApprovalRequest) -> ApprovalDecision:
        self.requests.append(request)
        return await self._decide(request)

    def layer(self) -> Layer:
        """This approver as the Approval service."""
        return Layer.succeed(ApprovalService, self, name="ScriptedApproval")


async def collect(events: AsyncIterator[EventBase]) -> list[EventBase]:
    """Every event of a stream."""
    return [event async for event in events]


async def run_events(runtime: Runtime, agent: Agent, text: str, **kwargs: Any) -> list[EventBase]:
    """Stream one run to its end and return its events."""
    async with runtime.stream(agent, text, **kwargs) as events:
        return await collect(events)


async def entries(runtime: Runtime, conversation_id: str) -> list[LogEntry]:
    """The conversation's canonical log."""
    return list(await runtime.log.entries(conversation_id))


def events_of(events: Sequence[EventBase], cls: type[E]) -> list[E]:
    """The events of one type."""
    return [e for e in events if isinstance(e, cls)]


def records_of(log: Sequence[LogEntry], cls: type[E]) -> list[E]:
    """The records of one type."""
    return [entry.record for entry in log if isinstance(entry.record, cls)]


def tool_messages(request: ModelRequest) -> list[ToolMessage]:
    """The tool-result messages of a model request."""
    return [m for m in request.messages if isinstance(m, ToolMessage)]


@attrs.frozen
class Shown:
    """A tool result as the model was shown it (``result`` is a JSON value)."""

    result: Any
    is_failure: bool


def shown(content: ToolResultContent) -> Shown:
    """A typed view of one tool result the model was shown."""
    return Shown(content.result, content.is_failure)


def results_by_id(request: ModelRequest) -> dict[str, Shown]:
    """Every tool result the request shows the model, by tool-call ID."""
    return {r.id: shown(r) for m in tool_messages(request) for r in m.content}


def assert_well_formed(events: Sequence[EventBase]) -> EventBase:
    """One run's events: seq 1..n without gaps, one identity, exactly one terminal event, last.
    Returns the terminal event."""
    assert events, "no events"
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    assert len({(e.run_id, e.conversation_id, e.agent) for e in events}) == 1
    terminals = [e for e in events if isinstance(e, TERMINAL_EVENTS)]
    assert len(terminals) == 1, terminals
    assert terminals[0] is events[-1]
    return terminals[0]


def same_error(actual: object, expected: BaseException) -> bool:
    """Tagged errors are exceptions (compared by identity): compare their type and fields."""
    return type(actual) is type(expected) and attrs.asdict(actual) == attrs.asdict(expected)  # type: ignore[arg-type]


def descendant_tasks(task: trio.lowlevel.Task) -> list[trio.lowlevel.Task]:
    """Every task below ``task`` in the task tree."""
    found: list[trio.lowlevel.Task] = []
    for nursery in task.child_nurseries:
        for child in nursery.child_tasks:
            found.append(child)
            found.extend(descendant_tasks(child))
    return found


Handlers = Mapping[Tool[Any, Any] | str, Callable[[Any, ToolCallContext], Awaitable[Any]]]


@attrs.frozen
class Ran:
    """What one run left behind: its events, its conversation's log and the model it talked to."""

    events: list[EventBase]
    log: list[LogEntry]
    model: TrackingModel

    @property
    def terminal(self) -> EventBase:
        """The terminal event (checked well formed)."""
        return assert_well_formed(self.events)

    def outcome(self, tool_call_id: str) -> ToolOutcome:
        """The committed outcome of one tool call."""
        (settled,) = [
            r for r in records_of(self.log, ToolCallSettled) if r.tool_call_id == tool_call_id
        ]
        return settled.outcome


async def run_script(
    agent: Agent,
    handlers: Handlers,
    turns: Iterable[Turn],
    *,
    extra: Layer | None = None,
    secrets: Sequence[str] = (),
    text: str = "How warm is it today?",
) -> Ran:
    """Open a runtime over a scripted model, stream one run of ``agent`` to its end."""
    model = TrackingModel(turns)
    layer = agent.toolkit.handlers(handlers) + model.layer()
    if extra is not None:
        layer = layer + extra
    async with open_runtime(layer, agents=[agent], secrets=secrets) as runtime:
        events = await run_events(runtime, agent, text)
        log = await entries(runtime, events[0].conversation_id)
    return Ran(events, log, model)


@contextmanager
def engine_logs(level: int) -> Iterator[list[MutableMapping[str, Any]]]:
    """What the engine logs at ``level`` and above, captured through structlog (the engine's
    logger level and structlog's configuration are restored after)."""
    logger = logging.getLogger(LOGGER_NAME)
    before = logger.level
    logger.setLevel(level)
    try:
        with capture_logs() as logs:
            yield logs
    finally:
        logger.setLevel(before)
        structlog.reset_defaults()


async def summarize_everything(request: CompactionRequest) -> list[CompactionCreated]:
    """A compaction that summarizes the whole log so far with the engine's summary call (the
    summary covers every entry of the request)."""
    summary = await request.summarize(request.messages[1:])
    return [
        CompactionCreated(
            conversation_id=request.conversation_id,
            run_id=request.run_id,
            turn=request.turn,
            kind="summarize",
            covers_through=request.entries[-1].seq,
            summary=summary,
            at=0.0,
        )
    ]
