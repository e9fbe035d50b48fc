"""Token usage as reported by one model call (Effect AI's Usage, cache-aware)."""

from __future__ import annotations

from typing import Any

import attrs

__all__ = ["InputTokens", "OutputTokens", "Usage"]


def _count(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    # A negative count would give a run's token budget back; a float or a bool is no count.
    if type(value) is not int or value < 0:
        raise ValueError(
            f"{type(instance).__name__}.{attribute.name} must be a count of tokens (an int >= 0), "
            f"got {value!r}"
        )


def _part(kind: type) -> Any:
    def check(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
        if not isinstance(value, kind):
            raise TypeError(
                f"Usage.{attribute.name} must be {kind.__name__}, got {type(value).__name__}"
            )

    return check


@attrs.frozen
class InputTokens:
    """Input tokens of one call. ``total`` = ``uncached`` + ``cache_read`` + ``cache_write``
    when a provider reports all parts; providers that report only a total leave the parts 0.
    ``cache_write_long`` is the part of ``cache_write`` written for a long lifetime (Anthropic's
    one-hour entries, ``PromptCaching(ttl="1h")``), which is priced apart."""

    total: int = attrs.field(default=0, validator=_count)
    uncached: int = attrs.field(default=0, validator=_count)
    cache_read: int = attrs.field(default=0, validator=_count)
    cache_write: int = attrs.field(default=0, validator=_count)
    cache_write_long: int = attrs.field(default=0, validator=_count)

    def __attrs_post_init__(self) -> None:
        if self.cache_write_long > self.cache_write:
            raise ValueError(
                f"InputTokens: cache_write_long ({self.cache_write_long}) is part of "
                f"cache_write ({self.cache_write}) and cannot exceed it"
            )


@attrs.frozen
class OutputTokens:
    """Output tokens of one call; ``reasoning`` is the part spent on reasoning."""

    total: int = attrs.field(default=0, validator=_count)
    text: int = attrs.field(default=0, validator=_count)
    reasoning: int = attrs.field(default=0, validator=_count)


@attrs.frozen
class Usage:
    """Usage of one model call. Each count is an int >= 0 (``ValueError`` otherwise, when made:
    a negative count would give a run's token budget back)."""

    input: InputTokens = attrs.field(default=InputTokens(), validator=_part(InputTokens))
    output: OutputTokens = attrs.field(default=OutputTokens(), validator=_part(OutputTokens))

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
        cache_write_long: int = 0,
    ) -> Usage:
        """Totals, with the parts derived: ``input_tokens`` includes the cache reads and writes
        (kept apart; ``cache_write_long``, the long-lived writes, is part of ``cache_write``),
        ``output_tokens`` the reasoning. Parts larger than their total are a ``ValueError`` (they
        would be priced as given)."""
        given = {
            "input_tokens": input_tokens,
            "output_tokens": output_tokens,
            "cache_read": cache_read,
            "cache_write": cache_write,
            "reasoning": reasoning,
            "cache_write_long": cache_write_long,
        }
        for name, value in given.items():
            if type(value) is not int or value < 0:
                raise ValueError(f"Usage.of: {name} must be a count (an int >= 0), got {value!r}")
        if cache_read + cache_write > input_tokens:
            raise ValueError(
                f"Usage.of: cache_read + cache_write ({cache_read + cache_write}) exceed "
                f"input_tokens ({input_tokens})"
            )
        if reasoning > output_tokens:
            raise ValueError(
                f"Usage.of: reasoning ({reasoning}) exceeds output_tokens ({output_tokens})"
            )
        if cache_write_long > cache_write:
            raise ValueError(
                f"Usage.of: cache_write_long ({cache_write_long}) exceeds cache_write "
                f"({cache_write}), of which it is part"
            )
        return Usage(
            InputTokens(
                total=input_tokens,
                uncached=max(0, input_tokens - cache_read - cache_write),
                cache_read=cache_read,
                cache_write=cache_write,
                cache_write_long=cache_write_long,
            ),
            OutputTokens(
                total=output_tokens, text=max(0, output_tokens - reasoning), reasoning=reasoning
            ),
        )
