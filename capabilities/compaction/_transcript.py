"""What the summarizing model call is given: the covered messages as one plain-text transcript,
bounded. Pure.

Sending the covered messages as they are would not work everywhere: a provider may refuse tool
calls and results in a request that declares no tools (the summary request declares none), or two
user messages in a row. A transcript is one user message any provider takes. It is bounded so the
summary request itself fits the context: each tool argument or result is cut to its head and tail
(``max_item_chars``), and when the whole still exceeds the budget the oldest blocks are left out
(an earlier summary, which stands for all of them, is kept first), with a line saying how many.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from effectagent.ai import (
    AssistantMessage,
    Message,
    SystemMessage,
    TextContent,
    ToolCallContent,
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


def _cut(text: str, most: int) -> str:
    if len(text) <= most:
        return text
    half = max(1, most // 2)
    return f"{text[:half]} …[{len(text) - 2 * half} characters left out]… {text[-half:]}"


def _json(value: Any, most: int) -> str:
    try:
        text = value if isinstance(value, str) else compact_json(value)
    except (TypeError, ValueError):
        text = repr(value)
    return _cut(text, most)


def _block(message: Message, most: int) -> str:
    if isinstance(message, SystemMessage):
        return f"System: {_cut(message.content, most)}"
    if isinstance(message, UserMessage):
        text = "".join(part.text for part in message.content)
        if text.startswith(_SUMMARY_PREFIX):
            return f"Summary of what came before:\n{text[len(_SUMMARY_PREFIX) :]}"
        return f"User: {_cut(text, most)}"
    if isinstance(message, AssistantMessage):
        lines = []
        for part in message.content:
            if isinstance(part, ToolCallContent):
                lines.append(f"Assistant called {part.name}({_json(part.arguments, most)})")
            elif isinstance(part, TextContent) and part.text:
                lines.append(f"Assistant: {_cut(part.text, most)}")
        return "\n".join(lines)
    lines = []
    for result in message.content:
        outcome = "failed" if result.is_failure else "returned"
        lines.append(f"{result.name} {outcome}: {_json(result.result, most)}")
    return "\n".join(lines)


def transcript(
    messages: Sequence[Message], count: Count, budget: int, *, max_item_chars: int = 2000
) -> str:
    """The transcript of ``messages`` (see the module notes), its user message within ``budget``
    tokens by ``count`` whenever its last block alone fits."""
    blocks = [b for b in (_block(m, max_item_chars) for m in messages) if b]
    if not blocks:
        return ""
    keep_first = bool(blocks) and blocks[0].startswith("Summary of what came before:")
    sizes = [count([UserMessage.text(block)]) for block in blocks]
    first = 1 if keep_first else 0
    total = sum(sizes)
    start = first
    while start < len(blocks) - 1 and total > budget:
        total -= sizes[start]
        start += 1
    chosen = blocks[:first] + blocks[start:]
    if start > first:
        chosen.insert(first, f"[{start - first} earlier parts of the conversation left out]")
    text = "\n\n".join(chosen)
    while start < len(blocks) - 1 and count([UserMessage.text(text)]) > budget:
        start += 1  # the sum of the parts undercounted the whole: leave out one more
        chosen = [*blocks[:first], f"[{start - first} earlier parts left out]", *blocks[start:]]
        text = "\n\n".join(chosen)
    return text
