"""trace_span / use_span_starter: a starter is installed for its block only."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping

from effectagent.effect import AttributeValue, SpanHandle, SpanKind, trace_span, use_span_starter


class _Recorder:
    def __init__(self) -> None:
        self.names: list[str] = []

    def __call__(
        self, name: str, attributes: Mapping[str, AttributeValue], kind: SpanKind, current: bool
    ) -> contextlib.AbstractContextManager[SpanHandle]:
        self.names.append(name)
        return contextlib.nullcontext(_NoHandle())


class _NoHandle:
    recording = True

    def set_attribute(self, name: str, value: AttributeValue) -> None:
        pass

    def set_content(self, name: str, value: object) -> None:
        pass

    def fail(self, error_type: str, description: str = "") -> None:
        pass


def test_a_starter_is_installed_for_its_block_only() -> None:
    recorder = _Recorder()
    with use_span_starter(recorder), trace_span("inside"):
        pass
    with trace_span("outside"):
        pass
    assert recorder.names == ["inside"]


def test_one_manager_entered_again_inside_its_block_is_gone_after_both() -> None:
    """Each exit gives back the starter before its own entry: the outer block's exit does not
    leave the starter installed for the rest of the program."""
    recorder = _Recorder()
    installed = use_span_starter(recorder)
    with installed:
        with installed, trace_span("inner"):
            pass
        with trace_span("outer"):
            pass
    with trace_span("after"):
        pass
    assert recorder.names == ["inner", "outer"]
