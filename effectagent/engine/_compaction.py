"""Engine-native compaction at the pre-turn seam (RUN-026, CAP-007).

The engine only estimates and asks: when the estimated next context exceeds
``AgentPolicy.context_token_limit`` it hands the Compactor the log, the prompt and a metered
``summarize`` call, appends the records the Compactor returns (compaction adds records; it never edits
or deletes one) and re-projects the prompt from the log.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from effectagent.ai import Message, ModelRequest, ModelResponse, SystemMessage, generate
from effectagent.core import CompactionPerformed, UsageDelta, project_messages

from ._seams import CompactionRequest

if TYPE_CHECKING:
    from ._run import RunDriver

__all__ = ["estimate_tokens", "maybe_compact"]


def estimate_tokens(messages: list[Message]) -> int:
    """A cheap context estimate: ~4 characters per token over the messages' text and JSON."""
    chars = 0
    for message in messages:
        content = message.content
        if isinstance(content, str):
            chars += len(content)
            continue
        for part in content:
            text = getattr(part, "text", None)
            if text is not None:
                chars += len(text)
            else:
                payload = getattr(part, "result", None) or getattr(part, "arguments", None)
                chars += len(json.dumps(payload, default=str)) if payload is not None else 0
    return chars // 4 + 4 * len(messages)


async def maybe_compact(driver: RunDriver) -> None:
    """Compact at the pre-turn seam when the estimated context exceeds the policy's limit.

    The Compactor returns records; they are appended (never editing the log) and the prompt is
    projected anew from the log. Cancellation: nothing is appended if cancelled before the
    Compactor returns; the summary call is metered into the run's usage.
    """
    policy = driver.agent.policy
    limit = policy.context_token_limit
    compactor = driver.services.compactor
    if limit is None or compactor is None:
        return
    estimate = estimate_tokens(driver.messages)
    if estimate <= limit:
        return
    entries = tuple(await driver.services.log.entries(driver.conversation_id))

    async def summarize(messages: Any) -> str:
        request = ModelRequest(
            (
                SystemMessage("Summarize the conversation so far for your own later use."),
                *messages,
            ),
            tool_choice="none",
        )
        response = await _generate_metered(driver, request)
        return response.text

    records = await compactor.compact(
        CompactionRequest(
            driver.conversation_id,
            driver.run_id,
            driver.turn + 1,
            entries,
            tuple(driver.messages),
            estimate,
            limit,
            policy.compaction.keep_recent_tokens,
            policy.compaction.strategy,
            summarize,
        )
    )
    if not records:
        return
    await driver.record(*records)
    history = await driver.services.log.entries(driver.conversation_id)
    driver.messages = [driver.services.system, *project_messages(history)]
    after = estimate_tokens(driver.messages)
    last = records[-1]
    driver.emit(
        CompactionPerformed, driver.turn + 1, last.kind, last.covers_through, estimate, after
    )


async def _generate_metered(driver: RunDriver, request: ModelRequest) -> ModelResponse:
    """One model call outside the turn loop (the summary), counted in the run's usage."""
    response = await generate(driver.services.model, request)
    driver.budget.record_usage(UsageDelta.from_usage(response.usage))
    return response
