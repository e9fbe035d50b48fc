"""Events and records are made by keyword only, and a run makes its events through ``RunIO.emit``,
which sets the header (run, conversation, agent, sequence number, time) and takes the event's own
fields by keyword — type-checked per class by its overloads, which must say exactly what each
class declares (mypy's own judgement of emit calls is in ``tests/typing/cases/events.py``).

Why keyword only: a wide positional call swaps fields of one type without a word —
``ToolCallPrepared(conversation_id, run_id, turn, tool_name, tool_call_id, ...)`` would record
the tool's name as the call's ID.
"""

from __future__ import annotations

import inspect
import re
import typing
from typing import Any, get_args

import attrs
import pytest

from effectagent.core import (
    ContextItem,
    Event,
    EventBase,
    ModelStarted,
    Record,
    RunCompleted,
    RunFailed,
    RunInterrupted,
    RunSuspended,
    SecretRedactor,
    TextDelta,
    ToolCallDeclared,
    ToolCallFailed,
    ToolCallSucceeded,
    ToolRejected,
    ToolSuccess,
    TurnStarted,
    UsageTotals,
)
from effectagent.engine import InMemoryConversationLog
from effectagent.engine._handover import RunReducer
from effectagent.engine._io import RunIO


class _NoRun:
    """A RunIO's owner that nothing interrupts here."""

    def interrupt(self) -> None:
        return None


HEADER = ("run_id", "conversation_id", "agent", "seq", "at")
EVENTS: list[type[EventBase]] = list(get_args(Event))
RECORDS: list[type[Any]] = list(get_args(Record))


class _Collected:
    """An event sink that keeps what it is fed."""

    def __init__(self) -> None:
        self.events: list[EventBase] = []

    def feed(self, event: EventBase) -> bool:
        self.events.append(event)
        return True


def _io(sink: _Collected | RunReducer) -> RunIO:
    return RunIO(
        run_id="run_1",
        conversation_id="conv_1",
        agent_name="helper",
        conversation_log=InMemoryConversationLog(),
        redactor=SecretRedactor(),
        events=sink,
        owner=_NoRun(),
    )


@pytest.mark.parametrize(
    "cls", [EventBase, *EVENTS, *RECORDS, ContextItem], ids=lambda cls: cls.__name__
)
def test_every_event_and_record_is_made_by_keyword_only(cls: type[Any]) -> None:
    """Every parameter is keyword-only (the header's too), and a positional call is refused."""
    parameters = inspect.signature(cls).parameters.values()
    assert [p.name for p in parameters] == [f.name for f in attrs.fields(cls)]
    assert {p.kind for p in parameters} == {inspect.Parameter.KEYWORD_ONLY}
    with pytest.raises(TypeError, match="positional"):
        cls(*[object()] * len(parameters))


def test_the_header_comes_first_in_every_event() -> None:
    for cls in EVENTS:
        assert tuple(f.name for f in attrs.fields(cls))[: len(HEADER)] == HEADER, cls


def test_emit_sets_the_header_and_takes_the_events_own_fields_by_keyword() -> None:
    sink = _Collected()
    io = _io(sink)
    io.emit(TurnStarted, turn=3)
    io.emit(TextDelta, turn=3, text="Oslo")
    started, delta = sink.events
    assert isinstance(started, TurnStarted)
    assert isinstance(delta, TextDelta)
    assert (started.run_id, started.conversation_id, started.agent) == ("run_1", "conv_1", "helper")
    assert (started.seq, started.turn, started.grace) == (1, 3, False)  # grace: its default
    assert (delta.seq, delta.turn, delta.text) == (2, 3, "Oslo")
    assert started.at <= delta.at


def test_emit_refuses_positional_unknown_and_missing_fields() -> None:
    io = _io(_Collected())
    with pytest.raises(TypeError, match="positional"):
        io.emit(ModelStarted, 3)  # type: ignore[call-overload]
    with pytest.raises(TypeError, match="unexpected keyword argument 'trun'"):
        io.emit(ModelStarted, trun=3)  # type: ignore[call-overload]
    with pytest.raises(TypeError, match="missing 1 required keyword-only argument: 'turn'"):
        io.emit(ModelStarted)  # type: ignore[call-overload]
    with pytest.raises(TypeError, match="multiple values for keyword argument 'seq'"):
        io.emit(ModelStarted, turn=1, seq=9)  # type: ignore[call-overload]


def _overloads() -> dict[str, inspect.Signature]:
    """Each overload of ``RunIO.emit`` by the event class it is for."""
    found: dict[str, inspect.Signature] = {}
    for overload in typing.get_overloads(RunIO.emit):
        signature = inspect.signature(overload)
        named = re.fullmatch(r"type\[(\w+)\]", signature.parameters["cls"].annotation)
        assert named is not None, signature
        found[named[1]] = signature
    return found


def test_emit_has_one_overload_per_event_class() -> None:
    assert sorted(_overloads()) == sorted(cls.__name__ for cls in EVENTS)


@pytest.mark.parametrize("cls", EVENTS, ids=lambda cls: cls.__name__)
def test_each_overload_says_what_its_class_declares(cls: type[EventBase]) -> None:
    """The overload's keyword-only parameters are the class's own fields — names, order, types as
    written, which have defaults — and it returns the class: mypy judges emit calls by them."""
    signature = _overloads()[cls.__name__]
    _self, cls_, *own = signature.parameters.values()
    assert cls_.kind is inspect.Parameter.POSITIONAL_ONLY
    # The terminal events are returned (their callers keep them); no other event is.
    terminal = cls in (RunCompleted, RunFailed, RunInterrupted, RunSuspended)
    assert signature.return_annotation == (cls.__name__ if terminal else "None")
    declared = [f for f in attrs.fields(cls) if f.name not in HEADER]
    assert {p.kind for p in own} <= {inspect.Parameter.KEYWORD_ONLY}
    assert [(p.name, p.annotation, p.default is not p.empty) for p in own] == [
        (f.name, f.type, f.default is not attrs.NOTHING) for f in declared
    ]


def test_a_reducer_takes_the_fields_of_the_events_it_does_not_keep_as_it_would_the_events() -> None:
    """``runtime.run``'s reducer keeps only the terminal event: the others' fields are taken
    without building them. It reduces to the result that reducing every built event gives —
    outcomes in declaration order, the count of events — and the terminal event has the number
    it has when every event is built (a collecting sink sees the same numbers)."""
    reducer, collected = RunReducer(), _Collected()
    outcome = ToolSuccess(tool_call_id="call_1", tool_name="ping", result=1)
    failed = ToolRejected(tool_call_id="call_2", tool_name="ping", reason="no")
    terminals = []
    for io in (_io(reducer), _io(collected)):
        io.emit(TurnStarted, turn=1)
        for call in ("call_1", "call_2"):
            io.emit(ToolCallDeclared, turn=1, tool_call_id=call, tool_name="ping", arguments={})
        io.emit(ToolCallFailed, turn=1, tool_call_id="call_2", tool_name="ping", outcome=failed)
        held = io.hold_events()  # a hold's events are built: they may be dropped or handed over
        io.emit(TextDelta, turn=1, text="Oslo")
        io.end_hold(held, hand_over=True)
        io.emit(ToolCallSucceeded, turn=1, tool_call_id="call_1", tool_name="ping", outcome=outcome)
        terminals.append(io.emit(RunInterrupted, reason="stop", usage=UsageTotals()))
    assert [t.seq for t in terminals] == [7, 7]
    assert len(collected.events) == 7
    assert reducer.terminal is terminals[0]
    fed = RunReducer()
    for event in collected.events:
        fed.feed(event)
    built = fed.result()
    taken = reducer.result()
    assert (taken.outcomes, taken.events) == ((outcome, failed), 7)
    assert attrs.evolve(taken, run_id="") == attrs.evolve(built, run_id="")
