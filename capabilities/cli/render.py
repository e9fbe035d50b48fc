"""A run's events as a timeline on a terminal (or any text stream) — what ``effectagent chat``
shows, reusable by any program that reads a run's events.

Usage::

    from capabilities.cli.render import Timeline

    timeline = Timeline(sys.stdout, color=sys.stdout.isatty())
    async with runtime.stream(agent, text) as events:
        async for event in events:
            timeline.render(event)

The stable API is the constructor and :meth:`Timeline.render` (plus :meth:`Timeline.close`, which
ends a line left open by streamed text):

``Timeline(stream, *, color=False, header=True, usage=True, preview_chars=100, markdown=None)``
    ``stream`` is any text stream with ``write`` (and ``flush``, called after each write when
    present). ``color`` uses ANSI styles (reasoning dimmed, outcomes in green / red);
    without it the output is plain text with the same layout. ``header`` shows a line for each
    top-level run's start (its agent and input; a subagent's start is always shown);
    ``usage`` a usage line when a top-level run ends;
    ``preview_chars`` bounds each preview of tool arguments and results. ``markdown`` draws each
    complete answer as Markdown with rich (code blocks highlighted when ``color``) instead of
    streaming it: while it streams, its last rows are a draft (shown where the stream can show
    one — the command's input line — else not at all); None draws Markdown when the stream is
    a console channel that draws with rich (the ``effectagent`` chat on a terminal), else not.

``render(event)``
    Writes what ``event`` shows: streamed text as it arrives, reasoning dimmed (marked
    ``thinking:`` without color), each tool call declared with a preview of its arguments and
    settled with its duration and outcome, approvals waited for, retries, budget warnings,
    compactions, and the run's end with its usage (input, output, cache read and cache write
    tokens). A subagent's events (``SubagentEvent``, after ``SubagentStarted``) are indented one
    level under the tool call that started it — its task, text and tool calls — and its end
    (``SubagentCompleted``) shows how it ended, its turns, tool calls and usage; a grandchild's
    go one level deeper. An event it does not know is ignored, so a newer engine never breaks an
    older timeline. It is synchronous and does no I/O other than writing to ``stream``.

Everything shown comes from the events, which the engine has already redacted and bounded. None of
it is trusted: a model, a tool or an MCP server wrote it. Every character a terminal would obey or
not show — ESC and the other controls, bidi overrides, zero-width characters — is written as an
escape a person can read (``\\x1b``, ``\\u202e``), and a name, a preview or an error never spans
lines (its newlines show as ``\\n``); only streamed text and reasoning keep their line breaks. The
only escape sequences written are the timeline's own styles. (The ``effectagent`` command passes
its console's channel as ``stream``, so the timeline waits while an approval prompt is on the
screen.)
"""

from __future__ import annotations

import json
from typing import Any

from effectagent.ai import dollars
from effectagent.core import (
    ApprovalRequested,
    BudgetWarning,
    CompactionPerformed,
    ModelRetrying,
    ReasoningDelta,
    RunCompleted,
    RunFailed,
    RunInterrupted,
    RunStarted,
    RunSuspended,
    SubagentCompleted,
    SubagentEvent,
    SubagentStarted,
    TextDelta,
    ToolCallDeclared,
    ToolCallFailed,
    ToolCallStarted,
    ToolCallSucceeded,
    ToolOutcome,
    ToolProgress,
    TurnStarted,
    UsageTotals,
)

from ._console import Channel, Console, Markdown, Part, Styled, Text, TextSink
from ._errors import figure, sentence

__all__ = ["TextSink", "Timeline", "format_usage", "preview"]

_INDENT = "  "

#: The most rows an answer's draft shows above the input line while it streams.
DRAFT_ROWS = 8


def draft_tail(text: str, width: int, rows: int = DRAFT_ROWS) -> str:
    """The last ``rows`` rows ``text`` takes on a terminal ``width`` columns wide (a line longer
    than the width takes several). Pure."""
    width = max(width, 1)
    drawn = [
        line[start : start + width]
        for line in text.split("\n")
        for start in range(0, max(len(line), 1), width)
    ]
    return "\n".join(drawn[-rows:])


def preview(value: Any, limit: int = 100) -> str:
    """``value`` as one line of compact JSON (a string as it is, with its newlines and tabs as
    ``\\n`` and ``\\t``; ``str`` for what JSON cannot encode), cut to at most ``limit`` characters
    with ``…`` at the end when longer. (Other hidden characters are escaped when it is written.)"""
    if isinstance(value, str):
        text = value.replace("\n", "\\n").replace("\t", "\\t")
    else:
        try:
            text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)
        except (TypeError, ValueError):
            text = type(value).__name__
    if len(text) > limit:
        return text[: max(limit - 1, 0)] + "…"
    return text


def format_usage(usage: UsageTotals) -> str:
    """``input N · output N · cache read N · cache write N`` (and reasoning when there was some)."""
    parts = [
        f"input {usage.input_tokens}",
        f"output {usage.output_tokens}",
        f"cache read {usage.cache_read_input_tokens}",
        f"cache write {usage.cache_write_input_tokens}",
    ]
    if usage.reasoning_tokens:
        parts.append(f"reasoning {usage.reasoning_tokens}")
    return " · ".join(parts)


def _outcome_text(outcome: ToolOutcome, limit: int) -> str:
    kind = outcome.kind
    if kind == "success":
        return preview(getattr(outcome, "result", None), limit)
    for name in ("reason", "message"):
        detail = getattr(outcome, name, None)
        if isinstance(detail, str):
            return f"{kind}: {preview(detail, limit)}"
    error = getattr(outcome, "error", None)
    if isinstance(error, dict):
        tag = error.get("_tag")
        shown = sentence(error)
        return f"{kind}: {tag + ' ' if isinstance(tag, str) else ''}{preview(shown, limit)}"
    return f"{kind}: {preview(sentence(error), limit)}"


def _budget_figure(dimension: str, value: float) -> str:
    if dimension == "cost":  # the engine counts cost in micro-dollars
        return dollars(int(value))
    return f"{value:.1f} s" if dimension == "duration" else figure(value)


class Timeline:
    """Renders run events to a text stream; see the module notes for the whole contract.

    One instance may render several runs in turn (a chat session) and the events of subagents
    within them. Not thread-safe; use from one task.
    """

    def __init__(
        self,
        stream: TextSink | Channel,
        *,
        color: bool = False,
        header: bool = True,
        usage: bool = True,
        preview_chars: int = 100,
        markdown: bool | None = None,
    ) -> None:
        if not isinstance(stream, Channel) and not callable(getattr(stream, "write", None)):
            raise TypeError(f"Timeline writes to a text stream, got {type(stream).__name__}")
        if isinstance(preview_chars, bool) or not isinstance(preview_chars, int):
            raise TypeError("preview_chars must be an int")
        if preview_chars < 8:
            raise ValueError(f"preview_chars must be at least 8, got {preview_chars}")
        # Everything goes through a console's channel, which escapes it (module notes); the
        # command passes its own, whose colour setting then applies.
        if isinstance(stream, Channel):
            self._out = stream
        else:
            self._out = Console(stream, color=color, rich=bool(markdown)).out
        self._markdown = self._out.console.rich if markdown is None else bool(markdown)
        self._header = bool(header)
        self._usage = bool(usage)
        self._limit = preview_chars
        # Where the cursor is: an open line of streamed text or reasoning, and at what depth.
        self._open: str | None = None  # "text" | "reasoning" | None
        self._open_depth = 0
        # The answer streaming at depth 0, kept to be drawn whole once complete (markdown), and
        # its last part (what its draft shows).
        self._answer: list[str] = []
        self._recent = ""
        # When each tool call began (declared, then started), by (run, call) — for durations.
        self._began: dict[tuple[str, str], float] = {}
        # The depth of each subagent run (by its run ID), under the call that started it.
        self._depths: dict[str, int] = {}

    # ---- the public API ------------------------------------------------------------------------

    def render(self, event: object) -> None:
        """Write what ``event`` shows (module notes). Unknown events are ignored."""
        self._render(event, self._depth_of(event))

    def close(self) -> None:
        """End a line left open by streamed text (idempotent)."""
        self._end_line()

    # ---- dispatch ------------------------------------------------------------------------------

    def _depth_of(self, event: object) -> int:
        run_id = getattr(event, "run_id", None)
        return self._depths.get(run_id, 0) if isinstance(run_id, str) else 0

    def _render(self, event: object, depth: int) -> None:
        handler = _HANDLERS.get(type(event))
        if handler is not None:
            handler(self, event, depth)

    def _subagent_started(self, event: SubagentStarted, depth: int) -> None:
        """The child's events go one level deeper than the call that started it; its own
        ``RunStarted`` then shows its agent and task."""
        self._depths[event.child_run_id] = depth + 1

    def _subagent_event(self, event: SubagentEvent, depth: int) -> None:
        self._depths.setdefault(event.child_run_id, depth + 1)
        inner = event.event
        self._render(inner, self._depth_of(inner))

    def _subagent_completed(self, event: SubagentCompleted, depth: int) -> None:
        self._depths.pop(event.child_run_id, None)
        ok = event.status == "completed"
        calls = "tool call" if event.tool_calls == 1 else "tool calls"
        turns = "turn" if event.turns == 1 else "turns"
        text = (
            f"↲ subagent {event.status}: {event.turns} {turns}, {event.tool_calls} {calls}, "
            f"{format_usage(event.usage)}"
        )
        self._line(depth + 1, Styled("green" if ok else "yellow", text))

    # ---- events --------------------------------------------------------------------------------

    def _run_started(self, event: RunStarted, depth: int) -> None:
        if self._header or depth:
            head = Styled("bold", f"▶ {event.agent}")
            self._line(depth, head, " ", preview(event.input, self._limit))

    def _turn_started(self, event: TurnStarted, depth: int) -> None:
        if event.grace:
            self._line(depth, Styled("yellow", "· final turn: the budget is spent"))

    def _retrying(self, event: ModelRetrying, depth: int) -> None:
        text = (
            f"↻ model call retried in {event.delay:.1f}s "
            f"(attempt {event.attempt + 1}): {preview(event.message, 60)}"
        )
        if event.discard:
            text += " — the text above is dropped"
        self._line(depth, Styled("yellow", text))

    def _text(self, event: TextDelta, depth: int) -> None:
        self._stream_piece("text", event.text, depth)

    def _reasoning(self, event: ReasoningDelta, depth: int) -> None:
        self._stream_piece("reasoning", event.text, depth)

    def _declared(self, event: ToolCallDeclared, depth: int) -> None:
        self._began[(event.run_id, event.tool_call_id)] = event.at
        args = preview(event.arguments, self._limit)
        self._line(depth, Styled("cyan", "▸ " + event.tool_name), " ", args)

    def _started(self, event: ToolCallStarted, depth: int) -> None:
        self._began[(event.run_id, event.tool_call_id)] = event.at

    def _progress(self, event: ToolProgress, depth: int) -> None:
        data = preview(event.data, self._limit)
        self._line(depth + 1, Styled("gray", f"⋯ {event.tool_name}: {data}"))

    def _settled(self, event: ToolCallSucceeded | ToolCallFailed, depth: int) -> None:
        began = self._began.pop((event.run_id, event.tool_call_id), event.at)
        took = f"{max(event.at - began, 0.0):.2f}s"
        outcome = event.outcome
        ok = not outcome.is_failure
        mark = Styled("green" if ok else "red", ("✓ " if ok else "✗ ") + event.tool_name)
        shown = _outcome_text(outcome, self._limit)
        self._line(depth, mark, " ", Styled("gray", took), " ", shown)

    def _approval(self, event: ApprovalRequested, depth: int) -> None:
        """Only who waits and the risk: a summary may be a server's own words (an MCP tool's
        description), so it is never shown as if it said what the call does."""
        text = f"? {event.tool_name} waits for approval ({event.request.risk} risk)"
        self._line(depth, Styled("yellow", text))

    def _budget(self, event: BudgetWarning, depth: int) -> None:
        used = _budget_figure(event.dimension, event.used)
        limit = _budget_figure(event.dimension, event.limit)
        what = event.dimension.replace("_", " ")
        self._line(depth, Styled("yellow", f"! {what} budget: {used} of {limit} used"))

    def _compaction(self, event: CompactionPerformed, depth: int) -> None:
        text = f"⇲ context compacted ({event.kind}): {event.tokens_before} → {event.tokens_after} tokens"
        self._line(depth, Styled("gray", text))

    def _completed(self, event: RunCompleted, depth: int) -> None:
        self._end_line()
        if event.finish_reason == "budget-exhausted":
            what = (event.exhausted or "run").replace("_", " ")
            self._line(depth, Styled("yellow", f"■ stopped: the {what} budget ran out"))
        self._usage_line(depth, event.usage)

    def _failed(self, event: RunFailed, depth: int) -> None:
        self._line(depth, Styled("red", f"✗ run failed: {sentence(event.error)}"))
        self._usage_line(depth, event.usage)

    def _interrupted(self, event: RunInterrupted, depth: int) -> None:
        reason = "" if event.reason in ("", "interrupted") else f": {event.reason}"
        self._line(depth, Styled("yellow", f"■ interrupted{reason}"))
        self._usage_line(depth, event.usage)

    def _suspended(self, event: RunSuspended, depth: int) -> None:
        self._line(depth, Styled("yellow", f"⏸ suspended: {event.reason}"))

    # ---- writing -------------------------------------------------------------------------------

    def _usage_line(self, depth: int, usage: UsageTotals) -> None:
        if self._usage and not depth:  # a subagent's usage is on its SubagentCompleted line
            self._line(depth, Styled("gray", f"usage: {format_usage(usage)}"))

    def _end_line(self) -> None:
        if self._answer:  # the answer is complete (or something comes between): drawn whole
            text = "".join(self._answer).strip("\n")
            self._answer.clear()
            self._recent = ""
            self._out.draft()
            self._out.line(Markdown(text))
            self._open = None
        elif self._open is not None:
            self._out.line()
            self._open = None

    def _line(self, depth: int, *parts: Part) -> None:
        self._end_line()
        self._out.line(_INDENT * depth, *parts)

    def _stream_piece(self, kind: str, text: str, depth: int) -> None:
        if not text:
            return
        if self._markdown and kind == "text" and not depth:
            self._draft_piece(text)
            return
        indent = _INDENT * depth
        if self._open != kind or self._open_depth != depth:
            self._end_line()
            self._out.write(indent)
            if kind == "reasoning" and not self._out.color:
                self._out.write("thinking: ")
            self._open = kind
            self._open_depth = depth
        if depth:
            text = text.replace("\n", "\n" + indent)
        self._out.write(Styled("dim", Text(text)) if kind == "reasoning" else Text(text))

    def _draft_piece(self, text: str) -> None:
        """Keep a piece of the answer; show its last rows as the draft."""
        if self._open != "text":
            self._end_line()
            self._open, self._open_depth = "text", 0
        self._answer.append(text)
        columns, lines = self._out.size()
        rows = max(1, min(DRAFT_ROWS, lines // 3))  # the input line and the rest keep room
        self._recent = (self._recent + text)[-(columns + 1) * (rows + 1) :]
        self._out.draft(Text(draft_tail(self._recent.lstrip("\n"), columns, rows)))


_HANDLERS: dict[type[Any], Any] = {
    RunStarted: Timeline._run_started,
    TurnStarted: Timeline._turn_started,
    ModelRetrying: Timeline._retrying,
    TextDelta: Timeline._text,
    ReasoningDelta: Timeline._reasoning,
    ToolCallDeclared: Timeline._declared,
    ToolCallStarted: Timeline._started,
    ToolProgress: Timeline._progress,
    ToolCallSucceeded: Timeline._settled,
    ToolCallFailed: Timeline._settled,
    ApprovalRequested: Timeline._approval,
    BudgetWarning: Timeline._budget,
    CompactionPerformed: Timeline._compaction,
    RunCompleted: Timeline._completed,
    RunFailed: Timeline._failed,
    RunInterrupted: Timeline._interrupted,
    RunSuspended: Timeline._suspended,
    SubagentStarted: Timeline._subagent_started,
    SubagentEvent: Timeline._subagent_event,
    SubagentCompleted: Timeline._subagent_completed,
}
