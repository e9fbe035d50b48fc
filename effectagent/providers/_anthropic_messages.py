"""Anthropic Messages: the request body a :class:`~effectagent.ai.ModelRequest` becomes, and the
stream of events turned into response parts — both pure (no SDK, no I/O).

Request
    System messages join into the top-level ``system`` text (the API has no system turns).
    User text, assistant text and ``tool_use`` blocks, and tool results as ``tool_result`` blocks
    (``is_error`` for a failure) of a user turn; consecutive turns of one role are merged, empty
    or blank text (only spaces and line breaks, which the API refuses as a text block — a model
    sometimes streams a blank line before its tool call) is left out. Tool-call arguments that
    are not a JSON object (the engine keeps unparsable text as it came) go back as
    ``{"value": ...}``, since ``input`` must be an object.
    **Thinking** goes back only as the signed ``thinking`` / ``redacted_thinking`` blocks the API
    produced: the prompt's :class:`~effectagent.ai.NativeReasoningContent` of provider
    ``"anthropic"`` (recorded with the response, so a run continued in another process has them),
    first in a turn that declared tool calls — the API verifies signatures and requires them for
    the turn whose tool results it reads. Plain reasoning text, and native reasoning another
    provider made, are not sent.
    ``tool_choice``: auto, none, required → ``any``, a name → ``tool``. ``max_tokens`` (required
    by the API) is the request's ``max_output_tokens`` or the adapter's default. An
    :class:`~effectagent.ai.OutputFormat` becomes ``output_config.format`` (``json_schema``) when
    :func:`~effectagent.providers._output_schema.anthropic_output_schema` can express it; otherwise
    the schema is appended to ``system`` with the instruction to answer with that JSON only.
    **Prompt caching** (``ModelRequest.cache``): ``cache_control`` breakpoints on the system
    prompt (sent as one text block then), on the last tool definition and on the last block of
    each of the last ``recent_messages`` turns — never on a thinking block — at most four in all
    (:func:`cache_marks`).

Stream
    ``message_start`` gives the metadata and the input usage; each content block is a block of
    parts: ``text`` → text, ``thinking`` → reasoning, and when it ends, with its signature, a
    :class:`~effectagent.ai.NativeReasoningPart` of the block as the API takes it back (so does a
    ``redacted_thinking`` block, which shows nothing),
    ``tool_use`` → a tool call whose ``input_json_delta`` pieces are its argument deltas, ended at
    ``content_block_stop`` and declared at ``message_stop`` — unless the stop reason is the length
    limit, which leaves the calls undeclared (truncated, never run). ``message_delta`` carries the
    stop reason and cumulative usage; ``message_stop`` is the finish part. Stop reasons: end_turn / stop_sequence → stop,
    max_tokens / model_context_window_exceeded → length, tool_use → tool-calls, pause_turn →
    pause, refusal → content-filter, none → unknown, anything else → other. Usage:
    ``input.total`` = ``input_tokens`` + cache reads + cache writes, each kept apart. An ``error``
    event raises the provider's typed error; ``ping`` and blocks of server-side tools are skipped.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from typing import Any, final

from effectagent.ai import (
    MAX_CACHE_MARKS,
    AssistantMessage,
    FinishPart,
    FinishReason,
    MalformedResponse,
    MediaNotSupported,
    MediaPart,
    Message,
    ModelRequest,
    NativeReasoningContent,
    NativeReasoningPart,
    PromptCaching,
    ResponseMetadataPart,
    ResponsePart,
    SystemMessage,
    TextContent,
    ToolCallContent,
    ToolMessage,
    ToolParamsStartPart,
    UserMessage,
)

from ._common import (
    Blocks,
    CallIds,
    StreamedCall,
    as_int,
    as_mapping,
    json_text,
    reported_usage,
    result_text,
    well_formed,
)
from ._errors import error_from_payload
from ._media import b64, document_text
from ._output_schema import anthropic_output_schema, output_instructions

__all__ = [
    "FAMILY",
    "MessagesDecoder",
    "anthropic_messages",
    "anthropic_request_body",
    "cache_marks",
    "thinking_setting",
]

_STOP: dict[str, FinishReason] = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "tool_use": "tool-calls",
    "pause_turn": "pause",
    "refusal": "content-filter",
}

#: The provider family its native reasoning is recorded under (and the only one it goes back to).
FAMILY = "anthropic"

_OWN_DELTAS = frozenset({"text_delta", "input_json_delta", "thinking_delta", "signature_delta"})


def anthropic_messages(messages: tuple[Message, ...]) -> tuple[str, list[dict[str, Any]]]:
    """(system text, ``messages``) of a Messages request (see the module notes)."""
    system: list[str] = []
    turns: list[dict[str, Any]] = []

    def add(role: str, content: list[dict[str, Any]]) -> None:
        if not content:
            return
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"].extend(content)
        else:
            turns.append({"role": role, "content": content})

    for message in messages:
        match message:
            case SystemMessage():
                if message.content.strip():
                    system.append(message.content)
            case UserMessage():
                add(
                    "user",
                    [
                        anthropic_block(p)
                        for p in message.content
                        if type(p) is not TextContent or p.text.strip()
                    ],
                )
            case AssistantMessage():
                add("assistant", _assistant(message))
            case ToolMessage():
                results: list[dict[str, Any]] = []
                for result in message.content:
                    text = result_text(result.result)
                    block: dict[str, Any] = {
                        "type": "tool_result",
                        "tool_use_id": wire_call_id(result.id),
                        "content": (
                            text
                            if not result.media
                            else [
                                *([{"type": "text", "text": text}] if text.strip() else []),
                                *(anthropic_block(part) for part in result.media),
                            ]
                        ),
                    }
                    if result.is_failure:
                        block["is_error"] = True
                    results.append(block)
                add("user", results)
    return "\n\n".join(system), turns


#: A tool-use ID as the Messages API takes it.
_CALL_ID = re.compile(r"[A-Za-z0-9_-]{1,200}")


def wire_call_id(call_id: str) -> str:
    """``call_id`` as the API takes it: as it is when it is letters, digits, ``_`` and ``-``
    (every ID Anthropic made), else — an ID another provider made, such as a server's
    ``functions.get_weather:0``, in a conversation that moved to Anthropic — those characters
    kept, the others ``_``, and a digest of the whole ID, so a call and its result still match
    and two IDs never become one."""
    if _CALL_ID.fullmatch(call_id):
        return call_id
    kept = re.sub(r"[^A-Za-z0-9_-]", "_", call_id)[:64]
    digest = hashlib.sha256(call_id.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    return f"{kept}_{digest}"


def anthropic_block(part: TextContent | MediaPart) -> dict[str, Any]:
    """One content block of a user message or a tool result: ``text``, ``image`` or
    ``document`` with a ``base64``, ``url`` or (a text document) ``text`` source."""
    if type(part) is TextContent:
        return {"type": "text", "text": part.text}
    assert isinstance(part, MediaPart)
    if part.kind == "audio":
        raise MediaNotSupported(f"Anthropic takes no audio; {part.describe()} was not sent")
    source: dict[str, Any]
    text = document_text(part)
    if part.url:
        if part.kind == "document" and part.media_type != "application/pdf":
            # A URL source is a PDF's; a text document goes as its text, which a URL is not.
            raise MediaNotSupported(
                f"Anthropic takes a text document's bytes, not its URL; {part.describe()} was "
                "not sent"
            )
        source = {"type": "url", "url": part.url}
    elif text is not None:
        source = {"type": "text", "media_type": "text/plain", "data": text}
    else:
        source = {"type": "base64", "media_type": part.media_type, "data": b64(part)}
    block: dict[str, Any] = {"type": part.kind, "source": source}
    if part.kind == "document" and part.name:
        block["title"] = part.name
    return block


def _assistant(message: AssistantMessage) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    if any(isinstance(p, ToolCallContent) for p in message.content):
        blocks.extend(
            dict(p.data)
            for p in message.content
            if isinstance(p, NativeReasoningContent) and p.provider == FAMILY and p.data
        )
    for part in message.content:
        if isinstance(part, TextContent):
            if part.text.strip():  # the API refuses a blank text block
                blocks.append({"type": "text", "text": part.text})
        elif isinstance(part, ToolCallContent):
            arguments = part.arguments
            blocks.append(
                {
                    "type": "tool_use",
                    "id": wire_call_id(part.id),
                    "name": part.name,
                    "input": arguments if isinstance(arguments, dict) else {"value": arguments},
                }
            )
    return blocks


#: The smallest thinking budget the API accepts.
MIN_THINKING_BUDGET = 1024


def thinking_setting(budget: int | None, max_tokens: int) -> dict[str, Any] | None:
    """Extended thinking for one request: ``budget`` kept below the request's ``max_tokens``
    (thinking counts toward it, and the API requires the budget to be smaller) — or no thinking
    at all when that leaves less than the API's minimum budget (a request capped that low, such
    as a short summary, is made without thinking)."""
    if not budget:
        return None
    budget = min(budget, max_tokens - 1)
    if budget < MIN_THINKING_BUDGET:
        return None
    return {"type": "enabled", "budget_tokens": budget}


def anthropic_request_body(
    request: ModelRequest,
    model: str,
    *,
    max_tokens: int,
    thinking_budget: int | None = None,
    options: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The whole JSON body of a streamed Messages request. ``max_tokens`` applies when the
    request sets no ``max_output_tokens``; ``thinking_budget`` turns extended thinking on (see
    :func:`thinking_setting`); ``options`` are merged in last, except over keys already set."""
    system, messages = anthropic_messages(request.messages)
    cap = request.max_output_tokens if request.max_output_tokens is not None else max_tokens
    body: dict[str, Any] = {"model": model, "messages": messages, "max_tokens": cap, "stream": True}
    output = request.output
    if output is not None:
        native = anthropic_output_schema(output.schema)
        if native is not None:
            body["output_config"] = {"format": {"type": "json_schema", "schema": native}}
        else:
            note = output_instructions(output.schema)
            system = f"{system}\n\n{note}" if system else note
    if system:
        body["system"] = system
    if request.tools:
        body["tools"] = [
            {
                "name": tool.name,
                "description": tool.description,
                "input_schema": dict(tool.parameters),
            }
            for tool in request.tools
        ]
        choice = request.tool_choice
        body["tool_choice"] = (
            {"type": "auto"}
            if choice == "auto"
            else {"type": "none"}
            if choice == "none"
            else {"type": "any"}
            if choice == "required"
            else {"type": "tool", "name": choice}
        )
    thinking = thinking_setting(thinking_budget, cap)
    if thinking is not None:
        body["thinking"] = thinking
    if request.cache is not None:
        cache_marks(body, request.cache)
    if options:
        for key, value in options.items():
            body.setdefault(key, value)
    return body


#: Blocks a ``cache_control`` mark may not be put on.
_UNMARKABLE = frozenset({"thinking", "redacted_thinking"})


def cache_marks(body: dict[str, Any], cache: PromptCaching) -> int:
    """Put ``cache``'s breakpoints on a Messages request ``body`` (see the module notes); return
    how many were put — at most :data:`~effectagent.ai.MAX_CACHE_MARKS`, the API's limit, which
    :class:`~effectagent.ai.PromptCaching` already keeps to."""
    control: dict[str, Any] = {"type": "ephemeral"}
    if cache.ttl != "5m":
        control["ttl"] = cache.ttl
    marks = 0
    tools = body.get("tools")
    if cache.tools and tools:
        tools[-1]["cache_control"] = dict(control)
        marks += 1
    system = body.get("system")
    if cache.system and isinstance(system, str) and system:
        body["system"] = [{"type": "text", "text": system, "cache_control": dict(control)}]
        marks += 1
    recent = cache.recent_messages
    for turn in reversed(body["messages"]):
        if recent <= 0 or marks >= MAX_CACHE_MARKS:
            break
        block = next(
            (b for b in reversed(turn["content"]) if b.get("type") not in _UNMARKABLE), None
        )
        if block is not None:
            block["cache_control"] = dict(control)
            marks += 1
            recent -= 1
    return marks


@final
class _Block:
    """One content block of the streamed message, by its index."""

    __slots__ = ("call", "initial", "kind", "signature", "thinking")

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.call: StreamedCall | None = None
        self.initial = ""  # a tool_use block's input given whole at its start
        self.thinking: list[str] = []
        self.signature = ""


@final
class MessagesDecoder:
    """Turns decoded Messages stream events into response parts (see the module notes).

    :meth:`feed` takes one event (a decoded JSON object with its ``type``), :meth:`end` the end of
    the body. After the stream, :attr:`call_ids` are the tool calls whose input completed, in
    order. ``model`` is what its native reasoning parts name.
    """

    __slots__ = (
        "_blocks",
        "_complete",
        "_content",
        "_ended",
        "_ids",
        "_input",
        "_long_writes",
        "_metadata",
        "_model",
        "_output",
        "_reason",
        "call_ids",
    )

    def __init__(self, *, call_ids: CallIds | None = None, model: str = "") -> None:
        self._ids = CallIds() if call_ids is None else call_ids
        self._model = model
        self._metadata = False
        self._blocks = Blocks()
        self._content: dict[int, _Block] = {}
        self._ended: list[StreamedCall] = []
        self._reason: FinishReason = "unknown"
        self._input = {"input_tokens": 0, "cache_read": 0, "cache_write": 0}
        self._long_writes = 0  # of cache_write: the one-hour entries
        self._output = {"output_tokens": 0, "thinking": 0}
        self._complete = False
        self.call_ids: list[str] = []

    @property
    def complete(self) -> bool:
        """Whether the finish part has been produced."""
        return self._complete

    def feed(self, event: object) -> list[ResponsePart]:
        """The parts one decoded event completes."""
        data = as_mapping(event, "a Messages stream event")
        if self._complete:
            return []
        kind = data.get("type")
        out: list[ResponsePart] = []
        if kind == "content_block_delta":
            self._delta(data, out)
        elif kind == "content_block_start":
            self._start(data, out)
        elif kind == "content_block_stop":
            self._stop(data, out)
        elif kind == "message_start":
            message = as_mapping(data.get("message"), "a message_start message")
            if not self._metadata:
                self._metadata = True
                out.append(
                    ResponseMetadataPart(
                        message.get("id") if isinstance(message.get("id"), str) else None,
                        message.get("model") if isinstance(message.get("model"), str) else None,
                    )
                )
            usage = message.get("usage")
            if isinstance(usage, Mapping):
                self._usage(usage)
        elif kind == "message_delta":
            delta = data.get("delta")
            if isinstance(delta, Mapping) and "stop_reason" in delta:
                reason = delta.get("stop_reason")
                self._reason = (
                    _STOP.get(reason, "other")
                    if isinstance(reason, str)
                    else "unknown"
                    if reason is None
                    else "other"
                )
            usage = data.get("usage")
            if isinstance(usage, Mapping):
                self._usage(usage)
        elif kind == "message_stop":
            self._blocks.end_all(out)
            if self._reason != "length":  # calls cut off by the limit stay undeclared
                for call in self._ended:
                    call.declare(out)
            usage = reported_usage(
                sum(self._input.values()),
                self._output["output_tokens"],
                cache_read=self._input["cache_read"],
                cache_write=self._input["cache_write"],
                reasoning=self._output["thinking"],
                cache_write_long=self._long_writes,
            )
            self._complete = True
            out.append(FinishPart(self._reason, usage))
        elif kind == "error":
            raise error_from_payload("Anthropic", data)
        elif not isinstance(kind, str):
            raise MalformedResponse("a Messages stream event has no type")
        return out

    def _index(self, data: Mapping[str, Any]) -> int:
        index = data.get("index")
        if type(index) is not int:
            raise MalformedResponse(f"a {data.get('type')} event without its block index")
        return index

    def _start(self, data: Mapping[str, Any], out: list[ResponsePart]) -> None:
        index = self._index(data)
        if index in self._content:
            raise MalformedResponse(f"content block {index} started twice")
        content = as_mapping(data.get("content_block"), "a content block")
        kind = content.get("type")
        block = self._content[index] = _Block(kind if isinstance(kind, str) else "")
        if kind == "text":
            text = content.get("text")
            self._blocks.end_all(out)
            if isinstance(text, str):
                self._blocks.text_delta(text, out)
        elif kind == "thinking":
            self._blocks.end_all(out)
            thinking = content.get("thinking")
            if isinstance(thinking, str) and thinking:
                block.thinking.append(thinking)
                self._blocks.reasoning_delta(thinking, out)
        elif kind == "redacted_thinking":
            opaque = content.get("data")
            if isinstance(opaque, str) and opaque:
                self._blocks.end_all(out)
                native = {"type": "redacted_thinking", "data": opaque}
                out.append(NativeReasoningPart(FAMILY, self._model, native))
        elif kind == "tool_use":
            call_id, name = content.get("id"), content.get("name")
            if not (isinstance(call_id, str) and call_id and isinstance(name, str) and name):
                raise MalformedResponse("a tool_use block without its id or name")
            block.call = StreamedCall(self._ids.unique(call_id), name)
            initial = content.get("input")
            if isinstance(initial, Mapping) and initial:
                block.initial = json_text(initial)
            out.append(ToolParamsStartPart(block.call.id, block.call.name))

    def _delta(self, data: Mapping[str, Any], out: list[ResponsePart]) -> None:
        block = self._content.get(self._index(data))
        if block is None:
            raise MalformedResponse("a content_block_delta for a block that never started")
        delta = as_mapping(data.get("delta"), "a content block delta")
        kind = delta.get("type")
        if kind == "text_delta" and block.kind == "text":
            self._blocks.text_delta(_text(delta, "text"), out)
        elif kind == "input_json_delta" and block.call is not None:
            block.call.delta(_text(delta, "partial_json"), out)
        elif kind == "thinking_delta" and block.kind == "thinking":
            text = _text(delta, "thinking")
            block.thinking.append(text)
            self._blocks.reasoning_delta(text, out)
        elif kind == "signature_delta" and block.kind == "thinking":
            block.signature += _text(delta, "signature")
        elif (
            isinstance(kind, str)
            and kind in _OWN_DELTAS
            and block.kind in ("text", "thinking", "tool_use")
        ):
            raise MalformedResponse(f"a {kind} inside a {block.kind} block")
        # citations and the blocks of server-side tools carry nothing to show here.

    def _stop(self, data: Mapping[str, Any], out: list[ResponsePart]) -> None:
        block = self._content.get(self._index(data))
        if block is None:
            raise MalformedResponse("a content_block_stop for a block that never started")
        if block.kind == "text":
            self._blocks.end_text(out)
        elif block.kind == "thinking":
            self._blocks.end_reasoning(out)
            if block.signature:  # unsigned, the API would not take it back
                native = {
                    "type": "thinking",
                    "thinking": well_formed("".join(block.thinking)),
                    "signature": block.signature,
                }
                out.append(NativeReasoningPart(FAMILY, self._model, native))
        elif block.call is not None:
            call = block.call
            block.call = None
            call.end(out, None if call.chunks else block.initial)
            self._ended.append(call)
            self.call_ids.append(call.id)

    def _usage(self, usage: Mapping[str, Any]) -> None:
        # message_delta usage is cumulative: a value it carries replaces the earlier one.
        for key, field in (
            ("input_tokens", "input_tokens"),
            ("cache_read_input_tokens", "cache_read"),
            ("cache_creation_input_tokens", "cache_write"),
        ):
            if usage.get(key) is not None:
                self._input[field] = as_int(usage.get(key))
        creation = usage.get("cache_creation")  # the writes by lifetime
        if isinstance(creation, Mapping) and creation.get("ephemeral_1h_input_tokens") is not None:
            self._long_writes = as_int(creation.get("ephemeral_1h_input_tokens"))
        if usage.get("output_tokens") is not None:
            self._output["output_tokens"] = as_int(usage.get("output_tokens"))
        details = usage.get("output_tokens_details")
        if isinstance(details, Mapping) and details.get("thinking_tokens") is not None:
            self._output["thinking"] = as_int(details.get("thinking_tokens"))

    def end(self) -> list[ResponsePart]:
        """The end of the body."""
        if not self._complete:
            raise MalformedResponse("the event stream ended before message_stop")
        return []


def _text(data: Mapping[str, Any], key: str) -> str:
    value = data.get(key)
    if not isinstance(value, str):
        raise MalformedResponse(f"a {data.get('type')} without its {key}")
    return value
