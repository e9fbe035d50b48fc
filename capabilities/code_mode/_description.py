"""What the model reads about the Code Mode tool: how to write the program, how calls fail, what
comes back and the limits — followed by the declarations. Pure and deterministic."""

from __future__ import annotations

from collections.abc import Sequence

from ._limits import CodeModeLimits
from ._plan import Namespace

__all__ = ["describe"]


def describe(
    intro: str | None, namespaces: Sequence[Namespace], limits: CodeModeLimits, declarations: str
) -> str:
    """The outer tool's description."""
    first = namespaces[0]
    method = first.methods[0].name
    names = ", ".join(f"`{namespace.name}`" for namespace in namespaces)
    calls = limits.max_calls
    lines = [
        *([intro.strip(), ""] if intro and intro.strip() else []),
        "Runs a JavaScript program that calls the tools declared below and returns only what "
        "you need: the tools' results stay inside the program, so filter, join and summarize "
        "there.",
        "",
        "Write ONE async arrow function with no parameters, for example:",
        "async () => {",
        f"  const found = await {first.name}.{method}({{ /* input */ }});",
        "  return found;",
        "}",
        "",
        f"- In scope: {names} (declared below). Each method takes one object and returns a "
        "Promise of its JSON result. Await calls one at a time, or several together with "
        f"Promise.all (at most {limits.max_concurrent_calls} run at once).",
        '- A failed call rejects with an Error whose `_tag` is "ToolFailure" (the tool\'s own '
        'error is in `error`, with its `_tag`), "ToolInvalidInput", "ToolRejected" (not '
        'allowed, or the tool-call budget is spent) or "ToolDefect", and whose `message` says '
        "why. Catch it to carry on; uncaught, the program fails with it.",
        "- You get back the return value (JSON), console output (console.log) and an uncaught "
        f"error's name and message, together at most {limits.egress_bytes} bytes: whatever "
        "does not fit is left out whole, never cut. Return a compact answer, not raw results.",
        f"- Limits: {calls} tool call{'s' if calls != 1 else ''} and "
        f"{limits.wall_clock_seconds:g} s per program, {limits.source_bytes} bytes of source. "
        "Use only the namespaces: the program has no network, file or module access, and "
        "nothing it starts outlives it.",
        "",
        "Declarations:",
        "```ts",
        declarations.rstrip("\n"),
        "```",
    ]
    return "\n".join(lines)
