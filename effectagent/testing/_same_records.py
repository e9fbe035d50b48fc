"""The same run, the same records: a run's canonical records with what differs between two runs
of the same conversation normalized away, and an assertion that two runs wrote the same ones.

What is normalized: the identifiers the runtime makes up (a conversation's, a run's, an input's —
``prefix_`` and 16 hex digits, or 32 for those the capabilities make, such as a steering input's)
become ``<conv-1>``, ``<run-1>``, ``<input-1>``… numbered by first
appearance, so that the same ID maps to the same placeholder throughout; so do the digests of an
approval's arguments (``arguments_digest``: keyed by a key random per runtime, so never the same
in two runs), as ``<digest-1>``…; wall-clock times (every
``at``, ``*_at`` and ``deadline`` field) are left out, and so is a run's allowance when it has
none, and its typed input's JSON when it has none (``UserInputRecorded.allowance`` and
``value``: snapshots made before the fields existed still match). What stays: every record, in log order,
with every other field — texts, tool-call IDs (the model's), arguments, outcomes, usage, finish
reasons — so a change in the engine, a tool or a prompt that changes behaviour changes them.

Pure functions over records; no I/O, no Trio.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, final

import attrs

from effectagent.core import LogEntry

from ._diff import MISSING, Ignore, first_difference, render_path, show_value

__all__ = ["RecordsDiffer", "assert_same_records", "canonical_records"]

#: ``prefix_`` and 16 hex digits (the engine's IDs) or 32 (the capabilities', e.g. a steering
#: input's).
_GENERATED_ID = re.compile(r"^([a-z]+)_(?:[0-9a-f]{16}|[0-9a-f]{32})$")


#: Fields records gained after snapshots were first kept, by record class: left out while at
#: their default (None, or an empty tuple), so a snapshot made before them still matches a run that does not use them.
_LEFT_OUT_AT_DEFAULT = frozenset(
    {
        ("UserInputRecorded", "allowance"),
        ("UserInputRecorded", "value"),
        ("UserInputRecorded", "parts"),
        ("ToolSuccess", "media"),
    }
)


#: Fields that hold a digest keyed per runtime (see :meth:`_Normalizer.keyed`).
_KEYED = frozenset({"arguments_digest"})


def _is_time(name: str) -> bool:
    return name == "at" or name.endswith("_at") or name == "deadline"


@final
class _Normalizer:
    def __init__(self) -> None:
        self._names: dict[str, str] = {}
        self._counts: dict[str, int] = {}

    def text(self, value: str) -> str:
        match = _GENERATED_ID.match(value)
        if match is None:
            return value
        known = self._names.get(value)
        if known is None:
            prefix = match.group(1)
            count = self._counts[prefix] = self._counts.get(prefix, 0) + 1
            known = self._names[value] = f"<{prefix}-{count}>"
        return known

    def keyed(self, value: str) -> str:
        """An approval's arguments digest — keyed by a key random per runtime, so two runs of the
        same call never share one — as ``<digest-n>`` by first appearance: a request and its
        decision still name the same digest."""
        known = self._names.get(value)
        if known is None:
            count = self._counts["digest"] = self._counts.get("digest", 0) + 1
            known = self._names[value] = f"<digest-{count}>"
        return known

    def value(self, value: Any) -> Any:
        if value is None or isinstance(value, bool | int):
            return value
        if isinstance(value, float):
            return value if math.isfinite(value) else str(value)
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, Mapping):
            return {str(k): self.value(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self.value(item) for item in value]
        cls = type(value)
        if attrs.has(cls):
            kind = cls.__name__
            out: dict[str, Any] = {"_type": kind}
            for field in attrs.fields(cls):
                if not field.eq or _is_time(field.name):
                    continue
                item = getattr(value, field.name)
                if (item is None or item == ()) and (kind, field.name) in _LEFT_OUT_AT_DEFAULT:
                    continue
                if field.name in _KEYED and isinstance(item, str) and item:
                    out[field.name] = self.keyed(item)
                    continue
                out[field.name] = self.value(item)
            return out
        name = getattr(value, "name", None)
        return f"<{cls.__name__} {name}>" if isinstance(name, str) else f"<{cls.__name__}>"


def canonical_records(entries: Iterable[LogEntry | Any]) -> list[dict[str, Any]]:
    """The canonical form of a run's (or a conversation's) log entries or records: one JSON
    object per record, ``{"record": "<its class>", <its fields>}``, IDs and times normalized
    (see the module notes). JSON-serializable, so it can be kept as a snapshot file."""
    normalizer = _Normalizer()
    out: list[dict[str, Any]] = []
    for entry in entries:
        record = entry.record if isinstance(entry, LogEntry) else entry
        if isinstance(record, Mapping) and "record" in record:  # already canonical
            out.append(dict(record))
            continue
        value = normalizer.value(record)
        if not isinstance(value, dict):
            raise TypeError(f"canonical_records takes log entries or records, got {value!r}")
        name = value.pop("_type")
        out.append({"record": name, **value})
    return out


class RecordsDiffer(AssertionError):
    """Two runs wrote different canonical records; the message names the first differing record
    and field, with both values."""


def assert_same_records(
    expected: Sequence[LogEntry | Any],
    actual: Sequence[LogEntry | Any],
    *,
    ignore: Iterable[str | re.Pattern[str]] = (),
) -> None:
    """Raise :class:`RecordsDiffer` unless ``actual`` wrote the same canonical records as
    ``expected`` (log entries, records, or :func:`canonical_records` output, e.g. a snapshot
    read back from JSON). ``ignore=`` takes the rules a replay takes, paths starting at the list
    of records (``"[*].usage"``, ``"**.text"``)."""
    rules = Ignore.of(ignore)
    recorded, replayed = canonical_records(expected), canonical_records(actual)
    difference = first_difference(recorded, replayed, rules)
    if difference is None:
        return
    path = difference.path
    index = path[0] if path and isinstance(path[0], int) else 0
    side = recorded if index < len(recorded) else replayed
    kind = side[index].get("record", "?") if index < len(side) else "?"
    if len(path) == 1:
        what = "is missing" if difference.received is MISSING else "is one more than recorded"
        headline = f"record {index + 1} ({kind}) {what}"
    else:
        headline = f"record {index + 1} ({kind}) differs, field {render_path(path[1:])}"
    lines = [
        f"the runs wrote different records: {headline}",
        f"  recorded: {show_value(difference.recorded, difference.received)}",
        f"  replayed: {show_value(difference.received, difference.recorded)}",
    ]
    raise RecordsDiffer("\n".join(lines))
