"""What a run's records say, folded one page at a time into :class:`LogFacts`. Pure.

A submission's run owns every record of its conversation after the sequence number its first
claim saw (its ``base_seq``): the lane lets one run write at a time, and what others add while
it is going — a decision, an abort, a joined input — belongs to it too. :class:`FactsFolder`
reads those records in order, page by page (recovery's reads are bounded), and keeps only what
the classifier needs: how the run ended, whether it waits for approval decisions (a suspension:
no record says so — its last batch's requests, recorded, none of its calls prepared since) and
which are missing, the last response's calls and which of them were prepared or settled, and which
watched inputs (joining submissions) it recorded.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, final

from effectagent.core import (
    ApprovalRequest,
    LogEntry,
    ModelResponseRecorded,
    RunCompletedRecord,
    RunFailedRecord,
    ToolApprovalDecided,
    ToolApprovalRequested,
    ToolCallPrepared,
    ToolCallSettled,
    UserInputRecorded,
)

from ._classifier import LogFacts, Terminal

__all__ = ["ABORTED_REASON", "FactsFolder", "terminal_of"]

#: The ``reason`` of the ``RunFailedRecord`` the durable runtime appends for an abort.
ABORTED_REASON = "aborted"


def terminal_of(record: object) -> Terminal | None:
    """How ``record`` says its run ended, None when it is not a terminal record."""
    if type(record) is RunCompletedRecord:
        return "completed"
    if type(record) is RunFailedRecord:
        if record.reason == ABORTED_REASON:
            return "aborted"
        return "interrupted" if record.reason == "interrupted" else "failed"
    return None


def _calls(record: ModelResponseRecorded) -> list[tuple[str, str]]:
    calls: list[tuple[str, str]] = []
    for kind, value in record.content:
        if kind == "tool-call" and isinstance(value, dict):
            calls.append((str(value.get("id", "")), str(value.get("name", ""))))
    return calls


@final
class FactsFolder:
    """Folds a run's records (:meth:`add`, in sequence order) into :class:`LogFacts`
    (:meth:`facts`). ``watched`` are input IDs to look for (joining submissions)."""

    __slots__ = (
        "_absorbed",
        "_decided",
        "_declared",
        "_final_answer",
        "_last_seq",
        "_pending",
        "_prepared",
        "_records",
        "_requests",
        "_responded",
        "_settled",
        "_suspended",
        "_terminal",
        "_terminal_record",
        "_terminal_seq",
        "_unknown",
        "_watched",
        "run_id",
    )

    def __init__(self, run_id: str, watched: Iterable[str] = ()) -> None:
        self.run_id = run_id
        self._watched = frozenset(watched)
        self._absorbed: set[str] = set()
        self._records = 0
        self._terminal: Terminal | None = None
        self._terminal_seq: int | None = None
        self._terminal_record: Any = None
        self._responded = False
        self._final_answer = False
        self._declared: list[tuple[str, str]] = []
        self._prepared: dict[str, str] = {}
        self._settled: set[str] = set()
        self._suspended = False
        self._pending: list[str] = []
        self._decided: set[str] = set()
        self._requests: dict[str, ApprovalRequest] = {}
        self._unknown: list[tuple[str, str]] = []
        self._last_seq = 0

    @property
    def last_seq(self) -> int:
        """The sequence number of the last record added (0: none)."""
        return self._last_seq

    @property
    def terminal_seq(self) -> int | None:
        """The sequence number of the run's terminal record, if it has one."""
        return self._terminal_seq

    @property
    def terminal_record(self) -> RunCompletedRecord | RunFailedRecord | None:
        """The run's terminal record, if it has one."""
        record: RunCompletedRecord | RunFailedRecord | None = self._terminal_record
        return record

    @property
    def absorbed(self) -> frozenset[str]:
        """The watched input IDs the run recorded."""
        return frozenset(self._absorbed)

    @property
    def unknown_calls(self) -> tuple[tuple[str, str], ...]:
        """(call ID, tool) of every call the run settled ``ToolUnknownOutcome``."""
        return tuple(self._unknown)

    def request(self, tool_call_id: str) -> ApprovalRequest | None:
        """The last approval request the run recorded for ``tool_call_id``."""
        return self._requests.get(tool_call_id)

    @property
    def pending_decisions(self) -> tuple[str, ...]:
        """The call IDs the run's suspension waits on that have no decision yet, in the order
        they were asked (none when it is not suspended)."""
        if not self._suspended:
            return ()
        return tuple(c for c in self._pending if c not in self._decided)

    def add(self, entry: LogEntry) -> None:
        """Take the next record."""
        self._last_seq = entry.seq
        record: Any = entry.record
        if getattr(record, "run_id", None) != self.run_id:
            return  # not the run's: another run's, or the conversation's own (its creation)
        self._records += 1
        kind = type(record)
        if kind is ToolApprovalDecided:
            self._decided.add(record.tool_call_id)
            return  # a decision does not end a suspension
        if kind.__name__ == "RunSuspendedRecord":
            return  # legacy (an older version marked its suspensions so): says nothing more
        if kind is ToolApprovalRequested:
            # The batch waits on its approvals: its calls are prepared only once they are
            # decided — a durable approval that is not decided at once suspends the run here.
            call_id = record.request.tool_call_id
            self._requests[call_id] = record.request
            if not self._suspended:
                self._pending = []
            if call_id not in self._pending:
                self._pending.append(call_id)
            self._suspended = True
            self._final_answer = False
            return
        if kind is UserInputRecorded and record.input_id in self._watched:
            self._absorbed.add(record.input_id)
        self._suspended = False
        if self._terminal is None:
            terminal = terminal_of(record)
            if terminal is not None:
                self._terminal = terminal
                self._terminal_seq = entry.seq
                self._terminal_record = record
                return
        if kind is ModelResponseRecorded:
            self._responded = True
            self._declared = _calls(record)
            self._prepared = {}
            self._settled = set()
            self._decided = set()
            self._final_answer = not self._declared
        elif kind is ToolCallPrepared:
            self._prepared[record.tool_call_id] = record.tool_name
            self._final_answer = False
        elif kind is ToolCallSettled:
            self._settled.add(record.tool_call_id)
            if record.outcome.kind == "unknown":
                self._unknown.append((record.tool_call_id, record.tool_name))
            self._final_answer = False
        else:
            self._final_answer = False

    def facts(self, undecodable: int | None = None) -> LogFacts:
        """What the records added say (``undecodable``: the sequence number of a record that
        could not be read, which stops the reading)."""
        unsettled = [c for c in self._declared if c[0] not in self._settled]
        return LogFacts(
            records=self._records,
            terminal=self._terminal,
            responded=self._responded,
            suspended=self._suspended,
            undecided=len(self.pending_decisions),
            final_answer=self._final_answer,
            declared=tuple(c for c in unsettled if c[0] not in self._prepared),
            prepared=tuple(c for c in unsettled if c[0] in self._prepared),
            absorbed=bool(self._absorbed),
            undecodable=undecodable,
        )
