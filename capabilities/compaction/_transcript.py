"""What the summarizing model call is given: the covered messages as one plain-text transcript,
bounded. Pure.

Sending the covered messages as they are would not work everywhere: a provider may refuse tool
calls and results in a request that declares no tools (the summary request declares none), or two
user messages in a row. A transcript is one user message any provider takes.

It is made of **parts**: the earlier summary, a user's text, an assistant's text, and each tool
call *together with its result* (the result's line right under the call's) — so no cut of the
transcript separates a call from its result. It is bounded so that the summary request itself fits
the context, in three steps, each taken only when the one before is not enough:

1. each text, tool argument and result is cut to its head and tail (``max_item_chars``);
2. the oldest parts are left out, as few as fit, with a line saying how many — the earlier
   summary, which stands for everything before, and the newest part are kept;
3. every part still there is cut shorter, the same number of characters for all (found by
   bisection on the exact count) — an earlier summary too long to fit is cut like the others: its
   head and tail stay, and the middle is replaced by a marker saying how much was left out; if even
   the shortest cut does not fit, the earlier summary is left out too, then the newest part alone
   is cut.

When not even the newest part, cut to its shortest, fits the budget, the transcript is empty: the
caller then has nothing it can send within the limit.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import attrs

from effectagent.ai import (
    AssistantMessage,
    Message,
    SystemMessage,
    TextContent,
    ToolCallContent,
    ToolMessage,
    ToolResultContent,
    UserMessage,
)
from effectagent.core import compact_json

from ._planner import summary_message
from ._view import Count

__all__ = ["SUMMARY_INSTRUCTIONS", "transcript"]

#: What the summarizer is asked for (before the transcript).
SUMMARY_INSTRUCTIONS = (
    "Summarize the conversation transcript below so that you can carry on the conversation from "
    "the summary alone. Keep: what the user asked for and still wants; decisions made and why; "
    "facts learned from tools (names, paths, identifiers, numbers) that later turns may need; what "
    "was done and what remains. Leave out pleasantries and anything superseded. Answer with the "
    "summary only, in at most {words} words."
)

_SUMMARY_PREFIX = "".join(
    part.text for part in summary_message("").content if isinstance(part, TextContent)
)
_EARLIER = "Summary of what came before:\n"


@attrs.frozen
class _Line:
    """One line of a part: ``payload`` is what a cut shortens, between fixed text."""

    before: str
    payload: str
    after: str = ""


@attrs.frozen
class _Part:
    lines: tuple[_Line, ...]
    earlier_summary: bool = False

    def render(self, most: int) -> str:
        return "\n".join(
            f"{line.before}{_cut(line.payload, most)}{line.after}" for line in self.lines
        )


def _cut(text: str, most: int) -> str:
    if len(text) <= most:
        return text
    half = max(1, most // 2)
    return f"{text[:half]} …[{len(text) - 2 * half} characters left out]… {text[-half:]}"


def _json(value: Any) -> str:
    try:
        return value if isinstance(value, str) else compact_json(value)
    except (TypeError, ValueError):
        return repr(value)


def _result(result: ToolResultContent) -> _Line:
    outcome = "failed" if result.is_failure else "returned"
    return _Line(f"{result.name} {outcome}: ", _json(result.result))


def _parts(messages: Sequence[Message]) -> list[_Part]:
    """The parts of ``messages`` (see the module notes), oldest first."""
    parts: list[_Part] = []
    answered: set[int] = set()  # tool messages whose results went with their calls
    for index, message in enumerate(messages):
        if isinstance(message, SystemMessage):
            parts.append(_Part((_Line("System: ", message.content),)))
        elif isinstance(message, UserMessage):
            text = "".join(  # a media part reads as its description: [image: cat.png, 12 KiB]
                part.text if isinstance(part, TextContent) else part.describe()
                for part in message.content
            )
            if text.startswith(_SUMMARY_PREFIX):
                line = _Line(_EARLIER, text[len(_SUMMARY_PREFIX) :])
                parts.append(_Part((line,), earlier_summary=not parts))
            else:
                parts.append(_Part((_Line("User: ", text),)))
        elif isinstance(message, AssistantMessage):
            following = messages[index + 1] if index + 1 < len(messages) else None
            results: dict[str, ToolResultContent] = {}
            if isinstance(following, ToolMessage):
                results = {result.id: result for result in following.content}
                answered.add(index + 1)
            for part in message.content:
                if isinstance(part, ToolCallContent):
                    call = _Line(f"Assistant called {part.name}(", _json(part.arguments), ")")
                    result = results.pop(part.id, None)
                    lines = (call,) if result is None else (call, _result(result))
                    parts.append(_Part(lines))
                elif isinstance(part, TextContent) and part.text:
                    parts.append(_Part((_Line("Assistant: ", part.text),)))
            parts.extend(_Part((_result(result),)) for result in results.values())
        elif index not in answered:  # results whose calls are not in the transcript
            parts.extend(_Part((_result(result),)) for result in message.content)
    return parts


def transcript(
    messages: Sequence[Message],
    count: Count,
    budget: int,
    *,
    max_item_chars: int = 2000,
    head: str = "",
) -> str:
    """The transcript of ``messages`` (see the module notes): the user message ``head`` followed
    by it is within ``budget`` tokens by ``count`` — or, when not even the newest part cut to its
    shortest fits, the transcript is empty."""
    parts = _parts(messages)
    if not parts:
        return ""
    first = 1 if parts[0].earlier_summary else 0
    last = len(parts) - 1

    def compose(start: int, most: int, *, earlier: bool = True) -> str:
        chosen = [part.render(most) for part in parts[start:]]
        left_out = start - first + (0 if earlier or not first else 1)
        if left_out:
            parts_left = f"{left_out} earlier part" + ("s" if left_out > 1 else "")
            chosen.insert(0, f"[{parts_left} of the conversation left out]")
        if earlier and first:
            chosen.insert(0, parts[0].render(most))
        return "\n\n".join(chosen)

    def fits(text: str) -> bool:
        return count([UserMessage.text(head + text)]) <= budget

    # 2. Leave out the oldest parts: a first guess by the sum of their counts, then the exact
    # count decides (a counter need not be additive: a sum of parts counted one by one may be
    # more than the whole, or less) — forward until one fits, then back to the fewest left out.
    sizes = [count([UserMessage.text(part.render(max_item_chars))]) for part in parts]
    total, start = sum(sizes), first
    while start < last and total > budget:
        total -= sizes[start]
        start += 1
    text = compose(start, max_item_chars)
    while start < last and not fits(text):
        start += 1
        text = compose(start, max_item_chars)
    if fits(text):
        # The fewest parts left out. Whole, if it fits; else the earliest start that fits, by
        # bisection (``start`` fits) — leaving parts out adds the line saying so, and past it
        # each part left out makes the transcript shorter.
        if start > first and fits(whole := compose(first, max_item_chars)):
            return whole
        low = first  # stands for a start that does not fit
        while start - low > 1:
            middle = (low + start) // 2
            candidate = compose(middle, max_item_chars)
            if fits(candidate):
                start, text = middle, candidate
            else:
                low = middle
        return text
    # 3. Cut every part still there shorter, the same for all; then without the earlier summary.
    for earlier in (True, False) if first else (False,):
        if not earlier and start > last:
            break  # nothing but the earlier summary was there to keep

        def cut_fits(most: int, earlier: bool = earlier) -> bool:
            return fits(compose(start, most, earlier=earlier))

        most = _longest_cut(cut_fits, max_item_chars)
        if most is not None:
            return compose(start, most, earlier=earlier)
    return ""


def _longest_cut(fits: Callable[[int], bool], most: int) -> int | None:
    """The largest cut in ``0..most`` for which ``fits(cut)`` holds (by bisection), or None."""
    if not fits(0):
        return None
    low, high = 0, most
    while low < high:
        middle = (low + high + 1) // 2
        if fits(middle):
            low = middle
        else:
            high = middle - 1
    return low
