"""Helpers of the provider tests: run a request through an adapter, reduce what it streamed."""

from __future__ import annotations

from typing import Any

from effectagent.ai import (
    AiError,
    ModelRequest,
    ModelResponse,
    ResponsePart,
    ResponseReducer,
    ToolDescriptor,
    UserMessage,
    close_stream,
)
from effectagent.providers import ModelSettings

__all__ = ["WEATHER", "collect", "failure", "reduce", "request"]

#: A tool the requests offer.
WEATHER = ToolDescriptor(
    "weather",
    "Today's weather in a city.",
    {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
        "additionalProperties": False,
    },
)


def request(text: str = "Hi", **fields: Any) -> ModelRequest:
    """A one-message request."""
    return ModelRequest((UserMessage.text(text),), **fields)


async def collect(settings: ModelSettings, req: ModelRequest | None = None) -> list[ResponsePart]:
    """Every part the adapter streams for ``req`` (the stream closed on every exit)."""
    async with settings.open() as model:
        stream = model.stream(req or request())
        try:
            return [part async for part in stream]
        finally:
            await close_stream(stream)


async def failure(
    settings: ModelSettings, req: ModelRequest | None = None
) -> tuple[AiError, list[ResponsePart]]:
    """The typed error the adapter raises for ``req``, and the parts it streamed before."""
    parts: list[ResponsePart] = []
    async with settings.open() as model:
        stream = model.stream(req or request())
        try:
            async for part in stream:
                parts.append(part)
        except AiError as error:
            return error, parts
        finally:
            await close_stream(stream)
    raise AssertionError(f"no error; streamed {parts}")


def reduce(parts: list[ResponsePart]) -> ModelResponse:
    """The engine's reduction of ``parts`` (raises on a protocol violation)."""
    reducer = ResponseReducer()
    for part in parts:
        reducer.feed(part)
    return reducer.finish()
