"""Attached child runs: a run that a tool call of another run starts, inside that call.

A child is an ordinary run of another agent with three things fixed by its parent:

* **Where it runs.** In the parent's tool handler, in the handler's own task — so it belongs to
  the parent's scope: interrupting the parent (or its call's timeout) interrupts the child, which
  writes its interruption like any run, and no child outlives the call that started it.
* **What it may do.** A fresh conversation holding only what the parent passes (the text and
  context items it is given); the parent's principal (``author``), so authorization and approval
  apply to it as to the parent; tools that are a subset of the parent's own for the turn (and tool
  sources that are a subset of the parent's); budgets leased from what the parent has left (the
  batch's ``Allowance``: a ``BudgetLease``, settled once when the child ends — its grace turn is
  part of its grant); and tool-call permits from the parent's one pool (the call that started the
  child lends its permit to the child's calls first — the child's own ``tool_concurrency`` adds no
  permits). A child may start children of its own only when the one that started it allowed that
  (``nested``).
* **What the parent sees.** ``SubagentStarted``, each child event wrapped in ``SubagentEvent``,
  then ``SubagentCompleted``, in the parent's stream; the child's usage added to the parent's
  totals; and the child's run and conversation IDs, status and usage in the audit metadata of the
  parent call's ``ToolCallSettled`` record (key ``subagent``), noted through the call's own host
  and returned with its outcome. Nothing here changes the parent run's state.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Generic, Literal, final, overload

import attrs
import trio
from typing_extensions import TypeVar

from effectagent.ai import Tool, ToolCallContext
from effectagent.core import (
    Agent,
    ChildBudget,
    ContextItem,
    DefaultInput,
    EventBase,
    RunError,
    SubagentCompleted,
    SubagentEvent,
    SubagentStarted,
    UsageTotals,
)
from effectagent.effect import MissingServicesError

from ._authoring import RunInput, prepare_input
from ._budget import unpriced
from ._driver import RunDriver
from ._handover import RunReducer
from ._host import CallHost
from ._ids import new_id
from ._io import RunIO
from ._seams import RunEnding

__all__ = ["ChildRunRefused", "ChildRunResult", "run_child"]

#: The output type of a child's agent (``Agent[O]``), carried to its result (as ``RunResult``'s).
OutputT = TypeVar("OutputT", covariant=True, default=Any)
T = TypeVar("T")
I = TypeVar("I")  # noqa: E741  # the child's input: the agent's ``input`` type, or its text


class ChildRunRefused(Exception):
    """A child run could not start; ``reason`` says why (nothing ran, nothing was charged)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


#: How a child run ends: a child's run never suspends (its approvals cannot wait durably).
ChildEnding = Literal["completed", "failed", "interrupted"]


def _child_ending(ending: RunEnding) -> ChildEnding:
    if ending == "completed":
        return "completed"
    if ending == "failed":
        return "failed"
    return "interrupted"


@attrs.frozen
class ChildRunResult(Generic[OutputT]):
    """How a child run ended. ``status`` is "completed" or "failed" — or "interrupted", which
    only a child whose caller was not cancelled could return (an interrupted parent's cancellation
    propagates instead of a result). ``output`` is the answer decoded into the child
    agent's ``output`` type (None without one, and for a run that did not complete: a child of an
    ``Agent[O]`` gives a ``ChildRunResult[O]``); ``error`` the failed run's error. ``turns`` and
    ``tool_calls`` include its own children's; ``budget`` is what it was granted."""

    run_id: str
    conversation_id: str
    agent: str
    status: ChildEnding
    text: str
    output: OutputT | None
    error: RunError | None
    usage: UsageTotals
    turns: int
    tool_calls: int
    budget: ChildBudget


# An agent without ``input=`` takes a str; one with ``input=Query`` a Query (its JSON too, at run
# time, as ``Runtime.run`` takes it: mypy is held to the typed value, as it is there).
@overload
async def run_child(
    call: ToolCallContext,
    agent: Agent[T, DefaultInput],
    text: str,
    *,
    budget: ChildBudget,
    context: Sequence[ContextItem] = (),
    nested: bool = False,
) -> ChildRunResult[T]: ...
@overload
async def run_child(
    call: ToolCallContext,
    agent: Agent[T, I],
    text: I,
    *,
    budget: ChildBudget,
    context: Sequence[ContextItem] = (),
    nested: bool = False,
) -> ChildRunResult[T]: ...
async def run_child(
    call: ToolCallContext,
    agent: Agent[T, Any],
    text: object,
    *,
    budget: ChildBudget,
    context: Sequence[ContextItem] = (),
    nested: bool = False,
) -> ChildRunResult[T]:
    """Run ``agent`` on ``text`` as a child of the run serving ``call``, inside that call (see
    the module notes), and return how it ended. For an agent with a typed input
    (``Agent.input``), ``text`` is its input: a value of that type, or its JSON (a dict, or JSON
    text), checked and rendered as ``Runtime.run`` does (``ValueError``/``TypeError`` before
    anything runs).

    ``context`` items are recorded in the child's fresh conversation before ``text`` — the only
    context it gets. ``nested`` lets the child start children of its own. Raises
    :class:`ChildRunRefused` — before anything runs — when ``call`` is not served by a runtime's
    tool call (a handler called directly, or an inner call of a tool that calls tools), when the
    run serving it is itself a child that was not allowed to delegate, when ``agent`` has a tool
    or tool source the parent does not have this turn, when the runtime lacks a service
    ``agent`` needs, or when the parent has no turns, tool calls, tokens or time left to give;
    ``TypeError`` / ``ValueError`` for a text that is not a str, or is empty or only spaces, and
    ``TypeError`` for a ``budget`` that is not a ``ChildBudget``, a ``context`` that is not a
    sequence of ``ContextItem`` or a ``nested`` that is not a bool.

    Cancellation: the child runs in the caller's task; cancelling it (the parent interrupted, the
    call's timeout) interrupts the child, which writes its interruption (shielded), and then the
    cancellation propagates. ``SubagentCompleted`` is emitted and the budgets settled on every
    exit.
    """
    host = call.host
    if not isinstance(host, CallHost):
        raise ChildRunRefused(
            "a child run starts only inside a tool call a runtime is running (not from a handler "
            "called directly, nor from an inner call of a tool that calls tools)"
        )
    if not isinstance(agent, Agent):
        raise TypeError(f"run_child needs an Agent, got {type(agent).__name__}")
    if agent.input is None and not isinstance(text, str):
        raise TypeError(f"run_child's text must be a str, got {type(text).__name__}")
    if agent.input is None and isinstance(text, str) and not text.strip():
        raise ValueError("run_child's text must not be empty or only spaces")
    # A typed input: decoded, checked and rendered (an error redacted as the parent redacts).
    run_input = prepare_input(agent, text, host.scope.io.redact_text)
    if not isinstance(budget, ChildBudget):
        raise TypeError(f"run_child's budget must be a ChildBudget, got {type(budget).__name__}")
    given: object = context  # checked: not every caller runs mypy
    if isinstance(given, str | bytes) or not isinstance(given, Sequence):
        raise TypeError(
            "run_child's context must be a sequence of ContextItem (a one-item list for one), "
            f"got {type(given).__name__}"
        )
    items = tuple(context)
    for item in items:
        if not isinstance(item, ContextItem):
            raise TypeError(f"run_child's context must hold ContextItem, got {type(item).__name__}")
    if not isinstance(nested, bool):
        raise TypeError(f"run_child's nested must be a bool, got {type(nested).__name__}")
    result: ChildRunResult[Any] = await _ChildRun(host, call, agent).run(
        run_input, budget, items, nested
    )
    return result  # its output was decoded into ``agent.output``: a ``T``


@final
class _ChildSink:
    """The child's events: reduced for its result, and forwarded to the parent's events."""

    __slots__ = ("child_run_id", "parent", "reducer", "tool_call_id", "turn")

    def __init__(self, parent: RunIO, turn: int, tool_call_id: str) -> None:
        self.parent = parent
        self.turn = turn
        self.tool_call_id = tool_call_id
        self.child_run_id = ""
        self.reducer = RunReducer()

    def feed(self, event: EventBase) -> None:
        self.reducer.feed(event)
        self.parent.emit(
            SubagentEvent,
            turn=self.turn,
            tool_call_id=self.tool_call_id,
            child_run_id=self.child_run_id,
            event=event,
        )


def _holds(given: Tool[Any, Any] | None, tool: Tool[Any, Any]) -> bool:
    """Whether the parent's ``given`` tool is the child's ``tool``: the very same, or the copy
    a run's ``RunAllowance(approval="always")`` made of it (sharing its handler key) to ask
    before every call of the parent's."""
    return given is tool or (given is not None and given.handler_key is tool.handler_key)


@final
class _ChildRun:
    """One child run started by ``call``, through its ``host``."""

    __slots__ = ("agent", "call", "host")

    def __init__(self, host: CallHost, call: ToolCallContext, agent: Agent) -> None:
        self.host = host
        self.call = call
        self.agent = agent

    def _refusal(self) -> str | None:
        """Why this child may not run (authority), or None."""
        scope, agent = self.host.scope, self.agent
        parent = scope.agent
        if scope.depth > 0 and not scope.may_delegate:
            return (
                f"agent {parent.name!r} runs as a subagent that was not allowed to "
                "delegate (nested delegation must be declared by the delegation that started it)"
            )
        toolkit = scope.toolkit
        extra = [tool.name for tool in agent.toolkit if not _holds(toolkit.get(tool.name), tool)]
        if extra:
            return (
                f"subagent {agent.name!r} has tools its parent {parent.name!r} does not: "
                f"{', '.join(sorted(extra))} (a subagent's tools must be a subset of its parent's)"
            )
        sources = [key.name for key in agent.tool_sources if key not in parent.tool_sources]
        if sources:
            return (
                f"subagent {agent.name!r} has tool sources its parent does not: "
                f"{', '.join(sorted(sources))}"
            )
        return None

    async def run(
        self, run_input: RunInput, want: ChildBudget, context: tuple[ContextItem, ...], nested: bool
    ) -> ChildRunResult:
        host, agent, call = self.host, self.agent, self.call
        scope = host.scope
        refusal = self._refusal()
        if refusal is not None:
            raise ChildRunRefused(refusal)
        services_for = scope.services.services_for
        if services_for is None:
            raise ChildRunRefused("the runtime running this call offers no child runs")
        try:
            services = services_for(agent)
        except MissingServicesError as exc:
            raise ChildRunRefused(str(exc)) from None
        except ValueError as exc:  # e.g. instructions holding a secret
            raise ChildRunRefused(str(exc)) from None
        tools = bool(len(agent.toolkit) or agent.tool_sources)
        allowance = scope.allowance
        priced = unpriced(services.prices, services.model) is None
        lease = allowance.lease(want, agent.policy, trio.current_time(), tools=tools, priced=priced)
        if isinstance(lease, str):
            raise ChildRunRefused(lease)
        granted = lease.granted
        io = scope.io
        turn = scope.turn
        sink = _ChildSink(io, turn, call.tool_call_id)
        child = RunDriver(
            services,
            attrs.evolve(agent, policy=lease.policy),
            run_input.text,
            run_id=new_id("run"),
            conversation_id=new_id("conv"),
            events=sink,
            author=io.author,
            new_conversation=True,
            context=context,
            depth=scope.depth + 1,
            may_delegate=nested,
            backpressure=io.queue,
            permits=scope.pool,
            lender=host.permit,
        )
        sink.child_run_id = child.run_id
        if agent.input is not None:
            child.run_input = run_input
        io.emit(
            SubagentStarted,
            turn=turn,
            tool_call_id=call.tool_call_id,
            tool_name=call.tool_name,
            child_run_id=child.run_id,
            child_conversation_id=child.conversation_id,
            child_agent=agent.name,
            budget=granted,
        )
        try:
            await child.execute()
        finally:
            used = child.usage
            turns, tool_calls = child.turns_used, child.tool_calls_used
            allowance.settle(lease, turns, tool_calls, used)
            status = _child_ending(child.ending)
            host.note(
                "subagent",
                {
                    "agent": agent.name,
                    "run_id": child.run_id,
                    "conversation_id": child.conversation_id,
                    "status": status,
                    "turns": turns,
                    "tool_calls": tool_calls,
                    "input_tokens": used.input_tokens,
                    "output_tokens": used.output_tokens,
                    "cost_micros": used.cost_micros,
                    "unpriced_calls": used.unpriced_calls,
                },
            )
            io.emit(
                SubagentCompleted,
                turn=turn,
                tool_call_id=call.tool_call_id,
                child_run_id=child.run_id,
                status=status,
                usage=used,
                turns=turns,
                tool_calls=tool_calls,
            )
        result = sink.reducer.result()
        return ChildRunResult(
            child.run_id,
            child.conversation_id,
            agent.name,
            status,
            result.text,
            result.output,
            result.error,
            used,
            turns,
            tool_calls,
            granted,
        )
