"""The allowlist: the selected tools under their namespaces, checked before anything is built.

:func:`plan` turns the author's mapping (namespace → tools) into :class:`Namespace` values and
fails closed, naming the tool and the reason, on everything CAP-014 forbids: a tool that is not
readonly, a tool that may need approval, two names that become one identifier (a tool name
against another in its namespace, a namespace against another), a namespace JavaScript reserves,
and one tool selected twice (the engine resolves inner calls by tool name) — and on a tool that
calls tools itself (another Code Mode tool: an inner call gets no broker of its own; a delegation
tool: an inner call cannot start a child run). Whether each schema
can be declared is checked when the declarations are rendered (``_declarations``). Pure.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from effectagent.ai import Tool

from ._errors import (
    NameCollision,
    ToolCallsTools,
    ToolNeedsApproval,
    ToolNotReadonly,
)
from ._names import is_identifier, sanitize, taken_by_javascript

__all__ = ["Method", "Namespace", "calls", "plan"]


@attrs.frozen
class Method:
    """One selected tool as the program calls it: ``namespace.name(input)``."""

    name: str
    tool: Tool[Any, Any]


@attrs.frozen
class Namespace:
    """A binding in the program's scope holding ``methods``."""

    name: str
    methods: tuple[Method, ...]


def plan(
    code_mode: str, namespaces: Mapping[str, Iterable[Tool[Any, Any]]]
) -> tuple[Namespace, ...]:
    """The checked allowlist, in the order given. Raises a :class:`CodeModeBuildError` subclass
    (see the module notes), ``TypeError`` for values of the wrong type, ``ValueError`` for an
    empty allowlist or namespace."""
    if not isinstance(namespaces, Mapping):
        raise TypeError(
            f"code mode {code_mode!r}: namespaces must be a mapping of namespace name to tools, "
            f"got {type(namespaces).__name__}"
        )
    out: list[Namespace] = []
    namespace_of: dict[str, str] = {}  # sanitized namespace -> as given
    selected: dict[str, str] = {}  # tool name -> the namespace that has it
    for given, tools in namespaces.items():
        if not isinstance(given, str):
            raise TypeError(f"code mode {code_mode!r}: namespace {given!r} is not a str")
        name = sanitize(given)
        if name in namespace_of:
            raise NameCollision(
                code_mode,
                None,
                f"namespaces {namespace_of[name]!r} and {given!r} both become {name!r}",
            )
        if (taken := taken_by_javascript(name)) is not None:
            raise NameCollision(code_mode, None, f"namespace {given!r}: {taken}")
        assert is_identifier(name)
        namespace_of[name] = given
        held: object = tools  # checked at run time: the annotation is a promise, not a proof
        if isinstance(held, Tool) or not isinstance(held, Iterable):
            raise TypeError(
                f"code mode {code_mode!r}: namespace {given!r} must hold an iterable of Tools"
            )
        methods: dict[str, Method] = {}
        for tool in tools:
            if not isinstance(tool, Tool):
                raise TypeError(
                    f"code mode {code_mode!r}: namespace {given!r} holds a "
                    f"{type(tool).__name__}, not a Tool"
                )
            _check_tool(code_mode, tool)
            if tool.name in selected:
                raise NameCollision(
                    code_mode,
                    tool.name,
                    f"selected twice (in namespaces {selected[tool.name]!r} and {given!r})",
                )
            selected[tool.name] = given
            method = sanitize(tool.name)
            if method in methods:
                other = methods[method].tool.name
                raise NameCollision(
                    code_mode,
                    tool.name,
                    f"it and tool {other!r} both become {name}.{method} in the program",
                )
            methods[method] = Method(method, tool)
        if not methods:
            raise ValueError(f"code mode {code_mode!r}: namespace {given!r} has no tools")
        out.append(Namespace(name, tuple(methods.values())))
    if not out:
        raise ValueError(f"code mode {code_mode!r}: select at least one tool")
    return tuple(out)


def calls(namespaces: Iterable[Namespace]) -> dict[str, str]:
    """How the program calls each selected tool: tool name → ``"namespace.method"``."""
    return {
        method.tool.name: f"{namespace.name}.{method.name}"
        for namespace in namespaces
        for method in namespace.methods
    }


def _check_tool(code_mode: str, tool: Tool[Any, Any]) -> None:
    if not tool.annotations.readonly:
        raise ToolNotReadonly(
            code_mode,
            tool.name,
            "it is not annotated readonly (readonly=True): a program may call it many times "
            "without the model seeing each call, so only tools that change nothing are allowed",
        )
    if tool.may_need_approval:
        raise ToolNeedsApproval(
            code_mode,
            tool.name,
            "it may need approval, and no one can approve a call in the middle of a program",
        )
    if getattr(tool.handler, "child_agents", None):
        # A delegation tool (``capabilities.subagents.delegate``) or any handler that runs child
        # agents: a child run starts only from a call the runtime runs, never from an inner one.
        raise ToolCallsTools(
            code_mode,
            tool.name,
            "its handler runs child agents (a delegation tool), which a call made from a "
            "program cannot",
        )
    if tool.inner_tools:
        raise ToolCallsTools(
            code_mode,
            tool.name,
            "it calls other tools itself (inner_tools, e.g. another Code Mode tool), which a "
            "call made from a program cannot",
        )
