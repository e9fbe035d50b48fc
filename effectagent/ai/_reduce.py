"""Reducing a stream of Response parts into one response — pure, no I/O.

The reducer enforces the part protocol (a block is started before its deltas, ended once, nothing
follows the finish part, tool-call IDs are unique) and raises :class:`MalformedResponse` on any
violation. A tool call whose arguments were still streaming when the model stopped for length is
*truncated*: it is reported separately and never becomes a :class:`ToolCallPart` to execute
(RUN-004).

:meth:`ResponseReducer.feed` is one ``match`` over the part classes, with ``assert_never`` for the
rest: a new part kind that the reducer does not handle is a type error, not a silent skip.
"""

from __future__ import annotations

from typing import assert_never, final

import attrs

from effectagent.effect import fast_init

from ._errors import AiError, MalformedResponse
from ._prompt import ReasoningContent, TextContent
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

__all__ = ["ModelResponse", "ResponseContent", "ResponseReducer", "TruncatedToolCall"]

#: One entry of a response's content, in the order the model produced it.
ResponseContent = TextContent | ReasoningContent | ToolCallPart


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

    ``content`` keeps text blocks, reasoning blocks and tool calls in the order the model produced
    them; ``tool_calls`` are the calls again, alone, in declaration order.
    """

    content: tuple[ResponseContent, ...]
    tool_calls: tuple[ToolCallPart, ...]
    truncated_calls: tuple[TruncatedToolCall, ...]
    finish_reason: FinishReason
    usage: Usage
    metadata: ResponseMetadataPart | None = None

    @property
    def text(self) -> str:
        """All text blocks, concatenated."""
        texts = [part.text for part in self.content if type(part) is TextContent]
        return texts[0] if len(texts) == 1 else "".join(texts)

    @property
    def reasoning(self) -> str:
        """All reasoning blocks, concatenated."""
        return "".join(part.text for part in self.content if type(part) is ReasoningContent)


@final
class _Block:
    """A text or reasoning block being streamed: its chunks, and whether it has ended."""

    __slots__ = ("chunks", "ended", "reasoning")

    def __init__(self, reasoning: bool) -> None:
        self.reasoning = reasoning
        self.chunks: list[str] = []
        self.ended = False

    def content(self) -> TextContent | ReasoningContent:
        text = "".join(self.chunks)
        return ReasoningContent(text) if self.reasoning else TextContent(text)


@final
class _Params:
    """The arguments of a tool call being streamed."""

    __slots__ = ("chunks", "ended", "name")

    def __init__(self, name: str) -> None:
        self.name = name
        self.chunks: list[str] = []
        self.ended = False


def _kind(reasoning: bool) -> str:
    return "reasoning" if reasoning else "text"


def _not_open(part: str, what: str, ident: str) -> MalformedResponse:
    return MalformedResponse(f"{part} for {what} {ident!r} that is not open")


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
        # Text and reasoning blocks by block id (the two kinds have separate IDs).
        self._text: dict[str, _Block] = {}
        self._reasoning: dict[str, _Block] = {}
        self._open = 0  # blocks started and not yet ended
        self._order: list[_Block | ToolCallPart] = []
        self._params: dict[str, _Params] = {}
        self._calls: list[ToolCallPart] = []
        self._call_ids: set[str] = set()
        self._finish: FinishPart | None = None
        self._error: AiError | None = None
        self._metadata: ResponseMetadataPart | None = None

    def feed(self, part: ResponsePart) -> None:
        """Take one part. Raises :class:`MalformedResponse` on a protocol violation."""
        if self._finish is not None:
            raise MalformedResponse(f"a {part.type} part arrived after the finish part")
        # The cases in the order parts usually arrive most often: deltas first. (Plain class
        # patterns: capturing attributes in the pattern costs more than reading them after.)
        match part:
            case TextDeltaPart():
                block = self._text.get(part.id)
                if block is None or block.ended:
                    raise _not_open(part.type, "text block", part.id)
                block.chunks.append(part.delta)
            case ToolParamsDeltaPart():
                self._open_params(part.id, part.type).chunks.append(part.delta)
            case ReasoningDeltaPart():
                block = self._reasoning.get(part.id)
                if block is None or block.ended:
                    raise _not_open(part.type, "reasoning block", part.id)
                block.chunks.append(part.delta)
            case TextStartPart():
                self._start_block(self._text, False, part.id)
            case TextEndPart():
                self._end_block(self._text, part.id, part.type, "text block")
            case ToolParamsStartPart():
                call_id = part.id
                if call_id in self._params or call_id in self._call_ids:
                    raise MalformedResponse(f"tool call {call_id!r} started twice")
                self._params[call_id] = _Params(part.name)
            case ToolParamsEndPart():
                self._open_params(part.id, part.type).ended = True
            case ToolCallPart():
                call_id, name = part.id, part.name
                if call_id in self._call_ids:
                    raise MalformedResponse(f"tool call {call_id!r} declared twice")
                streamed = self._params.pop(call_id, None)
                if streamed is not None and streamed.name != name:
                    raise MalformedResponse(
                        f"tool call {call_id!r} streamed as {streamed.name!r} but declared as "
                        f"{name!r}"
                    )
                self._call_ids.add(call_id)
                self._calls.append(part)
                self._order.append(part)
            case ReasoningStartPart():
                self._start_block(self._reasoning, True, part.id)
            case ReasoningEndPart():
                self._end_block(self._reasoning, part.id, part.type, "reasoning block")
            case FinishPart():
                self._finish = part
            case ErrorPart():
                self._error = part.error
            case ResponseMetadataPart():
                self._metadata = part
            case ToolResultPart():
                pass  # a provider-executed tool: the provider reports it; nothing to run
            case _:
                assert_never(part)

    def _start_block(self, blocks: dict[str, _Block], reasoning: bool, block_id: str) -> None:
        if block_id in blocks:
            raise MalformedResponse(f"{_kind(reasoning)} block {block_id!r} started twice")
        block = blocks[block_id] = _Block(reasoning)
        self._open += 1
        self._order.append(block)

    def _end_block(self, blocks: dict[str, _Block], block_id: str, part: str, what: str) -> None:
        block = blocks.get(block_id)
        if block is None or block.ended:
            raise _not_open(part, what, block_id)
        block.ended = True
        self._open -= 1

    def _open_params(self, call_id: str, part_type: str) -> _Params:
        params = self._params.get(call_id)
        if params is None or params.ended:
            raise _not_open(part_type, "tool call", call_id)
        return params

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
                TruncatedToolCall(call_id, params.name, "".join(params.chunks))
                for call_id, params in self._params.items()
            ]
        if self._open and finish.reason not in ("length", "content-filter", "error"):
            open_blocks = [
                f"{kind} {block_id!r}"
                for kind, blocks in (("text", self._text), ("reasoning", self._reasoning))
                for block_id, block in blocks.items()
                if not block.ended
            ]
            raise MalformedResponse(f"block(s) {', '.join(open_blocks)} never ended")
        content = tuple(
            [item.content() if isinstance(item, _Block) else item for item in self._order]
        )
        return ModelResponse(
            content,
            tuple(self._calls),
            tuple(truncated),
            finish.reason,
            finish.usage,
            self._metadata,
        )
