"""OpenAI Chat Completions: the request body a :class:`~effectagent.ai.ModelRequest` becomes, and
the stream of chunks turned into response parts — both pure (no SDK, no I/O).

The same wire format serves OpenAI and every OpenAI-compatible server (vLLM, llama.cpp, Ollama):

Request
    System, user, assistant and tool messages map one to one (a tool batch becomes one ``tool``
    message per result). **Reasoning is not sent back**: Chat Completions has no field for it,
    and servers that stream ``reasoning_content`` ask not to receive it again — so an assistant
    turn that only reasoned (cut off by the length limit) is left out, as a message with neither
    content nor tool calls is refused. Tools become ``function`` tools (not strict);
    ``tool_choice`` is auto / none / required or ``{"type": "function", ...}`` for one tool's
    name; ``max_output_tokens`` is ``max_completion_tokens`` (OpenAI) or ``max_tokens``
    (compatible servers). An :class:`~effectagent.ai.OutputFormat` becomes a ``json_schema``
    response format, ``strict`` only when the format asks for it and the schema meets OpenAI's
    strict rules (:func:`~effectagent.providers._output_schema.openai_strict_problems`) — or,
    for a server that refuses a response format next to tools (``output_with_tools=False``:
    Groq, llama.cpp), an instruction appended to the system message of a request that offers
    tools. Usage is requested with ``stream_options.include_usage``.

Stream
    The first chunk with an ID or a choice gives the metadata (id, model, created).
    ``delta.content`` is text (or a list of chunks, as Mistral sends: its ``text`` chunks are
    text, its ``thinking`` chunks reasoning); ``delta.refusal`` is text too, and makes the
    finish reason ``content-filter``;
    ``delta.reasoning_content`` / ``delta.reasoning`` (what vLLM, DeepSeek and Ollama stream) is
    reasoning. Tool calls arrive by ``index`` — parallel calls interleave their argument deltas;
    a call that brings another ID and a name at an index already used is a new call (Ollama
    gives every call of a parallel batch index 0) — and each is declared (params end +
    :class:`~effectagent.ai.ToolCallPart` with the whole raw argument text) when the choice's
    ``finish_reason`` arrives — unless that reason is ``length``: calls cut off by the limit stay
    undeclared, so the engine sees them truncated and never runs them. The finish part follows
    ``[DONE]`` (which carries nothing; usage comes in the last chunk before it), or the end of
    the body for servers that send no ``[DONE]``. A usage that only Groq's ``x_groq`` object
    carries counts until a top-level one comes. Finish reasons: stop, length, tool_calls →
    tool-calls, function_call → tool-calls, content_filter → content-filter, error → error, any
    other value → other (a stream that never gives one is malformed); a response that declared
    tool calls but says "stop" (some servers do) is reported as tool-calls. A chunk holding
    ``error`` is the provider failing mid-stream: its typed error is raised.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, final

from effectagent.ai import (
    AssistantMessage,
    FinishPart,
    FinishReason,
    MalformedResponse,
    MediaNotSupported,
    MediaPart,
    Message,
    ModelRequest,
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
from ._media import b64, data_url, document_text, titled_text, tool_media_note
from ._output_schema import openai_schema, openai_strict_problems, output_instructions

__all__ = ["ChatCompletionsDecoder", "chat_messages", "chat_request_body"]

#: The longest tool-call ID OpenAI's Chat Completions takes (``tool_calls[].id``): a longer one,
#: which another provider made, goes shortened (:func:`capped_call_id`).
MAX_CALL_ID = 40

_FINISH: dict[str, FinishReason] = {
    "stop": "stop",
    "length": "length",
    "tool_calls": "tool-calls",
    "function_call": "tool-calls",
    "content_filter": "content-filter",
    "error": "error",
}


def chat_messages(messages: tuple[Message, ...]) -> list[dict[str, Any]]:
    """The ``messages`` of a Chat Completions request."""
    out: list[dict[str, Any]] = []
    for message in messages:
        match message:
            case SystemMessage():
                out.append({"role": "system", "content": message.content})
            case UserMessage():
                parts = message.content
                content: Any = (
                    parts[0].text
                    if len(parts) == 1 and type(parts[0]) is TextContent
                    else [chat_part(part) for part in parts]
                )
                out.append({"role": "user", "content": content})
            case AssistantMessage():
                entry = _assistant(message)
                if entry is not None:
                    out.append(entry)
            case ToolMessage():
                out.extend(
                    {
                        "role": "tool",
                        "tool_call_id": capped_call_id(result.id, MAX_CALL_ID),
                        "content": result_text(result.result),
                    }
                    for result in message.content
                )
                # A tool message holds text only: the media tools returned follow as user input.
                media: list[dict[str, Any]] = []
                for result in message.content:
                    if result.media:
                        media.append(
                            {
                                "type": "text",
                                "text": tool_media_note(
                                    capped_call_id(result.id, MAX_CALL_ID), result.name
                                ),
                            }
                        )
                        media.extend(chat_part(part) for part in result.media)
                if media:
                    out.append({"role": "user", "content": media})
    return out


def chat_part(part: TextContent | MediaPart) -> dict[str, Any]:
    """One content part of a user message: text, ``image_url`` (a data URL or the image's URL),
    ``file`` (a PDF, as a data URL), ``input_audio`` (WAV or MP3, base64) — a text document is
    sent as text."""
    if type(part) is TextContent:
        return {"type": "text", "text": part.text}
    assert isinstance(part, MediaPart)
    if part.kind == "image":
        return {"type": "image_url", "image_url": {"url": data_url(part)}}
    if part.kind == "audio":
        audio_format = {"audio/wav": "wav", "audio/mpeg": "mp3"}.get(part.media_type)
        if audio_format is None:
            raise MediaNotSupported(
                f"Chat Completions takes WAV or MP3 audio, not {part.media_type}; "
                f"{part.describe()} was not sent"
            )
        return {"type": "input_audio", "input_audio": {"data": b64(part), "format": audio_format}}
    text = document_text(part)
    if text is not None:
        return {"type": "text", "text": titled_text(part)}
    if part.url:
        raise MediaNotSupported(
            f"Chat Completions takes a document's bytes, not its URL; {part.describe()} was not sent"
        )
    return {
        "type": "file",
        "file": {"filename": part.name or "document.pdf", "file_data": data_url(part)},
    }


def _assistant(message: AssistantMessage) -> dict[str, Any] | None:
    """The assistant message — None for one with neither text nor tool calls (a turn that only
    reasoned), which the API would refuse: its ``content`` may be null only beside calls."""
    texts: list[str] = []
    calls: list[dict[str, Any]] = []
    for part in message.content:
        if isinstance(part, TextContent):
            texts.append(part.text)
        elif isinstance(part, ToolCallContent):
            calls.append(
                {
                    "id": capped_call_id(part.id, MAX_CALL_ID),
                    "type": "function",
                    "function": {"name": part.name, "arguments": json_text(part.arguments)},
                }
            )
        # ReasoningContent: Chat Completions has no place for it (see the module notes).
    text = "".join(texts)
    if not text and not calls:
        return None
    entry: dict[str, Any] = {"role": "assistant", "content": text or None}
    if calls:
        entry["tool_calls"] = calls
    return entry


def chat_request_body(
    request: ModelRequest,
    model: str,
    *,
    max_tokens_field: Literal["max_completion_tokens", "max_tokens"] = "max_completion_tokens",
    max_tokens: int | None = None,
    native_output: bool = True,
    output_with_tools: bool = True,
    stream_usage: bool = True,
    options: Mapping[str, Any] | None = None,
    cache_key: bool = False,
) -> dict[str, Any]:
    """The whole JSON body of a streamed Chat Completions request. The output cap is the
    request's ``max_output_tokens``, else ``max_tokens`` (the adapter's default, always given by
    the adapters), in ``max_tokens_field``. ``native_output`` says the output schema is sent at
    all (the engine put it in the instructions otherwise), ``output_with_tools`` whether as a
    response format also when the request offers tools (else in the system message).
    ``cache_key``: the server takes ``prompt_cache_key`` (OpenAI's does), which is then the
    request's ``PromptCaching.key``, when it has one. ``options`` (settings such as
    ``temperature`` or ``reasoning_effort``) are merged in last, except over the keys the request
    itself sets."""
    messages = chat_messages(request.messages)
    output = request.output
    if output is not None and native_output and request.tools and not output_with_tools:
        _instruct(messages, output_instructions(output.schema))
        output = None
    body: dict[str, Any] = {
        "model": model,
        "messages": messages,
        "stream": True,
    }
    if stream_usage:
        body["stream_options"] = {"include_usage": True}
    if request.tools:
        body["tools"] = [
            {
                "type": "function",
                "function": {
                    "name": tool.name,
                    "description": tool.description,
                    "parameters": dict(tool.parameters),
                },
            }
            for tool in request.tools
        ]
        choice = request.tool_choice
        body["tool_choice"] = (
            choice
            if choice in ("auto", "none", "required")
            else {"type": "function", "function": {"name": choice}}
        )
    cap = request.max_output_tokens if request.max_output_tokens is not None else max_tokens
    if cap is not None:
        body[max_tokens_field] = cap
    if output is not None and native_output:
        strict = output.strict and not openai_strict_problems(output.schema)
        body["response_format"] = {
            "type": "json_schema",
            "json_schema": {
                "name": output.name,
                "schema": openai_schema(output.schema),
                "strict": strict,
            },
        }
    cache = request.cache
    if cache_key and cache is not None and cache.key is not None:
        body["prompt_cache_key"] = cache.key
    if options:
        for key, value in options.items():
            body.setdefault(key, value)
        if not request.tools:
            body.pop("parallel_tool_calls", None)  # the API refuses it without tools
    return body


def _instruct(messages: list[dict[str, Any]], note: str) -> None:
    """Append ``note`` to the first system message, or put one first."""
    first = messages[0] if messages else None
    if first is not None and first["role"] == "system" and isinstance(first["content"], str):
        first["content"] = f"{first['content']}\n\n{note}" if first["content"] else note
    else:
        messages.insert(0, {"role": "system", "content": note})


@final
class ChatCompletionsDecoder:
    """Turns decoded Chat Completions chunks into response parts (see the module notes).

    :meth:`feed` takes one chunk (a decoded JSON object), :meth:`done` the ``[DONE]`` marker,
    :meth:`end` the end of the body; each returns the parts it completes. Raises
    :class:`~effectagent.ai.MalformedResponse` for a stream that breaks the format, and the
    provider's typed error for an error chunk. ``require_done`` (OpenAI itself) makes a body
    that ends without ``[DONE]`` malformed; compatible servers may omit it.
    """

    __slots__ = (
        "_blocks",
        "_calls",
        "_done",
        "_finish",
        "_ids",
        "_metadata",
        "_provider",
        "_refused",
        "_require_done",
        "_sent_ids",
        "_slots",
        "_top_usage",
        "_usage",
    )

    def __init__(
        self,
        *,
        provider: str = "OpenAI",
        require_done: bool = True,
        call_ids: CallIds | None = None,
    ) -> None:
        self._provider = provider
        self._ids = CallIds() if call_ids is None else call_ids
        self._require_done = require_done
        self._metadata = False
        self._blocks = Blocks()
        # The calls in order of appearance (by slot); the slot of each wire index's latest call,
        # and the ID the server gave each slot's call.
        self._calls: dict[int, StreamedCall] = {}
        self._slots: dict[int, int] = {}
        self._sent_ids: dict[int, str] = {}
        self._finish: FinishReason | None = None
        self._usage = Usage()
        self._top_usage = False  # a top-level usage came (it outranks Groq's x_groq one)
        self._refused = False
        self._done = False

    @property
    def complete(self) -> bool:
        """Whether the finish part has been produced."""
        return self._done

    def feed(self, chunk: object) -> list[ResponsePart]:
        """The parts one decoded chunk completes."""
        if self._done:
            return []
        data = as_mapping(chunk, "a chat completion chunk")
        error = data.get("error")
        if error:
            raise error_from_payload(self._provider, data)
        out: list[ResponsePart] = []
        if not self._metadata and (data.get("id") or data.get("choices")):
            # Azure's first chunk, its prompt filter's results, has no choices and an empty id,
            # model and time: the metadata come from the first chunk that is the model's.
            self._metadata = True
            created = as_timestamp(data.get("created"))
            out.append(
                ResponseMetadataPart(
                    _str_or_none(data.get("id")) or None,
                    _str_or_none(data.get("model")) or None,
                    created if created else None,
                )
            )
        usage = data.get("usage")
        if isinstance(usage, Mapping):
            self._usage = _usage(usage)
            self._top_usage = True
        elif not self._top_usage:
            groq = data.get("x_groq")
            usage = groq.get("usage") if isinstance(groq, Mapping) else None
            if isinstance(usage, Mapping):
                self._usage = _usage(usage)
        choices = data.get("choices")
        if choices is None:
            return out
        if not isinstance(choices, list):
            raise MalformedResponse("a chat completion chunk's choices are not a list")
        for choice in choices:
            choice = as_mapping(choice, "a chat completion choice")
            if choice.get("index", 0) == 0:
                self._choice(choice, out)
        return out

    def _choice(self, choice: Mapping[str, Any], out: list[ResponsePart]) -> None:
        delta = choice.get("delta")
        if self._finish is not None:
            # Some servers repeat an empty choice after finishing; content would be lost.
            if isinstance(delta, Mapping) and any(
                delta.get(key)
                for key in ("content", "refusal", "tool_calls", "reasoning", "reasoning_content")
            ):
                raise MalformedResponse("the model went on after its finish reason")
            return
        if delta is not None:
            delta = as_mapping(delta, "a chat completion delta")
            blocks = self._blocks
            reasoning = delta.get("reasoning_content") or delta.get("reasoning")
            if reasoning and isinstance(reasoning, str):
                blocks.reasoning_delta(reasoning, out)
            content = delta.get("content")
            if content and isinstance(content, str):
                blocks.text_delta(content, out)
            elif content and isinstance(content, list):
                _content_chunks(content, blocks, out)
            refusal = delta.get("refusal")
            if refusal and isinstance(refusal, str):
                self._refused = True
                blocks.text_delta(refusal, out)
            calls = delta.get("tool_calls")
            if calls:
                if not isinstance(calls, list):
                    raise MalformedResponse("a chat completion delta's tool_calls are not a list")
                for call in calls:
                    self._call(as_mapping(call, "a tool call delta"), out)
        reason = choice.get("finish_reason")
        if reason is not None:
            self._blocks.end_all(out)
            finish: FinishReason = (
                _FINISH.get(reason, "other") if isinstance(reason, str) else "other"
            )
            if finish != "length":  # calls cut off by the limit stay undeclared (truncated)
                for call in self._calls.values():
                    call.end(out)
                    call.declare(out)
            if self._refused and finish == "stop":
                finish = "content-filter"
            if self._calls and finish == "stop":
                finish = "tool-calls"
            self._finish = finish

    def _call(self, call: Mapping[str, Any], out: list[ResponsePart]) -> None:
        index = call.get("index")
        sent_id = call.get("id")
        sent_id = sent_id if isinstance(sent_id, str) and sent_id else None
        name = _name(call)
        slot: int | None
        if type(index) is not int:
            # Servers that omit the index send each call whole, one entry per call.
            slot = len(self._calls) if sent_id or name else len(self._calls) - 1
        else:
            slot = self._slots.get(index)
            if slot is not None and sent_id and name and sent_id != self._sent_ids.get(slot):
                # Another call at an index already used: some servers (Ollama) give every call
                # of a parallel batch index 0; its arguments must not join the earlier call's.
                slot = None
            if slot is None:
                slot = self._slots[index] = len(self._calls)
        streamed = self._calls.get(slot)
        function = call.get("function")
        function = function if isinstance(function, Mapping) else {}
        if streamed is None:
            if not name:
                raise MalformedResponse(f"tool call #{slot} began without a function name")
            streamed = StreamedCall(self._ids.unique(sent_id or f"call_{slot}"), name)
            self._calls[slot] = streamed
            if sent_id:
                self._sent_ids[slot] = sent_id
            out.append(ToolParamsStartPart(streamed.id, streamed.name))
        arguments = function.get("arguments")
        if isinstance(arguments, str):
            streamed.delta(arguments, out)
        elif isinstance(arguments, Mapping):  # a server that sends the arguments decoded
            streamed.delta(json_text(arguments), out)

    def done(self) -> list[ResponsePart]:
        """The ``[DONE]`` marker: the finish part."""
        if self._done:
            return []
        if self._finish is None:
            raise MalformedResponse("the stream said [DONE] before any finish reason")
        self._done = True
        return [FinishPart(self._finish, self._usage)]

    def end(self) -> list[ResponsePart]:
        """The end of the body."""
        if self._done:
            return []
        if self._finish is None:
            raise MalformedResponse("the event stream ended before the model finished")
        if self._require_done:
            raise MalformedResponse("the event stream ended without [DONE]")
        return self.done()


def _content_chunks(chunks: list[Any], blocks: Blocks, out: list[ResponsePart]) -> None:
    """Content sent as a list of chunks (Mistral's): ``{"type": "text", "text": ...}`` is text,
    ``{"type": "thinking", "thinking": [<text chunks>]}`` reasoning; other chunks carry nothing
    to show here."""
    for chunk in chunks:
        if not isinstance(chunk, Mapping):
            continue
        kind = chunk.get("type")
        if kind == "text":
            text = chunk.get("text")
            if isinstance(text, str):
                blocks.text_delta(text, out)
        elif kind == "thinking":
            thinking = chunk.get("thinking")
            pieces = thinking if isinstance(thinking, list) else [thinking]
            for piece in pieces:
                text = piece.get("text") if isinstance(piece, Mapping) else piece
                if isinstance(text, str):
                    blocks.reasoning_delta(text, out)


def _name(call: Mapping[str, Any]) -> str:
    function = call.get("function")
    name = function.get("name") if isinstance(function, Mapping) else None
    return name if isinstance(name, str) else ""


def _str_or_none(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _usage(usage: Mapping[str, Any]) -> Usage:
    prompt = usage.get("prompt_tokens_details")
    prompt = prompt if isinstance(prompt, Mapping) else {}
    completion = usage.get("completion_tokens_details")
    completion = completion if isinstance(completion, Mapping) else {}
    return reported_usage(
        as_int(usage.get("prompt_tokens")),
        as_int(usage.get("completion_tokens")),
        cache_read=as_int(prompt.get("cached_tokens")),
        cache_write=as_int(prompt.get("cache_write_tokens")),
        reasoning=as_int(completion.get("reasoning_tokens")),
    )
