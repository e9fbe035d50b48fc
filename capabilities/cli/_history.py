"""``effectagent history SEARCH``: the messages of the stored conversations that hold every word
searched for (case-insensitive), newest first.

A bounded scan, not an index: SQLite's full-text search (FTS5) needs a table of its own that the
storage layout does not have yet. The conversations are read newest first — those of the sessions
by their last update, then any other the log holds (a deleted session's conversations stay in
the log) — and the scan stops once it has read :data:`SCAN_RECORDS` records (the conversation it
was reading is read to its end); :class:`Found` says how many conversations were left unread. What a person said (their messages,
steering and follow-ups) and what the model answered (its text) are searched; tool calls,
results and reasoning are not.

The matching is pure (:func:`words_of`, :func:`holds`, :func:`excerpt`); :func:`search` reads.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterable, Sequence
from typing import Any, Final

import attrs

from capabilities.sessions import SessionStore
from effectagent.core import LogEntry, ModelResponseRecorded, UserInputRecorded
from effectagent.engine import ConversationLog

from ._sessions import all_sessions

__all__ = ["SCAN_RECORDS", "Found", "Hit", "excerpt", "holds", "said_in", "search", "words_of"]

#: The most records one search reads.
SCAN_RECORDS: Final = 200_000

#: Characters of a message shown around the first word found.
EXCERPT: Final = 120


@attrs.frozen
class Hit:
    """One message that holds the words: where (conversation, its session's name if one points
    to it, the record's place in the log), who said it, when, and what."""

    conversation_id: str
    session: str | None
    seq: int
    who: str
    at: float
    text: str


@attrs.frozen
class Found:
    """What a search found (newest first, at most the limit asked) and how far it read:
    ``unread`` conversations were left out by the bound on records read."""

    hits: tuple[Hit, ...]
    conversations: int
    unread: int


def words_of(search: str) -> tuple[str, ...]:
    """The words of ``search`` (split on white space), case-folded; empty when it has none."""
    return tuple(word.casefold() for word in search.split())


def holds(text: str, words: Sequence[str]) -> bool:
    """Whether ``text`` holds every one of ``words`` (case-folded), anywhere."""
    folded = text.casefold()
    return all(word in folded for word in words)


def excerpt(text: str, words: Sequence[str], width: int = EXCERPT) -> tuple[str, str, str]:
    """A one-line excerpt of ``text`` around the first of ``words`` it holds: the part before,
    the word as written, the part after (``…`` where it is cut; white space runs made one
    space)."""
    flat = " ".join(text.split())
    folded = flat.casefold()
    found = [(folded.find(word), word) for word in words if word and word in folded]
    if not found:
        return (flat[:width] + ("…" if len(flat) > width else ""), "", "")
    start, word = min(found)
    end = start + len(word)
    room = max(0, width - len(word))
    lead = min(start, room // 3)
    before = flat[start - lead : start]
    after = flat[end : end + room - lead]
    return (
        ("…" if start - lead > 0 else "") + before,
        flat[start:end],
        after + ("…" if end + len(after) < len(flat) else ""),
    )


def said_in(entries: Iterable[LogEntry]) -> Iterable[tuple[int, str, float, str]]:
    """``(seq, who, at, text)`` of each message a person wrote or the model answered with text.
    Pure."""
    for entry in entries:
        record = entry.record
        if isinstance(record, UserInputRecorded):
            if record.kind != "feedback":  # the engine's word to the model
                who = "you" if record.kind == "user" else f"you ({record.kind})"
                yield entry.seq, who, record.at, record.text
        elif isinstance(record, ModelResponseRecorded):
            text = "".join(value for kind, value in record.content if kind == "text" and value)
            if text.strip():
                yield entry.seq, "assistant", record.at, text


async def _listed(log: ConversationLog) -> Iterable[str]:
    """Every conversation the log holds, when it can list them (the SQLite log and the
    in-memory one can: sessions may have gone, their conversations stay); else none.
    Cancellation: reads only."""
    listing = getattr(log, "conversations", None)
    if not callable(listing):
        return ()
    listed = listing()
    if inspect.isawaitable(listed):
        listed = await listed
    return [item for item in listed if isinstance(item, str)]


async def search(
    log: ConversationLog,
    store: SessionStore[Any],
    words: Sequence[str],
    *,
    limit: int,
    budget: int = SCAN_RECORDS,
) -> Found:
    """The newest ``limit`` messages holding ``words`` (see the module notes).

    Cancellation: reads only; nothing changes."""
    sessions = sorted(await all_sessions(store), key=lambda s: s.updated_at, reverse=True)
    order: list[str] = []
    named: dict[str, str] = {}
    for session in sessions:
        for conversation in reversed(session.conversations):
            if conversation not in named:
                named[conversation] = session.name
                order.append(conversation)
    order += sorted(set(await _listed(log)) - set(named))
    hits: list[Hit] = []
    read = 0
    scanned = 0
    for conversation in order:
        if read >= budget:
            break
        entries = await log.entries(conversation)
        read += len(entries)
        scanned += 1
        name = named.get(conversation)
        for seq, who, at, text in said_in(entries):
            if holds(text, words):
                hits.append(Hit(conversation, name, seq, who, at, text))
        if len(hits) > 4 * limit:  # only the newest are kept: memory stays bounded too
            hits.sort(key=lambda hit: (hit.at, hit.seq), reverse=True)
            del hits[limit:]
    hits.sort(key=lambda hit: (hit.at, hit.seq), reverse=True)
    return Found(tuple(hits[:limit]), scanned, len(order) - scanned)
