"""Response parts: what a LanguageModel streams. Mirrors Effect AI's part kinds and finish reasons.

A model adapter never executes a tool: it reports ``ToolCallPart`` parts (with the raw JSON argument text
the provider sent) and the engine resolves, validates and runs them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, TypeAlias

import attrs

from effectagent.effect import _fast_init

from ._errors import AiError
from ._usage import Usage

__all__ = [
    "ErrorPart",
    "FinishPart",
    "FinishReason",
    "FINISH_REASONS",
    "NativeReasoningPart",
    "ReasoningDeltaPart",
    "ReasoningEndPart",
    "ReasoningStartPart",
    "ResponseMetadataPart",
    "ResponsePart",
    "TextDeltaPart",
    "TextEndPart",
    "TextStartPart",
    "ToolCallPart",
    "ToolParamsDeltaPart",
    "ToolParamsEndPart",
    "ToolParamsStartPart",
    "ToolResultPart",
]

#: Why a model response ended (Effect AI's finish reasons).
FinishReason = Literal[
    "stop", "length", "content-filter", "tool-calls", "error", "pause", "other", "unknown"
]
#: Every finish reason a model may report.
FINISH_REASONS: frozenset[str] = frozenset(
    ("stop", "length", "content-filter", "tool-calls", "error", "pause", "other", "unknown")
)


@_fast_init
@attrs.frozen(slots=True)
class TextStartPart:
    """A text block ``id`` begins."""

    id: str
    type: Literal["text-start"] = "text-start"


@_fast_init
@attrs.frozen(slots=True)
class TextDeltaPart:
    """More text for block ``id``."""

    id: str
    delta: str
    type: Literal["text-delta"] = "text-delta"


@_fast_init
@attrs.frozen(slots=True)
class TextEndPart:
    """Text block ``id`` is complete."""

    id: str
    type: Literal["text-end"] = "text-end"


@_fast_init
@attrs.frozen(slots=True)
class ReasoningStartPart:
    """A reasoning block ``id`` begins."""

    id: str
    type: Literal["reasoning-start"] = "reasoning-start"


@_fast_init
@attrs.frozen(slots=True)
class ReasoningDeltaPart:
    """More reasoning for block ``id``."""

    id: str
    delta: str
    type: Literal["reasoning-delta"] = "reasoning-delta"


@_fast_init
@attrs.frozen(slots=True)
class ReasoningEndPart:
    """Reasoning block ``id`` is complete."""

    id: str
    type: Literal["reasoning-end"] = "reasoning-end"


@_fast_init
@attrs.frozen(slots=True)
class NativeReasoningPart:
    """One block of reasoning as the provider made it and takes it back (``data``, a JSON
    object: a signed thinking block, an encrypted reasoning item, a thought signature), made by
    the adapter family ``provider`` for ``model``. It shows nothing; the engine records it (see
    :class:`~effectagent.ai.NativeReasoningContent`)."""

    provider: str
    model: str
    data: Mapping[str, Any]
    type: Literal["native-reasoning"] = "native-reasoning"


@_fast_init
@attrs.frozen(slots=True)
class ToolParamsStartPart:
    """The model begins streaming arguments for tool call ``id`` of tool ``name``."""

    id: str
    name: str
    type: Literal["tool-params-start"] = "tool-params-start"


@_fast_init
@attrs.frozen(slots=True)
class ToolParamsDeltaPart:
    """More argument text (JSON, possibly partial) for tool call ``id``."""

    id: str
    delta: str
    type: Literal["tool-params-delta"] = "tool-params-delta"


@_fast_init
@attrs.frozen(slots=True)
class ToolParamsEndPart:
    """The arguments of tool call ``id`` are complete."""

    id: str
    type: Literal["tool-params-end"] = "tool-params-end"


@_fast_init
@attrs.frozen(slots=True)
class ToolCallPart:
    """A complete tool call: ``arguments`` is the raw JSON text the provider sent."""

    id: str
    name: str
    arguments: str
    type: Literal["tool-call"] = "tool-call"


@_fast_init
@attrs.frozen(slots=True)
class ToolResultPart:
    """A result of a *provider-executed* tool (reported, never executed by the engine)."""

    id: str
    name: str
    result: object
    type: Literal["tool-result"] = "tool-result"


@_fast_init
@attrs.frozen(slots=True)
class ResponseMetadataPart:
    """Provider metadata: response id, model id, timestamp (seconds since the epoch)."""

    id: str | None = None
    model: str | None = None
    timestamp: float | None = None
    type: Literal["response-metadata"] = "response-metadata"


@_fast_init
@attrs.frozen(slots=True)
class FinishPart:
    """The response is complete."""

    reason: FinishReason
    usage: Usage = attrs.field(factory=Usage)
    type: Literal["finish"] = "finish"


@_fast_init
@attrs.frozen(slots=True)
class ErrorPart:
    """The provider reported an error mid-stream."""

    error: AiError
    type: Literal["error"] = "error"


#: Any part a LanguageModel streams.
ResponsePart: TypeAlias = (
    TextStartPart
    | TextDeltaPart
    | TextEndPart
    | ReasoningStartPart
    | ReasoningDeltaPart
    | ReasoningEndPart
    | NativeReasoningPart
    | ToolParamsStartPart
    | ToolParamsDeltaPart
    | ToolParamsEndPart
    | ToolCallPart
    | ToolResultPart
    | ResponseMetadataPart
    | FinishPart
    | ErrorPart
)
