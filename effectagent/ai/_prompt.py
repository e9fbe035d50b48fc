"""Prompt messages: system, user, assistant (text, reasoning, tool calls) and tool (results)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, TypeAlias

import attrs

from effectagent.effect import _fast_init

from ._media import MediaPart

__all__ = [
    "AssistantMessage",
    "Message",
    "NativeReasoningContent",
    "ReasoningContent",
    "SystemMessage",
    "TextContent",
    "ToolCallContent",
    "ToolMessage",
    "ToolResultContent",
    "UserMessage",
]


@_fast_init
@attrs.frozen(slots=True)
class TextContent:
    """Plain text."""

    text: str
    type: Literal["text"] = "text"


@_fast_init
@attrs.frozen(slots=True)
class ReasoningContent:
    """Reasoning text the model produced earlier."""

    text: str
    type: Literal["reasoning"] = "reasoning"


@_fast_init
@attrs.frozen(slots=True)
class NativeReasoningContent:
    """Reasoning as a provider made it, to be sent back to that provider only: a signed thinking
    block, an encrypted reasoning item, a thought signature (``data``, one block as the provider
    takes it back, a JSON object). ``provider`` names the adapter family that made it (e.g.
    ``"anthropic"``) and ``model`` the model; an adapter of another family leaves it out.

    In a model's response, a block that was over the reducer's bounds, or whose text redaction
    changed, has ``data=None`` and ``dropped`` says why (``"too-large"`` or ``"redacted"``,
    ``size`` its size in bytes): a marker of what was not kept, never sent anywhere."""

    provider: str
    model: str
    data: Mapping[str, Any] | None
    dropped: str = ""
    size: int = 0
    type: Literal["native-reasoning"] = "native-reasoning"


@_fast_init
@attrs.frozen(slots=True)
class ToolCallContent:
    """A tool call the assistant made; ``arguments`` is the JSON value sent."""

    id: str
    name: str
    arguments: object
    type: Literal["tool-call"] = "tool-call"


@_fast_init
@attrs.frozen(slots=True)
class ToolResultContent:
    """The committed result of a tool call, as the model sees it (redacted and bounded), and the
    media it returned (images, documents, audio), which each provider gets in its own way (see
    the providers guide)."""

    id: str
    name: str
    result: object
    is_failure: bool = False
    media: tuple[MediaPart, ...] = ()
    type: Literal["tool-result"] = "tool-result"


@_fast_init
@attrs.frozen(slots=True)
class SystemMessage:
    """Instructions."""

    content: str
    role: Literal["system"] = "system"


@_fast_init
@attrs.frozen(slots=True)
class UserMessage:
    """What the user (or steering, or a follow-up) said: text, and images, documents or audio
    (:class:`~effectagent.ai.MediaPart`)."""

    content: tuple[TextContent | MediaPart, ...]
    role: Literal["user"] = "user"

    @staticmethod
    def text(text: str) -> UserMessage:
        """A user message with one text part."""
        return UserMessage((TextContent(text),))

    @property
    def media(self) -> tuple[MediaPart, ...]:
        """The message's media parts, in order."""
        return tuple(part for part in self.content if isinstance(part, MediaPart))


@_fast_init
@attrs.frozen(slots=True)
class AssistantMessage:
    """What the model said: text, reasoning and tool calls, in order — and the provider-native
    reasoning of that turn (:class:`NativeReasoningContent`), which only its own provider reads."""

    content: tuple[TextContent | ReasoningContent | ToolCallContent | NativeReasoningContent, ...]
    role: Literal["assistant"] = "assistant"


@_fast_init
@attrs.frozen(slots=True)
class ToolMessage:
    """Results of one complete tool batch, in the model's declaration order."""

    content: tuple[ToolResultContent, ...]
    role: Literal["tool"] = "tool"


#: One prompt message: system, user, assistant or tool.
Message: TypeAlias = SystemMessage | UserMessage | AssistantMessage | ToolMessage
