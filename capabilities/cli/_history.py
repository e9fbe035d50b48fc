"""``effectagent history SEARCH``: the messages of the stored conversations that hold every word
searched for (whole words, any case), newest first.

What a person said (their messages, steering and follow-ups) and what the model answered (its
text) are searched; tool calls, results and reasoning are not. A word is matched as written:
whatever is typed is never query syntax (``OR``, quotes, ``NEAR(``, ``*``, ``-``, ``col:``);
punctuation inside a word separates its parts, which must then follow one another (``e-mail``
finds "e-mail" and "e mail"); a word of punctuation alone is left out, and a search of nothing
else is refused with a sentence (:func:`words_of`).

On the SQLite log the search is the storage's full-text index (``SqliteConversationLog.search``:
every stored conversation is searched, fast). Appends never write the index: a search matches
what was appended since the last one in memory, then indexes it (the first search of a long log
pays for indexing it, once). Newest first is the order the messages were indexed in: each search
indexes what was appended since the one before in the order it was said. A log without an index
(the in-memory one) is scanned instead, conversations newest first, up to :data:`SCAN_RECORDS`
records; :class:`Found` says how many conversations were left unread — or, on the index, how many
messages appended since the last search it could not match (only when another process kept the
database's write lock past its bound, and more were waiting than a search matches in memory).

The matching is pure (:func:`words_of`, :func:`tokens`, :func:`holds`, :func:`excerpt`);
:func:`search` reads.
"""

from __future__ import annotations

import inspect
import unicodedata
from collections.abc import Iterable, Sequence
from typing import Any, Final

import attrs

from capabilities.sessions import SessionStore
from capabilities.storage import SqliteConversationLog
from capabilities.storage._search import SEARCH_WORDS_MOST, word_count
from effectagent.core import LogEntry, ModelResponseRecorded, UserInputRecorded
from effectagent.engine import ConversationLog

from ._common import UsageError
from ._sanitize import visible
from ._sessions import all_sessions

__all__ = [
    "SCAN_RECORDS",
    "Found",
    "Hit",
    "excerpt",
    "holds",
    "said_in",
    "search",
    "tokens",
    "who",
    "words_of",
]

#: The most records one search of a log without an index reads.
SCAN_RECORDS: Final = 200_000

#: Characters of a message shown around the first word found.
EXCERPT: Final = 120

#: Who said a message, by the kind the index and the log give it.
_WHO: Final = {"user": "you", "assistant": "assistant"}


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
    ``conversations`` searched, ``unread`` ones left out by the bound on records a scan reads
    (always 0 with the index), ``unsearched`` messages the index had not caught up with and the
    search could not match (see ``SaidFound.unsearched``; always 0 for a scan)."""

    hits: tuple[Hit, ...]
    conversations: int
    unread: int
    unsearched: int = 0


def _word_char(char: str) -> bool:
    """Whether ``char`` makes words (a letter, a digit, a private use character), as the
    index's ``unicode61`` tokenizer has it; every other character separates words."""
    category = unicodedata.category(char)
    return category[0] in "LN" or category == "Co"


def _spans(text: str) -> list[tuple[int, int]]:
    """Where each word of ``text`` starts and ends."""
    spans: list[tuple[int, int]] = []
    start = -1
    for index, char in enumerate(text):
        if _word_char(char):
            if start < 0:
                start = index
        elif start >= 0:
            spans.append((start, index))
            start = -1
    if start >= 0:
        spans.append((start, len(text)))
    return spans


def tokens(text: str) -> tuple[str, ...]:
    """The words of ``text`` as the index sees them (runs of word characters), lower case."""
    return tuple(text[start:end].lower() for start, end in _spans(text))


def words_of(search: str) -> tuple[str, ...]:
    """The words of ``search`` (split on white space), lower case, those of punctuation alone
    left out. Empty for a blank search; raises :class:`UsageError`, in a sentence, for one of
    punctuation alone (it would match nothing) and for one of more than the storage's
    ``SEARCH_WORDS_MOST`` words (1,000), each part of a word counted (``e-mail`` is two)."""
    split = search.split()
    words = tuple(word.lower() for word in split if tokens(word))
    if split and not words:
        raise UsageError(
            f"there is no word to search for in {visible(search)!r}: history matches words "
            f"(letters and digits), and punctuation alone is none"
        )
    if word_count(words) > SEARCH_WORDS_MOST:
        raise UsageError(
            f"history searches for at most {SEARCH_WORDS_MOST:,} words, each part of a word "
            f"counted (e-mail is two); this search holds more"
        )
    return words


def _find(folded: Sequence[str], phrase: Sequence[str]) -> int:
    """Where ``phrase`` first starts in the words ``folded``, one after another; -1 if not."""
    size = len(phrase)
    if not size:
        return -1
    for index in range(len(folded) - size + 1):
        if tuple(folded[index : index + size]) == tuple(phrase):
            return index
    return -1


def holds(text: str, words: Sequence[str]) -> bool:
    """Whether ``text`` holds every one of ``words`` as whole words, any case (a word with
    punctuation inside: its parts one after another) — what the index matches."""
    folded = tokens(text)
    return all(_find(folded, tokens(word)) >= 0 for word in words if tokens(word))


def excerpt(text: str, words: Sequence[str], width: int = EXCERPT) -> tuple[str, str, str]:
    """A one-line excerpt of ``text`` around the first of ``words`` it holds (as whole words):
    the part before, the word as written, the part after (``…`` where it is cut; white space
    runs made one space)."""
    flat = " ".join(text.split())
    spans = _spans(flat)
    folded = [flat[start:end].lower() for start, end in spans]
    found: list[tuple[int, int]] = []
    for word in words:
        phrase = tokens(word)
        at = _find(folded, phrase)
        if at >= 0:
            found.append((spans[at][0], spans[at + len(phrase) - 1][1]))
    if not found:
        return (flat[:width] + ("…" if len(flat) > width else ""), "", "")
    start, end = min(found)
    room = max(0, width - (end - start))
    lead = min(start, room // 3)
    before = flat[start - lead : start]
    after = flat[end : end + room - lead]
    return (
        ("…" if start - lead > 0 else "") + before,
        flat[start:end],
        after + ("…" if end + len(after) < len(flat) else ""),
    )


def said_in(entries: Iterable[LogEntry]) -> Iterable[tuple[int, str, float, str]]:
    """``(seq, kind, at, text)`` of each message a person wrote (kind ``user``, ``steering`` or
    ``follow-up``) or the model answered with text (``assistant``) — the messages the index
    holds. Pure."""
    for entry in entries:
        record = entry.record
        if isinstance(record, UserInputRecorded):
            if record.kind != "feedback" and record.text:  # feedback: the engine's words
                yield entry.seq, record.kind, record.at, record.text
        elif isinstance(record, ModelResponseRecorded):
            text = "".join(
                value for kind, value in record.content if kind == "text" and isinstance(value, str)
            )
            if text:
                yield entry.seq, "assistant", record.at, text


def who(kind: str) -> str:
    """How a hit names who said it: ``you``, ``you (steering)``, ``assistant``."""
    return _WHO.get(kind, f"you ({kind})")


async def _listed(log: ConversationLog) -> Iterable[str]:
    """Every conversation the log holds, when it can list them (the in-memory log can:
    sessions may have gone, their conversations stay); else none. Cancellation: reads only."""
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
    """The newest ``limit`` messages holding ``words`` (see the module notes); ``budget``
    bounds the records a scan reads (a log without an index).

    Cancellation: as ``SqliteConversationLog.search`` on the index (its catch-up write is
    committed whole or not at all); a scan reads only."""
    sessions = sorted(await all_sessions(store), key=lambda s: s.updated_at, reverse=True)
    order: list[str] = []
    named: dict[str, str] = {}
    for session in sessions:
        for conversation in reversed(session.conversations):
            if conversation not in named:
                named[conversation] = session.name
                order.append(conversation)
    if isinstance(log, SqliteConversationLog):
        found = await log.search(words, limit=limit)
        hits = tuple(
            Hit(s.conversation_id, named.get(s.conversation_id), s.seq, who(s.who), s.at, s.text)
            for s in found.said
        )
        return Found(hits, found.conversations, 0, found.unsearched)
    return await _scan(log, named, order, words, limit, budget)


async def _scan(
    log: ConversationLog,
    named: dict[str, str],
    order: list[str],
    words: Sequence[str],
    limit: int,
    budget: int,
) -> Found:
    """The search of a log without an index: the conversations in ``order`` (then any other
    the log lists), until ``budget`` records were read. Cancellation: reads only."""
    order = order + sorted(set(await _listed(log)) - set(named))
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
        for seq, kind, at, text in said_in(entries):
            if holds(text, words):
                hits.append(Hit(conversation, name, seq, who(kind), at, text))
        if len(hits) > 4 * limit:  # only the newest are kept: memory stays bounded too
            hits.sort(key=lambda hit: (hit.at, hit.seq), reverse=True)
            del hits[limit:]
    hits.sort(key=lambda hit: (hit.at, hit.seq), reverse=True)
    return Found(tuple(hits[:limit]), scanned, len(order) - scanned)
