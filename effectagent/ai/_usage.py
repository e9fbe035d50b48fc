"""Token usage as reported by one model call (Effect AI's Usage, cache-aware)."""

from __future__ import annotations

import attrs

__all__ = ["InputTokens", "OutputTokens", "Usage"]


@attrs.frozen
class InputTokens:
    """Input tokens of one call. ``total`` = ``uncached`` + ``cache_read`` + ``cache_write``
    when a provider reports all parts; providers that report only a total leave the parts 0."""

    total: int = 0
    uncached: int = 0
    cache_read: int = 0
    cache_write: int = 0


@attrs.frozen
class OutputTokens:
    """Output tokens of one call; ``reasoning`` is the part spent on reasoning."""

    total: int = 0
    text: int = 0
    reasoning: int = 0


@attrs.frozen
class Usage:
    """Usage of one model call."""

    input: InputTokens = InputTokens()
    output: OutputTokens = OutputTokens()

    @property
    def total_tokens(self) -> int:
        """Input plus output tokens."""
        return self.input.total + self.output.total

    @staticmethod
    def of(
        input_tokens: int,
        output_tokens: int,
        *,
        cache_read: int = 0,
        cache_write: int = 0,
        reasoning: int = 0,
    ) -> Usage:
        """Totals, with the parts derived: ``input_tokens`` includes the cache reads and writes
        (kept apart), ``output_tokens`` the reasoning."""
        return Usage(
            InputTokens(
                total=input_tokens,
                uncached=max(0, input_tokens - cache_read - cache_write),
                cache_read=cache_read,
                cache_write=cache_write,
            ),
            OutputTokens(
                total=output_tokens, text=max(0, output_tokens - reasoning), reasoning=reasoning
            ),
        )
