"""Prompt messages: system, user, assistant (text, reasoning, tool calls) and tool (results)."""

from __future__ import annotations

from typing import Literal, TypeAlias

import attrs

from effectagent.effect import _fast_init

__all__ = [
    "AssistantMessage",
    "Message",
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
class ToolCallContent:
    """A tool call the assistant made; ``arguments`` is the JSON value sent."""

    id: str
    name: str
    arguments: object
    type: Literal["tool-call"] = "tool-call"


@_fast_init
@attrs.frozen(slots=True)
class ToolResultContent:
    """The committed result of a tool call, as the model sees it (redacted and bounded)."""

    id: str
    name: str
    result: object
    is_failure: bool = False
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
    """What the user (or steering, or a follow-up) said."""

    content: tuple[TextContent, ...]
    role: Literal["user"] = "user"

    @staticmethod
    def text(text: str) -> UserMessage:
        """A user message with one text part."""
        return UserMessage((TextContent(text),))


@_fast_init
@attrs.frozen(slots=True)
class AssistantMessage:
    """What the model said: text, reasoning and tool calls, in order."""

    content: tuple[TextContent | ReasoningContent | ToolCallContent, ...]
    role: Literal["assistant"] = "assistant"


@_fast_init
@attrs.frozen(slots=True)
class ToolMessage:
    """Results of one complete tool batch, in the model's declaration order."""

    content: tuple[ToolResultContent, ...]
    role: Literal["tool"] = "tool"


#: One prompt message: system, user, assistant or tool.
Message: TypeAlias = SystemMessage | UserMessage | AssistantMessage | ToolMessage
