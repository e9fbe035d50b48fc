"""Nothing a model sends is unbounded (the engine side): every request carries an output cap from
the policy; a response that grows past ``ResponseLimits.max_response_bytes`` is stopped at once
and ends the run as ModelFailed naming the limit (not retried); a tool call whose arguments pass
``max_tool_argument_bytes`` never runs, settles as ToolInvalidInput, and is recorded — and sent
back to the model — as a short marker, never as its text. The memory side (RSS of a process
that streams 100s of MB) is in ``test_response_bounds_memory.py``."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import attrs
import pytest
import trio
import trio.testing

from effectagent.ai import (
    AssistantMessage,
    FinishPart,
    LanguageModelService,
    ModelRequest,
    ModelResponse,
    ResponsePart,
    ResponseReducer,
    TextDeltaPart,
    TextEndPart,
    TextStartPart,
    Tool,
    ToolCallContent,
    ToolCallContext,
    ToolCallPart,
    ToolMessage,
    ToolParamsDeltaPart,
    ToolParamsStartPart,
    Usage,
    generate,
)
from effectagent.core import (
    REDACTED,
    AgentPolicy,
    ModelFailed,
    ModelResponseRecorded,
    ResponseLimits,
    RunCompleted,
    RunFailed,
    ToolCallDeclared,
    ToolCallPrepared,
    ToolCallSettled,
    ToolInvalidInput,
    ToolSuccess,
)
from effectagent.effect import Layer
from effectagent.engine import open_runtime
from effectagent.testing import Turn

from .helpers import (
    TrackingModel,
    events_of,
    make_agent,
    make_policy,
    records_of,
    run_events,
    run_script,
)

CANARY = "CANARY-5e1d-bounds-do-not-leak"


@attrs.frozen
class Note:
    text: str


def write_tool() -> Tool[Note, str]:
    return Tool("write", "Write a note.", parameters=Note, success=str)


class Probe:
    """A ``write`` handler that counts its calls."""

    def __init__(self) -> None:
        self.calls = 0

    async def write(self, params: Note, call: ToolCallContext) -> str:
        await trio.lowlevel.checkpoint()
        self.calls += 1
        return f"wrote {len(params.text)} characters"


# ---- the output cap ------------------------------------------------------------------------------


@pytest.mark.parametrize("cap", [None, 1234])
async def test_every_request_carries_the_policys_output_cap(
    autojump_clock: trio.testing.MockClock, cap: int | None
) -> None:
    probe, tool = Probe(), write_tool()
    ran = await run_script(
        make_agent(tool, policy=make_policy(max_output_tokens=cap)),
        {tool: probe.write},
        [Turn.tool_calls(("write", {"text": "hi"})), Turn.text("Done.")],
    )
    assert isinstance(ran.terminal, RunCompleted)
    assert [r.max_output_tokens for r in ran.model.requests] == [cap, cap]


@pytest.mark.parametrize(
    ("fields", "error", "message"),
    [
        ({"max_output_tokens": 0}, ValueError, "AgentPolicy.max_output_tokens must be"),
        ({"max_output_tokens": 1.5}, TypeError, "AgentPolicy.max_output_tokens must be"),
        ({"response_limits": 4096}, TypeError, "AgentPolicy.response_limits must be"),
    ],
)
def test_bad_policy_values_are_refused_naming_the_field(
    fields: dict[str, Any], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        AgentPolicy(**fields)


@pytest.mark.parametrize(
    ("fields", "error"),
    [
        ({"max_response_bytes": 0}, ValueError),
        ({"max_response_bytes": True}, TypeError),
        ({"max_tool_argument_bytes": -1}, ValueError),
        ({"max_tool_argument_bytes": "1 MiB"}, TypeError),
    ],
)
def test_bad_response_limits_are_refused_naming_the_field(
    fields: dict[str, Any], error: type[Exception]
) -> None:
    (name,) = fields
    with pytest.raises(error, match=f"ResponseLimits.{name} must be"):
        ResponseLimits(**fields)


# ---- the response cap ----------------------------------------------------------------------------


class EndlessModel:
    """A model that writes text until it is stopped (or, as a safety net for a broken engine,
    until it wrote ``stop_after`` characters), counting what it wrote."""

    def __init__(self, piece: int = 4096, stop_after: int = 64 * 1024 * 1024) -> None:
        self.piece = "x" * piece
        self.stop_after = stop_after
        self.written = 0
        self.closed = 0
        self.requests: list[ModelRequest] = []

    def stream(self, request: ModelRequest) -> AsyncIterator[ResponsePart]:
        self.requests.append(request)
        return self._parts()

    async def _parts(self) -> AsyncIterator[ResponsePart]:
        try:
            yield TextStartPart("t")
            while self.written < self.stop_after:
                await trio.lowlevel.checkpoint()
                self.written += len(self.piece)
                yield TextDeltaPart("t", self.piece)
            yield TextEndPart("t")
            yield FinishPart("stop")
        finally:
            self.closed += 1

    async def generate(self, request: ModelRequest) -> ModelResponse:
        return await generate(self, request)

    def layer(self) -> Layer:
        return Layer.succeed(LanguageModelService, self, name="EndlessModel")


@pytest.mark.parametrize("limit", [None, 256 * 1024])
async def test_an_endless_response_is_stopped_at_the_cap_and_fails_the_run(
    autojump_clock: trio.testing.MockClock, limit: int | None
) -> None:
    limits = ResponseLimits() if limit is None else ResponseLimits(max_response_bytes=limit)
    cap = limits.max_response_bytes
    model = EndlessModel()
    agent = make_agent(policy=make_policy(response_limits=limits))
    async with open_runtime(model.layer(), agents=[agent]) as runtime:
        events = await run_events(runtime, agent, "Write forever.")
        log = list(await runtime.log.entries(events[0].conversation_id))
    terminal = events[-1]
    assert isinstance(terminal, RunFailed)
    assert isinstance(terminal.error, ModelFailed)
    assert terminal.error.error_tag == "ResponseTooLarge"
    shown = "4 MiB" if limit is None else "256 KiB"
    assert terminal.error.message == (
        f"the response grew past {shown}, the most a response may be, and was stopped there"
    )
    # Stopped at once — by the piece that crossed the cap — and the stream closed; not retried.
    assert cap - len(model.piece) < model.written <= cap + len(model.piece)
    assert model.closed == 1
    assert len(model.requests) == 1
    assert records_of(log, ModelResponseRecorded) == []


# ---- the tool-argument cap -----------------------------------------------------------------------


async def test_a_call_with_too_large_arguments_never_runs_and_leaves_only_a_marker(
    autojump_clock: trio.testing.MockClock,
) -> None:
    probe, tool = Probe(), write_tool()
    text = "HEAD" + "x" * (300 * 1024)
    ran = await run_script(
        make_agent(tool),
        {tool: probe.write},
        [Turn.tool_calls(("write", {"text": text}), chunk=4096), Turn.text("Too big, sorry.")],
    )
    assert isinstance(ran.terminal, RunCompleted)
    assert probe.calls == 0
    assert records_of(ran.log, ToolCallPrepared) == []
    size = len(json.dumps({"text": text}))
    outcome = ran.outcome("call_0")
    assert isinstance(outcome, ToolInvalidInput)
    assert outcome.message == "arguments of 300 KiB exceed the limit of 256 KiB; not executed"
    # The record holds the marker: the call's size, why, and a short head — never the text.
    (recorded,) = [r for r in records_of(ran.log, ModelResponseRecorded) if r.turn == 1]
    (entry,) = [value for kind, value in recorded.content if kind == "tool-call"]
    marker = json.loads(entry["arguments"])
    assert marker == {
        "_tag": "ArgumentsOmitted",
        "message": outcome.message,
        "original_bytes": size,
        "head": '{"text": "HEAD' + "x" * 186,
    }
    assert (entry["truncated"], entry["reason"]) == (True, "too-large")
    assert len(repr(ran.log)) < 10_000
    # The next request carries the same marker as the call's arguments, and the result.
    second = ran.model.requests[1]
    (call,) = [
        part
        for message in second.messages
        if isinstance(message, AssistantMessage)
        for part in message.content
        if isinstance(part, ToolCallContent)
    ]
    assert (call.id, call.arguments) == ("call_0", marker)
    (results,) = [m for m in second.messages if isinstance(m, ToolMessage)]
    assert [(r.id, r.result, r.is_failure) for r in results.content] == [
        ("call_0", {"_tag": "ToolInvalidInput", "message": outcome.message}, True)
    ]
    assert len(repr(second)) < 10_000


@pytest.mark.parametrize("secrets", [(), (CANARY,)])
async def test_a_call_too_large_to_run_keeps_its_place_in_the_batch(
    autojump_clock: trio.testing.MockClock, secrets: tuple[str, ...]
) -> None:
    """Declaration order holds for a call that never runs: it is declared, recorded, settled,
    replayed to the model and answered in its place, not after its batch's other calls (with a
    redactor, the path that may rename IDs, too)."""
    probe, tool = Probe(), write_tool()
    limits = ResponseLimits(max_tool_argument_bytes=200)
    ran = await run_script(
        make_agent(tool, policy=make_policy(response_limits=limits)),
        {tool: probe.write},
        [
            Turn.tool_calls(
                ("write", {"text": "x" * 300}), ("write", {"text": "b"}), ("write", {"text": "c"})
            ),
            Turn.text("Done."),
        ],
        secrets=secrets,
    )
    assert isinstance(ran.terminal, RunCompleted)
    assert probe.calls == 2
    order = ["call_0", "call_1", "call_2"]
    assert [e.tool_call_id for e in events_of(ran.events, ToolCallDeclared)] == order
    settled = records_of(ran.log, ToolCallSettled)
    assert [r.tool_call_id for r in settled] == order
    assert isinstance(settled[0].outcome, ToolInvalidInput)
    (recorded,) = [r for r in records_of(ran.log, ModelResponseRecorded) if r.turn == 1]
    assert [v["id"] for kind, v in recorded.content if kind == "tool-call"] == order
    second = ran.model.requests[1]
    calls = [
        part.id
        for message in second.messages
        if isinstance(message, AssistantMessage)
        for part in message.content
        if isinstance(part, ToolCallContent)
    ]
    assert calls == order
    (results,) = [m for m in second.messages if isinstance(m, ToolMessage)]
    assert [r.id for r in results.content] == order
    # runtime.run (a reducer that takes events unbuilt) commits the same order.
    model = TrackingModel(
        [
            Turn.tool_calls(
                ("write", {"text": "x" * 300}), ("write", {"text": "b"}), ("write", {"text": "c"})
            ),
            Turn.text("Done."),
        ]
    )
    agent = make_agent(tool, policy=make_policy(response_limits=limits))
    layer = agent.toolkit.handlers({tool: probe.write}) + model.layer()
    async with open_runtime(layer, agents=[agent], secrets=secrets) as runtime:
        result = await runtime.run(agent, "Write three notes.")
    assert [o.tool_call_id for o in result.outcomes] == order


def test_the_reducer_keeps_a_call_too_large_to_run_in_its_place() -> None:
    """A response's content holds a call too large to run where it was declared, and one cut
    off by the length limit after everything else; its two call lists hold each kind alone."""
    reducer = ResponseReducer(max_argument_bytes=16)
    parts: list[ResponsePart] = [
        ToolCallPart("a", "write", '{"text": "' + "x" * 20 + '"}'),
        TextStartPart("t"),
        TextDeltaPart("t", "between"),
        TextEndPart("t"),
        ToolCallPart("b", "write", "{}"),
        ToolParamsStartPart("c", "write"),
        ToolParamsDeltaPart("c", '{"te'),
        FinishPart("length", Usage()),
    ]
    for part in parts:
        reducer.feed(part)
    response = reducer.finish()
    kinds = [(item.type, getattr(item, "id", None)) for item in response.content]
    assert kinds == [
        ("truncated-tool-call", "a"),
        ("text", None),
        ("tool-call", "b"),
        ("truncated-tool-call", "c"),
    ]
    assert [c.id for c in response.tool_calls] == ["b"]
    assert [(t.id, t.reason) for t in response.truncated_calls] == [
        ("a", "too-large"),
        ("c", "length"),
    ]


@pytest.mark.parametrize("at", [20, 190, 198])
async def test_the_markers_head_is_redacted_even_when_it_cuts_a_secret(
    autojump_clock: trio.testing.MockClock, at: int
) -> None:
    """The head is redacted; where the head ends inside a secret, the part of the secret it holds
    is left out too (a prefix of a secret is not shown either)."""
    probe, tool = Probe(), write_tool()
    raw = json.dumps({"text": "y" * (at - 10) + CANARY + "z" * (300 * 1024)})
    ran = await run_script(
        make_agent(tool),
        {tool: probe.write},
        [Turn.tool_calls(("write", raw)), Turn.text("No.")],
        secrets=[CANARY],
    )
    assert probe.calls == 0
    (recorded,) = [r for r in records_of(ran.log, ModelResponseRecorded) if r.turn == 1]
    (entry,) = [value for kind, value in recorded.content if kind == "tool-call"]
    head = json.loads(entry["arguments"])["head"]
    assert head.startswith('{"text": "yyyy')
    assert CANARY not in repr(ran.log)
    assert CANARY not in repr(ran.model.requests)
    if at + len(CANARY) <= 200:
        assert head.endswith(REDACTED + "z" * (200 - at - len(CANARY)))
    else:
        assert head == raw[:at]  # the cut secret's start is held back: it ends before it


async def test_raising_the_argument_cap_raises_what_the_decoder_takes(
    autojump_clock: trio.testing.MockClock,
) -> None:
    probe, tool = Probe(), write_tool()
    limits = ResponseLimits(max_tool_argument_bytes=1024 * 1024)
    ran = await run_script(
        make_agent(tool, policy=make_policy(response_limits=limits)),
        {tool: probe.write},
        [Turn.tool_calls(("write", {"text": "x" * (300 * 1024)})), Turn.text("Written.")],
    )
    assert isinstance(ran.outcome("call_0"), ToolSuccess)
    assert probe.calls == 1


async def test_arguments_nested_200000_deep_are_invalid_input_not_a_defect(
    autojump_clock: trio.testing.MockClock,
) -> None:
    probe, tool = Probe(), write_tool()
    deep = "[" * 100_000 + "]" * 100_000  # 200 KB: under the argument cap, so it is decoded
    limits = ResponseLimits(max_tool_argument_bytes=1024 * 1024)
    deeper = '{"text": ' + "[" * 200_000 + "]" * 200_000 + "}"
    ran = await run_script(
        make_agent(tool, policy=make_policy(response_limits=limits)),
        {tool: probe.write},
        [Turn.tool_calls(("write", deep, "a"), ("write", deeper, "b")), Turn.text("No.")],
    )
    assert isinstance(ran.terminal, RunCompleted)
    for call_id in ("a", "b"):
        outcome = ran.outcome(call_id)
        assert isinstance(outcome, ToolInvalidInput)
        assert outcome.message == "invalid input: $: input is nested deeper than 32 levels"
    assert probe.calls == 0
