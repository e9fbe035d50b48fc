"""A registered secret never leaves, wherever a model or a tool puts it (property, CAP-013).

For a generated secret and every subset of the places it can enter — the user's text, model text
and reasoning (streamed in pieces), tool-call IDs and tool names the model made up, arguments
written plainly or with JSON escapes, a tool's result, its declared error, its crash, its progress
report, and a compaction summary — the secret appears in no event, no canonical record, no later
model request, no log line and no error a caller can see. Handlers still get the real value.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from typing import Any

import attrs
import pytest
import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st

from effectagent.ai import (
    FinishPart,
    LanguageModelService,
    ReasoningDeltaPart,
    ReasoningEndPart,
    ReasoningStartPart,
    ResponsePart,
    TextDeltaPart,
    TextEndPart,
    TextStartPart,
    Tool,
    ToolCallContext,
    ToolCallPart,
    Toolkit,
    Usage,
)
from effectagent.core import Agent, CompactionCreated
from effectagent.effect import Layer, TaggedError, field_meta
from effectagent.engine import (
    CompactionRequest,
    CompactorService,
    InstructionsLeakSecret,
    open_runtime,
)
from effectagent.testing import ScriptedModel, Turn

from .helpers import engine_logs, make_policy, run_events, summarize_everything

PLACES = (
    "user",
    "text",
    "reasoning",
    "call_id",
    "tool_name",
    "arguments",
    "escaped_arguments",
    "result",
    "declared_error",
    "crash",
    "progress",
    "summary",
)

# Secrets of an alphabet and prefix that nothing else the engine writes contains by chance.
SECRETS = st.from_regex(r"\As3cr3t-[A-Za-z0-9]{4,12}\Z")


@attrs.frozen
class Params:
    note: str


@attrs.frozen
class Echoed:
    note: str


@attrs.frozen
class Refused(TaggedError):
    why: str


def _escaped(text: str) -> str:
    """``text`` as a JSON string body with every character after the first spelled ``\\uXXXX``."""
    return text[0] + "".join(f"\\u{ord(c):04x}" for c in text[1:])


def _pieces(block: str, text: str, reasoning: bool) -> list[ResponsePart]:
    """``text`` streamed two characters a delta, so a secret is always split across deltas."""
    chunks = [text[i : i + 2] for i in range(0, len(text), 2)]
    if reasoning:
        return [
            ReasoningStartPart(block),
            *(ReasoningDeltaPart(block, c) for c in chunks),
            ReasoningEndPart(block),
        ]
    return [TextStartPart(block), *(TextDeltaPart(block, c) for c in chunks), TextEndPart(block)]


class _SummarizeAll:
    """Summarizes everything before the second turn (the first has nothing worth compacting)."""

    async def compact(self, request: CompactionRequest) -> Sequence[CompactionCreated]:
        if request.turn != 2:
            return []
        return await summarize_everything(request)


async def _run_with_secret(secret: str, places: frozenset[str]) -> list[str]:
    """Run one conversation with ``secret`` in ``places``; return everything observable as text,
    and check the handler got the real value."""
    tool = Tool(
        "echo",
        "Echo a note.",
        parameters=Params,
        success=Echoed,
        failure=Refused,
    )
    seen_by_handler: list[str] = []

    async def echo(params: Params, call: ToolCallContext) -> Echoed:
        seen_by_handler.append(params.note)
        if "progress" in places:
            await call.progress({"status": f"working with {secret}"})
        if "declared_error" in places:
            raise Refused(f"refused {secret}")
        if "crash" in places:
            raise RuntimeError(f"dsn postgres://app:{secret}@db")
        note = f"echo {secret}" if "result" in places else "echo"
        return Echoed(note)

    note = f"note {secret}" if "arguments" in places else "plain note"
    if "escaped_arguments" in places:
        raw_arguments = '{"note": "' + _escaped(note + " " + secret) + '"}'
    else:
        raw_arguments = json.dumps({"note": note})
    call_id = f"call-{secret}" if "call_id" in places else "call-1"
    name = f"echo{secret}" if "tool_name" in places else "echo"
    first: list[ResponsePart] = []
    if "reasoning" in places:
        first += _pieces("r", f"thinking about {secret} now", reasoning=True)
    if "text" in places:
        first += _pieces("t", f"I will use {secret} for this", reasoning=False)
    first += [ToolCallPart(call_id, name, raw_arguments), FinishPart("tool-calls", Usage.of(5, 5))]
    turns = [Turn.raw(*first)]
    if "summary" in places:
        turns.append(Turn.text(f"summary: the key is {secret}"))
    turns.append(Turn.text(f"done with {secret}" if "text" in places else "done"))
    model = ScriptedModel(turns)
    limit = 1 if "summary" in places else None
    agent = Agent(
        "keeper",
        "Keep secrets.",
        make_policy(context_token_limit=limit),
        Toolkit(tool),
    )
    layer = agent.toolkit.handlers({tool: echo}) + Layer.succeed(LanguageModelService, model)
    if "summary" in places:
        layer = layer + Layer.succeed(CompactorService, _SummarizeAll())
    user = f"please keep {secret} safe" if "user" in places else "hello"
    observed: list[str] = []
    with engine_logs(logging.DEBUG) as logs:
        async with open_runtime(layer, agents=[agent], secrets=[secret]) as runtime:
            events = await run_events(runtime, agent, user)
            log = await runtime.log.entries(events[0].conversation_id)
            result = await runtime.run(agent, "again", conversation_id=events[0].conversation_id)
    observed += [repr(e) for e in events]
    observed += [repr(entry) for entry in log]
    observed += [repr(request) for request in model.requests]
    observed += [repr(line) for line in logs]
    observed.append(repr(result))
    if result.error is not None:
        observed.append(str(result.error))
    try:
        result.raise_for_status()
    except Exception as exc:
        observed.append(str(exc))
    if "arguments" in places and "tool_name" not in places:
        assert any(secret in seen for seen in seen_by_handler)  # the handler got the real value
    return observed


@settings(max_examples=60)
@given(secret=SECRETS, places=st.frozensets(st.sampled_from(PLACES), min_size=1))
def test_a_secret_never_leaves_wherever_it_is_put(secret: str, places: frozenset[str]) -> None:
    async def main() -> list[str]:
        return await _run_with_secret(secret, places)

    observed = trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    leaks = [text for text in observed if secret in text]
    assert leaks == []


async def test_instructions_holding_a_secret_are_refused_at_preflight() -> None:
    agent = Agent("leaky", "Use the key s3cr3t-abcdef when asked.", make_policy())
    model = ScriptedModel([Turn.text("hi")])
    layer = Layer.succeed(LanguageModelService, model)
    with pytest.raises(InstructionsLeakSecret, match="'leaky'"):
        async with open_runtime(layer, agents=[agent], secrets=["s3cr3t-abcdef"]):
            pass
    async with open_runtime(layer, secrets=["s3cr3t-abcdef"]) as runtime:
        with pytest.raises(InstructionsLeakSecret):
            await runtime.run(agent, "hello")
    assert model.requests == []


@attrs.frozen
class _Keyed:
    key: str = attrs.field(metadata=field_meta(description="the key: s3cr3t-abcdef"))


async def _one(params: Any, call: ToolCallContext) -> Any:
    return "done"


def _agents_telling_a_secret() -> list[tuple[Agent, str]]:
    described = Tool.dynamic("lookup", "Looks up with s3cr3t-abcdef.", {"type": "object"})
    schema = {"type": "object", "properties": {"key": {"const": "s3cr3t-abcdef"}}}
    keyed = Tool.dynamic("keyed", "Looks up.", schema)
    titled = Tool.dynamic("titled", "Looks up.", {"type": "object"}, title="s3cr3t-abcdef")
    named = Tool.dynamic("s3cr3t-abcdef", "Looks up.", {"type": "object"})
    policy = make_policy()
    return [
        (Agent("a", "Help.", policy, Toolkit(described)), "the tool 'lookup'"),
        (Agent("a", "Help.", policy, Toolkit(keyed)), "the tool 'keyed'"),
        (Agent("a", "Help.", policy, Toolkit(titled)), "the tool 'titled'"),
        (Agent("a", "Help.", policy, Toolkit(named)), "the tool '[REDACTED]'"),
        (Agent("a", "Help.", policy, output=_Keyed), "its output type's JSON Schema"),
        (
            Agent("a", "Help.", policy, output=_Keyed, output_mode="tool"),
            "the tool 'final_result'",
        ),
        (Agent("s3cr3t-abcdef", "Help.", policy), "its name"),
    ]


@pytest.mark.parametrize(
    ("agent", "part"),
    _agents_telling_a_secret(),
    ids=["description", "schema", "title", "tool-name", "output", "final-result", "agent-name"],
)
async def test_what_every_request_tells_the_model_holding_a_secret_is_refused_at_preflight(
    agent: Agent, part: str
) -> None:
    """Tool descriptions and schemas are sent as written with every request, as instructions
    are: they used to reach the model (and a recorded cassette) with the secret in them."""
    model = ScriptedModel([Turn.text("hi")])
    handlers: dict[Any, Any] = dict.fromkeys(agent.toolkit, _one)
    layer = agent.toolkit.handlers(handlers) + Layer.succeed(LanguageModelService, model)
    with pytest.raises(InstructionsLeakSecret) as refused:
        async with open_runtime(layer, agents=[agent], secrets=["s3cr3t-abcdef"]):
            pass
    assert refused.value.part is not None
    assert refused.value.part.startswith(part)
    shown = agent.name.replace("s3cr3t-abcdef", "[REDACTED]")
    said = f"agent {shown!r}: {refused.value.part} contains a value the Redactor removes"
    assert str(refused.value).startswith(said)
    assert "s3cr3t-abcdef" not in str(refused.value)
    assert model.requests == []


class _NoSuffix:
    """A redactor that forgot ``partial_secret_suffix`` (it would leak split secrets)."""

    active = True

    def redact_text(self, text: str) -> str:
        return text.replace("s3cr3t-abcdef", "[gone]")

    def redact(self, value: Any) -> Any:
        return value


async def test_a_redactor_without_partial_secret_suffix_is_refused_when_the_runtime_opens() -> None:
    from effectagent.engine import RedactorService

    not_a_redactor: Any = _NoSuffix()  # mypy refuses it as a Redactor; a user may not run mypy
    layer = Layer.succeed(LanguageModelService, ScriptedModel([])) + Layer.succeed(
        RedactorService, not_a_redactor
    )
    with pytest.raises(TypeError, match="partial_secret_suffix"):
        async with open_runtime(layer):
            pass


async def test_secrets_beside_a_layer_that_provides_its_own_redactor_are_refused() -> None:
    from effectagent.core import SecretRedactor
    from effectagent.engine import RedactorService

    layer = Layer.succeed(LanguageModelService, ScriptedModel([])) + Layer.succeed(
        RedactorService, SecretRedactor(["s3cr3t-other"])
    )
    with pytest.raises(ValueError, match="register them with that Redactor"):
        async with open_runtime(layer, secrets=["s3cr3t-abcdef"]):
            pass


@pytest.mark.parametrize("which", ["conversation_id", "run_id"])
async def test_resuming_under_an_id_holding_a_secret_is_refused_without_quoting_it(
    which: str,
) -> None:
    secret = "s3cr3t-abcdef"
    ids = {"conversation_id": "conv-1", "run_id": "run-1"} | {which: f"id-{secret}"}
    agent = Agent("helper", "Answer.")
    async with open_runtime(ScriptedModel([]).as_layer(), agents=[agent], secrets=[secret]) as rt:
        with pytest.raises(ValueError, match=f"{which} holds a secret") as resumed:
            await rt.resume(agent, **ids)
        assert secret not in str(resumed.value)
        with pytest.raises(ValueError, match=f"{which} holds a secret") as streamed:
            rt.stream_resume(agent, **ids)
        assert secret not in str(streamed.value)


async def test_a_model_string_or_allowance_tool_holding_a_secret_is_refused_without_quoting_it(
    autojump_clock: trio.testing.MockClock,
) -> None:
    from effectagent.core import RunAllowance

    secret = "s3cr3t-abcdef"
    agent = Agent("helper", "Answer.")
    model = ScriptedModel([])
    async with open_runtime(model.as_layer(), agents=[agent], secrets=[secret]) as rt:
        cases: list[tuple[dict[str, Any], str]] = [
            ({"model": f"openai:{secret}"}, "model"),
            ({"model": secret}, "model"),
            ({"allowance": RunAllowance(tools=[secret])}, "allowance.tools"),
        ]
        for options, argument in cases:
            with pytest.raises(ValueError, match=f"{argument} holds a secret") as refused:
                await rt.run(agent, "Hello.", **options)
            assert secret not in str(refused.value)
            with pytest.raises(ValueError, match=f"{argument} holds a secret") as refused:
                rt.stream(agent, "Hello.", **options)
            assert secret not in str(refused.value)
    assert model.requests == []
