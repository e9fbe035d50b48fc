"""The IDs a response's tool calls end with in a conversation. Pure.

An ID is the conversation's name for a call, in records, results and every later prompt, so it
must be unique in the conversation and show no secret. A call whose ID, as it may be shown
(redacted), differs from its own, or that the conversation used already, gets the shown ID with
the first suffix ``-2``, ``-3``… that neither the conversation nor another call of the response
holds; every other call keeps its ID. The engine names calls by this rule, and the testing kit's
recorder writes the names it gives, so a replayed run names its calls as the recorded one did.
"""

from __future__ import annotations

from collections.abc import Sequence, Set

__all__ = ["fresh_call_ids"]


def fresh_call_ids(ids: Sequence[str], shown: Sequence[str], used: Set[str]) -> list[str]:
    """The final IDs of a response's calls (declared order): ``ids`` are the calls' own,
    ``shown`` each as it may be shown (redacted; the same where nothing is), ``used`` the IDs
    the conversation holds already (see the module notes). Pure."""
    final = list(shown)
    fresh = [
        index
        for index, (own, seen) in enumerate(zip(ids, shown, strict=True))
        if seen != own or seen in used
    ]
    if not fresh:
        return final
    # The IDs that stay as they are are taken too: no fresh ID may collide with one of them.
    renamed = set(fresh)
    stay = {shown[index] for index in range(len(ids)) if index not in renamed}
    taken = set(used)
    counters: dict[str, int] = {}
    for index in fresh:
        base = shown[index]
        n = counters.get(base, 1)
        while True:
            n += 1
            candidate = f"{base}-{n}"
            if candidate not in taken and candidate not in stay:
                break
        counters[base] = n
        final[index] = candidate
        taken.add(candidate)
    return final
