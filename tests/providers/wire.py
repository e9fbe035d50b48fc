"""The providers' documented streaming wire formats, as the replay server sends them.

Each builder returns server-sent events as bytes (``data:`` lines, with ``event:`` lines where the
provider names its events), shaped like the examples of each API's streaming reference: Chat
Completions chunks ending in ``data: [DONE]``; Responses events named by their ``type``; Messages
events from ``message_start`` to ``message_stop``, with a ``ping`` in between; Gemini's
``streamGenerateContent?alt=sse`` events, each a whole ``GenerateContentResponse`` (lines ended
with CRLF, as Google's servers send them), the last one with the finish reason and the usage.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

__all__ = ["AnthropicWire", "ChatWire", "GeminiWire", "ResponsesWire", "sse"]


def sse(data: object, event: str | None = None, *, end: str = "\n") -> bytes:
    """One server-sent event (its lines ended with ``end``)."""
    text = data if isinstance(data, str) else json.dumps(data)
    head = f"event: {event}{end}" if event else ""
    return f"{head}data: {text}{end}{end}".encode()


class ChatWire:
    """Chat Completions chunks (``object: chat.completion.chunk``)."""

    def __init__(self, model: str = "gpt-4.1", response_id: str = "chatcmpl-1") -> None:
        self.model = model
        self.id = response_id

    def chunk(
        self,
        delta: dict[str, Any] | None = None,
        finish: str | None = None,
        *,
        usage: dict[str, Any] | None = None,
        choices: bool = True,
    ) -> bytes:
        """One chunk with one choice (or none, for the usage chunk)."""
        body: dict[str, Any] = {
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": 1_700_000_000,
            "model": self.model,
            "choices": [{"index": 0, "delta": delta or {}, "finish_reason": finish}]
            if choices
            else [],
        }
        if usage is not None:
            body["usage"] = usage
        return sse(body)

    def usage(
        self, prompt: int, completion: int, *, cached: int = 0, written: int = 0, reasoning: int = 0
    ) -> bytes:
        """The final usage chunk (``stream_options.include_usage``)."""
        return self.chunk(
            usage={
                "prompt_tokens": prompt,
                "completion_tokens": completion,
                "total_tokens": prompt + completion,
                "prompt_tokens_details": {"cached_tokens": cached, "cache_write_tokens": written},
                "completion_tokens_details": {"reasoning_tokens": reasoning},
            },
            choices=False,
        )

    def text(self, *pieces: str, finish: str = "stop", usage: bytes | None = None) -> list[bytes]:
        """A whole text answer."""
        events = [self.chunk({"role": "assistant", "content": ""})]
        events += [self.chunk({"content": piece}) for piece in pieces]
        events.append(self.chunk({}, finish))
        events.append(usage if usage is not None else self.usage(10, len(pieces)))
        events.append(sse("[DONE]"))
        return events

    def call_start(self, index: int, call_id: str, name: str) -> bytes:
        """The first delta of a tool call: its id and name."""
        call = {
            "index": index,
            "id": call_id,
            "type": "function",
            "function": {"name": name, "arguments": ""},
        }
        return self.chunk({"tool_calls": [call]})

    def call_arguments(self, index: int, text: str) -> bytes:
        """More argument text for the call at ``index``."""
        return self.chunk({"tool_calls": [{"index": index, "function": {"arguments": text}}]})

    def calls(self, *calls: tuple[str, str, str], split: int = 4) -> list[bytes]:
        """Tool calls ``(id, name, arguments)``, all started, then their argument text in
        ``split``-character pieces interleaved round-robin, then finish and [DONE]."""
        events = [self.chunk({"role": "assistant", "content": None})]
        events += [self.call_start(i, cid, name) for i, (cid, name, _) in enumerate(calls)]
        events += _interleave(
            [
                [self.call_arguments(i, p) for p in _split(a, split)]
                for i, (_, _, a) in enumerate(calls)
            ]
        )
        events.append(self.chunk({}, "tool_calls"))
        events.append(self.usage(20, 30))
        events.append(sse("[DONE]"))
        return events


class ResponsesWire:
    """Responses API events."""

    def __init__(self, model: str = "gpt-4.1", response_id: str = "resp_1") -> None:
        self.model = model
        self.id = response_id
        self.sequence = 0

    def event(self, kind: str, **fields: Any) -> bytes:
        """One event of ``type`` ``kind``."""
        body = {"type": kind, "sequence_number": self.sequence, **fields}
        self.sequence += 1
        return sse(body, kind)

    def response(
        self, status: str, usage: dict[str, Any] | None = None, **more: Any
    ) -> dict[str, Any]:
        """A response object as the lifecycle events carry it."""
        return {
            "id": self.id,
            "object": "response",
            "created_at": 1_700_000_000,
            "status": status,
            "model": self.model,
            "output": [],
            "usage": usage,
            **more,
        }

    def created(self) -> bytes:
        """``response.created``."""
        return self.event("response.created", response=self.response("in_progress"))

    def usage(
        self, given: int, made: int, *, cached: int = 0, written: int = 0, reasoning: int = 0
    ) -> dict[str, Any]:
        """A usage object."""
        return {
            "input_tokens": given,
            "input_tokens_details": {"cached_tokens": cached, "cache_write_tokens": written},
            "output_tokens": made,
            "output_tokens_details": {"reasoning_tokens": reasoning},
            "total_tokens": given + made,
        }

    def completed(self, usage: dict[str, Any] | None = None) -> bytes:
        """``response.completed``."""
        return self.event(
            "response.completed", response=self.response("completed", usage or self.usage(10, 5))
        )

    def message(self, item_id: str, index: int, *pieces: str) -> list[bytes]:
        """A whole assistant message item streaming ``pieces``."""
        text = "".join(pieces)
        part = {"type": "output_text", "text": "", "annotations": []}
        events = [
            self.event(
                "response.output_item.added",
                output_index=index,
                item={
                    "id": item_id,
                    "type": "message",
                    "status": "in_progress",
                    "role": "assistant",
                    "content": [],
                },
            ),
            self.event(
                "response.content_part.added",
                item_id=item_id,
                output_index=index,
                content_index=0,
                part=part,
            ),
        ]
        events += [
            self.event(
                "response.output_text.delta",
                item_id=item_id,
                output_index=index,
                content_index=0,
                delta=piece,
            )
            for piece in pieces
        ]
        done = {"type": "output_text", "text": text, "annotations": []}
        events += [
            self.event(
                "response.output_text.done",
                item_id=item_id,
                output_index=index,
                content_index=0,
                text=text,
            ),
            self.event(
                "response.content_part.done",
                item_id=item_id,
                output_index=index,
                content_index=0,
                part=done,
            ),
            self.event(
                "response.output_item.done",
                output_index=index,
                item={
                    "id": item_id,
                    "type": "message",
                    "status": "completed",
                    "role": "assistant",
                    "content": [done],
                },
            ),
        ]
        return events

    def reasoning(
        self, item_id: str, index: int, *pieces: str, encrypted: str = "gAAAAB-opaque"
    ) -> list[bytes]:
        """A reasoning item whose summary streams ``pieces``."""
        text = "".join(pieces)
        events = [
            self.event(
                "response.output_item.added",
                output_index=index,
                item={"id": item_id, "type": "reasoning", "summary": []},
            ),
            self.event(
                "response.reasoning_summary_part.added",
                item_id=item_id,
                output_index=index,
                summary_index=0,
                part={"type": "summary_text", "text": ""},
            ),
        ]
        events += [
            self.event(
                "response.reasoning_summary_text.delta",
                item_id=item_id,
                output_index=index,
                summary_index=0,
                delta=piece,
            )
            for piece in pieces
        ]
        summary = [{"type": "summary_text", "text": text}]
        events += [
            self.event(
                "response.reasoning_summary_text.done",
                item_id=item_id,
                output_index=index,
                summary_index=0,
                text=text,
            ),
            self.event(
                "response.reasoning_summary_part.done",
                item_id=item_id,
                output_index=index,
                summary_index=0,
                part=summary[0],
            ),
            self.event(
                "response.output_item.done",
                output_index=index,
                item={
                    "id": item_id,
                    "type": "reasoning",
                    "summary": summary,
                    "encrypted_content": encrypted,
                },
            ),
        ]
        return events

    def call_added(self, index: int, item_id: str, call_id: str, name: str) -> bytes:
        """A function call output item begins."""
        return self.event(
            "response.output_item.added",
            output_index=index,
            item={
                "id": item_id,
                "type": "function_call",
                "status": "in_progress",
                "call_id": call_id,
                "name": name,
                "arguments": "",
            },
        )

    def call_done(
        self, index: int, item_id: str, call_id: str, name: str, arguments: str
    ) -> list[bytes]:
        """A function call's arguments are complete."""
        return [
            self.event(
                "response.function_call_arguments.done",
                item_id=item_id,
                output_index=index,
                arguments=arguments,
            ),
            self.event(
                "response.output_item.done",
                output_index=index,
                item={
                    "id": item_id,
                    "type": "function_call",
                    "status": "completed",
                    "call_id": call_id,
                    "name": name,
                    "arguments": arguments,
                },
            ),
        ]

    def calls(self, *calls: tuple[str, str, str], split: int = 4) -> list[bytes]:
        """Function calls ``(call_id, name, arguments)``: all added, argument deltas interleaved,
        then each done, then completed."""
        events = [self.created()]
        events += [
            self.call_added(i, f"fc_{i}", cid, name) for i, (cid, name, _) in enumerate(calls)
        ]
        events += _interleave(
            [
                [
                    self.event(
                        "response.function_call_arguments.delta",
                        item_id=f"fc_{i}",
                        output_index=i,
                        delta=p,
                    )
                    for p in _split(arguments, split)
                ]
                for i, (_, _, arguments) in enumerate(calls)
            ]
        )
        for i, (cid, name, arguments) in enumerate(calls):
            events += self.call_done(i, f"fc_{i}", cid, name, arguments)
        events.append(self.completed(self.usage(20, 30)))
        return events

    def text(self, *pieces: str) -> list[bytes]:
        """A whole text answer."""
        return [self.created(), *self.message("msg_1", 0, *pieces), self.completed()]


class AnthropicWire:
    """Messages API events."""

    def __init__(self, model: str = "claude-sonnet-4-5", message_id: str = "msg_01") -> None:
        self.model = model
        self.id = message_id

    def start(
        self, given: int = 10, *, read: int = 0, written: int = 0, long_written: int = 0
    ) -> bytes:
        """``message_start`` with the input usage (``long_written``: how many of the ``written``
        went to one-hour entries)."""
        message: dict[str, Any] = {
            "id": self.id,
            "type": "message",
            "role": "assistant",
            "content": [],
            "model": self.model,
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {
                "input_tokens": given,
                "cache_creation_input_tokens": written,
                "cache_read_input_tokens": read,
                "cache_creation": {
                    "ephemeral_5m_input_tokens": written - long_written,
                    "ephemeral_1h_input_tokens": long_written,
                },
                "output_tokens": 1,
            },
        }
        return sse({"type": "message_start", "message": message}, "message_start")

    def block_start(self, index: int, block: dict[str, Any]) -> bytes:
        """``content_block_start``."""
        return sse(
            {"type": "content_block_start", "index": index, "content_block": block},
            "content_block_start",
        )

    def delta(self, index: int, delta: dict[str, Any]) -> bytes:
        """``content_block_delta``."""
        return sse(
            {"type": "content_block_delta", "index": index, "delta": delta}, "content_block_delta"
        )

    def block_stop(self, index: int) -> bytes:
        """``content_block_stop``."""
        return sse({"type": "content_block_stop", "index": index}, "content_block_stop")

    def ping(self) -> bytes:
        """``ping``."""
        return sse({"type": "ping"}, "ping")

    def finish(self, reason: str | None, output: int = 5, **usage: Any) -> list[bytes]:
        """``message_delta`` with the stop reason and cumulative usage, then ``message_stop``."""
        return [
            sse(
                {
                    "type": "message_delta",
                    "delta": {"stop_reason": reason, "stop_sequence": None},
                    "usage": {"output_tokens": output, **usage},
                },
                "message_delta",
            ),
            sse({"type": "message_stop"}, "message_stop"),
        ]

    def text_block(self, index: int, *pieces: str) -> list[bytes]:
        """A whole text block."""
        return [
            self.block_start(index, {"type": "text", "text": ""}),
            *(self.delta(index, {"type": "text_delta", "text": p}) for p in pieces),
            self.block_stop(index),
        ]

    def thinking_block(self, index: int, *pieces: str, signature: str = "sig-abc") -> list[bytes]:
        """A whole thinking block with its signature."""
        return [
            self.block_start(index, {"type": "thinking", "thinking": "", "signature": ""}),
            *(self.delta(index, {"type": "thinking_delta", "thinking": p}) for p in pieces),
            self.delta(index, {"type": "signature_delta", "signature": signature}),
            self.block_stop(index),
        ]

    def text(self, *pieces: str, reason: str = "end_turn") -> list[bytes]:
        """A whole text answer."""
        return [self.start(), self.ping(), *self.text_block(0, *pieces), *self.finish(reason)]

    def calls(self, *calls: tuple[str, str, str], split: int = 4, first: int = 0) -> list[bytes]:
        """``tool_use`` blocks ``(id, name, arguments)`` from index ``first``: all started, their
        ``input_json_delta`` pieces interleaved, then each stopped."""
        events = [
            self.block_start(first + i, {"type": "tool_use", "id": cid, "name": name, "input": {}})
            for i, (cid, name, _) in enumerate(calls)
        ]
        events += _interleave(
            [
                [
                    self.delta(first + i, {"type": "input_json_delta", "partial_json": p})
                    for p in _split(a, split)
                ]
                for i, (_, _, a) in enumerate(calls)
            ]
        )
        events += [self.block_stop(first + i) for i in range(len(calls))]
        return events


class GeminiWire:
    """Gemini API ``streamGenerateContent`` events (``alt=sse``)."""

    def __init__(self, model: str = "gemini-3-flash-preview", response_id: str = "r-1") -> None:
        self.model = model
        self.id = response_id

    def event(
        self,
        *parts: dict[str, Any],
        finish: str | None = None,
        usage: dict[str, Any] | None = None,
    ) -> bytes:
        """One ``GenerateContentResponse`` whose first candidate holds ``parts``."""
        candidate: dict[str, Any] = {"content": {"role": "model", "parts": list(parts)}, "index": 0}
        if finish is not None:
            candidate["finishReason"] = finish
        body: dict[str, Any] = {
            "candidates": [candidate],
            "modelVersion": self.model,
            "responseId": self.id,
        }
        if usage is not None:
            body["usageMetadata"] = usage
        return sse(body, end="\r\n")

    @staticmethod
    def usage(
        prompt: int, candidates: int, *, cached: int = 0, thoughts: int = 0
    ) -> dict[str, Any]:
        """A ``usageMetadata`` object."""
        usage: dict[str, Any] = {
            "promptTokenCount": prompt,
            "candidatesTokenCount": candidates,
            "totalTokenCount": prompt + candidates + thoughts,
        }
        if cached:
            usage["cachedContentTokenCount"] = cached
        if thoughts:
            usage["thoughtsTokenCount"] = thoughts
        return usage

    @staticmethod
    def call(call_id: str | None, name: str, arguments: str, signature: str = "") -> dict[str, Any]:
        """A ``functionCall`` part (its ``args`` decoded from ``arguments``)."""
        function_call: dict[str, Any] = {"name": name, "args": json.loads(arguments)}
        if call_id is not None:
            function_call["id"] = call_id
        part: dict[str, Any] = {"functionCall": function_call}
        if signature:
            part["thoughtSignature"] = signature
        return part

    def text(self, *pieces: str, finish: str = "STOP", signature: str = "dC0x") -> list[bytes]:
        """A whole text answer: a piece an event, then (as Gemini 3 ends a response) an event
        whose one part is empty text holding the thought signature, with the finish and usage."""
        events = [self.event({"text": piece}) for piece in pieces]
        last: dict[str, Any] = {"text": ""}
        if signature:
            last["thoughtSignature"] = signature
        events.append(self.event(last, finish=finish, usage=self.usage(10, len(pieces))))
        return events

    def calls(self, *calls: tuple[str, str, str], signature: str = "c2lnLTE=") -> list[bytes]:
        """Parallel function calls ``(id, name, arguments)``: the first (with the step's thought
        signature) in one event, the others together in the next, then the finish."""
        parts = [self.call(*call) for call in calls]
        if signature:
            parts[0]["thoughtSignature"] = signature
        events = [self.event(parts[0])]
        if parts[1:]:
            events.append(self.event(*parts[1:]))
        events.append(self.event(finish="STOP", usage=self.usage(20, 30)))
        return events


def _split(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


def _interleave(rows: Sequence[Sequence[bytes]]) -> list[bytes]:
    out: list[bytes] = []
    for step in range(max((len(r) for r in rows), default=0)):
        out.extend(row[step] for row in rows if step < len(row))
    return out
