"""The builder: an explicit allowlist of tools under namespaces → one ordinary Tool and its Layer.

Design notes
------------
:func:`code_mode` takes everything it needs as arguments — the selected tools, how the program
names them, the limits, the executor — and returns a :class:`CodeMode`: the outer ``tool`` (an
ordinary, readonly :class:`~effectagent.Tool` whose one parameter is the program) and the
``layer`` that provides its handler (and, unless told otherwise, the executor). There is no
registry and nothing ambient: the model sees only the outer tool unless the author also puts
the selected tools in the agent's toolkit, and the selected tools' own handlers come from the
author's layers like any tool's (preflight names a missing one).

Everything CAP-014 forbids fails here, before anything runs (``_plan``, ``_declarations``): a
tool that is not readonly, one that may need approval, names that collide, a schema that cannot
be declared. The outer tool declares the selected tools as its ``inner_tools``, which is what
makes the engine hand its handler a broker over exactly them.

The executor: ``"deno"`` (the default) builds a Deno executor isolated in bubblewrap, with a warm
pool, owned by the layer — where the host cannot isolate, opening the layer fails, it never falls
back. ``"deno-unisolated"`` builds one without bubblewrap, only when asked for by that name; the
audit metadata of every call then says ``"isolation": "unisolated"`` and
``"security_boundary": false``. ``"service"`` uses the ``CodeExecutorService`` of the author's
layers (one executor shared by several tools), and refuses one that is not a security boundary.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, Literal, TypeAlias

import attrs

from effectagent.ai import Handler, Tool
from effectagent.effect import Context, Layer, Scope
from sandbox import (
    CodeExecutionLimits,
    CodeExecutorService,
    DenoCodeExecutor,
    OwnedResources,
    deno_executor_layer,
)

from ._declarations import render_declarations
from ._description import describe
from ._egress import CodeModeOutput
from ._errors import CodeModeFailed, ExecutorNotIsolated
from ._limits import CodeModeLimits
from ._pass import CodeModeInput, PassRunner
from ._plan import Namespace, calls, plan
from ._program import wrapper_bytes

__all__ = ["CodeMode", "ExecutorChoice", "code_mode"]

ExecutorChoice: TypeAlias = Literal["deno", "deno-unisolated", "service"]
"""Which executor runs the passes: see :func:`code_mode`."""

_CHOICES = ("deno", "deno-unisolated", "service")
_DEFAULT_WARM = 2


@attrs.frozen(eq=False)  # identity, like a Tool: it holds one
class CodeMode:
    """A Code Mode tool, built by :func:`code_mode`.

    ``tool`` goes in the agent's toolkit and ``layer`` in the runtime's layers (with the selected
    tools' handlers). ``tools`` are the selected tools in order, ``methods`` how the program
    calls each (tool name → ``"namespace.method"``), ``declarations`` the TypeScript the model
    reads (also at the end of the tool's description), ``limits`` the bounds of every pass and
    ``executor`` the executor choice.
    """

    tool: Tool[CodeModeInput, CodeModeOutput]
    layer: Layer
    tools: tuple[Tool[Any, Any], ...]
    methods: Mapping[str, str]
    declarations: str
    limits: CodeModeLimits
    executor: ExecutorChoice


def code_mode(
    namespaces: Mapping[str, Iterable[Tool[Any, Any]]],
    *,
    name: str = "run_program",
    description: str | None = None,
    limits: CodeModeLimits | None = None,
    executor: ExecutorChoice = "deno",
    warm: int | None = None,
    on_acquire: Callable[[OwnedResources], None] | None = None,
) -> CodeMode:
    """A tool that runs a model-written JavaScript program over the tools of ``namespaces``.

    ``namespaces`` maps each namespace the program sees to the tools in it, e.g.
    ``{"weather": [forecast, to_fahrenheit]}``: the program then calls
    ``weather.to_fahrenheit({celsius: 4})``. A name that is not a JavaScript identifier is
    sanitized (``get-weather`` becomes ``get_weather``). ``name`` is the outer tool's name;
    ``description``, if given, comes first in its description, before the instructions and the
    declarations. ``limits`` bounds every pass (:class:`CodeModeLimits`).

    ``executor`` is ``"deno"`` (bubblewrap-isolated, the default), ``"deno-unisolated"`` (no
    isolation, labelled so in every call's audit metadata) or ``"service"`` (the
    ``CodeExecutorService`` of your layers, which must be a security boundary); ``warm``
    (default 2) pre-started workloads and ``on_acquire`` (called with what each workload holds
    as it is spawned, for audit and leak checks) apply to the executor built here.

    Raises, naming the tool and the reason: :class:`ToolNotReadonly`, :class:`ToolNeedsApproval`,
    :class:`ToolCallsTools`, :class:`NameCollision`, :class:`UnrenderableSchema` (all
    :class:`CodeModeBuildError`);
    ``TypeError``/``ValueError`` for arguments of the wrong type or value. Opening the layer
    raises :class:`ExecutorNotIsolated`, the executor's ``ExecutorUnavailable`` when this host
    cannot run it, or ``CodeLimitNotEnforceable`` for a limit it cannot enforce here.
    """
    if not isinstance(name, str):
        raise TypeError(f"code_mode: name must be a str, got {type(name).__name__}")
    if limits is None:
        limits = CodeModeLimits()
    elif not isinstance(limits, CodeModeLimits):
        raise TypeError(f"code mode {name!r}: limits must be a CodeModeLimits")
    if executor not in _CHOICES:
        raise ValueError(
            f"code mode {name!r}: executor must be one of {', '.join(map(repr, _CHOICES))}, "
            f"got {executor!r}"
        )
    if executor == "service" and (warm is not None or on_acquire is not None):
        raise ValueError(
            f"code mode {name!r}: warm and on_acquire configure the executor code_mode builds; "
            "with executor='service', configure your own"
        )
    if warm is not None and (type(warm) is not int or warm < 0):
        raise ValueError(f"code mode {name!r}: warm must be an int >= 0, got {warm!r}")
    if on_acquire is not None and not callable(on_acquire):
        raise TypeError(
            f"code mode {name!r}: on_acquire must be a function or None, "
            f"got {type(on_acquire).__name__}"
        )
    if description is not None and not isinstance(description, str):
        raise TypeError(f"code mode {name!r}: description must be a str or None")
    allowlist = plan(name, namespaces)
    declarations = render_declarations(name, allowlist)
    selected = tuple(method.tool for namespace in allowlist for method in namespace.methods)
    methods = calls(allowlist)
    tool: Tool[CodeModeInput, CodeModeOutput] = Tool(
        name,
        describe(description, allowlist, limits, declarations),
        parameters=CodeModeInput,
        success=CodeModeOutput,
        failure=CodeModeFailed,
        readonly=True,
        open_world=any(t.annotations.open_world for t in selected),
        summarize=_summary(name, tuple(methods.values())),
        inner_tools=selected,
    )
    request_limits = limits.executor_limits(wrapper_bytes(allowlist, limits.egress_bytes))
    layer = _handler_layer(tool, allowlist, limits, executor)
    if executor != "service":
        layer = layer.provide(
            deno_executor_layer(
                warm=_DEFAULT_WARM if warm is None else warm,
                warm_limits=request_limits,
                isolation="none" if executor == "deno-unisolated" else "namespaces",
                on_acquire=on_acquire,
            )
        )
    return CodeMode(tool, layer, selected, methods, declarations, limits, executor)


def _summary(name: str, methods: tuple[str, ...]) -> Callable[[CodeModeInput], str]:
    """What an approval request for a pass says (its program is the request's preview): one
    line, not the tool's description — instructions and declarations written for the model."""
    listed = ", ".join(methods)

    def summarize(params: CodeModeInput) -> str:
        size = len(params.program.encode("utf-8", "surrogatepass"))
        return f"{name}: run a program of {size} bytes that may call {listed}"

    return summarize


def _handler_layer(
    tool: Tool[Any, Any],
    allowlist: tuple[Namespace, ...],
    limits: CodeModeLimits,
    choice: ExecutorChoice,
) -> Layer:
    async def build(context: Context, _: Scope) -> Context:
        executor = context.require(CodeExecutorService)
        posture = executor.implementation
        if choice != "deno-unisolated" and not posture.is_security_boundary:
            raise ExecutorNotIsolated(
                tool.name,
                None,
                f"the executor {posture.name!r} is not a security boundary "
                f"({posture.isolation.value}); to run programs without isolation, ask for "
                "executor='deno-unisolated' by name",
            )
        runner = PassRunner(allowlist, limits, executor)
        if isinstance(executor, DenoCodeExecutor):
            _check_enforceable(executor, runner.request_limits)
        handler: Handler = runner
        return Context.of(tool.handler_key, handler)

    return Layer.from_build(
        f"code mode {tool.name!r}",
        provides=[tool.handler_key],
        requires=[CodeExecutorService],
        build=build,
    )


def _check_enforceable(executor: DenoCodeExecutor, limits: CodeExecutionLimits) -> None:
    """Raise ``CodeLimitNotEnforceable`` now, when the layer opens, rather than on every pass."""
    executor.spawn_config(limits)
