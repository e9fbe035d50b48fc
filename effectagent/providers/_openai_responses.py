"""OpenAI Responses: the request body a :class:`~effectagent.ai.ModelRequest` becomes, and the
stream of typed events turned into response parts — both pure (no SDK, no I/O).

Request
    System and user messages become input messages; assistant text an assistant message, each
    tool call a ``function_call`` item and each result a ``function_call_output``. **Reasoning**
    is sent back only as OpenAI's own reasoning items: the prompt's
    :class:`~effectagent.ai.NativeReasoningContent` of provider ``"openai-responses"`` (recorded
    with the response, so a run continued in another process has them), first in a turn that
    declared tool calls. An item can go back when it is stored (``store``) or carries its
    ``encrypted_content`` (requested with ``include`` whenever reasoning is configured and nothing
    is stored); plain reasoning text, and native reasoning another provider made, are not sent. Tools are ``function`` tools with
    ``strict: false``; ``tool_choice`` is auto / none / required or ``{"type": "function",
    "name": ...}``; ``max_output_tokens`` as is. An :class:`~effectagent.ai.OutputFormat` becomes
    ``text.format`` of type ``json_schema`` (strict as for Chat Completions).

Stream
    ``response.created`` gives the metadata. Text comes from ``response.output_text.delta`` (and
    ``response.refusal.delta``, which makes the finish ``content-filter``); reasoning from the
    reasoning *summary* deltas (a new block per summary part) and from raw
    ``response.reasoning_text.delta``; a reasoning output item that can go back (see above) ends
    as a :class:`~effectagent.ai.NativeReasoningPart` (``type``, ``id``, ``summary``,
    ``encrypted_content``). A ``function_call`` output item opens a tool call; its
    argument deltas stream by item id (parallel calls interleave); the item's ``done`` event ends
    its arguments with the full text it restates, and the finish declares the ended calls —
    except a length finish, which leaves them undeclared (truncated, never run).
    ``response.completed`` ends the response — tool-calls when it has calls, else stop —,
    ``response.incomplete`` ends it with length (``max_output_tokens``), content-filter, or other. ``response.failed`` and ``error``
    events raise the provider's typed error.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, final

from effectagent.ai import (
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
    ResponseMetadataPart,
    ResponsePart,
    SystemMessage,
    TextContent,
    ToolCallContent,
    ToolMessage,
    ToolParamsStartPart,
    Usage,
    UserMessage,
)

from ._common import (
    Blocks,
    CallIds,
    StreamedCall,
    as_int,
    as_mapping,
    as_timestamp,
    capped_call_id,
    json_text,
    reported_usage,
    result_text,
)
from ._errors import error_from_payload
from ._media import b64, data_url, document_text, titled_text
from ._output_schema import openai_schema, openai_strict_problems

__all__ = ["FAMILY", "ResponsesDecoder", "responses_input", "responses_request_body"]

#: The longest ``call_id`` the Responses API takes: a longer one, which another provider made,
#: goes shortened (:func:`capped_call_id`).
MAX_CALL_ID = 64

#: The provider family its native reasoning is recorded under (and the only one it goes back to).
FAMILY = "openai-responses"

_INCOMPLETE: dict[str, FinishReason] = {
    "max_output_tokens": "length",
    "content_filter": "content-filter",
}


def responses_input(messages: tuple[Message, ...]) -> list[dict[str, Any]]:
    """The ``input`` items of a Responses request (see the module notes)."""
    items: list[dict[str, Any]] = []
    for message in messages:
        match message:
            case SystemMessage():
                items.append({"role": "system", "content": message.content})
            case UserMessage():
                items.append(
                    {"role": "user", "content": [responses_part(p) for p in message.content]}
                )
            case AssistantMessage():
                items.extend(_assistant(message))
            case ToolMessage():
                items.extend(
                    {
                        "type": "function_call_output",
                        "call_id": capped_call_id(result.id, MAX_CALL_ID),
                        "output": (
                            result_text(result.result)
                            if not result.media
                            else [
                                {"type": "input_text", "text": result_text(result.result)},
                                *(responses_part(part) for part in result.media),
                            ]
                        ),
                    }
                    for result in message.content
                )
    return items


def responses_part(part: TextContent | MediaPart) -> dict[str, Any]:
    """One content item of a user message or a tool's output: ``input_text``, ``input_image``
    (a data URL or the image's URL), ``input_file`` (a PDF: a data URL, or its ``file_url``),
    ``input_audio`` (WAV or MP3, base64) — a text document is sent as text."""
    if type(part) is TextContent:
        return {"type": "input_text", "text": part.text}
    assert isinstance(part, MediaPart)
    if part.kind == "image":
        return {"type": "input_image", "image_url": data_url(part), "detail": "auto"}
    if part.kind == "audio":
        audio_format = {"audio/wav": "wav", "audio/mpeg": "mp3"}.get(part.media_type)
        if audio_format is None:
            raise MediaNotSupported(
                f"the Responses API takes WAV or MP3 audio, not {part.media_type}; "
                f"{part.describe()} was not sent"
            )
        return {"type": "input_audio", "input_audio": {"data": b64(part), "format": audio_format}}
    if document_text(part) is not None:
        return {"type": "input_text", "text": titled_text(part)}
    if part.url:
        return {"type": "input_file", "file_url": part.url}
    return {
        "type": "input_file",
        "filename": part.name or "document.pdf",
        "file_data": data_url(part),
    }


def _assistant(message: AssistantMessage) -> list[dict[str, Any]]:
    """Reasoning items first (as OpenAI produced them), then text and calls in their order."""
    items: list[dict[str, Any]] = []
    if any(isinstance(p, ToolCallContent) for p in message.content):
        items.extend(
            dict(p.data)
            for p in message.content
            if isinstance(p, NativeReasoningContent) and p.provider == FAMILY and p.data
        )
    texts: list[str] = []
    for part in message.content:
        if isinstance(part, TextContent):
            texts.append(part.text)
        elif isinstance(part, ToolCallContent):
            if texts:
                items.append({"role": "assistant", "content": "".join(texts)})
                texts = []
            items.append(
                {
                    "type": "function_call",
                    "call_id": capped_call_id(part.id, MAX_CALL_ID),
                    "name": part.name,
                    "arguments": json_text(part.arguments),
                }
            )
        # ReasoningContent: only the native items above can go back (see the module notes).
    if texts:
        items.append({"role": "assistant", "content": "".join(texts)})
    return items


def responses_request_body(
    request: ModelRequest,
    model: str,
    *,
    store: bool = False,
    reasoning: Mapping[str, Any] | None = None,
    options: Mapping[str, Any] | None = None,
    max_tokens: int | None = None,
) -> dict[str, Any]:
    """The whole JSON body of a streamed Responses request. ``reasoning`` is the ``reasoning``
    setting (effort, summary); the output cap is the request's ``max_output_tokens``, else
    ``max_tokens`` (the adapter's default, always given by the adapter); the request's cache
    key (``PromptCaching.key``) is ``prompt_cache_key``; ``options`` are merged in last, except
    over keys already set."""
    body: dict[str, Any] = {
        "model": model,
        "input": responses_input(request.messages),
        "stream": True,
        "store": store,
    }
    if reasoning:
        body["reasoning"] = dict(reasoning)
        if not store:
            body["include"] = ["reasoning.encrypted_content"]
    if request.tools:
        body["tools"] = [
            {
                "type": "function",
                "name": tool.name,
                "description": tool.description,
                "parameters": dict(tool.parameters),
                "strict": False,
            }
            for tool in request.tools
        ]
        choice = request.tool_choice
        body["tool_choice"] = (
            choice
            if choice in ("auto", "none", "required")
            else {"type": "function", "name": choice}
        )
    cap = request.max_output_tokens if request.max_output_tokens is not None else max_tokens
    if cap is not None:
        body["max_output_tokens"] = cap
    output = request.output
    if output is not None:
        body["text"] = {
            "format": {
                "type": "json_schema",
                "name": output.name,
                "schema": openai_schema(output.schema),
                "strict": output.strict and not openai_strict_problems(output.schema),
            }
        }
    cache = request.cache
    if cache is not None and cache.key is not None:
        body["prompt_cache_key"] = cache.key
    if options:
        for key, value in options.items():
            body.setdefault(key, value)
        if not request.tools:
            body.pop("parallel_tool_calls", None)  # the API refuses it without tools
    return body


@final
class ResponsesDecoder:
    """Turns decoded Responses stream events into response parts (see the module notes).

    :meth:`feed` takes one event (a decoded JSON object with its ``type``), :meth:`end` the end of
    the body. After the stream, :attr:`call_ids` are the tool calls whose arguments completed,
    in order. ``model`` is what its native reasoning parts name; ``store`` says whether the
    request stored the response (a stored item goes back by its ``id``, without encrypted
    content).
    """

    __slots__ = (
        "_blocks",
        "_calls",
        "_complete",
        "_ended",
        "_ids",
        "_metadata",
        "_model",
        "_refused",
        "_store",
        "call_ids",
    )

    def __init__(
        self, *, call_ids: CallIds | None = None, model: str = "", store: bool = False
    ) -> None:
        self._ids = CallIds() if call_ids is None else call_ids
        self._model = model
        self._store = store
        self._metadata = False
        self._blocks = Blocks()
        self._calls: dict[str, StreamedCall] = {}
        self._ended: list[StreamedCall] = []
        self._complete = False
        self._refused = False
        self.call_ids: list[str] = []

    @property
    def complete(self) -> bool:
        """Whether the finish part has been produced."""
        return self._complete

    def feed(self, event: object) -> list[ResponsePart]:
        """The parts one decoded event completes."""
        data = as_mapping(event, "a Responses stream event")
        if self._complete:
            return []
        kind = data.get("type")
        out: list[ResponsePart] = []
        blocks = self._blocks
        if kind == "response.output_text.delta":
            blocks.text_delta(_text(data, "delta"), out)
        elif kind == "response.function_call_arguments.delta":
            self._call(data).delta(_text(data, "delta"), out)
        elif kind in ("response.reasoning_summary_text.delta", "response.reasoning_text.delta"):
            blocks.reasoning_delta(_text(data, "delta"), out)
        elif kind == "response.reasoning_summary_part.added":
            blocks.end_reasoning(out)  # each summary part is a block of its own
        elif kind == "response.refusal.delta":
            self._refused = True
            blocks.text_delta(_text(data, "delta"), out)
        elif kind == "response.output_item.added":
            self._item_added(as_mapping(data.get("item"), "an output item"), out)
        elif kind == "response.output_item.done":
            self._item_done(as_mapping(data.get("item"), "an output item"), out)
        elif kind in ("response.created", "response.in_progress"):
            if not self._metadata:
                self._metadata = True
                response = as_mapping(data.get("response"), "a response")
                created = response.get("created_at")
                out.append(
                    ResponseMetadataPart(
                        _str_or_none(response.get("id")),
                        _str_or_none(response.get("model")),
                        as_timestamp(created),
                    )
                )
        elif kind in ("response.completed", "response.incomplete"):
            self._finish(as_mapping(data.get("response"), "a response"), out)
        elif kind == "response.failed":
            response = as_mapping(data.get("response"), "a response")
            raise error_from_payload("OpenAI", response.get("error") or {"message": "failed"})
        elif kind == "error":
            raise error_from_payload("OpenAI", data)
        elif not isinstance(kind, str):
            raise MalformedResponse("a Responses stream event has no type")
        return out

    def _call(self, data: Mapping[str, Any]) -> StreamedCall:
        item_id = data.get("item_id")
        call = self._calls.get(item_id) if isinstance(item_id, str) else None
        if call is None:
            raise MalformedResponse("function call arguments for an item that was never added")
        return call

    def _item_added(self, item: Mapping[str, Any], out: list[ResponsePart]) -> None:
        if item.get("type") != "function_call":
            return
        item_id, call_id, name = item.get("id"), item.get("call_id"), item.get("name")
        if not (isinstance(call_id, str) and call_id and isinstance(name, str) and name):
            raise MalformedResponse("a function call item without its call_id or name")
        key = item_id if isinstance(item_id, str) else call_id
        if key in self._calls:
            raise MalformedResponse("a function call item was added twice")
        call = StreamedCall(self._ids.unique(call_id), name)
        self._calls[key] = call
        out.append(ToolParamsStartPart(call.id, call.name))
        arguments = item.get("arguments")
        if isinstance(arguments, str):
            call.delta(arguments, out)

    def _item_done(self, item: Mapping[str, Any], out: list[ResponsePart]) -> None:
        kind = item.get("type")
        if kind == "function_call":
            item_id, call_id = item.get("id"), item.get("call_id")
            key = item_id if isinstance(item_id, str) and item_id in self._calls else call_id
            call = self._calls.pop(key, None) if isinstance(key, str) else None
            if call is None:
                raise MalformedResponse("a function call item ended that never began")
            arguments = item.get("arguments")
            call.end(out, arguments if isinstance(arguments, str) else None)
            self._ended.append(call)
            self.call_ids.append(call.id)
        elif kind == "message":
            self._blocks.end_text(out)
        elif kind == "reasoning":
            self._blocks.end_reasoning(out)
            kept = {
                key: item[key]
                for key in ("type", "id", "summary", "encrypted_content")
                if key in item
            }
            kept.setdefault("summary", [])
            if self._store or kept.get("encrypted_content"):
                out.append(NativeReasoningPart(FAMILY, self._model, kept))

    def _finish(self, response: Mapping[str, Any], out: list[ResponsePart]) -> None:
        self._blocks.end_all(out)
        status = response.get("status")
        reason: FinishReason
        if status == "incomplete":
            details = response.get("incomplete_details")
            why = details.get("reason") if isinstance(details, Mapping) else None
            reason = _INCOMPLETE.get(why, "other") if isinstance(why, str) else "other"
        elif self._refused:
            reason = "content-filter"
        elif self.call_ids:
            reason = "tool-calls"
        elif status in ("completed", None):
            reason = "stop"
        else:
            reason = "other"
        if reason != "length":  # calls cut off by the limit stay undeclared (truncated)
            for call in self._ended:
                call.declare(out)
        usage = response.get("usage")
        self._complete = True
        out.append(FinishPart(reason, _usage(usage) if isinstance(usage, Mapping) else Usage()))

    def end(self) -> list[ResponsePart]:
        """The end of the body."""
        if not self._complete:
            raise MalformedResponse("the event stream ended before the response completed")
        return []


def _text(data: Mapping[str, Any], key: str) -> str:
    value = data.get(key)
    if not isinstance(value, str):
        raise MalformedResponse(f"a {data.get('type')} event without its {key} text")
    return value


def _str_or_none(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _usage(usage: Mapping[str, Any]) -> Usage:
    given = usage.get("input_tokens_details")
    given = given if isinstance(given, Mapping) else {}
    made = usage.get("output_tokens_details")
    made = made if isinstance(made, Mapping) else {}
    return reported_usage(
        as_int(usage.get("input_tokens")),
        as_int(usage.get("output_tokens")),
        cache_read=as_int(given.get("cached_tokens")),
        cache_write=as_int(given.get("cache_write_tokens")),
        reasoning=as_int(made.get("reasoning_tokens")),
    )
