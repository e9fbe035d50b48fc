"""Small pieces every provider mapping shares: reading untrusted JSON numbers, writing JSON text,
and the bookkeeping of streamed text / reasoning blocks and tool-call arguments. Pure."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, final

from effectagent.ai import (
    MalformedResponse,
    ReasoningDeltaPart,
    ReasoningEndPart,
    ReasoningStartPart,
    ResponsePart,
    TextDeltaPart,
    TextEndPart,
    TextStartPart,
    ToolCallPart,
    ToolParamsDeltaPart,
    ToolParamsEndPart,
)

__all__ = [
    "Blocks",
    "StreamedCall",
    "as_int",
    "as_mapping",
    "as_timestamp",
    "json_text",
    "result_text",
]


def as_int(value: object) -> int:
    """A token count from provider JSON: a non-negative int, else 0 (absent, null, junk)."""
    if type(value) is int and value > 0:
        return value
    if type(value) is float and value > 0 and value.is_integer():
        return int(value)
    return 0


def as_timestamp(value: object) -> float | None:
    """Seconds since the epoch from provider JSON (an int or float), else None."""
    if type(value) is int or type(value) is float:
        return float(value)
    return None


def as_mapping(value: object, what: str) -> Mapping[str, Any]:
    """``value`` when it is a JSON object, else :class:`MalformedResponse` naming ``what``."""
    if isinstance(value, Mapping):
        return value
    raise MalformedResponse(f"{what} is not a JSON object")


def json_text(value: object) -> str:
    """Compact JSON text of a JSON value (non-ASCII kept as is)."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def result_text(result: object) -> str:
    """A tool result as the text a provider takes: a string as it is, anything else as JSON."""
    return result if isinstance(result, str) else json_text(result)


@final
class Blocks:
    """The text and reasoning blocks of one response: at most one of each kind is open; opening
    one kind closes the other (a provider streams them one after the other). Block IDs are
    ``t<n>`` / ``r<n>`` in order of appearance."""

    __slots__ = ("_count", "reasoning", "text")

    def __init__(self) -> None:
        self._count = 0
        self.text: str | None = None
        self.reasoning: str | None = None

    def text_delta(self, delta: str, out: list[ResponsePart]) -> None:
        """Append ``delta`` to the open text block, opening one (and closing reasoning) first."""
        if not delta:
            return
        block = self.text
        if block is None:
            self.end_reasoning(out)
            block = self.text = f"t{self._count}"
            self._count += 1
            out.append(TextStartPart(block))
        out.append(TextDeltaPart(block, delta))

    def reasoning_delta(self, delta: str, out: list[ResponsePart]) -> None:
        """Append ``delta`` to the open reasoning block, opening one (and closing text) first."""
        if not delta:
            return
        block = self.reasoning
        if block is None:
            self.end_text(out)
            block = self.reasoning = f"r{self._count}"
            self._count += 1
            out.append(ReasoningStartPart(block))
        out.append(ReasoningDeltaPart(block, delta))

    def end_text(self, out: list[ResponsePart]) -> None:
        """Close the open text block, if any."""
        if self.text is not None:
            out.append(TextEndPart(self.text))
            self.text = None

    def end_reasoning(self, out: list[ResponsePart]) -> None:
        """Close the open reasoning block, if any."""
        if self.reasoning is not None:
            out.append(ReasoningEndPart(self.reasoning))
            self.reasoning = None

    def end_all(self, out: list[ResponsePart]) -> None:
        """Close whatever is open."""
        self.end_reasoning(out)
        self.end_text(out)


@final
class StreamedCall:
    """A tool call whose arguments are streaming: its ID, name and the argument text so far.

    A call is *ended* when its arguments are complete (params end), and *declared*
    (:class:`ToolCallPart`) only once the response finished for a reason other than the length
    limit — a call cut off by the limit stays undeclared, so the reducer reports it truncated and
    it never runs."""

    __slots__ = ("arguments", "chunks", "id", "name")

    def __init__(self, call_id: str, name: str) -> None:
        self.id = call_id
        self.name = name
        self.chunks: list[str] = []
        self.arguments: str | None = None

    def delta(self, text: str, out: list[ResponsePart]) -> None:
        """More argument text."""
        if text:
            self.chunks.append(text)
            out.append(ToolParamsDeltaPart(self.id, text))

    def end(self, out: list[ResponsePart], arguments: str | None = None) -> None:
        """The arguments are complete: ``arguments`` when the provider restated them whole, else
        what streamed (``{}`` for a call that streamed nothing)."""
        raw = arguments if arguments is not None else "".join(self.chunks)
        self.arguments = raw or "{}"
        out.append(ToolParamsEndPart(self.id))

    def declare(self, out: list[ResponsePart]) -> None:
        """Declare the ended call with its whole raw argument text."""
        if self.arguments is not None:
            out.append(ToolCallPart(self.id, self.name, self.arguments))
