"""A conversation's log as compaction sees it: the current prompt, cut into units. Pure.

The prompt the model sees is ``project_messages(entries)`` (``effectagent.core``): the latest
valid summary, then every entry after it rendered — tool results the latest valid
``clear-tool-results`` record covers replaced by a marker. A compaction appends one record that
covers a prefix; where that prefix may end is what this module knows.

A **unit** is a run of entries a cut may not go through: it starts at a user input or a model
response, and a response that called tools extends its unit through the last of its calls'
settlements — so a cut (``covers_through`` = the last seq of a unit) never separates a tool call
from its result, and never lands among the records of one batch. Records that render nothing
(prepared calls, approvals, run endings, compactions) belong to the unit before them.

Each unit is rendered by the core's own projection, over the unit's entries alone (its batches are
whole inside it) plus a copy of the clearing that applies to it. The view's :meth:`messages` —
the summary message, then every unit's messages — is therefore exactly ``project_messages`` of the
log (a property test holds it to that), and a cut's *tail* is a suffix of it, found without
projecting the log again.

Invariants (tested in ``tests/capabilities/compaction/test_planning.py``):

* ``[summary, *units' messages] == project_messages(entries)``;
* units are contiguous and in order; a cut after any unit splits no batch: every settlement of a
  response's calls is in the response's unit;
* ``summary_through`` and ``clear_through`` are what the projection applies (the same validity
  rule: a record covers ``0 < covers_through < its own seq``, within the log).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any, final

import attrs

from effectagent.ai import Message
from effectagent.core import (
    CompactionCreated,
    ContextAdded,
    LogEntry,
    ModelResponseRecorded,
    ToolCallSettled,
    UserInputRecorded,
    batch_spans,
    project_messages,
    splits_a_batch,
)

__all__ = ["Count", "LogView", "Unit"]

#: A token counter: tokens the messages take in a request.
Count = Callable[[Sequence[Message]], int]

_RUN_AT = 0.0


@final
@attrs.define(eq=False)
class Unit:
    """Entries a cut may not go through (see the module notes), as the prompt shows them."""

    first: int
    last: int
    entries: list[LogEntry]
    messages: tuple[Message, ...] = ()
    tokens: int = 0
    #: Whether a settlement in it is not yet cleared (clearing through it would change it).
    clearable: bool = False
    cleared: tuple[Message, ...] | None = None
    cleared_tokens: int | None = None


def straddled(entries: Sequence[LogEntry], through: int) -> bool:
    """Whether a batch of tool calls has its response at or before ``through`` and a settlement
    after it (a cut there would separate a call from its result)."""
    return splits_a_batch(batch_spans(entries), through)


def applied(entries: Sequence[LogEntry]) -> Iterator[tuple[LogEntry, CompactionCreated]]:
    """The compaction records the projection applies, in log order: each covers a range that
    ends before the record and within the log, and a summary has text and separates no tool
    call from its result (the rest are ignored, fail-safe)."""
    last_seq = entries[-1].seq if entries else 0
    spans: list[tuple[int, int]] | None = None
    for entry in entries:
        rec = entry.record
        if not isinstance(rec, CompactionCreated):
            continue
        if not 0 < rec.covers_through < entry.seq or rec.covers_through > last_seq:
            continue
        if rec.kind == "summarize":
            if rec.summary is None:
                continue
            if spans is None:
                spans = batch_spans(entries)
            if splits_a_batch(spans, rec.covers_through):
                continue
        yield entry, rec


def _covered(entries: Sequence[LogEntry]) -> tuple[int, int, LogEntry | None]:
    """(summary_through, clear_through, the summarize entry in force) — the projection's rule."""
    summary_through, clear_through = 0, 0
    summary: LogEntry | None = None
    for entry, rec in applied(entries):
        if rec.kind == "summarize":
            if rec.covers_through >= summary_through:
                summary_through, summary = rec.covers_through, entry
        elif rec.kind == "clear-tool-results":
            clear_through = max(clear_through, rec.covers_through)
    return summary_through, clear_through, summary


@final
class LogView:
    """The log of one conversation, cut into units, with token counts by ``count``."""

    __slots__ = (
        "clear_through",
        "conversation_id",
        "count",
        "entries",
        "last_seq",
        "summary",
        "summary_through",
        "summary_tokens",
        "units",
    )

    def __init__(self, entries: Sequence[LogEntry], count: Count) -> None:
        self.entries = tuple(entries)
        self.count = count
        self.last_seq = self.entries[-1].seq if self.entries else 0
        self.conversation_id = _conversation_of(self.entries)
        self.summary_through, self.clear_through, summary = _covered(self.entries)
        self.summary: tuple[Message, ...] = (
            tuple(project_messages([summary])) if summary is not None else ()
        )
        self.summary_tokens = count(self.summary) if self.summary else 0
        self.units = self._cut()

    def _cut(self) -> tuple[Unit, ...]:
        after = [e for e in self.entries if e.seq > self.summary_through]
        settled: dict[tuple[str, int, str], int] = {}
        for entry in after:
            rec = entry.record
            if isinstance(rec, ToolCallSettled):
                settled[(rec.run_id, rec.turn, rec.tool_call_id)] = entry.seq
        units: list[Unit] = []
        current: Unit | None = None
        extends_to = 0
        for entry in after:
            rec = entry.record
            opens = isinstance(rec, UserInputRecorded | ContextAdded | ModelResponseRecorded)
            if current is None or (opens and entry.seq > extends_to):
                current = Unit(entry.seq, entry.seq, [])
                units.append(current)
            current.entries.append(entry)
            current.last = entry.seq
            if isinstance(rec, ModelResponseRecorded):
                for kind, call in rec.content:
                    if kind == "tool-call":
                        key = (rec.run_id, rec.turn, call["id"])
                        extends_to = max(extends_to, settled.get(key, 0))
        for unit in units:
            unit.messages = self._render(unit, self.clear_through)
            unit.tokens = self.count(unit.messages) if unit.messages else 0
            unit.clearable = any(
                isinstance(e.record, ToolCallSettled) and e.seq > self.clear_through
                for e in unit.entries
            )
        return tuple(units)

    def _render(self, unit: Unit, clear_through: int) -> tuple[Message, ...]:
        entries = [e for e in unit.entries if not isinstance(e.record, CompactionCreated)]
        if not entries:
            return ()
        covers = min(clear_through, unit.last)
        if covers >= unit.first:  # the clearing that applies to this unit, as a record after it
            marker = CompactionCreated(
                conversation_id=self.conversation_id,
                run_id="",
                turn=0,
                kind="clear-tool-results",
                covers_through=covers,
                summary=None,
                at=_RUN_AT,
            )
            entries.append(LogEntry(unit.last + 1, marker))
        return tuple(project_messages(entries))

    def cleared(self, index: int) -> tuple[tuple[Message, ...], int]:
        """Unit ``index`` with every tool result cleared, and its tokens (computed once)."""
        unit = self.units[index]
        if not unit.clearable:
            return unit.messages, unit.tokens
        if unit.cleared is None or unit.cleared_tokens is None:
            unit.cleared = self._render(unit, unit.last)
            unit.cleared_tokens = self.count(unit.cleared) if unit.cleared else 0
        return unit.cleared, unit.cleared_tokens

    def messages(self) -> list[Message]:
        """The prompt history the log stands for (``project_messages(entries)``)."""
        found: list[Message] = list(self.summary)
        for unit in self.units:
            found.extend(unit.messages)
        return found

    def project(self, *records: CompactionCreated) -> list[Message]:
        """``project_messages`` of the log with ``records`` appended after it (exact; a whole
        projection — for checks, not for planning)."""
        appended = [LogEntry(self.last_seq + i, r) for i, r in enumerate(records, start=1)]
        return project_messages([*self.entries, *appended])

    def record(
        self, kind: Any, covers_through: int, summary: str | None, **ids: Any
    ) -> CompactionCreated:
        """A compaction record of this conversation (``run_id``, ``turn`` and ``at`` in ``ids``)."""
        return CompactionCreated(
            conversation_id=self.conversation_id,
            run_id=ids.get("run_id", ""),
            turn=ids.get("turn", 0),
            kind=kind,
            covers_through=covers_through,
            summary=summary,
            at=ids.get("at", 0.0),
        )


def _conversation_of(entries: Sequence[LogEntry]) -> str:
    for entry in entries:
        conversation = getattr(entry.record, "conversation_id", None)
        if isinstance(conversation, str):
            return conversation
    return ""
