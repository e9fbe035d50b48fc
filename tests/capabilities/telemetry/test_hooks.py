"""The effect core's tracing hook (``trace_span``) and the span starter the telemetry layer installs
for it: a no-op without a starter, scoped by context, and — with the layer's starter — spans under
the current one, bounded, failed with an exception's type only, content only when asked for and
redacted."""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import AbstractContextManager
from typing import Any

import pytest
import trio
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from capabilities.telemetry import Telemetry
from capabilities.telemetry._listener import TELEMETRY_VERSION
from effectagent.core import SecretRedactor
from effectagent.effect import AttributeValue, SpanHandle, trace_span, use_span_starter
from effectagent.effect import SpanKind as HookKind
from effectagent.effect._trace import tracing_active
from tests.capabilities.telemetry.spans import (
    CANARY,
    attributes,
    by_name,
    parent_id,
    span_id,
    texts,
)


def test_without_a_starter_a_span_is_a_shared_no_op() -> None:
    assert not tracing_active()
    block = trace_span("work", {"n": 1})
    assert block is trace_span("other")  # nothing is allocated
    with block as span:
        assert span.recording is False
        span.set_attribute("n", 2)
        span.set_content("arguments", {"password": CANARY})
        span.fail("Boom")
    with pytest.raises(ValueError), trace_span("work"):  # an exception goes through
        raise ValueError("boom")


class _Recorder:
    """A span starter that only notes what it was asked to start."""

    def __init__(self) -> None:
        self.started: list[str] = []

    def __call__(
        self, name: str, attributes: Mapping[str, AttributeValue], kind: HookKind, current: bool
    ) -> AbstractContextManager[SpanHandle]:
        self.started.append(name)
        with use_span_starter(None):
            return trace_span(name)  # the no-op


async def test_a_starter_is_scoped_by_context_and_reaches_tasks_started_inside() -> None:
    recorder = _Recorder()
    outside: list[bool] = []

    async def traced(name: str) -> None:
        outside.append(tracing_active())
        with trace_span(name):
            await trio.lowlevel.checkpoint()

    async with trio.open_nursery() as before:
        with use_span_starter(recorder):
            assert tracing_active()
            async with trio.open_nursery() as inside:
                inside.start_soon(traced, "in a task started inside")
            with use_span_starter(None):  # switched off for a block
                await traced("switched off")
            await traced("inside again")
        before.start_soon(traced, "in a task started after")
    assert not tracing_active()
    assert recorder.started == ["in a task started inside", "inside again"]
    assert outside == [True, False, True, False]


def test_activate_bounds_what_a_span_carries(
    exported: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    provider, exporter = exported
    telemetry = Telemetry(tracer_provider=provider, max_attribute_length=16)
    given: dict[str, AttributeValue] = {"effectagent.long": "x" * 100, "effectagent.flag": True}
    given["effectagent.odd"] = ["a list"]  # type: ignore[assignment]  # not a value: dropped
    given.update({f"effectagent.n{i}": i for i in range(80)})
    tracer = provider.get_tracer("test")
    with tracer.start_as_current_span("caller") as caller, telemetry.activate():
        with trace_span("mcp request " + "y" * 40, given, kind="client") as span:
            assert span.recording
            inner = tracer.start_span("inside")  # made while the hook's span is current
            inner.end()
            span.set_attribute("effectagent.late", 1)  # past the cap: dropped
        with trace_span("not current", current=False):
            beside = tracer.start_span("beside")
            beside.end()
    assert not tracing_active()
    spans = exporter.get_finished_spans()
    (hooked,) = by_name(spans, "mcp request")
    assert hooked.name == "mcp request yyy…"
    assert hooked.kind is SpanKind.CLIENT
    assert parent_id(hooked) == caller.get_span_context().span_id
    (inside,) = by_name(spans, "inside")
    assert parent_id(inside) == span_id(hooked)
    (not_current,) = by_name(spans, "not current")
    (beside_span,) = by_name(spans, "beside")
    assert parent_id(beside_span) == caller.get_span_context().span_id
    assert parent_id(not_current) == caller.get_span_context().span_id
    carried = attributes(hooked)
    assert carried["effectagent.operation.version"] == TELEMETRY_VERSION  # not cut: it is ours
    assert len(carried) == 48  # MAX_HOOK_ATTRIBUTES
    assert "effectagent.late" not in carried
    assert "effectagent.odd" not in carried
    assert carried["effectagent.n0"] == 0
    assert carried["effectagent.long"] == "x" * 15 + "…"
    assert carried["effectagent.flag"] is True


def _fail_then_raise(span: SpanHandle) -> None:
    span.fail("limit:wall_clock", "ran out of time")
    raise ValueError(CANARY)


def test_an_exception_fails_the_span_with_its_type_never_its_message(
    exported: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    provider, exporter = exported
    telemetry = Telemetry(tracer_provider=provider)
    with telemetry.activate():
        with pytest.raises(ValueError), trace_span("plain"):
            raise ValueError(f"the password is {CANARY}")
        with pytest.raises(ValueError), trace_span("explained") as span:
            _fail_then_raise(span)
    spans = exporter.get_finished_spans()
    (plain,) = by_name(spans, "plain")
    assert attributes(plain)["error.type"] == "ValueError"
    assert plain.status.status_code is StatusCode.ERROR
    assert plain.status.description == "ValueError"
    (explained,) = by_name(spans, "explained")
    assert attributes(explained)["error.type"] == "limit:wall_clock"  # the caller's reason stays
    assert explained.status.description == "limit:wall_clock"  # its description is content
    assert not [text for span in spans for text in texts(span) if CANARY in text]


@pytest.mark.parametrize(
    ("include_content", "redacting", "kept"),
    [(False, False, False), (False, True, False), (True, False, False), (True, True, True)],
)
def test_content_is_kept_only_when_asked_for_and_redactable(
    exported: tuple[TracerProvider, InMemorySpanExporter],
    include_content: bool,
    redacting: bool,
    kept: bool,
) -> None:
    provider, exporter = exported
    telemetry = Telemetry(
        tracer_provider=provider,
        include_content=include_content,
        redactor=SecretRedactor([CANARY]) if redacting else None,
        max_content_length=40,
    )
    with telemetry.activate(), trace_span("command") as span:
        span.set_content("process.command_args", ["--password", CANARY, "z" * 100])
        span.set_content("mcp.resource.uri", f"notes://{CANARY}")
    (command,) = exporter.get_finished_spans()
    carried = attributes(command)
    assert not [text for text in texts(command) if CANARY in text]
    if kept:
        assert carried["process.command_args"].startswith('["--password", "[REDACTED]", "zzz')
        assert len(carried["process.command_args"]) == 40
        assert carried["mcp.resource.uri"] == "notes://[REDACTED]"
    else:
        assert "process.command_args" not in carried
        assert "mcp.resource.uri" not in carried


def test_a_redactor_must_redact() -> None:
    with pytest.raises(TypeError, match="redactor must be a Redactor"):
        Telemetry(redactor=object())  # type: ignore[arg-type]


class _Broken(trace.Tracer):
    """A tracer that cannot start a span (an exporter bug, say)."""

    def start_span(self, *args: Any, **kwargs: Any) -> trace.Span:
        raise RuntimeError(f"broken {CANARY}")

    def start_as_current_span(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("broken")


class _BrokenProvider(trace.TracerProvider):
    def get_tracer(self, *args: Any, **kwargs: Any) -> trace.Tracer:
        return _Broken()


class _FailingRedactor:
    """A Redactor whose redaction raises."""

    active = True

    def redact_text(self, text: str) -> str:
        raise ValueError(CANARY)

    def redact(self, value: Any) -> Any:
        raise ValueError(CANARY)

    def partial_secret_suffix(self, text: str) -> int:
        return len(text)


def test_a_broken_tracer_or_redactor_changes_nothing_of_the_work(
    exported: tuple[TracerProvider, InMemorySpanExporter], caplog: pytest.LogCaptureFixture
) -> None:
    provider, exporter = exported
    broken = Telemetry(tracer_provider=_BrokenProvider())
    with broken.activate(), trace_span("work", {"n": 1}) as span:
        assert span.recording is False  # nothing more is recorded
        span.set_attribute("n", 2)
        done = "the work went on"
    assert done == "the work went on"
    redacting = Telemetry(
        tracer_provider=provider, include_content=True, redactor=_FailingRedactor()
    )
    with redacting.activate(), trace_span(f"command {CANARY}") as span:
        # The name cannot be redacted: the span is dropped as it starts, and records nothing.
        span.set_content("process.command_args", ["--password", CANARY])
        span.set_attribute("after", 1)
        done = "the work went on"
    assert done == "the work went on"
    assert exporter.get_finished_spans() == ()
    lines = [r.getMessage() for r in caplog.records if "tracing hook failed" in r.getMessage()]
    assert lines == ["tracing hook failed: RuntimeError", "tracing hook failed: ValueError"]
    content_only = Telemetry(tracer_provider=provider, include_content=True)
    failing = Telemetry(tracer_provider=provider, redactor=_FailingRedactor())
    with content_only.activate(), trace_span("command") as span:
        span.set_attribute("after", 1)
    with failing.activate(), trace_span("command"):
        pass  # the name is redacted even with content off: the span is dropped
    (command,) = exporter.get_finished_spans()
    assert attributes(command)["after"] == 1


@pytest.mark.parametrize("include_content", [False, True])
def test_with_a_redactor_a_spans_name_and_attributes_are_redacted_too(
    exported: tuple[TracerProvider, InMemorySpanExporter], include_content: bool
) -> None:
    provider, exporter = exported
    telemetry = Telemetry(
        tracer_provider=provider,
        include_content=include_content,
        redactor=SecretRedactor([CANARY]),
    )
    with (
        telemetry.activate(),
        trace_span(f"sandbox.command {CANARY}", {"server.identity": f"srv-{CANARY}"}) as span,
    ):
        span.set_attribute("process.executable.name", f"tool-{CANARY}")
        span.set_attribute("n", 3)
    (command,) = exporter.get_finished_spans()
    assert command.name == "sandbox.command [REDACTED]"
    carried = attributes(command)
    assert carried["server.identity"] == "srv-[REDACTED]"
    assert carried["process.executable.name"] == "tool-[REDACTED]"
    assert carried["n"] == 3
    assert not [text for text in texts(command) if CANARY in text]


def test_without_a_redactor_names_and_attributes_are_kept_as_given(
    exported: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    provider, exporter = exported
    with Telemetry(tracer_provider=provider).activate(), trace_span("sandbox.command echo"):
        pass
    (command,) = exporter.get_finished_spans()
    assert command.name == "sandbox.command echo"
