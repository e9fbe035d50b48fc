"""Compaction artifacts: summaries made outside the runtime, bound to the log range they cover.

A host may compact on its own — a batch summarizer, a remote service, an operator's tool. What
it hands back crosses a trust boundary, so it is a :class:`CompactionResult` that says exactly
which entries it covers (``covers_from`` to ``covers_through``) and carries a **source digest**
of them (:func:`source_digest`). :func:`verify_artifact` checks it against the log before it is
used and refuses it (:class:`ArtifactRefused`, saying why) when the digest does not match the
log's entries in that range — the host summarized something else — or the range is not one a
compaction may cover.

The digest is SHA-256 over a versioned header and, for every record in the range, its sequence
number, type tag, schema version and body as the SQLite store encodes them
(``capabilities.storage._codec.RecordCodec``) — except compaction records, which are bookkeeping about the
conversation, not part of it (so an artifact still verifies against a copy of the log that lacks
them). A host computes it with this same function.

Operators rebuild compactions from the log: :func:`compaction_artifacts` exports every compaction
the log holds as a verifiable artifact, and :func:`rebuild_compactions` turns artifacts back into
records for a log — each verified first — so that log projects to the same prompt.

Verification rules (tested in ``tests/capabilities/compaction/test_artifacts.py``): the range is
within the log and, for a summary, ends where a cut may (no batch of tool calls straddles
``covers_through``: clearing results never separates a call from its result, summarizing would); it
starts at 1, or right after the summary in force (which the new one must then include); the digest
matches; a summary is text for ``"summarize"`` and absent for ``"clear-tool-results"``; retained
facts point into the range; the token estimate is not negative; the compactor version is given
(and accepted, when the verifier lists the versions it accepts).
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Iterable, Sequence
from typing import Any, Literal, cast

import attrs

from effectagent.core import (
    CompactionCreated,
    LogEntry,
)
from effectagent.effect import TaggedError

from .._rules import strings
from ..storage._codec import RecordCodec
from ._view import _covered, applied, straddled

__all__ = [
    "DIGEST_VERSION",
    "ArtifactRefused",
    "CompactionResult",
    "RetainedFact",
    "accepted_versions",
    "compaction_artifacts",
    "rebuild_compactions",
    "source_digest",
    "summary_text",
    "verify_artifact",
]

#: The version of the digest's encoding (its header); a change would be a new version.
DIGEST_VERSION = "effectagent-compaction-source/1"

#: The version compaction records exported from a log are tagged with.
LOG_VERSION = "effectagent-log"

_CODEC = RecordCodec()


def _text(_: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    if not isinstance(value, str):
        raise TypeError(f"{attribute.name} must be a str, got {type(value).__name__}")


def _optional_text(_: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    if value is not None and not isinstance(value, str):
        raise TypeError(f"{attribute.name} must be a str or None, got {type(value).__name__}")


def _integer(_: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{attribute.name} must be an int, got {type(value).__name__}")


def _sequence(name: str, value: object) -> tuple[object, ...]:
    if isinstance(value, str | bytes) or not isinstance(value, Iterable):
        raise TypeError(f"{name} must be a sequence, got {type(value).__name__}")
    return tuple(value)


def _seqs(value: Iterable[object]) -> tuple[int, ...]:
    found: list[int] = []
    for seq in _sequence("seqs", value):
        if not isinstance(seq, int) or isinstance(seq, bool):
            raise TypeError(f"seqs must be ints, got {type(seq).__name__}")
        found.append(seq)
    return tuple(found)


def _entries(value: object) -> tuple[LogEntry, ...]:
    """The log entries given to a function of this module, checked: a lone value (one entry, a
    str, None) is refused by name rather than failing deep inside with another error."""
    found = _sequence("entries", value)
    for entry in found:
        if not isinstance(entry, LogEntry):
            raise TypeError(f"entries must be LogEntry values, got {type(entry).__name__}")
    return cast(tuple[LogEntry, ...], found)


def _facts(value: Iterable[RetainedFact]) -> tuple[RetainedFact, ...]:
    found = _sequence("retained_facts", value)
    facts = tuple(fact for fact in found if isinstance(fact, RetainedFact))
    if len(facts) != len(found):
        raise TypeError("retained_facts must be RetainedFact values")
    return facts


def _kind(_: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    if value not in ("summarize", "clear-tool-results"):
        raise ValueError(f"{attribute.name} must be 'summarize' or 'clear-tool-results'")


@attrs.frozen
class RetainedFact:
    """A fact a summary keeps verbatim, and the entries (``seqs``) it comes from."""

    text: str = attrs.field(validator=_text)
    seqs: tuple[int, ...] = attrs.field(default=(), converter=_seqs)


@attrs.frozen
class CompactionResult:
    """A compaction made outside the runtime (see the module notes). Field types are checked
    when it is built; whether it fits a log, by :func:`verify_artifact`."""

    covers_from: int = attrs.field(validator=_integer)
    covers_through: int = attrs.field(validator=_integer)
    summary: str | None = attrs.field(validator=_optional_text)
    source_digest: str = attrs.field(validator=_text)
    compactor_version: str = attrs.field(validator=_text)
    retained_facts: tuple[RetainedFact, ...] = attrs.field(default=(), converter=_facts)
    token_estimate: int = attrs.field(default=0, validator=_integer)
    kind: Literal["summarize", "clear-tool-results"] = attrs.field(
        default="summarize", validator=_kind
    )


#: Why an artifact was refused.
Refusal = Literal["range", "cut", "base", "digest", "summary", "facts", "estimate", "version"]


@attrs.frozen
class ArtifactRefused(TaggedError):
    """An artifact that does not fit the log it was checked against; nothing was used."""

    reason: Refusal
    detail: str

    def __str__(self) -> str:
        return f"compaction artifact refused ({self.reason}): {self.detail}"


def source_digest(entries: Iterable[LogEntry]) -> str:
    """The digest of ``entries`` — give exactly the covered range (see the module notes).
    Raises ``TypeError`` unless ``entries`` is a sequence of ``LogEntry`` values."""
    digest = hashlib.sha256(DIGEST_VERSION.encode())
    for entry in _entries(entries):
        if isinstance(entry.record, CompactionCreated):
            continue
        tag, version, body, _ = _CODEC.encode(entry.record)
        digest.update(f"\n{entry.seq}\t{tag}\t{version}\t".encode())
        digest.update(body.encode("utf-8", "surrogatepass"))
    return digest.hexdigest()


def _in_range(entries: Sequence[LogEntry], first: int, last: int) -> list[LogEntry]:
    return [e for e in entries if first <= e.seq <= last]


def accepted_versions(versions: Iterable[str] | None) -> frozenset[str] | None:
    """The compactor versions to accept, checked: None (any), or a frozenset of the str given
    (any iterable of str). A lone str (or bytes) is refused with ``TypeError``: taken as a
    collection, ``"effectagent-log"`` would accept the versions ``"log"`` and ``"e"``. An empty
    or blank version names no compactor: ``ValueError``."""
    if versions is None:
        return None
    found = strings("versions", versions, kind="collection")
    if any(not version.strip() for version in found):
        raise ValueError("each of versions must name a compactor version: got an empty one")
    return frozenset(found)


def verify_artifact(
    entries: Sequence[LogEntry],
    artifact: CompactionResult,
    *,
    versions: Collection[str] | None = None,
) -> None:
    """Check ``artifact`` against the log ``entries`` (the whole conversation, in order); raise
    :class:`ArtifactRefused` saying why it does not fit. ``versions``: the compactor versions
    accepted (None: any); a lone str is refused with ``TypeError`` (see
    :func:`accepted_versions`), as are ``entries`` that are not a sequence of ``LogEntry``
    values. Pure."""
    accepted = accepted_versions(versions)
    entries = _entries(entries)
    if not isinstance(artifact, CompactionResult):
        raise TypeError(f"an artifact is a CompactionResult, got {type(artifact).__name__}")
    last_seq = entries[-1].seq if entries else 0
    first, through = artifact.covers_from, artifact.covers_through
    if not 1 <= first <= through:
        raise ArtifactRefused("range", f"covers {first} to {through}: not a range of entries")
    if through > last_seq:
        raise ArtifactRefused("range", f"covers through {through}, the log ends at {last_seq}")
    if artifact.kind == "summarize" and straddled(entries, through):
        raise ArtifactRefused("cut", f"a tool call before {through} has its result after it")
    summary_through = _covered(entries)[0]
    if first not in (1, summary_through + 1):
        raise ArtifactRefused(
            "base", f"covers from {first}: neither the start nor right after the summary in force"
        )
    if artifact.source_digest != source_digest(_in_range(entries, first, through)):
        raise ArtifactRefused("digest", f"the digest does not match entries {first}-{through}")
    summary = artifact.summary
    if artifact.kind == "summarize" and (summary is None or not summary.strip()):
        raise ArtifactRefused("summary", "a summary must be text")
    if artifact.kind == "clear-tool-results" and summary is not None:
        raise ArtifactRefused("summary", "clearing tool results has no summary")
    for fact in artifact.retained_facts:
        if not fact.text.strip():
            raise ArtifactRefused("facts", "a retained fact must be text")
        if any(not first <= seq <= through for seq in fact.seqs):
            raise ArtifactRefused("facts", f"a retained fact points outside {first}-{through}")
    if artifact.token_estimate < 0:
        raise ArtifactRefused("estimate", f"token estimate {artifact.token_estimate}")
    version = artifact.compactor_version
    if not version or (accepted is not None and version not in accepted):
        raise ArtifactRefused("version", f"compactor version {version!r} is not accepted")


def summary_text(artifact: CompactionResult) -> str | None:
    """The summary a record gets from ``artifact``: its summary and then its retained facts."""
    if artifact.summary is None or not artifact.retained_facts:
        return artifact.summary
    facts = "\n".join(f"- {fact.text}" for fact in artifact.retained_facts)
    return f"{artifact.summary}\n\nFacts to keep:\n{facts}"


def compaction_artifacts(entries: Sequence[LogEntry]) -> tuple[CompactionResult, ...]:
    """Every compaction the log applies, as an artifact covering from entry 1 (export, audit,
    rebuild), in log order. Records the projection ignores (invalid ranges) are left out."""
    entries = _entries(entries)
    found: list[CompactionResult] = []
    for _, rec in applied(entries):
        digest = source_digest(_in_range(entries, 1, rec.covers_through))
        found.append(
            CompactionResult(1, rec.covers_through, rec.summary, digest, LOG_VERSION, kind=rec.kind)
        )
    return tuple(found)


def rebuild_compactions(
    entries: Sequence[LogEntry],
    artifacts: Iterable[CompactionResult],
    *,
    run_id: str = "",
    turn: int = 0,
    at: float = 0.0,
    versions: Collection[str] | None = None,
) -> tuple[CompactionCreated, ...]:
    """The records to append to the log ``entries`` for ``artifacts``, in order — each verified
    against the log with the records before it appended. Raises :class:`ArtifactRefused` for the
    first that does not fit (then nothing is to be appended); ``TypeError`` for ``versions`` as
    :func:`verify_artifact` does, and for ``entries`` or ``artifacts`` that are not sequences of
    ``LogEntry`` and ``CompactionResult`` values (a lone artifact: a one-item list for one)."""
    accepted = accepted_versions(versions)
    given = _sequence("artifacts", artifacts)  # a lone artifact: a one-item list for one
    records: list[CompactionCreated] = []
    log = list(_entries(entries))
    conversation = next(
        (c for e in log if isinstance(c := getattr(e.record, "conversation_id", None), str)), ""
    )
    for item in given:
        if not isinstance(item, CompactionResult):
            raise TypeError(f"artifacts must be CompactionResult values, got {type(item).__name__}")
        artifact = item
        verify_artifact(log, artifact, versions=accepted)
        record = CompactionCreated(
            conversation_id=conversation,
            run_id=run_id,
            turn=turn,
            kind=artifact.kind,
            covers_through=artifact.covers_through,
            summary=summary_text(artifact),
            at=at,
        )
        records.append(record)
        log.append(LogEntry((log[-1].seq if log else 0) + 1, record))
    return tuple(records)
