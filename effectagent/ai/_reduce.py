"""Reducing a stream of Response parts into one response — pure, no I/O.

The reducer enforces the part protocol (a block is started before its deltas, ended once, nothing
follows the finish part, tool-call IDs are unique) and raises :class:`MalformedResponse` on any
violation. A tool call whose arguments were still streaming when the model stopped for length is
*truncated*: it is reported separately and never becomes a :class:`ToolCall` to execute (RUN-004).
"""

from __future__ import annotations

from typing import final

import attrs

from ._errors import AiError, MalformedResponse
from ._response import (
    ErrorPart,
    FinishPart,
    FinishReason,
    ReasoningDelta,
    ReasoningEnd,
    ReasoningStart,
    ResponseMetadata,
    ResponsePart,
    TextDelta,
    TextEnd,
    TextStart,
    ToolCall,
    ToolParamsDelta,
    ToolParamsEnd,
    ToolParamsStart,
    ToolResultPart,
)
from ._usage import Usage

__all__ = ["ModelResponse", "ResponseReducer", "TruncatedToolCall"]


@attrs.frozen(slots=True)
class TruncatedToolCall:
    """A tool call cut off by the length limit: its arguments are incomplete; it never runs."""

    id: str
    name: str
    partial_arguments: str


@attrs.frozen(slots=True)
class ModelResponse:
    """One complete model response.

    ``content`` keeps text, reasoning and tool calls in the order the model produced them, as
    ``("text", str)``, ``("reasoning", str)`` and ``("tool-call", ToolCall)`` entries.
    """

    content: tuple[tuple[str, object], ...]
    tool_calls: tuple[ToolCall, ...]
    truncated_calls: tuple[TruncatedToolCall, ...]
    finish_reason: FinishReason
    usage: Usage
    metadata: ResponseMetadata | None = None

    @property
    def text(self) -> str:
        """All text blocks, concatenated."""
        return "".join(str(v) for k, v in self.content if k == "text")

    @property
    def reasoning(self) -> str:
        """All reasoning blocks, concatenated."""
        return "".join(str(v) for k, v in self.content if k == "reasoning")


@final
class ResponseReducer:
    """Feed parts in order with :meth:`feed`; call :meth:`finish` when the stream ends."""

    __slots__ = (
        "_blocks",
        "_call_ids",
        "_calls",
        "_error",
        "_finish",
        "_metadata",
        "_order",
        "_params",
    )

    def __init__(self) -> None:
        # block key -> chunks; key is ("text"|"reasoning", id). None once ended.
        self._blocks: dict[tuple[str, str], list[str] | None] = {}
        self._order: list[tuple[str, object]] = []
        self._params: dict[str, tuple[str, list[str], bool]] = {}
        self._calls: list[ToolCall] = []
        self._call_ids: set[str] = set()
        self._finish: FinishPart | None = None
        self._error: AiError | None = None
        self._metadata: ResponseMetadata | None = None

    def feed(self, part: ResponsePart) -> None:
        """Take one part; raises :class:`MalformedResponse` on a protocol violation."""
        if self._finish is not None:
            raise MalformedResponse(f"a {part.type} part arrived after the finish part")
        if isinstance(part, TextDelta | ReasoningDelta):
            kind = "text" if isinstance(part, TextDelta) else "reasoning"
            chunks = self._blocks.get((kind, part.id))
            if chunks is None:
                raise MalformedResponse(
                    f"{part.type} for {kind} block {part.id!r} that is not open"
                )
            chunks.append(part.delta)
        elif isinstance(part, TextStart | ReasoningStart):
            kind = "text" if isinstance(part, TextStart) else "reasoning"
            if (kind, part.id) in self._blocks:
                raise MalformedResponse(f"{kind} block {part.id!r} started twice")
            chunks = []
            self._blocks[(kind, part.id)] = chunks
            self._order.append((kind, chunks))
        elif isinstance(part, TextEnd | ReasoningEnd):
            kind = "text" if isinstance(part, TextEnd) else "reasoning"
            if self._blocks.get((kind, part.id)) is None:
                raise MalformedResponse(
                    f"{part.type} for {kind} block {part.id!r} that is not open"
                )
            self._blocks[(kind, part.id)] = None
        elif isinstance(part, ToolParamsStart):
            if part.id in self._params or part.id in self._call_ids:
                raise MalformedResponse(f"tool call {part.id!r} started twice")
            self._params[part.id] = (part.name, [], False)
        elif isinstance(part, ToolParamsDelta):
            entry = self._params.get(part.id)
            if entry is None or entry[2]:
                raise MalformedResponse(
                    f"tool-params-delta for tool call {part.id!r} that is not open"
                )
            entry[1].append(part.delta)
        elif isinstance(part, ToolParamsEnd):
            entry = self._params.get(part.id)
            if entry is None or entry[2]:
                raise MalformedResponse(
                    f"tool-params-end for tool call {part.id!r} that is not open"
                )
            self._params[part.id] = (entry[0], entry[1], True)
        elif isinstance(part, ToolCall):
            if part.id in self._call_ids:
                raise MalformedResponse(f"tool call {part.id!r} declared twice")
            entry = self._params.pop(part.id, None)
            if entry is not None and entry[0] != part.name:
                raise MalformedResponse(
                    f"tool call {part.id!r} streamed as {entry[0]!r} but declared as {part.name!r}"
                )
            self._call_ids.add(part.id)
            self._calls.append(part)
            self._order.append(("tool-call", part))
        elif isinstance(part, FinishPart):
            self._finish = part
        elif isinstance(part, ErrorPart):
            self._error = part.error
        elif isinstance(part, ResponseMetadata):
            self._metadata = part
        elif isinstance(part, ToolResultPart):
            pass  # provider-executed tools are reported by the provider; nothing to do here
        else:  # pragma: no cover - exhaustive over ResponsePart
            raise MalformedResponse(f"unknown part {part!r}")

    @property
    def error(self) -> AiError | None:
        """The error part, if the provider sent one."""
        return self._error

    def finish(self) -> ModelResponse:
        """The complete response. Raises the provider's error, or MalformedResponse."""
        if self._error is not None:
            raise self._error
        finish = self._finish
        if finish is None:
            raise MalformedResponse("the stream ended without a finish part")
        open_blocks = [
            f"{k} {i!r}" for (k, i), chunks in self._blocks.items() if chunks is not None
        ]
        truncated: list[TruncatedToolCall] = []
        if self._params:
            if finish.reason != "length":
                raise MalformedResponse(
                    "tool call(s) "
                    + ", ".join(repr(i) for i in self._params)
                    + f" never completed, and the finish reason is {finish.reason!r}"
                )
            truncated = [
                TruncatedToolCall(call_id, name, "".join(chunks))
                for call_id, (name, chunks, _) in self._params.items()
            ]
        if open_blocks and finish.reason not in ("length", "content-filter", "error"):
            raise MalformedResponse(f"block(s) {', '.join(open_blocks)} never ended")
        content = tuple(
            (kind, "".join(value) if isinstance(value, list) else value)
            for kind, value in self._order
        )
        return ModelResponse(
            content=content,
            tool_calls=tuple(self._calls),
            truncated_calls=tuple(truncated),
            finish_reason=finish.reason,
            usage=finish.usage,
            metadata=self._metadata,
        )
