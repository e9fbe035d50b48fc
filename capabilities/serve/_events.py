"""A log entry as the JSON an SSE event carries. Pure (no I/O).

Records are redacted when they are written (the runtime's secrets never reach the log), so the
JSON is the record as stored: ``{"seq", "kind", "record"}``, where ``kind`` is the record's class
name; a tool call's outcome carries its own ``kind`` (``success``, ``unknown``, …) and a failed
run's error its ``tag``.
"""

from __future__ import annotations

from typing import Any

from effectagent.core import LogEntry, RunFailedRecord
from effectagent.effect import encode

__all__ = ["entry_json"]


def entry_json(entry: LogEntry) -> dict[str, Any]:
    """The event data of ``entry``. Pure."""
    record = entry.record
    try:
        body = encode(record)
    except (TypeError, ValueError):  # a value JSON cannot hold: said, not shown
        body = {"unencodable": True}
    if isinstance(body, dict) and isinstance(record, RunFailedRecord) and record.error is not None:
        error = body.get("error")
        body["error"] = {"tag": record.error.tag, **(error if isinstance(error, dict) else {})}
    return {"seq": entry.seq, "kind": type(record).__name__, "record": body}
