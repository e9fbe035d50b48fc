"""The scripted model behind a simulated provider prompt cache.

:class:`ScriptedModel` plays the story; :class:`PromptCachingModel` reports each call's input the
way a provider with automatic prompt caching does: the request's size (the engine's estimate of
its messages), of which the prefix it shares with the previous request of the same agent (the
same system prompt) was read from the cache and the rest written to it. A compaction changes the
prefix, so the next call reads less from the cache — as with a real provider.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator

import attrs

from effectagent.ai import (
    FinishPart,
    LanguageModelService,
    Message,
    ModelRequest,
    ModelResponse,
    ResponsePart,
    Usage,
    close_stream,
    generate,
)
from effectagent.effect import Layer
from effectagent.engine import estimate_tokens
from effectagent.testing import ScriptedModel

__all__ = ["PromptCachingModel"]


@attrs.define
class PromptCachingModel:
    """``model`` with cache-aware usage (see the module notes); a LanguageModel."""

    model: ScriptedModel
    _previous: dict[str, tuple[Message, ...]] = attrs.field(factory=dict, init=False)

    def layer(self) -> Layer:
        """This model as the runtime's LanguageModel service."""
        return Layer.succeed(LanguageModelService, self, name="ScriptedModel+prompt-cache")

    def stream(self, request: ModelRequest) -> AsyncIterator[ResponsePart]:
        """The scripted turn's parts, its usage rewritten. Cancellation: as the script's."""
        return self._stream(request)

    async def generate(self, request: ModelRequest) -> ModelResponse:
        """The whole response."""
        return await generate(self, request)

    def usage(self, request: ModelRequest, reported: Usage) -> Usage:
        """``reported`` with the input split into cache reads and writes."""
        messages = request.messages
        agent = repr(messages[0]) if messages else ""  # the system prompt tells agents apart
        previous = self._previous.get(agent, ())
        self._previous[agent] = messages
        shared = 0
        for old, new in zip(previous, messages, strict=False):
            if old != new:
                break
            shared += 1
        total = estimate_tokens(messages)
        read = estimate_tokens(messages[:shared]) if shared else 0
        return Usage.of(
            total,
            reported.output.total,
            cache_read=read,
            cache_write=total - read,
            reasoning=reported.output.reasoning,
        )

    async def _stream(self, request: ModelRequest) -> AsyncGenerator[ResponsePart, None]:
        parts = self.model.stream(request)  # any AsyncIterator: close_stream closes what it can
        try:
            async for part in parts:
                if isinstance(part, FinishPart):
                    part = FinishPart(part.reason, self.usage(request, part.usage))
                yield part
        finally:
            await close_stream(parts)
