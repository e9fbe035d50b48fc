"""Parallel tool calls whose argument deltas arrive in any interleaving: each decoder hands the
reducer every call whole, with exactly the argument text that streamed, in declaration order —
and Gemini's whole calls, however its events cut the parts, with their arguments as compact JSON."""

from __future__ import annotations

import itertools
import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from effectagent.ai import ResponsePart
from effectagent.providers._anthropic_messages import MessagesDecoder
from effectagent.providers._gemini_content import GeminiDecoder
from effectagent.providers._openai_chat import ChatCompletionsDecoder
from effectagent.providers._openai_responses import ResponsesDecoder

from .helpers import reduce

arguments = st.dictionaries(
    st.text("abcxyz", min_size=1, max_size=4),
    st.one_of(st.integers(-5, 5), st.text('é漢 "\\{}', max_size=5)),
    max_size=3,
).map(json.dumps)


@st.composite
def streamed_calls(draw: st.DrawFn) -> tuple[list[str], list[tuple[int, str]]]:
    """Argument texts of one to four calls, and their pieces as (call, piece) in a random interleaving
    that keeps each call's own pieces in order."""
    texts = draw(st.lists(arguments, min_size=1, max_size=4))
    queues: list[list[str]] = []
    for text in texts:
        cuts = sorted(draw(st.sets(st.integers(1, max(1, len(text) - 1)), max_size=4)))
        bounds = [0, *cuts, len(text)]
        queues.append([text[a:b] for a, b in itertools.pairwise(bounds) if a < b])
    order: list[tuple[int, str]] = []
    pending = [list(q) for q in queues]
    while any(pending):
        index = draw(st.sampled_from([i for i, q in enumerate(pending) if q]))
        order.append((index, pending[index].pop(0)))
    return texts, order


def check(parts: list[ResponsePart], texts: list[str]) -> None:
    response = reduce(parts)
    assert [c.id for c in response.tool_calls] == [f"call_{i}" for i in range(len(texts))]
    assert [c.arguments for c in response.tool_calls] == texts
    assert response.finish_reason == "tool-calls"


@given(streamed_calls())
def test_chat_completions(case: tuple[list[str], list[tuple[int, str]]]) -> None:
    texts, order = case
    decoder = ChatCompletionsDecoder()

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {
            "id": "c",
            "model": "m",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }

    parts: list[ResponsePart] = []
    for i in range(len(texts)):
        start = {
            "index": i,
            "id": f"call_{i}",
            "type": "function",
            "function": {"name": "f", "arguments": ""},
        }
        parts += decoder.feed(chunk({"tool_calls": [start]}))
    for i, piece in order:
        parts += decoder.feed(
            chunk({"tool_calls": [{"index": i, "function": {"arguments": piece}}]})
        )
    parts += decoder.feed(chunk({}, "tool_calls"))
    parts += decoder.done()
    check(parts, texts)


@given(streamed_calls())
def test_responses(case: tuple[list[str], list[tuple[int, str]]]) -> None:
    texts, order = case
    decoder = ResponsesDecoder()
    parts: list[ResponsePart] = []
    for i in range(len(texts)):
        item = {
            "id": f"fc_{i}",
            "type": "function_call",
            "call_id": f"call_{i}",
            "name": "f",
            "arguments": "",
        }
        parts += decoder.feed(
            {"type": "response.output_item.added", "output_index": i, "item": item}
        )
    for i, piece in order:
        parts += decoder.feed(
            {"type": "response.function_call_arguments.delta", "item_id": f"fc_{i}", "delta": piece}
        )
    for i, text in enumerate(texts):
        item = {
            "id": f"fc_{i}",
            "type": "function_call",
            "call_id": f"call_{i}",
            "name": "f",
            "arguments": text,
        }
        parts += decoder.feed(
            {"type": "response.output_item.done", "output_index": i, "item": item}
        )
    parts += decoder.feed({"type": "response.completed", "response": {"status": "completed"}})
    check(parts, texts)


@given(streamed_calls())
def test_anthropic_messages(case: tuple[list[str], list[tuple[int, str]]]) -> None:
    texts, order = case
    decoder = MessagesDecoder()
    parts: list[ResponsePart] = []
    parts += decoder.feed(
        {"type": "message_start", "message": {"id": "m", "model": "c", "usage": {}}}
    )
    for i in range(len(texts)):
        block = {"type": "tool_use", "id": f"call_{i}", "name": "f", "input": {}}
        parts += decoder.feed({"type": "content_block_start", "index": i, "content_block": block})
    for i, piece in order:
        delta = {"type": "input_json_delta", "partial_json": piece}
        parts += decoder.feed({"type": "content_block_delta", "index": i, "delta": delta})
    for i in range(len(texts)):
        parts += decoder.feed({"type": "content_block_stop", "index": i})
    parts += decoder.feed(
        {
            "type": "message_delta",
            "delta": {"stop_reason": "tool_use"},
            "usage": {"output_tokens": 9},
        }
    )
    parts += decoder.feed({"type": "message_stop"})
    check(parts, texts)


@st.composite
def gemini_events(draw: st.DrawFn) -> tuple[list[str], list[str], list[list[dict[str, Any]]]]:
    """Argument texts of one to four parallel calls, text pieces around them, and every part in
    declaration order cut into events anyhow (Gemini sends each call whole, in any event)."""
    texts = draw(st.lists(arguments, min_size=1, max_size=4))
    before = draw(st.lists(st.text("ab é", min_size=1, max_size=3), max_size=3))
    parts: list[dict[str, Any]] = [{"text": piece} for piece in before]
    parts += [
        {"functionCall": {"id": f"call_{i}", "name": "f", "args": json.loads(text)}}
        for i, text in enumerate(texts)
    ]
    cuts = sorted(draw(st.sets(st.integers(1, max(1, len(parts) - 1)), max_size=len(parts))))
    bounds = [0, *cuts, len(parts)]
    return texts, before, [parts[a:b] for a, b in itertools.pairwise(bounds) if a < b]


@given(gemini_events())
def test_gemini(case: tuple[list[str], list[str], list[list[dict[str, Any]]]]) -> None:
    texts, before, chunks = case
    decoder = GeminiDecoder()
    parts: list[ResponsePart] = []
    for i, chunk in enumerate(chunks):
        candidate: dict[str, Any] = {"content": {"role": "model", "parts": chunk}}
        if i == len(chunks) - 1:
            candidate["finishReason"] = "STOP"
        parts += decoder.feed({"candidates": [candidate]})
    parts += decoder.end()
    compact = [json.dumps(json.loads(t), ensure_ascii=False, separators=(",", ":")) for t in texts]
    check(parts, compact)
    assert reduce(parts).text == "".join(before)
