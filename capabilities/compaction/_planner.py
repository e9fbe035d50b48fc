"""The compaction planner: what to prune, where to cut, how long a summary may be. Pure.

Given the log (a :class:`LogView`), the messages before it (the system message) and a
:class:`Budget`, :func:`plan_compaction` decides one compaction, or none:

1. **Nothing** when the prompt already fits ``limit`` (or nothing can be covered: the newest unit is
   never covered — the model must see what it answers).
2. **The tail to keep.** The newest ``keep_recent`` tokens stay verbatim: the cut goes after the
   last unit that still leaves at least that much behind it (a cut moves earlier rather than split
   a unit, so a tool call stays with its result).
3. **Prune first**: clear every tool result before that tail (one ``clear-tool-results`` record).
   If the prompt then fits, that is the plan.
4. **Then summarize** (strategy ``"prune-then-summarize"``) everything before the tail, with room
   for a summary of at most ``summary_tokens``. When the kept tail is so large that even then the
   prompt would not fit, the cut moves later — the tail shrinks below ``keep_recent``, never the
   limit's guarantee — to the earliest cut whose tail fits (with the full summary room, else with
   what room is left). With ``"prune-only"`` the same goes for how far results are cleared.

Invariants (tested in ``tests/capabilities/compaction/test_planning.py``):

* a plan's cut is the last seq of a unit: it never separates a tool call from its result;
* the newest unit is never covered; when the keep-recent tail fits, it is kept verbatim;
* the planned prompt fits ``limit`` whenever some cut can make it fit — checked with the exact
  count of the messages the projection will show, not a sum of parts (a counter need not be
  additive); a plan never makes the prompt larger (else there is no plan);
* planning changes nothing: it returns a value.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import attrs

from effectagent.ai import Message
from effectagent.core import CompactionCreated, LogEntry, project_messages

from ._view import Count, LogView

__all__ = [
    "Budget",
    "Plan",
    "fit_summary",
    "plan_compaction",
    "summary_message",
    "summary_tokens",
]

Strategy = Literal["prune-then-summarize", "prune-only"]


@attrs.frozen
class Budget:
    """What the prompt must fit: ``limit`` tokens in all (system message included), the newest
    ``keep_recent`` tokens verbatim, a summary of at most ``summary_tokens``."""

    limit: int
    keep_recent: int
    summary_tokens: int
    strategy: Strategy = "prune-then-summarize"


@attrs.frozen
class Plan:
    """One compaction: a record of ``kind`` covering entries ``<= covers_through``.

    ``tokens_before`` is the prompt's count now; ``tokens_after`` with the compaction — for a
    summary, with the shortest one (:data:`ELIDED`; the summary may take ``summary_room`` more).
    ``covered`` is what a summary replaces (the earlier summary and the covered messages, as the
    prompt shows them), ``kept`` the messages after the cut, verbatim.
    """

    kind: Literal["clear-tool-results", "summarize"]
    covers_through: int
    tokens_before: int
    tokens_after: int
    summary_room: int = 0
    covered: tuple[Message, ...] = ()
    kept: tuple[Message, ...] = ()
    #: What the prompt with its summary must fit: the limit — or, when even the shortest summary
    #: cannot bring it there, just under ``tokens_before`` (a compaction never grows the prompt).
    target: int = 0


#: The shortest summary: what a summary is cut to when no part of it fits. The planner reserves
#: room for it, so a summary record always says that something was left out (an empty one would
#: drop the covered turns without a trace, and could not be exported or rebuilt).
ELIDED = "…"


def summary_message(text: str) -> Message:
    """The message a summary becomes in the prompt (the core projection's own rendering)."""
    record = CompactionCreated(
        conversation_id="",
        run_id="",
        turn=0,
        kind="summarize",
        covers_through=1,
        summary=text,
        at=0.0,
    )
    (message,) = project_messages([LogEntry(2, record)])
    return message


def plan_compaction(view: LogView, system: Sequence[Message], budget: Budget) -> Plan | None:
    """The compaction that brings the prompt within the budget (see the module notes), or None."""
    count, units, limit = view.count, view.units, budget.limit
    before = count([*system, *view.messages()])
    if before <= limit or len(units) < 2:
        return None
    fixed = count(system) if system else 0
    # tails[i]: tokens of the units after a cut after unit i (sums of parts, to search with;
    # every choice is then checked with an exact count).
    tails = [0] * (len(units) + 1)
    for i in range(len(units) - 1, -1, -1):
        tails[i] = tails[i + 1] + units[i].tokens
    last_cut = len(units) - 2
    keep = next((i for i in range(last_cut, -1, -1) if tails[i + 1] >= budget.keep_recent), None)

    kept_from = keep if keep is not None else -1
    pruned = _prune(view, system, kept_from, before)
    if pruned is not None and pruned.tokens_after <= limit:
        return pruned
    if budget.strategy == "prune-only":
        plan = _prune_until(view, system, limit, max(kept_from, 0), before)
        return plan if plan is not None and plan.tokens_after < before else None

    header = count([summary_message(ELIDED)])
    room = limit - fixed - header - budget.summary_tokens
    if keep is not None and tails[keep + 1] <= room:
        cut = keep
    else:
        fitting = [i for i in range(last_cut + 1) if tails[i + 1] <= room]
        if not fitting:
            fitting = [i for i in range(last_cut + 1) if tails[i + 1] <= limit - fixed - header]
        cut = fitting[0] if fitting else last_cut
    plan = _summarize(view, system, limit, cut, before, budget.summary_tokens)
    return plan if plan.tokens_after < before else None


def _prune(view: LogView, system: Sequence[Message], cut: int, before: int) -> Plan | None:
    """Clear every result of units ``<= cut`` (None when that clears nothing new)."""
    if cut < 0 or not any(view.units[i].clearable for i in range(cut + 1)):
        return None
    messages: list[Message] = [*system, *view.summary]
    for i, unit in enumerate(view.units):
        messages.extend(view.cleared(i)[0] if i <= cut else unit.messages)
    return Plan("clear-tool-results", view.units[cut].last, before, view.count(messages))


def _prune_until(
    view: LogView, system: Sequence[Message], limit: int, start: int, before: int
) -> Plan | None:
    """Prune-only: clearing through the earliest cut from ``start`` on that fits — else through
    the latest cut (the most that may be cleared)."""
    units, count = view.units, view.count
    last_cut = len(units) - 2
    fixed = count([*system, *view.summary]) if system or view.summary else 0
    cleared = [0] * (len(units) + 1)  # cleared[i]: the units before i, all cleared (sums)
    for i in range(len(units)):
        cleared[i + 1] = cleared[i] + view.cleared(i)[1]
    kept = [0] * (len(units) + 1)  # kept[i]: the units from i on, as they are (sums)
    for i in range(len(units) - 1, -1, -1):
        kept[i] = kept[i + 1] + units[i].tokens
    best: Plan | None = None
    for cut in range(start, last_cut + 1):
        if fixed + cleared[cut + 1] + kept[cut + 1] > limit and cut < last_cut:
            continue
        plan = _prune(view, system, cut, before)
        if plan is None:
            continue
        best = plan
        if plan.tokens_after <= limit:
            return plan
    return best


def _summarize(
    view: LogView, system: Sequence[Message], limit: int, cut: int, before: int, most: int
) -> Plan:
    """A summary covering units ``<= cut``; the cut moves later while the exact count of the
    prompt (with the shortest summary) does not fit."""
    units, count = view.units, view.count
    last_cut = len(units) - 2
    tails = [0] * (len(units) + 1)
    for i in range(len(units) - 1, -1, -1):
        tails[i] = tails[i + 1] + units[i].tokens
    while True:
        kept = tuple(m for unit in units[cut + 1 :] for m in unit.messages)
        after = count([*system, summary_message(ELIDED), *kept])
        if after <= limit or cut >= last_cut:
            break
        # Over by ``after - limit``: skip at once to the first cut whose tail is that much
        # smaller by the sums (at least one unit), then count exactly again.
        over = after - limit
        cut = next(
            (j for j in range(cut + 1, last_cut + 1) if tails[cut + 1] - tails[j + 1] >= over),
            last_cut,
        )
    covered = tuple(view.summary) + tuple(m for unit in units[: cut + 1] for m in unit.messages)
    target = limit if after <= limit else before - 1
    room = max(0, min(most, target - after))
    return Plan("summarize", units[cut].last, before, after, room, covered, kept, target)


def summary_tokens(text: str, count: Count) -> int:
    """The tokens ``text`` takes as a summary, by ``count``: its message's count less the count
    of the same message with no text (the framing every summary message has)."""
    return count([summary_message(text)]) - count([summary_message("")])


def fit_summary(
    text: str,
    system: Sequence[Message],
    kept: Sequence[Message],
    limit: int,
    count: Count,
    *,
    most: int | None = None,
) -> str:
    """``text``, cut short so that the prompt — ``system``, the summary, ``kept`` — fits
    ``limit`` by the exact count and, when ``most`` is given, the summary itself takes at most
    ``most`` tokens (:func:`summary_tokens`); unchanged when it fits both.

    A cut keeps the longest prefix that fits (a cut on the count's own boundary: one character
    more would not fit), marked by a trailing ``" …"``; when no prefix fits, the summary is
    :data:`ELIDED`, so a record always says that something was left out.
    """

    def fits(candidate: str) -> bool:
        if most is not None and summary_tokens(candidate, count) > most:
            return False
        return count([*system, summary_message(candidate), *kept]) <= limit

    if fits(text):
        return text
    low, high = 0, len(text)  # the longest prefix that fits, by bisection
    while low < high:
        middle = (low + high + 1) // 2
        if fits(text[:middle] + " …"):
            low = middle
        else:
            high = middle - 1
    return text[:low] + " …" if low else ELIDED
