"""The demo's output: the run's events as ``effectagent chat`` shows them
(:class:`capabilities.cli.render.Timeline`), with the demo's own notes between them.

A note starts with ``»`` and a label. Some are read off the events — a batch whose calls ran
concurrently, where the sandboxed command ran, what a Code Mode pass returned, which MCP server
answered, what a compaction covered — and some the demo adds from elsewhere: the on-call engineer,
steering receipts, approval decisions read from the log, the session.
"""

from __future__ import annotations

import json
import textwrap
from typing import Any, Final, TextIO

import attrs

from capabilities.cli.render import Timeline
from effectagent.core import (
    CompactionPerformed,
    EventBase,
    SubagentEvent,
    ToolCallDeclared,
    ToolCallFailed,
    ToolCallStarted,
    ToolCallSucceeded,
    TurnCompleted,
)

__all__ = ["Narrator", "abbreviate", "compact"]

WIDTH: Final = 110
LABEL: Final = 12


def compact(value: Any, limit: int = 96) -> str:
    """``value`` as compact JSON (a string as it is), cut to ``limit`` characters."""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return text if len(text) <= limit else f"{text[: limit - 1]}…"


def abbreviate(value: Any, items: int = 3, chars: int = 100) -> Any:
    """``value`` with each long list cut to its first ``items`` (and how many more) and each long
    string to ``chars`` characters, so that its shape shows in a few lines."""
    if isinstance(value, dict):
        return {key: abbreviate(item, items, chars) for key, item in value.items()}
    if isinstance(value, list):
        if len(value) <= items + 1:
            return [abbreviate(item, items, chars) for item in value]
        shown = [abbreviate(item, items, chars) for item in value[:items]]
        return [*shown, f"… {len(value) - items} more"]
    if isinstance(value, str) and len(value) > chars:
        return value[: chars - 1] + "…"
    return value


@attrs.define
class _Batch:
    """The top-level tool calls of the current turn: when each started and settled."""

    started: dict[str, float] = attrs.Factory(dict)
    settled: dict[str, float] = attrs.Factory(dict)
    first_settled_after: int = 0  # how many had started when the first one settled


@attrs.define
class Narrator:
    """Renders events with the CLI's Timeline and adds the demo's notes (see the module notes)."""

    out: TextIO
    color: bool
    timeline: Timeline = attrs.field(init=False)
    _batch: _Batch = attrs.field(init=False, factory=_Batch)

    def __attrs_post_init__(self) -> None:
        self.timeline = Timeline(self.out, color=self.color, preview_chars=100)

    def note(self, label: str, text: str) -> None:
        """A line of the demo's own, wrapped."""
        self.timeline.close()  # ends a line of streamed text first
        lines = textwrap.wrap(text, WIDTH - LABEL - 3, break_on_hyphens=False) or [""]
        head = f"» {label:<{LABEL}}"
        if self.color:
            head = f"\x1b[1;35m{head}\x1b[0m"
        print(f"{head} {lines[0]}", file=self.out)
        for line in lines[1:]:
            print(f"{'':{LABEL + 3}}{line}", file=self.out)

    def block(self, label: str, title: str, text: str) -> None:
        """Lines of text (a program) as they are, under a note."""
        self.note(label, title)
        for line in text.splitlines():
            print(f"{'':{LABEL + 5}}{line}".rstrip(), file=self.out)

    def close(self) -> None:
        """End a line left open by streamed text."""
        self.timeline.close()

    def render(self, event: EventBase) -> None:
        """Show ``event``, then what the demo notes about it."""
        self.timeline.render(event)
        if isinstance(event, SubagentEvent):
            return  # notes are about the assistant's own calls
        match event:
            case ToolCallDeclared(tool_name="run_program", arguments={"program": str(program)}):
                self.block(
                    "code mode", "the model's program, to run in Deno in bubblewrap:", program
                )
            case ToolCallStarted(tool_call_id=cid):
                self._batch.started[cid] = event.at
            case ToolCallSucceeded(tool_call_id=cid) | ToolCallFailed(tool_call_id=cid):
                if not self._batch.settled:
                    self._batch.first_settled_after = len(self._batch.started)
                self._batch.settled[cid] = event.at
                if isinstance(event, ToolCallSucceeded):
                    self._succeeded(event)
            case CompactionPerformed(turn=turn, kind=kind, covers_through=through):
                self.note(
                    "compaction",
                    f"CompactionPerformed before turn {turn}: {kind} through log entry "
                    f"{through}, {event.tokens_before} → {event.tokens_after} tokens (the log "
                    "itself keeps every entry)",
                )
            case TurnCompleted():
                self._batch_done()

    def _succeeded(self, event: ToolCallSucceeded) -> None:
        result = event.outcome.model_content()
        if not isinstance(result, dict):
            return
        if event.tool_name == "grep_logs":
            self.note("sandbox", f"{result['sandbox']}: {result['matches']} matching lines")
        elif event.tool_name == "run_program":
            self.note(
                "code mode",
                f"the pass printed {result['logs']} and returned {compact(result['result'], 400)}",
            )
        elif {"server", "content"} <= result.keys():
            server = result["server"]
            text = " ".join(block.get("text", "") for block in result["content"])
            self.note("mcp", f"{server['name']} {server['version']}: {compact(text, 300)}")

    def _batch_done(self) -> None:
        batch, self._batch = self._batch, _Batch()
        if len(batch.started) < 2:  # one call, or calls refused before they ran
            return
        ran = [cid for cid in batch.settled if cid in batch.started]  # a denied call never ran
        calls = sum(batch.settled[cid] - batch.started[cid] for cid in ran)
        span = max(batch.settled.values()) - min(batch.started.values())
        together = (
            "all started before the first finished"
            if batch.first_settled_after == len(batch.started)
            else f"{batch.first_settled_after} started before the first finished"
        )
        self.note(
            "parallel",
            f"{len(batch.started)} calls in one batch, {together}: {span * 1000:.0f} ms for "
            f"{calls * 1000:.0f} ms of calls",
        )
