"""Typed results of the connection's resource and prompt API, built from the protocol's JSON."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

__all__ = [
    "McpPrompt",
    "McpPromptArgument",
    "McpPromptMessage",
    "McpPromptResult",
    "McpResource",
    "McpResourceContents",
    "SkippedTool",
]


def _opt_str(value: object) -> str | None:
    return value if isinstance(value, str) else None


@attrs.frozen
class McpResource:
    """A resource the server lists: its ``uri`` and ``name``, and what it says about it."""

    uri: str
    name: str
    title: str | None = None
    description: str | None = None
    mime_type: str | None = None
    size: int | None = None

    @staticmethod
    def from_json(raw: Mapping[str, Any]) -> McpResource:
        """Build from the JSON form of a protocol ``Resource``."""
        size = raw.get("size")
        return McpResource(
            str(raw.get("uri", "")),
            str(raw.get("name", "")),
            _opt_str(raw.get("title")),
            _opt_str(raw.get("description")),
            _opt_str(raw.get("mimeType")),
            size if type(size) is int else None,
        )


@attrs.frozen
class McpResourceContents:
    """One part of what a resource read returned: ``text``, or ``blob`` (base64, as the server
    sent it) — exactly one of them is set."""

    uri: str
    mime_type: str | None
    text: str | None = None
    blob: str | None = None

    @staticmethod
    def from_json(raw: Mapping[str, Any]) -> McpResourceContents:
        """Build from the JSON form of protocol resource contents (text or blob)."""
        return McpResourceContents(
            str(raw.get("uri", "")),
            _opt_str(raw.get("mimeType")),
            _opt_str(raw.get("text")),
            _opt_str(raw.get("blob")),
        )


@attrs.frozen
class McpPromptArgument:
    """An argument a prompt takes."""

    name: str
    description: str | None = None
    required: bool = False


@attrs.frozen
class McpPrompt:
    """A prompt template the server lists."""

    name: str
    description: str | None = None
    arguments: tuple[McpPromptArgument, ...] = ()

    @staticmethod
    def from_json(raw: Mapping[str, Any]) -> McpPrompt:
        """Build from the JSON form of a protocol ``Prompt``."""
        return McpPrompt(
            str(raw.get("name", "")),
            _opt_str(raw.get("description")),
            tuple(
                McpPromptArgument(
                    str(arg.get("name", "")),
                    _opt_str(arg.get("description")),
                    arg.get("required") is True,
                )
                for arg in raw.get("arguments") or ()
            ),
        )


@attrs.frozen
class McpPromptMessage:
    """One message of a rendered prompt: ``role`` (``"user"`` or ``"assistant"``) and its
    ``content`` block, in the protocol's JSON form (text, image, audio, resource)."""

    role: str
    content: Mapping[str, Any]


@attrs.frozen
class McpPromptResult:
    """A prompt rendered by the server with the arguments given."""

    description: str | None
    messages: tuple[McpPromptMessage, ...]

    @staticmethod
    def from_json(raw: Mapping[str, Any]) -> McpPromptResult:
        """Build from the JSON form of a protocol ``GetPromptResult``."""
        return McpPromptResult(
            _opt_str(raw.get("description")),
            tuple(
                McpPromptMessage(str(m.get("role", "")), dict(m.get("content") or {}))
                for m in raw.get("messages") or ()
            ),
        )


@attrs.frozen
class SkippedTool:
    """A tool the server listed that cannot be offered to the model, and why (an input schema
    that does not describe an object, a schema that is not valid JSON Schema, ...)."""

    name: str
    reason: str
