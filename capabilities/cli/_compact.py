"""``/compact``: the configured compactor, now, on the chat's conversation.

The engine compacts on its own before a turn whose context would pass the agent's
``context_token_limit`` (``[compaction] context_tokens`` in the config). ``/compact`` asks the
same compactor at once, as the engine does when a model refuses a context as too long: with a
limit just below the conversation's estimated size, so that the compactor does what it would do
anyway — clears old tool results, or summarizes everything before the newest
``keep_recent_tokens`` (kept word for word) — with room for the summary call. The conversation's
log and its prompt go in, with a summary call to the chat's model; the records the compactor
returns are redacted and appended to the log, which is never edited. The next run's prompt is
projected from them. A conversation no longer than what compaction keeps (the system message,
the newest ``keep_recent_tokens``, one summary) is left as it is.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from typing import Final

import attrs

from effectagent import Agent
from effectagent.ai import LanguageModel, Message, ModelRequest, SystemMessage, generate
from effectagent.core import (
    CompactionCreated,
    Redactor,
    UsageDelta,
    UsageTotals,
    project_messages,
)
from effectagent.engine import CompactionRequest, Compactor, ConversationLog, TokenCounter

__all__ = ["Compacted", "compact_now", "compaction_limit"]

_SUMMARIZE: Final = SystemMessage("Summarize the conversation so far for your own later use.")


@attrs.frozen
class Compacted:
    """What ``/compact`` did: ``kind`` is ``"summarize"`` or ``"clear-tool-results"`` (None:
    nothing to compact), the estimated context before and after, and the summary calls' usage."""

    kind: str | None
    tokens_before: int
    tokens_after: int
    usage: UsageTotals = attrs.field(factory=UsageTotals)


def compaction_limit(system_tokens: int, keep_recent: int, summary: int) -> int:
    """The most a compaction leaves: the system message, the newest ``keep_recent`` tokens and
    one summary of at most ``summary`` tokens — a conversation this short has nothing to
    compact. Pure."""
    return system_tokens + keep_recent + summary


async def compact_now(
    log: ConversationLog,
    conversation_id: str,
    agent: Agent,
    *,
    compactor: Compactor,
    model: LanguageModel,
    redactor: Redactor,
    count: TokenCounter | None = None,
    summary_tokens: int,
) -> Compacted:
    """Compact ``conversation_id`` now (see the module notes); ``count`` is the token counter
    (None: the engine's estimate).

    Cancellation: nothing is appended if cancelled before the compactor returns; the records it
    returns are appended all or nothing.
    """
    from effectagent.engine import estimate_tokens

    measure = count.count if count is not None else estimate_tokens
    entries = tuple(await log.entries(conversation_id))
    instructions = agent.instructions  # a function's are the run's own: not known here
    system = SystemMessage(instructions if isinstance(instructions, str) else "")
    messages = (system, *project_messages(entries))
    before = measure(messages)
    policy = agent.policy.compaction
    kept = compaction_limit(measure([system]), policy.keep_recent_tokens, summary_tokens)
    if before <= kept:
        return Compacted(None, before, before)
    limit = before - 1  # as the engine's forced compaction: whatever the compactor can do
    used: list[UsageDelta] = []

    async def summarize(
        covered: Sequence[Message], /, *, max_output_tokens: int | None = None
    ) -> str:
        request = ModelRequest(
            (_SUMMARIZE, *covered), tool_choice="none", max_output_tokens=max_output_tokens
        )
        response = await generate(model, request)
        used.append(UsageDelta.from_usage(response.usage))
        return redactor.redact_text(response.text)

    run_id = f"compact-{secrets.token_hex(8)}"  # made by no run: a person asked for it
    records = await compactor.compact(
        CompactionRequest(
            conversation_id,
            run_id,
            0,
            entries,
            messages,
            before,
            limit,
            policy.keep_recent_tokens,
            policy.strategy,
            summarize,
            measure,
        )
    )
    usage = UsageTotals()
    for delta in used:
        usage = usage.add(delta)
    if not records:
        return Compacted(None, before, before, usage)
    redacted: list[CompactionCreated] = [
        record
        if record.summary is None
        else attrs.evolve(record, summary=redactor.redact_text(record.summary))
        for record in records
    ]
    await log.append(conversation_id, redacted)
    after = measure((system, *project_messages(await log.entries(conversation_id))))
    return Compacted(redacted[-1].kind, before, after, usage)
