"""A stored conversation as a cassette: each model response in its log becomes an exchange, its
request rebuilt the way the engine builds a prompt — the system message, then
:func:`~effectagent.core.project_messages` of the log up to that response.

What the log cannot give back is said in the cassette's header, and a replay does not compare
it: the tools offered, the tool choice, the output cap, the output schema and the request's
metadata (``unchecked``). Nor does the log keep how a response was streamed (each block becomes
one delta), model calls that failed and were retried, or a provider's native reasoning
signatures. Pure: entries in, a :class:`Cassette` out.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from effectagent.ai import (
    FinishPart,
    InputTokens,
    ModelRequest,
    NativeReasoningPart,
    ReasoningDeltaPart,
    ReasoningEndPart,
    ReasoningStartPart,
    ResponsePart,
    SystemMessage,
    TextDeltaPart,
    TextEndPart,
    TextStartPart,
    ToolCallPart,
    ToolParamsDeltaPart,
    ToolParamsEndPart,
    ToolParamsStartPart,
    Usage,
)
from effectagent.core import (
    LogEntry,
    ModelResponseRecorded,
    native_reasoning_of,
    project_messages,
)

from ._cassette import Cassette, Exchange, encode_request

__all__ = ["UNCHECKED_WHEN_EXPORTED", "cassette_of_log"]

#: The type of a usage's output tokens (not exported on its own).
_OUTPUT_TOKENS = type(Usage().output)

#: The request fields a conversation's log does not keep.
UNCHECKED_WHEN_EXPORTED = ("tools", "tool_choice", "max_output_tokens", "output", "metadata")

_FINISH_REASONS = (
    "stop",
    "length",
    "content-filter",
    "tool-calls",
    "error",
    "pause",
    "other",
    "unknown",
)


def _parts_of(record: ModelResponseRecorded) -> tuple[ResponsePart, ...]:
    parts: list[ResponsePart] = []
    for index, (kind, value) in enumerate(record.content):
        block = f"b{index}"
        if kind == "text":
            parts += [TextStartPart(block), TextDeltaPart(block, value), TextEndPart(block)]
        elif kind == "reasoning":
            parts += [
                ReasoningStartPart(block),
                ReasoningDeltaPart(block, value),
                ReasoningEndPart(block),
            ]
        elif kind == "native-reasoning":
            native = native_reasoning_of(value)
            if native is not None and native.data is not None:
                parts.append(NativeReasoningPart(native.provider, native.model, native.data))
        elif kind == "tool-call":
            arguments = value["arguments"]
            if not isinstance(arguments, str):
                arguments = json.dumps(arguments, ensure_ascii=False, separators=(",", ":"))
            call_id, name = value["id"], value["name"]
            parts += [
                ToolParamsStartPart(call_id, name),
                ToolParamsDeltaPart(call_id, arguments),
                ToolParamsEndPart(call_id),
                ToolCallPart(call_id, name, arguments),
            ]
    usage = record.usage
    reason: Any = record.finish_reason if record.finish_reason in _FINISH_REASONS else "unknown"
    parts.append(
        FinishPart(
            reason,
            Usage(  # as recorded, parts and all (a log keeps what the provider reported)
                InputTokens(
                    total=usage.input_tokens,
                    uncached=max(
                        0,
                        usage.input_tokens
                        - usage.cache_read_input_tokens
                        - usage.cache_write_input_tokens,
                    ),
                    cache_read=usage.cache_read_input_tokens,
                    cache_write=usage.cache_write_input_tokens,
                ),
                _OUTPUT_TOKENS(
                    total=usage.output_tokens,
                    text=max(0, usage.output_tokens - usage.reasoning_tokens),
                    reasoning=usage.reasoning_tokens,
                ),
            ),
        )
    )
    return tuple(parts)


def cassette_of_log(
    entries: Iterable[LogEntry],
    *,
    instructions: str,
    model: Mapping[str, Any] | None = None,
) -> Cassette:
    """The cassette of a conversation's log ``entries`` (see the module notes). ``instructions``
    is the system message the agent had (the log does not keep it); ``model`` goes to the
    header (``name``, ``native_output``). Entries that are not ``LogEntry`` values, ``instructions``
    that are not a string or a ``model`` that is not a mapping are a ``TypeError``."""
    if not isinstance(instructions, str):
        raise TypeError(
            f"instructions must be the agent's system prompt, a str, got {type(instructions).__name__}"
        )
    if model is not None and not isinstance(model, Mapping):
        raise TypeError(
            f"model must be a mapping (name, native_output), got {type(model).__name__}"
        )
    given: object = entries  # checked at run time too: not every caller runs mypy
    if isinstance(given, str | bytes) or not isinstance(given, Iterable):
        raise TypeError(f"entries must be a conversation's log entries, got {type(given).__name__}")
    items = list(entries)
    for index, item in enumerate(items):
        if not isinstance(item, LogEntry):
            raise TypeError(
                f"entries[{index}] must be a LogEntry (runtime.log.entries(...)), got "
                f"{type(item).__name__}"
            )
    exchanges: list[Exchange] = []
    system = SystemMessage(instructions)
    for position, entry in enumerate(items):
        record = entry.record
        if not isinstance(record, ModelResponseRecorded):
            continue
        messages = (system, *project_messages(items[:position]))
        request = encode_request(ModelRequest(messages))
        for name in UNCHECKED_WHEN_EXPORTED:
            request.pop(name, None)
        exchanges.append(Exchange(len(exchanges) + 1, request, _parts_of(record)))
    return Cassette(
        tuple(exchanges),
        source="export",
        model=dict(model or {}),
        unchecked=UNCHECKED_WHEN_EXPORTED,
    )
