"""Gemini ``generateContent``: the contents and configuration a
:class:`~effectagent.ai.ModelRequest` becomes, and the streamed responses turned into response
parts — both pure (no SDK, no I/O).

Request
    What the official ``google-genai`` SDK takes (``contents`` and a ``GenerateContentConfig``,
    as dicts with the SDK's field names); the SDK writes the REST body from them. System messages
    join into ``system_instruction``. User text becomes ``user`` turns, assistant text and
    ``function_call`` parts ``model`` turns, and tool results ``function_response`` parts of a
    ``user`` turn — ``{"output": ...}``, or ``{"error": ...}`` for a failure, the keys the API
    documents — with the call's ID and name; consecutive turns of one role are merged, empty text
    is left out. Arguments that are not a JSON object (the engine keeps unparsable text as it
    came) go back as ``{"value": ...}``, since ``args`` must be an object. **Thought signatures**
    go back only as the API produced them: the prompt's
    :class:`~effectagent.ai.NativeReasoningContent` of provider ``"google"`` *and of the same
    model* (recorded with the response, so a run continued in another process has them), in a
    turn that declared tool calls — each on the part it came with: the function call it was
    attached to (by its ID, else by its place among the turn's calls; the API checks the first
    call of each step of the current turn), the turn's text, or a thought part, which is replayed
    with its text. Plain reasoning text, and native reasoning another provider or model made, are
    not sent. Tools are ``function_declarations`` with
    ``parameters_json_schema`` (the tool's JSON Schema as it is); ``tool_choice``: auto → AUTO,
    none → NONE, required → ANY, a name → ANY restricted to that name. ``max_output_tokens`` is
    the request's, else the adapter's default. An :class:`~effectagent.ai.OutputFormat` becomes
    ``response_mime_type: application/json`` with ``response_json_schema``
    (:func:`~effectagent.providers._output_schema.gemini_output_schema`) — except when the
    request also offers tools to a model that cannot combine them with a response schema (the
    Gemini models before 3 refuse that): then the schema goes into the system instruction.

Stream
    Each server-sent event is a whole ``GenerateContentResponse``: the first gives the metadata
    (``responseId``, ``modelVersion``). The first candidate's parts stream in order: ``text`` →
    text, ``text`` with ``thought: true`` → reasoning, ``functionCall`` → a tool call, streamed
    at once with its whole ``args`` (the API sends each call complete, so parallel calls never
    interleave) and declared when the body ends — unless the finish reason is the length limit,
    which leaves the calls undeclared (truncated, never run). A call without an ``id`` gets
    ``call_<n>``. ``thoughtSignature`` on any part is kept for replay: when the body ends, each
    thought part (its text and signature), call signature and text signature is a
    :class:`~effectagent.ai.NativeReasoningPart`, before the finish part. Usage is cumulative (the
    last ``usageMetadata`` wins): ``input.total`` = ``promptTokenCount`` +
    ``toolUsePromptTokenCount``, cache reads ``cachedContentTokenCount`` (the API reports no
    cache writes); ``output.total`` = ``candidatesTokenCount`` + ``thoughtsTokenCount``, the
    latter the reasoning. The finish part comes at the end of the body (the API sends no end
    marker) — a body that ends before a finish reason (or a blocked prompt) is malformed. Finish
    reasons: STOP → stop (tool-calls when calls were declared), MAX_TOKENS → length, SAFETY,
    RECITATION, BLOCKLIST, PROHIBITED_CONTENT, SPII and the image filters → content-filter, a
    malformed or unexpected function call, too many calls or a missing thought signature →
    error, FINISH_REASON_UNSPECIFIED → unknown, anything else → other; a prompt refused with a
    ``promptFeedback.blockReason`` → content-filter. An event holding ``error`` is the provider
    failing mid-stream: its typed error is raised.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from typing import Any, final

from effectagent.ai import (
    AssistantMessage,
    FinishPart,
    FinishReason,
    MalformedResponse,
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
    ToolResultContent,
    Usage,
    UserMessage,
)

from ._common import Blocks, CallIds, StreamedCall, as_int, as_mapping, json_text, reported_usage
from ._errors import error_from_payload
from ._output_schema import gemini_output_schema, output_instructions

__all__ = [
    "FAMILY",
    "PROVIDER",
    "GeminiDecoder",
    "gemini_contents",
    "gemini_request",
    "signature_bytes",
]

#: How the provider is named in messages.
PROVIDER = "Gemini"
#: The provider family its native reasoning is recorded under (and the only one it goes back to,
#: for the same model: a thought signature is the model's own).
FAMILY = "google"

_FINISH: dict[str, FinishReason] = {
    "STOP": "stop",
    "MAX_TOKENS": "length",
    "SAFETY": "content-filter",
    "RECITATION": "content-filter",
    "BLOCKLIST": "content-filter",
    "PROHIBITED_CONTENT": "content-filter",
    "SPII": "content-filter",
    "IMAGE_SAFETY": "content-filter",
    "IMAGE_PROHIBITED_CONTENT": "content-filter",
    "IMAGE_RECITATION": "content-filter",
    "MALFORMED_FUNCTION_CALL": "error",
    "UNEXPECTED_TOOL_CALL": "error",
    "TOO_MANY_TOOL_CALLS": "error",
    "MISSING_THOUGHT_SIGNATURE": "error",
    "MALFORMED_RESPONSE": "error",
    "FINISH_REASON_UNSPECIFIED": "unknown",
}

_MODES = {"auto": "AUTO", "none": "NONE", "required": "ANY"}


def signature_bytes(signature: str) -> bytes | None:
    """A thought signature as the SDK takes it (bytes), from the base64 text the API sent
    (standard or URL-safe alphabet); None for text that is not base64."""
    text = signature.replace("-", "+").replace("_", "/")
    try:
        return base64.b64decode(text + "=" * (-len(text) % 4), validate=True)
    except (binascii.Error, ValueError):
        return None


def gemini_contents(
    messages: tuple[Message, ...], model: str = ""
) -> tuple[str, list[dict[str, Any]]]:
    """(system instruction, ``contents``); the thought signatures ``model`` made go back (see the
    module notes)."""
    system: list[str] = []
    contents: list[dict[str, Any]] = []

    def add(role: str, parts: list[dict[str, Any]]) -> None:
        if not parts:
            return
        if contents and contents[-1]["role"] == role:
            contents[-1]["parts"].extend(parts)
        else:
            contents.append({"role": role, "parts": parts})

    for message in messages:
        match message:
            case SystemMessage():
                if message.content:
                    system.append(message.content)
            case UserMessage():
                add(
                    "user",
                    [
                        gemini_part(p)
                        for p in message.content
                        if type(p) is not TextContent or p.text
                    ],
                )
            case AssistantMessage():
                add("model", _model_parts(message, model))
            case ToolMessage():
                add("user", [_function_response(result) for result in message.content])
    return "\n\n".join(system), contents


def gemini_part(part: TextContent | MediaPart) -> dict[str, Any]:
    """One part of a user turn: ``text``, ``inline_data`` (the bytes, which the SDK sends
    base64) or ``file_data`` (a URL)."""
    if type(part) is TextContent:
        return {"text": part.text}
    assert isinstance(part, MediaPart)
    if part.url:
        return {"file_data": {"file_uri": part.url, "mime_type": part.media_type}}
    return {"inline_data": {"mime_type": part.media_type, "data": part.data}}


def _function_response(result: ToolResultContent) -> dict[str, Any]:
    """A tool result; the media it returned go in the response's own ``parts``."""
    response: dict[str, Any] = {
        "id": result.id,
        "name": result.name,
        "response": {("error" if result.is_failure else "output"): result.result},
    }
    if result.media:
        response["parts"] = [
            {"file_data": {"file_uri": part.url, "mime_type": part.media_type}}
            if part.url
            else {"inline_data": {"mime_type": part.media_type, "data": part.data}}
            for part in result.media
        ]
    return {"function_response": response}


def _native(message: AssistantMessage, model: str) -> list[Mapping[str, Any]]:
    """The thought signatures ``model`` made for ``message``, if it declared tool calls."""
    if not any(isinstance(p, ToolCallContent) for p in message.content):
        return []
    return [
        p.data
        for p in message.content
        if isinstance(p, NativeReasoningContent)
        and p.provider == FAMILY
        and p.model == model
        and p.data
    ]


def _model_parts(message: AssistantMessage, model: str) -> list[dict[str, Any]]:
    calls: dict[str, bytes] = {}
    by_place: dict[int, bytes] = {}
    text_signature: bytes | None = None
    parts: list[dict[str, Any]] = []
    for block in _native(message, model):
        signature = block.get("signature")
        signature = signature_bytes(signature) if isinstance(signature, str) else None
        kind = block.get("kind")
        if kind == "thought":
            text = block.get("text")
            thought: dict[str, Any] = {
                "thought": True,
                "text": text if isinstance(text, str) else "",
            }
            if signature is not None:
                thought["thought_signature"] = signature
            parts.append(thought)
        elif kind == "call" and signature is not None:
            call_id, place = block.get("id"), block.get("index")
            if isinstance(call_id, str):
                calls[call_id] = signature
            if type(place) is int:
                by_place[place] = signature
        elif kind == "text" and signature is not None:
            text_signature = signature
    text = "".join(p.text for p in message.content if isinstance(p, TextContent))
    if text or text_signature is not None:
        part: dict[str, Any] = {"text": text}
        if text_signature is not None:
            part["thought_signature"] = text_signature
        parts.append(part)
    place = -1
    for item in message.content:
        if isinstance(item, ToolCallContent):
            place += 1
            arguments = item.arguments
            call: dict[str, Any] = {
                "function_call": {
                    "id": item.id,
                    "name": item.name,
                    "args": arguments if isinstance(arguments, dict) else {"value": arguments},
                }
            }
            # By ID; by place when the engine gave the call a fresh ID (one used before).
            signature = calls.get(item.id)
            if signature is None:
                signature = by_place.get(place)
            if signature is not None:
                call["thought_signature"] = signature
            parts.append(call)
        # ReasoningContent: only the native thought parts above go back (module notes).
    return parts


def gemini_request(
    request: ModelRequest,
    *,
    max_tokens: int,
    model: str = "",
    thinking: Mapping[str, Any] | None = None,
    output_with_tools: bool = True,
    options: Mapping[str, Any] | None = None,
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """(``contents``, ``config``) of a streamed ``generateContent`` call. ``max_tokens`` applies
    when the request sets no ``max_output_tokens``; ``thinking`` is the ``thinking_config``;
    ``output_with_tools`` says whether the model takes a response schema alongside tools;
    ``model`` is the model asked (only its own thought signatures go back);
    ``options`` (e.g. ``temperature``) are merged in last, except over keys already set."""
    system, contents = gemini_contents(request.messages, model)
    cap = request.max_output_tokens if request.max_output_tokens is not None else max_tokens
    config: dict[str, Any] = {"max_output_tokens": cap}
    output = request.output
    if output is not None:
        schema = gemini_output_schema(output.schema)
        if schema is not None and (output_with_tools or not request.tools):
            config["response_mime_type"] = "application/json"
            config["response_json_schema"] = schema
        else:
            note = output_instructions(output.schema)
            system = f"{system}\n\n{note}" if system else note
    if system:
        config["system_instruction"] = system
    if request.tools:
        config["tools"] = [
            {
                "function_declarations": [
                    {
                        "name": tool.name,
                        "description": tool.description,
                        "parameters_json_schema": dict(tool.parameters),
                    }
                    for tool in request.tools
                ]
            }
        ]
        choice = request.tool_choice
        calling: dict[str, Any] = {"mode": _MODES.get(choice, "ANY")}
        if choice not in _MODES:
            calling["allowed_function_names"] = [choice]
        config["tool_config"] = {"function_calling_config": calling}
    if thinking:
        config["thinking_config"] = dict(thinking)
    if options:
        for key, value in options.items():
            config.setdefault(key, value)
    return contents, config


@final
class GeminiDecoder:
    """Turns decoded ``GenerateContentResponse`` events into response parts (see the module
    notes).

    :meth:`feed` takes one event, :meth:`end` the end of the body: then what a later request
    must send back with this turn (thought parts and the signatures of its text and calls, as
    :func:`gemini_contents` reads them) becomes native reasoning parts naming ``model``. After
    the stream, :attr:`call_ids` are the tool calls, in order.
    """

    __slots__ = (
        "_blocked",
        "_blocks",
        "_calls",
        "_done",
        "_finish",
        "_ids",
        "_metadata",
        "_model",
        "_replay",
        "_thought",
        "_usage",
        "call_ids",
    )

    def __init__(self, *, call_ids: CallIds | None = None, model: str = "") -> None:
        self._ids = CallIds() if call_ids is None else call_ids
        self._model = model
        self._metadata = False
        self._blocks = Blocks()
        self._calls: list[StreamedCall] = []
        self._finish: FinishReason | None = None
        self._blocked = False
        self._usage = Usage()
        self._thought: dict[str, Any] | None = None  # the thought part being streamed
        self._done = False
        self.call_ids: list[str] = []
        self._replay: list[dict[str, Any]] = []

    @property
    def complete(self) -> bool:
        """Whether the finish part has been produced (only at the end of the body)."""
        return self._done

    @property
    def finished(self) -> bool:
        """Whether a finish reason has come: a connection lost after it lost no part of the
        answer (the streaming loop then ends the body there)."""
        return self._finish is not None

    def feed(self, event: object) -> list[ResponsePart]:
        """The parts one decoded event completes."""
        data = as_mapping(event, "a generateContent response")
        if self._done:
            return []
        if data.get("error"):
            raise error_from_payload(PROVIDER, data)
        out: list[ResponsePart] = []
        if not self._metadata:
            self._metadata = True
            response_id, model = data.get("responseId"), data.get("modelVersion")
            out.append(
                ResponseMetadataPart(
                    response_id if isinstance(response_id, str) else None,
                    model if isinstance(model, str) else None,
                )
            )
        usage = data.get("usageMetadata")
        if isinstance(usage, Mapping):
            self._usage = _usage(usage)
        feedback = data.get("promptFeedback")
        if isinstance(feedback, Mapping) and feedback.get("blockReason"):
            self._blocked = True
        candidates = data.get("candidates")
        if candidates is None:
            return out
        if not isinstance(candidates, list):
            raise MalformedResponse("a generateContent response's candidates are not a list")
        for candidate in candidates:
            candidate = as_mapping(candidate, "a candidate")
            if candidate.get("index", 0) == 0:
                self._candidate(candidate, out)
        return out

    def _candidate(self, candidate: Mapping[str, Any], out: list[ResponsePart]) -> None:
        content = candidate.get("content")
        if content is not None:
            parts = as_mapping(content, "a candidate's content").get("parts")
            if parts is not None:
                if not isinstance(parts, list):
                    raise MalformedResponse("a candidate's parts are not a list")
                for part in parts:
                    self._part(as_mapping(part, "a content part"), out)
        reason = candidate.get("finishReason")
        if reason is not None:
            self._finish = _FINISH.get(reason, "other") if isinstance(reason, str) else "other"

    def _part(self, part: Mapping[str, Any], out: list[ResponsePart]) -> None:
        signature = part.get("thoughtSignature")
        signature = signature if isinstance(signature, str) and signature else None
        function_call = part.get("functionCall")
        text = part.get("text")
        if function_call is not None:
            self._call(as_mapping(function_call, "a functionCall"), signature, out)
        elif part.get("thought") is True:
            if isinstance(text, str) and text:
                if self._thought is None:
                    self._thought = {"kind": "thought", "text": ""}
                    self._replay.append(self._thought)
                self._thought["text"] += text
                self._blocks.reasoning_delta(text, out)
            if signature is not None:
                if self._thought is None:
                    self._thought = {"kind": "thought", "text": ""}
                    self._replay.append(self._thought)
                self._thought["signature"] = signature
            return
        else:
            if isinstance(text, str):
                self._blocks.text_delta(text, out)
            if signature is not None:  # a text part's, or a part holding only a signature
                self._replay.append({"kind": "text", "signature": signature})
        self._thought = None

    def _call(
        self, function_call: Mapping[str, Any], signature: str | None, out: list[ResponsePart]
    ) -> None:
        name = function_call.get("name")
        if not (isinstance(name, str) and name):
            raise MalformedResponse("a functionCall without its name")
        call_id = function_call.get("id")
        if not (isinstance(call_id, str) and call_id):
            call_id = f"call_{len(self._calls)}"
        arguments = function_call.get("args")
        if arguments is not None and not isinstance(arguments, Mapping):
            raise MalformedResponse(f"the args of functionCall {name!r} are not a JSON object")
        self._blocks.end_all(out)
        call = StreamedCall(self._ids.unique(call_id), name)
        out.append(ToolParamsStartPart(call.id, call.name))
        call.delta(json_text(arguments or {}), out)
        call.end(out)
        if signature is not None:
            place = len(self._calls)
            self._replay.append(
                {"kind": "call", "id": call.id, "index": place, "signature": signature}
            )
        self._calls.append(call)
        self.call_ids.append(call.id)

    def end(self) -> list[ResponsePart]:
        """The end of the body: the declared calls and the finish part."""
        if self._done:
            return []
        finish = self._finish
        if finish is None:
            if not self._blocked:
                raise MalformedResponse("the event stream ended before the model finished")
            finish = "content-filter"
        out: list[ResponsePart] = []
        self._blocks.end_all(out)
        out.extend(NativeReasoningPart(FAMILY, self._model, block) for block in self._replay)
        if finish != "length":  # calls cut off by the limit stay undeclared (truncated)
            for call in self._calls:
                call.declare(out)
            if self._calls and finish == "stop":
                finish = "tool-calls"
        self._done = True
        out.append(FinishPart(finish, self._usage))
        return out


def _usage(usage: Mapping[str, Any]) -> Usage:
    thoughts = as_int(usage.get("thoughtsTokenCount"))
    return reported_usage(
        as_int(usage.get("promptTokenCount")) + as_int(usage.get("toolUsePromptTokenCount")),
        as_int(usage.get("candidatesTokenCount")) + thoughts,
        cache_read=as_int(usage.get("cachedContentTokenCount")),
        reasoning=thoughts,
    )
