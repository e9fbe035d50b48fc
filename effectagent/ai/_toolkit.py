"""Toolkit: a set of tools, and binding their handlers as a Layer.

Each tool's handler is its own service (``tool.handler_key``), so toolkits merge freely and preflight
names exactly which tool lacks a handler. ``toolkit.handlers(search.bind(handle_search), ...)``
binds handlers that mypy has checked against their tools' types (:meth:`Tool.bind`). A tool may
also carry its handler (``Tool(handler=...)``, or ``@tool``, which always does): ``handlers()``
binds those, and a binding given to it overrides a tool's own — so a test can swap one handler
without restating the others. A mapping of tools (or tool names) to handlers is accepted too, for
tools only known at run time; mypy cannot relate a mapping's keys to its values, so nothing checks
those handlers' types.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping
from typing import Any, TypeAlias, final

import attrs

from effectagent.effect import Context, Layer, Scope, ServiceKey, is_async_callable

from ._checks import accepts_positional, check_handler, shown
from ._tool import Binding, Handler, ReconcilingHandler, Tool

__all__ = ["ToolDescriptor", "Toolkit"]

#: Handlers by tool (or tool name), for tools only known at run time: unchecked by mypy, which
#: cannot relate each key's types to its value's (:meth:`Tool.bind` can).
_HandlerMapping: TypeAlias = Mapping[Tool[Any, Any] | str, Handler]


@attrs.frozen(slots=True)
class ToolDescriptor:
    """What a model is told about a tool: name, description, JSON Schema of its parameters."""

    name: str
    description: str
    parameters: Mapping[str, Any]
    readonly: bool = False
    title: str | None = None


@final
class Toolkit:
    """An immutable set of tools with unique names."""

    __slots__ = ("_descriptors", "_tools")

    def __init__(self, *tools: Tool[Any, Any]) -> None:
        by_name: dict[str, Tool[Any, Any]] = {}
        for position, tool in enumerate(tools, 1):
            if not isinstance(tool, Tool):
                raise TypeError(_not_a_tool(position, tool))
            existing = by_name.get(tool.name)
            if existing is not None and existing is not tool:
                raise ValueError(f"two different tools are named {tool.name!r}")
            by_name[tool.name] = tool
        self._tools = by_name
        self._descriptors = tuple(
            ToolDescriptor(
                t.name,
                t.description,
                t.parameters_schema,
                readonly=t.annotations.readonly,
                title=t.annotations.title,
            )
            for t in by_name.values()
        )

    @staticmethod
    def empty() -> Toolkit:
        """A toolkit with no tools."""
        return Toolkit()

    def merge(self, *others: Toolkit) -> Toolkit:
        """A toolkit with the tools of all; the same name on two different tools is an error.
        Raises ``TypeError`` for an argument that is not a Toolkit (tools: ``Toolkit(*tools)``)."""
        tools = list(self._tools.values())
        for position, other in enumerate(others, 1):
            if not isinstance(other, Toolkit):
                raise TypeError(_not_a_toolkit(f"Toolkit.merge: argument {position}", other))
            tools.extend(other._tools.values())
        return Toolkit(*tools)

    def __add__(self, other: Toolkit) -> Toolkit:
        if not isinstance(other, Toolkit):
            raise TypeError(_not_a_toolkit("Toolkit +: the other side", other))
        return self.merge(other)

    def get(self, name: str) -> Tool[Any, Any] | None:
        """The tool called ``name``, if any."""
        return self._tools.get(name)

    @property
    def names(self) -> tuple[str, ...]:
        """Tool names, in declaration order."""
        return tuple(self._tools)

    @property
    def descriptors(self) -> tuple[ToolDescriptor, ...]:
        """What the model is told, in declaration order."""
        return self._descriptors

    @property
    def handler_keys(self) -> tuple[ServiceKey[Handler], ...]:
        """The handler service key of every tool."""
        return tuple(t.handler_key for t in self._tools.values())

    def __iter__(self) -> Iterator[Tool[Any, Any]]:
        return iter(self._tools.values())

    def __len__(self) -> int:
        return len(self._tools)

    def __contains__(self, tool: object) -> bool:
        return isinstance(tool, Tool) and self._tools.get(tool.name) is tool

    def _resolve(self, given: Iterable[object], who: str) -> Context:
        bound: dict[ServiceKey[Any], Any] = {}
        for item in given:
            if item is None:  # handlers(None): the tools' own handlers, as before bindings
                continue
            handlers = self._bindings(item, who)
            for key in handlers.keys() & bound.keys():
                name = next(t.name for t in self._tools.values() if t.handler_key is key)
                raise ValueError(f"{who}: tool {name!r} is given two handlers")
            bound.update(handlers)
        missing = []
        for tool in self._tools.values():
            if tool.handler_key in bound:
                continue
            if tool.handler is None:
                missing.append(tool.name)
            elif tool.reconcile is not None:  # checked when the tool was made
                bound[tool.handler_key] = ReconcilingHandler(tool.handler, tool.reconcile)
            else:
                bound[tool.handler_key] = tool.handler  # checked when the tool was made
        if missing:
            raise ValueError(
                f"no handler for tool(s): {', '.join(missing)} (give one in the call: "
                f"{who}(tool.bind(handler)), or with the tool: Tool(..., handler=...) or @tool)"
            )
        return Context(bound)

    def _bindings(self, item: object, who: str) -> dict[ServiceKey[Any], Any]:
        """The handlers one argument binds, by handler key: a Binding's, or a mapping's."""
        if isinstance(item, Binding):
            handler: object = item.handler
            if item.reconcile is not None:  # checked by ``bind``
                handler = ReconcilingHandler(item.handler, item.reconcile)
            pairs: Iterable[tuple[object, object]] = ((item.tool, handler),)
        elif isinstance(item, Mapping):
            pairs = item.items()
        else:
            raise TypeError(
                f"{who}: handlers must be a mapping of tool (or tool name) to handler, or "
                f"bindings (tool.bind(handler)), got {shown(item)}"
            )
        bound: dict[ServiceKey[Any], Any] = {}
        for key, given in pairs:
            if not isinstance(key, Tool | str):
                raise TypeError(
                    f"{who}: each key must be a Tool of this toolkit or its name, got {shown(key)}"
                )
            tool = self._tools.get(key) if isinstance(key, str) else key
            if tool is None or tool not in self:
                raise ValueError(f"{key!r} is not a tool of this toolkit")
            check_handler(f"tool {tool.name!r}", given)
            if tool.handler_key in bound:  # one mapping naming it twice: by the tool and its name
                raise ValueError(f"{who}: tool {tool.name!r} is given two handlers")
            bound[tool.handler_key] = given
        return bound

    def handlers(self, *handlers: Binding[Any, Any] | _HandlerMapping) -> Layer:
        """A Layer binding a handler to every tool: the one ``handlers`` give it, else the one
        bound with the tool (``Tool(handler=...)``, ``@tool``).

        ``handlers`` are bindings — ``toolkit.handlers(forecast.bind(handle_forecast))``, each
        handler checked by mypy against its tool's types — or mappings of tools (or tool names) to
        handlers, for tools only known at run time (mypy cannot check those).

        Fails here, at once: a tool with neither (``ValueError`` naming it), a tool given two
        handlers, or one that is not a tool of this toolkit (``ValueError``), a handler that is
        not an async callable of ``(params, context)`` (``TypeError`` naming the tool).
        """
        context = self._resolve(handlers, "Toolkit.handlers")
        return Layer.context(context, name=f"handlers[{', '.join(self.names)}]")

    def handlers_from(
        self,
        factory: Callable[[Context], Awaitable[Iterable[Binding[Any, Any]] | _HandlerMapping]],
        *,
        requires: Iterable[ServiceKey[Any]] = (),
    ) -> Layer:
        """A Layer whose handlers are made from services (``requires``) at build time.

        The factory returns bindings (``[forecast.bind(handle_forecast)]``) or a mapping, checked
        as :meth:`handlers` checks them, and a tool it leaves out gets the handler bound with the
        tool, if any. A factory that is not an async function of one positional argument (the
        Context) is a ``TypeError`` here, not when the runtime opens.
        """
        if not is_async_callable(factory):
            raise TypeError(
                "Toolkit.handlers_from: factory must be an async function of the Context, "
                f"got {shown(factory)}"
            )
        if not accepts_positional(factory, 1):  # found here, not as the runtime opens
            raise TypeError(
                "Toolkit.handlers_from: factory must take one positional argument (the "
                f"Context); {getattr(factory, '__qualname__', None) or shown(factory)} does not"
            )
        given: object = requires  # checked: not every caller runs mypy
        if isinstance(given, str | bytes | ServiceKey) or not isinstance(given, Iterable):
            raise TypeError(
                "Toolkit.handlers_from: requires must be an iterable of ServiceKeys, not one "
                f"{type(given).__name__} (requires=[key])"
            )

        async def build(ctx: Context, _: Scope) -> Context:
            made: object = await factory(ctx)  # checked: not every caller runs mypy
            items = (made,) if made is None or isinstance(made, Mapping) else _bindings_of(made)
            return self._resolve(items, "Toolkit.handlers_from")

        return Layer.from_build(
            f"handlers[{', '.join(self.names)}]",
            provides=self.handler_keys,
            requires=requires,
            build=build,
        )


def _bindings_of(made: object) -> tuple[object, ...]:
    """What a ``handlers_from`` factory returned, as arguments of ``handlers``."""
    if isinstance(made, Binding):
        return (made,)
    if isinstance(made, str | bytes) or not isinstance(made, Iterable):
        raise TypeError(
            "Toolkit.handlers_from: the factory must return a mapping of tool (or tool name) to "
            f"handler, or bindings (tool.bind(handler)), got {shown(made)}"
        )
    items = tuple(made)
    for item in items:
        if not isinstance(item, Binding):
            raise TypeError(
                "Toolkit.handlers_from: the factory must return a mapping of tool (or tool name) "
                f"to handler, or bindings (tool.bind(handler)); it returned {shown(item)} among "
                "them"
            )
    return items


def _not_a_toolkit(where: str, value: object) -> str:
    """Why a toolkit to merge is refused, with the likely fix."""
    message = f"{where} must be a Toolkit, got {shown(value)}"
    if isinstance(value, Tool | list | tuple | set | frozenset):
        return f"{message}; make the tools a Toolkit first: Toolkit(*tools)"
    return message


def _not_a_tool(position: int, value: object) -> str:
    """Why a Toolkit argument is refused, with the likely fix."""
    message = f"Toolkit: argument {position} must be a Tool, got {shown(value)}"
    if isinstance(value, list | tuple | set | frozenset | Toolkit):
        return f"{message}; pass the tools one by one: Toolkit(*tools), or merge toolkits with +"
    if inspect.isfunction(value) or inspect.ismethod(value):
        return f"{message}; decorate the function with @tool to make it one"
    return message
