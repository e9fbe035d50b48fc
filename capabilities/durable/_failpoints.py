"""Failpoints: a process that kills itself at a named crash point, for the kill tests.

``EFFECTAGENT_FAILPOINT=after-prepare`` makes the process send itself ``SIGKILL`` the first time
it crosses the crash point ``after-prepare`` (``after-prepare@3``: the third time). The names are
the classifier's crash points (``_classifier.CRASH_POINTS``). The durable runtime crosses them in
its own code (admission, claim, settlement, decisions, joins) and, for the engine's records, in
its log, once per append (see :func:`crossed_by`: ``after-run-start`` once a run's input is
appended, ``after-model-response`` once a
response with tool calls is, ``after-prepare``, ``after-settle``, ``after-final-answer``,
``after-suspend`` once approval requests are and one of them has no decision in the same append
(the requests a durable approval suspends on: no record marks a suspension),
``after-terminal-record``, and ``after-join`` once steering — a joined submission's input among
it — is); ``in-handler`` is crossed by whoever calls
:func:`failpoint` inside a tool handler (a test's tool does, after its side effect).

Without the variable, :func:`failpoint` is one comparison. Never set it in production.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Sequence
from typing import Final

from effectagent.core import (
    ModelResponseRecorded,
    Record,
    RunCompletedRecord,
    RunFailedRecord,
    ToolApprovalDecided,
    ToolApprovalRequested,
    ToolCallPrepared,
    ToolCallSettled,
    UserInputRecorded,
)

__all__ = ["FAILPOINT_ENV", "crossed_by", "failpoint"]

#: The environment variable that names the failpoint.
FAILPOINT_ENV: Final = "EFFECTAGENT_FAILPOINT"


def _parse(value: str | None) -> tuple[str, int] | None:
    if not value:
        return None
    name, _, count = value.partition("@")
    return name, int(count) if count.isdigit() and int(count) > 0 else 1


_armed = _parse(os.environ.get(FAILPOINT_ENV))
_crossings = 0


def failpoint(name: str) -> None:
    """Cross the crash point ``name``: if the process is armed with it (and this is the
    crossing it counts to), it kills itself with ``SIGKILL`` here — no cleanup, no flush, as a
    power cut or the OOM killer would."""
    global _crossings
    if _armed is None or _armed[0] != name:
        return
    _crossings += 1
    if _crossings >= _armed[1]:
        os.kill(os.getpid(), signal.SIGKILL)


def _point(record: Record) -> str | None:
    kind = type(record)
    if kind is UserInputRecorded:
        if record.kind == "user":  # type: ignore[union-attr]
            return "after-run-start"
        return "after-join" if record.kind == "steering" else None  # type: ignore[union-attr]
    if kind is ModelResponseRecorded:
        calls = any(k == "tool-call" for k, _ in record.content)  # type: ignore[union-attr]
        return "after-model-response" if calls else "after-final-answer"
    if kind is ToolCallPrepared:
        return "after-prepare"
    if kind is ToolCallSettled:
        return "after-settle"
    if kind is RunCompletedRecord or kind is RunFailedRecord:
        return "after-terminal-record"
    return None


def crossed_by(records: Sequence[Record]) -> str | None:
    """The crash point an append of ``records`` crosses once it is written: that of its last
    record that marks one (an append is one durable step; what it leaves is what its last
    record says). Pure.

    The engine appends a model response together with what follows it — its calls'
    preparations, a batch's settlements, the run's terminal record — so with it
    ``after-model-response`` and ``after-final-answer`` are crossed only by a response that
    nothing follows in the same append (an answer then feedback, say); the classifier still
    decides those states, which a log written otherwise may hold."""
    found: str | None = None
    undecided: set[str] = set()
    for record in records:
        if type(record) is ToolApprovalRequested:
            undecided.add(record.request.tool_call_id)
        elif type(record) is ToolApprovalDecided:
            undecided.discard(record.tool_call_id)
        else:
            point = _point(record)
            if point is not None:
                found = point
                undecided.clear()  # what comes after the requests: the batch went on
    # Requests left without a decision at the append's end: the run suspends on them.
    return "after-suspend" if undecided else found
