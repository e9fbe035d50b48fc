"""Token counters for the engine's ``TokenCounterService``: a real tokenizer, plugged in.

The engine's default counter is a fast estimate (about four characters a token). A deployment that
has the model's tokenizer — ``tiktoken``'s ``Encoding.encode``, a Hugging Face tokenizer's
``encode`` — counts exactly with :class:`TokenizerCounter`, which takes any function from text to
tokens, so nothing here depends on a tokenizer package.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Sequence, Sized
from typing import Any, final

from effectagent.ai import (
    Message,
    ReasoningContent,
    SystemMessage,
    TextContent,
    ToolCallContent,
    ToolResultContent,
)
from effectagent.effect import Layer
from effectagent.engine import TokenCounterService

__all__ = ["TokenizerCounter"]


def _size(tokens: object) -> int:
    """How many tokens ``encode`` gave: a sequence's length, or an iterator's count."""
    if isinstance(tokens, Sized) and not isinstance(tokens, str | bytes):
        return len(tokens)
    if isinstance(tokens, Iterator):
        return sum(1 for _ in tokens)
    raise TypeError(
        "encode must return the tokens of the text (a sequence, or an iterator), "
        f"got {type(tokens).__name__}"
    )


def _payload(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)


@final
class TokenizerCounter:
    """Counts tokens with ``encode`` (text to a sequence of tokens, or an iterator over them)
    over every text, argument and result of the messages, plus ``per_message`` tokens a message
    for its framing. An ``encode`` that returns anything else (a count, a str) fails the count
    with a ``TypeError`` saying so."""

    __slots__ = ("_encode", "per_message")

    def __init__(self, encode: Callable[[str], Iterable[Any]], *, per_message: int = 4) -> None:
        if not callable(encode):
            raise TypeError("encode must be a function from text to tokens")
        if type(per_message) is not int:
            raise TypeError(f"per_message must be an int, got {type(per_message).__name__}")
        if per_message < 0:
            raise ValueError(f"per_message must be a non-negative int, got {per_message!r}")
        self._encode = encode
        self.per_message = per_message

    def _encode_size(self, text: str) -> int:
        return _size(self._encode(text))

    def count(self, messages: Sequence[Message]) -> int:
        """Tokens the messages take in a request."""
        encode = self._encode_size
        total = self.per_message * len(messages)
        for message in messages:
            if isinstance(message, SystemMessage):
                total += encode(message.content)
                continue
            for part in message.content:
                if isinstance(part, TextContent):
                    total += encode(part.text)
                elif isinstance(part, ToolCallContent):
                    total += encode(part.name) + encode(_payload(part.arguments))
                elif isinstance(part, ToolResultContent):
                    total += encode(part.name) + encode(_payload(part.result))
                elif isinstance(part, ReasoningContent):  # what the model produced earlier
                    total += encode(part.text)
                # NativeReasoningContent repeats the reasoning text (and opaque data): not counted.
        return total

    def layer(self) -> Layer:
        """This counter as the engine's ``TokenCounterService``."""
        return Layer.succeed(TokenCounterService, self, name="TokenizerCounter")
