"""What a run is waiting on, for the spinner: the model (since its turn started, until its answer
begins) or the tools running (each since it started). Pure: events and the time go in, a status
line comes out.
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
    TurnStarted,
)

__all__ = ["FRAMES", "Progress"]

#: The spinner's frames, one a second.
FRAMES: Final = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"

#: A wait shorter than this shows nothing (most answers start sooner).
QUIET: Final = 1.0


class Progress:
    """The run's waits, from its events (:meth:`see`); :meth:`status` says what to show."""

    def __init__(self) -> None:
        self._model_since: float | None = None
        self._tools: dict[str, tuple[str, float]] = {}  # call ID: (tool name, started at)

    def see(self, event: EventBase, now: float) -> None:
        """Take in one event of the run, seen at ``now`` (seconds)."""
        if isinstance(event, TurnStarted):
            self._model_since = now
        elif isinstance(event, TextDelta | ReasoningDelta | ToolCallDeclared):
            self._model_since = None  # the model is answering: its text shows
        elif isinstance(event, ToolCallStarted):
            self._tools[event.tool_call_id] = (event.tool_name, now)
        elif isinstance(event, ToolCallSucceeded | ToolCallFailed | ApprovalRequested):
            self._tools.pop(event.tool_call_id, None)
        elif isinstance(event, TERMINAL_EVENTS):
            self._model_since = None
            self._tools.clear()

    def _wait(self, now: float) -> tuple[str, float] | None:
        """What is waited on at ``now`` and for how long (seconds)."""
        if self._tools:
            name, since = min(self._tools.values(), key=lambda tool: tool[1])
            others = len(self._tools) - 1
            return f"{name} running" + (f" (+{others} more)" if others else ""), now - since
        if self._model_since is not None:
            return "waiting for the model", now - self._model_since
        return None

    def seconds(self, now: float) -> int | None:
        """Whole seconds of the wait shown at ``now`` (None: nothing is shown)."""
        wait = self._wait(now)
        return int(wait[1]) if wait is not None and wait[1] >= QUIET else None

    def status(self, now: float) -> str | None:
        """The spinner's line at ``now``: the longest-running tool (and how many others run),
        else the model's wait; None when nothing has waited a second yet."""
        wait = self._wait(now)
        if wait is None or wait[1] < QUIET:
            return None
        seconds = int(wait[1])
        return f"{FRAMES[seconds % len(FRAMES)]} {wait[0]} · {seconds} s"
