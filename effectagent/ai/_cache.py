"""Prompt caching: what a request asks the provider to cache. A plain, validated value.

An agent's policy sets it (``AgentPolicy(prompt_caching=PromptCaching())``); the engine sends it
with every request of the agent's runs (``ModelRequest.cache``), and each provider's adapter
maps it to its own form:

* **Anthropic** caches only what a request marks (``cache_control`` breakpoints, at most four a
  request): the system prompt, the tool definitions (the last one, which covers them all) and the
  last ``recent_messages`` messages of the conversation (each on its last block), so the next
  turn reads everything up to the previous turn's last mark from the cache. ``ttl`` is how long
  a mark keeps its entry (five minutes, or an hour at a higher write price).
* **OpenAI** caches every long prompt's prefix on its own; ``key`` is sent as
  ``prompt_cache_key``, which routes the requests that share it to the same cache (agents with
  the same prefix and different keys do not evict each other). No key: none is sent.

The providers report cache reads and writes in their usage (``UsageTotals``'s
``cache_read_input_tokens`` and ``cache_write_input_tokens``), which is how the effect shows.
Caching is off unless a policy asks for it: an Anthropic cache write costs more than the input
it holds (a quarter more for five minutes), so a run that is never continued within the ``ttl``
pays more with it.
"""

from __future__ import annotations

from typing import Any, Literal

import attrs

__all__ = ["MAX_CACHE_MARKS", "PromptCaching"]

#: The most cache breakpoints Anthropic takes in one request.
MAX_CACHE_MARKS = 4


def _flag(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, bool):
        raise TypeError(f"PromptCaching.{attribute.name} must be True or False, got {value!r}")


def _recent(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"PromptCaching.recent_messages must be an int, got {value!r}")
    if value < 0:
        raise ValueError(f"PromptCaching.recent_messages must be at least 0, got {value}")


def _ttl(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if value not in ("5m", "1h"):
        raise ValueError(f"PromptCaching.ttl must be '5m' or '1h', got {value!r}")


def _key(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if value is None:
        return
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"PromptCaching.key must be a non-empty str or None, got {value!r}")


@attrs.frozen
class PromptCaching:
    """What to ask the provider to cache (see the module notes). By default: the system prompt,
    the tools and the last two messages — Anthropic's four marks — for five minutes, and no
    OpenAI cache key. More marks than Anthropic takes (four) are refused here, in a sentence."""

    system: bool = attrs.field(default=True, validator=_flag)
    tools: bool = attrs.field(default=True, validator=_flag)
    recent_messages: int = attrs.field(default=2, validator=_recent)
    ttl: Literal["5m", "1h"] = attrs.field(default="5m", validator=_ttl)
    key: str | None = attrs.field(default=None, validator=_key)

    def __attrs_post_init__(self) -> None:
        marks = self.system + self.tools + self.recent_messages
        if marks > MAX_CACHE_MARKS:
            raise ValueError(
                f"PromptCaching asks for {marks} cache marks (system {int(self.system)}, tools "
                f"{int(self.tools)}, recent messages {self.recent_messages}), but Anthropic "
                f"takes at most {MAX_CACHE_MARKS} a request"
            )
