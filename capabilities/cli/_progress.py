"""What a run is waiting on, for the spinner: the model (since its turn started, until its answer
begins), the answer as it streams (its tokens counted as they come), or the tools running (each
since it started). Pure: events and the time go in, a status line comes out.

The tokens of an answer are counted from its text as it streams — about four characters a token,
the engine's own estimate (``effectagent.engine.estimate_tokens``), shown with ``~`` — because the
model says how many it used only once the answer is complete (the run's usage line then has the
exact figure).
"""

from __future__ import annotations

from typing import Final

from effectagent.core import (
    TERMINAL_EVENTS,
    ApprovalRequested,
    EventBase,
    ReasoningDelta,
    TextDelta,
    ToolCallDeclared,
    ToolCallFailed,
    ToolCallStarted,
    ToolCallSucceeded,
    TurnCompleted,
    TurnStarted,
)

__all__ = ["FRAMES", "Progress", "tokens_of"]

#: The spinner's frames, one a second.
FRAMES: Final = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"

#: A wait shorter than this shows nothing (most answers start sooner).
QUIET: Final = 1.0

#: Characters a token, in the estimate of an answer's tokens while it streams.
CHARS_PER_TOKEN: Final = 4


def tokens_of(characters: int) -> int:
    """The estimated tokens of ``characters`` characters of streamed text (at least one for any
    text)."""
    return -(-characters // CHARS_PER_TOKEN)


class Progress:
    """The run's waits, from its events (:meth:`see`); :meth:`status` says what to show."""

    def __init__(self) -> None:
        self._turn_since: float | None = None  # the model's turn: since it started
        self._answering = False  # its answer (text or reasoning) has begun
        self._streamed = 0  # characters of the answer so far
        self._tools: dict[str, tuple[str, float]] = {}  # call ID: (tool name, started at)

    def see(self, event: EventBase, now: float) -> None:
        """Take in one event of the run, seen at ``now`` (seconds)."""
        if isinstance(event, TurnStarted):
            self._turn_since, self._answering, self._streamed = now, False, 0
        elif isinstance(event, TextDelta | ReasoningDelta):
            if event.text:  # an empty piece shows nothing: the wait goes on
                self._answering = True
                self._streamed += len(event.text)
        elif isinstance(event, ToolCallDeclared):
            self._answering = True  # the model is answering: with calls
        elif isinstance(event, ToolCallStarted):
            self._tools[event.tool_call_id] = (event.tool_name, now)
        elif isinstance(event, ToolCallSucceeded | ToolCallFailed | ApprovalRequested):
            self._tools.pop(event.tool_call_id, None)
        elif isinstance(event, TurnCompleted):
            self._turn_since, self._answering = None, False
        elif isinstance(event, TERMINAL_EVENTS):
            self._turn_since, self._answering = None, False
            self._tools.clear()

    def _wait(self, now: float) -> tuple[str, float] | None:
        """What is waited on at ``now`` and for how long (seconds)."""
        if self._tools:
            name, since = min(self._tools.values(), key=lambda tool: tool[1])
            others = len(self._tools) - 1
            return f"{name} running" + (f" (+{others} more)" if others else ""), now - since
        if self._turn_since is not None and not self._answering:
            return "waiting for the model", now - self._turn_since
        return None

    def seconds(self, now: float) -> int | None:
        """Whole seconds of the wait shown at ``now`` (None: nothing is waited on — an answer
        streaming shows itself)."""
        wait = self._wait(now)
        return int(wait[1]) if wait is not None and wait[1] >= QUIET else None

    def status(self, now: float) -> str | None:
        """The spinner's line at ``now``: the longest-running tool (and how many others run),
        else the model's wait, else the answer streaming with its tokens so far; None when
        nothing has taken a second yet."""
        wait = self._wait(now)
        tokens = ""
        if wait is None and self._answering and self._turn_since is not None and self._streamed:
            count = tokens_of(self._streamed)
            wait, tokens = (
                ("answering", now - self._turn_since),
                f" · ~{count:,} token{'' if count == 1 else 's'}",
            )
        if wait is None or wait[1] < QUIET:
            return None
        seconds = int(wait[1])
        return f"{FRAMES[seconds % len(FRAMES)]} {wait[0]} · {seconds} s{tokens}"
