"""The delegation tool: an ordinary Tool whose handler runs a child agent (see the package notes)."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Generic, Literal, TypeVar, final, overload

import attrs

from effectagent.ai import Tool, ToolCallContext
from effectagent.core import Agent, ChildBudget, ContextItem, DefaultInput
from effectagent.effect import Layer, TaggedError, encode
from effectagent.engine import ChildRunRefused, run_child

from .._rules import items_of

__all__ = ["Delegation", "SubagentFailed", "delegate"]

P = TypeVar("P")
I = TypeVar("I")  # noqa: E741  # the child's input: the agent's ``input`` type, or its text


@attrs.frozen
class SubagentFailed(TaggedError):
    """The subagent did not answer. ``reason``: "refused" (it could not start: not allowed, no
    budget left, a service missing — nothing ran), "failed" (its run failed; ``error`` is the tag
    of its error) or "interrupted". ``message`` says why, redacted like every tool result."""

    message: str
    reason: Literal["refused", "failed", "interrupted"]
    error: str = ""
    child_run_id: str = ""
    child_conversation_id: str = ""

    def __str__(self) -> str:
        return self.message


@final
class _Delegate:
    """The handler of one delegation tool: each call runs the child once."""

    __slots__ = ("budget", "child", "context", "nested", "prompt")

    @property
    def child_agents(self) -> tuple[Agent, ...]:
        """The agent this handler runs (preflight includes what it needs)."""
        return (self.child,)

    def __init__(
        self,
        child: Agent,
        prompt: Callable[[Any], object],
        context: Callable[[Any], Sequence[ContextItem]] | None,
        budget: ChildBudget,
        nested: bool,
    ) -> None:
        self.child = child
        self.prompt = prompt
        self.context = context
        self.budget = budget
        self.nested = nested

    async def __call__(self, params: Any, call: ToolCallContext) -> Any:
        """Run the child on the prompt made from ``params``; its answer, or SubagentFailed.

        The prompt of a child with a typed input (``Agent.input``) is that input — a value of its
        type, a dict or JSON text — checked by ``run_child``; any other child's is a text.

        Cancellation: as ``run_child`` — the child is interrupted and the cancellation propagates.
        """
        child = self.child
        text = self.prompt(params)
        if child.input is None:
            if not isinstance(text, str):
                raise TypeError(
                    f"the prompt of a delegation returned {type(text).__name__}, not str"
                )
            if not text.strip():
                raise ValueError(
                    "the prompt of a delegation returned an empty text (or only spaces)"
                )
        items = _context_items(self.context(params)) if self.context is not None else ()
        try:
            result = await run_child(
                call, child, text, budget=self.budget, context=items, nested=self.nested
            )
        except ChildRunRefused as exc:
            raise SubagentFailed(
                f"subagent {child.name!r} could not start: {exc.reason}", "refused"
            ) from None
        if result.status != "completed":
            error = result.error
            detail = f": {error.tag}" if error is not None else ""
            raise SubagentFailed(
                f"subagent {child.name!r} {result.status}{detail}",
                result.status,
                error.tag if error is not None else "",
                result.run_id,
                result.conversation_id,
            )
        return result.output if child.output is not None else result.text


@final
class Delegation(Generic[P]):
    """A declared delegation: the ``tool`` the parent's toolkit holds, and :meth:`layer`, the
    Layer of its handler. ``child``, ``budget`` and ``nested`` are as given to :func:`delegate`."""

    __slots__ = ("budget", "child", "nested", "tool")

    def __init__(self, tool: Tool[P, Any], child: Agent, budget: ChildBudget, nested: bool) -> None:
        self.tool = tool
        self.child = child
        self.budget = budget
        self.nested = nested

    def layer(self) -> Layer:
        """The Layer providing the tool's handler. What the child agent needs (its model, its
        tools' handlers, approval if a tool may need it, …) comes from the runtime's other
        layers; preflighting the parent agent names anything missing (the handler tells
        ``requirements_of`` about the child)."""
        tool = self.tool
        handler = tool.handler
        assert handler is not None  # bound by ``delegate``
        return Layer.succeed(
            tool.handler_key, handler, name=f"delegation {tool.name!r} to {self.child.name!r}"
        )


def _context_items(given: object) -> tuple[ContextItem, ...]:
    return items_of(
        given,
        ContextItem,
        whole="the context of a delegation must return a sequence of ContextItem",
        each="the context of a delegation must return ContextItem values",
        lone=(ContextItem,),
    )


def _json_prompt(params: Any) -> str:
    return json.dumps(encode(params), sort_keys=True, ensure_ascii=False)


def _is_delegation(tool: Tool[Any, Any]) -> bool:
    # Ours, or any bound handler that says it runs child agents (the engine's own convention).
    return isinstance(tool.handler, _Delegate) or bool(getattr(tool.handler, "child_agents", None))


# mypy holds ``prompt`` to the child's input: a text for a child without ``input=``, else a value
# of its input type (or its JSON: a dict, or JSON text), as ``run_child`` takes it.
@overload
def delegate(
    child: Agent[Any, DefaultInput],
    *,
    name: str,
    description: str,
    parameters: type[P],
    prompt: Callable[[P], str] | None = None,
    context: Callable[[P], Sequence[ContextItem]] | None = None,
    budget: ChildBudget | None = None,
    nested: bool = ...,
    needs_approval: bool | Callable[[P, ToolCallContext], bool] = ...,
    title: str | None = None,
    timeout: float | None = None,
) -> Delegation[P]: ...
@overload
def delegate(
    child: Agent[Any, I],
    *,
    name: str,
    description: str,
    parameters: type[P],
    prompt: Callable[[P], I | Mapping[str, Any] | str] | None = None,
    context: Callable[[P], Sequence[ContextItem]] | None = None,
    budget: ChildBudget | None = None,
    nested: bool = ...,
    needs_approval: bool | Callable[[P, ToolCallContext], bool] = ...,
    title: str | None = None,
    timeout: float | None = None,
) -> Delegation[P]: ...
def delegate(
    child: Agent,
    *,
    name: str,
    description: str,
    parameters: type[P],
    prompt: Callable[[P], object] | None = None,
    context: Callable[[P], Sequence[ContextItem]] | None = None,
    budget: ChildBudget | None = None,
    nested: bool = False,
    needs_approval: bool | Callable[[P, ToolCallContext], bool] = False,
    title: str | None = None,
    timeout: float | None = None,
) -> Delegation[P]:
    """A delegation tool named ``name`` that runs ``child`` on each call.

    ``parameters`` is the type of the tool's arguments (an attrs class, a dataclass, a
    ``TypedDict``); its result is the child's answer — of the child agent's ``output`` type, or
    its text when it has none. ``prompt(params)`` makes the child's input (default: the
    parameters as JSON): a text, or — for a child with a typed input (``Agent.input``) — that
    input, as a value of its type, a dict or JSON text. ``context(params)`` gives context items
    recorded before it (default: none — the child sees nothing of the parent's conversation).
    ``budget`` is what the child may
    use, at most (default ``ChildBudget()``), cut to what the parent has left when the call runs.
    ``nested=True`` lets the child delegate further; without it a child whose toolkit holds a
    delegation tool (or any tool whose bound handler has ``child_agents``) is refused here.
    ``needs_approval`` (a bool, or a plain function of the parameters and the call's context),
    ``title`` and ``timeout`` are the tool's.
    The tool is annotated readonly when every tool of the child is, destructive when any is;
    a child with tool sources (whose tools are known only at a turn) makes it neither readonly
    nor anything but destructive.

    Raises ``TypeError`` / ``ValueError`` naming the argument for bad values, like ``Tool``.
    """
    if not isinstance(child, Agent):
        raise TypeError(f"delegate() needs the child Agent, got {type(child).__name__}")
    if budget is None:
        budget = ChildBudget()
    elif not isinstance(budget, ChildBudget):
        raise TypeError(f"delegate(budget=...) must be a ChildBudget, got {type(budget).__name__}")
    if not isinstance(nested, bool):
        raise TypeError(f"delegate(nested=...) must be a bool, got {type(nested).__name__}")
    for argument, value in (("prompt", prompt), ("context", context)):
        if value is not None and not callable(value):
            raise TypeError(
                f"delegate({argument}=...) must be a function of the parameters, "
                f"got {type(value).__name__}"
            )
    inner = [tool.name for tool in child.toolkit if _is_delegation(tool)]
    if inner and not nested:
        raise ValueError(
            f"delegate(): the child agent {child.name!r} can delegate ({', '.join(inner)}); "
            "nested delegation must be declared with nested=True"
        )
    tools = list(child.toolkit)
    # A tool source's tools are known only at a turn: they may be anything.
    sourced = bool(child.tool_sources)
    readonly = not sourced and all(tool.annotations.readonly for tool in tools)
    destructive = sourced or any(
        not tool.annotations.readonly and tool.annotations.destructive for tool in tools
    )
    handler = _Delegate(child, prompt or _json_prompt, context, budget, nested)
    tool: Tool[P, Any] = Tool(
        name,
        description,
        parameters=parameters,
        success=child.output if child.output is not None else str,
        failure=SubagentFailed,
        needs_approval=needs_approval,
        readonly=readonly,
        destructive=None if readonly else destructive,
        title=title,
        timeout=timeout,
        handler=handler,
    )
    return Delegation(tool, child, budget, nested)
