"""Redaction and bounds: a registered secret never appears in any event, record or model request,
wherever it enters (tool results, errors, defects, model text, arguments, user input, progress)
— yet handlers get the real value; oversized results become a truncation marker within the bound
(RUN-022), for every JSON value (property)."""

from __future__ import annotations

import json
from typing import Any

import attrs
import pytest
import trio
import trio.testing
from hypothesis import example, given
from hypothesis import strategies as st

from effectagent.ai import ProviderError, Tool, ToolCallContext
from effectagent.core import (
    REDACTED,
    ContextAdded,
    ContextItem,
    PreparedContext,
    RunCompleted,
    RunFailed,
    TextDelta,
    ToolCallSettled,
    ToolProgress,
    ToolResultBounds,
    ToolSuccess,
    TurnContext,
    compact_json,
)
from effectagent.core._bounds import (
    PARSED_BYTES_PER_CHAR,
    _worst_case_size,
    bounded_json,
    bounded_json_and_size,
    bounded_parsed,
)
from effectagent.core._records import parse_arguments
from effectagent.engine import open_runtime
from effectagent.testing import Turn

from .helpers import (
    Forecast,
    HandlerProbe,
    Lookup,
    Ran,
    TrackingModel,
    UnknownCity,
    entries,
    events_of,
    forecast_tool,
    make_agent,
    make_policy,
    records_of,
    results_by_id,
    run_events,
    run_script,
)

CANARY = "CANARY-7f3a9c1e-do-not-leak"


def _assert_no_canary(ran: Ran) -> None:
    for event in ran.events:
        assert CANARY not in repr(event), event
    for entry in ran.log:
        assert CANARY not in repr(entry), entry
    for request in ran.model.requests:
        assert CANARY not in repr(request), request


async def test_a_secret_never_leaks_from_any_source(autojump_clock: trio.testing.MockClock) -> None:
    probe = HandlerProbe()
    leaky, failing, crashing = forecast_tool("leaky"), forecast_tool(), forecast_tool("crashing")

    async def leak(params: Lookup, call: ToolCallContext) -> Forecast:
        await call.progress({"status": f"using {CANARY}"})
        return Forecast(f"{params.city} via {CANARY}", 1.0)

    async def fail(params: Lookup, call: ToolCallContext) -> Forecast:
        raise UnknownCity(f"{CANARY}:{params.city}")

    async def crash(params: Lookup, call: ToolCallContext) -> Forecast:
        raise RuntimeError(f"connection string postgres://u:{CANARY}@db")

    ran = await run_script(
        make_agent(leaky, failing, crashing),
        {leaky: probe.wrap(leak), failing: probe.wrap(fail), crashing: probe.wrap(crash)},
        [
            Turn.tool_calls(
                ("leaky", {"city": f"Oslo {CANARY}"}),
                ("forecast", {"city": "Atlantis"}),
                ("crashing", {"city": "Rome"}),
                ("forecast", {"town": CANARY}),
                text=f"Calling tools with {CANARY}",
            ),
            Turn.text(f"The answer mentions {CANARY} once.", chunk=200, reasoning=f"r {CANARY}"),
        ],
        secrets=[CANARY],
        text=f"My key is {CANARY}; what is the weather?",
    )
    assert isinstance(ran.terminal, RunCompleted)
    _assert_no_canary(ran)
    # The handler still saw the real argument.
    assert ("leaky", Lookup(f"Oslo {CANARY}")) in probe.calls
    # The redacted values are still there, marked.
    assert ran.outcome("call_0") == ToolSuccess(
        "call_0", "leaky", {"city": f"Oslo {REDACTED} via {REDACTED}", "high_c": 1.0}
    )
    assert REDACTED in repr(ran.outcome("call_1"))
    assert REDACTED in repr(ran.outcome("call_2"))
    (progress,) = events_of(ran.events, ToolProgress)
    assert progress.data == {"status": f"using {REDACTED}"}
    terminal = ran.terminal
    assert isinstance(terminal, RunCompleted)
    assert terminal.text == f"The answer mentions {REDACTED} once."


async def test_a_secret_in_a_model_error_never_leaks(
    autojump_clock: trio.testing.MockClock,
) -> None:
    ran = await run_script(
        make_agent(),
        {},
        [Turn.fail(ProviderError(f"upstream said {CANARY}", status=500))],
        secrets=[CANARY],
    )
    assert isinstance(ran.terminal, RunFailed)
    _assert_no_canary(ran)


async def test_a_secret_split_across_streamed_deltas_never_leaks(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A consumer that renders the streamed text must never show the secret either."""
    ran = await run_script(
        make_agent(), {}, [Turn.text(f"Here: {CANARY} and done.", chunk=5)], secrets=[CANARY]
    )
    streamed = "".join(e.text for e in events_of(ran.events, TextDelta))
    assert CANARY not in streamed
    _assert_no_canary(ran)


@attrs.frozen
class Answer:
    city: str
    note: str


async def test_a_secret_in_a_structured_answer_never_leaks(
    autojump_clock: trio.testing.MockClock,
) -> None:
    answer = json.dumps({"city": "Oslo", "note": f"token {CANARY}"})
    ran = await run_script(make_agent(output=Answer), {}, [Turn.text(answer)], secrets=[CANARY])
    assert isinstance(ran.terminal, RunCompleted)
    _assert_no_canary(ran)


def _escaped(text: str) -> str:
    """``text`` with every ``C`` written as the JSON escape ``\\u0043``: the same JSON value."""
    return text.replace("C", "\\u0043")


@pytest.mark.parametrize("fenced", [False, True])
async def test_a_secret_spelled_with_json_escapes_in_a_structured_answer_never_leaks(
    autojump_clock: trio.testing.MockClock, fenced: bool
) -> None:
    # The answer's text holds no secret as written; its decoded value does: the output, the
    # RunCompleted event and the RunCompletedRecord are redacted as the decoded JSON.
    answer = _escaped(json.dumps({"city": "Oslo", "note": f"token {CANARY}"}))
    assert CANARY not in answer
    assert json.loads(answer)["note"] == f"token {CANARY}"
    if fenced:
        answer = f"```json\n{answer}\n```"
    ran = await run_script(make_agent(output=Answer), {}, [Turn.text(answer)], secrets=[CANARY])
    assert isinstance(ran.terminal, RunCompleted)
    assert ran.terminal.output == Answer("Oslo", f"token {REDACTED}")
    _assert_no_canary(ran)


def _item_naming(secret: str) -> ContextItem:
    return ContextItem(
        kind=f"memory {secret}",
        source=f"notes {secret}",
        text=f"remember {secret}",
        version=f"v1 {secret}",
        digest="sha256:ab",
    )


async def test_a_secret_in_any_field_of_a_context_item_never_leaks(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # Items given to the run and added by its prepare_context hook: their kind and version were
    # recorded as given (only source and text were redacted).
    async def recall(context: TurnContext[str]) -> PreparedContext:
        return PreparedContext(items=[_item_naming(CANARY)])

    agent = make_agent(prepare_context=recall)
    model = TrackingModel([Turn.text("Noted.")])
    async with open_runtime(model.layer(), agents=[agent], secrets=[CANARY]) as runtime:
        events = await run_events(runtime, agent, "Hi.", context=[_item_naming(CANARY)])
        log = await entries(runtime, events[0].conversation_id)
    _assert_no_canary(Ran(events, log, model))
    added = [entry.record.item for entry in log if isinstance(entry.record, ContextAdded)]
    assert len(added) == 2
    for item in added:
        assert (item.kind, item.source, item.version) == (
            f"memory {REDACTED}",
            f"notes {REDACTED}",
            f"v1 {REDACTED}",
        )
        assert item.digest == "sha256:ab"


# ---- RUN-022 -----------------------------------------------------------------------------------


@attrs.frozen
class Blob:
    name: str
    data: str


def _blob_tool() -> Tool[Lookup, Blob]:
    return Tool("dump", "Dump a big blob.", parameters=Lookup, success=Blob)


@pytest.mark.parametrize(
    "bounds",
    [ToolResultBounds(), ToolResultBounds(max_bytes=1024, head_bytes=100, tail_bytes=50)],
    ids=["default", "custom"],
)
async def test_an_oversized_result_becomes_a_truncation_marker(
    autojump_clock: trio.testing.MockClock, bounds: ToolResultBounds
) -> None:
    tool = _blob_tool()
    data = "HEAD" + "x" * (200 * 1024) + "TAIL"

    async def dump(params: Lookup, call: ToolCallContext) -> Blob:
        await trio.lowlevel.checkpoint()
        return Blob(params.city, data)

    ran = await run_script(
        make_agent(tool, policy=make_policy(tool_result_bounds=bounds)),
        {tool: dump},
        [Turn.tool_calls(("dump", {"city": "Oslo"})), Turn.text("Big.")],
    )
    outcome = ran.outcome("call_0")
    assert isinstance(outcome, ToolSuccess)
    marker = outcome.result
    original = compact_json({"name": "Oslo", "data": data})
    assert marker["_tag"] == "Truncated"
    assert marker["original_bytes"] == len(original.encode()) > 200 * 1024
    assert original.startswith(marker["head"])
    assert original.endswith(marker["tail"])
    assert marker["head"].startswith('{"name":"Oslo","data":"HEAD')
    assert marker["tail"].endswith('TAIL"}')
    assert len(compact_json(marker).encode()) <= bounds.max_bytes
    if bounds.head_bytes is not None:
        assert len(marker["head"]) == bounds.head_bytes
        assert len(marker["tail"]) == bounds.tail_bytes
    # What the model sees and what is recorded is the marker, never the blob.
    assert results_by_id(ran.model.requests[1])["call_0"].result == marker
    for settled in records_of(ran.log, ToolCallSettled):
        assert len(repr(settled)) < bounds.max_bytes + 1024


async def test_an_oversized_declared_failure_is_bounded(
    autojump_clock: trio.testing.MockClock,
) -> None:
    tool = forecast_tool()

    async def fail(params: Lookup, call: ToolCallContext) -> Forecast:
        raise UnknownCity("Z" * 100_000)

    bounds = ToolResultBounds(max_bytes=512)
    ran = await run_script(
        make_agent(tool, policy=make_policy(tool_result_bounds=bounds)),
        {tool: fail},
        [Turn.tool_calls(("forecast", {"city": "Oslo"})), Turn.text("Hm.")],
    )
    failure = ran.outcome("call_0")
    assert failure.kind == "failure"
    assert len(compact_json(failure.model_content()).encode()) <= 512


def test_a_small_result_is_left_alone() -> None:
    value = {"city": "Oslo", "high_c": 4.0, "tags": ["a", "b"]}
    out, truncated, size = bounded_json_and_size(value, ToolResultBounds(max_bytes=256))
    assert out == value
    assert not truncated
    assert size == len(compact_json(value).encode())


_json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=600)
    # Characters whose compact JSON is much longer than the character itself.
    | st.text(alphabet='\x00\x1f"\\\n\té€😀a', max_size=600)
)
_json_values = st.recursive(
    _json_scalars,
    lambda children: (
        st.lists(children, max_size=8) | st.dictionaries(st.text(max_size=20), children, max_size=8)
    ),
    max_leaves=40,
)


@example(value="\x00" * 64, max_bytes=256, head=None, tail=None)
@example(value=['"' * 300], max_bytes=256, head=0, tail=None)
@given(
    value=_json_values,
    max_bytes=st.integers(min_value=256, max_value=4096),
    head=st.none() | st.integers(min_value=0, max_value=5000),
    tail=st.none() | st.integers(min_value=0, max_value=5000),
)
def test_bounded_json_always_fits_the_bound(
    value: Any, max_bytes: int, head: int | None, tail: int | None
) -> None:
    bounds = ToolResultBounds(max_bytes=max_bytes, head_bytes=head, tail_bytes=tail)
    out, truncated, _ = bounded_json_and_size(value, bounds)
    assert len(compact_json(out).encode("utf-8")) <= max_bytes
    if truncated:
        assert out["_tag"] == "Truncated"
        assert out["original_bytes"] == len(compact_json(value).encode("utf-8"))
    else:
        assert out == value


@example(value={"n": 1, "tags": ["a", "\x00" * 40]}, max_bytes=256)
@example(value=[1.5e-300, -(10**19), None, True], max_bytes=256)
@given(value=_json_values, max_bytes=st.integers(min_value=256, max_value=4096))
def test_the_fast_bound_agrees_with_the_measuring_one(value: Any, max_bytes: int) -> None:
    # The engine's hot path skips encoding a value whose worst-case size fits: same result.
    bounds = ToolResultBounds(max_bytes=max_bytes)
    assert bounded_json(value, bounds) == bounded_json_and_size(value, bounds)[0]
    assert _worst_case_size(value, 10**9) >= len(compact_json(value).encode("utf-8")) or (
        _worst_case_size(value, 10**9) > 10**9
    )


@example(text="1e15")  # the worst number: 1000000000000000.0, 4.5 bytes a character
@example(text='"\\u0000"')
@example(text='"\\ud800"')  # a lone surrogate: three bytes, as written with surrogatepass
@example(text="\x00\x01")  # not JSON at all: kept as a string, escaped
@example(text="NaN")  # not JSON either (json.loads would give a float nan, unequal to itself)
@example(text="[1, -Infinity]")
@example(text="1e400")  # valid JSON syntax, but json.loads makes it infinity
@given(
    text=st.one_of(
        st.builds(
            json.dumps,
            _json_values,
            ensure_ascii=st.booleans(),
            indent=st.none() | st.integers(0, 2),
        ),
        st.text(max_size=40),
    )
)
def test_what_is_parsed_from_text_takes_at_most_six_bytes_a_character(text: str) -> None:
    """The bound the preview's short cut relies on (``bounded_parsed``): whatever parsing
    ``text`` gives re-encodes to at most PARSED_BYTES_PER_CHAR bytes a character, plus 2."""
    value = parse_arguments(text)
    size = len(compact_json(value).encode("utf-8", "surrogatepass"))
    assert size <= PARSED_BYTES_PER_CHAR * len(text) + 2
    bounds = ToolResultBounds(max_bytes=256)
    assert bounded_parsed(value, text, bounds) == bounded_json_and_size(value, bounds)[0]
