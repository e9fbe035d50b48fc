"""The batch harness and its strategy at their edges: an empty batch keeps the README's property,
and what cannot be drawn or run is refused when it is given, with an error naming it."""

from __future__ import annotations

import math
import re
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import attrs
import pytest
import trio
from hypothesis import find, given, settings
from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument, NoSuchExample

from effectagent import TaggedError, Tool, ToolCallContext, Toolkit
from effectagent.effect import Context, Layer, ServiceKey
from effectagent.engine import _call
from effectagent.testing import (
    PROBE_TOOLKIT,
    BatchSpec,
    CallSpec,
    batches,
    fault_plans,
    run_batch_sync,
)

ECHO = CallSpec("call_1", "probe_echo", '{"text": "hi"}')


def assert_the_readme_property(batch: BatchSpec, permits: int) -> None:
    """The property the README and the testing guide state for every generated batch."""
    report = run_batch_sync(batch, tool_concurrency=permits)
    assert report.settled_ids == batch.ids
    assert report.results_seen_by_model == batch.ids
    assert report.max_concurrency <= permits
    assert report.unexpected() == ()
    assert report.undecoded == ()
    assert report.live_handlers == 0


# ---- an empty batch -----------------------------------------------------------------------------


def test_an_empty_batch_is_answered_and_the_model_saw_no_results() -> None:
    """A response declaring no tool calls is the answer: the harness scripts the answering turn
    alone, so the run ends with ``answer``, every scripted turn played. It used to script an
    empty tool-call turn the engine took as an empty answer, leaving ``answer`` unplayed and
    ``results_seen_by_model`` None, which broke the README's property."""
    empty = BatchSpec(())
    report = run_batch_sync(empty, tool_concurrency=2, answer="nothing to do")
    assert report.status == "completed"
    assert report.result is not None
    assert report.result.text == "nothing to do"
    assert len(report.requests) == 1
    assert report.results_seen_by_model == () == empty.ids
    assert report.settled_ids == report.prepared_ids == ()
    assert report.traces == ()
    assert_the_readme_property(empty, 1)


def test_an_empty_batch_whose_model_was_never_asked_saw_nothing() -> None:
    """As a run cancelled before its first request reports it (when that happens depends on
    Trio's scheduling order, so the report is made directly)."""
    report = run_batch_sync(BatchSpec(()), tool_concurrency=1)
    assert attrs.evolve(report, requests=()).results_seen_by_model is None


@given(batch=batches(min_size=0, max_size=2), permits=st.integers(1, 3))
def test_the_readme_property_holds_for_batches_that_may_be_empty(
    batch: BatchSpec, permits: int
) -> None:
    assert_the_readme_property(batch, permits)


# ---- the strategy's bounds ----------------------------------------------------------------------

#: What the type checker would refuse, as a user without one might write it.
_YES: Any = True
_HALF: Any = 1.5
_A_BEHAVIOUR: Any = "hang"
_A_RATIO: Any = "0.5"
_TOOLS: Any = list(PROBE_TOOLKIT)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"max_latency": math.inf}, "max_latency must be a finite number ≥ 0, got inf"),
        ({"max_latency": math.nan}, "max_latency must be a finite number ≥ 0, got nan"),
        ({"max_latency": -1}, "max_latency must be a finite number ≥ 0, got -1"),
        ({"latency_step": math.inf}, "latency_step must be a finite number > 0, got inf"),
        ({"latency_step": 0}, "latency_step must be a finite number > 0, got 0"),
        ({"latency_step": _YES}, "latency_step must be a finite number > 0, got True"),
        ({"invalid_ratio": math.nan}, "invalid_ratio must be between 0 and 1, got nan"),
        ({"invalid_ratio": _YES}, "invalid_ratio must be between 0 and 1, got True"),
        ({"min_size": _YES}, "min_size must be a whole number, got True"),
        ({"max_size": _HALF}, "max_size must be a whole number, got 1.5"),
        ({"min_size": -1}, "need 0 <= min_size <= max_size, got -1, 10"),
        ({"behaviours": _A_BEHAVIOUR}, "behaviours must be a sequence of behaviours, not a str"),
        ({"invalid_ratio": _A_RATIO}, "invalid_ratio must be between 0 and 1, got '0.5'"),
        ({"toolkit": _TOOLS}, "toolkit must be a Toolkit (Toolkit(*tools)) or None, got list"),
    ],
    ids=[
        "inf-max-latency",
        "nan-max-latency",
        "negative-max-latency",
        "inf-latency-step",
        "zero-latency-step",
        "bool-latency-step",
        "nan-invalid-ratio",
        "bool-invalid-ratio",
        "bool-min-size",
        "fractional-max-size",
        "negative-min-size",
        "str-behaviours",
        "str-invalid-ratio",
        "list-toolkit",
    ],
)
def test_batches_refuses_bounds_it_cannot_draw_from(options: dict[str, Any], message: str) -> None:
    """Each is hypothesis' InvalidArgument when the strategy is made: an infinite maximum latency
    used to be an OverflowError, an infinite step drew NaN latencies."""
    with pytest.raises(InvalidArgument, match=re.escape(message)):
        batches(**options)


@attrs.frozen
class Declared(TaggedError):
    why: str


@attrs.frozen
class Undeclared(TaggedError):
    why: str


@attrs.frozen
class Amount:
    cents: int


refund = Tool("refund", "Refund an amount.", parameters=Amount, failure=Declared, timeout=5.0)


def test_a_failure_the_tool_does_not_declare_is_refused_when_drawn() -> None:
    """A "declared-failure" call expects a failure, but the engine settles an error the tool
    does not declare as a defect: drawing one is hypothesis' InvalidArgument naming the tool,
    not an unexpected outcome blamed on the engine."""
    wrong = batches(
        Toolkit(refund),
        failures={"refund": st.just(Undeclared("no"))},
        behaviours=["declared-failure"],
        invalid_ratio=0.0,
    )
    with pytest.raises(InvalidArgument, match=r"'refund' drew Undeclared\(why='no'\), which"):
        find(wrong, lambda batch: True)
    right = batches(
        Toolkit(refund),
        failures={"refund": st.just(Declared("no"))},
        behaviours=["declared-failure"],
        invalid_ratio=0.0,
    )
    batch = find(right, lambda batch: True)
    report = run_batch_sync(batch, tool_concurrency=1, handlers={refund: _never})
    assert report.unexpected() == ()


@attrs.frozen
class Reading:
    celsius: float


thermometer = Tool("thermometer", "Log a reading.", parameters=Reading, timeout=5.0)


@given(batch=batches(Toolkit(thermometer), invalid_ratio=0.0))
def test_default_arguments_of_a_float_field_are_json_a_model_could_send(batch: BatchSpec) -> None:
    """``st.builds`` draws NaN and infinities for a float field: they used to escape as a
    ValueError ("cannot encode inf as JSON") while drawing, failing the user's property."""
    for call in batch.calls:
        thermometer.decode_arguments(call.arguments)
        assert "Infinity" not in call.arguments
        assert "NaN" not in call.arguments


def test_arguments_drawn_that_are_not_json_are_refused_naming_the_tool() -> None:
    drawn = batches(
        Toolkit(thermometer),
        arguments={"thermometer": st.just(Reading(math.inf))},
        invalid_ratio=0.0,
    )
    with pytest.raises(
        InvalidArgument, match=r"'thermometer' drew Reading\(celsius=inf\), which is"
    ):
        find(drawn, lambda batch: True)


@attrs.frozen
class TooCold(TaggedError):
    below_by: float


frost = Tool("frost", "Log a frost.", parameters=Reading, failure=TooCold, timeout=5.0)


def test_default_failures_of_a_float_field_hold_no_nan_or_infinity() -> None:
    """``st.builds`` drew ``TooCold(inf)``, which the engine cannot send the model as JSON and
    settles as a defect: ``unexpected()`` then blamed the engine for the strategy's draw."""
    drawn = batches(Toolkit(frost), behaviours=["declared-failure"], invalid_ratio=0.0)

    def not_json(batch: BatchSpec) -> bool:
        return any(
            isinstance(call.failure, TooCold) and not math.isfinite(call.failure.below_by)
            for call in batch.calls
        )

    with pytest.raises(NoSuchExample):
        find(drawn, not_json, settings=settings(max_examples=300, database=None, derandomize=True))
    batch = find(drawn, lambda batch: True)
    assert run_batch_sync(batch, tool_concurrency=2, handlers={frost: _never}).unexpected() == ()


def test_a_failure_drawn_that_is_not_json_is_refused_naming_the_tool() -> None:
    drawn = batches(
        Toolkit(frost),
        failures={"frost": st.just(TooCold(math.nan))},
        behaviours=["declared-failure"],
        invalid_ratio=0.0,
    )
    with pytest.raises(InvalidArgument, match=r"'frost' drew TooCold\(below_by=nan\), which is"):
        find(drawn, lambda batch: True)


async def _never(params: Amount, call: ToolCallContext) -> None:
    raise AssertionError("a declared-failure call never runs the real handler")


# ---- a call's and a run's figures ---------------------------------------------------------------

_A_WORD: Any = "no"
_AN_OBJECT: Any = {"text": "x"}
_AN_ERROR: Any = ValueError("not declared")


_LONE_CALL: Any = CallSpec("c", "probe_echo", "{}")


@pytest.mark.parametrize(
    ("make", "error", "message"),
    [
        (
            lambda: CallSpec("c", "probe_echo", "{}", latency=_YES),
            TypeError,
            "latency must be a number of seconds, got True",
        ),
        (
            lambda: CallSpec("c", "probe_echo", "{}", latency=-0.5),
            ValueError,
            "latency must be a finite number of seconds ≥ 0, got -0.5",
        ),
        (
            lambda: CallSpec("c", "probe_echo", "{}", valid=_A_WORD),
            TypeError,
            "CallSpec.valid must be a bool, got 'no'",
        ),
        (
            lambda: CallSpec("c", "probe_echo", _AN_OBJECT),
            TypeError,
            "CallSpec.arguments must be a str (the raw argument text), got {'text': 'x'}",
        ),
        (
            lambda: BatchSpec([_AN_OBJECT]),
            TypeError,
            "BatchSpec.calls[0] must be a CallSpec, got {'text': 'x'}",
        ),
        (
            lambda: BatchSpec(_LONE_CALL),
            TypeError,
            "BatchSpec.calls must be a sequence of CallSpec, not one CallSpec",
        ),
        (
            lambda: BatchSpec([ECHO], toolkit=_TOOLS),
            TypeError,
            "BatchSpec.toolkit must be a Toolkit (Toolkit(*tools)), got list",
        ),
        (
            lambda: CallSpec("c", "probe_echo", "{}", failure=_AN_ERROR),
            TypeError,
            "CallSpec.failure must be a declared error (a TaggedError instance) or None, got "
            "ValueError",
        ),
    ],
    ids=[
        "bool-latency",
        "negative-latency",
        "str-valid",
        "dict-arguments",
        "dict-call",
        "lone",
        "list-toolkit",
        "undeclared-failure",
    ],
)
def test_a_call_spec_refuses_figures_it_cannot_mean(
    make: Any, error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=re.escape(message)):
        make()


_CALLS: Any = [ECHO]


@pytest.mark.parametrize(
    ("batch", "options", "error", "message"),
    [
        (_CALLS, {}, TypeError, "run_batch needs a BatchSpec, got list (make one: BatchSpec(["),
        (
            BatchSpec([ECHO]),
            {"cancel_after_steps": _HALF},
            TypeError,
            "cancel_after_steps must be a whole number, got 1.5",
        ),
        (
            BatchSpec([ECHO]),
            {"cancel_after_steps": _YES},
            TypeError,
            "cancel_after_steps must be a whole number, got True",
        ),
        (
            BatchSpec([ECHO]),
            {"cancel_after_steps": 0},
            ValueError,
            "cancel_after_steps must be at least 1, got 0",
        ),
        (
            BatchSpec([ECHO]),
            {"model_part_delay": -1},
            ValueError,
            "model_part_delay must be a finite number of seconds ≥ 0, got -1",
        ),
        (
            BatchSpec([ECHO]),
            {"model_part_delay": math.nan},
            ValueError,
            "model_part_delay must be a finite number of seconds ≥ 0, got nan",
        ),
        (
            BatchSpec([ECHO]),
            {"cancel_at": -1},
            ValueError,
            "cancel_at must be a finite number of seconds ≥ 0, got -1",
        ),
        (
            BatchSpec([ECHO]),
            {"cancel_at": math.nan},
            ValueError,
            "cancel_at must be a finite number of seconds ≥ 0, got nan",
        ),
        (
            BatchSpec([ECHO]),
            {"answer": 5},
            TypeError,
            "answer must be a str, got 5",
        ),
    ],
    ids=[
        "list",
        "fractional-steps",
        "bool-steps",
        "zero-steps",
        "negative-part-delay",
        "nan-part-delay",
        "negative-cancel-at",
        "nan-cancel-at",
        "int-answer",
    ],
)
def test_run_batch_refuses_what_it_cannot_run(
    batch: Any, options: dict[str, Any], error: type[Exception], message: str
) -> None:
    """Each used to run (a fractional or True step count, a negative cancel time, a negative
    part delay failing the run with an EngineDefect) or fail deep inside (an AttributeError)."""
    with pytest.raises(error, match=re.escape(message)):
        run_batch_sync(batch, tool_concurrency=1, **options)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (
            CallSpec("call_1", "probe_echo", '{"text": 5}'),
            "call_1: marked valid, but its arguments do not decode for 'probe_echo'",
        ),
        (
            CallSpec("call_1", "probe_echo", '{"text": "hi"}', valid=False),
            "call_1: marked invalid, but its arguments decode for 'probe_echo'",
        ),
    ],
    ids=["undecodable-marked-valid", "decodable-marked-invalid"],
)
def test_a_hand_made_call_whose_validity_is_wrong_is_refused(call: CallSpec, message: str) -> None:
    """A drawn spec's ``valid`` is checked with the tool's decoder; a hand-made one is checked
    by ``run_batch``, or its expected outcome would blame the engine for the spec's mistake."""
    with pytest.raises(ValueError, match=re.escape(message)):
        run_batch_sync(BatchSpec([call]), tool_concurrency=1)
    not_json = CallSpec("call_2", "probe_echo", "{", valid=False)
    assert run_batch_sync(BatchSpec([not_json]), tool_concurrency=1).unexpected() == ()


@attrs.frozen
class _Other(TaggedError):
    reason: str


def test_a_hand_made_call_failing_with_an_undeclared_error_is_refused() -> None:
    """The engine settles an error the tool does not declare as a defect: a hand-made
    ``"declared-failure"`` spec raising one used to run and blame the engine in ``unexpected()``."""
    call = CallSpec("call_1", "probe_echo", '{"text": "hi"}', behaviour="declared-failure")
    undeclared = attrs.evolve(call, failure=_Other("no"))
    with pytest.raises(ValueError, match=r"call_1: its failure _Other is not an error tool "):
        run_batch_sync(BatchSpec([undeclared]), tool_concurrency=1)
    assert run_batch_sync(BatchSpec([call]), tool_concurrency=1).unexpected() == ()


def test_a_handler_the_engine_would_refuse_is_refused_before_the_run() -> None:
    """A sync handler (or one of the wrong arity) used to be taken and every "success" call
    settled as a defect; ``Toolkit.handlers`` refuses it, and so does ``run_batch``."""
    tool = PROBE_TOOLKIT.get("probe_echo")
    assert tool is not None

    def sync_handler(params: Any, call: ToolCallContext) -> None:
        return None

    async def one_argument(params: Any) -> None:
        return None

    for handler in (sync_handler, one_argument):
        mapping: Any = {tool: handler}  # what mypy would catch, checked at run time too
        with pytest.raises(TypeError, match=r"^handlers= gives a handler the engine refuses: "):
            run_batch_sync(BatchSpec([ECHO]), tool_concurrency=1, handlers=mapping)


def test_without_hypothesis_a_strategy_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Used to be a bare ``No module named 'hypothesis'`` from deep inside; the harness itself
    still runs without it."""
    monkeypatch.setitem(sys.modules, "hypothesis", None)  # as if it were not installed
    for make, name in ((batches, "batches()"), (fault_plans, "fault_plans()")):
        with pytest.raises(ModuleNotFoundError, match=re.escape(f"{name} needs hypothesis")) as e:
            make()
        assert e.value.name == "hypothesis"
        assert "pip install hypothesis" in str(e.value)
    assert run_batch_sync(BatchSpec([ECHO]), tool_concurrency=1).unexpected() == ()


# ---- a broken engine is caught --------------------------------------------------------------------


def test_a_handler_the_run_leaves_running_is_counted_before_the_runtime_ends_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A deliberately broken engine runs each call a second time in a task of the runtime's
    that nobody waits for: when the run ends, that handler is still running. Closing the runtime
    cancels it, so ``live_handlers`` must be read before — it used to say 0."""
    leaks: list[trio.Nursery] = []

    @asynccontextmanager
    async def runtime_tasks(context: Context) -> AsyncIterator[trio.Nursery]:
        async with trio.open_nursery() as nursery:
            leaks.append(nursery)
            yield nursery
            nursery.cancel_scope.cancel()

    correct = _call.CallRunner.run

    async def leaking(self: _call.CallRunner, call: Any) -> Any:
        async def again_later() -> None:
            await trio.sleep(1.0)
            await correct(self, call)

        leaks[-1].start_soon(again_later)
        return await correct(self, call)

    monkeypatch.setattr(_call.CallRunner, "run", leaking)
    echo = CallSpec("call_1", "probe_echo", '{"text": "hi"}', latency=5.0)
    services = Layer.scoped(ServiceKey[trio.Nursery]("leaky"), runtime_tasks)
    report = run_batch_sync(BatchSpec([echo]), tool_concurrency=2, services=services)
    assert report.status == "completed"
    assert [(t.started_at, t.ending) for t in report.traces] == [
        (0.0, "returned"),
        (1.0, "cancelled"),
    ]
    assert report.live_handlers == 1
