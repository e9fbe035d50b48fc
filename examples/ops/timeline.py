"""The run's events as a timeline, one line each: time since the run started, the event, details.

A subagent's events (``SubagentEvent``) are shown indented under the call that started it. What
the demo itself adds — the on-call engineer, steering receipts, approval decisions read from the
log — are notes (:meth:`Timeline.note`), marked with ``*``.
"""

from __future__ import annotations

import json
import textwrap
import time
from typing import Any, Final, TextIO

import attrs

from effectagent.core import (
    ApprovalRequested,
    BudgetWarning,
    CompactionPerformed,
    EventBase,
    ModelRetrying,
    ModelStarted,
    ReasoningDelta,
    RunCompleted,
    RunFailed,
    RunInterrupted,
    RunStarted,
    TextDelta,
    ToolCallDeclared,
    ToolCallFailed,
    ToolCallStarted,
    ToolCallSucceeded,
    ToolOutcome,
    ToolProgress,
    TurnCompleted,
    TurnStarted,
)

__all__ = ["Timeline", "compact", "describe"]

_STYLES: Final = {
    "run": "1;36",  # bold cyan
    "turn": "34",  # blue
    "model": "2",  # dim
    "text": "0",
    "tool": "33",  # yellow
    "ok": "32",  # green
    "fail": "31",  # red
    "warn": "35",  # magenta
    "note": "1;35",  # bold magenta
    "done": "1;32",  # bold green
}
WIDTH: Final = 132


def compact(value: Any, limit: int = 96) -> str:
    """``value`` as compact JSON, cut to ``limit`` characters (saying how long it was)."""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    if len(text) <= limit:
        return text
    return f"{text[: limit - 22]}… ({len(text)} chars)"


def abbreviate(value: Any, items: int = 3, chars: int = 100) -> Any:
    """``value`` with each long list cut to its first ``items`` (and how many more) and each long
    string to ``chars`` characters, so its shape shows in a line or three."""
    if isinstance(value, dict):
        return {key: abbreviate(item, items, chars) for key, item in value.items()}
    if isinstance(value, list):
        if len(value) <= items + 1:
            return [abbreviate(item, items, chars) for item in value]
        return [
            *(abbreviate(item, items, chars) for item in value[:items]),
            f"… {len(value) - items} more",
        ]
    if isinstance(value, str) and len(value) > chars:
        return value[: chars - 1] + "…"
    return value


def describe(outcome: ToolOutcome) -> str:
    """A tool outcome as the model reads it, in one line (an MCP result: its server and text)."""
    content = outcome.model_content()
    if outcome.kind == "success":
        if isinstance(content, dict) and {"server", "content"} <= content.keys():
            server = content["server"]
            texts = [block.get("text", "") for block in content["content"]]
            return f"[{server['name']} {server['version']}] " + compact(" ".join(texts), 400)
        return compact(abbreviate(content), 480)
    if isinstance(content, dict):
        message = content.get("message") or content.get("reason") or content
        return f"{outcome.kind}: {compact(message, 120)}"
    return f"{outcome.kind}: {compact(content, 120)}"


@attrs.define
class Timeline:
    """Prints events as they arrive (``render``) and the demo's own notes (``note``)."""

    out: TextIO
    color: bool
    started: float = attrs.field(factory=time.monotonic)

    def _paint(self, style: str, text: str) -> str:
        return f"\x1b[{_STYLES[style]}m{text}\x1b[0m" if self.color else text

    def _line(self, style: str, name: str, detail: str = "", depth: int = 0) -> None:
        at = f"+{time.monotonic() - self.started:6.3f}s"
        indent = "  │ " * depth
        lead = f"{self._paint('model', at)}  {indent}{self._paint(style, f'{name:<19}')} "
        width = WIDTH - len(at) - 2 - len(indent) - 20
        lines = textwrap.wrap(detail, width, break_on_hyphens=False) or [""]
        print(f"{lead}{lines[0]}".rstrip(), file=self.out)
        for more in lines[1:]:
            print(f"{'':{len(at) + 2}}{indent}{'':20}{more}", file=self.out)

    def block(self, label: str, text: str, depth: int = 0) -> None:
        """Lines of text (a program) under the current line, as they are."""
        pad = " " * 10 + "  │ " * depth + " " * 20
        print(f"{pad}{label}:", file=self.out)
        for line in text.splitlines():
            print(f"{pad}  {self._paint('model', line)}".rstrip(), file=self.out)

    def note(self, label: str, detail: str) -> None:
        """A line of the demo's own (not an event of the run)."""
        self._line("note", f"* {label}", detail)

    def render(self, event: EventBase, depth: int = 0) -> None:
        """Print ``event`` (a subagent's events indented under its parent's)."""
        name = type(event).__name__
        line = self._line
        match event:
            case RunStarted(input=text):
                line("run", name, f"{event.agent}: {text}", depth)
            case TurnStarted(turn=turn, grace=grace):
                line("turn", name, f"turn {turn}" + (" (grace)" if grace else ""), depth)
            case ModelStarted() | ReasoningDelta():
                pass  # the text that follows says more
            case ModelRetrying(attempt=attempt, error_tag=tag, delay=delay):
                line("warn", name, f"attempt {attempt} after {tag}, in {delay:.1f}s", depth)
            case TextDelta(text=text):
                line("text", name, text.strip(), depth)
            case ToolCallDeclared(tool_call_id=cid, tool_name=tool, arguments=args):
                blocks = (
                    {k: v for k, v in args.items() if "\n" in str(v)}
                    if isinstance(args, dict)
                    else {}
                )
                shown = (
                    {k: ("…" if k in blocks else v) for k, v in args.items()} if blocks else args
                )
                line("tool", name, f"{cid:<8} {tool} {compact(shown, 160)}", depth)
                for key, block in blocks.items():  # a program, say: shown as written
                    self.block(key, str(block), depth)
            case ToolCallStarted(tool_call_id=cid, tool_name=tool):
                line("tool", name, f"{cid:<8} {tool}", depth)
            case ToolProgress(tool_call_id=cid, data=data):
                line("tool", name, f"{cid:<8} {compact(data)}", depth)
            case ToolCallSucceeded(tool_call_id=cid, outcome=outcome):
                line("ok", name, f"{cid:<8} {describe(outcome)}", depth)
            case ToolCallFailed(tool_call_id=cid, outcome=outcome):
                line("fail", name, f"{cid:<8} {describe(outcome)}", depth)
            case ApprovalRequested(tool_call_id=cid, request=request):
                targets = ", ".join(request.targets)
                line("warn", name, f"{cid:<8} {request.tool_name} on {targets}", depth)
            case CompactionPerformed(kind=kind, tokens_before=before, tokens_after=after):
                detail = f"{kind}: {before} → {after} tokens (through entry {event.covers_through})"
                line("warn", name, detail, depth)
            case TurnCompleted(turn=turn, finish_reason=reason, usage=usage):
                detail = f"turn {turn}, {reason}, {usage.total_tokens} tokens so far"
                line("turn", name, detail, depth)
            case BudgetWarning(dimension=dim, used=used, limit=limit):
                line("warn", name, f"{dim}: {used:g} of {limit:g} used", depth)
            case RunCompleted(finish_reason=reason, turns=turns, tool_calls=calls):
                detail = f"{reason} after {turns} turns, {calls} tool calls"
                line("done", name, detail, depth)
            case RunFailed(error=error):
                line("fail", name, repr(error), depth)
            case RunInterrupted(reason=reason):
                line("fail", name, reason, depth)
            case _:
                line("model", name, "", depth)
