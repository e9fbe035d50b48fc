"""Engine-native compaction at the pre-turn seam (RUN-026, CAP-007).

The engine only estimates and asks: when the estimated next context exceeds
``AgentPolicy.context_token_limit`` it hands the Compactor the log, the prompt and a metered
``summarize`` call, appends the records the Compactor returns (compaction adds records; it never
edits or deletes one) and projects the prompt anew from the log — which it returns to the driver.

A summary is model output about the conversation, so it is redacted like every other model output:
the text ``summarize`` gives the Compactor, and the ``summary`` of every record it returns, before
anything is appended.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from functools import partial

import attrs

from effectagent.ai import (
    Message,
    ModelRequest,
    SystemMessage,
    generate,
)
from effectagent.core import AgentPolicy, CompactionPerformed, UsageDelta, project_messages

from ._io import RunIO
from ._media import load_media
from ._model_step import answered_by
from ._seams import CompactionRequest
from ._services import RunServices

__all__ = ["maybe_compact"]

_SUMMARIZE = SystemMessage("Summarize the conversation so far for your own later use.")


async def maybe_compact(
    io: RunIO,
    services: RunServices,
    policy: AgentPolicy,
    messages: Sequence[Message],
    turn: int,
    *,
    estimate: int | None = None,
    force: bool = False,
) -> tuple[tuple[Message, ...] | None, tuple[UsageDelta, ...], str | None]:
    """Compact before ``turn`` when the estimated context exceeds the policy's limit; return the
    new prompt (projected from the log) — None when nothing was compacted — and the usage of
    the summary's model calls, one each, which the run's state machine charges, and what the
    records call the model that made them (``Agent.summary_model``, else the turns' model).

    ``estimate`` is the live-context figure the driver computed (see ``CompactionRequest``);
    without it, the token counter's count of ``messages``. ``force``: the model
    refused the context as too long (``ContextLengthExceeded``) — compact whatever the estimate
    says, asking the Compactor to get below the current estimate at least.

    Cancellation: nothing is appended if cancelled before the Compactor returns; the records it
    returns are appended all or nothing.
    """
    limit = policy.context_token_limit
    compactor = services.compactor
    if compactor is None or (limit is None and not force):
        return None, (), None
    count = services.count_tokens
    if estimate is None:
        estimate = count(messages)
    if force:
        limit = max(1, min(limit or estimate, estimate - 1))
    elif limit is None or estimate <= limit:
        return None, (), None
    started = time.time()
    entries = tuple(await services.log.entries(io.conversation_id))
    redactor = services.redactor
    used: list[UsageDelta] = []
    answered = [services.summary_model_name]  # the summary model, or its member that answered

    async def summarize(
        covered: Sequence[Message], /, *, max_output_tokens: int | None = None
    ) -> str:
        cap = policy.max_output_tokens if max_output_tokens is None else max_output_tokens
        request = ModelRequest((_SUMMARIZE, *covered), tool_choice="none", max_output_tokens=cap)
        response = await generate(
            services.summary_model, request, answered=partial(answered_by, answered)
        )
        price = services.prices.price_for(services.summary_model, answered[0])
        used.append(UsageDelta.from_usage(response.usage, price))
        return redactor.redact_text(response.text)

    records = await compactor.compact(
        CompactionRequest(
            io.conversation_id,
            io.run_id,
            turn,
            entries,
            tuple(messages),
            estimate,
            limit,
            policy.compaction.keep_recent_tokens,
            policy.compaction.strategy,
            summarize,
            count,
        )
    )
    usage = tuple(used)
    if not records:
        return None, usage, answered[0]
    redacted = [
        record
        if record.summary is None
        else attrs.evolve(record, summary=redactor.redact_text(record.summary))
        for record in records
    ]
    await io.record(*redacted)
    history = await services.log.entries(io.conversation_id)
    media = await load_media(services.log, history)  # None (no look-up) for text alone
    compacted = (services.system, *project_messages(history, media))
    last = redacted[-1]
    io.emit(
        CompactionPerformed,
        turn=turn,
        kind=last.kind,
        covers_through=last.covers_through,
        tokens_before=estimate,
        tokens_after=count(compacted),
        started_at=started,
        model=answered[0],
        usage=usage,
    )
    io.logs.info(
        "context compacted",
        kind=last.kind,
        covers_through=last.covers_through,
        tokens_before=estimate,
    )
    return compacted, usage, answered[0]
