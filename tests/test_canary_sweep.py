"""A canary sweep: one registered secret pushed through every input channel of the public API,
then looked for in every sink a user can read.

The channels: the user's text, media names and text documents; the model's text (also split
across two streamed deltas), tool-call arguments (plain and JSON-escaped), a structured answer
and a model error; a tool's result, declared error, crash (message, ``__cause__``, notes, an
exception group) and progress; guardrail reasons and guardrails that raise; output validators;
computed instructions and the per-turn context hook; context items; approval reasons from a
script, a policy rule, a provider that raises and a person (``InteractiveApproval``: reason and
name); steering and follow-ups (text, author, text documents); a subagent's input, output,
context and failure; compaction summaries from the model and from a host (summary, facts, a
refused artifact's version); Code Mode programs (a literal, the result, console lines, a thrown
message, an inner call's arguments, result and crash, a JSON escape); an MCP server's results,
errors and stderr (its ``env``, or a ``--token`` argument, holding the secret) and an MCP server
over HTTP (a header and the URL's query holding it) that echoes them in a result, an error
result, a protocol error and a failed handshake — the SDK's own spans included; provider error bodies echoing the API key
from a stand-in HTTP server; a sandboxed command's program, arguments, environment, stdin and
output; media a tool returns; a structured answer as ``stream_output`` decodes it; a durable
submission's text and media; and a cassette written by ``record``.

The sinks: every event of ``runtime.stream``, the conversation log (in memory, and the SQLite
file's bytes, WAL included), every later model request, every log line (structlog, engine and
capabilities), every OpenTelemetry span with its attributes and events (``Telemetry`` with
``include_content=True``), ``RunResult``'s repr and str, and every exception a caller meets
(str, repr, notes, ``__cause__`` and unsuppressed ``__context__``, traceback), the bytes of
every file a scenario wrote (SQLite with its WAL, a cassette) and every row of a PostgreSQL
schema. A hit is a leak.

An ID or author holding a secret cannot be redacted and still name what it names: a run refuses
it at the call, and the refusal does not quote it.
"""

from __future__ import annotations

import json
import logging
import sys
import traceback
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from functools import partial
from pathlib import Path
from typing import Any

import attrs
import pytest
import structlog
import trio
import trio.testing
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from structlog.testing import capture_logs

from capabilities import (
    AgentStateService,
    Compensatable,
    StateSlot,
    SteeringService,
    Uncertain,
    WithRecord,
    in_memory_storage,
    sqlite_storage,
)
from capabilities.approval import (
    Answer,
    ApprovalOpened,
    ApprovalRule,
    InteractiveApproval,
    PolicyApproval,
    ScriptedApproval,
)
from capabilities.code_mode import code_mode
from capabilities.compaction import (
    CompactionResult,
    HostRequest,
    LogCompactor,
    RetainedFact,
    source_digest,
)
from capabilities.subagents import delegate
from capabilities.telemetry import Telemetry
from effectagent import (
    Agent,
    AgentPolicy,
    ChildBudget,
    Layer,
    TaggedError,
    Tool,
    ToolCallContext,
    Toolkit,
    open_runtime,
    tool,
)
from effectagent.ai import (
    AuthenticationFailed,
    DocumentPart,
    FinishPart,
    ImagePart,
    MediaPart,
    ModelRequest,
    RateLimited,
    TextDeltaPart,
    TextEndPart,
    TextStartPart,
    ToolCallPart,
    Usage,
)
from effectagent.core import (
    CheckContext,
    ContextItem,
    FinalAnswer,
    Guardrail,
    GuardrailResult,
    InstructionsContext,
    PreparedContext,
    RejectOutput,
    SecretRedactor,
    ToolCallStarted,
)
from effectagent.effect import Context
from effectagent.engine import (
    LOGGER_NAME,
    ApprovalService,
    CompactorService,
    Runtime,
    observe_runs,
)
from effectagent.testing import ScriptedModel, Turn, record

SECRET = "CANARY-7f3a9c-SECRET"
#: The secret with its first letter as a JSON escape.
ESCAPED = "\\u0043ANARY-7f3a9c-SECRET"
#: A 1x1 PNG.
PNG = bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
    "1f15c4890000000d49444154789c6360000002000154a24f5a0000000049454e44ae426082"
)
POLICY = AgentPolicy(max_turns=8, max_tool_calls=8, max_duration=600, tool_concurrency=2)


# ---- the sinks ------------------------------------------------------------------------------


def _exception_texts(exc: BaseException | None, seen: set[int] | None = None) -> list[str]:
    """What a caller can read of ``exc``: str, repr, notes, traceback, and the same of its
    cause, its unsuppressed context and a group's members."""
    seen = set() if seen is None else seen
    texts: list[str] = []
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        texts += [str(exc), repr(exc), repr(getattr(exc, "__notes__", None))]
        texts.append("".join(traceback.format_exception(exc)))
        if isinstance(exc, BaseExceptionGroup):
            for member in exc.exceptions:
                texts += _exception_texts(member, seen)
        exc = exc.__cause__ or (None if exc.__suppress_context__ else exc.__context__)
    return texts


class Sinks:
    """Everything observable of a scenario, as text."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.exporter = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.provider = provider
        self.telemetry = Telemetry(
            tracer_provider=provider, include_content=True, redactor=SecretRedactor([SECRET])
        )
        self.texts: list[str] = []
        self.requests: list[str] = []  # what the model was sent
        self.lines: list[Any] = []

    def add(self, *values: object) -> None:
        self.texts += [repr(value) for value in values]

    def caught(self, exc: BaseException | None) -> None:
        self.texts += _exception_texts(exc)

    async def run(
        self,
        runtime: Runtime,
        agent: Agent[Any, Any],
        text: Any,
        model: ScriptedModel | None = None,
        on_event: Callable[[Any], Awaitable[None]] | None = None,
        **options: Any,
    ) -> str:
        """Stream one run, then run the conversation again; keep all of it."""
        try:
            async with runtime.stream(agent, text, **options) as stream:
                events = []
                async for event in stream:
                    events.append(event)
                    if on_event is not None:
                        await on_event(event)
        except Exception as exc:
            self.caught(exc)
            return ""
        self.add(*events)
        conversation = events[0].conversation_id
        self.add(*(await runtime.log.entries(conversation)))
        try:
            result = await runtime.run(agent, "again", conversation_id=conversation)
        except Exception as exc:
            self.caught(exc)
        else:
            self.add(result)
            self.texts.append(str(result))
            self.caught(result.error)
            try:
                result.raise_for_status()
            except Exception as exc:
                self.caught(exc)
        if model is not None:
            self.requests += [repr(request) for request in model.requests]
        return conversation

    def leaks(self, *, requests: bool = True) -> list[str]:
        """Every text that holds the secret (``requests=False``: leaving out what the model
        was sent)."""
        files = [p.read_bytes().decode("latin-1") for p in self.tmp_path.rglob("*") if p.is_file()]
        spans = [span.to_json() for span in self.exporter.get_finished_spans()]
        everything = [*self.texts, repr(self.lines), *spans, *files]
        if requests:
            everything += self.requests
        return [_around(text) for text in everything if SECRET in text]


def _around(text: str) -> str:
    at = text.index(SECRET)
    return text[max(0, at - 200) : at + 40]


@contextmanager
def _captured_logs(sinks: Sinks) -> Iterator[None]:
    logger = logging.getLogger(LOGGER_NAME)
    before = logger.level
    logger.setLevel(logging.DEBUG)
    try:
        with capture_logs() as lines:
            sinks.lines = lines
            yield
    finally:
        logger.setLevel(before)
        structlog.reset_defaults()


# ---- the engine's channels ------------------------------------------------------------------


@attrs.frozen
class Note:
    note: str


@attrs.frozen
class Refused(TaggedError):
    why: str


@attrs.frozen
class Answered:
    answer: str


async def _engine(channel: str, sinks: Sinks) -> None:
    needs_approval = channel.startswith("approval")
    echo = Tool(
        "echo",
        "Echo a note.",
        parameters=Note,
        success=str,
        failure=Refused,
        needs_approval=needs_approval,
    )

    async def handle(params: Note, call: ToolCallContext) -> str:
        if channel == "tool-declared-error":
            raise Refused(f"refused {SECRET}")
        if channel == "tool-crash":
            raise RuntimeError(f"dsn postgres://app:{SECRET}@db")
        if channel == "tool-crash-cause":
            try:
                raise ValueError(f"inner {SECRET}")
            except ValueError as exc:
                raise RuntimeError("outer") from exc
        if channel == "tool-crash-notes":
            error = RuntimeError("outer")
            error.add_note(f"note {SECRET}")
            raise error
        if channel == "tool-crash-group":
            raise ExceptionGroup("several", [ValueError(f"member {SECRET}")])
        if channel == "tool-progress":
            await call.progress({"status": f"working with {SECRET}"})
        return f"result {SECRET}" if channel == "tool-result" else "ok"

    options: dict[str, Any] = {}
    instructions: Any = "Be brief."
    if channel == "structured-answer":
        options["output"] = Answered
    elif channel == "input-guardrail":

        async def trip(ctx: CheckContext, text: str) -> GuardrailResult:
            return GuardrailResult.trip(f"no {SECRET}")

        options["input_guardrails"] = [Guardrail(trip)]
    elif channel == "input-guardrail-beside":

        async def trip_beside(ctx: CheckContext, text: str) -> GuardrailResult:
            return GuardrailResult.trip(f"no {SECRET}")

        options["input_guardrails"] = [Guardrail(trip_beside, beside=True)]
    elif channel == "input-guardrail-raises":

        async def boom(ctx: CheckContext, text: str) -> GuardrailResult:
            raise RuntimeError(f"boom {SECRET}")

        options["input_guardrails"] = [Guardrail(boom)]
    elif channel == "output-guardrail":

        async def trip_answer(ctx: CheckContext, answer: FinalAnswer[None]) -> GuardrailResult:
            return GuardrailResult.trip(f"no {SECRET}")

        options["output_guardrails"] = [Guardrail(trip_answer)]
    elif channel == "output-validator":

        def reject(ctx: CheckContext, answer: str) -> str:
            raise RejectOutput(f"reject {SECRET}")

        options["output_validators"] = [reject]
    elif channel == "output-validator-raises":

        def crash(ctx: CheckContext, answer: str) -> str:
            raise RuntimeError(f"crash {SECRET}")

        options["output_validators"] = [crash]
    elif channel == "computed-instructions":

        async def computed(ctx: InstructionsContext[Any]) -> str:
            return f"Use {SECRET}."

        instructions = computed
    elif channel == "computed-instructions-raise":

        async def failing(ctx: InstructionsContext[Any]) -> str:
            raise RuntimeError(f"instructions {SECRET}")

        instructions = failing
    elif channel == "prepare-context":

        async def prepare(ctx: Any) -> PreparedContext:
            return PreparedContext(items=[ContextItem(kind="note", source="s", text=SECRET)])

        options["prepare_context"] = prepare
    elif channel == "prepare-context-raises":

        async def prepare_failing(ctx: Any) -> PreparedContext:
            raise RuntimeError(f"prepare {SECRET}")

        options["prepare_context"] = prepare_failing
    agent = Agent("keeper", instructions, POLICY, Toolkit(echo), **options)

    first: Turn
    if channel in ("tool-call-id", "tool-name"):
        call_id = f"call-{SECRET}" if channel == "tool-call-id" else "call-1"
        name = f"echo-{SECRET}" if channel == "tool-name" else "echo"
        first = Turn.raw(
            ToolCallPart(call_id, name, '{"note": "n"}'), FinishPart("tool-calls", Usage.of(1, 1))
        )
    elif channel == "tool-arguments-escaped":
        arguments = '{"note": "' + ESCAPED + '"}'
        first = Turn.raw(
            ToolCallPart("call-1", "echo", arguments), FinishPart("tool-calls", Usage.of(1, 1))
        )
    else:
        note = f"note {SECRET}" if channel == "tool-arguments" else "note"
        first = Turn.tool_calls(("echo", {"note": note}))
    turns = [first]
    if channel == "model-text-split":
        turns.append(
            Turn.raw(
                TextStartPart("t"),
                TextDeltaPart("t", "a " + SECRET[:9]),
                TextDeltaPart("t", SECRET[9:] + " b"),
                TextEndPart("t"),
                FinishPart("stop", Usage.of(1, 1)),
            )
        )
    elif channel == "model-error":
        turns.append(Turn.fail(RuntimeError(f"provider said {SECRET}")))
    elif channel == "model-error-typed":
        turns.append(Turn.fail(AuthenticationFailed(f"key {SECRET} revoked")))
    elif channel == "structured-answer":
        turns.append(Turn.text(json.dumps({"answer": f"it is {SECRET}"})))
    elif channel == "output-validator":
        turns += [Turn.text("first"), Turn.text("second"), Turn.text("third")]
    else:
        turns.append(Turn.text(f"done {SECRET}" if channel == "model-text" else "done"))
    model = ScriptedModel(turns)
    storage = (
        sqlite_storage(sinks.tmp_path / "log.db") if channel == "sqlite" else in_memory_storage()
    )
    layer = agent.toolkit.handlers({echo: handle}) + model.as_layer() + storage
    layer = layer + sinks.telemetry.layer()
    if channel == "approval-scripted-deny":
        layer = layer + ScriptedApproval([Answer.deny(f"no {SECRET}")]).layer()
    elif channel == "approval-scripted-approve":
        layer = layer + ScriptedApproval([Answer.approve(f"yes {SECRET}")]).layer()
    elif channel == "approval-scripted-error":
        layer = layer + ScriptedApproval([Answer.error(f"error {SECRET}")]).layer()
    elif channel == "approval-policy-rule":
        rules = [ApprovalRule.deny(tools="echo", reason=f"rule {SECRET}")]
        layer = layer + PolicyApproval(rules).layer()
    elif channel == "approval-provider-raises":

        class Raising:
            async def request(self, request: Any) -> Any:
                raise RuntimeError(f"approver {SECRET}")

        layer = layer + Layer.succeed(ApprovalService, Raising())
    text: Any = f"please keep {SECRET}" if channel == "user-text" else "hi"
    if channel == "image-name":
        text = ["see", ImagePart(PNG, name=f"image-{SECRET}.png")]
    elif channel == "document-text":
        text = ["see", DocumentPart(f"doc {SECRET}".encode(), media_type="text/plain")]
    elif channel == "image-url":
        url = f"https://images.example/cat.png?key={SECRET}"
        text = ["see", ImagePart(url=url, media_type="image/png")]
    elif channel == "document-name":
        document = DocumentPart(b"doc", media_type="text/plain", name=f"doc-{SECRET}.txt")
        text = ["see", document]
    run_options: dict[str, Any] = {}
    if channel == "author":  # refused at the call, without quoting it
        run_options["author"] = f"ann-{SECRET}"
    elif channel == "conversation-id":
        run_options.update(conversation_id=f"conv-{SECRET}", create=True)
    elif channel == "run-id":
        run_options["run_id"] = f"run-{SECRET}"
    elif channel == "context-item":
        item = ContextItem(kind="note", source=f"src-{SECRET}", text=f"context {SECRET}")
        run_options["context"] = [item]
    async with open_runtime(layer, agents=[agent], secrets=[SECRET]) as runtime:
        await sinks.run(runtime, agent, text, model, **run_options)


ENGINE_CHANNELS = [
    "user-text",
    "model-text",
    "model-text-split",
    "tool-arguments",
    "tool-arguments-escaped",
    "tool-call-id",
    "tool-name",
    "tool-result",
    "tool-declared-error",
    "tool-crash",
    "tool-crash-cause",
    "tool-crash-notes",
    "tool-crash-group",
    "tool-progress",
    "model-error",
    "model-error-typed",
    "structured-answer",
    "input-guardrail",
    "input-guardrail-raises",
    "input-guardrail-beside",
    "output-guardrail",
    "output-validator",
    "output-validator-raises",
    "computed-instructions",
    "computed-instructions-raise",
    "prepare-context",
    "prepare-context-raises",
    "approval-scripted-deny",
    "approval-scripted-approve",
    "approval-scripted-error",
    "approval-policy-rule",
    "approval-provider-raises",
    "document-text",
    "context-item",
    "image-name",
    "document-name",
    "author",
    "conversation-id",
    "run-id",
]


@pytest.mark.parametrize(
    "channel",
    ENGINE_CHANNELS,
)
async def test_a_secret_put_in_an_engine_channel_reaches_no_sink(
    channel: str, tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    sinks = Sinks(tmp_path)
    with _captured_logs(sinks):
        await _engine(channel, sinks)
    assert sinks.texts, "the scenario observed nothing"
    assert sinks.leaks() == []


async def test_a_secret_in_a_media_url_reaches_the_model_only(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    """A URL part is sent as given — the provider fetches it — and redacted everywhere else
    (events, records, logs, spans): a secret in a URL reaches the model, by design."""
    sinks = Sinks(tmp_path)
    with _captured_logs(sinks):
        await _engine("image-url", sinks)
    assert sinks.leaks(requests=False) == []
    assert any(SECRET in request for request in sinks.requests)


@pytest.mark.parametrize("spelled", [SECRET, ESCAPED], ids=["plain", "json-escaped"])
async def test_a_secret_in_a_streamed_structured_answer_reaches_no_partial_value(
    spelled: str, tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    """``stream_output`` decodes the answer's text so far: a secret the model spells with a JSON
    escape, streamed three characters at a time, is redacted in every partial value too."""
    agent = Agent("keeper", "Answer in JSON.", POLICY, output=Answered)
    model = ScriptedModel([Turn.text('{"answer": "' + spelled + ' and more"}', chunk=3)])
    sinks = Sinks(tmp_path)
    with _captured_logs(sinks):
        async with open_runtime(model.as_layer(), agents=[agent], secrets=[SECRET]) as runtime:
            async with runtime.stream_output(agent, "hi") as updates:
                sinks.add(*[update async for update in updates])
            sinks.add(updates.result)
    assert any("[REDACTED] and more" in text for text in sinks.texts)
    assert sinks.leaks() == []


# ---- the capabilities' channels -------------------------------------------------------------


async def _steering(channel: str, sinks: Sinks) -> None:
    slow = Tool("slow", "Slow.", parameters=Note, success=str, readonly=True)
    steered = trio.Event()

    async def handle(params: Note, call: ToolCallContext) -> str:
        await steered.wait()  # the call is in flight until the input was submitted
        return "ok"

    agent = Agent("keeper", "Be brief.", POLICY, Toolkit(slow))
    model = ScriptedModel(
        [Turn.tool_calls(("slow", {"note": "x"})), Turn.text("one"), Turn.text("two")]
    )
    storage = (
        sqlite_storage(sinks.tmp_path / "log.db")
        if channel.endswith("sqlite")
        else in_memory_storage()
    )
    layer = agent.toolkit.handlers({slow: handle}) + model.as_layer() + storage
    async with open_runtime(
        layer + sinks.telemetry.layer(), agents=[agent], secrets=[SECRET]
    ) as runtime:
        steering = runtime.context[SteeringService]
        receipts = []

        async def on_event(event: Any) -> None:
            if not isinstance(event, ToolCallStarted):
                return
            conversation = event.conversation_id
            if channel.startswith("steer-text"):
                receipt = await steering.steer(conversation, f"steer {SECRET}", author="ann")
            elif channel == "steer-author":
                receipt = await steering.steer(conversation, "steer", author=f"ann {SECRET}")
            elif channel == "follow-up-text":
                receipt = await steering.follow_up(conversation, f"then {SECRET}", author="ann")
            elif channel == "steer-image-name":
                image = ImagePart(PNG, name=f"image-{SECRET}.png")
                receipt = await steering.steer(conversation, ["see", image], author="ann")
            else:  # a text document
                document = DocumentPart(f"doc {SECRET}".encode(), media_type="text/plain")
                receipt = await steering.steer(conversation, ["see", document], author="ann")
            receipts.append(receipt)
            steered.set()

        conversation = await sinks.run(runtime, agent, "hi", model, on_event)
        for receipt in receipts:
            sinks.add(receipt, await steering.status(receipt.input_id))
        late = await steering.steer(conversation, f"late {SECRET}", author=f"bob {SECRET}")
        sinks.add(late, await steering.status(late.input_id))
    assert receipts


@attrs.frozen
class Question:
    question: str


async def _subagents(channel: str, sinks: Sinks) -> None:
    child = Agent("child", "Answer in JSON.", POLICY, Toolkit(), output=Answered)

    def context(question: Question) -> list[ContextItem]:
        return [ContextItem(kind="note", source="s", text=f"context {SECRET}")]

    ask = delegate(
        child,
        name="ask",
        description="Ask the child.",
        parameters=Question,
        context=context if channel == "subagent-context" else None,
        budget=ChildBudget(turns=2, tool_calls=0),
    )
    lead = Agent("lead", "Lead.", POLICY, Toolkit(ask.tool))
    question = f"what of {SECRET}" if channel == "subagent-input" else "what"
    turns = [Turn.tool_calls(("ask", {"question": question}))]
    if channel == "subagent-failure":
        turns.append(Turn.fail(RuntimeError(f"child failed {SECRET}")))
    else:
        answer = f"it is {SECRET}" if channel == "subagent-output" else "it is"
        turns.append(Turn.text(json.dumps({"answer": answer})))
    turns += [Turn.text("done")] * 2
    model = ScriptedModel(turns)
    layer = model.as_layer() + ask.layer() + in_memory_storage() + sinks.telemetry.layer()
    async with open_runtime(layer, agents=[lead], secrets=[SECRET]) as runtime:
        await sinks.run(runtime, lead, "go", model)


class _Host:
    def __init__(self, field: str) -> None:
        self.field = field

    async def compaction_for(self, request: HostRequest) -> CompactionResult:
        await trio.lowlevel.checkpoint()
        facts = (RetainedFact(f"fact {SECRET}"),) if self.field == "facts" else ()
        return CompactionResult(
            request.covers_from,
            request.covers_through,
            f"summary {SECRET}" if self.field == "summary" else "summary",
            "0" * 64 if self.field == "refused-version" else source_digest(request.entries),
            f"host-{SECRET}" if self.field.endswith("version") else "host/1",
            facts,
        )


async def _compaction(channel: str, sinks: Sinks) -> None:
    big = Tool("big", "A big page.", parameters=Note, success=str, readonly=True)

    async def handle(params: Note, call: ToolCallContext) -> str:
        return "x " * 2000

    policy = attrs.evolve(POLICY, context_token_limit=600)
    agent = Agent("reader", "Be brief.", policy, Toolkit(big))
    turns = [Turn.tool_calls(("big", {"note": str(n)})) for n in range(3)]
    if channel == "compaction-model-summary":
        turns.append(Turn.text(f"summary {SECRET}"))
    turns += [Turn.text("done")] * 3
    model = ScriptedModel(turns)
    host = _Host(channel.removeprefix("compaction-host-")) if "host" in channel else None
    compactor = LogCompactor(host=host)
    layer = agent.toolkit.handlers({big: handle}) + model.as_layer() + in_memory_storage()
    layer = layer + Layer.succeed(CompactorService, compactor) + sinks.telemetry.layer()
    async with open_runtime(layer, agents=[agent], secrets=[SECRET]) as runtime:
        await sinks.run(runtime, agent, "go", model)


HOME = StateSlot("home", Note)


async def _state(channel: str, sinks: Sinks) -> None:
    write = Tool("write", "Write.", parameters=Note, success=str)
    agent = Agent("keeper", "Be brief.", POLICY, Toolkit(write))

    async def handlers(context: Context) -> dict[Any, Any]:
        state = context[AgentStateService]

        async def handle(params: Note, call: ToolCallContext) -> str:
            cell = await state.read(HOME, "ann")
            value = Note(f"value {SECRET}")
            if channel == "state-uncertain":
                how: Any = Uncertain.of(call, f"why {SECRET}")
            elif channel == "state-compensation-raises":

                async def compensate() -> None:
                    raise RuntimeError(f"compensation {SECRET}")

                how = Compensatable.of(call, compensate)
            else:
                how = WithRecord.of(call)
            await state.write(HOME, "ann", value, expected_revision=cell.revision, write=how)
            return "ok"

        return {write: handle}

    last = Turn.text("ok")
    if channel == "state-compensation-raises":
        last = Turn.fail(AuthenticationFailed("revoked"))
    model = ScriptedModel([Turn.tool_calls(("write", {"note": "x"})), last])
    storage = observe_runs(AgentStateService).provide_merge(in_memory_storage())
    layer = agent.toolkit.handlers_from(handlers, requires=[AgentStateService])
    layer = (layer + model.as_layer() + sinks.telemetry.layer()).provide_merge(storage)
    async with open_runtime(layer, agents=[agent], secrets=[SECRET]) as runtime:
        await sinks.run(runtime, agent, "go", model)


async def _interactive_approval(channel: str, sinks: Sinks) -> None:
    echo = Tool("echo", "Echo.", parameters=Note, success=str, needs_approval=True)

    async def handle(params: Note, call: ToolCallContext) -> str:
        return "ok"

    agent = Agent("keeper", "Be brief.", POLICY, Toolkit(echo))
    model = ScriptedModel([Turn.tool_calls(("echo", {"note": f"n {SECRET}"})), Turn.text("ok")])
    approval = InteractiveApproval()
    layer = agent.toolkit.handlers({echo: handle}) + model.as_layer() + in_memory_storage()
    layer = layer + approval.layer() + sinks.telemetry.layer()
    updates: list[Any] = []
    async with (
        open_runtime(layer, agents=[agent], secrets=[SECRET]) as runtime,
        trio.open_nursery() as nursery,
    ):
        channel_ = approval.subscribe()

        async def person() -> None:
            async for update in channel_:
                updates.append(update)
                if isinstance(update, ApprovalOpened):
                    approval.answer(
                        update.approval.approval_id,
                        channel.endswith("approve"),
                        reason=f"because {SECRET}",
                        by=f"ann {SECRET}",
                    )

        nursery.start_soon(person)
        await sinks.run(runtime, agent, "go", model)
        nursery.cancel_scope.cancel()
    sinks.add(*updates)
    assert updates


@tool(readonly=True)
async def lookup(key: str) -> str:
    """Look a key up.

    Args:
        key: The key.
    """
    if key == "crash":
        raise RuntimeError(f"crash {SECRET}")
    return f"value {SECRET}" if key == "secret" else "value"


_JOINED = '"CANARY-7f3a9c" + "-SECRET"'  # the secret only once the program runs
PROGRAMS = {
    "code-mode-literal": f'async () => {{ const s = "{SECRET}"; return 1; }}',
    "code-mode-result": f"async () => {_JOINED}",
    "code-mode-console": f"async () => {{ console.log({_JOINED}); return 1; }}",
    "code-mode-console-error": f"async () => {{ console.error({_JOINED}); return 1; }}",
    "code-mode-throw": f"async () => {{ throw new Error({_JOINED}); }}",
    "code-mode-inner-arguments": f"async () => {{ await kv.lookup({{key: {_JOINED}}}); }}",
    "code-mode-inner-result": 'async () => await kv.lookup({key: "secret"})',
    "code-mode-inner-crash": 'async () => { await kv.lookup({key: "crash"}); }',
    "code-mode-escaped": f'async () => "{ESCAPED}"',
    "code-mode-syntax-error": f"async () => {{ {SECRET}( }}",
}


async def _code_mode(channel: str, sinks: Sinks) -> None:
    code = code_mode({"kv": [lookup]}, executor="deno-unisolated")
    agent = Agent("coder", "Use programs.", POLICY, Toolkit(code.tool))
    call = Turn.tool_calls((code.tool.name, {"program": PROGRAMS[channel]}))
    model = ScriptedModel([call, Turn.text("done"), Turn.text("done")])
    layer = code.layer + Toolkit(lookup).handlers() + model.as_layer() + in_memory_storage()
    async with open_runtime(
        layer + sinks.telemetry.layer(), agents=[agent], secrets=[SECRET]
    ) as runtime:
        await sinks.run(runtime, agent, "go", model)


_MCP_SERVER = """
import os, sys
from mcp.server.mcpserver import MCPServer
from mcp_types import ToolAnnotations

TOKEN = os.environ.get("TOKEN") or sys.argv[sys.argv.index("--token") + 1]
if sys.argv[1] == "die":
    sys.stderr.write(f"usage: {sys.argv}\\n")
    sys.stderr.write(f"starting with {TOKEN}\\n")
    sys.stderr.flush()
    sys.exit(3)
server = MCPServer("vault", version="1.0.0")


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def echo(q: str) -> str:
    \"\"\"Echo.\"\"\"
    sys.stderr.write(f"echo {q} {TOKEN}\\n")
    sys.stderr.flush()
    if q == "raise":
        raise ValueError(f"bad {TOKEN}")
    return f"token {TOKEN}" if q == "env" else q


server.run()
"""


@contextmanager
def _sdk_spans(sinks: Sinks) -> Iterator[None]:
    """The MCP SDK's own spans (one per request, under the global tracer provider: the one
    ``Telemetry()`` uses by default) go to the sinks' exporter while the block runs."""
    import mcp.shared._otel as sdk_otel

    before = sdk_otel._tracer
    sdk_otel._tracer = sinks.provider.get_tracer("mcp-python-sdk")
    try:
        yield
    finally:
        sdk_otel._tracer = before


async def _mcp(channel: str, sinks: Sinks) -> None:
    """A stdio server given the secret in its ``env`` (``mcp-*``) or as a ``--token`` argument
    (``mcp-args-*``): it echoes it in a result, an error result, stderr and a usage error."""
    from capabilities.mcp import StdioServer

    script = sinks.tmp_path / "server.py"
    script.write_text(_MCP_SERVER)
    kind = channel.removeprefix("mcp-").removeprefix("args-")
    mode = "die" if kind == "connect-fails" else "serve"
    if channel.startswith("mcp-args-"):
        server = StdioServer(
            sys.executable, [str(script), mode, "--token", SECRET], name="vault", prefix="vault"
        )
    else:
        server = StdioServer(
            sys.executable, [str(script), mode], name="vault", prefix="vault", env={"TOKEN": SECRET}
        )
    await _mcp_run(server, kind, sinks)


async def _mcp_run(server: Any, kind: str, sinks: Sinks) -> None:
    from capabilities.mcp import connect

    sinks.add(server)
    sinks.texts.append(str(server))
    agent = Agent("keeper", "Use it.", POLICY, tool_sources=(server.key,))
    query = {
        "result": "env",
        "error": "raise",
        "arguments": f"a {SECRET}",
        "protocol-error": "protocol-error",
    }
    model = ScriptedModel(
        [Turn.tool_calls(("vault_echo", {"q": query.get(kind, "x")})), Turn.text("done")]
    )
    try:
        with _sdk_spans(sinks):
            async with connect(server) as connection:
                layer = connection.layer() + model.as_layer() + in_memory_storage()
                async with open_runtime(
                    layer + sinks.telemetry.layer(), agents=[agent], secrets=[SECRET]
                ) as runtime:
                    await sinks.run(runtime, agent, "go", model)
                sinks.add(connection, connection.lost)
                with sinks.telemetry.activate():  # the connection's own API, outside a run
                    try:
                        await connection.list_resources()
                    except Exception as exc:
                        sinks.caught(exc)
    except Exception as exc:
        sinks.caught(exc)
        assert kind == "connect-fails"
    sdk = [span for span in sinks.exporter.get_finished_spans() if span.name.startswith("MCP send")]
    assert sdk, "the SDK made no span of its own"


async def _mcp_http_answer(stream: trio.SocketStream) -> None:
    """A streamable HTTP MCP server (plain JSON answers) that says back what it was sent: the
    request's target and Authorization header, in a tool's result, a tool's error result, and
    a protocol error (to every request past the handshake when the target asks for it)."""
    buffer = b""
    while True:
        while b"\r\n\r\n" not in buffer:
            data = await stream.receive_some(65536)
            if not data:
                return
            buffer += data
        head, buffer = buffer.split(b"\r\n\r\n", 1)
        request_line, *lines = head.decode("latin-1").split("\r\n")
        headers = {k.lower(): v.strip() for k, v in (line.split(":", 1) for line in lines)}
        length = int(headers.get("content-length", "0"))
        while len(buffer) < length:
            buffer += await stream.receive_some(65536)
        body, buffer = buffer[:length], buffer[length:]
        request = json.loads(body) if body else {}
        if "id" not in request:
            await stream.send_all(b"HTTP/1.1 202 Accepted\r\nContent-Length: 0\r\n\r\n")
            continue
        target = request_line.split(" ")[1]
        said = f"{headers.get('authorization')} at {target}"
        method, params = request["method"], request.get("params") or {}
        answer: dict[str, Any] = {"jsonrpc": "2.0", "id": request["id"]}
        if method == "initialize" and "die" not in target:
            answer["result"] = {
                "protocolVersion": params["protocolVersion"],
                "capabilities": {"tools": {}, "resources": {}},
                "serverInfo": {"name": "vault", "version": "1"},
            }
        elif method == "tools/list":
            schema = {"type": "object", "properties": {"q": {"type": "string"}}}
            answer["result"] = {"tools": [{"name": "echo", "inputSchema": schema}]}
        elif method == "tools/call" and params["arguments"]["q"] != "protocol-error":
            error = params["arguments"]["q"] == "raise"
            text = [{"type": "text", "text": f"{'refused' if error else 'token'} {said}"}]
            answer["result"] = {"isError": error, "content": text}
        else:
            answer["error"] = {"code": -32600, "message": f"refused {said}"}
        data = json.dumps(answer).encode()
        await stream.send_all(
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
            + f"Content-Length: {len(data)}\r\n\r\n".encode()
            + data
        )


async def _mcp_http(channel: str, sinks: Sinks) -> None:
    """A streamable HTTP server given the secret in a header and in the URL's query."""
    from capabilities.mcp import HttpServer

    kind = channel.removeprefix("mcp-http-")
    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(
            partial(trio.serve_tcp, _mcp_http_answer, 0, host="127.0.0.1")
        )
        port = listeners[0].socket.getsockname()[1]
        path = "die" if kind == "connect-fails" else "mcp"
        server = HttpServer(
            f"http://127.0.0.1:{port}/{path}?api_key={SECRET}",
            headers={"Authorization": f"Bearer {SECRET}"},
            name="vault",
            prefix="vault",
        )
        await _mcp_run(server, kind, sinks)
        nursery.cancel_scope.cancel()


async def _cassette(channel: str, sinks: Sinks) -> None:
    echo = Tool("echo", "Echo.", parameters=Note, success=str, readonly=True)

    async def handle(params: Note, call: ToolCallContext) -> str:
        return f"result {SECRET}"

    agent = Agent("keeper", "Be brief.", POLICY, Toolkit(echo))
    arguments = '{"note": "' + ESCAPED + '"}'
    turns = [
        Turn.raw(
            ToolCallPart(f"id-{SECRET}", "echo", arguments),
            FinishPart("tool-calls", Usage.of(1, 1)),
        )
    ]
    if channel == "cassette-defect":
        turns.append(Turn.fail(RuntimeError(f"defect {SECRET}")))
    elif channel == "cassette-error":
        turns.append(Turn.fail(RateLimited(f"limited {SECRET}")))
    else:
        turns.append(
            Turn.raw(
                TextStartPart("t"),
                TextDeltaPart("t", "a " + SECRET[:9]),
                TextDeltaPart("t", SECRET[9:] + " b"),
                TextEndPart("t"),
                FinishPart("stop", Usage.of(1, 1)),
            )
        )
    model = ScriptedModel(turns)
    cassette = sinks.tmp_path / "cassette.jsonl"
    layer = record(model.as_layer(), cassette, secrets=[SECRET])
    layer = layer + agent.toolkit.handlers({echo: handle}) + sinks.telemetry.layer()
    text: list[str | MediaPart] = [
        f"see {SECRET}",
        ImagePart(PNG, name=f"image-{SECRET}.png"),
        DocumentPart(f"doc {SECRET}".encode(), media_type="text/plain", name=f"d-{SECRET}"),
    ]
    async with open_runtime(layer, agents=[agent], secrets=[SECRET]) as runtime:
        result = await runtime.run(agent, text)
        sinks.add(result)
    assert cassette.exists()


@asynccontextmanager
async def _echoing_server() -> AsyncIterator[str]:
    """A stand-in provider that answers every request with HTTP 401 and a body quoting the
    request's first line and headers (the API key among them)."""

    async def answer(stream: trio.SocketStream) -> None:
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = await stream.receive_some(65536)
            if not chunk:
                return
            data += chunk
        head = data.partition(b"\r\n\r\n")[0].decode("latin-1")
        message = {"error": {"message": f"bad key: {head}", "type": "invalid_request_error"}}
        body = json.dumps(message).encode()
        await stream.send_all(
            b"HTTP/1.1 401 Unauthorized\r\ncontent-type: application/json\r\n"
            + f"content-length: {len(body)}\r\nconnection: close\r\n\r\n".encode()
            + body
        )
        await stream.aclose()

    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(partial(trio.serve_tcp, answer, 0, host="127.0.0.1"))
        yield f"http://127.0.0.1:{listeners[0].socket.getsockname()[1]}"
        nursery.cancel_scope.cancel()


async def _provider(channel: str, sinks: Sinks) -> None:
    from effectagent.providers import model_layer

    name = channel.removeprefix("provider-error-")
    models = {
        "openai-compatible": "openai-compatible:m",
        "openai": "openai:gpt-4.1",
        "anthropic": "anthropic:claude-sonnet-4-5",
        "gemini": "gemini:gemini-2.5-flash",
    }
    agent = Agent("keeper", "Be brief.", POLICY)
    async with _echoing_server() as base:
        url = base + "/v1" if name.startswith("openai") else base
        layer = model_layer(models[name], base_url=url, api_key=SECRET)
        layer = layer + in_memory_storage() + sinks.telemetry.layer()
        async with open_runtime(layer, agents=[agent]) as runtime:  # the adapter's own scrub
            await sinks.run(runtime, agent, "hi")


async def _sandbox(channel: str, sinks: Sinks) -> None:
    from sandbox import UNLIMITED, LocalProcessSandbox, SandboxLimits, SandboxRequest
    from sandbox import run as run_command

    limits = SandboxLimits(memory_bytes=UNLIMITED, max_processes=UNLIMITED)
    shell = Tool("shell", "Run a command.", parameters=Note, success=str, readonly=True)

    async def handle(params: Note, call: ToolCallContext) -> str:
        program = "sh" if channel == "sandbox-command" else str(sinks.tmp_path / f"bin-{SECRET}")
        script = f"echo out {SECRET}; echo err {SECRET} >&2; exit 3"
        request = SandboxRequest(
            program,
            ("-c", script),
            network="host",
            limits=limits,
            env={"TOKEN": SECRET},
            env_allowlist=("TOKEN",),
            stdin=SECRET.encode(),
        )
        ran = await run_command(LocalProcessSandbox(), request)
        return ran.stdout.decode() + ran.stderr.decode()

    agent = Agent("keeper", "Be brief.", POLICY, Toolkit(shell))
    model = ScriptedModel([Turn.tool_calls(("shell", {"note": "x"})), Turn.text("done")])
    layer = agent.toolkit.handlers({shell: handle}) + model.as_layer() + in_memory_storage()
    async with open_runtime(
        layer + sinks.telemetry.layer(), agents=[agent], secrets=[SECRET]
    ) as runtime:
        await sinks.run(runtime, agent, "go", model)
    assert [span for span in sinks.exporter.get_finished_spans() if span.name.startswith("sandbox")]


CAPABILITY_CHANNELS: dict[str, Callable[[str, Sinks], Awaitable[None]]] = {
    "sqlite": _engine,
    "steer-text": _steering,
    "steer-text-sqlite": _steering,
    "steer-author": _steering,
    "steer-document": _steering,
    "steer-image-name": _steering,
    "follow-up-text": _steering,
    "subagent-input": _subagents,
    "subagent-output": _subagents,
    "subagent-context": _subagents,
    "subagent-failure": _subagents,
    "compaction-model-summary": _compaction,
    "compaction-host-summary": _compaction,
    "compaction-host-facts": _compaction,
    "compaction-host-version": _compaction,
    "compaction-host-refused-version": _compaction,
    "state-value": _state,
    "state-uncertain": _state,
    "state-compensation-raises": _state,
    "interactive-approval-approve": _interactive_approval,
    "interactive-approval-deny": _interactive_approval,
    "cassette-text": _cassette,
    "sandbox-command": _sandbox,
    "sandbox-command-not-found": _sandbox,
    "cassette-defect": _cassette,
    "cassette-error": _cassette,
    **dict.fromkeys(PROGRAMS, _code_mode),
    **dict.fromkeys(["mcp-result", "mcp-error", "mcp-arguments", "mcp-connect-fails"], _mcp),
    **dict.fromkeys(["mcp-args-result", "mcp-args-error", "mcp-args-connect-fails"], _mcp),
    **dict.fromkeys(
        [
            "mcp-http-result",
            "mcp-http-error",
            "mcp-http-protocol-error",
            "mcp-http-connect-fails",
        ],
        _mcp_http,
    ),
    **dict.fromkeys(
        [
            "provider-error-openai-compatible",
            "provider-error-openai",
            "provider-error-anthropic",
            "provider-error-gemini",
        ],
        _provider,
    ),
}

#: Channels that talk to real processes or sockets: on the real clock.
#: And SQLite: its work is done in threads, which an autojumping clock does not wait for.
_REAL_CLOCK = ("code-mode", "mcp", "provider", "sandbox", "sqlite", "steer-text-sqlite")


@pytest.mark.parametrize(
    "channel",
    sorted(CAPABILITY_CHANNELS),
)
def test_a_secret_put_in_a_capability_channel_reaches_no_sink(channel: str, tmp_path: Path) -> None:
    sinks = Sinks(tmp_path)

    async def main() -> None:
        with _captured_logs(sinks):
            await CAPABILITY_CHANNELS[channel](channel, sinks)

    clock = None
    if not channel.startswith(_REAL_CLOCK):
        clock = trio.testing.MockClock(autojump_threshold=0)
    trio.run(main, clock=clock)
    assert sinks.texts, "the scenario observed nothing"
    assert sinks.leaks() == []


def test_a_runs_requests_carry_what_the_model_was_sent() -> None:
    """The sweep's view of model requests is real: a request holds the user's text."""
    model = ScriptedModel([Turn.text("done")])
    agent = Agent("keeper", "Be brief.", POLICY)

    async def main() -> list[ModelRequest]:
        async with open_runtime(model.as_layer(), agents=[agent], secrets=[SECRET]) as runtime:
            await runtime.run(agent, f"keep {SECRET}")
        return list(model.requests)

    (request,) = trio.run(main)
    assert "keep [REDACTED]" in repr(request)


# ---- the durable queue: what a submission keeps until it is settled -------------------------


def test_a_secret_in_a_durable_submission_reaches_no_byte_of_the_database(tmp_path: Path) -> None:
    from capabilities.durable import DurableQueue
    from capabilities.storage import open_database

    url = f"https://images.example/cat.png?key={SECRET}"
    text: list[str | MediaPart] = [
        f"text {SECRET}",
        ImagePart(PNG, name=f"image-{SECRET}.png"),
        ImagePart(url=url, media_type="image/png"),
        DocumentPart(f"doc {SECRET}".encode(), media_type="text/plain", name=f"doc-{SECRET}"),
    ]
    seen: list[str] = []

    async def main() -> None:
        async with open_database(tmp_path / "queue.db") as database:
            queue = DurableQueue(database, secrets=[SECRET])
            options: dict[str, Any] = {"conversation_id": "c1", "principal": "ann"}
            receipt = await queue.submit("keeper", text, idempotency_key="k1", **options)
            seen.append(repr(receipt))
            try:
                await queue.submit("keeper", "other", idempotency_key="k1", **options)
            except Exception as exc:
                seen.extend(_exception_texts(exc))
            seen.append(repr(await queue.submissions("c1")))
            seen.append(repr(await queue.explain(receipt.submission_id)))

    trio.run(main)
    files = [p.read_bytes().decode("latin-1") for p in tmp_path.rglob("*") if p.is_file()]
    assert any("[REDACTED]" in f for f in files)
    assert [_around(t) for t in [*seen, *files] if SECRET in t] == []


# ---- PostgreSQL: every row of every table --------------------------------------------------


def _every_row(url: str, schema: str) -> list[str]:
    import psycopg
    from psycopg import sql

    rows: list[str] = []
    with psycopg.connect(url, autocommit=True) as connection:
        tables = connection.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = %s",
            (schema,),
        ).fetchall()
        for (table,) in tables:
            query = sql.SQL("SELECT * FROM {}.{}").format(
                sql.Identifier(schema), sql.Identifier(table)
            )
            for row in connection.execute(query):
                rows.append(repr(row))
                rows += [
                    bytes(v).decode("latin-1") for v in row if isinstance(v, bytes | memoryview)
                ]
    return rows


def test_a_secret_reaches_no_postgresql_row(
    postgres_schema: tuple[str, str], tmp_path: Path
) -> None:
    from capabilities import postgres_storage

    url, schema = postgres_schema
    echo = Tool("echo", "Echo.", parameters=Note, success=str, failure=Refused)
    steered = trio.Event()

    async def handle(params: Note, call: ToolCallContext) -> str:
        await steered.wait()
        await call.progress({"status": f"working with {SECRET}"})
        return f"result {SECRET}"

    agent = Agent("keeper", "Be brief.", POLICY, Toolkit(echo))
    model = ScriptedModel(
        [
            Turn.tool_calls(("echo", {"note": f"note {SECRET}"})),
            Turn.text(f"done {SECRET}"),
            Turn.text("again"),
        ]
    )
    sinks = Sinks(tmp_path)

    async def main() -> None:
        layer = agent.toolkit.handlers({echo: handle}) + model.as_layer()
        layer = layer + postgres_storage(url, schema=schema)
        async with open_runtime(layer, agents=[agent], secrets=[SECRET]) as runtime:
            steering = runtime.context[SteeringService]

            async def on_event(event: Any) -> None:
                if isinstance(event, ToolCallStarted):
                    conversation = event.conversation_id
                    document = DocumentPart(f"doc {SECRET}".encode(), media_type="text/plain")
                    await steering.steer(conversation, [f"steer {SECRET}", document], author="a")
                    steered.set()

            await sinks.run(runtime, agent, f"keep {SECRET}", model, on_event)

    with _captured_logs(sinks):
        trio.run(main)
    rows = _every_row(url, schema)
    assert any("[REDACTED]" in row for row in rows)  # the rows read hold what was redacted
    assert [_around(row) for row in rows if SECRET in row] == []
    assert sinks.leaks() == []


@tool(readonly=True)
async def chart(title: str) -> list[str | ImagePart | DocumentPart]:
    """Draw a chart.

    Args:
        title: Its title.
    """
    image = ImagePart(PNG, name=f"chart-{SECRET}.png")
    document = DocumentPart(f"data {SECRET}".encode(), media_type="text/plain", name="data.txt")
    return [f"the chart of {SECRET}", image, document]


async def test_a_secret_in_media_a_tool_returns_reaches_no_sink(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    agent = Agent("keeper", "Be brief.", POLICY, Toolkit(chart))
    model = ScriptedModel([Turn.tool_calls(("chart", {"title": "t"})), Turn.text("done")])
    sinks = Sinks(tmp_path)
    layer = Toolkit(chart).handlers() + model.as_layer() + in_memory_storage()
    with _captured_logs(sinks):
        async with open_runtime(
            layer + sinks.telemetry.layer(), agents=[agent], secrets=[SECRET]
        ) as runtime:
            await sinks.run(runtime, agent, "go", model)
    assert any("chart-[REDACTED].png" in text for text in sinks.requests)  # it was sent
    assert sinks.leaks() == []
