"""The LanguageModel service: stream Response parts for a request; generate a whole response."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping
from types import MappingProxyType
from typing import Any, Literal, Protocol, TypeAlias

import attrs
import trio

from effectagent.effect import ServiceKey, _fast_init

from ._cache import PromptCaching
from ._prompt import Message
from ._reduce import ModelResponse, ResponseReducer
from ._response import ResponsePart
from ._toolkit import ToolDescriptor

__all__ = [
    "LanguageModel",
    "LanguageModelService",
    "ModelRequest",
    "OutputFormat",
    "ToolChoice",
    "close_stream",
    "generate",
]

#: A request's metadata when it has none (read-only, so one shared value serves every request).
NO_METADATA: Mapping[str, Any] = MappingProxyType({})

#: Which tools the model may call: "auto", "none", "required", or one tool's name.
ToolChoice: TypeAlias = Literal["auto", "none", "required"] | str


@attrs.frozen(slots=True)
class OutputFormat:
    """The shape a final answer must have: a JSON Schema (draft 2020-12) of the encoded output.

    A provider that can constrain its output sends it in its native form (``strict`` when the
    schema allows the provider's strict mode); ``name`` is an identifier for it.
    """

    name: str
    schema: Mapping[str, Any]
    strict: bool = True


@_fast_init
@attrs.frozen(slots=True)
class ModelRequest:
    """One model call. ``tool_choice`` is auto, none, required, or a tool name; ``output``, when
    set, is the JSON the final answer must be; ``cache``, when set, what the provider is asked
    to cache (see :class:`~effectagent.ai.PromptCaching`)."""

    messages: tuple[Message, ...]
    tools: tuple[ToolDescriptor, ...] = ()
    tool_choice: ToolChoice = "auto"
    max_output_tokens: int | None = None
    metadata: Mapping[str, Any] = NO_METADATA
    output: OutputFormat | None = None
    cache: PromptCaching | None = None


class LanguageModel(Protocol):
    """A model adapter. It never executes tools: it reports tool calls."""

    def stream(self, request: ModelRequest) -> AsyncIterator[ResponsePart]:
        """Stream the response parts.

        Cancellation: the iterator checkpoints between parts; a cancelled consumer must close it
        (``aclose``), which ends the underlying request.
        """
        ...

    async def generate(self, request: ModelRequest) -> ModelResponse:
        """The whole response (typically :func:`generate` over :meth:`stream`)."""
        ...


#: The service key of the model the engine calls.
LanguageModelService: ServiceKey[LanguageModel] = ServiceKey(
    "effectagent.LanguageModel", "the model the engine calls"
)


async def close_stream(stream: AsyncIterator[ResponsePart]) -> None:
    """Close a model's part stream (an async generator's ``aclose``), shielded, so it is closed
    even when the caller is being cancelled. A generator that ran to its end has nothing left to
    close (no frame) and costs nothing here.

    Cancellation: shielded — it always finishes closing.
    """
    aclose = getattr(stream, "aclose", None)
    if aclose is not None and getattr(stream, "ag_frame", aclose) is not None:
        with trio.CancelScope(shield=True):
            await aclose()


async def generate(
    model: LanguageModel,
    request: ModelRequest,
    *,
    answered: Callable[[str], None] | None = None,
) -> ModelResponse:
    """Reduce ``model.stream(request)`` to a :class:`ModelResponse` (raises on malformed streams).
    With ``answered``, a model that stands for others (a ``RoutingModel``, such as a
    ``FallbackModel``) is streamed through ``stream_routed``, which calls ``answered(name)`` with
    the member that answered.

    Cancellation: wherever the model's stream waits (``generate`` adds no checkpoint of its
    own: a stream whose parts are all at hand is reduced without one); the stream is closed on
    every exit (see :func:`close_stream`).
    """
    reducer = ResponseReducer()
    routed = None if answered is None else getattr(model, "stream_routed", None)
    stream = model.stream(request) if routed is None else routed(request, answered)
    try:
        async for part in stream:
            reducer.feed(part)
    finally:
        await close_stream(stream)
    return reducer.finish()
