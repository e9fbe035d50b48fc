"""Reasoning that can only be sent back the way the provider produced it.

Anthropic checks a thinking block's ``signature`` (and a redacted block is opaque data), and
OpenAI's Responses API takes reasoning back as its own items (``id``, ``encrypted_content``). The
prompt history the engine keeps holds reasoning as plain text, which neither accepts. So a model
adapter remembers the provider-native blocks of each response that declared tool calls — keyed
by the ID of its first tool call as the adapter streamed it (already new to the conversation the
request carries, so the engine keeps it) — and puts them back in front of that assistant turn
when a later request replays it. That is what a tool loop with extended
thinking needs: the API requires the thinking of the turn whose tool results it is reading.

The memory is per model (per Layer build), in this process, and bounded (oldest first out). A
turn it does not know — another process, a restart, an evicted entry, a response without tool
calls — is sent without its reasoning.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any, final

__all__ = ["ReasoningMemory"]


@final
class ReasoningMemory:
    """Provider-native reasoning blocks by the ID of the first tool call of their response."""

    __slots__ = ("_blocks", "capacity")

    def __init__(self, capacity: int = 1024) -> None:
        if capacity < 1:
            raise ValueError("a ReasoningMemory holds at least one response")
        self.capacity = capacity
        self._blocks: OrderedDict[str, tuple[Mapping[str, Any], ...]] = OrderedDict()

    def remember(self, call_id: str, blocks: Sequence[Mapping[str, Any]]) -> None:
        """Keep ``blocks`` for the response whose first tool call is ``call_id``."""
        if not blocks:
            return
        self._blocks[call_id] = tuple(blocks)
        self._blocks.move_to_end(call_id)
        while len(self._blocks) > self.capacity:
            self._blocks.popitem(last=False)

    def recall(self, call_id: str) -> tuple[Mapping[str, Any], ...]:
        """The blocks remembered for ``call_id`` (empty when none)."""
        return self._blocks.get(call_id, ())

    def __len__(self) -> int:
        return len(self._blocks)
