"""What can go wrong: building a Code Mode tool (exceptions, raised at construction) and running a
pass (:class:`CodeModeFailed`, a declared failure the model reads)."""

from __future__ import annotations

from typing import Literal, TypeAlias

import attrs

from effectagent.effect import TaggedError

__all__ = [
    "CodeModeBuildError",
    "CodeModeFailed",
    "ExecutorNotIsolated",
    "FailureKind",
    "NameCollision",
    "ToolNeedsApproval",
    "ToolNotReadonly",
    "UnrenderableSchema",
]


class CodeModeBuildError(ValueError):
    """A Code Mode tool cannot be built (or its layer cannot open) from what it was given.

    ``code_mode`` is the outer tool's name, ``tool`` the selected tool at fault (None when no
    single tool is) and ``reason`` says why; the message holds all three.
    """

    def __init__(self, code_mode: str, tool: str | None, reason: str) -> None:
        where = f"code mode {code_mode!r}" + (f": tool {tool!r}" if tool is not None else "")
        super().__init__(f"{where}: {reason}")
        self.code_mode = code_mode
        self.tool = tool
        self.reason = reason


class ToolNotReadonly(CodeModeBuildError):
    """A selected tool is not annotated readonly: a program could change the world with it,
    many times over, without the model seeing each call."""


class ToolNeedsApproval(CodeModeBuildError):
    """A selected tool may need approval, which no one can give in the middle of a program."""


class ToolCallsTools(CodeModeBuildError):
    """A selected tool calls other tools itself (it declares ``inner_tools``, as another Code Mode
    tool does; or its handler runs child agents, as a delegation tool's does); a call made from a
    program gets no broker of its own to serve them and cannot start a child run."""


class NameCollision(CodeModeBuildError):
    """Two names become the same identifier in the program, a namespace takes a name JavaScript
    reserves, or one tool is selected twice."""


class UnrenderableSchema(CodeModeBuildError):
    """A selected tool's parameters or success schema (``part``) has a construct the declaration
    renderer cannot show faithfully at ``path``; nothing is widened to ``any`` instead."""

    def __init__(
        self, code_mode: str, tool: str, part: Literal["parameters", "success"], path: str, why: str
    ) -> None:
        super().__init__(code_mode, tool, f"its {part} schema cannot be declared: {path}: {why}")
        self.part = part
        self.path = path


class ExecutorNotIsolated(CodeModeBuildError):
    """The executor found in the layers is not a security boundary; an unisolated executor is used
    only when asked for by name (``executor="deno-unisolated"``). Raised when the layer opens."""


FailureKind: TypeAlias = Literal[
    "threw",
    "invalid-program",
    "source-too-large",
    "result-too-large",
    "timeout",
    "memory",
    "too-many-calls",
    "call-too-large",
    "too-deep",
    "output-too-large",
]
"""Why a pass gave no value: the program threw, was not one async function, was too large, or hit
one of the pass's limits."""


@attrs.frozen
class CodeModeFailed(TaggedError):
    """A Code Mode pass that produced no result; the model reads it as a ``ToolFailure``.

    ``kind`` says why, ``message`` explains in words (for a thrown error: its name and message),
    ``logs`` and ``logs_truncated`` are what the program printed before, under the same egress
    budget as a result. Messages are built from sizes, limits and names, and from the program's
    own thrown text — never from what a tool returned, unless the program put it there.
    """

    kind: FailureKind
    message: str
    logs: tuple[str, ...] = ()
    logs_truncated: bool = False

    def __str__(self) -> str:
        return self.message
