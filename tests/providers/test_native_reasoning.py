"""Provider-native reasoning is canonical: a signed thinking block (Anthropic), an encrypted
reasoning item (OpenAI Responses) and a thought signature (Gemini) are recorded with the response,
so the tool loop's second request carries them from a fresh runtime and model reading the SQLite
log (``Runtime.resume`` of a run suspended for approval) — never from process memory. Redacted
like any text (a block whose text held a secret is dropped, signature and all), bounded (a block
over the bound is dropped whole, with a marker), and sent back only to the provider that made it.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import pytest

from capabilities import sqlite_storage
from capabilities.approval import SuspendingApproval
from capabilities.storage._codec import RecordCodec
from effectagent import Agent, Tool, ToolCallContext, Toolkit, open_runtime
from effectagent.ai import DEFAULT_MAX_NATIVE_BLOCK_BYTES
from effectagent.core import ModelResponseRecorded, approval_decided
from effectagent.effect import Layer
from effectagent.engine import pending_approvals
from effectagent.providers import Anthropic, Gemini, ModelSettings, OpenAIResponses

from .conftest import KEY
from .replay import ReplayServer, Reply
from .test_engine import Lookup, Reading
from .wire import AnthropicWire, GeminiWire, ResponsesWire

CANARY = "canary-7f3a9c-secret"

lookup = Tool(
    "lookup",
    "Look a city up.",
    parameters=Lookup,
    success=Reading,
    readonly=True,
    needs_approval=True,
)
thinker = Agent("thinker", "Think, then answer.", toolkit=Toolkit(lookup))

SIGNATURE = base64.b64encode(b"\xfb\xff step one").decode()


async def handle(params: Lookup, call: ToolCallContext) -> Reading:
    return Reading(1.0)


@attrs.frozen
class Case:
    """One provider: its settings against the server, a first response that thinks (``thinking``
    as its readable text) and calls ``lookup``, and the native data a request body carries for
    the assistant turn of that call."""

    name: str
    settings: Callable[[str], ModelSettings]
    first: Callable[[str], list[bytes]]
    answer: Callable[[], list[bytes]]
    native_sent: Callable[[dict[str, Any]], list[Any]]


def _anthropic_first(thinking: str) -> list[bytes]:
    wire = AnthropicWire()
    return [
        wire.start(),
        *wire.thinking_block(0, thinking, signature="sig-turn-1"),
        *wire.calls(("toolu_1", "lookup", '{"city": "Oslo"}'), first=1),
        *wire.finish("tool_use"),
    ]


def _anthropic_sent(body: dict[str, Any]) -> list[Any]:
    turns = [t for t in body["messages"] if t["role"] == "assistant"]
    return [b for t in turns for b in t["content"] if "thinking" in b["type"]]


def _responses_first(thinking: str) -> list[bytes]:
    wire = ResponsesWire("o4-mini")
    return [
        wire.created(),
        *wire.reasoning("rs_1", 0, thinking, encrypted="enc-1"),
        wire.call_added(1, "fc_1", "call_1", "lookup"),
        *wire.call_done(1, "fc_1", "call_1", "lookup", '{"city": "Oslo"}'),
        wire.completed(),
    ]


def _responses_sent(body: dict[str, Any]) -> list[Any]:
    return [item for item in body["input"] if item.get("type") == "reasoning"]


def _gemini_first(thinking: str) -> list[bytes]:
    wire = GeminiWire()
    return [
        wire.event({"text": thinking, "thought": True}),
        wire.event(
            wire.call("c1", "lookup", '{"city": "Oslo"}', SIGNATURE),
            finish="STOP",
        ),
    ]


def _gemini_sent(body: dict[str, Any]) -> list[Any]:
    turns = [t for t in body["contents"] if t["role"] == "model"]
    return [
        {k: v for k, v in part.items() if k in ("thought", "thoughtSignature", "text")}
        for t in turns
        for part in t["parts"]
        if part.get("thought") or "thoughtSignature" in part
    ]


ANTHROPIC = Case(
    "anthropic",
    lambda url: Anthropic("claude-sonnet-4-5", api_key=KEY, base_url=url, thinking_budget=1024),
    _anthropic_first,
    lambda: AnthropicWire().text("1 °C"),
    _anthropic_sent,
)
RESPONSES = Case(
    "openai-responses",
    lambda url: OpenAIResponses(
        "o4-mini", api_key=KEY, base_url=f"{url}/v1", reasoning_effort="low"
    ),
    _responses_first,
    lambda: ResponsesWire("o4-mini").text("1 °C"),
    _responses_sent,
)
GEMINI = Case(
    "gemini",
    lambda url: Gemini("gemini-3-flash-preview", api_key=KEY, base_url=url),
    _gemini_first,
    lambda: GeminiWire().text("1 °C"),
    _gemini_sent,
)
CASES = [ANTHROPIC, RESPONSES, GEMINI]


def _layer(settings: ModelSettings, db: Path) -> Layer:
    return (
        settings.layer()
        + Toolkit(lookup).handlers({lookup: handle})
        + SuspendingApproval("waiting for a person").layer()
        + sqlite_storage(db, synchronous="normal")
    )


async def _suspend_then_resume(
    server: ReplayServer,
    db: Path,
    first: ModelSettings,
    then: ModelSettings,
    *,
    secrets: tuple[str, ...] = (),
) -> tuple[dict[str, Any], list[ModelResponseRecorded]]:
    """Run in one runtime until the run suspends for approval after the tool-calling response;
    approve and resume it in a fresh runtime (a fresh model) over the same SQLite file. The
    second request's body, and the model responses the log holds."""
    async with open_runtime(_layer(first, db), agents=[thinker], secrets=secrets) as runtime:
        suspended = await runtime.run(thinker, "Oslo?")
    assert suspended.status == "suspended", suspended.error
    assert len(server.requests) == 1
    async with open_runtime(_layer(then, db), agents=[thinker], secrets=secrets) as runtime:
        log = runtime.log
        cid, rid = suspended.conversation_id, suspended.run_id
        (pending,) = pending_approvals(await log.entries(cid), rid)
        await log.append(cid, [approval_decided(pending, approved=True, decided_by="ann", at=1.0)])
        resumed = await runtime.resume(thinker, conversation_id=cid, run_id=rid)
        entries = await log.entries(cid)
    assert resumed.status == "completed", resumed.error
    assert len(server.requests) == 2
    responses = [e.record for e in entries if isinstance(e.record, ModelResponseRecorded)]
    return server.requests[1].json(), responses


def _files_holding(folder: Path, text: str) -> list[str]:
    """The files in ``folder`` (the SQLite database and its journal) whose bytes hold ``text``."""
    return [p.name for p in folder.iterdir() if text.encode() in p.read_bytes()]


def _native(record: ModelResponseRecorded) -> list[dict[str, Any]]:
    return [value for kind, value in record.content if kind == "native-reasoning"]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
async def test_a_run_resumed_in_a_fresh_runtime_sends_the_native_reasoning_from_the_log(
    server: ReplayServer, tmp_path: Path, case: Case
) -> None:
    server.script(Reply.sse(case.first("I need the tool.")), Reply.sse(case.answer()))
    settings = case.settings(server.url)
    body, responses = await _suspend_then_resume(server, tmp_path / "runs.db", settings, settings)
    sent = case.native_sent(body)
    if case is ANTHROPIC:
        assert sent == [
            {"type": "thinking", "thinking": "I need the tool.", "signature": "sig-turn-1"}
        ]
        assistant = next(t for t in body["messages"] if t["role"] == "assistant")
        assert [b["type"] for b in assistant["content"]] == ["thinking", "tool_use"]
    elif case is RESPONSES:
        assert [(i["id"], i["encrypted_content"]) for i in sent] == [("rs_1", "enc-1")]
        kinds = [item.get("type", item.get("role")) for item in body["input"]]
        assert kinds[:5] == ["system", "user", "reasoning", "function_call", "function_call_output"]
    else:
        thought, call = sent
        assert thought["thought"] is True
        assert thought["text"] == "I need the tool."
        assert base64.urlsafe_b64decode(call["thoughtSignature"]) == b"\xfb\xff step one"
    (recorded, _answer) = responses
    (native,) = _native(recorded)[:1]
    assert native["provider"] == case.name.replace("gemini", "google")


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
async def test_the_record_with_native_reasoning_round_trips_the_sqlite_codec(
    server: ReplayServer, tmp_path: Path, case: Case
) -> None:
    server.script(Reply.sse(case.first("I need the tool.")), Reply.sse(case.answer()))
    settings = case.settings(server.url)
    _, responses = await _suspend_then_resume(server, tmp_path / "runs.db", settings, settings)
    recorded = responses[0]
    assert _native(recorded)
    codec = RecordCodec()
    tag, version, body, _ = codec.encode(recorded)
    assert codec.decode("c", 2, tag, version, body) == recorded
    # A record written before native reasoning was recorded decodes as it did.
    older = attrs.evolve(
        recorded, content=tuple(e for e in recorded.content if e[0] != "native-reasoning")
    )
    tag, version, body, _ = codec.encode(older)
    assert codec.decode("c", 2, tag, version, body) == older


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
async def test_a_secret_in_the_thinking_drops_the_block_and_its_signature(
    server: ReplayServer, tmp_path: Path, case: Case
) -> None:
    thinking = f"The key is {CANARY}, so I need the tool."
    server.script(Reply.sse(case.first(thinking)), Reply.sse(case.answer()))
    settings = case.settings(server.url)
    db = tmp_path / "runs.db"
    body, responses = await _suspend_then_resume(server, db, settings, settings, secrets=(CANARY,))
    assert CANARY not in json.dumps(body)
    recorded = responses[0]
    assert CANARY not in json.dumps(recorded.content)
    markers = [n for n in _native(recorded) if "dropped" in n]
    assert [m["dropped"] for m in markers] == ["redacted"]
    assert "data" not in markers[0]
    if case is GEMINI:  # the call's signature holds no text: it still goes back
        (call,) = case.native_sent(body)
        assert set(call) == {"thoughtSignature"}
    else:
        assert case.native_sent(body) == []
    assert _files_holding(tmp_path, CANARY) == []


async def test_a_thinking_block_over_the_bound_is_dropped_whole_with_a_marker(
    server: ReplayServer, tmp_path: Path
) -> None:
    thinking = "x" * (DEFAULT_MAX_NATIVE_BLOCK_BYTES + 1)
    server.script(Reply.sse(ANTHROPIC.first(thinking)), Reply.sse(ANTHROPIC.answer()))
    settings = ANTHROPIC.settings(server.url)
    body, responses = await _suspend_then_resume(server, tmp_path / "runs.db", settings, settings)
    (marker,) = _native(responses[0])
    assert marker["dropped"] == "too-large"
    assert marker["size"] > DEFAULT_MAX_NATIVE_BLOCK_BYTES
    assert "data" not in marker
    assert ANTHROPIC.native_sent(body) == []  # never cut: nothing of it goes back


@pytest.mark.parametrize(
    ("made_by", "resumed_by"),
    [(ANTHROPIC, RESPONSES), (RESPONSES, ANTHROPIC), (ANTHROPIC, GEMINI), (GEMINI, ANTHROPIC)],
    ids=lambda c: c.name,
)
async def test_native_reasoning_goes_back_only_to_the_provider_that_made_it(
    server: ReplayServer, tmp_path: Path, made_by: Case, resumed_by: Case
) -> None:
    server.script(Reply.sse(made_by.first("I need the tool.")), Reply.sse(resumed_by.answer()))
    body, responses = await _suspend_then_resume(
        server,
        tmp_path / "runs.db",
        made_by.settings(server.url),
        resumed_by.settings(server.url),
    )
    assert _native(responses[0])  # recorded
    assert resumed_by.native_sent(body) == []
    sent = json.dumps(body)
    for opaque in ("sig-turn-1", "enc-1", "rs_1", SIGNATURE.rstrip("=")):
        assert opaque not in sent


async def test_a_thought_signature_goes_back_only_to_the_model_that_made_it(
    server: ReplayServer, tmp_path: Path
) -> None:
    server.script(Reply.sse(GEMINI.first("I need the tool.")), Reply.sse(GEMINI.answer()))
    other = Gemini("gemini-2.5-flash", api_key=KEY, base_url=server.url)
    body, responses = await _suspend_then_resume(
        server, tmp_path / "runs.db", GEMINI.settings(server.url), other
    )
    # The signature is in the log (a resume on the same model sends it: the test above) ...
    recorded = _native(responses[0])
    assert recorded
    assert all(native["provider"] == "google" and "data" in native for native in recorded)
    # ... and another Gemini model is not sent it.
    assert GEMINI.native_sent(body) == []
