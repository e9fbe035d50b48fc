"""What a handler knows of the call it serves: :class:`ToolCallContext` — the call's identity and
its run's, progress reports, the broker that calls other tools, durable steps — and what a handler
may raise or be given through it."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Protocol, TypeVar, overload

import attrs

from effectagent.effect import JSONValue, _fast_init

from ._durable import StepKey, StepStore, run_step

__all__ = ["InnerResult", "OutcomeUnknown", "ProgressReporter", "ToolBroker", "ToolCallContext"]

T = TypeVar("T")


class ProgressReporter(Protocol):
    """Where a handler's progress reports go (the engine emits ToolProgress events)."""

    async def __call__(self, data: JSONValue) -> None: ...


async def _no_progress(data: JSONValue) -> None:
    return None


class OutcomeUnknown(Exception):
    """Raised by a handler when it cannot know whether its call took effect — the connection to
    a remote server was lost after the request may have been sent, a server stopped answering.
    The engine settles the call as ``ToolUnknownOutcome`` with ``reason`` (redacted), so the model
    is told the side effect may or may not have happened instead of being told it failed; nothing
    is retried for it. Raised together with other errors (in a group), it is a defect like any
    undeclared exception."""

    def __init__(self, reason: str) -> None:
        if not isinstance(reason, str):
            raise TypeError(f"OutcomeUnknown: reason must be a str, got {type(reason).__name__}")
        super().__init__(reason)
        self.reason = reason


@attrs.frozen(slots=True)
class InnerResult:
    """What an inner call (:class:`ToolBroker`) gives back: ``ok`` and the result's encoded JSON
    — or, when it did not succeed, the outcome's envelope (``{"_tag": "ToolFailure" | …,
    "message": …}``: the framework's outcome tag and message, never internals)."""

    ok: bool
    value: JSONValue


class ToolBroker(Protocol):
    """Calls other tools on behalf of the call it was given to (a tool declaring
    ``inner_tools``, e.g. Code Mode). The engine's broker resolves the tool among the declared
    ones, decodes the arguments with the tool's own schema, authorizes, counts the call against
    the run's tool-call budget, runs the handler under the outer call's permit, and checks the
    result against its schema both ways. Inner calls write no events or records of their own;
    their counts and outcomes become the outer call's audit metadata."""

    async def call(self, tool_name: str, arguments: JSONValue) -> InnerResult:
        """Call ``tool_name`` with ``arguments`` (a JSON object).

        Cancellation: as the inner handler's; a cancelled call is not counted as settled.
        """
        ...

    def note(self, key: str, value: JSONValue) -> None:
        """Add ``key`` to the outer call's audit metadata (e.g. what executed the program)."""
        ...


@_fast_init
@attrs.frozen(slots=True)
class ToolCallContext:
    """What a handler (and a ``needs_approval`` function, an authorizer) knows about the call it
    serves: its identity, the run's, ``author`` — who started the run (its principal) — and,
    for a tool that declares ``inner_tools``, the ``broker`` that calls them.

    ``host`` is the runtime's handle on the run serving the call, opaque to handlers: what
    ``effectagent.engine.run_child`` (attached child runs, ``capabilities.subagents``) needs.
    None when the handler is called outside a runtime (a test calling it directly).
    ``steps`` is the runtime's store of durable steps' results (see :meth:`step`)."""

    tool_call_id: str
    tool_name: str
    run_id: str = ""
    conversation_id: str = ""
    agent_name: str = ""
    report: ProgressReporter = attrs.field(default=_no_progress, repr=False)
    author: str = ""
    broker: ToolBroker | None = attrs.field(default=None, repr=False)
    host: object = attrs.field(default=None, repr=False, eq=False)
    steps: StepStore | None = attrs.field(default=None, repr=False, eq=False)

    async def progress(self, data: JSONValue) -> None:
        """Report progress (a JSON value); it becomes a ToolProgress event.

        Cancellation: a checkpoint; if cancelled the report may not have been delivered.
        """
        await self.report(data)

    @overload
    async def step(
        self, name: str, version: int, fn: Callable[[], Awaitable[Any]], *, type: type[T]
    ) -> T: ...
    @overload
    async def step(self, name: str, version: int, fn: Callable[[], Awaitable[T]]) -> T: ...
    async def step(
        self,
        name: str,
        version: int,
        fn: Callable[[], Awaitable[Any]],
        *,
        type: object | None = None,
    ) -> Any:
        """Run ``fn`` once for this call as the durable step ``name`` (``version`` 1 or more),
        and return its result: when a result of this step is recorded already — the call runs
        again after its run was resumed, or a second time in the same call — that result, and
        ``fn`` does not run.

        The identity of a step is (conversation, run, tool call, ``name``, ``version``); change
        the version when what the step does changes. Only a success is recorded: a step whose
        ``fn`` raises records nothing and raises. The result is recorded as JSON: return a JSON
        value, or give ``type=`` to have the recorded value decoded into that type (the value
        returned is then always the decoded one; a result that does not fit it raises
        ``TypeError`` and records nothing, and so does a recorded result that no longer fits it:
        bump the version). Where results are kept is the runtime's
        ``StepStore`` (in memory by default, for as long as the run lasts); a store that
        refuses to record raises, and the call fails as a defect. A result is kept as the step
        returned it — the redactor does not see it (it is the handler's, not the model's): do
        not return a secret from a step you would not have kept. Called outside a runtime (a
        test calling a handler directly), ``fn`` just runs.

        Cancellation: a cancellation point while the store is read and written and while ``fn``
        runs; a step cancelled before its result was recorded records nothing, and runs again.
        """
        key = StepKey(self.conversation_id, self.run_id, self.tool_call_id, name, version)
        return await run_step(self.steps, key, fn, type)
