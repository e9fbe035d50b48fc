"""Reducing a stream of Response parts into one response — pure, no I/O.

The reducer enforces the part protocol (a block is started before its deltas, ended once, nothing
follows the finish part, tool-call IDs are unique) and raises :class:`MalformedResponse` on any
violation. A tool call whose arguments were still streaming when the model stopped for length is
*truncated*: it never becomes a :class:`ToolCallPart` to execute (RUN-004). It stays where it
was declared among the response's content (one cut off before its declaration, after everything
else, in the order such calls started), and :attr:`ModelResponse.truncated_calls` lists them
alone.

It also bounds what a response may cost (:class:`ResponseReducer`'s ``max_bytes`` and
``max_argument_bytes``): every part adds its UTF-8 bytes to the response's size — text,
reasoning, tool-call arguments, IDs and names, and :data:`PART_OVERHEAD` bytes for each block or
call it opens — and the part that takes the size past ``max_bytes`` raises
:class:`ResponseTooLarge` at once, so the caller stops the stream there. A tool call whose
arguments grow past ``max_argument_bytes`` stops being accumulated (only a short head is kept, and
the count goes on); it ends as a :class:`TruncatedToolCall` with reason ``"too-large"``, never as
a call to execute.

Provider-native reasoning (:class:`NativeReasoningPart`: a signed thinking block, an encrypted
reasoning item, a thought signature) is bounded apart — it repeats the reasoning text the
response already counted, and is opaque besides: ``max_native_block_bytes`` bounds each block
(the UTF-8 size of its compact JSON) and ``max_native_bytes`` all of a response's blocks. A block
over either is dropped whole, never cut (a cut block is worthless: the provider checks it), and
leaves a :class:`NativeReasoningContent` marker with ``data=None``, ``dropped="too-large"`` and
its size. The response goes on.

:meth:`ResponseReducer.feed` is one ``match`` over the part classes, with ``assert_never`` for the
rest: a new part kind that the reducer does not handle is a type error, not a silent skip.
"""

from __future__ import annotations

import json
from typing import Literal, assert_never, final

import attrs

from effectagent.effect import _fast_init

from ._errors import AiError, MalformedResponse, ResponseTooLarge, format_bytes
from ._prompt import NativeReasoningContent, ReasoningContent, TextContent
from ._response import (
    ErrorPart,
    FinishPart,
    FinishReason,
    NativeReasoningPart,
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

__all__ = [
    "ARGUMENT_HEAD_CHARS",
    "DEFAULT_MAX_NATIVE_BLOCK_BYTES",
    "DEFAULT_MAX_NATIVE_BYTES",
    "DEFAULT_MAX_RESPONSE_BYTES",
    "DEFAULT_MAX_TOOL_ARGUMENT_BYTES",
    "PART_OVERHEAD",
    "ModelResponse",
    "ResponseContent",
    "ResponseReducer",
    "TruncatedToolCall",
]

#: The most a response may be, in bytes, unless the reducer is told otherwise.
DEFAULT_MAX_RESPONSE_BYTES = 4 * 1024 * 1024
#: The most a tool call's argument text may be, in bytes, unless the reducer is told otherwise
#: (the size the tools' argument decoder accepts by default).
DEFAULT_MAX_TOOL_ARGUMENT_BYTES = 256 * 1024
#: The most one provider-native reasoning block may be, in bytes (its compact JSON), unless the
#: reducer is told otherwise: a thinking block of a large thinking budget with its signature.
DEFAULT_MAX_NATIVE_BLOCK_BYTES = 512 * 1024
#: The most all provider-native reasoning blocks of one response may be, in bytes.
DEFAULT_MAX_NATIVE_BYTES = 2 * 1024 * 1024
#: What each block or tool call a response opens adds to its size, besides its text: it costs
#: memory even when empty, so an endless stream of empty blocks is bounded too.
PART_OVERHEAD = 64
#: How many characters of an oversized argument text are kept (the head of a "too-large" call).
ARGUMENT_HEAD_CHARS = 200


def utf8_size(text: str) -> int:
    """The UTF-8 size of ``text`` in bytes (a lone surrogate counts its 3 bytes)."""
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


@_fast_init
@attrs.frozen(slots=True)
class TruncatedToolCall:
    """A tool call that never runs: cut off by the output length limit (``reason="length"``,
    ``partial_arguments`` is what arrived), or with arguments larger than the reducer's
    ``max_argument_bytes`` (``reason="too-large"``, ``partial_arguments`` is their first
    :data:`ARGUMENT_HEAD_CHARS` characters). ``size`` is the UTF-8 size of the whole argument text
    that arrived."""

    id: str
    name: str
    partial_arguments: str
    reason: Literal["length", "too-large"] = "length"
    size: int = 0
    type: Literal["truncated-tool-call"] = "truncated-tool-call"


#: One entry of a response's content, in the order the model produced it.
ResponseContent = (
    TextContent | ReasoningContent | ToolCallPart | TruncatedToolCall | NativeReasoningContent
)


@_fast_init
@attrs.frozen(slots=True)
class ModelResponse:
    """One complete model response.

    ``content`` keeps text blocks, reasoning blocks and tool calls in the order the model produced
    them — a call that never runs (:class:`TruncatedToolCall`) where it was declared, or after
    everything else if the length limit cut it off before its declaration — and the
    provider-native reasoning blocks where they came (kept, or a marker of one dropped).
    ``tool_calls`` are the calls to execute again, alone, and ``truncated_calls`` those that never
    run, alone, each in declaration order; a response's calls in declaration order, both kinds,
    are its content's calls.
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
    """The arguments of a tool call being streamed: the chunks so far and their size — or, once
    they grew past the argument limit, only their head (``over``) while the size goes on."""

    __slots__ = ("chunks", "ended", "head", "name", "over", "size")

    def __init__(self, name: str) -> None:
        self.name = name
        self.chunks: list[str] = []
        self.ended = False
        self.size = 0
        self.over = False
        self.head = ""

    def give_up(self) -> None:
        """The arguments are too large: keep their head, drop the rest (and what follows)."""
        self.over = True
        self.head = _head(self.chunks)
        self.chunks = []

    def truncated(self, call_id: str) -> TruncatedToolCall:
        """This call as one that never runs (too large, or cut off by the length limit)."""
        if self.over:
            return TruncatedToolCall(call_id, self.name, self.head, "too-large", self.size)
        return TruncatedToolCall(call_id, self.name, "".join(self.chunks), "length", self.size)


def _head(chunks: list[str]) -> str:
    head: list[str] = []
    length = 0
    for chunk in chunks:
        head.append(chunk)
        length += len(chunk)
        if length >= ARGUMENT_HEAD_CHARS:
            break
    return "".join(head)[:ARGUMENT_HEAD_CHARS]


def _kind(reasoning: bool) -> str:
    return "reasoning" if reasoning else "text"


def _not_open(part: str, what: str, ident: str) -> MalformedResponse:
    return MalformedResponse(f"{part} for {what} {ident!r} that is not open")


@final
class ResponseReducer:
    """Feed parts in order with :meth:`feed`; call :meth:`finish` when the stream ends.

    ``max_bytes`` bounds the whole response and ``max_argument_bytes`` each tool call's
    arguments (see the module notes); both are positive.
    """

    __slots__ = (
        "_call_ids",
        "_calls",
        "_error",
        "_finish",
        "_max_argument_bytes",
        "_max_bytes",
        "_metadata",
        "_native_limits",
        "_native_size",
        "_open",
        "_order",
        "_oversized",
        "_params",
        "_reasoning",
        "_size",
        "_text",
    )

    def __init__(
        self,
        *,
        max_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
        max_argument_bytes: int = DEFAULT_MAX_TOOL_ARGUMENT_BYTES,
        max_native_block_bytes: int = DEFAULT_MAX_NATIVE_BLOCK_BYTES,
        max_native_bytes: int = DEFAULT_MAX_NATIVE_BYTES,
    ) -> None:
        if min(max_bytes, max_argument_bytes, max_native_block_bytes, max_native_bytes) < 1:
            raise ValueError("a response's limits are positive numbers of bytes")
        self._native_limits = (max_native_block_bytes, max_native_bytes)
        self._native_size = 0  # the native reasoning kept so far, in bytes
        self._max_bytes = max_bytes
        self._max_argument_bytes = max_argument_bytes
        self._size = 0  # the response's size so far, in bytes
        # Declared calls whose arguments were too large: they never run.
        self._oversized: list[TruncatedToolCall] = []
        # Text and reasoning blocks by block id (the two kinds have separate IDs).
        self._text: dict[str, _Block] = {}
        self._reasoning: dict[str, _Block] = {}
        self._open = 0  # blocks started and not yet ended
        self._order: list[_Block | ToolCallPart | TruncatedToolCall | NativeReasoningContent] = []
        self._params: dict[str, _Params] = {}
        self._calls: list[ToolCallPart] = []
        self._call_ids: set[str] = set()
        self._finish: FinishPart | None = None
        self._error: AiError | None = None
        self._metadata: ResponseMetadataPart | None = None

    def feed(self, part: ResponsePart) -> None:
        """Take one part. Raises :class:`MalformedResponse` on a protocol violation, and
        :class:`ResponseTooLarge` when the part takes the response past ``max_bytes``."""
        if self._finish is not None:
            raise MalformedResponse(f"a {part.type} part arrived after the finish part")
        # The cases in the order parts usually arrive most often: deltas first. (Plain class
        # patterns: capturing attributes in the pattern costs more than reading them after.)
        match part:
            case TextDeltaPart():
                block = self._text.get(part.id)
                if block is None or block.ended:
                    raise _not_open(part.type, "text block", part.id)
                delta = part.delta
                # The size check is an add and a compare (``isascii`` is O(1) in CPython).
                self._size += len(delta) if delta.isascii() else utf8_size(delta)
                if self._size > self._max_bytes:
                    raise self._too_large()
                block.chunks.append(delta)
            case ToolParamsDeltaPart():
                self._params_delta(part.id, part.type, part.delta)
            case ReasoningDeltaPart():
                block = self._reasoning.get(part.id)
                if block is None or block.ended:
                    raise _not_open(part.type, "reasoning block", part.id)
                delta = part.delta
                self._size += len(delta) if delta.isascii() else utf8_size(delta)
                if self._size > self._max_bytes:
                    raise self._too_large()
                block.chunks.append(delta)
            case TextStartPart():
                self._start_block(self._text, False, part.id)
            case TextEndPart():
                self._end_block(self._text, part.id, part.type, "text block")
            case ToolParamsStartPart():
                call_id = part.id
                if call_id in self._params or call_id in self._call_ids:
                    raise MalformedResponse(f"tool call {call_id!r} started twice")
                self._add(PART_OVERHEAD + utf8_size(call_id) + utf8_size(part.name))
                self._params[call_id] = _Params(part.name)
            case ToolParamsEndPart():
                self._open_params(part.id, part.type).ended = True
            case ToolCallPart():
                self._declare(part)
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
            case NativeReasoningPart():
                self._native(part)
            case ToolResultPart():
                pass  # a provider-executed tool: the provider reports it; nothing to run
            case _:
                assert_never(part)

    def _too_large(self) -> ResponseTooLarge:
        limit = self._max_bytes
        return ResponseTooLarge(
            f"the response grew past {format_bytes(limit)}, the most a response may be, and "
            "was stopped there",
            limit,
        )

    def _add(self, size: int) -> None:
        self._size += size
        if self._size > self._max_bytes:
            raise self._too_large()

    def _native(self, part: NativeReasoningPart) -> None:
        size = utf8_size(json.dumps(part.data, ensure_ascii=False, separators=(",", ":")))
        per_block, per_response = self._native_limits
        if size > per_block or self._native_size + size > per_response:
            self._order.append(
                NativeReasoningContent(part.provider, part.model, None, "too-large", size)
            )
            return
        self._native_size += size
        self._order.append(NativeReasoningContent(part.provider, part.model, part.data, "", size))

    def _params_delta(self, call_id: str, part_type: str, delta: str) -> None:
        params = self._open_params(call_id, part_type)
        size = len(delta) if delta.isascii() else utf8_size(delta)
        self._add(size)
        params.size += size
        if params.over:
            return
        params.chunks.append(delta)
        if params.size > self._max_argument_bytes:
            params.give_up()

    def _declare(self, part: ToolCallPart) -> None:
        call_id, name = part.id, part.name
        if call_id in self._call_ids:
            raise MalformedResponse(f"tool call {call_id!r} declared twice")
        streamed = self._params.pop(call_id, None)
        if streamed is None:
            self._add(PART_OVERHEAD + utf8_size(call_id) + utf8_size(name))
        elif streamed.name != name:
            raise MalformedResponse(
                f"tool call {call_id!r} streamed as {streamed.name!r} but declared as {name!r}"
            )
        self._call_ids.add(call_id)
        if streamed is not None and streamed.over:
            self._never_runs(streamed.truncated(call_id))
            return
        # The declared text counts as far as it is more than what streamed (a provider may
        # restate the arguments whole, or declare them without streaming them).
        arguments = part.arguments
        size = utf8_size(arguments)
        streamed_size = 0 if streamed is None else streamed.size
        if size > streamed_size:
            self._add(size - streamed_size)
        if size > self._max_argument_bytes:
            head = arguments[:ARGUMENT_HEAD_CHARS]
            self._never_runs(TruncatedToolCall(call_id, name, head, "too-large", size))
            return
        self._calls.append(part)
        self._order.append(part)

    def _never_runs(self, call: TruncatedToolCall) -> None:
        """A declared call too large to run: kept in its place, and apart."""
        self._oversized.append(call)
        self._order.append(call)

    def _start_block(self, blocks: dict[str, _Block], reasoning: bool, block_id: str) -> None:
        if block_id in blocks:
            raise MalformedResponse(f"{_kind(reasoning)} block {block_id!r} started twice")
        self._add(PART_OVERHEAD + utf8_size(block_id))
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
        truncated = list(self._oversized)
        order = self._order
        if self._params:
            if finish.reason != "length":
                raise MalformedResponse(
                    "tool call(s) "
                    + ", ".join(repr(i) for i in self._params)
                    + f" never completed, and the finish reason is {finish.reason!r}"
                )
            cut_off = [params.truncated(call_id) for call_id, params in self._params.items()]
            truncated += cut_off
            order = [*order, *cut_off]
        if self._open and finish.reason not in ("length", "content-filter", "error"):
            open_blocks = [
                f"{kind} {block_id!r}"
                for kind, blocks in (("text", self._text), ("reasoning", self._reasoning))
                for block_id, block in blocks.items()
                if not block.ended
            ]
            raise MalformedResponse(f"block(s) {', '.join(open_blocks)} never ended")
        content = tuple([item.content() if isinstance(item, _Block) else item for item in order])
        return ModelResponse(
            content,
            tuple(self._calls),
            tuple(truncated),
            finish.reason,
            finish.usage,
            self._metadata,
        )
