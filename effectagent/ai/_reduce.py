"""Reducing a stream of Response parts into one response — pure, no I/O.

The reducer enforces the part protocol (a block is started before its deltas, ended once, nothing
follows the finish part, tool-call IDs are unique) and raises :class:`MalformedResponse` on any
violation. A tool call whose arguments were still streaming when the model stopped for length is
*truncated*: it is reported separately and never becomes a :class:`ToolCallPart` to execute (RUN-004).
"""

from __future__ import annotations

from typing import Any, final

import attrs

from effectagent.effect._fast_init import fast_init

from ._errors import AiError, MalformedResponse
from ._response import (
    ErrorPart,
    FinishPart,
    FinishReason,
    ReasoningDeltaPart,
    ReasoningEndPart,
    ReasoningStartPart,
    ResponseMetadataPart,
    ResponsePart,
    TextDeltaPart,
    TextEndPart,
    TextStartPart,
    ToolCallPart,
    ToolParamsDeltaPart,
    ToolParamsEndPart,
    ToolParamsStartPart,
    ToolResultPart,
)
from ._usage import Usage

__all__ = ["ModelResponse", "ResponseReducer", "TruncatedToolCall"]


@fast_init
@attrs.frozen(slots=True)
class TruncatedToolCall:
    """A tool call cut off by the length limit: its arguments are incomplete; it never runs."""

    id: str
    name: str
    partial_arguments: str


@fast_init
@attrs.frozen(slots=True)
class ModelResponse:
    """One complete model response.

    ``content`` keeps text, reasoning and tool calls in the order the model produced them, as
    ``("text", str)``, ``("reasoning", str)`` and ``("tool-call", ToolCallPart)`` entries.
    """

    content: tuple[tuple[str, object], ...]
    tool_calls: tuple[ToolCallPart, ...]
    truncated_calls: tuple[TruncatedToolCall, ...]
    finish_reason: FinishReason
    usage: Usage
    metadata: ResponseMetadataPart | None = None

    @property
    def text(self) -> str:
        """All text blocks, concatenated."""
        texts = [v for k, v in self.content if k == "text"]
        if len(texts) == 1 and type(texts[0]) is str:
            return texts[0]
        return "".join(map(str, texts))

    @property
    def reasoning(self) -> str:
        """All reasoning blocks, concatenated."""
        return "".join(str(v) for k, v in self.content if k == "reasoning")


_PARTS: tuple[type, ...] = (
    TextDeltaPart,
    ReasoningDeltaPart,
    TextStartPart,
    ReasoningStartPart,
    TextEndPart,
    ReasoningEndPart,
    ToolParamsStartPart,
    ToolParamsDeltaPart,
    ToolParamsEndPart,
    ToolCallPart,
    FinishPart,
    ErrorPart,
    ResponseMetadataPart,
    ToolResultPart,
)
_PART_CLASS: dict[type, type] = {cls: cls for cls in _PARTS}


def _part_class(part: object) -> type | None:
    """The part class ``part`` is an instance of (for a subclass of a part class)."""
    for cls in _PARTS:
        if isinstance(part, cls):
            return cls
    return None


@final
class ResponseReducer:
    """Feed parts in order with :meth:`feed`; call :meth:`finish` when the stream ends."""

    __slots__ = (
        "_call_ids",
        "_calls",
        "_error",
        "_finish",
        "_metadata",
        "_open",
        "_order",
        "_params",
        "_reasoning",
        "_text",
    )

    def __init__(self) -> None:
        # block id -> its chunks, per kind of block; None once the block ended.
        self._text: dict[str, list[str] | None] = {}
        self._reasoning: dict[str, list[str] | None] = {}
        self._open = 0  # blocks started and not yet ended
        self._order: list[tuple[str, object]] = []
        self._params: dict[str, tuple[str, list[str], bool]] = {}
        self._calls: list[ToolCallPart] = []
        self._call_ids: set[str] = set()
        self._finish: FinishPart | None = None
        self._error: AiError | None = None
        self._metadata: ResponseMetadataPart | None = None

    def feed(self, part: ResponsePart) -> type:
        """Take one part; return its part class (the part's own class, or for a subclass of a
        part class, that class). Raises :class:`MalformedResponse` on a protocol violation."""
        if self._finish is not None:
            raise MalformedResponse(f"a {part.type} part arrived after the finish part")
        # Dispatch on the part's own class: one dict look-up instead of a chain of class checks
        # (a subclass of a part class is mapped to that class). ``cls is`` does not narrow
        # ``part`` for the type checker, hence ``Any``.
        cls = _PART_CLASS.get(type(part)) or _part_class(part)
        if cls is None:
            raise MalformedResponse(f"unknown part {part!r}")
        p: Any = part
        if cls is TextDeltaPart or cls is ReasoningDeltaPart:
            chunks = (self._text if cls is TextDeltaPart else self._reasoning).get(p.id)
            if chunks is None:
                kind = "text" if cls is TextDeltaPart else "reasoning"
                raise MalformedResponse(f"{p.type} for {kind} block {p.id!r} that is not open")
            chunks.append(p.delta)
        elif cls is TextStartPart or cls is ReasoningStartPart:
            kind = "text" if cls is TextStartPart else "reasoning"
            blocks = self._text if cls is TextStartPart else self._reasoning
            if p.id in blocks:
                raise MalformedResponse(f"{kind} block {p.id!r} started twice")
            chunks = []
            blocks[p.id] = chunks
            self._open += 1
            self._order.append((kind, chunks))
        elif cls is TextEndPart or cls is ReasoningEndPart:
            blocks = self._text if cls is TextEndPart else self._reasoning
            if blocks.get(p.id) is None:
                kind = "text" if cls is TextEndPart else "reasoning"
                raise MalformedResponse(f"{p.type} for {kind} block {p.id!r} that is not open")
            blocks[p.id] = None
            self._open -= 1
        elif cls is ToolParamsStartPart:
            if p.id in self._params or p.id in self._call_ids:
                raise MalformedResponse(f"tool call {p.id!r} started twice")
            self._params[p.id] = (p.name, [], False)
        elif cls is ToolParamsDeltaPart:
            entry = self._params.get(p.id)
            if entry is None or entry[2]:
                raise MalformedResponse(
                    f"tool-params-delta for tool call {p.id!r} that is not open"
                )
            entry[1].append(p.delta)
        elif cls is ToolParamsEndPart:
            entry = self._params.get(p.id)
            if entry is None or entry[2]:
                raise MalformedResponse(f"tool-params-end for tool call {p.id!r} that is not open")
            self._params[p.id] = (entry[0], entry[1], True)
        elif cls is ToolCallPart:
            if p.id in self._call_ids:
                raise MalformedResponse(f"tool call {p.id!r} declared twice")
            entry = self._params.pop(p.id, None)
            if entry is not None and entry[0] != p.name:
                raise MalformedResponse(
                    f"tool call {p.id!r} streamed as {entry[0]!r} but declared as {p.name!r}"
                )
            self._call_ids.add(p.id)
            self._calls.append(p)
            self._order.append(("tool-call", p))
        elif cls is FinishPart:
            self._finish = p
        elif cls is ErrorPart:
            self._error = p.error
        elif cls is ResponseMetadataPart:
            self._metadata = p
        # ToolResultPart: provider-executed tools are reported by the provider; nothing to do.
        return cls

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
        if self._open and finish.reason not in ("length", "content-filter", "error"):
            open_blocks = [
                f"{kind} {block!r}"
                for kind, blocks in (("text", self._text), ("reasoning", self._reasoning))
                for block, chunks in blocks.items()
                if chunks is not None
            ]
            raise MalformedResponse(f"block(s) {', '.join(open_blocks)} never ended")
        content = tuple(
            [
                (kind, "".join(value) if type(value) is list else value)
                for kind, value in self._order
            ]
        )
        return ModelResponse(
            content,
            tuple(self._calls),
            tuple(truncated),
            finish.reason,
            finish.usage,
            self._metadata,
        )
