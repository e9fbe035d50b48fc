"""What a handler produces crosses its schema as strictly as the model's arguments do, and nothing
the engine writes is anything but JSON.

* A result that is the declared class but breaks its schema somewhere inside (a wrong scalar, a
  value outside a Literal, a wrong nested class, NaN, a broken ``field_meta`` bound) settles as
  ``ToolDefect`` "result violates its schema ..." naming the path — in the event, the
  ``ToolCallSettled`` record and the next model request — never as a ``ToolSuccess`` and never as
  "the tool crashed". A declared failure whose fields do not encode is "failure violates its
  schema ...".
* Strict JSON: NaN and ±Infinity are refused wherever they enter — argument text
  (``ToolInvalidInput``; the preview keeps the text as a string), results and failures
  (``ToolDefect``), progress (the handler's ``progress`` call raises) — so no event, record or
  model request ever holds one.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any, Literal

import attrs
import pytest
import trio
import trio.testing

from effectagent.ai import Tool, ToolCallContext
from effectagent.core import (
    ToolCallSettled,
    ToolDefect,
    ToolInvalidInput,
    ToolResultBounds,
    ToolSuccess,
    bounded_json,
    compact_json,
)
from effectagent.core._bounds import bounded_json_and_size
from effectagent.core._records import parse_arguments
from effectagent.effect import TaggedError, field_meta
from effectagent.testing import Turn

from .helpers import (
    Forecast,
    Lookup,
    Ran,
    forecast_tool,
    make_agent,
    records_of,
    results_by_id,
    run_script,
)

# --- helpers ------------------------------------------------------------------------------------


def _walk(value: Any) -> Iterator[Any]:
    """Every value inside ``value``: attrs fields, dict keys and values, sequence items."""
    stack = [value]
    seen: set[int] = set()
    while stack:
        item = stack.pop()
        if id(item) in seen:
            continue
        seen.add(id(item))
        yield item
        if attrs.has(type(item)) and not isinstance(item, BaseException):
            stack.extend(getattr(item, f.name) for f in attrs.fields(type(item)))
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list | tuple | set | frozenset):
            stack.extend(item)


def _non_json_floats(ran: Ran) -> list[Any]:
    """NaN or infinities anywhere in the run's events, log and model requests."""
    found = []
    for source in (ran.events, ran.log, ran.model.requests):
        found += [v for v in _walk(source) if isinstance(v, float) and not math.isfinite(v)]
    return found


def _settled_events(ran: Ran, call_id: str) -> list[Any]:
    """The events announcing the outcome of ``call_id`` (whatever their class is called)."""
    return [
        event
        for event in ran.events
        if getattr(getattr(event, "outcome", None), "tool_call_id", None) == call_id
    ]


def _defect_everywhere(ran: Ran, call_id: str) -> str:
    """The defect message of ``call_id``: the same in the record, every event and the next model
    request."""
    outcome = ran.outcome(call_id)
    assert isinstance(outcome, ToolDefect), outcome
    events = _settled_events(ran, call_id)
    assert events
    assert all(event.outcome == outcome for event in events)
    shown = results_by_id(ran.model.requests[1])[call_id]
    assert shown.is_failure
    assert shown.result == {"_tag": "ToolDefect", "message": outcome.message}
    assert "crashed" not in outcome.message
    return outcome.message


# --- item 1: results are checked all the way down ------------------------------------------------


@attrs.frozen
class Place:
    city: str
    country: Literal["NO", "IT"] = "NO"


@attrs.frozen
class Report:
    count: int = attrs.field(metadata=field_meta(ge=0))
    items: list[int] = attrs.field(factory=list)
    place: Place = Place("Oslo")
    scores: dict[str, float] = attrs.field(factory=dict)


def _report_tool() -> Tool[Lookup, Report]:
    return Tool("report", "A report for a city.", parameters=Lookup, success=Report)


@pytest.mark.parametrize(
    ("result", "path", "message"),
    [
        (Report(1, items=[1, "2"]), "$.items[1]", "expected an integer, got '2'"),  # type: ignore[list-item]
        (Report(1, place=Place("Oslo", "SE")), "$.place.country", "expected one of 'NO', 'IT'"),  # type: ignore[arg-type]
        (Report(1, place=Lookup("Oslo")), "$.place", "expected a Place, got a Lookup"),  # type: ignore[arg-type]
        (Report("3"), "$.count", "expected an integer, got '3'"),  # type: ignore[arg-type]
        (Report(True), "$.count", "expected an integer, got true"),
        (Report(1, scores={"a": math.nan}), '$.scores["a"]', "expected a finite number, got nan"),
        (Report(-1), "$.count", "must be >= 0, got -1"),
    ],
)
async def test_a_result_broken_inside_is_a_defect_naming_the_path(
    autojump_clock: trio.testing.MockClock, result: Report, path: str, message: str
) -> None:
    tool = _report_tool()

    async def handle(params: Lookup, call: ToolCallContext) -> Report:
        return result

    ran = await run_script(
        make_agent(tool),
        {tool: handle},
        [Turn.tool_calls(("report", {"city": "Oslo"})), Turn.text("Hm.")],
    )
    shown = _defect_everywhere(ran, "call_0")
    assert shown.startswith("result violates its schema: ")
    assert f"{path}: {message}" in shown
    assert records_of(ran.log, ToolCallSettled)[0].outcome == ran.outcome("call_0")


async def test_every_problem_of_a_result_is_named(autojump_clock: trio.testing.MockClock) -> None:
    tool = forecast_tool()

    async def handle(params: Lookup, call: ToolCallContext) -> Forecast:
        return Forecast(3, math.inf)  # type: ignore[arg-type]

    ran = await run_script(
        make_agent(tool),
        {tool: handle},
        [Turn.tool_calls(("forecast", {"city": "Oslo"})), Turn.text("Hm.")],
    )
    shown = _defect_everywhere(ran, "call_0")
    assert shown.startswith("result violates its schema (2 issues):\n")
    assert "$.city: expected a string, got 3" in shown
    assert "$.high_c: expected a finite number, got inf" in shown


async def test_a_conforming_result_still_succeeds(autojump_clock: trio.testing.MockClock) -> None:
    tool = _report_tool()

    async def handle(params: Lookup, call: ToolCallContext) -> Report:
        return Report(2, items=(1, 2), scores={"a": 1})  # type: ignore[arg-type]  # tuple, int

    ran = await run_script(
        make_agent(tool),
        {tool: handle},
        [Turn.tool_calls(("report", {"city": "Oslo"})), Turn.text("Fine.")],
    )
    outcome = ran.outcome("call_0")
    assert isinstance(outcome, ToolSuccess)
    assert outcome.result == {
        "count": 2,
        "items": [1, 2],
        "place": {"city": "Oslo", "country": "NO"},
        "scores": {"a": 1},
    }


@attrs.frozen
class OutOfRange(TaggedError):
    reading: float


@attrs.frozen
class Opaque(TaggedError):
    detail: Any


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (OutOfRange(math.nan), "$.reading: expected a finite number, got nan"),
        (Opaque(object()), "$.detail: not a JSON value: an object"),
    ],
)
async def test_a_declared_failure_that_does_not_encode_is_a_defect_not_a_crash(
    autojump_clock: trio.testing.MockClock, error: TaggedError, expected: str
) -> None:
    tool = forecast_tool(failure=(OutOfRange, Opaque))

    async def handle(params: Lookup, call: ToolCallContext) -> Forecast:
        raise error

    ran = await run_script(
        make_agent(tool),
        {tool: handle},
        [Turn.tool_calls(("forecast", {"city": "Oslo"})), Turn.text("Hm.")],
    )
    shown = _defect_everywhere(ran, "call_0")
    assert shown.startswith("failure violates its schema: ")
    assert expected in shown
    assert _non_json_floats(ran) == []


# --- item 5: strict JSON ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "NaN",
        "Infinity",
        "-Infinity",
        '{"city": NaN}',
        "[1, Infinity]",
        '{"a": {"b": [-Infinity]}}',
        "1e400",  # valid JSON syntax, but beyond a float: json.loads makes it infinity
        '{"a": [-1E+999]}',
    ],
)
def test_argument_text_holding_nan_or_infinity_stays_text(text: str) -> None:
    assert parse_arguments(text) == text


def test_compact_json_and_bounding_refuse_nan_and_infinity() -> None:
    bounds = ToolResultBounds(max_bytes=256)
    for bad in (math.nan, math.inf, -math.inf):
        for value in (bad, [bad], {"a": [1.0, bad]}):
            with pytest.raises(ValueError, match="JSON"):
                compact_json(value)
            with pytest.raises(ValueError, match="JSON"):
                bounded_json_and_size(value, bounds)
            with pytest.raises(ValueError, match="JSON"):
                bounded_json(value, bounds)
    assert bounded_json({"a": [1.5, -0.0]}, bounds) == {"a": [1.5, -0.0]}
    assert compact_json({"a": 1e308}) == '{"a":1e+308}'


async def test_nan_in_argument_text_is_invalid_input_and_written_nowhere(
    autojump_clock: trio.testing.MockClock,
) -> None:
    tool = forecast_tool()
    dynamic = Tool.dynamic("lookup", "Looks anything up.", {"type": "object"})
    called: list[Any] = []

    async def handle(params: Any, call: ToolCallContext) -> Any:
        called.append(params)
        return Forecast("Oslo", 4.0)

    ran = await run_script(
        make_agent(tool, dynamic),
        {tool: handle, dynamic: handle},
        [
            Turn.tool_calls(
                ("forecast", '{"city": NaN}'),
                ("lookup", '{"limit": Infinity}'),
                ("lookup", "-Infinity"),
                ("lookup", '{"limit": 1e999}'),
            ),
            Turn.text("Hm."),
        ],
    )
    assert called == []
    for call_id in ("call_0", "call_1", "call_2", "call_3"):
        outcome = ran.outcome(call_id)
        assert isinstance(outcome, ToolInvalidInput), outcome
        assert "invalid JSON" in outcome.message
    assert _non_json_floats(ran) == []
    previews = [getattr(e, "arguments", None) for e in ran.events if hasattr(e, "arguments")]
    assert '{"city": NaN}' in previews  # the text itself is the preview


async def test_nan_from_a_handler_is_written_nowhere(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Every way a handler can hand the engine a NaN: a result (static and undeclared success
    types), a declared failure, a progress report (refused at the ``progress`` call)."""
    static = forecast_tool(failure=OutOfRange)
    undeclared: Tool[Any, Any] = Tool("raw", "Anything.")
    refused: list[str] = []

    async def handle(params: Lookup, call: ToolCallContext) -> Any:
        try:
            await call.progress({"done": math.nan})
        except ValueError as exc:
            refused.append(str(exc))
        if params.city == "fail":
            raise OutOfRange(math.inf)
        return Forecast(params.city, math.nan)

    async def handle_raw(params: Any, call: ToolCallContext) -> Any:
        return {"values": [1.0, -math.inf]}

    ran = await run_script(
        make_agent(static, undeclared),
        {static: handle, undeclared: handle_raw},
        [
            Turn.tool_calls(
                ("forecast", {"city": "Oslo"}), ("forecast", {"city": "fail"}), ("raw", {})
            ),
            Turn.text("Hm."),
        ],
    )
    assert len(refused) == 2
    assert _defect_everywhere(ran, "call_0").startswith("result violates its schema: ")
    assert _defect_everywhere(ran, "call_1").startswith("failure violates its schema: ")
    assert '$["values"][1]: not a JSON value: -inf' in _defect_everywhere(ran, "call_2")
    assert _non_json_floats(ran) == []
